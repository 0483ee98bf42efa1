"""Conversations in an SQLite file in the service's data dir (`conversations.sqlite`): the verbs of
`funnel.apps.state.conversation_rows` for one `funnel serve` process, kept across its restarts.

WAL mode; every call opens its own short connection, so API threads share one instance without a lock
(SQLite serialises the writers; a busy file is waited on for 10 s). The file is created on first use, not
at start-up, so a data dir that cannot be written fails a request (which `ask` answers without memory), not
the server. The schema is versioned with `PRAGMA user_version`; a newer file, a file that is not SQLite or
an SQLite file of something else is a one-line StoreError.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path

from funnel.apps.state.conversation_rows import (MAX_CHARS, MAX_CONVERSATIONS, MAX_PER_OWNER, MAX_TURNS,
                                                 SqlConversations)
from funnel.errors import StoreError

SQLITE_VERSION = 2
_BUSY_TIMEOUT_S = 10.0
SQLITE_V1 = (
    """CREATE TABLE funnel_conversations (
        key INTEGER PRIMARY KEY AUTOINCREMENT, collection TEXT NOT NULL, id TEXT NOT NULL, title TEXT NOT NULL,
        created_ts REAL NOT NULL, updated_ts REAL NOT NULL, used INTEGER NOT NULL DEFAULT 0,
        UNIQUE (collection, id))""",
    "CREATE INDEX funnel_conversations_used ON funnel_conversations (used)",
    "CREATE INDEX funnel_conversations_updated ON funnel_conversations (collection, updated_ts)",
    """CREATE TABLE funnel_conversation_turns (
        id INTEGER PRIMARY KEY AUTOINCREMENT, conversation INTEGER NOT NULL, question TEXT NOT NULL,
        search_query TEXT NOT NULL, answer TEXT NOT NULL, citations TEXT NOT NULL, chars INTEGER NOT NULL)""",
    "CREATE INDEX funnel_conversation_turns_conversation ON funnel_conversation_turns (conversation, id)",
)
SQLITE_V2 = (  # who started each conversation: forgetting is bounded per collection and per key
    "ALTER TABLE funnel_conversations ADD COLUMN owner TEXT NOT NULL DEFAULT ''",
    "CREATE INDEX funnel_conversations_owner ON funnel_conversations (collection, owner, used)",
    "CREATE INDEX funnel_conversations_collection_used ON funnel_conversations (collection, used)",
)


class EmbeddedConversations(SqlConversations):
    """Conversations in the SQLite file at `path` (WAL; every call opens its own short connection, so API
    threads share one instance; SQLite serialises the writers). The file is created on first use; the
    schema is versioned with `PRAGMA user_version`."""

    # Recency: one more than the most recent (indexed, so a lookup of the index's last entry).
    _NEXT_USED = "(SELECT coalesce(max(used), 0) + 1 FROM funnel_conversations)"

    def __init__(
        self,
        path: Path | str,
        max_conversations: int = MAX_CONVERSATIONS,
        max_turns: int = MAX_TURNS,
        max_chars: int = MAX_CHARS,
        *,
        max_per_owner: int = MAX_PER_OWNER,
        clock: Callable[[], float] = time.time,
    ):
        super().__init__(max_conversations, max_turns, max_chars, clock, max_per_owner)
        self.path = Path(path)
        self._opened = False
        self._open_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"EmbeddedConversations({str(self.path)!r})"

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        try:
            with closing(sqlite3.connect(self.path, timeout=_BUSY_TIMEOUT_S, isolation_level=None)) as con:
                con.execute("PRAGMA synchronous = NORMAL")  # safe under WAL; no fsync per commit
                yield con
        except sqlite3.Error as e:
            if "not a database" in str(e):
                raise StoreError(f"{self.path} is not a conversation database ({e})") from None
            raise StoreError(f"conversations in {self.path}: {e}") from None

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        self._open()
        with self._connect() as con:
            yield con

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        self._open()
        with self._connect() as con:
            con.execute("BEGIN IMMEDIATE")
            try:
                yield con
            except BaseException:
                con.execute("ROLLBACK")
                raise
            con.execute("COMMIT")

    def _open(self) -> None:
        """Creates the folder and the tables on first use (again after a failure: the store may be back)."""
        if self._opened:
            return
        with self._open_lock:
            if self._opened:
                return
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise StoreError(f"cannot create {self.path.parent}: {e.strerror or e}") from None
            with self._connect() as con:
                con.execute("PRAGMA journal_mode = WAL")
                if con.execute("PRAGMA user_version").fetchone()[0] < SQLITE_VERSION:
                    self._migrate(con)
                version = con.execute("PRAGMA user_version").fetchone()[0]
                if version > SQLITE_VERSION:
                    raise StoreError(f"{self.path} was written by a newer funnel (schema {version}); "
                                     f"this one reads up to {SQLITE_VERSION}")
            self._opened = True

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
                for statement in SQLITE_V2:
                    con.execute(statement)
            con.execute(f"PRAGMA user_version = {SQLITE_VERSION}")
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
