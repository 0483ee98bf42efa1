"""Where the service's collections live: their catalog, and each one's index, documents and files.

- `EmbeddedHome`: folders under `data_dir` (one process):

      DATA_DIR/collections/NAME/collection.json   marker (name, created_at, watch)
                               /documents.json    its documents: every upload and its status
                               /uploads/          the original files
                               /index/            the LanceStore

- `PostgresHome`: the same in the service database (`funnel serve --database URL`), for many processes:
  the catalog, each collection's documents and original files in tables, and its index a `PgStore` with
  tables of its own (`fc<id>_*`), optionally searched on a read replica (`search_database`,
  `funnel.apps.state.replica`). Nothing is kept on local disk but a temporary copy of a file while it is
  ingested.

`open_home` chooses. A collection's parts are the same three objects in both homes (`Place`: its index,
its documents in `funnel.apps.state.documents`, its files in `funnel.apps.state.files`), so `Collection` has
one code path.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from funnel import index
from funnel.apps.state.db import Database, url_params
from funnel.apps.state.documents import Documents, EmbeddedDocuments, PostgresDocuments, utc_now
from funnel.apps.state.files import EmbeddedFiles, Files, PostgresFiles
from funnel.apps.state.tables import ComponentTables
from funnel.errors import ConfigError, NotFound, StoreError
from funnel.index.base import Store

MARKER = "collection.json"
NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


def check_name(name: str) -> str:
    if not NAME.match(name):
        raise ConfigError(
            f"invalid collection name {name[:80]!r}: use 1-64 lower-case letters, digits, '_' or '-', "
            "starting with a letter or digit"
        )
    return name


@dataclass(frozen=True)
class Place:
    store: Store
    registry: Documents  # the collection's documents (`Collection` reads them by this name)
    files: Files
    reader: Store | None = None  # the index on a read replica, for searches (`search_database`)


class Home(Protocol):
    shared: bool  # other processes see the same collections (check the catalog on every use)

    def names(self) -> set[str]: ...

    def marker(self, name: str) -> dict | None:
        """The collection's record (name, created_at, watch), or None when there is no such collection."""

    def write_marker(self, name: str, watch: Path | None = None) -> None: ...

    def remove_marker(self, name: str) -> None:
        """The collection is gone for every request from here on; its data goes with `destroy`."""

    def place(self, name: str) -> Place: ...

    def index_only(self, name: str) -> Store:
        """The collection's index, opened without creating anything (for /health)."""

    def destroy(self, name: str) -> None: ...

    def ignore(self) -> list[Path]:
        """Local folders a watched folder must not react to (the home's own writes)."""

    def close(self) -> None: ...


def open_home(db: Database | None, data_dir: Path, search_url: str | None = None) -> Home:
    """The service's collections: in `db` when it has one (shared by its processes; `search_url`, a read
    replica of it, for searches), else in folders under `data_dir`."""
    if db is None:
        return EmbeddedHome(data_dir)
    return PostgresHome(db, search_url)


# --- in folders --------------------------------------------------------------------------------------------


class EmbeddedHome:
    shared = False

    def __init__(self, data_dir: Path):
        self.root = Path(data_dir) / "collections"

    def names(self) -> set[str]:
        try:
            return {p.name for p in self.root.iterdir() if (p / MARKER).is_file()}
        except FileNotFoundError:
            return set()

    def marker(self, name: str) -> dict | None:
        path = self.root / name / MARKER
        if not path.is_file():
            return None
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise StoreError(f"{path} is unreadable ({e})") from e

    def write_marker(self, name: str, watch: Path | None = None) -> None:
        root = self.root / name
        root.mkdir(parents=True, exist_ok=True)
        marker = {"name": name, "created_at": utc_now()} | ({"watch": str(watch)} if watch else {})
        tmp = root / (MARKER + ".tmp")
        tmp.write_text(json.dumps(marker), encoding="utf-8")
        tmp.replace(root / MARKER)

    def remove_marker(self, name: str) -> None:
        (self.root / name / MARKER).unlink(missing_ok=True)

    def place(self, name: str) -> Place:
        root = self.root / name
        documents = EmbeddedDocuments(root / "documents.json")
        return Place(index.open(root / "index"), documents, EmbeddedFiles(root / "uploads"))

    def index_only(self, name: str) -> Store:
        return index.open(self.root / name / "index")

    def destroy(self, name: str) -> None:
        shutil.rmtree(self.root / name, ignore_errors=True)

    def ignore(self) -> list[Path]:
        return [self.root.parent]

    def close(self) -> None:
        pass


