"""Build ONNX BERT-family models from safetensors checkpoints, without torch: a sentence embedder or a
cross-encoder (BertForSequenceClassification with one label).

The graph is written node by node with `onnx.helper` from `config.json` + `model.safetensors`:
embeddings, the encoder layers, then either mean pooling over the attention mask and L2 normalisation
(embedder) or the [CLS] pooler and the classifier (cross-encoder, output `logits` [batch, 1]), so that
the runtime side needs only onnxruntime and tokenizers. The nodes follow the shapes PyTorch's exporter
produces (Div by sqrt(2) -> Erf for GELU, MatMul + Add for dense layers) so that onnxruntime's own
fusions (Gelu, SkipLayerNormalization, ...) recognise them at load time; the file itself stays unfused
because dynamic quantisation works on plain MatMul nodes.

    python -m funnel.onnx.build SRC_DIR OUT_DIR [--name NAME] [--cross-encoder]

OUT_DIR receives model.onnx (fp32), model_int8.onnx, tokenizer.json and funnel_model.json.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
from pathlib import Path

import onnx

from funnel.errors import BackendUnavailable, ConfigError
from funnel.onnx.checkpoint import BertConfig, load_weights, read_config, read_max_seq_length, read_pooling, source_hash
from funnel.onnx.graph import build_classifier_graph, build_graph
from funnel.onnx.layout import (
    BUILDER_VERSION,
    CROSS_ENCODER_HEAD,
    FP32_FILE,
    INT8_FILE,
    META_FILE,
    PACKAGED_MODULE,
    PACKAGED_NAME,
    TOKENIZER_FILE,
    packaged_minilm_dir,
    write_meta,
)

__all__ = [
    "BUILDER_VERSION", "CROSS_ENCODER_HEAD", "FP32_FILE", "INT8_FILE", "META_FILE", "PACKAGED_MODULE",
    "PACKAGED_NAME", "TOKENIZER_FILE", "BertConfig", "build", "build_classifier_graph", "build_cross_encoder",
    "build_graph", "build_packaged", "load_weights", "main", "packaged_minilm_dir", "quantize_int8",
    "read_config", "read_max_seq_length", "read_pooling", "source_hash", "write_tokenizer",
]


def quantize_int8(fp32_path: Path, int8_path: Path, exclude: tuple[str, ...] = ()) -> None:
    """Per-channel int8 weights for the dense MatMuls, activations quantised at run time.

    Gather is quantised too, which stores the word-embedding table as uint8: the file shrinks from
    55 to 22 MiB while the vectors move by under 1e-4 cosine (measured on SciFact). `exclude` names
    nodes kept in float32.
    """
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # quantize_dynamic warns on every call that the model was not pre-processed; that is on purpose
    # here (pre-processing fuses nodes, and we quantise the unfused graph).
    from google.protobuf.message import DecodeError

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
    except DecodeError:
        # The quantiser writes a shape-inferred copy beside the model from C++, which a full disk cuts
        # short without an error; reading it back is where that shows.
        free = shutil.disk_usage(int8_path.parent).free // 2**20
        raise BackendUnavailable(
            f"quantising {fp32_path} failed: a copy it wrote is cut short ({free} MiB free there; disk full?)"
        ) from None
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
    meta: dict = {
        "name": name,
        "dim": cfg.hidden,
        "max_seq_length": max_seq_length,
        "pooling": pooling,
        "normalized": True,
        "source_sha256": source_hash(src),
    }
    write_meta(out, meta)
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
    meta: dict = {
        "name": name,
        "head": CROSS_ENCODER_HEAD,
        "num_labels": 1,
        "max_length": max_length,
        "source_sha256": source_hash(src),
    }
    write_meta(out, meta)
    return out


def build_packaged(out_dir: str | Path) -> Path:
    return build(packaged_minilm_dir(), out_dir, name=PACKAGED_NAME)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m funnel.onnx.build", description=__doc__.split("\n\n")[0]
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
