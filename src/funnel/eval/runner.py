"""Run several pipeline variants over one index, query by query, sharing the expensive work.

Per query the first stage retrieves once (BM25 list + dense list), each variant's candidates are fused
from those lists, and the reranker scores each base's candidate window once; every policy is then
applied to the same scores. So `bm25`, `dense`, `hybrid` and three rerank policies cost about one
hybrid search plus one rerank, and differences between variants are differences of method, not noise.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from funnel.eval.beir import EvalSet
from funnel.eval.questions import page_unit, source_key
from funnel.errors import ConfigError
from funnel.eval.variants import Variant
from funnel.generate.base import Generator
from funnel.generate.context import with_continuations
from funnel.pipeline import Pipeline, SearchRequest
from funnel.rerank.policies import Policy, RerankPolicy, Rrf, SecondStageResult, identity, ordered
from funnel.retrieve.first_stage import Retrieval
from funnel.types import Candidate, Hit, RerankStatus, SearchResult

STAGES = ("first_stage", "rerank", "group", "answer")


@dataclass
class VariantRun:
    variant: Variant
    rankings: dict[str, list[str]] = field(default_factory=dict)  # qid -> judged units, best first
    page_rankings: dict[str, list[str]] = field(default_factory=dict)  # qid -> "file.pdf#p3" units, best first
    passed: dict[str, bool] = field(default_factory=dict)  # qid -> answer contains every expected string
    # qid -> the answer or its quote (a reader's answer shows the picker's sentences beside it) holds them all
    passed_with_quote: dict[str, bool] = field(default_factory=dict)
    quoted: int = 0  # answers that had a quote beside them
    abstained: dict[str, bool] = field(default_factory=dict)  # qid -> the answer said the documents hold none
    fallbacks: Counter = field(default_factory=Counter)  # reason -> queries that fell back
    answer_fallbacks: Counter = field(default_factory=Counter)  # LLM failure -> answers given by the fallback
    skipped_reason: str = ""


@dataclass
class EvalRun:
    evalset: EvalSet
    variants: dict[str, VariantRun]
    latency_ms: dict[str, list[float]]
    embedder: str
    reranker: str
    depth: int


def _unit(hit: Hit, evalset: EvalSet, qid: str) -> str:
    chunk = hit.chunk
    if evalset.by_path:
        return source_key(chunk.path, list(evalset.qrels.get(qid, {})))
    if evalset.level == "document":
        return evalset.parents.get(chunk.doc_id, chunk.doc_id)
    return chunk.doc_id


def _ranking(hits: list[Hit], evalset: EvalSet, qid: str, depth: int) -> list[str]:
    units: list[str] = []
    seen: set[str] = set()
    for hit in hits:
        unit = _unit(hit, evalset, qid)
        if unit not in seen:
            seen.add(unit)
            units.append(unit)
            if len(units) == depth:
                break
    return units


def _page_ranking(hits: list[Hit], evalset: EvalSet, qid: str, depth: int) -> list[str]:
    """Distinct pages in hit order, for a question judged at page level; hits without a page skip."""
    units: list[str] = []
    for hit in hits:
        if hit.chunk.page is None:
            continue
        unit = page_unit(_unit(hit, evalset, qid), hit.chunk.page)
        if unit not in units:
            units.append(unit)
            if len(units) == depth:
                break
    return units


def _window_then_tail(window_hits: list[Hit], tail: list[Candidate]) -> list[Hit]:
    """The product's final window first, then the deeper first stage in its own order (for recall@100)."""
    start = len(window_hits)
    return window_hits + [
        Hit(c, final_rank=start + i, final_score=c.fused_score) for i, c in enumerate(tail, start=1)
    ]


@dataclass
class _Query:
    """One query's shared work: each base's product window and deep first stage, and its reranked windows."""

    windows: dict[Retrieval, list[Candidate]]
    deep: dict[Retrieval, list[Candidate]]
    reranked: dict[Retrieval, SecondStageResult]


