"""Measuring the options on test queries: the reciprocal rank of each query's answer under every first-stage
weighting and every second-stage option. It runs the pipeline's own steps (`Searcher.plan`, `retrieve`,
`first_stage`, `second_stage`) on `SearchRequest`s, over a small copy of the index (`small_copy`) for queries
made from the documents, over the index itself for judged ones."""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from funnel.calibrate.options import FIRST_STAGES, MEASURED, FirstStageOption
from funnel.calibrate.queries import PseudoQuery
from funnel.calibrate.small_copy import small_copy
from funnel.errors import BackendUnavailable
from funnel.index.base import ScoredChunk
from funnel.rerank.policies import RerankPolicy, ordered
from funnel.retrieve.first_stage import Retrieval
from funnel.types import Candidate, Chunk, RerankStatus

if TYPE_CHECKING:
    from funnel.search import Searcher, SearchRequest

RR_DEPTH = 10
Retrieved = tuple[list[ScoredChunk], list[ScoredChunk]]


def retrieved(
    pipeline: Searcher, queries: list[PseudoQuery], sources: dict[str, Chunk] | None
) -> tuple[list[SearchRequest], list[Retrieved]]:
    """Each query's request and its BM25 and dense lists, on a small copy of the index (the index itself when
    `sources` is None: judged queries edit nothing). A request asks for the search's window under the 1:1
    hybrid (every weighting is fused from the same two lists) and the replace policy (the window is scored
    once; every option orders those scores)."""
    requests = [pipeline.plan(q.text, candidates=pipeline.config.grouping.candidates, policy=RerankPolicy.REPLACE,
                              retrieval=Retrieval.HYBRID) for q in queries]
    with tempfile.TemporaryDirectory(prefix="funnel-calibrate-") as tmp:
        searched = pipeline if sources is None else pipeline.over(
            small_copy(pipeline, requests, queries, sources, tmp))
        return requests, [searched.retrieve(r) for r in requests]


def weighted(request: SearchRequest, option: FirstStageOption) -> SearchRequest:
    """The request with the first stage's RRF weights of `option`."""
    fs = replace(request.first_stage, bm25_weight=option.bm25_weight, dense_weight=option.dense_weight)
    return replace(request, first_stage=fs)


def first_stage_rr(
    pipeline: Searcher, queries: list[PseudoQuery], requests: list[SearchRequest], lists: list[Retrieved]
) -> dict[str, list[float]]:
    """Each first-stage option's reciprocal rank per query, its window fused from the retrieved lists."""
    return {
        o.name: [reciprocal_rank([c.chunk.chunk_id for c in pipeline.first_stage(weighted(r, o), found)],
                                 q.relevant)
                 for q, r, found in zip(queries, requests, lists)]
        for o in FIRST_STAGES
    }


def windows(
    pipeline: Searcher, requests: list[SearchRequest], lists: list[Retrieved], option: FirstStageOption
) -> list[list[Candidate]]:
    """The windows the chosen first stage hands the second."""
    return [pipeline.first_stage(weighted(r, option), found) for r, found in zip(requests, lists)]


def second_stage_rr(
    pipeline: Searcher, queries: list[PseudoQuery], requests: list[SearchRequest],
    windows: list[list[Candidate]],
    progress: Callable[[int, int], None] | None,
) -> dict[str, list[float]]:
    """Each second-stage option's reciprocal rank per query, over the chosen first stage's windows: each
    window scored once by `Searcher.second_stage` (its depth, timeout and score checks), and every option's
    order made from those scores as the second stage makes it (`ordered`)."""
    policies = {o.label: o.policy(pipeline.config.rerank) for o in MEASURED}
    rr: dict[str, list[float]] = {option.label: [] for option in MEASURED}
    for done, (query, request, window) in enumerate(zip(queries, requests, windows), start=1):
        scores = _scores(pipeline, request, window)
        for name, policy in policies.items():
            hits = ordered(policy, window, scores)
            rr[name].append(reciprocal_rank([h.chunk.chunk_id for h in hits], query.relevant))
        if progress:
            progress(done, len(queries))
    return rr


def _scores(pipeline: Searcher, request: SearchRequest, window: list[Candidate]) -> list[float]:
    """The reranker's scores of the window's scored head, in window order. A reranker that fails stops the
    calibration (a server down or a broken model): nothing is stored, so the previous calibration stays."""
    result = pipeline.second_stage(request, window)
    if result.status is RerankStatus.FALLBACK:
        raise BackendUnavailable(
            f"calibration stopped: {result.reason[:300]}; the previous calibration is kept")
    by_id = {h.chunk.chunk_id: h.rerank_score for h in result.hits if h.rerank_score is not None}
    return [by_id[c.chunk.chunk_id] for c in window[: len(by_id)]]


def reciprocal_rank(order: list[str], relevant: frozenset[str]) -> float:
    for rank, chunk_id in enumerate(order[:RR_DEPTH], start=1):
        if chunk_id in relevant:
            return 1.0 / rank
    return 0.0


def languages(chunks: list[Chunk]) -> dict[str, float]:
    """The share of distinct chunks per detected language (`funnel.analyze.detect`), most common first."""
    unique = {c.chunk_id: c.language for c in chunks if c.kind != "code" and c.language}
    counts = Counter(unique.values())
    total = sum(counts.values())
    return {lang: round(n / total, 3) for lang, n in counts.most_common(5)} if total else {}
