"""Any sentence-transformers `CrossEncoder` by hub name or local path (optional extra: funnel[torch]).

e.g. cross-encoder/ms-marco-MiniLM-L-6-v2 or BAAI/bge-reranker-v2-m3 where a hub is reachable.
"""

from __future__ import annotations

import math

from funnel.errors import BackendUnavailable, missing_dependency
from funnel.types import Candidate, RerankResult


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


class CrossEncoderReranker:
    def __init__(self, model: str, max_length: int = 256, batch_size: int = 16, device: str = "cpu"):
        self.model_name = model
        self.name = f"st:{model}"
        self.max_length = max_length
        self.batch_size = batch_size
        self.device = device
        self._model = None

    def warm_up(self) -> None:
        if self._model is not None:
            return
        try:
            from sentence_transformers import CrossEncoder
        except ImportError as e:
            raise missing_dependency("the cross-encoder reranker", "sentence-transformers", "torch") from e
        try:
            self._model = CrossEncoder(self.model_name, max_length=self.max_length, device=self.device)
        except Exception as e:  # hub unreachable, bad path: one line
            raise BackendUnavailable(f"cannot load cross-encoder {self.model_name!r}: {e}") from e

    def _truncated(self, query: str, candidates: list[Candidate]) -> tuple[int, ...]:
        tokenizer = self._model.tokenizer
        budget = self.max_length - 3 - len(tokenizer(query, add_special_tokens=False)["input_ids"])
        return tuple(
            i for i, c in enumerate(candidates)
            if len(tokenizer(c.chunk.text, add_special_tokens=False)["input_ids"]) > budget
        )

    def rerank(self, query: str, candidates: list[Candidate]) -> RerankResult:
        self.warm_up()
        import torch

        raw = self._model.predict(
            [(query, c.chunk.text) for c in candidates],
            batch_size=self.batch_size,
            activation_fn=torch.nn.Identity(),  # raw logits; the sigmoid is applied here, both are kept
            convert_to_numpy=True,
        )
        raw_scores = tuple(float(x) for x in raw.reshape(len(candidates), -1)[:, 0])
        return RerankResult(
            scores=tuple(_sigmoid(x) for x in raw_scores),
            raw_scores=raw_scores,
            truncated=self._truncated(query, candidates),
        )
