"""A rerank cache: scores remembered by (model, query, passage hash).

A reranker's score for a pair depends on nothing else (the built-in int8 model runs one pair at a time for
exactly this reason), so a repeated query, a follow-up that retrieves the same passages, `ask` after
`search` or a second eval variant costs nothing the second time. Bounded (LRU) and thread-safe.
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections import OrderedDict

from funnel.rerank.base import Reranker
from funnel.types import Candidate, RerankResult

DEFAULT_ENTRIES = 50_000  # ~100 bytes each: a few MB


class CachedReranker:
    """Wraps any `Reranker`; only the pairs it has not seen reach the model."""

    def __init__(self, inner: Reranker, max_entries: int = DEFAULT_ENTRIES):
        self.inner = inner
        self.name = inner.name
        self.max_entries = max(1, max_entries)
        self._scores: OrderedDict[bytes, tuple[float, float | None, bool]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def warm_up(self) -> None:
        if hasattr(self.inner, "warm_up"):
            self.inner.warm_up()

    def close(self) -> None:
        if hasattr(self.inner, "close"):
            self.inner.close()

    def _key(self, query: str, text: str) -> bytes:
        digest = hashlib.blake2b(digest_size=16)
        for part in (self.name, query, text):
            digest.update(part.encode("utf-8", "surrogatepass"))
            digest.update(b"\x00")
        return digest.digest()

    def rerank(self, query: str, candidates: list[Candidate]) -> RerankResult:
        keys = [self._key(query, c.chunk.text) for c in candidates]
        with self._lock:
            known = {i: self._scores[k] for i, k in enumerate(keys) if k in self._scores}
            for i in known:
                self._scores.move_to_end(keys[i])
        missing = [i for i in range(len(candidates)) if i not in known]
        self.hits += len(known)
        self.misses += len(missing)
        if missing:
            result = self.inner.rerank(query, [candidates[i] for i in missing])
            if not _well_formed(result, len(missing)):
                return result  # passed on whole: the second stage falls back and says why; nothing cached
            raw = result.raw_scores if result.raw_scores is not None else (None,) * len(missing)
            cut = set(result.truncated)
            fresh = {i: (float(s), r, j in cut) for j, (i, s, r) in enumerate(zip(missing, result.scores, raw))}
            with self._lock:
                for i, entry in fresh.items():
                    self._scores[keys[i]] = entry
                while len(self._scores) > self.max_entries:
                    self._scores.popitem(last=False)
            known.update(fresh)
        entries = [known[i] for i in range(len(candidates))]
        raw_scores = None if any(e[1] is None for e in entries) else tuple(e[1] for e in entries)
        return RerankResult(
            scores=tuple(e[0] for e in entries),
            raw_scores=raw_scores,
            truncated=tuple(i for i, e in enumerate(entries) if e[2]),
        )

    def __repr__(self) -> str:
        return f"CachedReranker({self.inner!r}, max_entries={self.max_entries})"


def _well_formed(result: RerankResult, n: int) -> bool:
    try:
        return len(result.scores) == n and all(math.isfinite(float(s)) for s in result.scores)
    except (TypeError, ValueError, AttributeError):
        return False
