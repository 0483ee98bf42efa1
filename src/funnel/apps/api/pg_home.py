"""Collections in the service database (`funnel serve --database URL`): the catalog, each collection's
document registry and original files in tables, and its index a `PgStore` with tables of its own
(`fc<id>_*`). Every process sees the same collections; nothing is kept on local disk but a temporary copy
of a file while it is ingested.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from funnel.apps.api.errors import Conflict
from funnel.apps.api.home import Place
from funnel.apps.api.registry import DocumentRecord, DocumentStatus, utc_now
from funnel.apps.api.uploads import Upload
from funnel.apps.state.db import Database, url_params
from funnel.apps.state.tables import ComponentTables
from funnel.errors import NotFound
from funnel.index.base import Store

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
_FIELDS = {f.name for f in dataclasses.fields(DocumentRecord)}


class PgHome:
    shared = True

    def __init__(self, db: Database, search_url: str | None = None):
        # Tables made on first use: a server starts while the database is down and recovers when it is back.
        # `search_url`: a read replica of `db` where the collection indexes are searched (`replica`).
        self.db = db
        self.search_url = search_url
        if search_url is not None:
            url_params(search_url, "search_database")  # a bad one is refused at start, not at the first search
        self.tables = ComponentTables(db, "collections", MIGRATIONS)

    def names(self) -> set[str]:
        with self.tables.connection() as conn:
            return {r[0] for r in conn.execute("SELECT name FROM funnel_collections").fetchall()}

    def marker(self, name: str) -> dict | None:
        with self.tables.connection() as conn:
            row = conn.execute("SELECT created_at, watch FROM funnel_collections WHERE name = %s", [name]).fetchone()
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
        return Place(PgStore(self.db.url, table_prefix=prefix), PgRegistry(self.tables, name),
                     PgFiles(self.tables, name), reader)

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


class PgRegistry:
    """`Registry` rows: one per document, its record as JSON (the fields `DocumentRecord` has)."""

    def __init__(self, tables: ComponentTables, collection: str):
        self.tables, self.collection = tables, collection  # the collections component's tables

    def list(self) -> list[DocumentRecord]:
        with self.tables.connection() as conn:
            rows = conn.execute("SELECT record FROM funnel_documents WHERE collection = %s ORDER BY seq",
                                [self.collection]).fetchall()
        return [_record(r[0]) for r in rows]

    def get(self, doc_id: str) -> DocumentRecord | None:
        with self.tables.connection() as conn:
            row = conn.execute("SELECT record FROM funnel_documents WHERE collection = %s AND id = %s",
                               [self.collection, doc_id]).fetchone()
        return _record(row[0]) if row else None

    def filenames(self) -> set[str]:
        with self.tables.connection() as conn:
            rows = conn.execute("SELECT filename FROM funnel_documents WHERE collection = %s",
                                [self.collection]).fetchall()
        return {r[0] for r in rows}

    def add(self, records: list[DocumentRecord]) -> None:
        with self.tables.transaction() as conn:
            for record in records:
                conn.execute("INSERT INTO funnel_documents (collection, id, filename, record) VALUES (%s, %s, %s, "
                             "%s)", [self.collection, record.id, record.filename, _json(record)])

    def update(self, doc_id: str, **changes) -> DocumentRecord | None:
        with self.tables.transaction() as conn:
            row = conn.execute("SELECT record FROM funnel_documents WHERE collection = %s AND id = %s FOR UPDATE",
                               [self.collection, doc_id]).fetchone()
            if row is None:
                return None
            record = dataclasses.replace(_record(row[0]), **changes)
            conn.execute("UPDATE funnel_documents SET record = %s WHERE collection = %s AND id = %s",
                         [_json(record), self.collection, doc_id])
            return record

    def remove(self, doc_id: str) -> DocumentRecord | None:
        with self.tables.connection() as conn:
            row = conn.execute("DELETE FROM funnel_documents WHERE collection = %s AND id = %s RETURNING record",
                               [self.collection, doc_id]).fetchone()
        return _record(row[0]) if row else None


def _json(record: DocumentRecord):
    from psycopg.types.json import Jsonb

    return Jsonb(record.to_json())


def _record(data: dict) -> DocumentRecord:
    return DocumentRecord.from_json({k: v for k, v in data.items() if k in _FIELDS})


class PgFiles:
    """`Files` as rows (bytea): an upload is read once (it is within the upload limit) and stored with its
    hash; ingest reads it back into a temporary file, since the loaders read paths."""

    def __init__(self, tables: ComponentTables, collection: str):
        self.tables, self.collection = tables, collection  # the collections component's tables

    def save(self, upload: Upload, name: str, taken: set[str]) -> tuple[str, str]:
        upload.file.seek(0)
        content = upload.file.read()
        digest = hashlib.sha256(content).hexdigest()
        stem, suffix = os.path.splitext(name)
        for n in range(1, 10_000):
            candidate = name if n == 1 else f"{stem} ({n}){suffix}"
            if candidate in taken:
                continue
            with self.tables.connection() as conn:
                stored = conn.execute(
                    "INSERT INTO funnel_files (collection, filename, content, sha256) VALUES (%s, %s, %s, %s) "
                    "ON CONFLICT DO NOTHING", [self.collection, candidate, content, digest]).rowcount
            if stored:
                return candidate, digest
        raise Conflict(f"too many files named like {name}; rename it")

    def content(self, filename: str) -> bytes:
        with self.tables.connection() as conn:
            row = conn.execute("SELECT content FROM funnel_files WHERE collection = %s AND filename = %s",
                               [self.collection, filename]).fetchone()
        if row is None:
            raise NotFound(f"the file {filename} is gone")
        return bytes(row[0])

    @contextmanager
    def local(self, filename: str) -> Iterator[Path]:
        content = self.content(filename)
        with tempfile.TemporaryDirectory(prefix="funnel-upload-") as folder:
            path = Path(folder) / filename
            path.write_bytes(content)
            yield path

    def delete(self, filename: str) -> None:
        with self.tables.connection() as conn:
            conn.execute("DELETE FROM funnel_files WHERE collection = %s AND filename = %s",
                         [self.collection, filename])


__all__ = ["DocumentStatus", "PgFiles", "PgHome", "PgRegistry"]
