"""Reciprocal Rank Fusion (Cormack, Clarke & Buettcher, SIGIR 2009).

score(d) = sum over rankings r of  w_r / (k + rank_r(d)),  ranks 1-based; a ranking that did not
return d contributes nothing.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence


def rrf(
    rankings: Sequence[Sequence[Hashable]],
    k: float = 60.0,
    weights: Sequence[float] | None = None,
    ks: Sequence[float] | None = None,
) -> list[tuple[Hashable, float]]:
    """Fuse ranked id lists. Returns (id, score) best first; ties keep first-seen order (stable).
    `ks` gives each ranking its own k (a small k makes a ranking's order decisive); default `k` for all."""
    if weights is None:
        weights = [1.0] * len(rankings)
    if ks is None:
        ks = [k] * len(rankings)
    if len(weights) != len(rankings) or len(ks) != len(rankings):
        raise ValueError(f"{len(weights)} weights and {len(ks)} ks for {len(rankings)} rankings")
    if any(value <= 0 for value in ks):
        raise ValueError(f"RRF k must be positive, got {min(ks)}")
    scores: dict[Hashable, float] = {}
    for ranking, weight, ranking_k in zip(rankings, weights, ks):
        for rank, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + weight / (ranking_k + rank)
    return sorted(scores.items(), key=lambda kv: -kv[1])
