"""The search half of the pipeline, over one store: a query planned into a `SearchRequest` (the config's
values; `auto` looked up in the index's calibration), then first stage -> second stage -> group.

`Searcher.search` chains the steps for a person's query; eval, triage and the calibration call them one by one.
`Pipeline` (funnel.pipeline) is a searcher that also ingests, answers and calibrates: calibration
(`funnel.calibrate`) runs these steps on the searcher its caller hands it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from funnel.analyze import LEGACY, has_cjk
from funnel.calibrate.record import Calibration
from funnel.embed.base import Embedder
from funnel.engine_config import EngineConfig, GroupingConfig, RerankConfig
from funnel.errors import ConfigError, StoreError
from funnel.generate import abstain
from funnel.group import group
from funnel.index.base import Filter, ScoredChunk, Store
from funnel.rerank.base import Reranker
from funnel.rerank.policies import (
    FirstStageOnly, Policy, PolicyChoice, RerankPolicy, Rrf, SecondStageResult, second_stage,
)
from funnel.retrieve.first_stage import FirstStageConfig, Ranking, Retrieval, fuse, fuse_rankings, retrieve
from funnel.types import Candidate, DocumentHit, Hit, SearchResult

# A query longer than this is cut before retrieval: BM25 over a 100 KB "query" is a scan of the index.
MAX_QUERY_CHARS = 4000


@dataclass(frozen=True)
class ResolvedPolicy:
    """The policy a search runs under once `auto` is looked up in the index's calibration."""

    policy: Policy
    label: str  # "rrf", or "auto: rrf:1" / "auto: first_stage"
    reason: str = ""  # why the reranker is not run, when it is not


@dataclass(frozen=True)
class SearchRequest:
    """One search, everything the steps need (`Searcher.plan` makes it from a caller's arguments).
    `Searcher.search` is `first_stage` -> `second_stage` -> `group` over one."""

    query: str
    k: int  # documents returned
    candidates: int  # the window handed to the second stage
    first_stage: FirstStageConfig
    policy: ResolvedPolicy
    filter: Filter | None = None
    documents: frozenset[str] | None = None  # only these documents' chunks are candidates (None: all)
    chunks_per_document: int | None = GroupingConfig.chunks_per_document  # per-document cap (None: none)
    first_stage_label: str = "hybrid"  # what ran, for --explain: "auto: bm25" when the calibration chose
    rerank_depth: int | None = RerankConfig.depth  # the window's top chunks the reranker scores (None: all)
    rerank_timeout_s: float | None = RerankConfig.timeout_s


_FIRST_STAGE_ONLY = FirstStageOnly()

# How long a searcher trusts the calibration it read (another process may recalibrate the index).
CALIBRATION_TTL_S = 30.0


