"""The pipeline: one direction, from a query to documents (and an answer).

query -> dense top-N + BM25 top-N -> RRF -> candidates -> rerank (+policy, fallback) -> group -> top-k
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from funnel.embed.base import Embedder
from funnel.errors import ConfigError, StoreError
from funnel.generate.base import Generator
from funnel.group import group
from funnel.index.base import Filter, Store
from funnel.indexer import Indexer, IngestReport, Progress
from funnel.rerank.base import Reranker
from funnel.rerank.policies import RerankPolicy, second_stage
from funnel.retrieve.first_stage import FirstStageConfig, Retrieval, first_stage
from funnel.types import Answer, SearchResult

# A query longer than this is cut before retrieval: BM25 over a 100 KB "query" is a scan of the index.
MAX_QUERY_CHARS = 4000


@dataclass(frozen=True)
class SearchConfig:
    k: int = 5  # documents returned
    candidates: int = 25  # chunks handed to the second stage (over-fetch)
    first_stage: FirstStageConfig = field(default_factory=FirstStageConfig)
    policy: RerankPolicy = RerankPolicy.GUARANTEED_SLOTS
    guaranteed: int = 2
    rrf_k: float = 60.0
    rerank_timeout_s: float | None = 30.0
    chunks_per_document: int = 3

    def __post_init__(self):
        if self.k < 1:
            raise ConfigError(f"k must be at least 1, got {self.k}")
        if self.candidates < 1:
            raise ConfigError(f"candidates must be at least 1, got {self.candidates}")
        if self.guaranteed < 0:
            raise ConfigError(f"guaranteed slots must be 0 or more, got {self.guaranteed}")


class Pipeline:
    """Ties a store, an embedder, an optional reranker and a generator together. Holds no global state."""

    def __init__(
        self,
        store: Store,
        embedder: Embedder,
        reranker: Reranker | None = None,
        generator: Generator | None = None,
        config: SearchConfig | None = None,
        max_tokens: int | None = None,
    ):
        self.store = store
        self.embedder = embedder
        self.reranker = reranker
        self.config = config or SearchConfig()
        if generator is None:
            from funnel.generate.extractive import ExtractiveGenerator

            generator = ExtractiveGenerator(embedder)
        self.generator = generator
        self.indexer = Indexer(store, embedder, max_tokens)

    def ingest(self, paths: list[str | Path], progress: Progress | None = None) -> IngestReport:
        return self.indexer.ingest_paths([Path(p) for p in paths], progress)

    def search(
        self,
        query: str,
        k: int | None = None,
        policy: RerankPolicy | str | None = None,
        retrieval: Retrieval | str | None = None,
        filter: Filter | None = None,
    ) -> SearchResult:
        query = " ".join(query.split())
        if not query:
            raise ConfigError("the query is empty")
        notes: tuple[str, ...] = ()
        if len(query) > MAX_QUERY_CHARS:
            notes = (f"query cut from {len(query)} to {MAX_QUERY_CHARS} characters",)
            query = query[:MAX_QUERY_CHARS]
        config = self.config
        k = config.k if k is None else k
        if k < 1:
            raise ConfigError(f"k must be at least 1, got {k}")
        policy = config.policy if policy is None else RerankPolicy.parse(policy)
        fs_config = config.first_stage
        if retrieval is not None:
            fs_config = FirstStageConfig(
                Retrieval.parse(retrieval), fs_config.per_retriever, fs_config.rrf_k,
                fs_config.bm25_weight, fs_config.dense_weight,
            )
        info = self.store.info()
        if info is None:
            raise StoreError("the index is empty: run `funnel ingest PATH` first")
        if (info.embedder, info.dim) != (self.embedder.name, self.embedder.dim):
            raise ConfigError(
                f"the index was built with embedder {info.embedder} (dim {info.dim}), but this search uses "
                f"{self.embedder.name} (dim {self.embedder.dim}); search with the index's embedder"
            )

        timings: dict[str, float] = {}
        t0 = time.perf_counter()
        candidates = first_stage(
            self.store, self.embedder, query, max(config.candidates, k), fs_config, filter,
            max_per_document=config.chunks_per_document,
        )
        t1 = time.perf_counter()
        second = second_stage(
            query, candidates, self.reranker, policy, config.guaranteed, config.rrf_k, config.rerank_timeout_s
        )
        t2 = time.perf_counter()
        documents = group(second.hits, k, config.chunks_per_document)
        t3 = time.perf_counter()
        timings.update(first_stage=1000 * (t1 - t0), rerank=1000 * (t2 - t1), group=1000 * (t3 - t2))
        reason = second.reason
        if second.truncated:
            reason = (reason + "; " if reason else "") + f"{len(second.truncated)} candidate(s) truncated"
        return SearchResult(
            query=query,
            documents=tuple(documents),
            hits=tuple(second.hits),
            rerank_status=second.status,
            rerank_reason=reason,
            policy=policy.value,
            timings_ms=timings,
            notes=notes,
        )

    def ask(self, question: str, k: int | None = None, policy: RerankPolicy | str | None = None) -> Answer:
        result = self.search(question, k=k, policy=policy)
        t0 = time.perf_counter()
        answer = self.generator.answer(result.query, result)
        result.timings_ms["generate"] = 1000 * (time.perf_counter() - t0)
        return answer
