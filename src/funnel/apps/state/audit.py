"""The audit log (issue 34): one row for each write the service was asked to do, and for each request
refused for its key (401): who, what, when, from where, and the HTTP status it got.

- **Who**: a key's id; `api_key` for the `[serve] api_key` admin key; `open` when the service has no keys.
  A refused key is named by its id when it has the shape of a funnel key (`fk_<id>_...`), else `unparsed`
  (or `none` when no key came). The secret is never written: the row has no field that could hold it.
- **What**: an action (`document.upload`, `key.revoke`, ...), the route, the collection and a target (the
  document's id and file name, the key's id, the conversation's id).
- **When**: seconds since the epoch, shown as UTC. **From where**: the client's address as the server saw it.

Append-only from the service's side: rows are only ever inserted and read. This module holds no statement
that changes or removes a row, and tests/test_audit.py reads this file to keep it so. The log grows by one
short row per write; an operator who needs to trim it does so with the database's own tools.

Where: `EmbeddedAudit` in `DATA_DIR/audit.sqlite` (`funnel.apps.state.sqlite`: WAL, each call its own
short connection);
`PostgresAudit` in the service's PostgreSQL (`funnel_audit`), shared by every process. `open_audit`
chooses. Every failure is a one-line StoreError (503 on the API). `check()` says whether an append would
be taken now, without adding anything: the API asks it before a write runs (`funnel.apps.api.audit`).
"""

from __future__ import annotations

import math
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Protocol

from funnel.apps.state.db import Database
from funnel.apps.state.sqlite import InFile, SqliteFile, in_data_dir
from funnel.apps.state.tables import InDatabase
from funnel.errors import ConfigError, StoreError

FILE_NAME = "audit.sqlite"
DEFAULT_LIMIT = 100
MAX_LIMIT = 10_000
MAX_FIELD_CHARS = 2000
COLUMNS = "id, ts, who, action, route, collection, target, client, status"
_INSERTED = "ts, who, action, route, collection, target, client, status"
SQLITE_STEPS = ((  # version 1
    """CREATE TABLE funnel_audit (
        id INTEGER PRIMARY KEY AUTOINCREMENT, ts REAL NOT NULL, who TEXT NOT NULL, action TEXT NOT NULL,
        route TEXT NOT NULL, collection TEXT, target TEXT, client TEXT NOT NULL, status INTEGER NOT NULL)""",
    "CREATE INDEX funnel_audit_ts ON funnel_audit (ts, id)",
),)
PG_MIGRATIONS = (
    """CREATE TABLE funnel_audit (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, ts double precision NOT NULL, who text NOT NULL,
        action text NOT NULL, route text NOT NULL, collection text, target text, client text NOT NULL,
        status integer NOT NULL)""",
    "CREATE INDEX funnel_audit_ts ON funnel_audit (ts, id)",
)


@dataclass(frozen=True)
class AuditEvent:
    """One row. `id` is given by the store (None before it is appended)."""

    ts: float
    who: str
    action: str
    route: str
    client: str
    status: int
    collection: str | None = None
    target: str | None = None
    id: int | None = None

    def public(self) -> dict:
        """What `GET /v1/audit` and `funnel audit --json` show: the time as UTC ISO 8601."""
        row = asdict(self)
        del row["ts"]
        return {"id": row.pop("id"), "time": iso_utc(self.ts), **row}


