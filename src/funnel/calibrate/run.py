"""One calibration: test queries (made from the documents, or judged), the first stage chosen from its
weightings, then the second stage's options measured over that first stage's windows and one chosen."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING

import numpy as np

from funnel.calibrate.abstain import abstention_threshold
from funnel.calibrate.decide import choose_first_stage, decide
from funnel.calibrate.judged import Judged, judged_queries
from funnel.calibrate.measure import Retrieved, first_stage_rr, languages, retrieved, second_stage_rr, windows
from funnel.calibrate.options import FirstStageOption
from funnel.calibrate.queries import DEFAULT_QUERIES, FIRST_STAGE_QUERIES, MIN_QUERIES, PseudoQuery, generated
from funnel.calibrate.record import JUDGED, Calibration
from funnel.errors import ConfigError, StoreError
from funnel.rerank.policies import RerankPolicy
from funnel.types import Chunk

if TYPE_CHECKING:
    from funnel.search import Searcher, SearchRequest

Sample = tuple[list[PseudoQuery], dict[str, Chunk]]


def calibrate(pipeline: Searcher, *, seed: int = 0, **options) -> Calibration:
    """`measure_and_choose` (its options: n_queries, kinds, judged, progress), with the abstention threshold
    of this index (`funnel.calibrate.abstain`)."""
    result = measure_and_choose(pipeline, seed=seed, **options)
    return replace(result, **abstention_threshold(pipeline, seed, options.get("progress")))


def measure_and_choose(
    pipeline: Searcher,
    *,
    n_queries: int = DEFAULT_QUERIES,
    seed: int = 0,
    kinds: tuple[str, ...] = ("title", "sentence"),
    judged: list[Judged] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Calibration:
    """Measure every option on pseudo-queries from `pipeline`'s index, or on `judged` queries when given, and
    choose the first stage's weights and then the second stage's option (see `funnel.calibrate`), with the
    pipeline's models and search config. Without a reranker only the first stage is chosen. Reads the
    index, writes nothing: the caller stores the result."""
    started = time.perf_counter()
    info = pipeline.store.info()
    if info is None:
        raise StoreError("the index is empty: run `funnel ingest PATH` first")
    reranker = pipeline.reranker
    made = dict(
        reranker=reranker.name if reranker is not None else "none", embedder=pipeline.embedder.name,
        index_version=info.version, index_chunks=info.chunks,
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )
    if judged:
        return _calibrate_judged(pipeline, judged, made, started, progress)
    queries, sources = generated(pipeline.store, n_queries, seed, kinds)
    if len(queries) < MIN_QUERIES:
        return Calibration(
            RerankPolicy.NONE, 0.0,
            f"too small to calibrate: {len(queries)} test queries could be made from {info.chunks} chunks "
            f"(at least {MIN_QUERIES} needed); the first-stage order is kept",
            queries=len(queries), seconds=time.perf_counter() - started,
            languages=languages(list(sources.values())), **made,
        )
    described = f"{len(queries)} test queries made from this corpus"
    wide = generated(pipeline.store, max(n_queries, FIRST_STAGE_QUERIES), seed, kinds)
    return _measure_and_decide(pipeline, queries, sources, described, made, started, progress,
                               first_stage_sample=wide)


def _calibrate_judged(
    pipeline: Searcher, judged: list[Judged], made: dict, started: float,
    progress: Callable[[int, int], None] | None,
) -> Calibration:
    """Every option on the judged queries that name a document of this index, over the index itself."""
    queries = judged_queries(pipeline.store, judged)
    if len(queries) < MIN_QUERIES:
        raise ConfigError(
            f"only {len(queries)} of {len(judged)} judged queries name a document in this index (at least "
            f"{MIN_QUERIES} needed): check their ids or paths against `funnel search`, or calibrate with "
            "queries made from the documents (`funnel calibrate --generated`)"
        )
    unused = len(judged) - len(queries)
    described = f"{len(queries)} judged queries"
    if unused:
        described += f" ({unused} naming no document here left out)"
    result = _measure_and_decide(pipeline, queries, None, described, made, started, progress)
    return replace(result, source=JUDGED, judged=[j.to_json() for j in judged])


def _measure_and_decide(
    pipeline: Searcher, queries: list[PseudoQuery], sources: dict[str, Chunk] | None, described: str,
    made: dict, started: float, progress: Callable[[int, int], None] | None,
    first_stage_sample: Sample | None = None,
) -> Calibration:
    """The first stage chosen (`_first_stage`), then the second stage's options measured over its windows for
    `queries`, on a small copy of the index (the index itself when `sources` is None: judged queries edit
    nothing)."""
    requests, lists = retrieved(pipeline, queries, sources)
    first, first_stage = _first_stage(pipeline, queries, requests, lists, described, first_stage_sample)
    chosen = windows(pipeline, requests, lists, first)
    held = [any(c.chunk.chunk_id in q.relevant for c in w) for q, w in zip(queries, chosen)]
    window_recall = float(np.mean(held))
    measured = languages([s.chunk for found in lists for ranked in found for s in ranked])
    if pipeline.reranker is None:
        return Calibration(RerankPolicy.NONE, 0.0, "no reranker configured", queries=len(queries),
                           window_recall=window_recall, seconds=time.perf_counter() - started,
                           languages=measured, **first_stage, **made)
    rr = second_stage_rr(pipeline, queries, requests, chosen, progress)
    result = decide(rr, queries, window_recall, described, started, made)
    main = next(iter(measured), None)
    if result.policy is RerankPolicy.NONE and main not in (None, "en"):
        mostly = f"this index is mostly {main} ({measured[main]:.0%} of the chunks measured)"
        reason = (f"{result.reason}; {mostly} and the reranker may read English only: a multilingual "
                  "reranker can be calibrated instead")
        result = replace(result, reason=reason)
    return replace(result, languages=measured, **first_stage)


def _first_stage(
    pipeline: Searcher, queries: list[PseudoQuery], requests: list[SearchRequest], lists: list[Retrieved],
    described: str, sample: Sample | None,
) -> tuple[FirstStageOption, dict]:
    """The first stage chosen from its options' reciprocal ranks (on `sample` when it is the larger, else on
    `queries`), and the calibration's fields that record it."""
    if sample is not None and len(sample[0]) > len(queries):
        queries = sample[0]
        requests, lists = retrieved(pipeline, queries, sample[1])
        described = f"{len(queries)} test queries made from this corpus"
    rr = first_stage_rr(pipeline, queries, requests, lists)
    first, reason, _ = choose_first_stage(rr, described)
    return first, dict(
        first_stage=first.name, bm25_weight=first.bm25_weight, dense_weight=first.dense_weight,
        first_stage_reason=reason, first_stage_mrr={k: float(np.mean(v)) for k, v in rr.items()},
    )
