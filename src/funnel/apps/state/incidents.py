"""The incident store: every triaged error and what became of its Slack message. `EmbeddedIncidents` keeps
them in one SQLite file, `PostgresIncidents` in the service database (`funnel serve --database`), where
every process records into and lists from one history; `open_incidents` chooses. Both take their table,
rows and queries from `funnel.apps.state.incident_rows`, so both store the same redacted, bounded incident
(no secret of a report or an analysis reaches the disk).

The SQLite file is a `funnel.apps.state.sqlite.SqliteFile`: WAL, every call its own short connection (API
threads share one `EmbeddedIncidents` without a lock), the schema versioned with `PRAGMA user_version`; a
file written by a newer funnel, a file that is not SQLite, or an SQLite file of something else is a
`StoreError` with a one-line message. In PostgreSQL ids come from an identity column, so two processes never
hand out the same one.

An incident is recorded as soon as its files are ranked; its slow steps (the analysis, the Slack message)
run later on a worker (`funnel.apps.triage.queue`) and write their progress with `update`. Version 2 added
the columns for that (`STEP_COLUMNS`); a version 1 file gains them (those it lacks) when it is opened, its
incidents marked as analysed (they were, before the answer went out). `count_since` compares against the
recording process's clock (Unix seconds, not the database's); hosts kept in step by NTP agree to well under a
second.
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

from funnel.apps.state import incident_rows as rows
from funnel.apps.state.alerts import Delivery
from funnel.apps.state.db import Database
from funnel.apps.state.incident_rows import Incident, IncidentChange
from funnel.apps.state.incident_schema import ErrorReport, TriageResult, TriageSteps
from funnel.apps.state.sqlite import InFile, SqliteFile
from funnel.apps.state.tables import InDatabase
from funnel.errors import StoreError

__all__ = [
    "EmbeddedIncidents", "Incident", "IncidentChange", "Incidents", "PostgresIncidents", "open_incidents",
]

SQLITE_STEPS = (  # the SQLite file's
    rows.schema_v1("incidents", "id INTEGER PRIMARY KEY AUTOINCREMENT", "REAL"),
    # the slow steps run on workers after the request (funnel.apps.triage.queue)
    tuple(f"ALTER TABLE incidents ADD COLUMN {name} {kind}" for name, kind in rows.STEP_COLUMNS),
)

COMPONENT = "incidents"
STEPS = (  # the service database's
    *rows.schema_v1(
        "funnel_incidents", "id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY", "double precision"
    ),
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
        return EmbeddedIncidents(path, clock=clock)
    return PostgresIncidents(db, clock=clock)


class Incidents(Protocol):
    """Where triaged errors are kept: an SQLite file (`EmbeddedIncidents`) or the service database
    (`PostgresIncidents`). A StoreError says why one cannot be used."""

    def record(self, report: ErrorReport, result: TriageResult, steps: TriageSteps | None = None) -> int:
        """Stores a new incident; its steps start as given (done at once, or queued for a worker; by default
        analysed, no Slack message yet)."""

    def update(self, incident_id: int, change: IncidentChange) -> None:
        """Applies a step's progress; an unknown id is a `StoreError`."""

    def set_delivery(self, incident_id: int, delivery: Delivery) -> None: ...

    def interrupt(self, detail: str) -> int:
        """Every queued or running step becomes `interrupted`, with `detail`: the jobs that would have run
        them died with their process (the embedded queue). How many incidents that touched."""

    def list(
        self, limit: int = 50, service: str | None = None, fingerprint: str | None = None
    ) -> builtins.list[Incident]: ...

    def get(self, incident_id: int) -> Incident | None: ...

    def count_since(self, fingerprint: str, seconds: float) -> int: ...


