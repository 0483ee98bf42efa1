"""The Embedder protocol."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

__all__ = ["Embedder", "embed_queries"]


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalised vectors of a fixed dimension.

    `count_tokens` is the embedder's own tokenizer, so chunkers can size chunks to what the model sees
    (no silent truncation at embedding time). `max_tokens` counts content tokens, specials excluded.

    `embed` embeds what is stored (passages). An asymmetric model (e5: "query: " / "passage: ") may also
    have `embed_query(texts)` for what is searched with; it is optional, so call `embed_queries`, never
    `embed`, for a query or a question.
    """

    name: str
    dim: int
    max_tokens: int

    def embed(self, texts: list[str]) -> np.ndarray: ...

    def count_tokens(self, text: str) -> int: ...

    def token_offsets(self, text: str) -> list[tuple[int, int]]: ...


def embed_queries(embedder: Embedder, texts: list[str]) -> np.ndarray:
    """Queries' vectors: the embedder's `embed_query` when it has one, else `embed`."""
    embed_query = getattr(embedder, "embed_query", None)
    return embed_query(texts) if embed_query is not None else embedder.embed(texts)
