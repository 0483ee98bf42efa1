"""Export funnel's built-in reranker (the shipped int8 ONNX) as a Hugging Face checkpoint, without torch.

    python tools/export_reranker_checkpoint.py OUT_DIR [--model-dir DIR]

OUT_DIR receives what `transformers` / a sentence-transformers `CrossEncoder(OUT_DIR)` loads offline:
config.json (BertForSequenceClassification, num_labels 1), model.safetensors (float32), tokenizer.json,
tokenizer_config.json, special_tokens_map.json, vocab.txt, and export_info.json (where it came from).

**These are the shipped int8 weights dequantized to float32**, not the float32 weights the model was
trained with (those exist only in the cache a local `make reranker` leaves behind): every quantized
initializer is turned back into floats exactly as onnxruntime's kernels use it, w = (q - zero_point) * scale
(per output channel for the QInt8 MatMul weights, one scale for the uint8 embedding tables quantised with
their Gather), and the float32 initializers (biases, LayerNorms, position embeddings, the pooler and the
classifier, which the build keeps unquantised) are copied. A torch model built from this checkpoint
therefore runs exactly the weights funnel runs; what still differs is only that onnxruntime quantises
activations to 8 bits at run time (dynamic quantisation), so logits agree closely but not bit for bit.

Graph -> state dict (see `funnel.onnx.build`, which wrote the graph):

- `word_embeddings`, `token_type_embeddings`, `position_embeddings`, `embeddings.LayerNorm.*` ->
  `bert.embeddings.*` (the cross-encoder graph feeds token types, so position embeddings are not folded)
- `encoder.layer.N.<...>.weight_t` ([in, out], MatMul) -> `bert.encoder.layer.N.<...>.weight` ([out, in],
  torch Linear), `.bias` and LayerNorms copied; the builder folded 1/sqrt(head_dim) into the query
  projection (weight and bias), which is multiplied back out here
- `pooler.dense.*` -> `bert.pooler.dense.*`, `classifier.*` -> `classifier.*` (weights transposed)

Needs only numpy and onnx (both in funnel's default install): safetensors is written by hand (an 8-byte
little-endian header length, a JSON header, the raw little-endian tensor bytes).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import struct
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MODEL_DIR = ROOT / "src" / "funnel" / "rerank" / "models" / "funnel-reranker-minilm"
EXPORT_VERSION = 1  # bump when the output changes: callers cache exports by it
INFO_FILE = "export_info.json"
SPECIAL_TOKENS = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
                  "mask_token": "[MASK]"}
# Graph constants that are not model parameters (shapes, axes, GELU/mask scalars, the [CLS] index).
_NOT_PARAMETERS = re.compile(
    r"^(emb\.(zero|axis0)|mask\..*|pooler\.cls_index"
    r"|encoder\.layer\.\d+\.attention\.(split|merge)|encoder\.layer\.\d+\.gelu\..*)$"
)
ADDED_TOKEN_KEYS = ("content", "lstrip", "normalized", "rstrip", "single_word", "special")
_QUANT_SUFFIXES = ("_quantized", "_scale", "_zero_point")


class ExportError(Exception):
    pass


# --------------------------------------------------------------------------------------------------
# Reading the graph


def _channel_axis(graph: onnx.GraphProto, base: str, q: np.ndarray, scale: np.ndarray) -> int | None:
    """The axis `scale` runs along (None: one scale for the whole tensor), read from how the graph uses it.

    quantize_dynamic writes a MatMul weight as MatMulInteger(x_q, W_q) whose int32 output is multiplied by
    x_scale * W_scale, broadcast over the output's last axis, i.e. over W's columns (axis 1 of [in, out]);
    a quantised Gather table is dequantised by DequantizeLinear (its `axis` attribute, per-tensor here).
    """
    if scale.ndim == 0 or scale.size == 1:
        return None
    if scale.ndim != 1:
        raise ExportError(f"{base}: scale of shape {scale.shape} is not per-tensor or per-channel")
    name = base + "_scale"
    consumers = [n for n in graph.node if name in n.input]
    for node in consumers:
        if node.op_type == "DequantizeLinear":
            axis = next((onnx.helper.get_attribute_value(a) for a in node.attribute if a.name == "axis"), 1)
            axis = axis % q.ndim
        elif node.op_type == "Mul" and q.ndim == 2:
            # the scales product (x_scale * W_scale) multiplies MatMulInteger's [..., out] result
            matmuls = [n for n in graph.node
                       if n.op_type == "MatMulInteger" and base + "_quantized" in n.input]
            if not matmuls or matmuls[0].input[1] != base + "_quantized":
                raise ExportError(f"{base}: a per-channel scale that is not a MatMulInteger weight's")
            axis = 1
        else:
            raise ExportError(f"{base}: its scale feeds a {node.op_type}; do not know its channel axis")
        if q.shape[axis] != scale.shape[0]:
            raise ExportError(f"{base}: {scale.shape[0]} scales for axis {axis} of a {q.shape} tensor")
        return axis
    raise ExportError(f"{base}: its scale is not used by the graph")


def dequantize(q: np.ndarray, scale: np.ndarray, zero_point: np.ndarray, axis: int | None) -> np.ndarray:
    """(q - zero_point) * scale in float32, as onnxruntime's DequantizeLinear computes it."""
    shape = [1] * q.ndim
    if axis is not None:
        shape[axis] = -1
    centred = q.astype(np.int32) - zero_point.astype(np.int32).reshape(shape)
    return (centred.astype(np.float32) * scale.astype(np.float32).reshape(shape)).astype(np.float32)


