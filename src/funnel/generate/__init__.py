"""Answer generation: LLM backends and the extractive answer that needs no model server.

`load(spec)` builds the chat LLM a spec names (`--llm`, FUNNEL_LLM__BACKEND); `REGISTRY.help()` lists the forms. Plugins
add backends through the `funnel.llms` entry-point group (see funnel.registry)."""

from __future__ import annotations

from funnel.errors import ConfigError
from funnel.generate.base import LLM_TIMEOUT_S
from funnel.registry import Registry

__all__ = ["REGISTRY", "load"]

REGISTRY = Registry("llm", group="funnel.llms", none=True)


def _http_url(kind: str, url: str) -> str:
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"llm {kind}:URL needs an http:// or https:// URL, got {url!r}")
    return url


@REGISTRY.register("ollama:URL")
def _ollama(url: str, *, model: str | None = None, timeout_s: float = LLM_TIMEOUT_S, **_):
    from funnel.generate.ollama import OllamaChat

    return OllamaChat(_http_url("ollama", url), model=model or "llama3.2", timeout=timeout_s)


@REGISTRY.register("openai:URL")
def _openai(url: str, *, model: str | None = None, api_key: str | None = None, timeout_s: float = LLM_TIMEOUT_S,
            completion: bool = False, **_):
    from funnel.generate.openai_compat import OpenAIChat

    return OpenAIChat(_http_url("openai", url), model=model or "default", api_key=api_key, timeout=timeout_s,
                      completion_prompt=completion)


@REGISTRY.register("local", "local:PATH")
def _local(path: str, *, timeout_s: float = LLM_TIMEOUT_S, threads: int | None = None,
           context_window: int | None = None, **_):
    from funnel.generate.base import CONTEXT_WINDOW
    from funnel.generate.local import LocalChat

    return LocalChat(path or None, threads=threads, context_window=context_window or CONTEXT_WINDOW,
                     timeout_s=timeout_s)


def load(spec: str, **options):
    """The chat LLM (a `funnel.generate.chat.ChatModel`) a spec names, or None for `none`. Options: model,
    api_key, timeout_s, completion (a base model: /v1/completions), threads and context_window (local). Cheap:
    connects to nothing, loads no model."""
    return REGISTRY.load(spec, **options)
