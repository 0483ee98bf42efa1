"""What `SlackNotifier` remembers between messages: per fingerprint, the de-duplication window and the
occurrences not reported yet; for the rate limit, when the last minute's messages went out. And what became
of a message (`Delivery`: sent, deduplicated, rate limited, failed), which the incident store records.

The rules are the functions `admit`, `settle` and `take_slot` over plain records, so both places the state
lives apply the same ones: `EmbeddedAlertState` keeps it in this process (one `funnel serve` or CLI run),
`PostgresAlertState` in the service database, so that several `funnel serve` processes post one message per
fingerprint and window, and at most `rate_per_minute` a minute between them. `open_alert_state(db)` chooses.

In the database the rules run inside one transaction: `admit` inserts or locks the fingerprint's row
(INSERT … ON CONFLICT DO UPDATE … RETURNING, atomic whether or not the row exists), and, when a message
would go out, locks the one rate-limit row. Two processes racing on one fingerprint therefore queue on its
row: the first reserves the message, the second sees the window it opened. Locks are always taken in that
order (fingerprint, then rate), so admissions cannot deadlock. Times there are Unix seconds from the
notifiers (`clock` = time.time), compared across processes and hosts: clocks kept by NTP agree far better
than a window or a minute needs.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from funnel.apps.state.db import Database
from funnel.apps.state.tables import ComponentTables
from funnel.errors import StoreError

log = logging.getLogger(__name__)

RATE_WINDOW_S = 60.0  # `rate_per_minute` counts the messages of this rolling window
MAX_FINGERPRINTS = 10_000  # fingerprints EmbeddedAlertState keeps at most (oldest dropped first)


@dataclass
class Seen:
    """One fingerprint's state."""

    window_start: float | None = None  # when the last message went out; None: no window open
    in_window: int = 0  # occurrences since window_start, the sent one included
    unreported: int = 0  # occurrences no message has reported yet
    unreported_since: float = 0.0
    in_flight: str | None = None  # the token of the reservation whose message is being posted now


@dataclass(frozen=True)
class Reservation:
    """Leave to post one message for `key`, reporting `count` occurrences since `since`. `settle` ends it;
    the previous window is kept so that a failed message can be undone."""

    key: str
    token: str
    count: int
    since: float
    previous_window_start: float | None
    previous_in_window: int


@dataclass(frozen=True)
class Deduplicated:
    in_window: int  # occurrences in the open window, this one and the sent one included
    window_start: float


@dataclass(frozen=True)
class RateLimited:
    unreported: int  # occurrences the next message for the fingerprint will report


Admission = Reservation | Deduplicated | RateLimited


class DeliveryStatus(StrEnum):
    SENT = "sent"
    DEDUPLICATED = "deduplicated"  # a message for this fingerprint went out within the window
    RATE_LIMITED = "rate_limited"  # over `rate_per_minute`: dropped, not queued
    FAILED = "failed"  # Slack refused it, or kept failing through every retry


@dataclass(frozen=True)
class Delivery:
    """What became of one `notify` call.

    `attempts` counts HTTP requests (0 when nothing was posted). `count` is the number of occurrences the
    delivery stands for: for `sent`/`failed`/`rate_limited` the occurrences the message reports (this one
    plus those not reported yet); for `deduplicated` the occurrences so far in the open window, the sent one
    included. `detail` is one line for logs and the incident store, never the webhook URL.
    """

    status: DeliveryStatus
    attempts: int
    detail: str
    count: int


class AlertState(Protocol):
    """Where de-duplication and rate-limit state lives. `clock` is the time source notifiers use with it:
    times it stores are compared with times other notifiers (perhaps other processes) pass in."""

    clock: Callable[[], float]

    def admit(self, key: str, now: float, window_s: float, rate_per_minute: int) -> Admission:
        """Counts one occurrence of `key` and decides: deduplicated, rate limited, or reserved to post."""
        ...

    def settle(self, reservation: Reservation, sent: bool) -> None:
        """Ends a reservation; one whose message was not sent is undone (see `settle` below)."""
        ...


# --- the rules ---------------------------------------------------------------------------------------------


