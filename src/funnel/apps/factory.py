"""Building a Pipeline from Settings (the one place where settings meet the core)."""

from __future__ import annotations

from funnel.apps.settings import Settings
from funnel.embed import DEFAULT, load_embedder, spec_for
from funnel.errors import ConfigError
from funnel.index.lance import LanceStore
from funnel.pipeline import Pipeline, SearchConfig
from funnel.rerank.base import Reranker
from funnel.retrieve.first_stage import FirstStageConfig


def build_reranker(spec: str) -> Reranker | None:
    if spec in ("", "none"):
        return None
    raise ConfigError(f"unknown reranker {spec!r}; valid: none")


def _index_embedder(store: LanceStore) -> str:
    """With no embedder asked for, use the one the index was built with (else the default)."""
    info = store.info()
    if info is None:
        return DEFAULT
    spec = spec_for(info.embedder)
    if spec is None:
        raise ConfigError(f"{store.path} was built with embedder {info.embedder}; name it with --embedder")
    return spec


def build_pipeline(settings: Settings) -> Pipeline:
    config = SearchConfig(
        k=settings.k,
        candidates=settings.candidates,
        first_stage=FirstStageConfig(
            retrieval=settings.retrieval,
            per_retriever=settings.per_retriever,
            rrf_k=settings.rrf_k,
            bm25_weight=settings.bm25_weight,
            dense_weight=settings.dense_weight,
        ),
        policy=settings.policy,
        guaranteed=settings.guaranteed,
        rrf_k=settings.rrf_k,
        rerank_timeout_s=settings.rerank_timeout_s,
    )
    store = LanceStore(settings.index)
    return Pipeline(
        store=store,
        embedder=load_embedder(settings.embedder or _index_embedder(store), settings.threads),
        reranker=build_reranker(settings.reranker),
        config=config,
        max_tokens=settings.max_tokens,
    )
