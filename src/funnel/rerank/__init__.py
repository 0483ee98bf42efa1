"""Second stage: rerankers, the policies that combine them with the first stage, and the fallback.

`load_reranker(spec)` builds the backend a spec names (`--reranker`, FUNNEL_RERANKER, `funnel.open`)."""

from __future__ import annotations

from funnel.errors import ConfigError
from funnel.rerank.base import Reranker
from funnel.rerank.policies import RerankPolicy, second_stage

__all__ = ["RERANKER_SPECS", "Reranker", "RerankPolicy", "load_reranker", "second_stage"]

HTTP_APIS = ("ollama", "cohere", "tei", "infinity")  # funnel.rerank.http.RerankApi's values (checked there)
RERANKER_SPECS = ("none", "builtin", "onnx:DIR", "st:MODEL", "lexical", *(f"{api}:URL" for api in HTTP_APIS))


def load_reranker(
    spec: str, *, model: str | None = None, api_key: str | None = None, timeout_s: float = 10.0
) -> Reranker | None:
    """The second-stage backend a spec names, or None for `none`. Cheap: loads no model, opens no connection."""
    spec = spec.strip()
    if spec in ("", "none"):
        return None
    if spec == "lexical":
        from funnel.rerank.lexical import LexicalReranker

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
    if sep and kind in HTTP_APIS:
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"reranker {kind}:URL needs an http:// or https:// URL, got {url!r}")
        from funnel.rerank.http import HttpReranker, RerankApi

        return HttpReranker(RerankApi(kind), url, model=model, api_key=api_key, timeout_s=timeout_s)
    raise ConfigError(f"unknown reranker {spec!r}; valid: {', '.join(RERANKER_SPECS)}")