def admit(seen: Seen, key: str, now: float, window_s: float, take_slot: Callable[[], bool]) -> Admission:
    """Counts an occurrence into `seen` (changed in place) and decides. A duplicate inside the open window is
    only counted, and uses no rate; otherwise `take_slot()` is asked for a place in the rate limit."""
    if seen.unreported == 0:
        seen.unreported_since = now
    seen.unreported += 1
    if seen.window_start is not None and now - seen.window_start < window_s:
        seen.in_window += 1
        return Deduplicated(seen.in_window, seen.window_start)
    if not take_slot():
        return RateLimited(seen.unreported)
    reservation = Reservation(
        key, uuid.uuid4().hex, seen.unreported, seen.unreported_since, seen.window_start, seen.in_window
    )
    seen.window_start, seen.in_window, seen.unreported, seen.in_flight = now, 1, 0, reservation.token
    return reservation


def settle(seen: Seen, reservation: Reservation, sent: bool) -> bool:
    """Ends `reservation` in `seen`; False when it is no longer the one in flight (nothing changed). A failed
    message opens no window: the previous one is back and its occurrences are unreported again, so the next
    occurrence tries again and reports them."""
    if seen.in_flight != reservation.token:
        return False
    seen.in_flight = None
    if not sent:
        since = min(reservation.since, seen.unreported_since) if seen.unreported else reservation.since
        seen.unreported += reservation.count
        seen.unreported_since = since
        seen.window_start, seen.in_window = reservation.previous_window_start, reservation.previous_in_window
    return True


def take_slot(sent_at: list[float], now: float, rate_per_minute: int) -> bool:
    """A place for one message in the rolling minute of `sent_at` (changed in place: old times dropped, `now`
    added when there is room)."""
    sent_at[:] = [t for t in sent_at if now - t < RATE_WINDOW_S]
    if len(sent_at) >= rate_per_minute:
        return False
    sent_at.append(now)
    return True


def _age(seen: Seen) -> float:
    return seen.window_start or seen.unreported_since


# --- in this process -------------------------------------------------------------------------------------


