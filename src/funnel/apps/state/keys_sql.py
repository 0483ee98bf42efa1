"""The key store's two homes, one SQL: `EmbeddedKeys` (an SQLite file in the data dir, `keys.sqlite`) and
`PostgresKeys` (the service's PostgreSQL, every process sharing it). See `funnel.apps.state.keys`.

Rows are only added and revoked, never deleted (a revoked key stays listed, and the store stays
"configured", so revoking the last key does not reopen the service).
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

from funnel.apps.state.db import Database
from funnel.apps.state.key_records import KeyRecord, Role
from funnel.apps.state.tables import ComponentTables
from funnel.errors import StoreError

COLUMNS = "id, role, collections, created_ts, expires_ts, revoked_ts, salt, digest, rpm, upload_mb_per_day"
SQLITE_VERSION = 2
SQLITE_V1 = """CREATE TABLE funnel_keys (
    id TEXT PRIMARY KEY, role TEXT NOT NULL, collections TEXT, created_ts REAL NOT NULL, expires_ts REAL,
    revoked_ts REAL, salt BLOB NOT NULL, digest BLOB NOT NULL)"""
SQLITE_V2 = ("ALTER TABLE funnel_keys ADD COLUMN rpm INTEGER",  # limits per key (NULL: the service's default)
             "ALTER TABLE funnel_keys ADD COLUMN upload_mb_per_day REAL")
PG_MIGRATIONS = ("""CREATE TABLE funnel_keys (
    id text PRIMARY KEY, role text NOT NULL, collections text, created_ts double precision NOT NULL,
    expires_ts double precision, revoked_ts double precision, salt bytea NOT NULL, digest bytea NOT NULL)""",
                 "ALTER TABLE funnel_keys ADD COLUMN rpm integer, ADD COLUMN upload_mb_per_day double precision")


def _row(row) -> KeyRecord:
    key_id, role, collections, created, expires, revoked, salt, digest, rpm, upload = row
    names = tuple(json.loads(collections)) if collections is not None else None
    return KeyRecord(key_id, Role(role), names, created, expires, revoked, bytes(salt), bytes(digest), rpm, upload)


class SqlKeys:
    """The verbs, over `_connection()` (autocommit) with `_mark` as the parameter placeholder."""

    _mark = "?"

    @contextmanager
    def _connection(self) -> Iterator:
        raise NotImplementedError
        yield

    def add(self, record: KeyRecord) -> None:
        m = self._mark
        names = json.dumps(list(record.collections)) if record.collections is not None else None
        with self._connection() as conn:
            conn.execute(f"INSERT INTO funnel_keys ({COLUMNS}) VALUES ({', '.join([m] * 10)})",
                         [record.id, record.role.value, names, record.created, record.expires, record.revoked,
                          record.salt, record.digest, record.rpm, record.upload_mb_per_day])

    def get(self, key_id: str) -> KeyRecord | None:
        with self._connection() as conn:
            row = conn.execute(f"SELECT {COLUMNS} FROM funnel_keys WHERE id = {self._mark}", [key_id]).fetchone()
        return _row(row) if row else None

    def list(self) -> list[KeyRecord]:
        with self._connection() as conn:
            rows = conn.execute(f"SELECT {COLUMNS} FROM funnel_keys ORDER BY created_ts, id").fetchall()
        return [_row(r) for r in rows]

    def revoke(self, key_id: str, now: float) -> KeyRecord | None:
        m = self._mark
        with self._connection() as conn:
            conn.execute(f"UPDATE funnel_keys SET revoked_ts = {m} WHERE id = {m} AND revoked_ts IS NULL",
                         [now, key_id])
        return self.get(key_id)

    def any(self) -> bool:
        with self._connection() as conn:
            return conn.execute("SELECT 1 FROM funnel_keys LIMIT 1").fetchone() is not None

    def unbind(self, collection: str) -> list[str]:
        m = self._mark
        changed = []
        with self._connection() as conn:
            rows = conn.execute("SELECT id, collections FROM funnel_keys WHERE collections IS NOT NULL").fetchall()
            for key_id, names in rows:
                names = json.loads(names)
                if collection in names:
                    kept = json.dumps([n for n in names if n != collection])
                    conn.execute(f"UPDATE funnel_keys SET collections = {m} WHERE id = {m}", [kept, key_id])
                    changed.append(key_id)
        return changed


class EmbeddedKeys(SqlKeys):
    """Keys in the SQLite file at `path`, made on the first key; every call opens its own short connection.
    Reading a store whose file does not exist finds no keys and creates nothing."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._opened = False

    def __repr__(self) -> str:
        return f"EmbeddedKeys({str(self.path)!r})"

    def any(self) -> bool:
        if not self.path.exists():
            return False
        return super().any()

    def get(self, key_id: str) -> KeyRecord | None:
        return super().get(key_id) if self.path.exists() else None

    def list(self) -> list[KeyRecord]:
        return super().list() if self.path.exists() else []

    def unbind(self, collection: str) -> list[str]:
        return super().unbind(collection) if self.path.exists() else []

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        self._open()
        try:
            with closing(sqlite3.connect(self.path, timeout=10.0, isolation_level=None)) as con:
                yield con
        except sqlite3.Error as e:
            raise StoreError(f"keys in {self.path}: {e}") from None

    def _open(self) -> None:
        if self._opened and self.path.exists():
            return
        with self._lock:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with closing(sqlite3.connect(self.path, timeout=10.0, isolation_level=None)) as con:
                    version = con.execute("PRAGMA user_version").fetchone()[0]
                    if version == SQLITE_VERSION:
                        self._opened = True
                        return
                    if version > SQLITE_VERSION:
                        raise StoreError(f"{self.path} was written by a newer funnel (schema {version})")
                    con.execute("BEGIN IMMEDIATE")
                    tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
                    if tables and con.execute("PRAGMA user_version").fetchone()[0] == 0:
                        con.execute("ROLLBACK")
                        raise StoreError(f"{self.path} is an SQLite file of something else (tables: "
                                         f"{', '.join(sorted(tables)[:5])})")
                    if not tables:
                        con.execute(SQLITE_V1)
                    if con.execute("PRAGMA user_version").fetchone()[0] < 2:
                        for step in SQLITE_V2:
                            con.execute(step)
                    con.execute(f"PRAGMA user_version = {SQLITE_VERSION}")
                    con.execute("COMMIT")
                self.path.chmod(0o600)  # hashes only, but nobody else's business
                self._opened = True
            except sqlite3.Error as e:
                raise StoreError(f"keys in {self.path}: {e}") from None
            except OSError as e:
                raise StoreError(f"keys in {self.path}: {e.strerror or e}") from None


class PostgresKeys(SqlKeys):
    """Keys in the service's database (`funnel_keys`), migrated on first use."""

    _mark = "%s"

    def __init__(self, db: Database):
        self.db = db
        self._tables = ComponentTables(db, "keys", PG_MIGRATIONS)

    def __repr__(self) -> str:
        return f"PostgresKeys({self.db.label!r})"

    @contextmanager
    def _connection(self) -> Iterator:
        with self._tables.connection() as conn:
            yield conn
