"""One versioned SQLite file of the embedded service state: `audit.sqlite`, `keys.sqlite` and
`conversations.sqlite` in the data dir, and the incidents file (`funnel.apps.state.audit`, `keys`,
`conversations`, `incidents`). Each store hands `SqliteFile` its schema as steps: version n is made by the
statements of `steps[n - 1]`, and steps are only ever appended.

- Every call opens its own short connection (autocommit, a busy file waited on for 10 s), so API threads
  share one store without a lock; SQLite serialises the writers. WAL mode, so reads go on while one writes.
- The file (and its folder) is made on first use, not when the store is built, so a data dir that cannot be
  written fails a request, not the server's start; after a failure the next call tries again.
- `PRAGMA user_version` is the schema's version. The steps a file lacks run in one `BEGIN IMMEDIATE`
  transaction, so two processes opening a new file together make it once. A step that adds a column the
  table already has (a half-migrated file) is passed over.
- Refused, each as a one-line StoreError: a file written by a newer funnel, a file that is not SQLite, and an
  SQLite file of something else (tables, but version 0).
"""

from __future__ import annotations

import re
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from pathlib import Path

from funnel.apps.state.backing import Backed
from funnel.errors import StoreError

BUSY_TIMEOUT_S = 10.0
_ADD_COLUMN = re.compile(r"\s*ALTER\s+TABLE\s+(\w+)\s+ADD\s+COLUMN\s+(\w+)", re.IGNORECASE)


class SqliteFile:
    """The SQLite file at `path` with the schema `steps`; `name` says what it holds in messages ("audit
    log", "incident database"). `mode`: the file's permissions, set once it is made (0o600: for admins
    only). `durable=False` lets commits skip the fsync (`synchronous = NORMAL`: under WAL the file stays
    whole, but the last commits may be lost with the power)."""

    def __init__(self, path: Path | str, steps: Sequence[Sequence[str]], name: str, *, mode: int | None = None,
                 durable: bool = True):
        self.path = Path(path)
        self.steps = steps
        self.name = name
        self.mode = mode
        self.durable = durable
        self._ready = False
        self._lock = threading.Lock()

    @property
    def version(self) -> int:
        return len(self.steps)

    @contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        """An autocommit connection to the file, made and migrated first if need be."""
        self.open()
        with self._connect() as con:
            yield con

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A connection inside one `BEGIN IMMEDIATE` transaction: committed when the block ends, rolled back
        on any error."""
        with self.connection() as con:
            con.execute("BEGIN IMMEDIATE")
            try:
                yield con
            except BaseException:
                _rollback(con)
                raise
            con.execute("COMMIT")

    def open(self) -> None:
        """Makes the folder and the file, or brings an older file to `version` (once per instance, again after
        a failure or when the file is gone)."""
        if self._ready and self.path.exists():
            return
        with self._lock:
            if self._ready and self.path.exists():
                return
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise StoreError(f"cannot create {self.path.parent}: {e.strerror or e}") from None
            with self._connect() as con:
                if _user_version(con) != self.version:
                    self._migrate(con)  # a file it refuses is left as it was
                con.execute("PRAGMA journal_mode = WAL")
            if self.mode is not None:
                try:
                    self.path.chmod(self.mode)
                except OSError as e:
                    raise StoreError(f"{self.name} in {self.path}: {e.strerror or e}") from None
            self._ready = True

    def _migrate(self, con: sqlite3.Connection) -> None:
        con.execute("BEGIN IMMEDIATE")  # another process may be making the file at the same moment
        try:
            version = _user_version(con)
            if version > self.version:
                raise StoreError(f"{self.path} was written by a newer funnel (schema {version}); this one "
                                 f"reads up to {self.version}")
            tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            if version == 0 and tables:
                shown = ", ".join(sorted(tables)[:5])
                raise StoreError(f"{self.path} is an SQLite file of something else (tables: {shown})")
            for step in self.steps[version:]:
                for statement in step:
                    if not _adds_a_column_it_has(con, statement):
                        con.execute(statement)
            con.execute(f"PRAGMA user_version = {self.version}")
            con.execute("COMMIT")
        except BaseException:
            _rollback(con)
            raise

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        """A short-lived autocommit connection; every sqlite3 error in its block becomes a one-line StoreError."""
        try:
            with closing(sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)) as con:
                if not self.durable:
                    con.execute("PRAGMA synchronous = NORMAL")
                yield con
        except sqlite3.Error as e:
            if "not a database" in str(e):
                article = "an" if self.name[0] in "aeiou" else "a"
                raise StoreError(f"{self.path} is not {article} {self.name} ({e})") from None
            raise StoreError(f"{self.name} in {self.path}: {e}") from None


def in_data_dir(data_dir: Path | str | None, file_name: str, store: str) -> Path:
    """Where an embedded `store` keeps its file: `file_name` in the service's data dir (which it needs)."""
    if data_dir is None:
        raise ValueError(f"{store} needs the service's data dir")
    return Path(data_dir) / file_name


def _user_version(con: sqlite3.Connection) -> int:
    return con.execute("PRAGMA user_version").fetchone()[0]


def _adds_a_column_it_has(con: sqlite3.Connection, statement: str) -> bool:
    match = _ADD_COLUMN.match(statement)
    if match is None:
        return False
    table, column = match.groups()
    return column in {row[1] for row in con.execute(f"PRAGMA table_info({table})")}


def _rollback(con: sqlite3.Connection) -> None:
    if con.in_transaction:  # SQLite may have rolled back already (a full disk, an I/O error)
        con.execute("ROLLBACK")


class InFile(Backed):
    """An embedded store: its versioned SQLite file. A store calls `_in_file` from its `__init__`."""

    def _in_file(self, file: SqliteFile) -> None:
        self._backing = self._file = file
        self.path = file.path

    def _where(self) -> str:
        return str(self.path)
