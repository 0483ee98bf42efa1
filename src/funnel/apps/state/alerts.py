"""Slack de-duplication and rate limit in the service database, so that several `funnel serve` processes
post one message per fingerprint and window, and at most `rate_per_minute` a minute between them.

The rules are `funnel.apps.triage.alert_state`'s, applied inside one transaction: `admit` inserts or locks
the fingerprint's row (INSERT … ON CONFLICT DO UPDATE … RETURNING, atomic whether or not the row exists),
and, when a message would go out, locks the one rate-limit row. Two processes racing on one fingerprint
therefore queue on its row: the first reserves the message, the second sees the window it opened. Locks
are always taken in that order (fingerprint, then rate), so admissions cannot deadlock.

Times are Unix seconds from the notifiers (`clock` = time.time), compared across processes and hosts: clocks
kept by NTP agree far better than a window or a minute needs.
"""

from __future__ import annotations

import logging
import time

from funnel.apps.state.db import Database
from funnel.apps.state.tables import ComponentTables
from funnel.apps.triage.alert_state import (
    AlertState,
    Admission,
    MemoryAlertState,
    Reservation,
    Seen,
    admit,
    settle,
    take_slot,
)
from funnel.errors import StoreError

log = logging.getLogger(__name__)

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
    return MemoryAlertState() if db is None else PostgresAlertState(db)


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
