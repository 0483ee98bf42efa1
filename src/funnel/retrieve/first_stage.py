"""The first stage: dense top-N and BM25 top-N over the store, fused into over-fetched candidates."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from funnel.embed.base import Embedder, embed_queries
from funnel.config import Choice, check_ranges, setting
from funnel.index.base import Filter, ScoredChunk, Store
from funnel.retrieve.fusion import rrf
from funnel.types import Candidate, Chunk


class Retrieval(Choice):
    AUTO = "auto"  # hybrid, weighted as the index's calibration chose (funnel.calibrate); 1:1 uncalibrated
    HYBRID = "hybrid"
    BM25 = "bm25"
    DENSE = "dense"

    @property
    def lexical(self) -> bool:
        return self is not Retrieval.DENSE

    @property
    def dense(self) -> bool:
        return self is not Retrieval.BM25


@dataclass(frozen=True)
class FirstStageConfig:
    retrieval: Retrieval = setting(Retrieval.AUTO, f"the first stage: {Retrieval.help()} (auto: as the index's "
                                                    "calibration chose, else hybrid)")
    per_retriever: int = setting(50, "top-N from each of dense and BM25", ge=1, le=10000)
    rrf_k: float = setting(60.0, "the first stage's RRF k (BM25 + dense)", gt=0)
    bm25_weight: float = setting(1.0, "BM25's weight in the fusion", ge=0)
    dense_weight: float = setting(1.0, "the dense list's weight in the fusion", ge=0)

    def __post_init__(self):
        check_ranges(self)


@dataclass(frozen=True)
class Ranking:
    """A ranked list of chunks to fuse with the first stage's window (e.g. triage's stack frames)."""

    chunks: tuple[Chunk, ...]
    weight: float = 1.0
    k: float | None = None  # its RRF k; None: the first stage's


def first_stage(
    store: Store,
    embedder: Embedder,
    query: str,
    n_candidates: int,
    config: FirstStageConfig,
    filter: Filter | None = None,
    max_per_document: int | None = None,
) -> list[Candidate]:
    """Candidates in first-stage order, each carrying its BM25, dense and fused rank and score."""
    lexical, dense = retrieve(store, embedder, query, max(config.per_retriever, n_candidates), config, filter)
    return fuse(lexical, dense, n_candidates, config, max_per_document)


def retrieve(
    store: Store,
    embedder: Embedder,
    query: str,
    n: int,
    config: FirstStageConfig,
    filter: Filter | None = None,
) -> tuple[list[ScoredChunk], list[ScoredChunk]]:
    """The BM25 and dense top-n lists the configured retrieval mode asks for (the other stays empty)."""
    lexical: list[ScoredChunk] = []
    dense: list[ScoredChunk] = []
    if config.retrieval.lexical:
        lexical = store.search_lexical(query, n, filter)
    if config.retrieval.dense:
        dense = store.search_dense(embed_queries(embedder, [query])[0], n, filter)
    return lexical, dense


def fuse(
    lexical: list[ScoredChunk],
    dense: list[ScoredChunk],
    n_candidates: int,
    config: FirstStageConfig,
    max_per_document: int | None = None,
) -> list[Candidate]:
    """RRF of the two lists (either may be empty), top n_candidates, with every rank kept.

    `max_per_document` caps how many chunks one document may bring, so a long document cannot fill the
    whole candidate window and leave fewer than k documents to return (see `_cap`)."""
    by_id = {s.chunk.chunk_id: s.chunk for s in lexical + dense}
    bm25_rank = {s.chunk.chunk_id: (r, s.score) for r, s in enumerate(lexical, start=1)}
    dense_rank = {s.chunk.chunk_id: (r, s.score) for r, s in enumerate(dense, start=1)}
    fused = rrf(
        [list(bm25_rank), list(dense_rank)],
        k=config.rrf_k,
        weights=[config.bm25_weight, config.dense_weight],
    )
    past_cap: set[str] = set()
    if max_per_document is not None:
        fused, past_cap = _cap(fused, by_id, n_candidates, max_per_document)
    candidates = []
    for rank, (chunk_id, score) in enumerate(fused[:n_candidates], start=1):
        b = bm25_rank.get(chunk_id, (None, None))
        d = dense_rank.get(chunk_id, (None, None))
        candidates.append(
            Candidate(
                chunk=by_id[chunk_id],
                fused_rank=rank,
                fused_score=score,
                bm25_rank=b[0],
                bm25_score=b[1],
                dense_rank=d[0],
                dense_score=d[1],
                past_cap=chunk_id in past_cap,
            )
        )
    return candidates


def _cap(
    fused: list[tuple[str, float]], by_id: dict[str, Chunk], n_candidates: int, max_per_document: int
) -> tuple[list[tuple[str, float]], set[str]]:
    """The fused list cut to the window, at most `max_per_document` chunks of a document first.

    The cap decides which chunks compete for the window when there are many documents. When it would
    leave the window short (one or a few long documents: the main case of a PDF manual), the best chunks
    past the cap fill it, so the window holds `n_candidates` chunks whenever the retrievers found that
    many. The window keeps fused order. Returns it and the ids that went past the cap."""
    taken: Counter[str] = Counter()
    within: list[tuple[str, float]] = []
    past: list[tuple[str, float]] = []
    for item in fused:
        doc_id = by_id[item[0]].doc_id
        taken[doc_id] += 1
        (within if taken[doc_id] <= max_per_document else past).append(item)
    fill = {chunk_id for chunk_id, _ in past[: max(0, n_candidates - len(within))]}
    keep = {chunk_id for chunk_id, _ in within[:n_candidates]} | fill
    return [item for item in fused if item[0] in keep], fill


def fuse_rankings(
    candidates: list[Candidate], own: Ranking, extra: list[Ranking], n_candidates: int, max_per_document: int | None
) -> list[Candidate]:
    """Weighted RRF of `extra` rankings and the first stage's window (`candidates`, ranked as `own`), at
    most `max_per_document` chunks of a document, cut at `n_candidates` or the number of chunks the
    extra rankings bring, whichever is larger (none of them is cut away unfused)."""
    by_id = {c.chunk.chunk_id: c for c in candidates}
    chunks = {c.chunk_id: c for ranking in extra for c in ranking.chunks}
    rankings = [*extra, own]
    fused = rrf([list(dict.fromkeys(c.chunk_id for c in r.chunks)) for r in rankings],
                weights=[r.weight for r in rankings], ks=[r.k for r in rankings])
    per_doc: Counter[str] = Counter()
    out: list[Candidate] = []
    for chunk_id, score in fused:
        found = by_id.get(chunk_id)
        chunk = found.chunk if found else chunks[chunk_id]
        if max_per_document is not None and per_doc[chunk.doc_id] >= max_per_document:
            continue
        per_doc[chunk.doc_id] += 1
        rank = len(out) + 1
        if found:
            out.append(Candidate(chunk, rank, score, found.bm25_rank, found.bm25_score,
                                 found.dense_rank, found.dense_score))
        else:
            out.append(Candidate(chunk, rank, score))
        if len(out) >= max(n_candidates, len(chunks)):
            break
    return out
