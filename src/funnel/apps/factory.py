"""Settings meet the core here: a `Pipeline` is `Pipeline.build(settings.engine())`."""

from __future__ import annotations

from funnel import rerank
from funnel.apps.settings import Settings
from funnel.generate.base import Generator
from funnel.generate.chat import ChatModel
from funnel.parts import build_generator, load_chat, load_reranker
from funnel.pipeline import Pipeline
from funnel.rerank import RERANKER_SPECS  # noqa: F401  (re-exported for older imports)
from funnel.rerank.base import Reranker

# The apps' older names for the registries' loaders.
build_reranker = rerank.load

__all__ = ["build_answerers", "build_chat", "build_generator", "build_pipeline", "reranker_from_settings"]


def reranker_from_settings(settings: Settings) -> Reranker | None:
    """The configured reranker behind a score cache (`funnel.parts.load_reranker`)."""
    engine = settings.engine()
    return load_reranker(engine.rerank, engine.models)


def build_chat(settings: Settings) -> ChatModel | None:
    """The chat LLM `[llm] backend` names, or None. Cheap: connects to nothing."""
    return load_chat(settings.engine().llm)


def build_pipeline(settings: Settings, **parts) -> Pipeline:
    """The pipeline the settings describe; `parts` already built (`reranker`, `chat`, ...) are shared."""
    return Pipeline.build(settings.engine(), **parts)


def build_answerers(settings: Settings, pipeline: Pipeline, names: list[str]) -> dict[str, Generator]:
    """`funnel eval`'s `+answer(NAME)` answerers: `extractive`, or an LLM backend spec read as `[llm] backend`
    with the other [llm] settings (the reader or the passages LLM, as `[llm] mode` says), each with the
    extractive answer as its fallback. The configured backend is the pipeline's own generator, not a second
    copy of its model."""
    from dataclasses import replace

    from funnel.generate.extractive import ExtractiveGenerator

    config = settings.engine().llm
    built: dict[str, Generator] = {}
    for name in names:
        if name == "extractive":
            built[name] = ExtractiveGenerator(pipeline.embedder)
        elif name == config.backend:
            built[name] = pipeline.generator
        else:
            llm = replace(config, backend=name)
            built[name] = build_generator(load_chat(llm), pipeline.embedder, llm)
    return built
