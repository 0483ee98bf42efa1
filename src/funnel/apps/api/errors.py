"""Errors are converted once, here: every `FunnelError` becomes a status code and a one-line `detail`.

The HTTP-only kinds of failure (too large, wrong media type, a missing API key) are `FunnelError`s too, so
they travel the same one road to the client; so is the core's `Conflict` with the state a request finds
(409). Request validation answers 422 with {loc, msg, type} per problem and never echoes the offending input
back; anything unexpected is a 500 with a generic message (the traceback goes to the server's log, never to
the client).
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from funnel.errors import (
    BackendUnavailable,
    ConfigError,
    Conflict,
    FunnelError,
    IngestError,
    NotFound,
    StoreError,
    UpstreamError,
    UpstreamTimeout,
)

log = logging.getLogger("funnel.api")


class TooLarge(FunnelError):
    """A request body or an uploaded file is over its limit."""


class UnsupportedType(FunnelError):
    """An upload whose type funnel does not ingest (by extension or by content)."""


class Unauthorized(FunnelError):
    """No API key, or the wrong one."""


class Forbidden(FunnelError):
    """A good key whose role is too low for the route (a collection it does not cover is a NotFound)."""


class RateLimited(FunnelError):
    """Over a limit (a key's requests per minute or upload bytes per day, an address's refused keys): 429
    with Retry-After, the whole seconds until the window that holds the count ends."""

    def __init__(self, message: str, retry_after_s: int):
        super().__init__(message)
        self.retry_after_s = retry_after_s


class LengthRequired(FunnelError):
    """An upload without Content-Length by a key whose upload bytes are limited: it could not be charged."""


# Most specific first; the first class an error is an instance of decides its status.
ERROR_STATUS: tuple[tuple[type[FunnelError], int], ...] = (
    (UpstreamTimeout, 504),
    (UpstreamError, 502),
    (BackendUnavailable, 503),
    (StoreError, 503),
    (ConfigError, 400),
    (Unauthorized, 401),
    (Forbidden, 403),
    (NotFound, 404),
    (Conflict, 409),
    (LengthRequired, 411),
    (TooLarge, 413),
    (UnsupportedType, 415),
    (IngestError, 422),
    (RateLimited, 429),
)


def status_for(error: FunnelError) -> int:
    return next((status for cls, status in ERROR_STATUS if isinstance(error, cls)), 500)


def error_body(error: FunnelError) -> dict:
    return {"detail": str(error), "error": type(error).__name__}


def error_response(error: FunnelError) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if isinstance(error, Unauthorized) else None
    if getattr(error, "retry_after_s", None):  # the database is down, or a limit: when to come back
        headers = {"Retry-After": str(error.retry_after_s)}
    return JSONResponse(error_body(error), status_code=status_for(error), headers=headers)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(FunnelError)
    async def funnel_error(request: Request, error: FunnelError) -> JSONResponse:
        return error_response(error)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, error: RequestValidationError) -> JSONResponse:
        # FastAPI's default echoes each offending input back: a 100 kB document would come back whole.
        detail = [
            {"loc": list(e["loc"]), "msg": e["msg"].removeprefix("Value error, "), "type": e["type"]}
            for e in error.errors()
        ]
        return JSONResponse({"detail": detail}, status_code=422)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException) -> JSONResponse:
        # Starlette's own (404 for an unknown path, 405, a body the form parser rejects): same shape.
        return JSONResponse(
            {"detail": str(error.detail), "error": getattr(error, "error_name", "HTTPError")},
            status_code=error.status_code,
            headers=getattr(error, "headers", None),
        )

    @app.exception_handler(Exception)
    async def unexpected(request: Request, error: Exception) -> JSONResponse:
        log.error("unexpected error on %s %s", request.method, request.url.path, exc_info=error)
        return JSONResponse({"detail": "internal error", "error": "InternalError"}, status_code=500)