class EmbeddedAlertState:
    """The state in this process's memory: at most `max_keys` fingerprints (windows that are over go first,
    then the oldest half). Monotonic time: nothing outside the process compares it."""

    clock = staticmethod(time.monotonic)

    def __init__(self, max_keys: int = MAX_FINGERPRINTS):
        self.max_keys = max_keys
        self._lock = threading.Lock()
        self._seen: dict[str, Seen] = {}
        self._sent_at: list[float] = []

    def __len__(self) -> int:
        return len(self._seen)

    def admit(self, key: str, now: float, window_s: float, rate_per_minute: int) -> Admission:
        with self._lock:
            seen = self._seen.get(key)
            if seen is None:
                self._prune(now, window_s)
                seen = self._seen[key] = Seen()
            return admit(seen, key, now, window_s, lambda: take_slot(self._sent_at, now, rate_per_minute))

    def settle(self, reservation: Reservation, sent: bool) -> None:
        with self._lock:
            seen = self._seen.get(reservation.key)
            if seen is not None:
                settle(seen, reservation, sent)

    def _prune(self, now: float, window_s: float) -> None:
        if len(self._seen) < self.max_keys:
            return

        def expired(s: Seen) -> bool:
            closed = s.window_start is None or now - s.window_start >= window_s
            return closed and s.unreported == 0 and s.in_flight is None

        for key in [k for k, s in self._seen.items() if expired(s)]:
            del self._seen[key]
        if len(self._seen) >= self.max_keys:  # all active: forget the oldest half
            by_age = sorted(self._seen, key=lambda k: _age(self._seen[k]))
            for key in by_age[: len(by_age) // 2]:
                del self._seen[key]


# --- in the service database ---------------------------------------------------------------------------

COMPONENT = "alerts"
STEPS = (
    """CREATE TABLE funnel_alert_seen (
        key text PRIMARY KEY,                     -- service and fingerprint
        window_start double precision,            -- NULL: no window open
        in_window integer NOT NULL DEFAULT 0,
        unreported integer NOT NULL DEFAULT 0,
        unreported_since double precision NOT NULL DEFAULT 0,
        in_flight text                            -- the reservation whose message is being posted
    )""",
    "CREATE TABLE funnel_alert_rate (scope text PRIMARY KEY, sent_at double precision[] NOT NULL)",
)
_SEEN = "window_start, in_window, unreported, unreported_since, in_flight"
SCOPE = "slack"  # the one rate limit of the service
PRUNE_EVERY_S = 600.0
STALE_POST_S = 600.0  # a reservation older than its window and this is a post that died with its process


def open_alert_state(db: Database | None) -> AlertState:
    """The notifier's state: in `db` when the service has one (shared by its processes), else in memory."""
    return EmbeddedAlertState() if db is None else PostgresAlertState(db)


class PostgresAlertState:
    """The de-duplication windows and the rate limit in `db`. Cheap to build: the tables are created on
    first use; every failure is a StoreError (the notifier then posts, de-duplicated in its process only)."""

    clock = staticmethod(time.time)

    def __init__(self, db: Database):
        self._tables = ComponentTables(db, COMPONENT, STEPS)
        self._next_prune: float | None = None

    def __repr__(self) -> str:
        return f"PostgresAlertState({self._tables.db.label!r})"

    def warm_up(self) -> None:
        self._tables.warm_up()

    def admit(self, key: str, now: float, window_s: float, rate_per_minute: int) -> Admission:
        with self._tables.transaction() as conn:
            row = conn.execute(
                "INSERT INTO funnel_alert_seen AS s (key) VALUES (%s) "
                f"ON CONFLICT (key) DO UPDATE SET key = s.key RETURNING {_SEEN}",
                [key],
            ).fetchone()
            seen = Seen(*row)
            admission = admit(seen, key, now, window_s, lambda: self._take_slot(conn, now, rate_per_minute))
            _write(conn, key, seen)
        self._prune(now, window_s)
        return admission

    def settle(self, reservation: Reservation, sent: bool) -> None:
        with self._tables.transaction() as conn:
            row = conn.execute(
                f"SELECT {_SEEN} FROM funnel_alert_seen WHERE key = %s FOR UPDATE", [reservation.key]
            ).fetchone()
            if row is None:
                return
            seen = Seen(*row)
            if settle(seen, reservation, sent):
                _write(conn, reservation.key, seen)

    def _take_slot(self, conn, now: float, rate_per_minute: int) -> bool:
        row = conn.execute(
            "INSERT INTO funnel_alert_rate AS r VALUES (%s, '{}') "
            "ON CONFLICT (scope) DO UPDATE SET scope = r.scope RETURNING sent_at",
            [SCOPE],
        ).fetchone()
        sent_at = list(row[0])
        if not take_slot(sent_at, now, rate_per_minute):
            return False
        conn.execute("UPDATE funnel_alert_rate SET sent_at = %s WHERE scope = %s", [sent_at, SCOPE])
        return True

    def _prune(self, now: float, window_s: float) -> None:
        """Every `PRUNE_EVERY_S`, deletes the rows that say nothing a fresh row would not: window over and
        nothing unreported. Rows another transaction holds are skipped, not waited for."""
        if self._next_prune is not None and self._next_prune > now:
            return
        self._next_prune = now + PRUNE_EVERY_S
        try:
            with self._tables.connection() as conn:
                conn.execute(
                    "DELETE FROM funnel_alert_seen WHERE key IN (SELECT key FROM funnel_alert_seen WHERE "
                    "unreported = 0 AND (window_start IS NULL OR window_start < %s) LIMIT 10000 "
                    "FOR UPDATE SKIP LOCKED)",
                    [now - window_s - STALE_POST_S],
                )
        except StoreError as e:  # the admission has committed; a later prune does this one's work
            log.warning("alerts: could not prune: %s", e)


def _write(conn, key: str, seen: Seen) -> None:
    conn.execute(
        "UPDATE funnel_alert_seen SET window_start = %s, in_window = %s, unreported = %s, "
        "unreported_since = %s, in_flight = %s WHERE key = %s",
        [seen.window_start, seen.in_window, seen.unreported, seen.unreported_since, seen.in_flight, key],
    )
