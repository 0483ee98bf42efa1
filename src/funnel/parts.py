"""The parts an `EngineConfig` names, built: its reranker (behind a score cache), its chat LLM and the
answer generator over it. Cheap: nothing here connects to a server."""

from __future__ import annotations

from funnel import generate, rerank
from funnel.embed.base import Embedder
from funnel.engine_config import LlmConfig, ModelsConfig, RerankConfig
from funnel.generate.base import Generator
from funnel.generate.chat import ChatModel
from funnel.rerank.base import Reranker
from funnel.rerank.cache import CachedReranker


def load_reranker(config: RerankConfig, models: ModelsConfig | None = None) -> Reranker | None:
    """The configured reranker behind a score cache (a pair's score depends on nothing else, so a repeated
    query, `ask` after `search` or another eval variant never scores a pair twice); None for `none`.
    `models.reranker_dir`, when set, is the built-in reranker's folder."""
    where = {"reranker_dir": models.reranker_dir} if models is not None and models.reranker_dir else {}
    reranker = rerank.load(config.backend, model=config.model, api_key=config.api_key,
                           timeout_s=config.timeout_s, max_length=config.max_tokens, **where)
    return CachedReranker(reranker) if reranker is not None else None


def load_chat(config: LlmConfig) -> ChatModel | None:
    """The chat LLM `config.backend` names, or None."""
    return generate.load(config.backend, model=config.model, api_key=config.api_key,
                         timeout_s=config.timeout_s, completion=config.completion, threads=config.threads,
                         context_window=config.context_window)


def build_generator(chat: ChatModel | None, embedder: Embedder, config: LlmConfig | None = None) -> Generator:
    """The answer generator: the chat LLM with the extractive answer as its fallback, or the extractive answer
    alone when there is no LLM."""
    from funnel.generate.extractive import ExtractiveGenerator

    extractive = ExtractiveGenerator(embedder)
    if chat is None:
        return extractive
    from funnel.generate.llm import FallbackGenerator, LlmGenerator

    config = config or LlmConfig()
    if config.reads:
        from funnel.generate.reader import ReaderGenerator

        return FallbackGenerator(ReaderGenerator(chat, extractive), extractive)
    llm = LlmGenerator(chat, context_tokens=config.context_tokens, max_answer_tokens=config.answer_tokens)
    return FallbackGenerator(llm, extractive)