def iso_utc(ts: float) -> str:
    """UTC to the millisecond, rounded down: read back as a `since`, it is never after the row it shows."""
    ms = math.floor(ts * 1000)
    when = datetime.fromtimestamp(ms // 1000, timezone.utc) + timedelta(milliseconds=ms % 1000)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_since(text: str) -> float:
    """`--since` / `?since=`: an ISO 8601 time (UTC unless it says otherwise; a date alone is its midnight)
    or seconds since the epoch. Anything else: ConfigError, one line."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError:
        raise ConfigError(f"since must be an ISO 8601 time (2026-12-05T09:30:00Z) or epoch seconds, "
                          f"not {text[:40]!r}") from None
    return (when if when.tzinfo else when.replace(tzinfo=timezone.utc)).timestamp()


class AuditStore(Protocol):
    """Where the audit log is kept (`open_audit` chooses). Every verb may raise StoreError."""

    def append(self, event: AuditEvent) -> None: ...

    def read(self, limit: int = DEFAULT_LIMIT, since: float | None = None) -> list[AuditEvent]:
        """Rows oldest first: without `since`, the newest `limit`; with it, the first `limit` from it on."""

    def check(self) -> None:
        """Returns when an append would be taken now; raises StoreError when it would not."""


def _clip(text: str | None) -> str | None:
    return None if text is None else text[:MAX_FIELD_CHARS]


class SqlAudit:
    """The verbs, over `_connection()` (autocommit) with `_mark` as the parameter placeholder."""

    _mark = "?"

    def _connection(self) -> AbstractContextManager:
        raise NotImplementedError

    def append(self, event: AuditEvent) -> None:
        values = [event.ts, _clip(event.who), _clip(event.action), _clip(event.route), event.collection,
                  _clip(event.target), _clip(event.client), int(event.status)]
        with self._connection() as conn:
            marks = ", ".join([self._mark] * 8)
            conn.execute(f"INSERT INTO funnel_audit ({_INSERTED}) VALUES ({marks})", values)

    def read(self, limit: int = DEFAULT_LIMIT, since: float | None = None) -> list[AuditEvent]:
        limit, m = max(1, min(int(limit), MAX_LIMIT)), self._mark
        with self._connection() as conn:
            if since is None:
                rows = conn.execute(f"SELECT {COLUMNS} FROM funnel_audit ORDER BY ts DESC, id DESC LIMIT {m}",
                                    [limit]).fetchall()
                rows.reverse()
            else:
                rows = conn.execute(f"SELECT {COLUMNS} FROM funnel_audit WHERE ts >= {m} ORDER BY ts, id "
                                    f"LIMIT {m}", [since, limit]).fetchall()
        return [AuditEvent(id=r[0], ts=r[1], who=r[2], action=r[3], route=r[4], collection=r[5], target=r[6],
                           client=r[7], status=r[8]) for r in rows]


class EmbeddedAudit(InFile, SqlAudit):
    """The log in the SQLite file at `path` (`funnel.apps.state.sqlite`), made on the first append or check,
    readable by its owner alone. Reading a log whose file does not exist finds no rows and creates nothing."""

    def __init__(self, path: Path | str):
        self._in_file(SqliteFile(path, SQLITE_STEPS, "audit log", mode=0o600))  # who did what from where

    def read(self, limit: int = DEFAULT_LIMIT, since: float | None = None) -> list[AuditEvent]:
        return super().read(limit, since) if self.path.exists() else []

    def check(self) -> None:
        """Takes the file's write lock and lets it go: a file that is read-only, not SQLite, on a full or
        missing disk, or locked past the busy timeout fails here, before the write it would record."""
        with self._connection() as con:
            con.execute("BEGIN IMMEDIATE")
            con.execute("ROLLBACK")


class PostgresAudit(InDatabase, SqlAudit):
    """The log in the service's database (`funnel_audit`), migrated on first use."""

    def __init__(self, db: Database):
        self._on_database(db, "audit", PG_MIGRATIONS)

    def check(self) -> None:
        """The database answers and this role may insert into the table."""
        with self._connection() as conn:
            allowed = conn.execute(
                "SELECT has_table_privilege(current_user, 'funnel_audit', 'INSERT')").fetchone()
        if not allowed or not allowed[0]:
            raise StoreError(f"audit log in {self.db.label}: this role may not add rows to funnel_audit")


def open_audit(db: Database | None, data_dir: Path | str | None = None) -> AuditStore:
    """The service's audit log: in the service database `db` when there is one, else `audit.sqlite` under
    `data_dir`. Nothing is opened here."""
    if db is None:
        return EmbeddedAudit(in_data_dir(data_dir, FILE_NAME, "an embedded audit log"))
    return PostgresAudit(db)
