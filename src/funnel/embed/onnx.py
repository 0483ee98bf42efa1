"""A torch-free sentence embedder: onnxruntime + tokenizers on a graph built by `onnx_build`.

The model directory holds model.onnx / model_int8.onnx, tokenizer.json and funnel_model.json, as
written by `funnel.embed.onnx_build.build`. `default_model_dir()` builds one from the packaged
all-MiniLM-L6-v2 weights on first use.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from funnel.embed import onnx_build
from funnel.errors import BackendUnavailable
from funnel.onnx_runtime import load_session, load_tokenizers, read_meta

MAX_DEFAULT_THREADS = 8  # beyond this a 384-wide model gains little and starves the rest of the host
MODEL_DIR_ENV = "FUNNEL_MODEL_DIR"


def default_model_dir() -> Path:
    """The cached ONNX build of the packaged MiniLM, built there on first use (or when outdated).

    $FUNNEL_MODEL_DIR, else ~/.cache/funnel/models/all-MiniLM-L6-v2.
    """
    env = os.environ.get(MODEL_DIR_ENV)
    target = (
        Path(env).expanduser()
        if env
        else Path.home() / ".cache" / "funnel" / "models" / onnx_build.PACKAGED_NAME
    )
    if not _is_current_build(target):
        _build_atomically(target)
    return target


def _is_current_build(model_dir: Path) -> bool:
    try:
        meta = json.loads((model_dir / onnx_build.META_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return meta.get("builder_version") == onnx_build.BUILDER_VERSION


def _build_atomically(target: Path) -> None:
    """Build beside the target, then rename, so a crash or a concurrent reader never sees half a model."""
    source = onnx_build.packaged_minilm_dir()  # raises BackendUnavailable with the pip command
    if target.exists() and not target.is_dir():
        raise BackendUnavailable(f"{target} is a file; point {MODEL_DIR_ENV} at a directory")
    if target.is_dir() and any(target.iterdir()) and not (target / onnx_build.META_FILE).is_file():
        # Never delete a directory we did not write (FUNNEL_MODEL_DIR may point anywhere).
        raise BackendUnavailable(f"{target} exists and is not a funnel ONNX model directory; empty it")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.build-", dir=target.parent))
    try:
        onnx_build.build_packaged(staging)
        if _is_current_build(target):  # another process finished first; keep what readers may use
            return
        if target.exists():  # our own outdated build: move aside, as os.replace needs an empty target
            stale = Path(tempfile.mkdtemp(prefix=f".{target.name}.stale-", dir=target.parent))
            os.replace(target, stale / "old")
            shutil.rmtree(stale, ignore_errors=True)
        os.replace(staging, target)
    except OSError as exc:
        # Another process may have won the race between our check and rename; its build is as good.
        if not _is_current_build(target):
            raise BackendUnavailable(
                f"could not build the ONNX model from {source} into {target}: {exc}"
            ) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _default_threads() -> int:
    # sched_getaffinity respects container CPU pinning, which os.cpu_count() does not.
    available = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(available, MAX_DEFAULT_THREADS))


class OnnxEmbedder:
    """Embeds with an ONNX BERT-family sentence model; output rows are L2-normalised float32.

    The constructor only reads funnel_model.json; the session and tokenizer load on `warm_up()` or on
    first use. Texts longer than the model's window are truncated (count them with `count_tokens`).
    """

    def __init__(
        self,
        model_dir: str | Path,
        quantized: bool = True,
        threads: int | None = None,
        batch_size: int = 32,
    ):
        self.model_dir = Path(model_dir)
        meta = self._read_meta()
        self.quantized = quantized
        self.model_path = self.model_dir / meta["files"]["int8" if quantized else "fp32"]
        self.tokenizer_path = self.model_dir / meta["files"]["tokenizer"]
        for path in (self.model_path, self.tokenizer_path):
            if not path.is_file():
                raise BackendUnavailable(
                    f"ONNX model file missing: {path} (rebuild with python -m funnel.embed.onnx_build)"
                )
        # int8 vectors are close to, not equal to, fp32 ones; a distinct name keeps indexes honest.
        self.name: str = meta["name"] + ("-int8" if quantized else "")
        self.dim: int = int(meta["dim"])
        self.max_seq_length: int = int(meta["max_seq_length"])
        self.max_tokens: int = self.max_seq_length - 2  # [CLS] and [SEP]
        self.threads = threads or _default_threads()
        self.batch_size = max(1, batch_size)
        # Dynamic int8 quantises activations with one scale per tensor, so inside a batch every row
        # (padding included) moves the others' rounding: measured cosine to the same text run alone
        # fell to 0.98. int8 therefore runs texts one at a time, so a text's vector never depends on
        # its neighbours. On 2 CPU cores this measured no slower (0-10% either way): no padding to compute.
        self.rows_per_run = 1 if quantized else self.batch_size
        self._session: Any = None
        self._tokenizer: Any = None  # truncates to the model window, adds specials
        self._counter: Any = None  # the same vocabulary without truncation, for counting and offsets
        self._lock = threading.Lock()

    @classmethod
    def default(
        cls, quantized: bool = True, threads: int | None = None, batch_size: int = 32
    ) -> OnnxEmbedder:
        """The packaged all-MiniLM-L6-v2, built into the cache on first use."""
        return cls(default_model_dir(), quantized=quantized, threads=threads, batch_size=batch_size)

    def _read_meta(self) -> dict[str, Any]:
        return read_meta(self.model_dir)

    # ---------------------------------------------------------------------------------------------
    # Loading

    def warm_up(self) -> None:
        """Load the onnxruntime session and the tokenizer (a second call is free)."""
        if self._session is not None:
            return
        with self._lock:
            if self._session is None:
                self._counter, self._tokenizer = self._load_tokenizers()
                self._session = self._load_session()

    def _load_session(self) -> Any:
        return load_session(self.model_path, self.threads, "the ONNX embedder")

    def _load_tokenizers(self) -> tuple[Any, Any]:
        counter, tokenizer = load_tokenizers(self.tokenizer_path, "the ONNX embedder")
        tokenizer.enable_truncation(self.max_seq_length)  # counts specials, like sentence-transformers
        return counter, tokenizer

    # ---------------------------------------------------------------------------------------------
    # The Embedder protocol

    def count_tokens(self, text: str) -> int:
        self.warm_up()
        return len(self._counter.encode(text, add_special_tokens=False).ids)

    def token_offsets(self, text: str) -> list[tuple[int, int]]:
        """Character spans of the content tokens (specials excluded), in order."""
        self.warm_up()
        return [tuple(span) for span in self._counter.encode(text, add_special_tokens=False).offsets]

    def embed(self, texts: list[str]) -> np.ndarray:
        self.warm_up()
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        encodings = self._tokenizer.encode_batch(list(texts), add_special_tokens=True)
        for rows in self._batches([len(e.ids) for e in encodings]):
            ids, mask = _pad([encodings[i].ids for i in rows])
            (vectors,) = self._session.run(None, {"input_ids": ids, "attention_mask": mask})
            out[rows] = vectors
        return out

    def _batches(self, lengths: list[int]) -> Iterator[list[int]]:
        """Row indices grouped by similar length, so little compute goes to padding."""
        order = sorted(range(len(lengths)), key=lambda i: lengths[i], reverse=True)
        for start in range(0, len(order), self.rows_per_run):
            yield order[start : start + self.rows_per_run]

    def __repr__(self) -> str:
        return f"OnnxEmbedder({str(self.model_dir)!r}, quantized={self.quantized}, threads={self.threads})"


def _pad(sequences: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad with id 0; padded positions are masked out, so the pad id's value never matters."""
    width = max(len(s) for s in sequences)
    ids = np.zeros((len(sequences), width), dtype=np.int64)
    mask = np.zeros((len(sequences), width), dtype=np.int64)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = seq
        mask[row, : len(seq)] = 1
    return ids, mask
