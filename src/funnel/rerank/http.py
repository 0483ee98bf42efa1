"""Rerankers behind an HTTP API: one class, four wire shapes.

- `ollama`: POST {base}/api/rerank {model, query, documents} -> {"results": [{index, relevance_score}]}
- `cohere` (also Jina and vLLM): POST {base}/v1/rerank {model, query, documents, top_n} -> the same
- `tei`: POST {base}/rerank {query, texts, raw_scores, truncate} -> a bare array of {index, score}
- `infinity`: POST {base}/rerank {model, query, documents, top_n} -> {"results": [...]} or {"data": [...]}

`base` is the server root (e.g. `http://localhost:8080`); a base that already ends with the endpoint path is
used as it is. The candidates' chunk texts are sent; the answer must hold exactly one score for every
document sent, else the response is an `UpstreamError` (and the second stage falls back to first-stage order).

Scores: `raw_scores` is always what the API returned. `scores` is the same when every score of the response
lies in 0..1 (Cohere, Jina, TEI with raw_scores=false, funnel's own server); when any lies outside (logits,
as some Ollama and vLLM models return), every score of that call goes through a sigmoid. The sigmoid is
monotonic, so the ranking is the API's either way; only the scale changes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

import httpx

from funnel.config import parse_enum
from funnel.errors import ConfigError, UpstreamError
from funnel.http import Upstream, without_userinfo
from funnel.rerank.policies import RERANK_TIMEOUT_S
from funnel.types import Candidate, RerankResult

STAGE = "rerank"


class RerankApi(str, Enum):
    OLLAMA = "ollama"
    COHERE = "cohere"
    TEI = "tei"
    INFINITY = "infinity"

    @classmethod
    def parse(cls, value: str | RerankApi) -> RerankApi:
        return parse_enum(cls, value, "rerank api")


@dataclass(frozen=True)
class _Shape:
    path: str
    list_keys: tuple[str, ...]  # where the list of results is; () = the body is the list
    score_key: str


_SHAPES = {
    RerankApi.OLLAMA: _Shape("/api/rerank", ("results",), "relevance_score"),
    RerankApi.COHERE: _Shape("/v1/rerank", ("results",), "relevance_score"),
    RerankApi.TEI: _Shape("/rerank", (), "score"),
    RerankApi.INFINITY: _Shape("/rerank", ("results", "data"), "relevance_score"),
}


class HttpReranker:
    """A reranker served over HTTP. Cheap to build: no connection is made before the first `rerank`.

    `client` is used as given (tests hand in one over a local server or an `httpx.MockTransport`); without
    one, an `httpx.Client` is created on first use. `timeout_s` applies to every request either way.
    `max_documents` splits a long candidate list into several requests for APIs that cap the batch.
    """

    def __init__(
        self,
        api: RerankApi | str,
        base_url: str,
        model: str | None = None,
        api_key: str | None = None,
        timeout_s: float | None = RERANK_TIMEOUT_S,
        client: httpx.Client | None = None,
        max_documents: int | None = None,
    ):
        if max_documents is not None and max_documents < 1:
            raise ConfigError(f"max_documents must be at least 1, got {max_documents}")
        if timeout_s <= 0:
            raise ConfigError(f"timeout_s must be positive, got {timeout_s}")
        self.api = RerankApi.parse(api)
        self._shape = _SHAPES[self.api]
        base = base_url.rstrip("/")
        self.url = base if base.endswith(self._shape.path) else base + self._shape.path
        self.model = model
        self.timeout_s = timeout_s
        self.max_documents = max_documents
        self._http = Upstream(STAGE, self.url, timeout_s, client, api_key)
        self.name = f"{self.api.value}:{without_userinfo(base)}"

    def __repr__(self) -> str:  # never shows the key
        return f"HttpReranker(api={self.api.value!r}, url={self._http.shown!r}, model={self.model!r})"

    def rerank(self, query: str, candidates: list[Candidate]) -> RerankResult:
        texts = [c.chunk.text for c in candidates]
        if not texts:
            return RerankResult(())
        step = self.max_documents or len(texts)
        raw: list[float] = []
        for start in range(0, len(texts), step):
            raw.extend(self._scores(query, texts[start : start + step]))
        scores = raw if all(0.0 <= s <= 1.0 for s in raw) else [_sigmoid(s) for s in raw]
        return RerankResult(tuple(scores), raw_scores=tuple(raw))

    def close(self) -> None:
        """Closes the client this reranker created (an injected client belongs to the caller)."""
        self._http.close()

    # --- one request ---------------------------------------------------------------------------------

    def _scores(self, query: str, documents: list[str]) -> list[float]:
        return self._parse(self._http.post("", self._payload(query, documents)), len(documents))

    def _payload(self, query: str, documents: list[str]) -> dict:
        if self.api is RerankApi.TEI:
            # raw_scores=false: TEI applies the model's own activation, so scores arrive in 0..1.
            # truncate: an over-long passage is cut by TEI rather than failing the whole request.
            return {"query": query, "texts": documents, "raw_scores": False, "truncate": True}
        payload: dict = {"query": query, "documents": documents}
        if self.model:
            payload["model"] = self.model
        if self.api in (RerankApi.COHERE, RerankApi.INFINITY):
            payload["top_n"] = len(documents)  # every document back, not the API's default top few
        return payload

    # --- the answer ----------------------------------------------------------------------------------

    def _parse(self, body: object, n: int) -> list[float]:
        items = self._result_list(body)
        scores: list[float | None] = [None] * n
        for position, item in enumerate(items):
            if not isinstance(item, dict):
                raise self._error(f"result {position} is {type(item).__name__}, not an object")
            index = item.get("index")
            if index is None:
                raise self._error(f"result {position} has no index")
            if isinstance(index, bool) or not isinstance(index, int):
                raise self._error(f"result {position} has a non-integer index {index!r:.40}")
            if not 0 <= index < n:
                raise self._error(f"result {position} has index {index}, out of range for {n} documents")
            if scores[index] is not None:
                raise self._error(f"index {index} appears twice")
            scores[index] = self._score(item, position)
        missing = [i for i, s in enumerate(scores) if s is None]
        if missing:
            shown = ", ".join(map(str, missing[:10])) + (", ..." if len(missing) > 10 else "")
            raise self._error(f"{n - len(missing)} results for {n} documents; missing index {shown}")
        return scores  # type: ignore[return-value]  # every slot was filled above

    def _result_list(self, body: object) -> list:
        keys = self._shape.list_keys
        if not keys:
            if not isinstance(body, list):
                raise self._error(f"answered {type(body).__name__}, expected a JSON array of results")
            return body
        wanted = " or ".join(repr(k) for k in keys)
        if not isinstance(body, dict):
            raise self._error(f"answered {type(body).__name__}, expected an object with {wanted}")
        for key in keys:
            if key in body:
                items = body[key]
                if not isinstance(items, list):
                    raise self._error(f"{key!r} is {type(items).__name__}, not a list")
                return items
        raise self._error(f"answer has no {wanted}: {self._http.excerpt(str(body))}")

    def _score(self, item: dict, position: int) -> float:
        key = self._shape.score_key
        value = item.get(key)
        if value is None:
            raise self._error(f"result {position} has no {key}")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self._error(f"result {position} has a non-numeric {key} {value!r:.40}")
        score = float(value)
        if not math.isfinite(score):
            raise self._error(f"result {position} has a non-finite {key} {score}")
        return score

    def _error(self, problem: str) -> UpstreamError:
        return self._http.error(problem)


def _sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)  # no overflow for very negative logits
    return z / (1.0 + z)
