"""The incident store: every triaged error and what became of its Slack message. `EmbeddedIncidents` keeps
them in one SQLite file, `PostgresIncidents` in the service database (`funnel serve --database`), where
every process records into and lists from one history; `open_incidents` chooses. Both take their table,
rows and queries from `funnel.apps.state.incident_rows`, so both store the same redacted, bounded incident
(no secret of a report or an analysis reaches the disk).

SQLite runs in WAL mode and every call opens its own short connection, so API threads share one
`EmbeddedIncidents` without a lock (SQLite serialises the writers; a busy file is waited on for 10 s). The
schema is versioned with `PRAGMA user_version`; a file written by a newer funnel, a file that is not SQLite,
or an SQLite file of something else is a `StoreError` with a one-line message. In PostgreSQL ids come from
an identity column, so two processes never hand out the same one.

An incident is recorded as soon as its files are ranked; its slow steps (the analysis, the Slack message)
run later on a worker (`funnel.apps.triage.queue`) and write their progress with `update`. Version 2 added
the columns for that (`STEP_COLUMNS`); a version 1 file gains them when it is opened, its incidents marked
as analysed (they were, before the answer went out). `count_since` compares against the recording
process's clock (Unix seconds, not the database's); hosts kept in step by NTP agree to well under a second.
"""

from __future__ import annotations

import builtins
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, closing, contextmanager
from pathlib import Path
from typing import Protocol

from funnel.apps.state import incident_rows as rows
from funnel.apps.state.db import Database
from funnel.apps.state.incident_rows import Incident, IncidentChange
from funnel.apps.state.tables import ComponentTables
from funnel.apps.triage.schema import ErrorReport, TriageResult, TriageSteps
from funnel.apps.triage.slack import Delivery
from funnel.errors import StoreError

__all__ = [
    "EmbeddedIncidents", "Incident", "IncidentChange", "Incidents", "PostgresIncidents", "open_incidents",
]

SCHEMA_VERSION = 2  # the SQLite file's
_BUSY_TIMEOUT_S = 10.0
SQLITE_V1 = rows.schema_v1("incidents", "id INTEGER PRIMARY KEY AUTOINCREMENT", "REAL")

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


class EmbeddedIncidents(_Queries):
    """Incidents in the SQLite file at `path` (its folder is created). `clock` gives Unix seconds."""

    _table, _mark = "incidents", "?"

    def __init__(self, path: Path | str, *, clock: Callable[[], float] = time.time):
        self.path = Path(path)
        self._clock = clock
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(f"cannot create {self.path.parent}: {e.strerror or e}") from None
        self._open()

    def __repr__(self) -> str:
        return f"EmbeddedIncidents({str(self.path)!r})"

    def record(self, report: ErrorReport, result: TriageResult, steps: TriageSteps | None = None) -> int:
        """Stores the redacted, size-bounded report and result; returns the new incident's id."""
        row = rows.incident_row(report, result, self._clock(), steps)
        with self._connection() as con:
            marks = ", ".join("?" * len(row))
            cursor = con.execute(f"INSERT INTO incidents ({rows.INSERT_COLUMNS}) VALUES ({marks})", row)
            return int(cursor.lastrowid)

    def _label(self) -> str:
        return str(self.path)

    # --- the file ----------------------------------------------------------------------------------------

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
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
        with self._connection() as con:
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
                for statement in SQLITE_V1:
                    con.execute(statement)
            if version < 2:
                have = {row[1] for row in con.execute("PRAGMA table_info(incidents)")}
                for name, definition in rows.STEP_COLUMNS:
                    if name not in have:  # a half-migrated file (added by hand, or an older funnel's try)
                        con.execute(f"ALTER TABLE incidents ADD COLUMN {name} {definition}")
            con.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise


class PostgresIncidents(_Queries):
    """Incidents in the service database `db`. Cheap to build: the tables are created on first use (or by
    `warm_up`), so a server starts while the database is down; then every call is a `DatabaseUnavailable`
    (a StoreError, HTTP 503) until it is back. `clock` gives Unix seconds."""

    _table, _mark = "funnel_incidents", "%s"

    def __init__(self, db: Database, *, clock: Callable[[], float] = time.time):
        self._tables = ComponentTables(db, COMPONENT, STEPS)
        self._clock = clock

    def __repr__(self) -> str:
        return f"PostgresIncidents({self._tables.db.label!r})"

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
        return self._tables.db.label

    def _connection(self) -> AbstractContextManager:
        return self._tables.connection()

    @staticmethod
    def _arg(value):
        return _text(value)


def _text(value):
    """PostgreSQL text cannot hold NUL; a stray one in a report (a binary log line) becomes U+FFFD instead of
    losing the incident. The JSON columns keep it, escaped."""
    return value.replace("\x00", "\ufffd") if isinstance(value, str) and "\x00" in value else value
