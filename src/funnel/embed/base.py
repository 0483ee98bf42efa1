"""The Embedder protocol."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalised vectors of a fixed dimension.

    `count_tokens` is the embedder's own tokenizer, so chunkers can size chunks to what the model sees
    (no silent truncation at embedding time). `max_tokens` counts content tokens, specials excluded.
    """

    name: str
    dim: int
    max_tokens: int

    def embed(self, texts: list[str]) -> np.ndarray: ...

    def count_tokens(self, text: str) -> int: ...

    def token_offsets(self, text: str) -> list[tuple[int, int]]: ...
