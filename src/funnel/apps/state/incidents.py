"""The incident store in the service database, so that every `funnel serve` process records into and lists
from one history; `open_incidents` chooses it or the embedded SQLite file.

It stores what the SQLite store stores (the same rows and queries, from `funnel.apps.triage.incident_rows`):
the report and result redacted and bounded before they leave the process. Ids come from an identity
column, so two processes never hand out the same one. `count_since` compares against the recording
process's clock (Unix seconds, not the database's), as the SQLite store does; hosts kept in step by NTP
agree to well under a second.
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Callable
from pathlib import Path

from funnel.apps.state.db import Database
from funnel.apps.state.tables import ComponentTables
from funnel.apps.triage import incident_rows as rows
from funnel.apps.triage.incident_rows import Incident, IncidentChange
from funnel.apps.triage.incidents import Incidents, IncidentStore
from funnel.apps.triage.schema import ErrorReport, TriageResult, TriageSteps
from funnel.apps.triage.slack import Delivery
from funnel.errors import StoreError

COMPONENT = "incidents"
STEPS = (
    """CREATE TABLE funnel_incidents (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        created_at text NOT NULL,               -- UTC, ISO 8601
        created_ts double precision NOT NULL,  -- the same instant in Unix seconds, for count_since
        service text NOT NULL,
        exception_type text,
        message text NOT NULL,
        fingerprint text NOT NULL,
        analysis_status text NOT NULL,
        report_json text NOT NULL,              -- the redacted ErrorReport
        result_json text NOT NULL,              -- the redacted TriageResult
        slack_status text,                      -- NULL until set_delivery
        slack_detail text
    )""",
    "CREATE INDEX funnel_incidents_by_fingerprint ON funnel_incidents (fingerprint, created_ts)",
    "CREATE INDEX funnel_incidents_by_service ON funnel_incidents (service, id)",
    # the slow steps run on workers after the request (funnel.apps.triage.queue)
    "ALTER TABLE funnel_incidents "
    + ", ".join(f"ADD COLUMN {name} {kind}" for name, kind in rows.STEP_COLUMNS),
)


def open_incidents(
    db: Database | None, path: Path | str, *, clock: Callable[[], float] = time.time
) -> Incidents:
    """The incidents of a service: in `db` when it has one (shared by its processes), else the SQLite file
    at `path`, as a single process keeps them."""
    if db is None:
        return IncidentStore(path, clock=clock)
    return PostgresIncidentStore(db, clock=clock)


class PostgresIncidentStore:
    """Incidents in the service database `db`. Cheap to build: the tables are created on first use (or by
    `warm_up`), so a server starts while the database is down; then every call is a `DatabaseUnavailable`
    (a StoreError, HTTP 503) until it is back. `clock` gives Unix seconds."""

    def __init__(self, db: Database, *, clock: Callable[[], float] = time.time):
        self._tables = ComponentTables(db, COMPONENT, STEPS)
        self._clock = clock

    def __repr__(self) -> str:
        return f"PostgresIncidentStore({self._tables.db.label!r})"

    def warm_up(self) -> None:
        self._tables.warm_up()

    def record(self, report: ErrorReport, result: TriageResult, steps: TriageSteps | None = None) -> int:
        """Stores the redacted, size-bounded report and result; returns the new incident's id."""
        row = [_text(value) for value in rows.incident_row(report, result, self._clock(), steps)]
        marks = ", ".join(["%s"] * len(row))
        with self._tables.connection() as conn:
            sql = f"INSERT INTO funnel_incidents ({rows.INSERT_COLUMNS}) VALUES ({marks}) RETURNING id"
            return int(conn.execute(sql, row).fetchone()[0])

    def update(self, incident_id: int, change: IncidentChange) -> None:
        sql, args = rows.update_query("funnel_incidents", "%s", incident_id, change)
        with self._tables.connection() as conn:
            if conn.execute(sql, [_text(arg) for arg in args]).rowcount == 0:
                raise StoreError(f"{self._tables.db.label}: no incident {incident_id}")

    def set_delivery(self, incident_id: int, delivery: Delivery) -> None:
        """Records what became of the incident's Slack message; an unknown id is a `StoreError`."""
        self.update(incident_id, rows.delivery_change(delivery))

    def interrupt(self, detail: str) -> int:
        sql, args = rows.interrupt_query("funnel_incidents", "%s", _text(detail))
        with self._tables.connection() as conn:
            return conn.execute(sql, args).rowcount

    def list(
        self, limit: int = 50, service: str | None = None, fingerprint: str | None = None
    ) -> builtins.list[Incident]:
        """The newest incidents first, at most `limit` (capped at 1000), optionally of one service or
        fingerprint."""
        sql, args = rows.list_query("funnel_incidents", "%s", limit, _text(service), _text(fingerprint))
        with self._tables.connection() as conn:
            return [Incident(*row) for row in conn.execute(sql, args)]

    def get(self, incident_id: int) -> Incident | None:
        with self._tables.connection() as conn:
            sql = f"SELECT {rows.COLUMNS} FROM funnel_incidents WHERE id = %s"
            row = conn.execute(sql, [incident_id]).fetchone()
        return Incident(*row) if row else None

    def count_since(self, fingerprint: str, seconds: float) -> int:
        """How many incidents with `fingerprint` were recorded in the last `seconds`, by any process."""
        since = self._clock() - seconds
        with self._tables.connection() as conn:
            row = conn.execute(
                "SELECT count(*) FROM funnel_incidents WHERE fingerprint = %s AND created_ts >= %s",
                [_text(fingerprint), since],
            ).fetchone()
        return int(row[0])


def _text(value):
    """PostgreSQL text cannot hold NUL; a stray one in a report (a binary log line) becomes U+FFFD instead of
    losing the incident. The JSON columns keep it, escaped."""
    return value.replace("\x00", "\ufffd") if isinstance(value, str) and "\x00" in value else value
