"""The pipeline: one direction, from a query to documents (and an answer).

query -> dense top-N + BM25 top-N -> RRF -> candidates -> rerank (+policy, fallback) -> group -> top-k

The search steps are `Searcher`'s (funnel.search); a `Pipeline` is a searcher that also ingests (its
`Indexer`), answers (the answer step over a search's result) and calibrates its index (`funnel.calibrate`).
"""

from __future__ import annotations

from pathlib import Path

from funnel.analyze.detect import release as release_language_model
from funnel.calibrate import DEFAULT_QUERIES, JUDGED, Calibration, Judged, calibrate, parse_judged
from funnel.embed import index_embedder, load_embedder
from funnel.embed.base import Embedder
from funnel.engine_config import EngineConfig
from funnel.errors import StoreError
from funnel.generate import abstain
from funnel.generate.abstain import Evidence
from funnel.generate.base import Generator
from funnel.generate.chat import ChatModel
from funnel.generate.context import with_continuations
from funnel.generate.step import AnswerStep, answerer
from funnel.index import open_store
from funnel.index.base import Filter, Store
from funnel.indexer import Indexer, IngestReport, PageProgress, Progress
from funnel.parts import build_generator, load_chat, load_reranker
from funnel.rerank.base import Reranker
from funnel.rerank.policies import PolicyChoice, RerankPolicy
from funnel.search import CALIBRATION_TTL_S, MAX_QUERY_CHARS, ResolvedPolicy, Searcher, SearchRequest
from funnel.types import Answer, SearchResult

__all__ = ["CALIBRATION_TTL_S", "FROM_CONFIG", "MAX_QUERY_CHARS", "Pipeline", "ResolvedPolicy", "SearchRequest"]

FROM_CONFIG = object()  # Pipeline.build: a part left to the config


class Pipeline(Searcher):
    """Ties a store, an embedder, an optional reranker and a generator together. Holds no global state.
    Made by `Pipeline.build(config)` alone, and never changed once built."""

    def __init__(self, store: Store, embedder: Embedder, reranker: Reranker | None, generator: Generator,
                 config: EngineConfig):
        super().__init__(store, embedder, reranker, config)
        self.generator = generator
        ingest = config.ingest
        self.indexer = Indexer(store, embedder, ingest.chunk_tokens, ingest.limits, ingest.analyzer)

    @classmethod
    def build(
        cls,
        config: EngineConfig | None = None,
        *,
        store: Store | None = None,
        embedder: Embedder | None = None,
        reranker: Reranker | None | object = FROM_CONFIG,
        generator: Generator | None = None,
        chat: ChatModel | None | object = FROM_CONFIG,
    ) -> Pipeline:
        """The pipeline `config` describes. Parts already built (a service shares one embedder, reranker and
        answer generator across its collections) are passed instead of built again: `store` (else
        `config.index`), `embedder` (else `config.embedder`, or the index's), `reranker` (else
        `config.rerank.backend`, behind a score cache; None: none), `generator` (else the LLM of `config.llm`
        or `chat`, with the extractive answer as its fallback)."""
        config = config or EngineConfig()
        if store is None:
            store = open_store(config.index)
        if embedder is None:
            embedder = load_embedder(config.embedder or index_embedder(store), config.threads, config.models)
        if reranker is FROM_CONFIG:
            reranker = load_reranker(config.rerank, config.models)
        if generator is None:
            generator = build_generator(load_chat(config.llm) if chat is FROM_CONFIG else chat, embedder,
                                        config.llm)
        return cls(store, embedder, reranker, generator, config)

    def ingest(
        self, paths: list[str | Path], progress: Progress | None = None, pages: PageProgress | None = None
    ) -> IngestReport:
        return self.indexer.ingest_paths([Path(p) for p in paths], progress, pages)

    def calibrate(
        self, n_queries: int | None = None, progress=None, judged: list[Judged] | None = None, generated: bool = False,
    ) -> Calibration:
        """Measure the second stage on this index (`funnel.calibrate`) and store the choice with it. An
        interruption before the end leaves the previous calibration as it was (nothing is written until
        the whole measurement is done).

        With `judged` queries it measures on those. Without, it measures again on the judged queries the
        stored calibration was made with, if any (so an ingest keeps them), unless `generated` asks for
        queries made from the documents."""
        if judged is None and not generated:
            judged = self._stored_judged()
        release_language_model()  # the ingest before this is done with it: ~80 MB less at calibration's peak
        result = calibrate(self, n_queries=n_queries or DEFAULT_QUERIES, judged=judged, progress=progress)
        self.store.write_calibration(result.to_json())
        self._calibration = None
        return result

    def _stored_judged(self) -> list[Judged] | None:
        """The judged queries of the stored calibration; None when it was made from generated queries, or
        there is none or it cannot be read."""
        try:
            stored = self.calibration()
        except StoreError:
            return None
        if stored is None or stored.source != JUDGED or not stored.judged:
            return None
        return [parse_judged(item, "the stored calibration's judged queries") for item in stored.judged]

    def evidence(self, result: SearchResult) -> Evidence | None:
        """How well `result` supports an answer, held to this index's threshold (`[answer] abstain`); None
        when abstention is off."""
        calibrated = None
        if self.config.answer.abstain == "auto":
            try:
                calibration = self.calibration()
            except StoreError:
                calibration = None
            calibrated = calibration.abstain_threshold if calibration is not None else None
        needed = abstain.threshold(self.config.answer.abstain, calibrated)
        return None if needed is None else abstain.measure(result.query, result, self.store, needed)

    def prepare(self, result: SearchResult, generator: Generator | None = None) -> AnswerStep:
        """The answer step for `result` (`funnel.generate.step`): `generator` (default: this pipeline's), or the
        abstainer when the evidence falls short."""
        evidence = self.evidence(result)
        chosen = answerer(generator or self.generator, evidence, self.config.answer.borderline)
        return AnswerStep(result.query, result, chosen, evidence)

    def answer(self, result: SearchResult, generator: Generator | None = None) -> Answer:
        """The answer to `result`'s query from its passages, or an abstention when they do not support one
        (the closest passages listed, not an answer)."""
        return self.prepare(result, generator).answer()

    def ask(
        self, question: str, k: int | None = None, policy: PolicyChoice | RerankPolicy | str | None = None,
        filter: Filter | None = None,
    ) -> Answer:
        return self.ask_step(question, k, policy, filter).answer()

    def ask_step(
        self, question: str, k: int | None = None, policy: PolicyChoice | RerankPolicy | str | None = None,
        filter: Filter | None = None,
    ) -> AnswerStep:
        """Search, then the answer step over what was found."""
        return self.prepare(with_continuations(self.search(question, k=k, policy=policy, filter=filter), self.store))
