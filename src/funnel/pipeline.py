"""The pipeline: one direction, from a query to documents (and an answer).

query -> dense top-N + BM25 top-N -> RRF -> candidates -> rerank (+policy, fallback) -> group -> top-k
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from funnel.calibrate import DEFAULT_QUERIES, Calibration, calibrate
from funnel.embed.base import Embedder
from funnel.errors import ConfigError, StoreError
from funnel.generate.base import Generator
from funnel.generate.context import with_continuations
from funnel.group import group
from funnel.index.base import Filter, Store
from funnel.indexer import Indexer, IngestReport, PageProgress, Progress
from funnel.ingest.walk import FileLimits
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
    policy: RerankPolicy = RerankPolicy.AUTO  # auto: the index's calibration decides (funnel.calibrate)
    guaranteed: int = 2
    rrf_k: float = 60.0
    rerank_weight: float = 1.0  # the reranker's weight under an explicit rrf policy
    rerank_timeout_s: float | None = 30.0
    chunks_per_document: int = 3

    def __post_init__(self):
        if self.k < 1:
            raise ConfigError(f"k must be at least 1, got {self.k}")
        if self.candidates < 1:
            raise ConfigError(f"candidates must be at least 1, got {self.candidates}")
        if self.guaranteed < 0:
            raise ConfigError(f"guaranteed slots must be 0 or more, got {self.guaranteed}")
        if self.rerank_weight < 0:
            raise ConfigError(f"the reranker weight must be 0 or more, got {self.rerank_weight}")


@dataclass(frozen=True)
class ResolvedPolicy:
    """The policy a search runs under once `auto` is looked up in the index's calibration."""

    policy: RerankPolicy
    weight: float
    label: str  # "rrf", or "auto: rrf:1" / "auto: first_stage"
    reason: str = ""  # why the reranker is not run, when it is not


# How long a pipeline trusts the calibration it read (another process may recalibrate the index).
CALIBRATION_TTL_S = 30.0


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
        limits: FileLimits | None = None,
    ):
        self.store = store
        self.embedder = embedder
        self.reranker = reranker
        self.config = config or SearchConfig()
        if generator is None:
            from funnel.generate.extractive import ExtractiveGenerator

            generator = ExtractiveGenerator(embedder)
        self.generator = generator
        self.indexer = Indexer(store, embedder, max_tokens, limits)
        self._calibration: tuple[float, int, Calibration | None] | None = None  # (read at, index version, it)

    def calibration(self, version: int | None = None) -> Calibration | None:
        """The index's stored `Calibration`, or None; re-read when the index changed or after a while."""
        now = time.monotonic()
        cached = self._calibration
        if cached is not None and now - cached[0] < CALIBRATION_TTL_S and (version is None or version == cached[1]):
            return cached[2]
        data = self.store.read_calibration()
        calibration = Calibration.from_json(data) if data is not None else None
        self._calibration = (now, version if version is not None else -1, calibration)
        return calibration

    def calibrate(self, n_queries: int | None = None, progress=None) -> Calibration:
        """Measure the second stage on this index (`funnel.calibrate`) and store the choice with it. An
        interruption before the end leaves the previous calibration as it was (nothing is written until
        the whole measurement is done)."""
        config = self.config
        n_queries = n_queries or DEFAULT_QUERIES
        result = calibrate(
            self.store, self.embedder, self.reranker, config.first_stage, config.candidates, config.guaranteed,
            config.rrf_k, config.chunks_per_document, n_queries=n_queries, progress=progress,
        )
        self.store.write_calibration(result.to_json())
        self._calibration = None
        return result

    def calibration_problem(self) -> str | None:
        """Why `auto` would not use a calibration on this index now (none, or made with other models)."""
        try:
            calibration = self.calibration()
        except StoreError as e:
            return str(e)
        if calibration is None:
            return "the index is not calibrated"
        if self.reranker is None:
            return None
        return calibration.mismatch(self.reranker.name, self.embedder.name)

    def resolve_policy(self, policy: RerankPolicy, version: int | None = None) -> ResolvedPolicy:
        """`auto` -> the calibrated policy when the calibration was made with this reranker and embedder;
        otherwise the first-stage order, saying why. An explicit policy is taken as it is."""
        if policy is not RerankPolicy.AUTO:
            weight = self.config.rerank_weight
            label = f"rrf:{weight:g}" if policy is RerankPolicy.RRF and weight != 1.0 else policy.value
            return ResolvedPolicy(policy, weight, label)
        if self.reranker is None:
            return ResolvedPolicy(RerankPolicy.NONE, 0.0, "auto: first_stage", "no reranker configured")
        try:
            calibration = self.calibration(version)
        except StoreError as e:
            return ResolvedPolicy(RerankPolicy.NONE, 0.0, "auto: first_stage", str(e))
        if calibration is None:
            return ResolvedPolicy(RerankPolicy.NONE, 0.0, "auto: first_stage",
                                  "the index is not calibrated; run `funnel calibrate`")
        mismatch = calibration.mismatch(self.reranker.name, self.embedder.name)
        if mismatch:
            return ResolvedPolicy(RerankPolicy.NONE, 0.0, "auto: first_stage",
                                  f"{mismatch}; run `funnel calibrate`")
        label = f"auto: {calibration.option}"
        if calibration.policy is RerankPolicy.NONE:
            return ResolvedPolicy(RerankPolicy.NONE, 0.0, label, f"calibration: {calibration.reason}")
        return ResolvedPolicy(calibration.policy, calibration.weight, label)

    def ingest(
        self, paths: list[str | Path], progress: Progress | None = None, pages: PageProgress | None = None
    ) -> IngestReport:
        return self.indexer.ingest_paths([Path(p) for p in paths], progress, pages)

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
        requested = config.policy if policy is None else RerankPolicy.parse(policy)
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

        resolved = self.resolve_policy(requested, info.version)
        timings: dict[str, float] = {}
        t0 = time.perf_counter()
        candidates = first_stage(
            self.store, self.embedder, query, max(config.candidates, k), fs_config, filter,
            max_per_document=config.chunks_per_document,
        )
        t1 = time.perf_counter()
        second = second_stage(
            query, candidates, self.reranker, resolved.policy, config.guaranteed, config.rrf_k,
            config.rerank_timeout_s, resolved.weight,
        )
        t2 = time.perf_counter()
        documents = group(second.hits, k, config.chunks_per_document)
        t3 = time.perf_counter()
        timings.update(first_stage=1000 * (t1 - t0), rerank=1000 * (t2 - t1), group=1000 * (t3 - t2))
        reason = resolved.reason or second.reason
        if second.truncated:
            reason = (reason + "; " if reason else "") + f"{len(second.truncated)} candidate(s) truncated"
        return SearchResult(
            query=query,
            documents=tuple(documents),
            hits=tuple(second.hits),
            rerank_status=second.status,
            rerank_reason=reason,
            policy=resolved.label,
            timings_ms=timings,
            notes=notes,
        )

    def ask(self, question: str, k: int | None = None, policy: RerankPolicy | str | None = None) -> Answer:
        result = with_continuations(self.search(question, k=k, policy=policy), self.store)
        t0 = time.perf_counter()
        answer = self.generator.answer(result.query, result)
        result.timings_ms["generate"] = 1000 * (time.perf_counter() - t0)
        return answer
