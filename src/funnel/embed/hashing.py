"""A deterministic, dependency-free embedder for tests and dry runs (not for quality)."""

from __future__ import annotations

import hashlib
import re

import numpy as np

_WORD = re.compile(r"\w+", re.UNICODE)


class HashingEmbedder:
    """Feature-hashes lowercase word unigrams and bigrams into `dim` buckets, then L2-normalises.

    Texts sharing words land near each other, which is enough to exercise every code path of the
    pipeline in milliseconds. Its tokenizer is the word regex, so chunk sizing is exercised too.
    """

    def __init__(self, dim: int = 64, max_tokens: int = 128):
        self.name = f"hashing-{dim}"
        self.dim = dim
        self.max_tokens = max_tokens

    def warm_up(self) -> None:
        """Nothing to load."""

    def token_offsets(self, text: str) -> list[tuple[int, int]]:
        return [m.span() for m in _WORD.finditer(text)]

    def count_tokens(self, text: str) -> int:
        return sum(1 for _ in _WORD.finditer(text))

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            words = [w.lower() for w in _WORD.findall(text)][: self.max_tokens]
            for feature in words + [a + " " + b for a, b in zip(words, words[1:])]:
                digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
                bucket = int.from_bytes(digest[:4], "little") % self.dim
                sign = 1.0 if digest[4] & 1 else -1.0
                out[row, bucket] += sign
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1.0, norms)