def _first_stages(pipeline: Pipeline, query: str, mode: Retrieval, depth: int) -> tuple[dict, dict]:
    """Per base (hybrid, bm25, dense): the window `Pipeline.search` hands the second stage, and the first
    stage `depth` deep without the per-document cap, all from one retrieval of `depth` per retriever."""
    def request(base: Retrieval, deep: bool) -> SearchRequest:
        plain = pipeline.plan(query, policy=RerankPolicy.NONE, retrieval=base)
        if not deep:
            return plain
        return replace(plain, candidates=depth, first_stage=replace(plain.first_stage, per_retriever=depth),
                       chunks_per_document=None)

    retrieved = pipeline.retrieve(request(mode, deep=True))
    bases = (Retrieval.HYBRID, Retrieval.BM25, Retrieval.DENSE)
    windows = {base: pipeline.first_stage(request(base, deep=False), retrieved) for base in bases}
    deep = {base: pipeline.first_stage(request(base, deep=True), retrieved) for base in bases}
    return windows, deep


def run_eval(
    pipeline: Pipeline,
    evalset: EvalSet,
    variants: list[Variant],
    depth: int = 100,
    generator: Generator | None = None,
    progress=None,
    answerers: Mapping[str, Generator] | None = None,
) -> EvalRun:
    """Every variant's ranking, per query. The top of each ranking is what `Pipeline.search` returns with
    that retrieval mode and policy (its own steps: same per-retriever N, same window with at most
    chunks_per_document per document); below it, a deeper first stage fills the ranking to `depth` so
    recall@100 can be measured. A variant with `+answer(NAME)` is answered by `answerers[NAME]`, the others
    by `generator`."""
    runs = {v.name: VariantRun(v) for v in variants}
    if pipeline.reranker is None:
        for v in variants:
            if v.reranks:
                runs[v.name].skipped_reason = "no reranker configured"
    active = [v for v in variants if not runs[v.name].skipped_reason]
    answers = bool(evalset.answers or evalset.abstain)
    built = answerers or {}
    missing = [v.name for v in variants if v.answerer and v.answerer not in built]
    if missing:
        raise ConfigError(f"no answerer was built for {', '.join(missing)}")
    generators = {v.name: built[v.answerer] if v.answerer else generator for v in variants}
    product = pipeline.plan("", policy=RerankPolicy.NONE)  # what a search asks of the first stage
    n_deep = max(product.first_stage.per_retriever, product.candidates, 3 * depth)
    needs_lexical = any(v.retrieval in (Retrieval.HYBRID, Retrieval.BM25) for v in active)
    needs_dense = any(v.retrieval in (Retrieval.HYBRID, Retrieval.DENSE) for v in active)
    mode = Retrieval.HYBRID if needs_lexical and needs_dense else (Retrieval.BM25 if needs_lexical else Retrieval.DENSE)
    policies = {v.name: _policy(pipeline, v) for v in active if v.reranks}
    latency: dict[str, list[float]] = {s: [] for s in STAGES}
    for done, (qid, query) in enumerate(evalset.queries.items(), start=1):
        t0 = time.perf_counter()
        windows, deep = _first_stages(pipeline, query, mode, n_deep)
        t1 = time.perf_counter()
        reranked = {  # each base's window scored once; every policy is applied to those scores
            base: pipeline.second_stage(pipeline.plan(query, policy=RerankPolicy.REPLACE, retrieval=base), windows[base])
            for base in {v.retrieval for v in active if v.reranks}
        }
        t2 = time.perf_counter()
        shared = _Query(windows, deep, reranked)
        answer_ms = default_ms = 0.0
        for v in active:
            spent = _run_variant(pipeline, evalset, runs[v.name], policies.get(v.name), qid, query, shared,
                                 depth, generators[v.name] if answers else None)
            default_ms += spent[0]
            answer_ms += spent[1]
        t3 = time.perf_counter()
        latency["first_stage"].append(1000 * (t1 - t0))
        latency["rerank"].append(1000 * (t2 - t1))
        latency["group"].append(1000 * (t3 - t2) - answer_ms - default_ms)
        if any(v.is_default for v in active):  # the whole `funnel search` of the default variant
            latency.setdefault("default_search", []).append(default_ms)
        latency["answer"].append(answer_ms)
        if progress:
            progress(done, len(evalset.queries))
    reranker = getattr(pipeline.reranker, "name", "none") if pipeline.reranker else "none"
    return EvalRun(evalset, runs, latency, pipeline.embedder.name, reranker, depth)


