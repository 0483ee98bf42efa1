"""The Reranker protocol."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from funnel.types import Candidate, RerankResult


@runtime_checkable
class Reranker(Protocol):
    """Scores each (query, candidate) pair; higher = more relevant.

    Returns one score per candidate in the order given. It may raise anything: the second stage
    turns every failure into a fallback to first-stage order, with the reason in the result.
    """

    name: str

    def rerank(self, query: str, candidates: list[Candidate]) -> RerankResult: ...