class _Queries:
    """What both stores run alike: `incident_rows`' queries on `_table`, with the driver's parameter `_mark`,
    over a `_connection()`; `_arg` is what a text argument becomes on its way in."""

    _table: str
    _mark: str
    _clock: Callable[[], float]

    def _connection(self) -> AbstractContextManager:
        raise NotImplementedError

    def _label(self) -> str:
        raise NotImplementedError

    @staticmethod
    def _arg(value):
        return value

    def update(self, incident_id: int, change: IncidentChange) -> None:
        sql, args = rows.update_query(self._table, self._mark, incident_id, change)
        with self._connection() as conn:
            if conn.execute(sql, [self._arg(arg) for arg in args]).rowcount == 0:
                raise StoreError(f"{self._label()}: no incident {incident_id}")

    def set_delivery(self, incident_id: int, delivery: Delivery) -> None:
        """Records what became of the incident's Slack message; an unknown id is a `StoreError`."""
        self.update(incident_id, rows.delivery_change(delivery))

    def interrupt(self, detail: str) -> int:
        sql, args = rows.interrupt_query(self._table, self._mark, self._arg(detail))
        with self._connection() as conn:
            return conn.execute(sql, args).rowcount

    def list(
        self, limit: int = 50, service: str | None = None, fingerprint: str | None = None
    ) -> builtins.list[Incident]:
        """The newest incidents first, at most `limit` (capped at 1000), optionally of one service or
        fingerprint."""
        sql, args = rows.list_query(
            self._table, self._mark, limit, self._arg(service), self._arg(fingerprint)
        )
        with self._connection() as conn:
            return [Incident(*row) for row in conn.execute(sql, args)]

    def get(self, incident_id: int) -> Incident | None:
        with self._connection() as conn:
            sql = f"SELECT {rows.COLUMNS} FROM {self._table} WHERE id = {self._mark}"
            row = conn.execute(sql, [incident_id]).fetchone()
        return Incident(*row) if row else None

    def count_since(self, fingerprint: str, seconds: float) -> int:
        """How many incidents with `fingerprint` were recorded in the last `seconds` (by any process)."""
        since = self._clock() - seconds
        with self._connection() as conn:
            sql = f"SELECT count(*) FROM {self._table} WHERE fingerprint = {self._mark} AND created_ts >= "
            row = conn.execute(sql + self._mark, [self._arg(fingerprint), since]).fetchone()
        return int(row[0])


class EmbeddedIncidents(InFile, _Queries):
    """Incidents in the SQLite file at `path` (`funnel.apps.state.sqlite`), made (with its folder) or checked
    when the store is built. `clock` gives Unix seconds."""

    _table, _mark = "incidents", "?"

    def __init__(self, path: Path | str, *, clock: Callable[[], float] = time.time):
        self._in_file(SqliteFile(path, SQLITE_STEPS, "incident database", durable=False))
        self._clock = clock
        self._file.open()

    def record(self, report: ErrorReport, result: TriageResult, steps: TriageSteps | None = None) -> int:
        """Stores the redacted, size-bounded report and result; returns the new incident's id."""
        row = rows.incident_row(report, result, self._clock(), steps)
        with self._connection() as con:
            marks = ", ".join("?" * len(row))
            cursor = con.execute(f"INSERT INTO incidents ({rows.INSERT_COLUMNS}) VALUES ({marks})", row)
            return int(cursor.lastrowid)

    def _label(self) -> str:
        return str(self.path)


class PostgresIncidents(InDatabase, _Queries):
    """Incidents in the service database `db`. Cheap to build: the tables are created on first use (or by
    `warm_up`), so a server starts while the database is down; then every call is a `DatabaseUnavailable`
    (a StoreError, HTTP 503) until it is back. `clock` gives Unix seconds."""

    _table, _mark = "funnel_incidents", "%s"

    def __init__(self, db: Database, *, clock: Callable[[], float] = time.time):
        self._on_database(db, COMPONENT, STEPS)
        self._clock = clock

    def warm_up(self) -> None:
        self._tables.warm_up()

    def record(self, report: ErrorReport, result: TriageResult, steps: TriageSteps | None = None) -> int:
        """Stores the redacted, size-bounded report and result; returns the new incident's id."""
        row = [_text(value) for value in rows.incident_row(report, result, self._clock(), steps)]
        marks = ", ".join(["%s"] * len(row))
        with self._tables.connection() as conn:
            sql = f"INSERT INTO funnel_incidents ({rows.INSERT_COLUMNS}) VALUES ({marks}) RETURNING id"
            return int(conn.execute(sql, row).fetchone()[0])

    def _label(self) -> str:
        return self.db.label

    @staticmethod
    def _arg(value):
        return _text(value)


def _text(value):
    """PostgreSQL text cannot hold NUL; a stray one in a report (a binary log line) becomes U+FFFD instead of
    losing the incident. The JSON columns keep it, escaped."""
    return value.replace("\x00", "\ufffd") if isinstance(value, str) and "\x00" in value else value
