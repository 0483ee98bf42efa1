"""Building a Pipeline from Settings (the one place where settings meet the core)."""

from __future__ import annotations

from funnel.apps.settings import Settings
from funnel.embed import DEFAULT, load_embedder, spec_for
from funnel.embed.base import Embedder
from funnel.errors import ConfigError
from funnel.generate.base import Generator
from funnel.index import open_store
from funnel.index.base import Store
from funnel.ingest.walk import FileLimits
from funnel.pipeline import Pipeline, SearchConfig
from funnel.rerank.base import Reranker
from funnel.rerank.cache import CachedReranker
from funnel.rerank.http import HttpReranker, RerankApi
from funnel.rerank.lexical import LexicalReranker
from funnel.retrieve.first_stage import FirstStageConfig

RERANKER_SPECS = ("none", "builtin", "onnx:DIR", "st:MODEL", "lexical", *(f"{api.value}:URL" for api in RerankApi))


def build_reranker(
    spec: str, *, model: str | None = None, api_key: str | None = None, timeout_s: float = 10.0
) -> Reranker | None:
    """The second-stage backend a spec names (`--reranker` / FUNNEL_RERANKER). Cheap: loads nothing."""
    spec = spec.strip()
    if spec in ("", "none"):
        return None
    if spec == "lexical":
        return LexicalReranker()
    if spec == "builtin":
        from funnel.rerank.onnx_cross_encoder import OnnxCrossEncoder, builtin_model_dir

        return OnnxCrossEncoder(builtin_model_dir())
    if spec.startswith("onnx:"):
        from funnel.rerank.onnx_cross_encoder import OnnxCrossEncoder

        return OnnxCrossEncoder(spec[5:])
    if spec.startswith("st:"):
        from funnel.rerank.cross_encoder import CrossEncoderReranker

        return CrossEncoderReranker(spec[3:])
    kind, sep, url = spec.partition(":")
    if sep and kind in {api.value for api in RerankApi}:
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"reranker {kind}:URL needs an http:// or https:// URL, got {url!r}")
        return HttpReranker(RerankApi(kind), url, model=model, api_key=api_key, timeout_s=timeout_s)
    raise ConfigError(f"unknown reranker {spec!r}; valid: {', '.join(RERANKER_SPECS)}")


def reranker_from_settings(settings: Settings) -> Reranker | None:
    """The configured reranker behind a score cache (a pair's score depends on nothing else, so a repeated
    query, `ask` after `search` or another eval variant never scores a pair twice)."""
    key = settings.rerank_api_key.get_secret_value() if settings.rerank_api_key else None
    reranker = build_reranker(
        settings.reranker, model=settings.rerank_model, api_key=key, timeout_s=settings.rerank_timeout_s
    )
    return CachedReranker(reranker) if reranker is not None else None


LLM_SPECS = ("none", "ollama:URL", "openai:URL")


def build_chat(settings: Settings):
    """The chat LLM `settings.llm` names, or None. Cheap: connects to nothing."""
    spec = settings.llm.strip()
    if spec in ("", "none"):
        return None
    kind, sep, url = spec.partition(":")
    if not sep or kind not in ("ollama", "openai"):
        raise ConfigError(f"unknown llm {spec!r}; valid: {', '.join(LLM_SPECS)}")
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"llm {kind}:URL needs an http:// or https:// URL, got {url!r}")
    if kind == "ollama":
        from funnel.generate.ollama import OllamaChat

        return OllamaChat(url, model=settings.llm_model or "llama3.2", timeout=settings.llm_timeout_s)
    from funnel.generate.openai_compat import OpenAIChat

    key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else None
    return OpenAIChat(url, model=settings.llm_model or "default", api_key=key, timeout=settings.llm_timeout_s,
                      completion_prompt=settings.llm_completion)


def _index_embedder(store: Store) -> str:
    """With no embedder asked for, use the one the index was built with (else the default)."""
    info = store.info()
    if info is None:
        return DEFAULT
    spec = spec_for(info.embedder)
    if spec is None:
        where = getattr(store, "path", store)  # LanceStore: its directory; PgStore: its URL without password
        raise ConfigError(f"{where} was built with embedder {info.embedder}; name it with --embedder")
    return spec


def search_config(settings: Settings) -> SearchConfig:
    return SearchConfig(
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
        rerank_weight=settings.rerank_weight,
        guaranteed=settings.guaranteed,
        rrf_k=settings.rrf_k,
        rerank_timeout_s=settings.rerank_timeout_s,
    )


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
    store = open_store(settings.index)
    embedder = load_embedder(settings.embedder or _index_embedder(store), settings.threads)
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
    )