class Searcher:
    """The search steps over `store`, with these models and this search config. Holds no global state; the
    index's calibration it read is kept for CALIBRATION_TTL_S."""

    def __init__(self, store: Store, embedder: Embedder, reranker: Reranker | None, config: EngineConfig):
        self.store = store
        self.embedder = embedder
        self.reranker = reranker
        self.config = config
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

    def resolve_policy(self, policy: PolicyChoice, version: int | None = None) -> ResolvedPolicy:
        """`auto` -> the calibrated policy when the calibration was made with this reranker and embedder;
        otherwise the first-stage order, saying why. An explicit policy (`rrf:0.5` sets its own weight) is
        taken as it is."""
        if policy.kind is not RerankPolicy.AUTO:
            chosen = policy.policy(self.config.rerank)
            plain = not isinstance(chosen, Rrf) or (chosen.weight == 1.0 and not chosen.gate)
            label = policy.kind.value if plain else chosen.label
            return ResolvedPolicy(chosen, label)
        if self.reranker is None:
            return ResolvedPolicy(_FIRST_STAGE_ONLY, "auto: first_stage", "no reranker configured")
        try:
            calibration = self.calibration(version)
        except StoreError as e:
            return ResolvedPolicy(_FIRST_STAGE_ONLY, "auto: first_stage", str(e))
        if calibration is None:
            return ResolvedPolicy(_FIRST_STAGE_ONLY, "auto: first_stage",
                                  "the index is not calibrated; run `funnel calibrate`")
        mismatch = calibration.mismatch(self.reranker.name, self.embedder.name)
        if mismatch:
            return ResolvedPolicy(_FIRST_STAGE_ONLY, "auto: first_stage", f"{mismatch}; run `funnel calibrate`")
        label = f"auto: {calibration.option}"
        if calibration.policy is RerankPolicy.NONE:
            return ResolvedPolicy(_FIRST_STAGE_ONLY, label, f"calibration: {calibration.reason}")
        chosen = self.config.rerank.policy_of(calibration.policy, calibration.weight, calibration.gate)
        return ResolvedPolicy(chosen, label)

    def plan(
        self,
        query: str,
        *,
        candidates: int | None = None,
        version: int | None = None,
        k: int | None = None,
        policy: PolicyChoice | RerankPolicy | str | None = None,
        retrieval: Retrieval | str | None = None,
        filter: Filter | None = None,
    ) -> SearchRequest:
        """A request for `query` as it is (no folding, no check of the index: `search` does both for a
        person's query), each argument left None taking the config's value: the window (`candidates`)
        is at least k chunks; `version` is the index version a calibration must match."""
        config = self.config
        k = config.grouping.k if k is None else k
        if k < 1:
            raise ConfigError(f"k must be at least 1, got {k}")
        requested = PolicyChoice.parse(config.rerank.policy if policy is None else policy)
        fs_config = config.first_stage
        if retrieval is not None:
            fs_config = replace(fs_config, retrieval=Retrieval.parse(retrieval))
        fs_config, fs_label = self.resolve_first_stage(fs_config, version)
        window = max(config.grouping.candidates, k) if candidates is None else candidates
        return SearchRequest(query, k, window, fs_config, self.resolve_policy(requested, version), filter,
                             chunks_per_document=config.grouping.chunks_per_document,
                             first_stage_label=fs_label,
                             rerank_depth=config.rerank.depth, rerank_timeout_s=config.rerank.timeout_s)

    def resolve_first_stage(
        self, fs: FirstStageConfig, version: int | None = None
    ) -> tuple[FirstStageConfig, str]:
        """`auto` -> the first stage the index's calibration chose (`funnel.calibrate.FIRST_STAGES`) when it
        was measured with this embedder and no weights were set by hand; otherwise the 1:1 hybrid. Any other mode
        is taken as it is. Returns it and its label."""
        if fs.retrieval is not Retrieval.AUTO:
            return fs, fs.retrieval.value
        hybrid = replace(fs, retrieval=Retrieval.HYBRID)
        if (fs.bm25_weight, fs.dense_weight) != (1.0, 1.0):
            return hybrid, "hybrid"
        try:
            calibration = self.calibration(version)
        except StoreError:
            return hybrid, "hybrid"
        if calibration is None or calibration.embedder != self.embedder.name:
            return hybrid, "hybrid"
        return calibration.first_stage_config(fs), f"auto: {calibration.first_stage}"

    def _checked(self, query: str, k: int | None) -> tuple[str, tuple[str, ...], int]:
        """A person's query with whitespace folded and cut to MAX_QUERY_CHARS (saying so in a note), and
        the index version, once the index is known to be searchable with this embedder."""
        query = " ".join(query.split())
        if not query:
            raise ConfigError("the query is empty")
        notes: tuple[str, ...] = ()
        if len(query) > MAX_QUERY_CHARS:
            notes = (f"query cut from {len(query)} to {MAX_QUERY_CHARS} characters",)
            query = query[:MAX_QUERY_CHARS]
        if k is not None and k < 1:
            raise ConfigError(f"k must be at least 1, got {k}")
        info = self.store.info()
        if info is None:
            raise StoreError("the index is empty: run `funnel ingest PATH` first")
        if info.analyzer == LEGACY and has_cjk(query):
            notes += (f"this index was analyzed as {LEGACY} (made before per-language analysis): Korean, "
                      "Chinese and Japanese words match only whole; ingest into a new index to re-analyze them",)
        if (info.embedder, info.dim) != (self.embedder.name, self.embedder.dim):
            raise ConfigError(
                f"the index was built with embedder {info.embedder} (dim {info.dim}), but this search uses "
                f"{self.embedder.name} (dim {self.embedder.dim}); search with the index's embedder"
            )
        return query, notes, info.version

    def retrieve(self, request: SearchRequest) -> tuple[list[ScoredChunk], list[ScoredChunk]]:
        """The BM25 and dense lists the request's first stage fuses (the mode's; the other stays empty)."""
        fs = request.first_stage
        return retrieve(
            self.store, self.embedder, request.query, max(fs.per_retriever, request.candidates), fs, request.filter
        )

    def first_stage(
        self, request: SearchRequest, retrieved: tuple[list[ScoredChunk], list[ScoredChunk]] | None = None
    ) -> list[Candidate]:
        """The window: the retrieved lists fused into `request.candidates` chunks (`funnel.retrieve.first_stage`).
        Given `retrieved` (from `retrieve` with a deeper request), their heads are used and nothing is
        retrieved again, so requests that differ in mode or depth share one retrieval (eval does)."""
        fs = request.first_stage
        lexical, dense = self.retrieve(request) if retrieved is None else retrieved
        n = max(fs.per_retriever, request.candidates)
        lexical = lexical[:n] if fs.retrieval.lexical else []
        dense = dense[:n] if fs.retrieval.dense else []
        candidates = fuse(lexical, dense, request.candidates, fs, request.chunks_per_document)
        if request.documents is not None:
            candidates = [c for c in candidates if c.chunk.doc_id in request.documents]
        return candidates

    def fuse(
        self, request: SearchRequest, window: list[Candidate], extra_rankings: Sequence[Ranking], weight: float = 1.0
    ) -> list[Candidate]:
        """The window fused with other evidence (weighted RRF; the window's list carries `weight`), e.g.
        triage's stack frames and symbols; a ranking without its own k takes the first stage's."""
        rankings = [replace(r, k=request.first_stage.rrf_k) if r.k is None else r for r in extra_rankings]
        own = Ranking(tuple(c.chunk for c in window), weight, request.first_stage.rrf_k)
        return fuse_rankings(window, own, rankings, request.candidates, request.chunks_per_document)

    def second_stage(self, request: SearchRequest, candidates: list[Candidate]) -> SecondStageResult:
        """The reranker under the request's policy, or the first-stage order on any failure."""
        return second_stage(
            request.query, candidates, self.reranker, request.policy.policy,
            timeout_s=request.rerank_timeout_s, depth=request.rerank_depth,
        )

    def group(self, request: SearchRequest, hits: list[Hit]) -> list[DocumentHit]:
        """The top-k documents of the final order (`funnel.group`)."""
        return group(hits, request.k, request.chunks_per_document)

    def search(
        self,
        query: str,
        k: int | None = None,
        policy: PolicyChoice | RerankPolicy | str | None = None,
        retrieval: Retrieval | str | None = None,
        filter: Filter | None = None,
    ) -> SearchResult:
        query, notes, version = self._checked(query, k)
        request = self.plan(query, k=k, policy=policy, retrieval=retrieval, filter=filter, version=version)
        t0 = time.perf_counter()
        candidates = self.first_stage(request)
        t1 = time.perf_counter()
        second = self.second_stage(request, candidates)
        t2 = time.perf_counter()
        documents = self.group(request, second.hits)
        if (cutoff := self.config.grouping.cutoff) is not None:
            kept = abstain.relevant_documents(request.query, documents, cutoff)
            notes = (*notes, *abstain.cut_note(len(documents) - len(kept), cutoff))
            documents = kept
        t3 = time.perf_counter()
        reason = request.policy.reason or second.reason
        if second.truncated:
            reason = (reason + "; " if reason else "") + f"{len(second.truncated)} candidate(s) truncated"
        return SearchResult(
            query=request.query,
            documents=tuple(documents),
            hits=tuple(second.hits),
            rerank_status=second.status,
            rerank_reason=reason,
            policy=request.policy.label,
            timings_ms={"first_stage": 1000 * (t1 - t0), "rerank": 1000 * (t2 - t1), "group": 1000 * (t3 - t2)},
            notes=notes,
            first_stage=request.first_stage_label,
        )

    def over(self, store: Store) -> Searcher:
        """These models and this search config over another store (calibration searches a small copy of the
        index with it)."""
        return Searcher(store, self.embedder, self.reranker, self.config)
