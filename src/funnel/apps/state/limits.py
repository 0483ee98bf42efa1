"""Counters in fixed windows, for the limits per key and per client address (`funnel.apps.api.limits`).

A counter is (bucket, window start) -> amount: `rpm:<key id>` counts a key's requests in the minute,
`upload:<key id>` its upload bytes in the UTC day, `auth:<address>` the refused keys one address sent in
the minute. A window is fixed (it starts at a multiple of its length since the epoch), so "when does it
free" has one answer for every process: its end, which is what Retry-After says.

Where: `PostgresCounters` in the service's PostgreSQL (`funnel_limits`), one atomic upsert per count, so
every process on the database counts into the same row and no two can both take the last unit.
`MemoryCounters` when the state is embedded: an embedded service is one process (`funnel serve --workers N`
needs --database), so in-process counters see every request, cost no write per request, and create no
file; what they lose is the count at a restart (a minute's requests, a day's upload bytes), which only the
server's operator can cause. `open_counters` chooses.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from funnel.apps.state.db import Database
from funnel.apps.state.tables import ComponentTables
from funnel.config import setting

DAY_S = 86400
PRUNE_EVERY_S = 600.0
PG_MIGRATIONS = ("""CREATE TABLE funnel_limits (
    bucket text NOT NULL, window_start bigint NOT NULL, amount bigint NOT NULL,
    PRIMARY KEY (bucket, window_start))""",)


@dataclass(frozen=True)
class LimitsConfig:
    """[serve] keys about limits (their own dataclass: the section's, read by `funnel.apps.settings`)."""

    key_rpm: int | None = setting(None, "requests per minute a key made by `funnel keys create` may send "
                                        "unless it sets its own (none: unlimited)", ge=1)
    key_upload_mb_per_day: float | None = setting(None, "upload MiB per UTC day of such a key unless it sets "
                                                        "its own (none: unlimited)", gt=0)
    api_key_rpm: int | None = setting(None, "requests per minute of the single api_key (none: unlimited)", ge=1)
    api_key_upload_mb_per_day: float | None = setting(None, "upload MiB per UTC day of the api_key (none: "
                                                            "unlimited)", gt=0)
    auth_failures_per_minute: int = setting(20, "refused keys one client address may send in a minute; then "
                                                "429 for that address until the minute ends (0: no limit)", ge=0)
    limit_window_s: int = setting(60, "the length of the 'minute' of the rates above, in seconds", ge=1, le=3600)
    compute_rpm: int = setting(30, "requests per minute a key may send to the routes that compute on what it "
                                   "sends (rerank, embeddings), apart from key_rpm (0: unlimited)", ge=0)
    trusted_proxies: list[str] = setting([], "addresses of reverse proxies whose X-Forwarded-For is believed "
                                             '(e.g. ["127.0.0.1"]); none: the connection\'s address is the client')
    conversations_per_collection: int = setting(1000, "conversations a collection keeps; past it the least "
                                                      "recently used of that collection are forgotten", ge=1)
    conversations_per_key: int = setting(200, "conversations one key may keep in a collection; past it that key's "
                                              "least recently used there are forgotten", ge=1)
    audit_queries: bool = setting(False, "write the question or query of each ask and search into the audit log "
                                         "(off: who, which collection and when only)")


@dataclass(frozen=True)
class Window:
    """A fixed window of `length` seconds: `start(now)`, and `retry_after(now)` (whole seconds to its end)."""

    length: int

    def start(self, now: float) -> int:
        return int(now // self.length) * self.length

    def retry_after(self, now: float) -> int:
        return max(1, math.ceil(self.start(now) + self.length - now))


class Counters(Protocol):
    """Where counts are kept. Every verb may raise StoreError (the store is down)."""

    def add(self, bucket: str, window_start: int, amount: int) -> int:
        """Adds `amount` (negative to give back) and returns the window's new total, atomically."""

    def get(self, bucket: str, window_start: int) -> int: ...


class MemoryCounters:
    """This process's counts; windows that ended are dropped as new ones begin."""

    def __init__(self, clock: Callable[[], float] = time.time):
        self.clock = clock
        self._counts: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()
        self._pruned = 0.0

    def add(self, bucket: str, window_start: int, amount: int) -> int:
        with self._lock:
            self._prune()
            total = self._counts.get((bucket, window_start), 0) + amount
            self._counts[(bucket, window_start)] = total
            return total

    def get(self, bucket: str, window_start: int) -> int:
        with self._lock:
            return self._counts.get((bucket, window_start), 0)

    def _prune(self) -> None:
        now = self.clock()
        if now - self._pruned < PRUNE_EVERY_S:
            return
        self._pruned = now
        self._counts = {k: v for k, v in self._counts.items() if k[1] >= now - 2 * DAY_S}


class PostgresCounters:
    """Counts in `funnel_limits`, shared by every process on the database; rows of windows that ended a
    day or more ago are deleted by whichever process last pruned over `PRUNE_EVERY_S` ago."""

    def __init__(self, db: Database, clock: Callable[[], float] = time.time):
        self.db, self.clock = db, clock
        self._tables = ComponentTables(db, "limits", PG_MIGRATIONS)
        self._pruned = 0.0

    def __repr__(self) -> str:
        return f"PostgresCounters({self.db.label!r})"

    def add(self, bucket: str, window_start: int, amount: int) -> int:
        with self._tables.connection() as conn:
            self._prune(conn)
            row = conn.execute(
                "INSERT INTO funnel_limits (bucket, window_start, amount) VALUES (%s, %s, %s) "
                "ON CONFLICT (bucket, window_start) DO UPDATE SET amount = funnel_limits.amount + EXCLUDED.amount "
                "RETURNING amount", [bucket, window_start, amount]).fetchone()
        return int(row[0])

    def get(self, bucket: str, window_start: int) -> int:
        with self._tables.connection() as conn:
            row = conn.execute("SELECT amount FROM funnel_limits WHERE bucket = %s AND window_start = %s",
                               [bucket, window_start]).fetchone()
        return int(row[0]) if row else 0

    def _prune(self, conn) -> None:
        now = self.clock()
        if now - self._pruned < PRUNE_EVERY_S:
            return
        self._pruned = now
        conn.execute("DELETE FROM funnel_limits WHERE window_start < %s", [int(now) - 2 * DAY_S])


def open_counters(db: Database | None, clock: Callable[[], float] = time.time) -> Counters:
    """The service's counters: in its database when there is one, else in this process. Nothing opens here."""
    return MemoryCounters(clock) if db is None else PostgresCounters(db, clock)
