"""Who may call what (issue 34): every request's key is checked here, once, before any route runs.

- **Who.** A key comes as `X-API-Key: KEY` or `Authorization: Bearer KEY`. `[serve] api_key` (when set) is an
  admin key on every collection, as it always was; keys made by `funnel keys create` or `POST /v1/keys`
  are checked against the key store (`funnel.apps.state.keys`). With neither (no `api_key`, no key ever made)
  the service is open, as before keys existed.
- **What.** `POLICY` gives each route the role it needs and whether it is about one collection (the `{name}`
  in its path). A route missing from `POLICY` needs an admin on every collection (default deny: a new
  route is closed until placed; tests/test_access_matrix.py fails until it is).
- **Answers.** No key, or a malformed, wrong, expired or revoked one: 401, one line. A collection the key
  does not cover: 404, the same answer as a collection that does not exist, so names do not leak. A
  collection it covers but a role too low, or a route outside collections that needs a role it lacks: 403.
  A key store that cannot be read: 503 (fail closed, never open). Over a limit: 429 with Retry-After. The
  open paths (the page, /health, the docs) need no key, but a key sent to them is checked all the same.
- **Seam.** Once a request's key is known, each of `hooks` is called with it (a `Principal`, None when the
  service is open), the route template and the ASGI scope; a hook refuses by raising a FunnelError, which
  is answered like any other. Per-key rate limits (`limits.KeyLimits`) and the audit log hang here; refused
  keys are counted per client address by `guard` (`limits.AuthGuard`: 429 once too many). Routes read the key from
  `request.scope[SCOPE_KEY]` (`principal_of`) to show only what it may see (`GET /v1/collections`,
  `/health`). For middleware outside this one (the audit log, which needs the response's status), the
  scope also carries the route and its path parameters (`ROUTE_KEY`) and, once known, who the request is
  (`WHO_KEY`: a key id, `api_key`, or `open`), refused or not.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from starlette.concurrency import run_in_threadpool
from starlette.routing import compile_path
from starlette.types import ASGIApp, Receive, Scope, Send

from funnel.apps.api.errors import Forbidden, Unauthorized, error_response
from funnel.apps.api.limits import AuthGuard
from funnel.apps.state.keys import KeyRejected, KeyVerifier, Role, parse_token
from funnel.apps.state.limits import MemoryCounters
from funnel.errors import FunnelError, NotFound

SCOPE_KEY = "funnel.key"
ROUTE_KEY = "funnel.route"  # ("METHOD /template" or None, {path parameter: value})
WHO_KEY = "funnel.who"
LEGACY_ID = "api_key"
OPEN_ID = "open"
OPEN_PATHS = frozenset({"/", "/health", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"})
OPEN_PREFIXES = ("/static/",)
MISSING = "missing API key: send it as X-API-Key or Authorization: Bearer"


@dataclass(frozen=True)
class Principal:
    """Who a request is: a key's id, its role and its collections (None: every one)."""

    id: str
    role: Role
    collections: frozenset[str] | None = None
    rpm: int | None = None  # the key's own limits (None: the service's defaults; 0: none), see api.limits
    upload_mb_per_day: float | None = None

    def sees(self, collection: str) -> bool:
        return self.collections is None or collection in self.collections

    def may(self, role: Role) -> bool:
        return self.role.at_least(role)


@dataclass(frozen=True)
class Rule:
    role: Role
    collection: bool  # the route is about the collection its path's {name} names
    keyed: bool = False  # refused on an open service too: its first key is made on the server (CLI)


