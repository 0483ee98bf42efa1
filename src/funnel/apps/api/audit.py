"""The audit log on the HTTP side (issue 34; the rows and their store: `funnel.apps.state.audit`).

    GET /v1/audit?limit=100&since=2026-12-05T00:00:00Z  -> [{id, time, who, action, route, collection,
                                                             target, client, status}], oldest first

for an admin on every collection (`access.POLICY`); `funnel audit` reads the same rows on the server.

**What is recorded.** Every request to a route of `ACTIONS` (the writes), whatever its answer: done (2xx),
refused for its role or collection (403, 404), or failed (409, 422, 5xx). And every request refused for its
key (401), on any route, as `auth.failed`: the trail of a brute-force attempt. And the reads of `READS`
(ask and search, issue 40), so that a flood of questions leaves a trace: who, which collection, when, the
status; the question itself only with `[serve] audit_queries = true` (questions may hold what people would
not want kept). A read is never refused for its row: an ask is answered while the log is down, and the row's
loss is counted like any other. Not recorded: the other reads, and the POSTs in `UNRECORDED`, which change
nothing a key holder manages (they compute on what they are sent, or add to a record of their own: an error
report is an incident). There is no route that
changes the triage configuration (it is `funnel.toml`, read at start-up), so none is recorded.
tests/test_audit.py fails when a route that is not a GET is in neither table.

**How.** Two pieces around `access.KeyAuth`, sharing one `AuditLog` (`app.state.audit`):
- `gate`, a request hook: once a write's key is known and allowed, and before the route runs, it asks the
  store whether it would take a row now (`check()`: SQLite's write lock, PostgreSQL's connection and insert
  right).
- `AuditTrail`, a middleware outside KeyAuth (so it sees KeyAuth's 401s): it reads the route, who, and the
  target from the request, the status from the response, and appends the row before the response's last
  part is sent (a client that has its answer can read the row).
  A key's secret never reaches a row: who is the key's id; a created key's id is read from the 201's body,
  of which nothing else is kept.

**A log that is down.** The write is refused with 503 before it is done. A write done without its record
is a hole that cannot be filled afterwards, which is what an audit log exists to prevent; a refused write
can be sent again once the log is back, and the log is in the same place as the rest of the service's
state (the data dir, or the database), so it is down when they mostly are. This is how a key store that
is down is treated too (fail closed). What the check cannot cover is the log failing between the check
and the append, after the write was done: then the write's answer stands (it happened; failing it would
be a lie), and the row is logged and flagged: written whole, as JSON, to the server's log at ERROR
("audit row not stored: {...}", enough to add it back), and counted in `GET /metrics` under `audit`.
A 401's row is not gated (nothing was done); if it cannot be stored, it is logged and counted the same way.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import asdict

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from funnel.apps.api.access import ROUTE_KEY, WHO_KEY, client_address, presented_key
from funnel.apps.state.audit import DEFAULT_LIMIT, MAX_LIMIT, AuditEvent, AuditStore, parse_since
from funnel.apps.state.keys import parse_token
from funnel.errors import FunnelError

log = logging.getLogger("funnel.api.audit")
_C = "/v1/collections/{name}"
ACTIONS: dict[str, str] = {
    "POST /v1/collections": "collection.create",
    f"DELETE {_C}": "collection.delete",
    f"POST {_C}/documents": "document.upload",
    f"DELETE {_C}/documents/{{doc_id}}": "document.delete",
    f"POST {_C}/calibrate": "calibration.request",
    "POST /v1/keys": "key.create",
    "DELETE /v1/keys/{key_id}": "key.revoke",
    f"PATCH {_C}/conversations/{{conversation_id}}": "conversation.rename",
    f"DELETE {_C}/conversations/{{conversation_id}}": "conversation.delete",
}
READS: dict[str, str] = {f"POST {_C}/search": "collection.search", f"POST {_C}/ask": "collection.ask"}
UNRECORDED = frozenset({"POST /v1/rerank", "POST /api/rerank", "POST /v1/embeddings", "POST /v1/errors"})
AUTH_FAILED = "auth.failed"
# Bodies read for a target: the request's (a collection's name, a new key's role) and the response's (an
# upload's ids and names, a new key's id). Capped: past the cap the target is what the path says.
_REQUEST_BODY = {"collection.create", "key.create"}
_QUERY_BODY = set(READS.values())  # read for the question only with audit_queries
_RESPONSE_BODY = {"document.upload", "key.create"}
_MAX_REQUEST_BYTES = 16 * 1024
_MAX_RESPONSE_BYTES = 1024 * 1024

router = APIRouter(tags=["audit"])


class AuditLog:
    """The store, and what could not be stored (`lost`, shown by `GET /metrics`)."""

    def __init__(self, store: AuditStore):
        self.store = store
        self.lost = 0
        self.last_loss: str | None = None
        self._lock = threading.Lock()

    def record(self, event: AuditEvent) -> None:
        try:
            self.store.append(event)
        except FunnelError as e:
            with self._lock:
                self.lost += 1
                self.last_loss = str(e)
            log.error("audit row not stored (%s): %s", e, json.dumps(asdict(event), ensure_ascii=False))

    def status(self) -> dict:
        return {"lost": self.lost, "last_loss": self.last_loss}


def gate_for(audit: AuditLog):
    """The request hook (run in a worker thread, as KeyAuth runs them): a write runs only while the log
    would take its row (else StoreError: 503)."""

    def gate(principal, template: str, scope: Scope) -> None:
        if template in ACTIONS:
            audit.store.check()

    return gate


class AuditTrail:
    """Middleware: one row per audited request, appended (in a thread) just before the last part of its
    response is sent, so the row is stored by the time the client has the answer, and rows follow the
    order in which one client's requests were answered."""

    def __init__(self, app: ASGIApp, audit: AuditLog, queries: bool = False):
        self.app, self.audit, self.queries = app, audit, queries
        self._request_bodies = _REQUEST_BODY | (_QUERY_BODY if queries else set())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] == "OPTIONS":
            await self.app(scope, receive, send)
            return
        status, request_body, response_body = 500, bytearray(), bytearray()
        recorded = False

        async def record() -> None:
            nonlocal recorded
            if not recorded:
                recorded = True
                event = event_for(scope, status, bytes(request_body), bytes(response_body), self.queries)
                if event is not None:
                    await run_in_threadpool(self.audit.record, event)

        def wanted(bodies: set[str]) -> bool:
            template = scope.get(ROUTE_KEY, (None, {}))[0]
            return _action(template) in bodies

        async def observed_receive() -> Message:
            message = await receive()
            if message["type"] == "http.request" and wanted(self._request_bodies):
                _keep(request_body, message.get("body", b""), _MAX_REQUEST_BYTES)
            return message

        async def observed_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                if wanted(_RESPONSE_BODY):
                    _keep(response_body, message.get("body", b""), _MAX_RESPONSE_BYTES)
                if not message.get("more_body", False):
                    await record()  # before the last byte: a client that has its answer finds the row
            await send(message)

        try:
            await self.app(scope, observed_receive, observed_send)
        finally:
            await record()  # a response cut short (an error, a client gone) is recorded too