def graph_weights(model: onnx.ModelProto) -> tuple[dict[str, np.ndarray], dict[str, dict]]:
    """Every float32 parameter of the graph by its initializer name (quantised ones dequantized, under
    their base name), plus how each quantised one was stored."""
    graph = model.graph
    raw = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    weights: dict[str, np.ndarray] = {}
    quantized: dict[str, dict] = {}
    for name, q in raw.items():
        if not name.endswith("_quantized"):
            continue
        base = name[: -len("_quantized")]
        scale, zero_point = raw.get(base + "_scale"), raw.get(base + "_zero_point")
        if scale is None or zero_point is None:
            raise ExportError(f"{name}: no {base}_scale / {base}_zero_point beside it")
        axis = _channel_axis(graph, base, q, scale)
        weights[base] = dequantize(q, scale, zero_point, axis)
        quantized[base] = {"dtype": str(q.dtype), "axis": axis, "shape": list(q.shape)}
    parts = {base + suffix for base in quantized for suffix in _QUANT_SUFFIXES}
    for name, value in raw.items():
        if name in parts or _NOT_PARAMETERS.match(name):
            continue
        if value.dtype != np.float32:
            raise ExportError(f"unexpected {value.dtype} initializer {name}")
        weights[name] = value
    return weights, quantized


def _const(model: onnx.ModelProto, name: str) -> np.ndarray:
    for t in model.graph.initializer:
        if t.name == name:
            return numpy_helper.to_array(t)
    raise ExportError(f"the graph has no initializer {name}")


def read_config(model: onnx.ModelProto, weights: dict[str, np.ndarray]) -> dict:
    """The BERT sizes, read off the graph itself."""
    layers = 1 + max(int(m.group(1)) for k in weights if (m := re.match(r"encoder\.layer\.(\d+)\.", k)))
    heads = int(_const(model, "encoder.layer.0.attention.split")[2])
    eps = {
        onnx.helper.get_attribute_value(a)
        for n in model.graph.node if n.op_type == "LayerNormalization"
        for a in n.attribute if a.name == "epsilon"
    }
    if len(eps) != 1:
        raise ExportError(f"LayerNormalization epsilons {sorted(eps)}: expected one")
    words, positions = weights["word_embeddings"], weights["position_embeddings"]
    return {
        "vocab_size": int(words.shape[0]),
        "hidden_size": int(words.shape[1]),
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "intermediate_size": int(weights["encoder.layer.0.intermediate.dense.weight_t"].shape[1]),
        "max_position_embeddings": int(positions.shape[0]),
        "type_vocab_size": int(weights["token_type_embeddings"].shape[0]),
        "layer_norm_eps": float(np.float32(eps.pop())),
        "num_labels": int(weights["classifier.weight_t"].shape[1]),
    }


def state_dict(weights: dict[str, np.ndarray], sizes: dict) -> dict[str, np.ndarray]:
    """Graph names -> BertForSequenceClassification's state-dict names and layouts."""
    head_dim = sizes["hidden_size"] // sizes["num_attention_heads"]
    unscale = np.float32(math.sqrt(head_dim))  # the builder multiplied the query projection by 1/sqrt(d)
    renamed = {"word_embeddings": "bert.embeddings.word_embeddings.weight",
               "position_embeddings": "bert.embeddings.position_embeddings.weight",
               "token_type_embeddings": "bert.embeddings.token_type_embeddings.weight"}
    out: dict[str, np.ndarray] = {}
    for name, value in weights.items():
        if name in renamed:
            key = renamed[name]
        elif name.startswith("classifier."):
            key = name
        elif name.startswith(("embeddings.", "encoder.layer.", "pooler.")):
            key = "bert." + name
        else:
            raise ExportError(f"do not know where the graph's {name} {value.shape} goes")
        if key.endswith(".weight_t"):
            key, value = key[: -len("_t")], value.T
        if ".attention.self.query." in key:
            value = value * unscale
        out[key] = np.ascontiguousarray(value, dtype=np.float32)
    expected = expected_keys(sizes)
    missing, extra = sorted(set(expected) - set(out)), sorted(set(out) - set(expected))
    if missing or extra:
        raise ExportError(f"state dict mismatch: missing {missing[:5]}, unexpected {extra[:5]}")
    wrong = [f"{k} {out[k].shape} != {s}" for k, s in expected.items() if out[k].shape != s]
    if wrong:
        raise ExportError("wrong shapes: " + "; ".join(wrong[:5]))
    return dict(sorted(out.items()))


