"""The incident store: every triaged error and what became of its Slack message. One SQLite file here;
`funnel.apps.state.incidents` keeps the same in the service database (`funnel serve --database`), and
`open_incidents` there chooses. Both take their rows and queries from `funnel.apps.triage.incident_rows`,
so both store the same redacted, bounded incident (no secret of a report or an analysis reaches the disk).

SQLite runs in WAL mode and every call opens its own short connection, so API threads share one
`IncidentStore` without a lock (SQLite serialises the writers; a busy file is waited on for 10 s). The
schema is versioned with `PRAGMA user_version`; a file written by a newer funnel, a file that is not SQLite,
or an SQLite file of something else is a `StoreError` with a one-line message.

An incident is recorded as soon as its files are ranked; its slow steps (the analysis, the Slack message)
run later on a worker (`funnel.apps.triage.queue`) and write their progress with `update`. Version 2 added
the columns for that (`STEP_COLUMNS`); a version 1 file gains them when it is opened, its incidents marked
as analysed (they were, before the answer went out).
"""

from __future__ import annotations

import builtins
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Protocol

from funnel.apps.triage.incident_rows import (
    COLUMNS,
    INSERT_COLUMNS,
    STEP_COLUMNS,
    Incident,
    IncidentChange,
    delivery_change,
    incident_row,
    interrupt_query,
    list_query,
    update_query,
)
from funnel.apps.triage.schema import ErrorReport, TriageResult, TriageSteps
from funnel.apps.triage.slack import Delivery
from funnel.errors import StoreError

__all__ = ["SCHEMA_VERSION", "Incident", "IncidentChange", "IncidentStore", "Incidents"]

SCHEMA_VERSION = 2
_BUSY_TIMEOUT_S = 10.0

_SCHEMA_V1 = (
    """CREATE TABLE incidents (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        created_at TEXT NOT NULL,       -- UTC, ISO 8601
        created_ts REAL NOT NULL,       -- the same instant in Unix seconds, for count_since
        service TEXT NOT NULL,
        exception_type TEXT,
        message TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        analysis_status TEXT NOT NULL,
        report_json TEXT NOT NULL,      -- the redacted ErrorReport
        result_json TEXT NOT NULL,      -- the redacted TriageResult
        slack_status TEXT,              -- NULL until set_delivery
        slack_detail TEXT
    )""",
    "CREATE INDEX incidents_by_fingerprint ON incidents (fingerprint, created_ts)",
    "CREATE INDEX incidents_by_service ON incidents (service, id)",
)
class Incidents(Protocol):
    """Where triaged errors are kept: an SQLite file (`IncidentStore`) or the service database
    (`funnel.apps.state.incidents.PostgresIncidentStore`). A StoreError says why one cannot be used."""

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


class IncidentStore:
    """Incidents in the SQLite file at `path` (its folder is created). `clock` gives Unix seconds."""

    def __init__(self, path: Path | str, *, clock: Callable[[], float] = time.time):
        self.path = Path(path)
        self._clock = clock
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(f"cannot create {self.path.parent}: {e.strerror or e}") from None
        self._open()

    def __repr__(self) -> str:
        return f"IncidentStore({str(self.path)!r})"

    # --- writing -----------------------------------------------------------------------------------------

    def record(self, report: ErrorReport, result: TriageResult, steps: TriageSteps | None = None) -> int:
        """Stores the redacted, size-bounded report and result; returns the new incident's id."""
        row = incident_row(report, result, self._clock(), steps)
        with self._connect() as con:
            marks = ", ".join("?" * len(row))
            cursor = con.execute(f"INSERT INTO incidents ({INSERT_COLUMNS}) VALUES ({marks})", row)
            return int(cursor.lastrowid)

    def update(self, incident_id: int, change: IncidentChange) -> None:
        sql, args = update_query("incidents", "?", incident_id, change)
        with self._connect() as con:
            if con.execute(sql, args).rowcount == 0:
                raise StoreError(f"{self.path}: no incident {incident_id}")

    def set_delivery(self, incident_id: int, delivery: Delivery) -> None:
        """Records what became of the incident's Slack message; an unknown id is a `StoreError`."""
        self.update(incident_id, delivery_change(delivery))

    def interrupt(self, detail: str) -> int:
        with self._connect() as con:
            return con.execute(*interrupt_query("incidents", "?", detail)).rowcount

    # --- reading -----------------------------------------------------------------------------------------

    def list(
        self, limit: int = 50, service: str | None = None, fingerprint: str | None = None
    ) -> builtins.list[Incident]:
        """The newest incidents first, at most `limit` (capped at 1000), optionally of one service or
        fingerprint."""
        sql, args = list_query("incidents", "?", limit, service, fingerprint)
        with self._connect() as con:
            return [Incident(*row) for row in con.execute(sql, args)]

    def get(self, incident_id: int) -> Incident | None:
        with self._connect() as con:
            row = con.execute(f"SELECT {COLUMNS} FROM incidents WHERE id = ?", (incident_id,)).fetchone()
        return Incident(*row) if row else None

    def count_since(self, fingerprint: str, seconds: float) -> int:
        """How many incidents with `fingerprint` were recorded in the last `seconds`."""
        since = self._clock() - seconds
        with self._connect() as con:
            row = con.execute(
                "SELECT COUNT(*) FROM incidents WHERE fingerprint = ? AND created_ts >= ?",
                (fingerprint, since),
            ).fetchone()
        return int(row[0])

    # --- the file ----------------------------------------------------------------------------------------

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        """A short-lived autocommit connection; every sqlite3 error becomes a one-line `StoreError`."""
        try:
            with closing(sqlite3.connect(self.path, timeout=_BUSY_TIMEOUT_S, isolation_level=None)) as con:
                con.execute("PRAGMA synchronous = NORMAL")  # safe under WAL; no fsync per commit
                yield con
        except sqlite3.Error as e:
            if "not a database" in str(e):
                raise StoreError(f"{self.path} is not an incident database ({e})") from None
            raise StoreError(f"{self.path}: {e}") from None

    def _open(self) -> None:
        with self._connect() as con:
            con.execute("PRAGMA journal_mode = WAL")
            version = con.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path} was written by a newer funnel (schema {version}); "
                    f"this one reads up to {SCHEMA_VERSION}"
                )
            if version < SCHEMA_VERSION:
                self._migrate(con)

    def _migrate(self, con: sqlite3.Connection) -> None:
        con.execute("BEGIN IMMEDIATE")  # another process may be creating it at the same moment
        try:
            version = con.execute("PRAGMA user_version").fetchone()[0]
            if version == 0:
                tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
                if tables:
                    shown = ", ".join(sorted(tables)[:5])
                    raise StoreError(f"{self.path} is an SQLite file of something else (tables: {shown})")
                for statement in _SCHEMA_V1:
                    con.execute(statement)
            if version < 2:
                have = {row[1] for row in con.execute("PRAGMA table_info(incidents)")}
                for name, definition in STEP_COLUMNS:
                    if name not in have:  # a half-migrated file (added by hand, or an older funnel's try)
                        con.execute(f"ALTER TABLE incidents ADD COLUMN {name} {definition}")
            con.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise


