"""funnel's HTTP API (`funnel serve`): a FastAPI app built by `create_app(settings)` from routers.

- `rerank`: `POST /v1/rerank` (Cohere/Jina shape) and `POST /api/rerank` (seed 000's Ollama shape).
- `embeddings`: `POST /v1/embeddings` (OpenAI's shape), so other tools can share funnel's embedder.
- `collections`: collections, document upload (background ingest), documents, chunks, search.
- `ask`: answers with citations, JSON or server-sent events, with conversation memory.
- `conversations`: a collection's conversations: list, read, rename, delete.
- `metrics`: `GET /health`, `GET /metrics`.
- `keys`, `audit`: the API keys, and the log of every write (`GET /v1/audit`; recorded by `audit.AuditTrail`).
- triage (`funnel.apps.triage.routes`): `POST /v1/errors`, incidents.
- the web page: `GET /` serves `static/index.html`, `/static/...` the files beside it.

Errors are converted once (`errors`): `FunnelError` subclasses map to status codes; validation is a 422
without the offending input; anything else a 500 without a traceback. Keys (`access`): with `api_key` set
or any key made, every route but /health, the page and the docs needs one, and each key may do what its
role allows on its collections. OpenAPI: `/openapi.json`; docs at `/docs` (Swagger UI loads its assets from a
CDN). Every number a request carries has an upper bound (query and path parameters:
tests/test_bounded_params.py; rerank and embeddings sizes). Every response carries security headers
(`middleware.SecurityHeaders`). The client's address is the connection's; X-Forwarded-For is believed only
from `[serve] trusted_proxies` (uvicorn's ProxyHeadersMiddleware, outermost), never by uvicorn itself
(`uvicorn_options`).
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from starlette.concurrency import run_in_threadpool
from starlette.middleware.cors import CORSMiddleware
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

import funnel
from funnel.apps.api import ask, audit, collections, conversations, embeddings, keys, metrics, rerank
from funnel.apps.api.access import KeyAuth
from funnel.apps.api.audit import AuditLog, AuditTrail, gate_for
from funnel.apps.api.errors import ERROR_STATUS, install_error_handlers, status_for
from funnel.apps.api.limits import AuthGuard, KeyLimits
from funnel.apps.api.library import LazyEmbedder, Services, open_database, open_library
from funnel.apps.api.middleware import BodyLimit, RequestMetrics, SecurityHeaders
from funnel.apps.api.rewrite import QueryRewriter
from funnel.apps.api.watched_folders import WatchedFolders
from funnel.apps.factory import build_chat, build_generator, reranker_from_settings
from funnel.apps.settings import Settings
from funnel.apps.state.audit import open_audit
from funnel.apps.state.conversations import open_conversations
from funnel.apps.state.keys import KeyVerifier, open_keys
from funnel.apps.state.limits import open_counters
from funnel.apps.state.metrics import open_metrics
from funnel.embed import DEFAULT
from funnel.embed import load as load_embedder
from funnel.errors import ConfigError
from funnel.ingest.loaders import upload_accept
from funnel.rerank.base import Reranker

__all__ = ["ERROR_STATUS", "STATIC_DIR", "app_from_environment", "create_app", "services_for", "status_for",
           "uvicorn_options"]

STATIC_DIR = Path(__file__).parent / "static"
MIN_KEY_CHARS = 8
SECURITY_LOGGERS = ("funnel.api.access", "funnel.api.audit")


def create_app(settings: Settings, reranker: Reranker | None = None, triage=None, watch=()) -> FastAPI:
    """The API over `settings`. `reranker` replaces the one `settings.rerank.backend` names (tests inject one);
    a bad spec fails here, before the server starts listening. Nothing is loaded or written here: the
    embedder loads on first use, a collection's folder appears when it is first used. Triage is served when
    `triage` (a TriageService) is given or `settings.triage.repo` names a repository; the repository is indexed
    (incrementally) at start-up, and reports are analysed by the job workers (`settings.serve.job_threads`).
    `watch` (WatchSpecs, `funnel serve --watch`) names folders kept in sync with collections of their own, by watcher threads that start and stop with the app."""
    api_key = settings.section("serve").api_key
    if api_key is not None and len(api_key.strip()) < MIN_KEY_CHARS:
        raise ConfigError(f"api_key must be at least {MIN_KEY_CHARS} characters (leave it unset for no auth)")
    reranker = reranker if reranker is not None else reranker_from_settings(settings)
    chat = build_chat(settings)
    services = services_for(settings, reranker, chat)
    embedder, generator = services.embedder, services.generator
    db = open_database(settings)
    library = open_library(settings, services, db=db)
    from funnel.apps.triage.build import queued_triage  # here: it builds a pipeline only when asked to

    triage_queue = queued_triage(settings, library, triage, reranker=reranker, chat=chat, db=db)
    triage = triage_queue.service if triage_queue is not None else None
    app = FastAPI(
        title="funnel",
        version=funnel.__version__,
        description="Local-first two-stage retrieval: ask your documents, search, rerank, triage.",
        lifespan=_lifespan,
    )
    state = app.state
    state.settings, state.reranker, state.triage, state.chat = settings, reranker, triage, chat
    state.triage_queue = triage_queue
    state.generator, state.generator_name = generator, generator.name
    state.embedder_spec, state.embedder = settings.embedder or DEFAULT, embedder
    state.library = library
    if watch and library.home.shared:
        raise ConfigError("--watch follows a folder on this machine; it cannot be combined with --database")
    state.watched = WatchedFolders(library, list(watch), ignore=[settings.serve.data_dir])
    state.metrics = open_metrics(db)
    state.conversations = open_conversations(db, settings.serve.data_dir,
                                             max_conversations=settings.serve.conversations_per_collection,
                                             max_per_owner=settings.serve.conversations_per_key)
    state.rewriter = QueryRewriter(chat)
    state.keys = KeyVerifier(open_keys(db, settings.serve.data_dir))
    state.counters = open_counters(db)
    state.audit = AuditLog(open_audit(db, settings.serve.data_dir))
    limits = settings.serve
    state.request_hooks = [  # called with each request's key once it is known (access.KeyAuth)
        KeyLimits(state.counters, (limits.key_rpm, limits.key_upload_mb_per_day),
                  (limits.api_key_rpm, limits.api_key_upload_mb_per_day), limits.limit_window_s,
                  compute_rpm=limits.compute_rpm),
        gate_for(state.audit)]  # a write runs only while the audit log would take its row
    _add_routes(app)
    _add_middleware(app, settings)
    return app


def services_for(settings: Settings, reranker: Reranker | None, chat) -> Services:
    """What every collection's pipeline shares (the embedder loads on first use)."""
    engine = settings.engine()
    models = engine.models
    embedder = LazyEmbedder(lambda: load_embedder(settings.embedder or DEFAULT, settings.threads, models))
    return Services(
        embedder=embedder, reranker=reranker, generator=build_generator(chat, embedder, engine.llm),
        config=engine, max_upload_bytes=settings.serve.max_upload_mb * 2**20,
    )


