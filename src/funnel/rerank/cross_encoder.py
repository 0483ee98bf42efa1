"""Any sentence-transformers `CrossEncoder` by hub name or local path (optional extra: funnel[torch]).

e.g. cross-encoder/ms-marco-MiniLM-L-6-v2 or BAAI/bge-reranker-v2-m3 where a hub is reachable.
"""

from __future__ import annotations

import math

from funnel.torch_runtime import SentenceTransformersModel
from funnel.types import Candidate, RerankResult


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


class CrossEncoderReranker(SentenceTransformersModel):
    CLASS, WHAT, LABEL = "CrossEncoder", "the cross-encoder reranker", "cross-encoder"

    def __init__(self, model: str, max_length: int = 256, batch_size: int = 16, device: str = "cpu"):
        super().__init__(model, device, batch_size)
        self.max_length = max_length

    def _options(self) -> dict:
        return {"max_length": self.max_length}

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
