"""Pure ASGI middleware (no BaseHTTPMiddleware: it buffers nothing here, so streamed answers and client
disconnects pass straight through): body size limits, request counting and security headers (keys: `access`).

Security headers (issue 40), on every response unless the route set the header itself: `nosniff`, no
framing (`X-Frame-Options: DENY`, CSP `frame-ancestors 'none'`), no Referer, and a Content-Security-Policy
by what the response is. The page (`GET /`) runs only its own files from /static: it has no inline script,
style or event-handler attribute (tests/test_security_headers.py checks), so it needs no hash and no
'unsafe-inline'. An original file (`.../documents/{id}/file`) is sandboxed with nothing loaded, so an uploaded
HTML or SVG cannot run script in the service's origin; a PDF is the exception, since Chrome refuses to show a
sandboxed PDF at all (chromium 413851) and the page opens cited pages in it (a PDF is served as
application/pdf with nosniff, and its viewer runs no script in the origin). JSON gets `default-src 'none'`.
/docs and /redoc get no policy: Swagger UI and ReDoc load from a CDN with inline script."""

from __future__ import annotations

import re

from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from funnel.apps.api.errors import TooLarge, error_response
from funnel.apps.state.metrics import Metrics

MAX_BODY_BYTES = 16 * 1024 * 1024
UPLOAD_PATH = re.compile(r"^/v1/collections/[^/]+/documents/?$")
# Multipart framing around the files: boundaries and part headers.
MULTIPART_SLACK = 64 * 1024
FILE_PATH = re.compile(r"^/v1/collections/[^/]+/documents/.+/file$")
NO_POLICY_PATHS = frozenset({"/docs", "/docs/oauth2-redirect", "/redoc"})
ALWAYS = (("x-content-type-options", "nosniff"), ("x-frame-options", "DENY"),
          ("referrer-policy", "no-referrer"))
API_POLICY = "default-src 'none'; frame-ancestors 'none'"
FILE_POLICY = "sandbox; default-src 'none'"
PDF_POLICY = "frame-ancestors 'none'"
# blob: is where the page opens a file fetched with its key; that window inherits this policy.
PAGE_POLICY = ("default-src 'self'; img-src 'self' data: blob:; object-src 'self' blob:; "
               "frame-src 'self' blob:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")


class BodyTooLarge(HTTPException):
    """Raised from `receive` once a body without a Content-Length passes its limit. An HTTPException,
    because FastAPI turns any other error raised while parsing a body into a 400."""

    error_name = "TooLarge"

    def __init__(self, limit: int):
        super().__init__(413, f"request body over the {limit / 2**20:.0f} MiB limit")


class HttpOnly:
    """Middleware that acts on HTTP requests only: websockets and lifespan events pass straight through
    to the app. A subclass says what it does with a request in `http`."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.http(scope, receive, send)

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        raise NotImplementedError


class BodyLimit(HttpOnly):
    """Uploads may be up to `upload_bytes` (plus multipart framing); every other body MAX_BODY_BYTES. A
    declared Content-Length over the limit is refused before a byte is read; a chunked body is counted."""

    def __init__(self, app: ASGIApp, upload_bytes: int):
        super().__init__(app)
        self.upload_bytes = upload_bytes

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        upload = scope["method"] == "POST" and UPLOAD_PATH.match(scope["path"])
        limit = self.upload_bytes + MULTIPART_SLACK if upload else MAX_BODY_BYTES
        shown = self.upload_bytes if upload else MAX_BODY_BYTES
        length = _header(scope, b"content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            response = error_response(TooLarge(f"request body over the {shown / 2**20:.0f} MiB limit"))
            await response(scope, receive, send)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge(shown)
            return message

        await self.app(scope, counted, send)


class RequestMetrics(HttpOnly):
    """Counts every HTTP request by method, route template and status (once the response has ended)."""

    def __init__(self, app: ASGIApp, metrics: Metrics):
        super().__init__(app)
        self.metrics = metrics

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        status = 500

        async def observed(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, observed)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None)
            if template is None:  # no route matched (a 404), or a mounted app such as /static
                template = "/static" if scope["path"].startswith("/static/") else "unmatched"
            self.metrics.count_request(scope["method"], template, status)


class SecurityHeaders(HttpOnly):
    """The headers of the module docstring, added to a response's start without overwriting the route's."""

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"]
        root = scope.get("root_path", "")
        if root and path.startswith(root):  # behind --root-path, Starlette's path still carries the prefix
            path = path[len(root):] or "/"
        is_file = scope["method"] in ("GET", "HEAD") and FILE_PATH.match(path) is not None

        async def secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])  # optional in ASGI
                headers = MutableHeaders(scope=message)
                for name, value in ALWAYS:
                    headers.setdefault(name, value)
                policy = _policy(path, is_file, headers.get("content-type", ""))
                if policy is not None:
                    headers.setdefault("content-security-policy", policy)
            await send(message)

        await self.app(scope, receive, secured)


def _policy(path: str, is_file: bool, content_type: str) -> str | None:
    if path in NO_POLICY_PATHS:
        return None
    if path == "/":
        return PAGE_POLICY
    if is_file:
        return PDF_POLICY if content_type.startswith("application/pdf") else FILE_POLICY
    return API_POLICY


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return value.decode("latin-1")
    return None
