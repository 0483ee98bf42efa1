"""A lexical reranker: BM25 of the query against the candidate passages, with no model at all.

Weak next to a cross-encoder (it sees the words the first stage's BM25 already saw), but real, instant and
deterministic: it lets `funnel serve` and the HTTP backends be exercised end to end without model files,
and it is a floor any learned reranker has to beat.

The candidate set is the corpus: document frequencies and the average length come from the passages
given, so a term that every candidate shares counts for little. Scores are BM25 (Lucene's idf,
log(1 + (N - df + 0.5) / (df + 0.5))), kept as `raw_scores`; `scores` are s / (1 + s), in 0..1 and in the
same order.
"""

from __future__ import annotations

import math
import re
from collections import Counter

from funnel.types import Candidate, RerankResult

_TOKEN = re.compile(r"\w+")


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.casefold())


class LexicalReranker:
    name = "lexical"

    def __init__(self, k1: float = 1.2, b: float = 0.75):
        self.k1 = k1
        self.b = b

    def rerank(self, query: str, candidates: list[Candidate]) -> RerankResult:
        raw = tuple(bm25_scores(tokens(query), [tokens(c.chunk.text) for c in candidates], self.k1, self.b))
        return RerankResult(tuple(s / (1.0 + s) for s in raw), raw_scores=raw)


def bm25_scores(query: list[str], passages: list[list[str]], k1: float = 1.2, b: float = 0.75) -> list[float]:
    """BM25 of each passage for the query's distinct terms, with the passages as the whole corpus."""
    n = len(passages)
    if n == 0:
        return []
    avg_len = sum(map(len, passages)) / n or 1.0
    counts = [Counter(p) for p in passages]
    terms = sorted(set(query))  # sorted: the same float sums in every process
    df = {t: sum(1 for c in counts if t in c) for t in terms}
    idf = {t: math.log(1.0 + (n - df[t] + 0.5) / (df[t] + 0.5)) for t in terms}
    scores = []
    for passage, tf in zip(passages, counts):
        norm = k1 * (1.0 - b + b * len(passage) / avg_len)
        scores.append(sum(idf[t] * tf[t] * (k1 + 1.0) / (tf[t] + norm) for t in terms if tf[t]))
    return scores
