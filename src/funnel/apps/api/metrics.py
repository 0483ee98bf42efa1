"""`GET /health` and `GET /metrics`: what the service runs and where its state is; request counts per route
and status, per-stage latency percentiles and the ingest queue, from the app's metrics
(`funnel.apps.state.metrics`: this process's, or with `funnel serve --database` the whole service's).
"""

from __future__ import annotations

from fastapi import APIRouter, Request

import funnel
from funnel.apps.api.access import principal_of, visible

router = APIRouter(tags=["health"])


@router.get("/health")
def health(request: Request) -> dict:
    state = request.app.state
    principal = principal_of(request)
    seen = set(visible(principal, state.library.names()))
    reranker = state.reranker
    chat = state.chat
    return {
        "status": "ok",
        "version": funnel.__version__,
        "reranker": reranker.name if reranker else None,
        "llm": chat.name if chat else None,
        "generator": state.generator_name,
        "embedder": state.embedder_spec,
        # Only the collections the request's key covers (every one when the service is open).
        "collections": len(visible(principal, state.library.names())),
        # What the second stage does on each collection (the `auto` policy) and why.
        "calibration": {n: c for n, c in state.library.calibrations().items() if n in seen},
        "auth": state.settings.serve.api_key is not None or principal is not None,
        # Where the state is and where searches read the indexes (no user or password).
        "database": _label(state.settings.database.url),
        "search_database": _label(state.settings.database.search_url),
        # Folders kept in sync (`funnel serve --watch`): when each last synced, what changed, the last error.
        "watched": state.watched.statuses(),
        # What this server serves beyond search and ask, so the web page calls only what is there.
        "features": {"triage": state.triage_queue is not None, "watch": bool(state.watched.specs)},
    }


def _label(url) -> str | None:
    from funnel.apps.state.db import url_label

    return url_label(url.get_secret_value()) if url is not None else None


@router.get("/metrics")
def metrics(request: Request) -> dict:
    state = request.app.state
    # audit: rows of writes that were done but could not be stored (each is in the server's log, whole).
    return {**state.metrics.snapshot(), "ingest_queue": state.library.pending(),
            "audit": state.audit.status()}