def app_from_environment() -> FastAPI:
    """`funnel serve --workers N`: each uvicorn process builds its app from the environment (FUNNEL_*) and
    funnel.toml; the state they share is in the database."""
    from funnel.apps.settings import load_settings

    return create_app(load_settings())


def uvicorn_options() -> dict:
    """What `funnel serve` passes to uvicorn beyond host and port (tests/helpers.py serves the app the same).
    uvicorn's own X-Forwarded-For handling is off: by default it believes any process on 127.0.0.1, which
    could forge a new address per guessed key. The app believes only `[serve] trusted_proxies`."""
    return {"proxy_headers": False}


@asynccontextmanager
async def _lifespan(app: FastAPI):
    """Start-up: the reranker's model, triage steps a stopped server left in its memory queue marked
    interrupted, the triage repository's ingest, the watchers. Shutdown: the reverse,
    and every HTTP client and model session the app owns is closed."""
    state = app.state
    warm_up = getattr(state.reranker, "warm_up", None)
    if callable(warm_up):  # a model loads once, at start-up, not on the first request
        await run_in_threadpool(warm_up)
    if state.triage_queue is not None:  # before the first report: what the last run left is interrupted
        await run_in_threadpool(state.triage_queue.start)
    if state.triage is not None and state.settings.triage.repo is not None:
        await run_in_threadpool(state.triage.pipeline.ingest, [state.settings.triage.repo])
    await run_in_threadpool(state.watched.start)
    try:
        yield
    finally:
        await run_in_threadpool(state.watched.close)  # a running sync is cancelled and rolls back
        # Queued uploads stay "queued" in their collection's documents and resume at the next start.
        await run_in_threadpool(state.metrics.close)  # the last buffered counts, while the database is open
        await run_in_threadpool(state.library.close)
        owned = [state.reranker, state.chat]
        owned += [state.triage.notifier, state.triage.chat] if state.triage is not None else []
        for client in owned:  # HTTP clients and model sessions
            close = getattr(client, "close", None)
            if callable(close):
                close()


