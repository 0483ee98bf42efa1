"""Building a Pipeline from Settings (the one place where settings meet the core)."""

from __future__ import annotations

from dataclasses import fields

from funnel import embed, generate, index, rerank
from funnel.apps.settings import Settings
from funnel.embed import index_embedder
from funnel.embed.base import Embedder
from funnel.generate.base import Generator
from funnel.ingest.walk import FileLimits
from funnel.pipeline import Pipeline, SearchConfig
from funnel.rerank import RERANKER_SPECS  # noqa: F401  (re-exported for older imports)
from funnel.rerank.base import Reranker
from funnel.rerank.cache import CachedReranker
from funnel.rerank.policies import PolicyParams
from funnel.retrieve.first_stage import FirstStageConfig

# The apps' older names for the registries' loaders.
build_reranker = rerank.load


def reranker_from_settings(settings: Settings) -> Reranker | None:
    """The configured reranker behind a score cache (a pair's score depends on nothing else, so a repeated
    query, `ask` after `search` or another eval variant never scores a pair twice)."""
    key = settings.rerank_api_key.get_secret_value() if settings.rerank_api_key else None
    reranker = rerank.load(
        settings.reranker, model=settings.rerank_model, api_key=key, timeout_s=settings.rerank_timeout_s,
        max_length=settings.rerank_max_tokens,
    )
    return CachedReranker(reranker) if reranker is not None else None


def build_chat(settings: Settings):
    """The chat LLM `settings.llm` names, or None. Cheap: connects to nothing."""
    key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else None
    return generate.load(settings.llm, model=settings.llm_model, api_key=key, timeout_s=settings.llm_timeout_s,
                         completion=settings.llm_completion)


def search_config(settings: Settings) -> SearchConfig:
    """`rrf_k` is the first stage's fusion k (BM25 + dense); `rerank_rrf_k` the rrf policy's (first stage +
    reranker). They were one setting once; they answer different questions."""
    return SearchConfig(
        k=settings.k,
        candidates=settings.candidates,
        rerank_depth=settings.rerank_depth,
        first_stage=FirstStageConfig(
            retrieval=settings.retrieval,
            per_retriever=settings.per_retriever,
            rrf_k=settings.rrf_k,
            bm25_weight=settings.bm25_weight,
            dense_weight=settings.dense_weight,
        ),
        policy=settings.policy,
        rerank_timeout_s=settings.rerank_timeout_s,
        **policy_params(settings),
    )


def policy_params(settings: Settings) -> dict:
    """The policy parameters settings hold, by `PolicyParams`' names (the settings were made from them)."""
    return {f.name: getattr(settings, f.name) for f in fields(PolicyParams)}


def build_generator(chat, embedder: Embedder, context_tokens: int = 3000, answer_tokens: int = 512) -> Generator:
    """The answer generator: the chat LLM (`build_chat`) with the extractive answer as its fallback, or the
    extractive answer alone when there is no LLM. Cheap: connects to nothing."""
    from funnel.generate.extractive import ExtractiveGenerator

    extractive = ExtractiveGenerator(embedder)
    if chat is None:
        return extractive
    from funnel.generate.llm import FallbackGenerator, LlmGenerator

    llm = LlmGenerator(chat, context_tokens=context_tokens, max_answer_tokens=answer_tokens)
    return FallbackGenerator(llm, extractive)


def build_pipeline(settings: Settings) -> Pipeline:
    config = search_config(settings)
    store = index.open(settings.index)
    embedder = embed.load(settings.embedder or index_embedder(store), settings.threads)
    return Pipeline(
        store=store,
        embedder=embedder,
        reranker=reranker_from_settings(settings),
        generator=build_generator(
            build_chat(settings), embedder, settings.llm_context_tokens, settings.llm_answer_tokens
        ),
        config=config,
        max_tokens=settings.max_tokens,
        limits=FileLimits.from_mb(settings.max_file_mb, settings.max_pdf_mb),
        analyzer=settings.analyzer,
    )