R, W, A = Role.READER, Role.WRITER, Role.ADMIN
_C = "/v1/collections/{name}"
POLICY: dict[str, Rule] = {
    # Outside collections. Rerank and embeddings compute on what the caller sends: any key.
    "POST /v1/rerank": Rule(R, False), "POST /api/rerank": Rule(R, False), "POST /v1/embeddings": Rule(R, False),
    "GET /v1/collections": Rule(R, False),  # lists only the collections the key covers
    "POST /v1/collections": Rule(A, False),
    "GET /metrics": Rule(A, False),  # the whole service's counts and queue
    "POST /v1/errors": Rule(W, False),  # a service reporting its error records an incident
    "GET /v1/incidents": Rule(A, False), "GET /v1/incidents/{incident_id}": Rule(A, False),
    "POST /v1/keys": Rule(A, False, True), "GET /v1/keys": Rule(A, False, True),
    "DELETE /v1/keys/{key_id}": Rule(A, False, True),
    "GET /v1/audit": Rule(A, False),  # who did what, from where
    "GET /v1/keys/me": Rule(R, False),  # the caller's own key: what the web page may show
    # One collection's.
    f"DELETE {_C}": Rule(A, True),
    f"GET {_C}/documents": Rule(R, True), f"GET {_C}/documents/{{doc_id}}": Rule(R, True),
    f"GET {_C}/documents/{{doc_id}}/file": Rule(R, True), f"GET {_C}/chunks/{{chunk_id}}": Rule(R, True),
    f"POST {_C}/documents": Rule(W, True), f"DELETE {_C}/documents/{{doc_id}}": Rule(W, True),
    f"POST {_C}/search": Rule(R, True), f"POST {_C}/ask": Rule(R, True),
    f"GET {_C}/calibration": Rule(R, True), f"POST {_C}/calibrate": Rule(A, True),
    # Conversations are the collection's, shared by all who read it: changing one is a write. Continuing one
    # (an ask with its id) is for the key that started it, or a writer (`funnel.apps.api.ask`).
    f"GET {_C}/conversations": Rule(R, True), f"GET {_C}/conversations/{{conversation_id}}": Rule(R, True),
    f"PATCH {_C}/conversations/{{conversation_id}}": Rule(W, True),
    f"DELETE {_C}/conversations/{{conversation_id}}": Rule(W, True),
}
GLOBAL_ADMIN = Rule(A, False)  # a route not in POLICY

Hook = Callable[["Principal | None", str, Scope], None]


ANONYMOUS = Principal("anonymous", Role.READER, frozenset())  # an open path without a key: sees nothing


def principal_of(scope_or_request) -> Principal | None:
    """The request's key; None when the service is open (then the request may see everything)."""
    scope = getattr(scope_or_request, "scope", scope_or_request)
    return scope.get(SCOPE_KEY)


def visible(principal: Principal | None, names):
    return [n for n in names if principal is None or principal.sees(n)]


def authorize(principal: Principal, rule: Rule, collection: str | None) -> None:
    """Raises NotFound, Forbidden; returns when the key may call the route."""
    if rule.collection and collection is not None:
        if not principal.sees(collection):
            raise NotFound(f"no collection {collection!r}")  # what a collection that does not exist says
        if not principal.may(rule.role):
            raise Forbidden(f"a {principal.role.value} key may not do this; it needs {rule.role.value}")
        return
    needs_all = rule.role is Role.ADMIN
    if not principal.may(rule.role) or (needs_all and principal.collections is not None):
        whose = "an admin key on every collection" if needs_all else f"a {rule.role.value} key"
        raise Forbidden(f"this needs {whose}; this key is a {principal.role.value}")


