"""A torch-free cross-encoder reranker: onnxruntime + tokenizers on a graph built by
`funnel.onnx.build.build_cross_encoder` (BertForSequenceClassification, one label).

Each (query, passage) pair is encoded as `[CLS] query [SEP] passage [SEP]` with token types 0/1. The
query is kept whole and only the passage is cut to fit `max_length`; a query too long to fit at all is
cut to half the window. Either way the candidates concerned are listed in `RerankResult.truncated`.
Scores are sigmoid(logit), in 0-1; the logits are returned as `raw_scores`.

`builtin_model_dir()` is funnel's own reranker (`funnel/rerank/models/funnel-reranker-minilm/`, package data, rebuilt by
`tools/train_reranker.py`).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np

from funnel.errors import BackendUnavailable, ConfigError
from funnel.onnx import layout
from funnel.onnx.runtime import OnnxModel, default_threads
from funnel.types import Candidate, RerankResult

BUILTIN_NAME = "funnel-reranker-minilm"
# The longest pair scored unless a max_length is given (the model's own when that is shorter): the tail of a
# long passage cut, for about a third less work per pair (see policies.RERANK_DEPTH for the measurements).
RERANK_MAX_TOKENS = 192
BUILTIN_DIR_SETTING = "models.reranker_dir"  # ModelsConfig.reranker_dir, named in messages
# Package data beside this module, so a plain `pip install funnel` has the default reranker too.
_PACKAGED_MODELS = Path(__file__).resolve().parent / "models"


def builtin_model_dir(model_dir: str | Path | None = None) -> Path:
    """The directory of funnel's built-in reranker: `model_dir` (the `models.reranker_dir` setting), else the
    packaged one."""
    target = Path(model_dir).expanduser() if model_dir else _PACKAGED_MODELS / BUILTIN_NAME
    if not (target / layout.META_FILE).is_file():
        raise BackendUnavailable(
            f"the built-in reranker model is missing: no {layout.META_FILE} in {target}; rebuild it with "
            f"`make reranker` (tools/train_reranker.py) or point {BUILTIN_DIR_SETTING} at a model directory"
        )
    return target


class OnnxCrossEncoder(OnnxModel):
    """Reranks with an ONNX cross-encoder; implements the `Reranker` protocol.

    The constructor only reads funnel_model.json; the session and tokenizer load on `warm_up()` or on
    first use.
    """

    def __init__(
        self,
        model_dir: str | Path,
        quantized: bool = True,
        max_length: int | None = None,
        batch_size: int = 16,
        threads: int | None = None,
    ):
        self.model_dir = Path(model_dir)
        meta = self._read_meta()
        if meta.get("head") != layout.CROSS_ENCODER_HEAD:
            raise BackendUnavailable(
                f"{self.model_dir} is not a cross-encoder (head {meta.get('head')!r}, expected "
                f"{layout.CROSS_ENCODER_HEAD!r})"
            )
        own_length = int(meta.get("max_length", 256))
        max_length = min(own_length, RERANK_MAX_TOKENS) if max_length is None else max_length
        if max_length < 8:
            raise ConfigError(f"max_length must be at least 8 tokens, got {max_length}")
        self.quantized = quantized
        files = meta.get("files", {})
        self.model_path = self.model_dir / files.get("int8" if quantized else "fp32", "")
        self.tokenizer_path = self.model_dir / files.get("tokenizer", "")
        for path in (self.model_path, self.tokenizer_path):
            if not path.is_file():
                raise BackendUnavailable(
                    f"cross-encoder file missing: {path} (rebuild with python -m funnel.onnx.build "
                    "--cross-encoder, or use quantized=True where only the int8 model is shipped)"
                )
        # The name keys the rerank cache and a stored calibration, so it says which weights and which window
        # made a score: many builds share a model name (every `train_reranker.py` build is
        # funnel-reranker-minilm), so the weights' fingerprint is part of it, and so is a window other than
        # the model's own.
        self.name: str = (
            f"{meta['name']}.{_fingerprint(meta, self.model_path)}" + ("-int8" if quantized else "")
            + (f"@{max_length}" if max_length != own_length else "")
        )
        self.max_length = max_length
        self.batch_size = max(1, batch_size)
        self.threads = threads or default_threads()
        # Dynamic int8 quantises activations with one scale per tensor, so in a batch every pair (padding
        # included) moves the others' rounding and a pair's score would depend on its neighbours. int8
        # therefore runs one pair at a time: with no padding to compute this also measured faster on
        # 2 cores (see MODEL_CARD.md). fp32 batches, sorted by length.
        self.rows_per_run = 1 if quantized else self.batch_size
        self._start_loading()  # the tokenizer truncates the passage only; the counter never truncates

    @classmethod
    def builtin(cls, quantized: bool = True, threads: int | None = None,
                model_dir: str | Path | None = None) -> OnnxCrossEncoder:
        return cls(builtin_model_dir(model_dir), quantized=quantized, threads=threads)

    WHAT = "the ONNX cross-encoder"

    def _truncate(self, tokenizer: Any) -> None:
        tokenizer.enable_truncation(self.max_length, strategy="only_second")

    # ---------------------------------------------------------------------------------------------
    # The Reranker protocol

    def rerank(self, query: str, candidates: list[Candidate]) -> RerankResult:
        self.warm_up()
        if not candidates:
            return RerankResult(scores=(), raw_scores=(), truncated=())
        query, query_cut = self._fit_query(query)
        pairs = [(query, c.chunk.text) for c in candidates]
        encodings = self._tokenizer.encode_batch(pairs, add_special_tokens=True)
        truncated = tuple(
            i for i, e in enumerate(encodings) if query_cut or e.overflowing or len(e.ids) > self.max_length
        )
        raw = self._logits(encodings)
        scores = 1.0 / (1.0 + np.exp(-raw.astype(np.float64)))
        return RerankResult(
            scores=tuple(float(s) for s in scores),
            raw_scores=tuple(float(r) for r in raw),
            truncated=truncated,
        )

    def _fit_query(self, query: str) -> tuple[str, bool]:
        """The query, whole when it fits the window with some passage; else its first half-window."""
        room = self.max_length - self._counter.num_special_tokens_to_add(True)
        offsets = [o for o in self._counter.encode(query, add_special_tokens=False).offsets]
        if len(offsets) < room:  # at least one passage token still fits
            return query, False
        keep = max(1, room // 2)
        return query[: offsets[keep - 1][1]], True

    def _logits(self, encodings: list[Any]) -> np.ndarray:
        out = np.empty(len(encodings), dtype=np.float32)
        order = sorted(range(len(encodings)), key=lambda i: len(encodings[i].ids), reverse=True)
        for start in range(0, len(order), self.rows_per_run):
            rows = order[start : start + self.rows_per_run]
            feeds = _pad([encodings[i] for i in rows])
            (logits,) = self._session.run(None, feeds)
            out[rows] = logits[:, 0]
        return out

    def __repr__(self) -> str:
        return (
            f"OnnxCrossEncoder({str(self.model_dir)!r}, quantized={self.quantized}, "
            f"max_length={self.max_length}, threads={self.threads})"
        )


def _fingerprint(meta: dict, model_path: Path) -> str:
    """8 hex digits that tell one model's weights from another's: the builder's hash of the checkpoint it
    converted (funnel_model.json's source_sha256), else a hash of the model file itself."""
    recorded = str(meta.get("source_sha256") or "")
    if recorded:
        return recorded[:8]
    digest = hashlib.sha256()
    with open(model_path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:8]


def _pad(encodings: list[Any]) -> dict[str, np.ndarray]:
    """Right-pad with id 0; padded positions are masked out, so their values never matter."""
    width = max(len(e.ids) for e in encodings)
    ids = np.zeros((len(encodings), width), dtype=np.int64)
    mask = np.zeros((len(encodings), width), dtype=np.int64)
    types = np.zeros((len(encodings), width), dtype=np.int64)
    for row, e in enumerate(encodings):
        n = len(e.ids)
        ids[row, :n] = e.ids
        mask[row, :n] = 1
        types[row, :n] = e.type_ids
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
