"""funnel's HTTP API (`funnel serve`): a FastAPI app built by `create_app(settings)` from routers.

For now it serves reranking with the configured local reranker, in two wire shapes, so that clients
written for other servers can point at funnel unchanged:

- `POST /v1/rerank`: Cohere / Jina (`{model?, query, documents, top_n?, return_documents?}`).
- `POST /api/rerank`: the Ollama-style shape of seed 000 (`{model?, query, documents}`).

Errors are converted once: one handler maps `FunnelError` subclasses to status codes; request validation
answers 422 with a `detail` list of {loc, msg, type} (without FastAPI's echo of the offending input).
The endpoints are plain `def`, so FastAPI runs the (sync) reranker in its threadpool.
OpenAPI: `/openapi.json`; interactive docs at `/docs` (Swagger UI loads its assets from a CDN).
New areas (collections, search, ask) come as more routers included in `create_app`.
"""

from __future__ import annotations

import math
import uuid
from contextlib import asynccontextmanager
from typing import Annotated

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import AfterValidator, BaseModel, Field
from starlette.concurrency import run_in_threadpool

import funnel
from funnel.apps.factory import RERANKER_SPECS, reranker_from_settings
from funnel.apps.settings import Settings
from funnel.errors import (
    BackendUnavailable,
    ConfigError,
    FunnelError,
    IngestError,
    NotFound,
    StoreError,
    UpstreamError,
    UpstreamTimeout,
)
from funnel.rerank.base import Reranker
from funnel.types import Candidate, Chunk, RerankResult

MAX_DOCUMENTS = 1000
MAX_DOCUMENT_CHARS = 100_000
MAX_QUERY_CHARS = 100_000

# Most specific first; the first class an error is an instance of decides its status.
ERROR_STATUS: tuple[tuple[type[FunnelError], int], ...] = (
    (UpstreamTimeout, 504),
    (UpstreamError, 502),
    (BackendUnavailable, 503),
    (StoreError, 503),
    (ConfigError, 400),
    (NotFound, 404),
    (IngestError, 422),
)


def status_for(error: FunnelError) -> int:
    return next((status for cls, status in ERROR_STATUS if isinstance(error, cls)), 500)


# --- request and response models ------------------------------------------------------------------------


class TextDocument(BaseModel):
    text: str


def _query(value: str) -> str:
    if not value.strip():
        raise ValueError("query is empty")
    return value


def _documents(values: list[str | TextDocument]) -> list[str | TextDocument]:
    for i, value in enumerate(values):
        text = value if isinstance(value, str) else value.text
        if len(text) > MAX_DOCUMENT_CHARS:
            raise ValueError(f"documents[{i}] has {len(text)} characters; the limit is {MAX_DOCUMENT_CHARS}")
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
            "no reranker configured: start funnel serve with FUNNEL_RERANKER (or reranker in funnel.toml) "
            f"set to one of {', '.join(s for s in RERANKER_SPECS if s != 'none')}"
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


# --- routers --------------------------------------------------------------------------------------------

health_router = APIRouter(tags=["health"])


@health_router.get("/health")
def health(request: Request) -> dict:
    reranker = request.app.state.reranker
    return {"status": "ok", "version": funnel.__version__, "reranker": reranker.name if reranker else None}


rerank_router = APIRouter(tags=["rerank"])


@rerank_router.post("/v1/rerank", response_model=CohereRerankResponse, response_model_exclude_none=True)
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


@rerank_router.post("/api/rerank", response_model=OllamaRerankResponse, response_model_exclude_none=True)
def rerank_ollama(body: OllamaRerankRequest, reranker: RerankerDep) -> OllamaRerankResponse:
    """The seed's shape: every document's index and relevance_score, best first."""
    result = _scores(reranker, body.query, body.documents)
    results = [OllamaResult(index=i, relevance_score=result.scores[i]) for i in _best_first(result.scores)]
    return OllamaRerankResponse(model=reranker.name, results=results)


# --- the app --------------------------------------------------------------------------------------------


MAX_BODY_BYTES = 16 * 1024 * 1024


def create_app(settings: Settings, reranker: Reranker | None = None, triage=None) -> FastAPI:
    """The API over `settings`. `reranker` replaces the one `settings.reranker` names (tests inject one);
    a bad spec fails here, before the server starts listening. Triage is served when `triage` (a
    TriageService) is given or `settings.repo` names a repository; the repository is indexed (incrementally)
    at start-up."""
    reranker = reranker if reranker is not None else reranker_from_settings(settings)
    if triage is None and settings.repo is not None:
        from funnel.apps.triage.build import build_triage

        triage = build_triage(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        warm_up = getattr(reranker, "warm_up", None)
        if callable(warm_up):  # a model loads once, at start-up, not on the first request
            await run_in_threadpool(warm_up)
        if triage is not None and settings.repo is not None:
            await run_in_threadpool(triage.pipeline.ingest, [settings.repo])
        yield
        close = getattr(reranker, "close", None)
        if callable(close):
            close()

    app = FastAPI(
        title="funnel",
        version=funnel.__version__,
        description="Local-first two-stage retrieval. Reranking in the Cohere/Jina and Ollama shapes.",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.reranker = reranker
    app.state.triage = triage

    @app.middleware("http")
    async def limit_body(request: Request, call_next):
        length = request.headers.get("content-length", "")
        if length.isdigit() and int(length) > MAX_BODY_BYTES:
            return JSONResponse({"detail": f"request body over {MAX_BODY_BYTES // 2**20} MiB"}, status_code=413)
        return await call_next(request)

    @app.exception_handler(FunnelError)
    async def funnel_error(request: Request, error: FunnelError) -> JSONResponse:
        body = {"detail": str(error), "error": type(error).__name__}
        return JSONResponse(body, status_code=status_for(error))

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, error: RequestValidationError) -> JSONResponse:
        # FastAPI's default echoes each offending input back: a 100 kB document would come back whole.
        detail = [
            {"loc": list(e["loc"]), "msg": e["msg"].removeprefix("Value error, "), "type": e["type"]}
            for e in error.errors()
        ]
        return JSONResponse({"detail": detail}, status_code=422)

    app.include_router(health_router)
    app.include_router(rerank_router)
    from funnel.apps.triage.routes import router as triage_router

    app.include_router(triage_router)
    return app