def _add_routes(app: FastAPI) -> None:
    from funnel.apps.triage.routes import router as triage_router

    install_error_handlers(app)
    routers = (metrics.router, rerank.router, embeddings.router, collections.router, ask.router,
               conversations.router, triage_router, keys.router, audit.router)
    for router in routers:
        app.include_router(router)
    _serve_web_page(app)


def _log_refusals() -> None:
    """Refused keys, blocked addresses and keys over their limits are warnings a server's operator must see:
    `funnel serve` keeps its own log at ERROR unless -v, so these loggers are held at WARNING at least."""
    for name in SECURITY_LOGGERS:
        logger = logging.getLogger(name)
        if not logger.isEnabledFor(logging.WARNING):
            logger.setLevel(logging.WARNING)


def _add_middleware(app: FastAPI, settings: Settings) -> None:
    _log_refusals()
    # Added innermost first: CORS outside KeyAuth and BodyLimit, so a 401 or 413 still carries CORS headers.
    app.add_middleware(BodyLimit, upload_bytes=settings.serve.max_upload_mb * 2**20)
    legacy = settings.serve.api_key.get_secret_value() if settings.serve.api_key is not None else None
    guard = AuthGuard(app.state.counters, settings.serve.auth_failures_per_minute, settings.serve.limit_window_s)
    app.add_middleware(KeyAuth, api=app, verifier=app.state.keys, legacy_key=legacy, hooks=app.state.request_hooks,
                       guard=guard)
    # Outside KeyAuth: its 401s are recorded too.
    app.add_middleware(AuditTrail, audit=app.state.audit, queries=settings.serve.audit_queries)
    app.add_middleware(RequestMetrics, metrics=app.state.metrics)
    if settings.serve.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.serve.cors_origins,
            allow_methods=["*"],
            allow_headers=["*"],
        )
    app.add_middleware(SecurityHeaders)  # outside CORS and KeyAuth: preflights, 401s and 429s get them too
    if settings.serve.trusted_proxies:  # outermost: every middleware inside sees the forwarded client
        app.add_middleware(ProxyHeadersMiddleware, trusted_hosts=list(settings.serve.trusted_proxies))


def _serve_web_page(app: FastAPI) -> None:
    index = STATIC_DIR / "index.html"
    if not index.is_file():
        return

    # The file picker offers what an upload takes: the loaders' table, not a second list in the HTML.
    page = index.read_text(encoding="utf-8").replace("{upload_accept}", upload_accept())

    @app.get("/", include_in_schema=False)
    def web_page() -> HTMLResponse:
        return HTMLResponse(page)

    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
