"""Second stage: rerankers, the policies that combine them with the first stage, and the fallback.

`load(spec)` builds the backend a spec names (`--reranker`, FUNNEL_RERANK__BACKEND, `funnel.open`); `REGISTRY.help()`
lists the forms. Plugins add backends through the `funnel.rerankers` entry-point group (see funnel.registry)."""

from __future__ import annotations

from funnel.errors import ConfigError
from funnel.registry import Registry
from funnel.rerank.base import Reranker
from funnel.rerank.policies import RERANK_TIMEOUT_S, RerankPolicy, second_stage

__all__ = ["REGISTRY", "RERANKER_SPECS", "Reranker", "RerankPolicy", "load", "load_reranker", "second_stage"]

REGISTRY = Registry("reranker", group="funnel.rerankers", none=True)
HTTP_APIS = ("ollama", "cohere", "tei", "infinity")  # funnel.rerank.http.RerankApi's values (checked there)


# `max_length` (the rerank_max_tokens setting): the longest pair a local cross-encoder scores; None: the
# backend's default (ONNX: onnx_cross_encoder.RERANK_MAX_TOKENS, or the model's own when shorter; st: 256).
# `reranker_dir` (the models.reranker_dir setting, given only when set): the built-in model's folder.


@REGISTRY.register("builtin")
def _builtin(_: str, *, max_length: int | None = None, reranker_dir: str | None = None, **__):
    from funnel.rerank.onnx_cross_encoder import OnnxCrossEncoder, builtin_model_dir

    return OnnxCrossEncoder(builtin_model_dir(reranker_dir), max_length=max_length)


@REGISTRY.register("onnx:DIR")
def _onnx(model_dir: str, *, max_length: int | None = None, **_):
    from funnel.rerank.onnx_cross_encoder import OnnxCrossEncoder

    return OnnxCrossEncoder(model_dir, max_length=max_length)


@REGISTRY.register("st:MODEL")
def _sentence_transformers(model: str, *, max_length: int | None = None, **_):
    from funnel.rerank.cross_encoder import CrossEncoderReranker

    return CrossEncoderReranker(model, max_length=max_length or 256)


@REGISTRY.register("lexical")
def _lexical(_: str, **__):
    from funnel.rerank.lexical import LexicalReranker

    return LexicalReranker()


def _http(api: str):
    @REGISTRY.register(f"{api}:URL")
    def build(url: str, *, model: str | None = None, api_key: str | None = None, timeout_s: float | None = RERANK_TIMEOUT_S, **_):
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"reranker {api}:URL needs an http:// or https:// URL, got {url!r}")
        from funnel.rerank.http import HttpReranker, RerankApi

        return HttpReranker(RerankApi(api), url, model=model, api_key=api_key, timeout_s=timeout_s)


for _api in HTTP_APIS:
    _http(_api)

RERANKER_SPECS = REGISTRY.forms()  # the built-in forms; kept for code that imported the old table


def load(spec: str, *, model: str | None = None, api_key: str | None = None, timeout_s: float | None = RERANK_TIMEOUT_S,
         **options) -> Reranker | None:
    """The second-stage backend a spec names, or None for `none`. Cheap: loads no model, opens no connection."""
    return REGISTRY.load(spec, model=model, api_key=api_key, timeout_s=timeout_s, **options)


load_reranker = load  # the name funnel.open and older callers use
