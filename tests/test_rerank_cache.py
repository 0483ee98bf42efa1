"""The rerank cache: a pair is scored once, whatever else is asked alongside it."""

import math

from funnel.rerank.cache import CachedReranker
from funnel.rerank.lexical import LexicalReranker
from funnel.rerank.policies import RerankPolicy, second_stage
from funnel.types import RerankResult, RerankStatus

from helpers import candidates


class Counting:
    """A real lexical reranker that counts the pairs it scores and marks every third one truncated."""

    name = "counting"

    def __init__(self):
        self.inner = LexicalReranker()
        self.pairs = 0

    def rerank(self, query, cands):
        self.pairs += len(cands)
        result = self.inner.rerank(query, cands)
        return RerankResult(result.scores, result.raw_scores, tuple(range(0, len(cands), 3)))


def test_a_pair_is_scored_once_and_scores_do_not_change():
    inner = Counting()
    cached = CachedReranker(inner)
    first = candidates(["a", "b", "c", "d"])
    fresh = Counting().rerank("text of b", first)
    assert cached.rerank("text of b", first) == fresh
    assert inner.pairs == 4
    overlap = candidates(["b", "c", "e"])  # b#0 and c#0 have the same text as before; e is new
    again = cached.rerank("text of b", overlap)
    assert inner.pairs == 5 and (cached.hits, cached.misses) == (2, 5)
    direct = LexicalReranker().rerank("text of b", overlap)
    # Scores of a pair do not depend on its neighbours for the models funnel caches (int8 runs one pair at a
    # time); the lexical one does (its idf comes from the candidates), so compare the cached pairs only.
    assert again.scores[:2] == fresh.scores[1:3] and len(again.scores) == 3 and direct.scores
    assert cached.rerank("another query", first) and inner.pairs == 9  # keyed by query too


def test_the_cache_is_bounded():
    cached = CachedReranker(Counting(), max_entries=3)
    cached.rerank("q", candidates(["a", "b", "c", "d", "e"]))
    assert len(cached._scores) == 3


class Broken:
    name = "broken"

    def __init__(self):
        self.calls = 0

    def rerank(self, query, cands):
        self.calls += 1
        return RerankResult(tuple(math.nan for _ in cands))


def test_a_malformed_answer_is_not_cached_and_still_falls_back():
    inner = Broken()
    cached = CachedReranker(inner)
    for _ in range(2):
        result = second_stage("q", candidates(["a", "b"]), cached, RerankPolicy.RRF)
        assert result.status is RerankStatus.FALLBACK and "non-finite" in result.reason
    assert inner.calls == 2 and not cached._scores
