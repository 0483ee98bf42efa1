"""Reranking over HTTP with the configured reranker, in two wire shapes, so that clients written for other
servers can point at funnel unchanged:

- `POST /v1/rerank`: Cohere / Jina (`{model?, query, documents, top_n?, return_documents?}`).
- `POST /api/rerank`: the Ollama-style shape of seed 000 (`{model?, query, documents}`).

The endpoints are plain `def`, so FastAPI runs the (sync) reranker in its threadpool.

Caps (issue 40: one call of 1,000 documents held the CPU for 36 s): at most 256 documents, 32,000 characters
each and 2,000,000 in all per call; over one, a 422 naming it. 256 is ten times the window funnel's own
pipeline reranks (25) and scores in ~3-8 s on 2 cores with the built-in model. A local reranker reads at most
512 tokens of a pair (`rerank.max_tokens`, 192 by default) and an HTTP one rarely over 4,096, which ordinary
text fits in well under 32,000 characters: a longer document is cut unread, so the cap loses no score, only
tokenizing work. Calls are also counted per key (`[serve] compute_rpm`, `funnel.apps.api.limits`).
"""

from __future__ import annotations

import math
import uuid
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from pydantic import AfterValidator, BaseModel, Field

from funnel.rerank import REGISTRY as RERANKERS
from funnel.errors import BackendUnavailable, UpstreamError
from funnel.rerank.base import Reranker
from funnel.types import Candidate, Chunk, RerankResult

MAX_DOCUMENTS = 256
MAX_DOCUMENT_CHARS = 32_000
MAX_TOTAL_CHARS = 2_000_000
MAX_QUERY_CHARS = 100_000


# --- request and response models ------------------------------------------------------------------------


class TextDocument(BaseModel):
    text: str


def _query(value: str) -> str:
    if not value.strip():
        raise ValueError("query is empty")
    return value


def _documents(values: list[str | TextDocument]) -> list[str | TextDocument]:
    total = 0
    for i, value in enumerate(values):
        text = value if isinstance(value, str) else value.text
        if len(text) > MAX_DOCUMENT_CHARS:
            raise ValueError(f"documents[{i}] has {len(text)} characters; the limit is {MAX_DOCUMENT_CHARS}")
        total += len(text)
        if total > MAX_TOTAL_CHARS:
            raise ValueError(f"the documents pass {MAX_TOTAL_CHARS} characters in all (at documents[{i}]); "
                             "the limit is per request")
        try:  # a str in a union lets a lone surrogate ("\ud800") through; echoed back, it cannot be encoded
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"documents[{i}] is not valid Unicode text (a lone surrogate)") from None
    return values


Query = Annotated[str, Field(max_length=MAX_QUERY_CHARS), AfterValidator(_query)]


class CohereRerankRequest(BaseModel):
    """Cohere / Jina rerank request. Unknown fields (e.g. `max_chunks_per_doc`) are ignored."""

    model: str | None = None
    query: Query
    documents: Annotated[
        list[str | TextDocument], Field(max_length=MAX_DOCUMENTS), AfterValidator(_documents)
    ]
    top_n: int | None = Field(None, ge=1, description="return only the best N (default: all)")
    return_documents: bool = False

    def texts(self) -> list[str]:
        return [d if isinstance(d, str) else d.text for d in self.documents]


class CohereResult(BaseModel):
    index: int
    relevance_score: float
    document: TextDocument | None = None


class CohereRerankResponse(BaseModel):
    id: str
    model: str | None = None
    results: list[CohereResult]
    meta: dict | None = None


class OllamaRerankRequest(BaseModel):
    """The request of seed 000's `_rerank` client."""

    model: str | None = None
    query: Query
    documents: Annotated[list[str], Field(max_length=MAX_DOCUMENTS), AfterValidator(_documents)]


class OllamaResult(BaseModel):
    index: int
    relevance_score: float


class OllamaRerankResponse(BaseModel):
    model: str | None = None
    results: list[OllamaResult]


# --- dependencies ---------------------------------------------------------------------------------------


def configured_reranker(request: Request) -> Reranker:
    reranker = request.app.state.reranker
    if reranker is None:
        raise BackendUnavailable(
            "no reranker configured: start funnel serve with FUNNEL_RERANK__BACKEND (or reranker in funnel.toml) "
            f"set to one of {', '.join(s for s in RERANKERS.forms() if s != 'none')}"
        )
    return reranker


RerankerDep = Annotated[Reranker, Depends(configured_reranker)]


def _scores(reranker: Reranker, query: str, texts: list[str]) -> RerankResult:
    """The reranker's scores for `texts`, in order; a backend that answers the wrong number of scores or a
    non-finite one is an upstream failure, not a 500 with a JSON encoding error."""
    candidates = [
        Candidate(
            Chunk(
                chunk_id=f"request#{i}", doc_id=f"request#{i}", ordinal=0, text=text, path="", title="",
                kind="text", n_tokens=len(text.split()),
            ),
            fused_rank=i + 1,
            fused_score=0.0,
        )
        for i, text in enumerate(texts)
    ]
    result = reranker.rerank(query, candidates) if candidates else RerankResult(())
    if len(result.scores) != len(texts):
        raise UpstreamError(
            "rerank", f"{reranker.name} returned {len(result.scores)} scores for {len(texts)} documents"
        )
    if not all(math.isfinite(s) for s in result.scores):
        raise UpstreamError("rerank", f"{reranker.name} returned a non-finite score")
    return result


def _best_first(scores: tuple[float, ...]) -> list[int]:
    return sorted(range(len(scores)), key=lambda i: (-scores[i], i))


# --- the router -------------------------------------------------------------------------------------

router = APIRouter(tags=["rerank"])


@router.post("/v1/rerank", response_model=CohereRerankResponse, response_model_exclude_none=True)
def rerank_cohere(body: CohereRerankRequest, reranker: RerankerDep) -> CohereRerankResponse:
    """Cohere / Jina shape: results best first, `top_n` of them, documents echoed on request."""
    texts = body.texts()
    result = _scores(reranker, body.query, texts)
    order = _best_first(result.scores)[: body.top_n]
    results = [
        CohereResult(
            index=i,
            relevance_score=result.scores[i],
            document=TextDocument(text=texts[i]) if body.return_documents else None,
        )
        for i in order
    ]
    meta = {"api_version": {"version": "1"}, "reranker": reranker.name}
    if result.truncated:
        meta["truncated"] = list(result.truncated)
    return CohereRerankResponse(
        id=str(uuid.uuid4()), model=reranker.name, results=results, meta=meta
    )


@router.post("/api/rerank", response_model=OllamaRerankResponse, response_model_exclude_none=True)
def rerank_ollama(body: OllamaRerankRequest, reranker: RerankerDep) -> OllamaRerankResponse:
    """The seed's shape: every document's index and relevance_score, best first."""
    result = _scores(reranker, body.query, body.documents)
    results = [OllamaResult(index=i, relevance_score=result.scores[i]) for i in _best_first(result.scores)]
    return OllamaRerankResponse(model=reranker.name, results=results)
