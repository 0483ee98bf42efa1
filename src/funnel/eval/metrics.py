"""Retrieval metrics per query, computed by ir-measures (pytrec_eval underneath)."""

from __future__ import annotations

import ir_measures
from ir_measures import RR, R, Success, nDCG

# Our names (results.json keys) -> ir-measures measures.
MEASURES = {
    "ndcg@10": nDCG @ 10,
    "recall@100": R @ 100,
    "mrr@10": RR @ 10,
    "recall@10": R @ 10,
    "hit@1": Success @ 1,
    "hit@5": Success @ 5,
}
HEADLINE = "ndcg@10"


def as_run(rankings: dict[str, list[str]]) -> dict[str, dict[str, float]]:
    """Rankings -> run with strictly decreasing scores (pytrec_eval breaks ties by id, not by our order)."""
    return {qid: {unit: 1.0 / rank for rank, unit in enumerate(units, start=1)} for qid, units in rankings.items()}


def per_query(qrels: dict[str, dict[str, int]], rankings: dict[str, list[str]]) -> dict[str, dict[str, float]]:
    """metric -> qid -> value, for every judged query (an empty ranking scores 0, not 'missing')."""
    judged = {q: rel for q, rel in qrels.items() if rel}
    values = {name: {qid: 0.0 for qid in judged} for name in MEASURES}
    names = {str(m): name for name, m in MEASURES.items()}
    run = {q: r for q, r in as_run(rankings).items() if q in judged and r}
    if run:
        for m in ir_measures.iter_calc(list(MEASURES.values()), judged, run):
            values[names[str(m.measure)]][m.query_id] = float(m.value)
    return values


def mean(values: dict[str, float]) -> float:
    return sum(values.values()) / len(values) if values else 0.0


def first_relevant_rank(qrels: dict[str, int], ranking: list[str]) -> int | None:
    for rank, unit in enumerate(ranking, start=1):
        if qrels.get(unit, 0) > 0:
            return rank
    return None
