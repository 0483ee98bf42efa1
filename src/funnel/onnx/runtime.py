"""What the ONNX embedder and the ONNX cross-encoder share at run time: the model folder's metadata, the
session, the tokenizers and the lazy, thread-safe warm-up. Needs onnxruntime and tokenizers, never `onnx`."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from funnel.errors import BackendUnavailable, missing_dependency
from funnel.onnx.layout import META_FILE

MAX_DEFAULT_THREADS = 8  # beyond this a 384-wide model gains little and starves the rest of the host
NO_FUSION = ["SkipLayerNormFusion"]


def read_meta(model_dir: Path) -> dict[str, Any]:
    path = model_dir / META_FILE
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BackendUnavailable(f"not an ONNX model directory (no {META_FILE}): {model_dir}") from None
    except ValueError as exc:
        raise BackendUnavailable(f"unreadable {path}: {exc}") from None


def default_threads() -> int:
    # sched_getaffinity respects container CPU pinning, which os.cpu_count() does not.
    available = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(available, MAX_DEFAULT_THREADS))


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


def load_tokenizer(tokenizer_path: Path, what: str) -> Any:
    """The tokenizer.json's tokenizer without its own padding or truncation."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise missing_dependency(what, "tokenizers") from None
    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    tokenizer.no_padding()  # the file may carry a fixed padding; we pad per batch ourselves
    tokenizer.no_truncation()
    return tokenizer


def load_tokenizers(tokenizer_path: Path, what: str) -> tuple[Any, Any]:
    """(counter, tokenizer) from one tokenizer.json: the counter never truncates (chunk sizing, finding
    where to cut); the caller sets the tokenizer's truncation."""
    return load_tokenizer(tokenizer_path, what), load_tokenizer(tokenizer_path, what)


class OnnxModel:
    """A model folder's session and tokenizers, loaded once on `warm_up()` or first use.

    A subclass sets `model_dir`, `model_path`, `tokenizer_path` and `threads`, calls `_start_loading()` in
    its constructor, names itself in `WHAT` (for error messages) and sets its tokenizer's truncation in
    `_truncate`."""

    WHAT = "the ONNX model"
    model_dir: Path
    model_path: Path
    tokenizer_path: Path
    threads: int

    def _start_loading(self) -> None:
        self._session: Any = None
        self._tokenizer: Any = None  # truncates to the model window, adds specials
        self._counter: Any = None  # the same vocabulary without truncation, for counting and offsets
        self._lock = threading.Lock()

    def _read_meta(self) -> dict[str, Any]:
        return read_meta(self.model_dir)

    def warm_up(self) -> None:
        """Load the onnxruntime session and the tokenizer (a second call is free)."""
        if self._session is not None:
            return
        with self._lock:
            if self._session is None:
                self._counter, self._tokenizer = self._load_tokenizers()
                self._session = self._load_session()

    def _load_session(self) -> Any:
        return load_session(self.model_path, self.threads, self.WHAT)

    def _load_tokenizers(self) -> tuple[Any, Any]:
        counter, tokenizer = load_tokenizers(self.tokenizer_path, self.WHAT)
        self._truncate(tokenizer)
        return counter, tokenizer

    def _truncate(self, tokenizer: Any) -> None:
        raise NotImplementedError
