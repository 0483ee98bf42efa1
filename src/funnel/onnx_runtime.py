"""What the ONNX embedder and the ONNX cross-encoder share: the model folder's metadata and the session."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from funnel.embed import onnx_build
from funnel.errors import BackendUnavailable, missing_dependency


def read_meta(model_dir: Path) -> dict[str, Any]:
    path = model_dir / onnx_build.META_FILE
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BackendUnavailable(f"not an ONNX model directory (no {onnx_build.META_FILE}): {model_dir}") from None
    except ValueError as exc:
        raise BackendUnavailable(f"unreadable {path}: {exc}") from None


NO_FUSION = ["SkipLayerNormFusion"]


def load_session(model_path: Path, threads: int, what: str) -> Any:
    try:
        import onnxruntime as ort
    except ImportError:
        raise missing_dependency(what, "onnxruntime") from None
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1  # the graph is a straight chain; parallelism is inside ops
    options.log_severity_level = 3  # errors only: ORT warns about harmless things on load
    # onnxruntime's CPU SkipLayerNormalization kernel (the fused residual Add + LayerNorm) measured 6x slower
    # than the two nodes it replaces on this 384-wide BERT: without the fusion the cross-encoder reranks 25
    # pairs in ~200 instead of ~255 ms and the embedder runs ~30% faster, at equal fidelity to fp32
    # (cosine to fp32 0.9951 either way; see BENCHMARKS.md, "Where a query's time goes").
    return ort.InferenceSession(
        str(model_path), options, providers=["CPUExecutionProvider"], disabled_optimizers=NO_FUSION
    )


def load_tokenizers(tokenizer_path: Path, what: str) -> tuple[Any, Any]:
    """(counter, tokenizer) from one tokenizer.json, both without the file's own padding: the counter
    never truncates (chunk sizing, finding where to cut); the caller sets the tokenizer's truncation."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise missing_dependency(what, "tokenizers") from None
    counter = Tokenizer.from_file(str(tokenizer_path))
    counter.no_padding()  # the file may carry a fixed padding; we pad per batch ourselves
    counter.no_truncation()
    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    tokenizer.no_padding()
    return counter, tokenizer
