"""Run several pipeline variants over one index, query by query, sharing the expensive work.

Per query the first stage retrieves once (BM25 list + dense list), each variant's candidates are fused
from those lists, and the reranker scores each base's candidate window once; every policy is then
applied to the same scores. So `bm25`, `dense`, `hybrid` and three rerank policies cost about one
hybrid search plus one rerank, and differences between variants are differences of method, not noise.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

from funnel.eval.beir import EvalSet
from funnel.eval.questions import page_unit, source_key
from funnel.eval.variants import Variant
from funnel.generate.base import Generator
from funnel.generate.context import with_continuations
from funnel.group import group
from funnel.pipeline import Pipeline
from funnel.rerank.policies import RerankPolicy, apply_policy, identity, second_stage
from funnel.retrieve.first_stage import FirstStageConfig, Retrieval, fuse, retrieve
from funnel.types import Candidate, Hit, RerankStatus, SearchResult

STAGES = ("first_stage", "rerank", "group", "answer")


@dataclass
class VariantRun:
    variant: Variant
    rankings: dict[str, list[str]] = field(default_factory=dict)  # qid -> judged units, best first
    page_rankings: dict[str, list[str]] = field(default_factory=dict)  # qid -> "file.pdf#p3" units, best first
    passed: dict[str, bool] = field(default_factory=dict)  # qid -> answer contains every expected string
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


def run_eval(
    pipeline: Pipeline,
    evalset: EvalSet,
    variants: list[Variant],
    depth: int = 100,
    generator: Generator | None = None,
    progress=None,
) -> EvalRun:
    """Every variant's ranking, per query. The top of each ranking is exactly what `Pipeline.search`
    would return with that retrieval mode and policy (same per-retriever N, same 25-chunk window with at
    most chunks_per_document per document); below it, a deeper first stage fills the ranking to `depth`
    so recall@100 can be measured."""
    config = pipeline.config
    fs = config.first_stage
    window = config.candidates
    n_product = max(fs.per_retriever, window)
    n_deep = max(n_product, 3 * depth)
    runs = {v.name: VariantRun(v) for v in variants}
    if pipeline.reranker is None:
        for v in variants:
            if v.reranks:
                runs[v.name].skipped_reason = "no reranker configured"
    active = [v for v in variants if not runs[v.name].skipped_reason]
    generator = generator if evalset.answers else None
    hybrid = FirstStageConfig(Retrieval.HYBRID, n_deep, fs.rrf_k, fs.bm25_weight, fs.dense_weight)
    needs_lexical = any(v.retrieval in (Retrieval.HYBRID, Retrieval.BM25) for v in active)
    needs_dense = any(v.retrieval in (Retrieval.HYBRID, Retrieval.DENSE) for v in active)
    mode = Retrieval.HYBRID if needs_lexical and needs_dense else (Retrieval.BM25 if needs_lexical else Retrieval.DENSE)
    retrieve_config = FirstStageConfig(mode, n_deep)
    latency: dict[str, list[float]] = {s: [] for s in STAGES}

    for done, (qid, query) in enumerate(evalset.queries.items(), start=1):
        t0 = time.perf_counter()
        lexical, dense = retrieve(pipeline.store, pipeline.embedder, query, n_deep, retrieve_config)
        lists = {Retrieval.HYBRID: (lexical, dense), Retrieval.BM25: (lexical, []), Retrieval.DENSE: ([], dense)}
        windows = {  # what search() hands to the second stage
            base: fuse(lex[:n_product], den[:n_product], window, hybrid, config.chunks_per_document)
            for base, (lex, den) in lists.items()
        }
        deep = {base: fuse(lex, den, n_deep, hybrid) for base, (lex, den) in lists.items()}
        t1 = time.perf_counter()
        reranked: dict[Retrieval, object] = {}
        for base in {v.retrieval for v in active if v.reranks}:
            reranked[base] = second_stage(
                query, windows[base], pipeline.reranker, RerankPolicy.REPLACE, timeout_s=config.rerank_timeout_s
            )
        t2 = time.perf_counter()
        answer_ms = default_ms = 0.0
        for v in active:
            head = windows[v.retrieval]
            status = RerankStatus.SKIPPED
            if v.is_default:  # the product's own search, calibration and all
                td = time.perf_counter()
                searched = pipeline.search(query)
                default_ms += 1000 * (time.perf_counter() - td)
                head, head_hits, status = [h.candidate for h in searched.hits], list(searched.hits), searched.rerank_status
                if status is RerankStatus.FALLBACK:
                    runs[v.name].fallbacks[searched.rerank_reason] += 1
            elif v.reranks:
                result = reranked[v.retrieval]
                status = result.status
                if status is RerankStatus.OK:
                    by_id = {h.chunk.chunk_id: h.rerank_score for h in result.hits}
                    head_hits = apply_policy(
                        v.policy, head, [by_id[c.chunk.chunk_id] for c in head], config.guaranteed, config.rrf_k,
                        v.weight,
                    )
                else:
                    runs[v.name].fallbacks[result.reason] += 1
                    head_hits = identity(head)
            else:
                head_hits = identity(head)
            in_head = {c.chunk.chunk_id for c in head}
            hits = _window_then_tail(head_hits, [c for c in deep[v.retrieval] if c.chunk.chunk_id not in in_head])
            runs[v.name].rankings[qid] = _ranking(hits, evalset, qid, depth)
            if qid in evalset.pages:
                runs[v.name].page_rankings[qid] = _page_ranking(hits, evalset, qid, depth)
            if generator is not None and evalset.answers.get(qid):
                ta = time.perf_counter()
                # What `Pipeline.ask` answers from: the window's documents only.
                documents = group(head_hits, config.k, config.chunks_per_document)
                result = SearchResult(query, tuple(documents), tuple(head_hits), status)
                result = with_continuations(result, pipeline.store)  # as `Pipeline.ask` does
                answer = generator.answer(query, result)
                if answer.fallback_reason:
                    runs[v.name].answer_fallbacks[answer.fallback_reason.split(":", 1)[-1].strip()[:100]] += 1
                text = answer.text.lower()
                runs[v.name].passed[qid] = all(s.lower() in text for s in evalset.answers[qid])
                answer_ms += 1000 * (time.perf_counter() - ta)
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