def _keep(buffer: bytearray, chunk: bytes, cap: int) -> None:
    if len(buffer) <= cap:
        buffer.extend(chunk[: cap + 1 - len(buffer)])


def _action(template: str | None) -> str | None:
    return ACTIONS.get(template) or READS.get(template)


def event_for(scope: Scope, status: int, request_body: bytes = b"", response_body: bytes = b"",
              queries: bool = False) -> AuditEvent | None:
    """The row for a request that ended with `status`, or None when it is not one to record. With `queries`,
    an ask's question or a search's query is the row's target."""
    template, params = scope.get(ROUTE_KEY, (None, {}))
    action = _action(template)
    if status == 401:
        action = AUTH_FAILED
    if action is None:
        return None
    who = scope.get(WHO_KEY) or _refused_who(scope)
    collection, target = params.get("name"), None
    if action == "collection.create":
        asked = _json(request_body)
        name = asked.get("name") if isinstance(asked, dict) else None
        collection = name if isinstance(name, str) else None
    elif action == "document.upload":
        target = _uploaded(_json(response_body))
    elif action == "document.delete":
        target = params.get("doc_id")
    elif action == "key.create":
        target = _new_key(_json(request_body), _json(response_body))
    elif action == "key.revoke":
        target = params.get("key_id")
    elif action.startswith("conversation."):
        target = params.get("conversation_id")
    elif action in _QUERY_BODY and queries:
        asked = _json(request_body)
        text = asked.get("question", asked.get("query")) if isinstance(asked, dict) else None
        target = text if isinstance(text, str) else None
    route = template or f"{scope['method']} (no route)"
    return AuditEvent(ts=time.time(), who=who, action=action, route=route, client=client_address(scope),
                      status=status, collection=collection, target=target)


def _refused_who(scope: Scope) -> str:
    """A refused key's id when it has a funnel key's shape; never any part of the secret."""
    token = presented_key(scope)
    if token is None:
        return "none"
    parsed = parse_token(token.strip())
    return parsed[0] if parsed else "unparsed"


def _json(body: bytes):
    try:
        return json.loads(body) if body else None
    except (ValueError, RecursionError):  # cut at the cap, not JSON, too deep: the path's target stands
        return None


def _uploaded(documents) -> str | None:
    if not isinstance(documents, list):
        return None
    named = [f"{d.get('id')} {d.get('filename')}" for d in documents if isinstance(d, dict)]
    return "; ".join(named) or None


def _new_key(asked, made) -> str | None:
    asked = asked if isinstance(asked, dict) else {}
    role, names = asked.get("role"), asked.get("collections")
    scope = ",".join(str(n) for n in names) if isinstance(names, list) else "all"
    what = f"{role} on {scope}" if isinstance(role, str) else None
    key_id = made.get("id") if isinstance(made, dict) and isinstance(made.get("id"), str) else None
    return " ".join(p for p in (key_id, what and (f"({what})" if key_id else what)) if p) or None


class AuditOut(BaseModel):
    id: int
    time: str
    who: str
    action: str
    route: str
    collection: str | None
    target: str | None
    client: str
    status: int


@router.get("/v1/audit", response_model=list[AuditOut])
async def read_audit(
    request: Request,
    limit: int = Query(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT, description="at most this many rows"),
    since: str | None = Query(None, max_length=64,
                              description="ISO 8601 (UTC unless it says) or epoch seconds"),
) -> list[AuditOut]:
    """Without `since`, the newest `limit` rows; with it, the first `limit` at or after it (to page on, send
    the last row's time: the rows of that millisecond come again, so drop the ids already seen). Oldest
    first either way."""
    since_ts = parse_since(since) if since is not None else None
    rows = await run_in_threadpool(request.app.state.audit.store.read, limit, since_ts)
    return [AuditOut(**row.public()) for row in rows]