def expected_keys(sizes: dict) -> dict[str, tuple[int, ...]]:
    """Every parameter of BertForSequenceClassification with these sizes, and its shape."""
    h, i, labels = sizes["hidden_size"], sizes["intermediate_size"], sizes["num_labels"]
    keys: dict[str, tuple[int, ...]] = {
        "bert.embeddings.word_embeddings.weight": (sizes["vocab_size"], h),
        "bert.embeddings.position_embeddings.weight": (sizes["max_position_embeddings"], h),
        "bert.embeddings.token_type_embeddings.weight": (sizes["type_vocab_size"], h),
        "bert.embeddings.LayerNorm.weight": (h,), "bert.embeddings.LayerNorm.bias": (h,),
        "bert.pooler.dense.weight": (h, h), "bert.pooler.dense.bias": (h,),
        "classifier.weight": (labels, h), "classifier.bias": (labels,),
    }
    for n in range(sizes["num_hidden_layers"]):
        p = f"bert.encoder.layer.{n}."
        for part in ("attention.self.query", "attention.self.key", "attention.self.value",
                     "attention.output.dense"):
            keys[p + part + ".weight"], keys[p + part + ".bias"] = (h, h), (h,)
        keys[p + "intermediate.dense.weight"], keys[p + "intermediate.dense.bias"] = (i, h), (i,)
        keys[p + "output.dense.weight"], keys[p + "output.dense.bias"] = (h, i), (h,)
        for ln in ("attention.output.LayerNorm", "output.LayerNorm"):
            keys[p + ln + ".weight"], keys[p + ln + ".bias"] = (h,), (h,)
    return keys


# --------------------------------------------------------------------------------------------------
# Writing the checkpoint