def _policy(pipeline: Pipeline, variant: Variant) -> Policy:
    """The variant's policy with the pipeline's parameters, and the variant's own reranker weight under rrf."""
    policy = pipeline.plan("", policy=variant.policy).policy.policy
    if not isinstance(policy, Rrf):
        return policy
    return replace(policy, weight=variant.weight, gate=policy.gate if variant.gate is None else variant.gate)


def _run_variant(
    pipeline: Pipeline, evalset: EvalSet, run: VariantRun, policy: Policy | None, qid: str, query: str,
    shared: _Query, depth: int, generator: Generator | None,
) -> tuple[float, float]:
    """One variant's ranking (and answer) for one query, into `run`; the ms its default search and its
    answer took."""
    v = run.variant
    head = shared.windows[v.retrieval]
    status = RerankStatus.SKIPPED
    default_ms = 0.0
    if v.is_default:  # the product's own search, calibration and all
        td = time.perf_counter()
        searched = pipeline.search(query)
        default_ms = 1000 * (time.perf_counter() - td)
        head, head_hits, status = [h.candidate for h in searched.hits], list(searched.hits), searched.rerank_status
        if status is RerankStatus.FALLBACK:
            run.fallbacks[searched.rerank_reason] += 1
    elif policy is not None:
        result = shared.reranked[v.retrieval]
        status = result.status
        if status is RerankStatus.OK:
            by_id = {h.chunk.chunk_id: h.rerank_score for h in result.hits if h.rerank_score is not None}
            head_hits = ordered(policy, head, [by_id[c.chunk.chunk_id] for c in head[: len(by_id)]])
        else:
            run.fallbacks[result.reason] += 1
            head_hits = identity(head)
    else:
        head_hits = identity(head)
    in_head = {c.chunk.chunk_id for c in head}
    hits = _window_then_tail(head_hits, [c for c in shared.deep[v.retrieval] if c.chunk.chunk_id not in in_head])
    run.rankings[qid] = _ranking(hits, evalset, qid, depth)
    if qid in evalset.pages:
        run.page_rankings[qid] = _page_ranking(hits, evalset, qid, depth)
    answer_ms = 0.0
    if generator is not None and (evalset.answers.get(qid) or qid in evalset.abstain):
        ta = time.perf_counter()
        _answer(pipeline, evalset, run, qid, query, head_hits, status, generator)
        answer_ms = 1000 * (time.perf_counter() - ta)
    return default_ms, answer_ms


def _answer(
    pipeline: Pipeline, evalset: EvalSet, run: VariantRun, qid: str, query: str, head_hits: list[Hit],
    status: RerankStatus, generator: Generator,
) -> None:
    """What `Pipeline.ask` would answer from the window's documents; passed when it holds every expected string."""
    documents = pipeline.group(pipeline.plan(query, policy=RerankPolicy.NONE), head_hits)
    result = SearchResult(query, tuple(documents), tuple(head_hits), status)
    answer = pipeline.answer(with_continuations(result, pipeline.store), generator)  # as `Pipeline.ask` does
    if answer.fallback_reason:
        run.answer_fallbacks[answer.fallback_reason.split(":", 1)[-1].strip()[:100]] += 1
    run.abstained[qid] = answer.abstained
    if qid in evalset.abstain:
        return
    text = answer.text.lower()
    run.passed[qid] = not answer.abstained and all(s.lower() in text for s in evalset.answers[qid])
    if answer.quote:
        run.quoted += 1
        shown = "\n".join([text, *(c.text.lower() for c in answer.quote)])
        run.passed_with_quote[qid] = not answer.abstained and all(s.lower() in shown for s in evalset.answers[qid])
    else:
        run.passed_with_quote[qid] = run.passed[qid]
