"""Limits (issue 34): requests per minute and upload bytes per day per key, and refused keys per client address.

- **Per key** (`KeyLimits`, a request hook of `access.KeyAuth`, run once the request's key is known and
  allowed): each request of a key with a rate counts one in the key's minute; over its `rpm`, 429. An upload
  (`POST /v1/collections/{name}/documents`) is charged its Content-Length in the key's UTC day; one that
  would pass `upload_mb_per_day` is refused (429) and not charged. A key's own limits win; a key that sets
  none follows `[serve] key_rpm` / `key_upload_mb_per_day`, and 0 on a key means unlimited. The single
  `api_key` is unlimited unless `[serve] api_key_rpm` / `api_key_upload_mb_per_day` say otherwise. An open
  service (no key at all) counts nothing.
- **Compute per key** (issue 40): the rerank and embeddings routes (`COMPUTE_ROUTES`) hold CPU for seconds
  per call even within their input caps, so each key's calls to them count in a bucket of their own,
  `compute:<key id>`, apart from its `rpm`; past `[serve] compute_rpm` in the minute, 429. The `api_key` is
  exempt, as it is from every limit it is not given (its `api_key_rpm` still counts these calls): it is the
  operator's own admin key, and a pipeline built on it should not start failing on upgrade.
- **Per address** (`AuthGuard`, inside `KeyAuth`): a presented key that is refused (401) counts one for the
  client's address; once `auth_failures_per_minute` are counted in the minute, every guarded request from
  that address answers 429 until the minute ends, a right key included. A missing key is not counted (it
  guesses nothing; a page loaded before its key is typed sends none). Each refusal is logged with the address
  and the key id when the key parses, never the secret. The address is the ASGI client, the connection's:
  `funnel serve` runs uvicorn with its X-Forwarded-For handling off (`funnel.apps.api.uvicorn_options`), so a
  process on the server's host cannot forge a new address per guess nor get another address blocked; only
  a proxy listed in `[serve] trusted_proxies` is believed (uvicorn's ProxyHeadersMiddleware, outermost).
- Answers: 429 with `Retry-After` (whole seconds until the window ends) and one line. Counts live in
  `funnel.apps.state.limits` (PostgreSQL: shared by every process; embedded: in the one process).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from starlette.types import Scope

from funnel.apps.api.errors import LengthRequired, RateLimited
from funnel.apps.state.limits import DAY_S, Counters, Window

log = logging.getLogger("funnel.api.access")
UPLOAD_ROUTE = "POST /v1/collections/{name}/documents"
# They compute on what the caller sends (up to the caps in `rerank` and `embeddings`), not on a collection.
COMPUTE_ROUTES = frozenset({"POST /v1/rerank", "POST /api/rerank", "POST /v1/embeddings"})
CLEAR_TTL_S = 1.0  # how long a process trusts that an address is not throttled before asking the store again


class KeyLimits:
    """The hook: `__call__(principal, template, scope)` counts the request and raises RateLimited when over.

    `defaults` and `legacy` are (rpm, upload MiB per day) for keys that set none and for the `api_key`;
    `compute_rpm` the requests per window a key may send to COMPUTE_ROUTES (0: unlimited)."""

    def __init__(self, counters: Counters, defaults: tuple[int | None, float | None] = (None, None),
                 legacy: tuple[int | None, float | None] = (None, None), window_s: int = 60,
                 clock: Callable[[], float] = time.time, legacy_id: str = "api_key", compute_rpm: int = 0):
        self.counters, self.defaults, self.legacy, self.clock = counters, defaults, legacy, clock
        self.minute, self.day, self.legacy_id = Window(window_s), Window(DAY_S), legacy_id
        self.compute_rpm = compute_rpm

    def limits_of(self, principal) -> tuple[int | None, int | None]:
        """(requests per window, upload bytes per day) of a key; None: unlimited."""
        if principal.id == self.legacy_id:
            rpm, mb = self.legacy
        else:
            rpm = principal.rpm if principal.rpm is not None else self.defaults[0]
            mb = principal.upload_mb_per_day if principal.upload_mb_per_day is not None else self.defaults[1]
        return (rpm or None), (int(mb * 2**20) if mb else None)

    def __call__(self, principal, template: str, scope: Scope) -> None:
        if principal is None or principal.id == "anonymous":  # an open service, or an open path without a key
            return
        rpm, upload = self.limits_of(principal)
        now = self.clock()
        if rpm is not None:
            self._rate(f"rpm:{principal.id}", rpm, principal.id, "requests", now)
        if self.compute_rpm and template in COMPUTE_ROUTES and principal.id != self.legacy_id:
            self._rate(f"compute:{principal.id}", self.compute_rpm, principal.id,
                       "rerank and embedding requests", now)
        if upload is not None and template == UPLOAD_ROUTE:
            self._charge(principal.id, upload, _content_length(scope), now)

    def _rate(self, bucket: str, limit: int, key_id: str, what: str, now: float) -> None:
        """Counts one in `bucket`'s window; past `limit` in it, RateLimited until the window ends."""
        used = self.counters.add(bucket, self.minute.start(now), 1)
        if used > limit:
            wait = self.minute.retry_after(now)
            if used == limit + 1:  # once per window: a flood is one line, not one per request
                log.warning("key %s passed its %d %s per %s: 429 for %d s", key_id, limit, what, self._per(),
                            wait)
            raise RateLimited(f"key {key_id} is over its {limit} {what} per {self._per()}: retry in {wait} s",
                              wait)

    def _charge(self, key_id: str, limit: int, length: int | None, now: float) -> None:
        if length is None:
            raise LengthRequired(f"key {key_id} has a daily upload limit: send the upload with a Content-Length")
        bucket, day = f"upload:{key_id}", self.day.start(now)
        used = self.counters.add(bucket, day, length)
        if used > limit:
            self.counters.add(bucket, day, -length)  # refused, so not charged
            wait = self.day.retry_after(now)
            raise RateLimited(f"key {key_id} would pass its {limit / 2**20:g} MiB of uploads per day "
                              f"({(used - length) / 2**20:.1f} MiB used): retry in {wait} s", wait)

    def _per(self) -> str:
        return "minute" if self.minute.length == 60 else f"{self.minute.length} s"