class KeyAuth:
    """The middleware: who the request is (401, 503), then whether it may (404, 403), then `hooks`."""

    def __init__(self, app: ASGIApp, api, verifier: KeyVerifier, legacy_key: str | None = None,
                 hooks: Sequence[Hook] = (), guard: AuthGuard | None = None):
        self.app, self.api, self.verifier = app, api, verifier
        self.guard = guard if guard is not None else AuthGuard(MemoryCounters(), per_window=0)
        self.legacy = legacy_key.encode() if legacy_key else None
        self._schema, self._routes = None, []
        self.hooks = hooks  # the list itself: a hook added after the app is built still runs

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] == "OPTIONS":  # CORS preflights carry no key by design
            await self.app(scope, receive, send)
            return
        try:
            await run_in_threadpool(self._admit, scope)  # the key store and the counters may be PostgreSQL
        except FunnelError as error:
            await error_response(error)(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _admit(self, scope: Scope) -> None:
        """Who (401, 503, 429 for an address), whether they may (404, 403), then the hooks (429 for a key)."""
        template, params = self._route(scope)
        collection = params.get("name")
        scope[ROUTE_KEY] = (template, params)
        is_open = _is_open(_route_path(scope))
        principal = self._who(presented_key(scope), is_open, client_address(scope))
        scope[WHO_KEY] = principal.id if principal is not None else OPEN_ID
        rule = POLICY.get(template, GLOBAL_ADMIN)
        if not is_open and principal is not None:
            authorize(principal, rule, collection)
        elif not is_open and rule.keyed:
            raise Forbidden("this service has no keys yet: make the first admin key on the server with "
                            "`funnel keys create --role admin`")
        scope[SCOPE_KEY] = principal
        for hook in self.hooks:
            hook(principal, template or "unmatched", scope)

    def _who(self, token: str | None, is_open: bool, client: str) -> Principal | None:
        """The request's key; None when the service is open (no api_key, no key ever made). On an open path
        (the page, /health) a missing key is no error: the request sees what the open do (as it does when
        the key store cannot be read). A key presented there is checked like anywhere else: a refused one is
        a 401, counted for its address and audited, so /health is no free oracle for guessing keys (issue 40).
        An address that sent too many refused keys gets 429 whenever it sends a key or calls a guarded path."""
        if not is_open or token is not None:
            self.guard.check(client)
        if token is not None and self.legacy is not None and hmac.compare_digest(token.encode(), self.legacy):
            return Principal(LEGACY_ID, Role.ADMIN)
        try:
            active = self.legacy is not None or self.verifier.active()
            if not active:
                return None
            if token is None:
                raise Unauthorized(MISSING)
            try:
                record = self.verifier.verify(token)
            except KeyRejected as e:  # counted per address, and a trail: who tried, the key id, never the secret
                parsed = parse_token(token)
                self.guard.refused(client, parsed[0] if parsed else None, str(e))
                raise Unauthorized(str(e)) from None
        except Unauthorized:
            if is_open and token is None:
                return ANONYMOUS
            raise
        except FunnelError:  # the key store cannot be read: 503 on a guarded path, nothing to see on an open one
            if is_open:
                return ANONYMOUS
            raise
        names = frozenset(record.collections) if record.collections is not None else None
        return Principal(record.id, record.role, names, record.rpm, record.upload_mb_per_day)

    def _route(self, scope: Scope) -> tuple[str | None, dict[str, str]]:
        """("METHOD /template", the path's parameters: {name} and the rest) of the route the request reaches,
        from the app's OpenAPI schema (what tests/test_access_matrix.py checks); (None, {}) for a path the
        schema does not hold (an unknown path, a wrong method, a route left out of the schema), which then
        needs an admin on every collection."""
        schema = self.api.openapi()
        if schema is not self._schema:
            self._routes = [(method.upper(), path, compile_path(path)[0])
                            for path, operations in schema["paths"].items() for method in operations]
            self._schema = schema
        method = "GET" if scope["method"] == "HEAD" else scope["method"]
        path = _route_path(scope)
        for route_method, template, pattern in self._routes:
            match = pattern.match(path) if route_method == method else None
            if match:
                return f"{method} {template}", match.groupdict()
        return None, {}


def client_address(scope: Scope) -> str:
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


def presented_key(scope: Scope) -> str | None:
    given = _header(scope, b"x-api-key")
    if given is None:
        scheme, _, token = (_header(scope, b"authorization") or "").partition(" ")
        given = token.strip() if scheme.lower() == "bearer" else None
    return given


def _route_path(scope: Scope) -> str:
    """The path the app routes on: behind `--root-path /x`, Starlette's path still carries the prefix."""
    path, root = scope["path"], scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root):] or "/"
    return path


def _is_open(path: str) -> bool:
    return path in OPEN_PATHS or path.startswith(OPEN_PREFIXES)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return value.decode("latin-1")
    return None
