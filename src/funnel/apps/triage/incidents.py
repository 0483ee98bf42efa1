"""The incident store: every triaged error and what became of its Slack message. One SQLite file here;
`funnel.apps.state.incidents` keeps the same in the service database (`funnel serve --database`), and
`open_incidents` there chooses. Both take their rows and queries from the helpers at the end, so both
store the same redacted, bounded incident.

What is written is redacted first (`redact_obj`): no secret of a report or an analysis reaches the disk.
Sizes are bounded: a stack trace over `MAX_TRACE_CHARS` keeps its top and bottom around a marker, the
message is cut to `MAX_MESSAGE_CHARS`, ranked-file excerpts to a few thousand characters.

SQLite runs in WAL mode and every call opens its own short connection, so API threads share one
`IncidentStore` without a lock (SQLite serialises the writers; a busy file is waited on for 10 s). The
schema is versioned with `PRAGMA user_version`; a file written by a newer funnel, a file that is not SQLite,
or an SQLite file of something else is a `StoreError` with a one-line message.
"""

from __future__ import annotations

import builtins
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from funnel.apps.triage.redact import redact, redact_obj
from funnel.apps.triage.schema import MAX_MESSAGE_CHARS, MAX_TRACE_CHARS, ErrorReport, TriageResult
from funnel.apps.triage.slack import Delivery
from funnel.errors import StoreError

SCHEMA_VERSION = 1
MAX_LIST = 1000
_BUSY_TIMEOUT_S = 10.0
_DETAIL_CHARS = 1000
_EXCERPT_CHARS = 4000
_MAX_FILES = 50
_MAX_NOTES = 50

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
COLUMNS = (  # in the order of Incident's fields
    "id, created_at, service, exception_type, message, fingerprint, analysis_status, result_json, "
    "slack_status, slack_detail, report_json"
)
INSERT_COLUMNS = (  # in the order of incident_row's values
    "created_at, created_ts, service, exception_type, message, fingerprint, analysis_status, report_json, "
    "result_json"
)


@dataclass(frozen=True)
class Incident:
    """One stored incident (already redacted). `slack_status` is None until a delivery is recorded."""

    id: int
    created_at: str
    service: str
    exception_type: str | None
    message: str
    fingerprint: str
    analysis_status: str
    result_json: str
    slack_status: str | None
    slack_detail: str | None
    report_json: str = ""

    def result(self) -> TriageResult:
        return TriageResult.model_validate_json(self.result_json)

    def report(self) -> ErrorReport:
        return ErrorReport.model_validate_json(self.report_json)


class Incidents(Protocol):
    """Where triaged errors are kept: an SQLite file (`IncidentStore`) or the service database
    (`funnel.apps.state.incidents.PostgresIncidentStore`). A StoreError says why one cannot be used."""

    def record(self, report: ErrorReport, result: TriageResult) -> int: ...

    def set_delivery(self, incident_id: int, delivery: Delivery) -> None: ...

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

    def record(self, report: ErrorReport, result: TriageResult) -> int:
        """Stores the redacted, size-bounded report and result; returns the new incident's id."""
        with self._connect() as con:
            cursor = con.execute(
                f"INSERT INTO incidents ({INSERT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                incident_row(report, result, self._clock()),
            )
            return int(cursor.lastrowid)

    def set_delivery(self, incident_id: int, delivery: Delivery) -> None:
        """Records what became of the incident's Slack message; an unknown id is a `StoreError`."""
        with self._connect() as con:
            cursor = con.execute(
                "UPDATE incidents SET slack_status = ?, slack_detail = ? WHERE id = ?",
                (*delivery_values(delivery), incident_id),
            )
            if cursor.rowcount == 0:
                raise StoreError(f"{self.path}: no incident {incident_id}")

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
                con.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise


# --- what both stores write and ask ------------------------------------------------------------------------


def incident_row(report: ErrorReport, result: TriageResult, ts: float) -> tuple:
    """The values of INSERT_COLUMNS for one incident at Unix time `ts`: redacted first, then bounded."""
    report = _bounded_report(redact_obj(report))
    result = _bounded_result(redact_obj(result))
    created_at = datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")
    return (
        created_at,
        ts,
        result.service,
        result.exception_type,
        report.message or result.message,
        result.fingerprint,
        result.analysis_status.value,
        report.model_dump_json(),
        result.model_dump_json(),
    )


def delivery_values(delivery: Delivery) -> tuple[str, str]:
    """(slack_status, slack_detail) of a delivery, the detail redacted and cut."""
    return getattr(delivery.status, "value", delivery.status), redact(delivery.detail)[:_DETAIL_CHARS]


def list_query(
    table: str, mark: str, limit: int, service: str | None, fingerprint: str | None
) -> tuple[str, builtins.list]:
    """`list`'s SELECT on `table` with the driver's parameter `mark` ("?" or "%s"), and its arguments."""
    where, args = [], []
    if service is not None:
        where.append(f"service = {mark}")
        args.append(service)
    if fingerprint is not None:
        where.append(f"fingerprint = {mark}")
        args.append(fingerprint)
    sql = f"SELECT {COLUMNS} FROM {table}"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += f" ORDER BY id DESC LIMIT {mark}"
    args.append(max(0, min(int(limit), MAX_LIST)))
    return sql, args


def _bounded_report(report: ErrorReport) -> ErrorReport:
    return report.model_copy(
        update={
            "stack_trace": _bounded_trace(report.stack_trace),
            "message": report.message[:MAX_MESSAGE_CHARS],
        }
    )


def _bounded_trace(trace: str, limit: int = MAX_TRACE_CHARS) -> str:
    """A trace of at most `limit` characters: its top three quarters and its bottom, around a marker."""
    if len(trace) <= limit:
        return trace
    marker = f"\n… [{len(trace):,} characters; the middle is cut] …\n"
    head = limit * 3 // 4
    tail = limit - head - len(marker)
    return trace[:head] + marker + trace[len(trace) - tail :]


def _bounded_result(result: TriageResult) -> TriageResult:
    files = [f.model_copy(update={"excerpt": f.excerpt[:_EXCERPT_CHARS]}) for f in result.files[:_MAX_FILES]]
    return result.model_copy(
        update={
            "message": result.message[:MAX_MESSAGE_CHARS],
            "files": files,
            "notes": result.notes[:_MAX_NOTES],
            "analysis_reason": result.analysis_reason[:_DETAIL_CHARS],
        }
    )