# --- in the service database ----------------------------------------------------------------------------

MIGRATIONS = [
    """CREATE TABLE funnel_collections (
        name text PRIMARY KEY, id bigint GENERATED ALWAYS AS IDENTITY UNIQUE, created_at text NOT NULL,
        watch text)""",
    """CREATE TABLE funnel_documents (
        collection text NOT NULL, id text NOT NULL, filename text NOT NULL, record jsonb NOT NULL,
        seq bigint GENERATED ALWAYS AS IDENTITY, PRIMARY KEY (collection, id))""",
    """CREATE TABLE funnel_files (
        collection text NOT NULL, filename text NOT NULL, content bytea NOT NULL, sha256 text NOT NULL,
        PRIMARY KEY (collection, filename))""",
]


class PostgresHome:
    shared = True

    def __init__(self, db: Database, search_url: str | None = None):
        # Tables made on first use: a server starts while the database is down and recovers when it is back.
        # `search_url`: a read replica of `db` where the collection indexes are searched (`replica`).
        self.db = db
        self.search_url = search_url
        if search_url is not None:
            url_params(search_url, "search_database")  # a bad one is refused at start, not at a search
        self.tables = ComponentTables(db, "collections", MIGRATIONS)

    def names(self) -> set[str]:
        with self.tables.connection() as conn:
            return {r[0] for r in conn.execute("SELECT name FROM funnel_collections").fetchall()}

    def marker(self, name: str) -> dict | None:
        with self.tables.connection() as conn:
            row = conn.execute("SELECT created_at, watch FROM funnel_collections WHERE name = %s",
                               [name]).fetchone()
        if row is None:
            return None
        return {"name": name, "created_at": row[0]} | ({"watch": row[1]} if row[1] else {})

    def write_marker(self, name: str, watch: Path | None = None) -> None:
        with self.tables.connection() as conn:
            conn.execute("INSERT INTO funnel_collections (name, created_at, watch) VALUES (%s, %s, %s) "
                         "ON CONFLICT (name) DO UPDATE SET watch = EXCLUDED.watch",
                         [name, utc_now(), str(watch) if watch else None])

    def remove_marker(self, name: str) -> None:
        with self.tables.connection() as conn:
            conn.execute("DELETE FROM funnel_collections WHERE name = %s", [name])

    def _prefix(self, name: str) -> str:
        with self.tables.connection() as conn:
            row = conn.execute("SELECT id FROM funnel_collections WHERE name = %s", [name]).fetchone()
        if row is None:
            raise NotFound(f"no collection {name!r}")
        return f"fc{row[0]}"

    def place(self, name: str) -> Place:
        from funnel.index.postgres import PgStore

        prefix = self._prefix(name)
        reader = PgStore(self.search_url, table_prefix=prefix) if self.search_url else None
        return Place(PgStore(self.db.url, table_prefix=prefix), PostgresDocuments(self.tables, name),
                     PostgresFiles(self.tables, name), reader)

    def index_only(self, name: str) -> Store:
        from funnel.index.postgres import PgStore

        return PgStore(self.db.url, table_prefix=self._prefix(name))

    def destroy(self, name: str, prefix: str | None = None) -> None:
        """The collection's rows and index tables (`prefix`: its index's, read before the marker went)."""
        with self.tables.transaction() as conn:
            conn.execute("DELETE FROM funnel_documents WHERE collection = %s", [name])
            conn.execute("DELETE FROM funnel_files WHERE collection = %s", [name])
        if prefix is not None:
            from funnel.index.postgres import PgStore

            PgStore(self.db.url, table_prefix=prefix).drop()

    def prefix_of(self, name: str) -> str | None:
        try:
            return self._prefix(name)
        except NotFound:
            return None

    def ignore(self) -> list[Path]:
        return []

    def close(self) -> None:
        self.db.close()