def write_safetensors(path: Path, tensors: dict[str, np.ndarray], metadata: dict[str, str]) -> None:
    """The safetensors format: u64 little-endian header length, JSON header, then the raw bytes."""
    header: dict[str, object] = {"__metadata__": metadata}
    offset, blobs = 0, []
    for name, value in tensors.items():
        if value.dtype != np.float32:
            raise ExportError(f"{name}: only float32 is written, got {value.dtype}")
        data = np.ascontiguousarray(value, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(value.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    encoded = json.dumps(header, separators=(",", ":")).encode("utf-8")
    encoded += b" " * (-len(encoded) % 8)  # align the data to 8 bytes, as the reference writer does
    tmp = path.with_suffix(path.suffix + ".partial")
    with open(tmp, "wb") as fh:
        fh.write(struct.pack("<Q", len(encoded)))
        fh.write(encoded)
        for data in blobs:
            fh.write(data)
    tmp.replace(path)


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Reads back what write_safetensors wrote (float32 only); for checks without the safetensors package."""
    blob = path.read_bytes()
    (size,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + size])
    header.pop("__metadata__", None)
    base = 8 + size
    out = {}
    for name, info in header.items():
        if info["dtype"] != "F32":
            raise ExportError(f"{name}: dtype {info['dtype']} not read here")
        begin, end = info["data_offsets"]
        out[name] = np.frombuffer(blob[base + begin : base + end], dtype="<f4").reshape(info["shape"])
    return out


def hf_config(sizes: dict, name: str, max_length: int) -> dict:
    return {
        "architectures": ["BertForSequenceClassification"],
        "model_type": "bert",
        "hidden_size": sizes["hidden_size"],
        "num_hidden_layers": sizes["num_hidden_layers"],
        "num_attention_heads": sizes["num_attention_heads"],
        "intermediate_size": sizes["intermediate_size"],
        "hidden_act": "gelu",  # erf GELU, what the graph computes
        "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1,
        "max_position_embeddings": sizes["max_position_embeddings"],
        "type_vocab_size": sizes["type_vocab_size"],
        "vocab_size": sizes["vocab_size"],
        "layer_norm_eps": sizes["layer_norm_eps"],
        "initializer_range": 0.02,
        "pad_token_id": 0,
        "position_embedding_type": "absolute",
        "classifier_dropout": None,
        "num_labels": sizes["num_labels"],
        "id2label": {str(i): f"LABEL_{i}" for i in range(sizes["num_labels"])},
        "label2id": {f"LABEL_{i}": i for i in range(sizes["num_labels"])},
        "torch_dtype": "float32",
        "use_cache": True,
        # sentence-transformers' CrossEncoder reads this: score = sigmoid(logit), as funnel's OnnxCrossEncoder
        # returns it (its window, max_length, is tokenizer_config's model_max_length).
        "sentence_transformers": {"activation_fn": "torch.nn.modules.activation.Sigmoid"},
        "funnel_export": {"source": name, "weights": "int8 dequantized to float32", "version": EXPORT_VERSION,
                          "max_length": max_length},
    }


def write_tokenizer_files(model_dir: Path, out: Path, max_length: int) -> None:
    """tokenizer.json as shipped, plus the files transformers' BertTokenizer(Fast) reads beside it."""
    raw = (model_dir / "tokenizer.json").read_bytes()
    tok = json.loads(raw)
    model, normalizer = tok.get("model", {}), tok.get("normalizer") or {}
    if model.get("type") != "WordPiece":
        raise ExportError(f"tokenizer.json: a {model.get('type')} model, expected WordPiece")
    vocab = model["vocab"]
    ids = sorted(vocab.values())
    if ids != list(range(len(ids))):
        raise ExportError("tokenizer.json: vocabulary ids are not 0..n-1")
    by_id = sorted(vocab, key=vocab.__getitem__)
    missing = [t for t in SPECIAL_TOKENS.values() if t not in vocab]
    if missing:
        raise ExportError(f"tokenizer.json: no {missing}")
    (out / "tokenizer.json").write_bytes(raw)
    (out / "vocab.txt").write_text("".join(t + "\n" for t in by_id), encoding="utf-8")
    special = json.dumps(SPECIAL_TOKENS, indent=2) + "\n"
    (out / "special_tokens_map.json").write_text(special, encoding="utf-8")
    lower = bool(normalizer.get("lowercase", True))
    config = {
        "tokenizer_class": "BertTokenizer",
        "do_lower_case": lower,
        "do_basic_tokenize": True,
        "never_split": None,
        "tokenize_chinese_chars": bool(normalizer.get("handle_chinese_chars", True)),
        "strip_accents": normalizer.get("strip_accents"),
        "clean_up_tokenization_spaces": True,
        "model_max_length": max_length,
        "padding_side": "right",
        "truncation_side": "right",
        **SPECIAL_TOKENS,
        "added_tokens_decoder": {
            str(a["id"]): {k: a[k] for k in ADDED_TOKEN_KEYS} for a in tok.get("added_tokens", [])
        },
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def export(out_dir: str | Path, model_dir: str | Path = DEFAULT_MODEL_DIR) -> Path:
    """Write the checkpoint of the int8 model in MODEL_DIR (model_int8.onnx, tokenizer.json,
    funnel_model.json) to OUT_DIR; returns OUT_DIR."""
    model_dir, out = Path(model_dir), Path(out_dir)
    meta = json.loads((model_dir / "funnel_model.json").read_text(encoding="utf-8"))
    if meta.get("head") != "sequence_classification":
        raise ExportError(f"{model_dir}: not a cross-encoder (head {meta.get('head')!r})")
    onnx_path = model_dir / meta.get("files", {}).get("int8", "model_int8.onnx")
    model = onnx.load(str(onnx_path))
    weights, quantized = graph_weights(model)
    sizes = read_config(model, weights)
    tensors = state_dict(weights, sizes)
    max_length = int(meta.get("max_length", 256))
    out.mkdir(parents=True, exist_ok=True)
    write_safetensors(out / "model.safetensors", tensors, {"format": "pt"})
    (out / "config.json").write_text(
        json.dumps(hf_config(sizes, meta.get("name", model_dir.name), max_length), indent=2) + "\n",
        encoding="utf-8")
    write_tokenizer_files(model_dir, out, max_length)
    info = {
        "what": "funnel's shipped int8 reranker, weights dequantized to float32 ((q - zero_point) * scale)",
        "source": str(onnx_path),
        "source_sha256": hashlib.sha256(onnx_path.read_bytes()).hexdigest(),
        "source_meta": meta,
        "export_version": EXPORT_VERSION,
        "dequantized": quantized,
        "parameters": int(sum(v.size for v in tensors.values())),
    }
    (out / INFO_FILE).write_text(json.dumps(info, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path,
                        help="where config.json, model.safetensors and the tokenizer files go")
    parser.add_argument("--model-dir", type=Path, default=DEFAULT_MODEL_DIR,
                        help="the int8 model (default: the shipped funnel-reranker-minilm)")
    args = parser.parse_args(argv)
    try:
        out = export(args.out_dir, args.model_dir)
    except (ExportError, OSError, KeyError, ValueError) as exc:
        print(f"export_reranker_checkpoint: {exc}", file=sys.stderr)
        return 1
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
