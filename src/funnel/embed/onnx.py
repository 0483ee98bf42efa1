"""A torch-free sentence embedder: onnxruntime + tokenizers on a graph built by `funnel.onnx.build`.

The model directory holds model.onnx / model_int8.onnx, tokenizer.json and funnel_model.json, as
written by `funnel.onnx.build.build`. `default_model_dir()` builds one from the packaged
all-MiniLM-L6-v2 weights on first use, where `[models] minilm_dir` says (the settings pass it down).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from funnel.errors import BackendUnavailable
from funnel.onnx import layout
from funnel.onnx.runtime import MAX_DEFAULT_THREADS, OnnxModel, default_threads, load_tokenizer

__all__ = [
    "MAX_DEFAULT_THREADS", "MODEL_DIR_SETTING", "OnnxEmbedder", "build_atomically", "default_model_dir",
    "is_current_build",
]

MODEL_DIR_SETTING = "models.minilm_dir"  # ModelsConfig.minilm_dir, named in messages


def default_model_dir(model_dir: str | Path | None = None) -> Path:
    """The cached ONNX build of the packaged MiniLM, built there on first use (or when outdated): in
    `model_dir` (the `models.minilm_dir` setting), else ~/.cache/funnel/models/all-MiniLM-L6-v2.
    """
    target = (
        Path(model_dir).expanduser()
        if model_dir
        else Path.home() / ".cache" / "funnel" / "models" / layout.PACKAGED_NAME
    )
    if not is_current_build(target):
        source = layout.packaged_minilm_dir()  # raises BackendUnavailable with the pip command

        def build(staging: Path) -> None:
            from funnel.onnx.build import build_packaged  # the `onnx` package, only when a build is due

            build_packaged(staging)

        build_atomically(target, build, f"the ONNX model from {source}", MODEL_DIR_SETTING)
    return target


def is_current_build(model_dir: Path, name: str | None = None) -> bool:
    """Whether `model_dir` holds a build by this builder version (and of the model `name`, when given)."""
    try:
        meta = json.loads((model_dir / layout.META_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return meta.get("builder_version") == layout.BUILDER_VERSION and name in (None, meta.get("name"))


def build_atomically(
    target: Path, build: Callable[[Path], None], what: str, setting: str, name: str | None = None
) -> None:
    """`build(staging)` beside the target, then rename, so a crash or a concurrent reader never sees half a
    model: whatever `build` raises, its staging folder is removed. A failed write (disk full) is one line.
    `setting` names the setting that chose the target, for the messages."""
    if target.exists() and not target.is_dir():
        raise BackendUnavailable(f"{target} is a file; point {setting} at a directory")
    if target.is_dir() and any(target.iterdir()) and not (target / layout.META_FILE).is_file():
        # Never delete a directory we did not write (the setting may point anywhere).
        raise BackendUnavailable(f"{target} exists and is not a funnel ONNX model directory; empty it")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.build-", dir=target.parent))
    except OSError as exc:
        raise BackendUnavailable(f"could not build {what} into {target}: {exc}") from None
    try:
        build(staging)
        if is_current_build(target, name):  # another process finished first; keep what readers may use
            return
        if target.exists():  # our own outdated build: move aside, as os.replace needs an empty target
            stale = Path(tempfile.mkdtemp(prefix=f".{target.name}.stale-", dir=target.parent))
            os.replace(target, stale / "old")
            shutil.rmtree(stale, ignore_errors=True)
        os.replace(staging, target)
    except OSError as exc:
        # Another process may have won the race between our check and rename; its build is as good.
        if not is_current_build(target, name):
            raise BackendUnavailable(f"could not build {what} into {target}: {exc}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


class OnnxEmbedder(OnnxModel):
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
                    f"ONNX model file missing: {path} (rebuild with python -m funnel.onnx.build)"
                )
        # int8 vectors are close to, not equal to, fp32 ones; a distinct name keeps indexes honest.
        self.name: str = meta["name"] + ("-int8" if quantized else "")
        self.dim: int = int(meta["dim"])
        self.max_seq_length: int = int(meta["max_seq_length"])
        self.max_tokens: int = self.max_seq_length - 2  # [CLS] and [SEP]
        self.threads = threads or default_threads()
        self.batch_size = max(1, batch_size)
        # Dynamic int8 quantises activations with one scale per tensor, so inside a batch every row
        # (padding included) moves the others' rounding: measured cosine to the same text run alone
        # fell to 0.98. int8 therefore runs texts one at a time, so a text's vector never depends on
        # its neighbours. On 2 CPU cores this measured no slower (0-10% either way): no padding to compute.
        self.rows_per_run = 1 if quantized else self.batch_size
        self._start_loading()

    @classmethod
    def default(
        cls, quantized: bool = True, threads: int | None = None, batch_size: int = 32,
        model_dir: str | Path | None = None,
    ) -> OnnxEmbedder:
        """The packaged all-MiniLM-L6-v2, built on first use into `model_dir` (None: the cache)."""
        return cls(default_model_dir(model_dir), quantized=quantized, threads=threads, batch_size=batch_size)

    WHAT = "the ONNX embedder"

    def _load_tokenizers(self) -> tuple[Any, Any]:
        # One copy counts and embeds: `_encode` cuts to the window itself, where the tokenizer's own
        # truncation would need a second, truncating copy (XLM-R's 250k-piece vocabulary holds ~280 MB).
        tokenizer = load_tokenizer(self.tokenizer_path, self.WHAT)
        return tokenizer, tokenizer

    def _encode(self, texts: list[str]) -> list[Any]:
        """Encodings with specials, cut to the window exactly as `enable_truncation(max_seq_length)` cuts
        (content tokens from the right, then the specials; counted with them, like sentence-transformers)."""
        room = self.max_seq_length - self._tokenizer.num_special_tokens_to_add(False)
        encodings = self._tokenizer.encode_batch(list(texts), add_special_tokens=False)
        for encoding in encodings:
            if len(encoding.ids) > room:
                encoding.truncate(room)
        return [self._tokenizer.post_process(e) for e in encodings]

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
        encodings = self._encode(texts)
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
