"""The Generator protocol."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from funnel.types import Answer, SearchResult


@runtime_checkable
class Generator(Protocol):
    """Answers a question from the documents a search found, citing them by number."""

    name: str

    def answer(self, question: str, result: SearchResult) -> Answer: ...