class AuthGuard:
    """Refused keys per client address: `check(address)` before a key is verified, `refused(address, key_id,
    why)` after one is refused. `per_window` 0 turns the limit off (refusals are still logged)."""

    def __init__(self, counters: Counters, per_window: int = 20, window_s: int = 60,
                 clock: Callable[[], float] = time.time):
        self.counters, self.per_window, self.window, self.clock = counters, per_window, Window(window_s), clock
        self._blocked: dict[str, float] = {}  # address -> when its window ends (known from a count)
        self._clear: dict[str, float] = {}  # address -> until when it is taken as not throttled
        self._lock = threading.Lock()

    def check(self, address: str) -> None:
        if self.per_window <= 0:
            return
        now = self.clock()
        with self._lock:
            blocked, clear = self._blocked.get(address, 0.0), self._clear.get(address, 0.0)
        if now < blocked:
            raise self._refusal(now)
        if now < clear:
            return
        start = self.window.start(now)
        if self.counters.get(f"auth:{address}", start) >= self.per_window:
            self._remember(self._blocked, address, start + self.window.length)
            raise self._refusal(now)
        self._remember(self._clear, address, min(now + CLEAR_TTL_S, start + self.window.length))

    def refused(self, address: str, key_id: str | None, why: str) -> None:
        log.warning("refused an API key from %s (key id %s): %s", address, key_id or "unparsable", why)
        if self.per_window <= 0:
            return
        now = self.clock()
        start = self.window.start(now)
        count = self.counters.add(f"auth:{address}", start, 1)
        if count >= self.per_window:
            self._remember(self._blocked, address, start + self.window.length)
            if count == self.per_window:
                log.warning("%d refused keys from %s in %d s: it gets 429 for the next %d s", count, address,
                            self.window.length, self.window.retry_after(now))

    def _refusal(self, now: float) -> RateLimited:
        wait = self.window.retry_after(now)
        return RateLimited(f"too many refused API keys from this address: retry in {wait} s", wait)

    def _remember(self, table: dict[str, float], address: str, until: float) -> None:
        with self._lock:
            if len(table) > 10_000:
                now = self.clock()
                for stale in [a for a, t in table.items() if t <= now]:
                    del table[stale]
            table[address] = until


def _content_length(scope: Scope) -> int | None:
    for key, value in scope.get("headers", ()):
        if key == b"content-length":
            text = value.decode("latin-1").strip()
            return int(text) if text.isdigit() else None
    return None
