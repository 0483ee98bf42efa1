"""The documents of one collection and where each stands (a `DocumentRecord` each): `EmbeddedDocuments` in
a JSON file beside the collection's index, `PostgresDocuments` as rows of the service database (one per
document, its record as JSON), where every process sees them. The collection's `Home` makes them.

The JSON file survives a restart: every change rewrites it whole and atomically (write beside it, fsync,
rename), so a crash leaves either the old list or the new one, never half of either. A collection holds
uploads a person made by hand: hundreds of records, not millions, so rewriting the file is cheap.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from typing import Protocol

from funnel.apps.state.tables import ComponentTables
from funnel.errors import StoreError

FORMAT = 1


class DocumentStatus(str, Enum):
    QUEUED = "queued"
    INGESTING = "ingesting"
    READY = "ready"
    FAILED = "failed"


@dataclass(frozen=True)
class DocumentRecord:
    id: str  # also the document's doc_id in the index, so a chunk names its document
    filename: str  # the stored (sanitised, unique) name inside the collection's uploads folder
    kind: str  # pdf | markdown | text
    bytes: int
    sha256: str
    uploaded_at: str  # ISO 8601, UTC
    status: DocumentStatus = DocumentStatus.QUEUED
    error: str | None = None
    chunks: int = 0
    progress: str | None = None  # while ingesting: "page 120 of 2415" (a PDF read), "chunks 512 of 2048"
    progress_done: int | None = None  # the numbers in `progress`: pages read or chunks embedded,
    progress_total: int | None = None  # of this many
    warnings: tuple[str, ...] = ()  # what was left unread of a ready document (`LoadedDocument.warnings`)

    def to_json(self) -> dict:
        return {**dataclasses.asdict(self), "status": self.status.value}

    @classmethod
    def from_json(cls, data: dict) -> DocumentRecord:
        fields = {f.name for f in dataclasses.fields(cls)}
        known = {k: v for k, v in data.items() if k in fields}
        return cls(**{**known, "status": DocumentStatus(data["status"]),
                      "warnings": tuple(data.get("warnings") or ())})


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class Documents(Protocol):
    """A collection's documents and where each stands."""

    def list(self) -> list[DocumentRecord]: ...

    def get(self, doc_id: str) -> DocumentRecord | None: ...

    def filenames(self) -> set[str]: ...

    def add(self, records: list[DocumentRecord]) -> None: ...

    def update(self, doc_id: str, **changes) -> DocumentRecord | None:
        """The record with `changes` applied; None (and nothing written) when it was deleted meanwhile."""

    def remove(self, doc_id: str) -> DocumentRecord | None: ...


class EmbeddedDocuments:
    """In the JSON file at `path`. Thread-safe; every method returns frozen records, so callers never share
    mutable state."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()
        self._records: dict[str, DocumentRecord] = self._load()

    def _load(self) -> dict[str, DocumentRecord]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            raise StoreError(f"{self.path} is unreadable ({e}); move it away to start the list afresh") from e
        try:
            return {r["id"]: DocumentRecord.from_json(r) for r in data["documents"]}
        except (KeyError, TypeError, ValueError) as e:
            raise StoreError(f"{self.path} is damaged ({type(e).__name__}: {e})") from e

    def _save(self) -> None:
        body = {"format": FORMAT, "documents": [r.to_json() for r in self._records.values()]}
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(body, fh, indent=1)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)

    def list(self) -> list[DocumentRecord]:
        with self._lock:
            return list(self._records.values())

    def get(self, doc_id: str) -> DocumentRecord | None:
        with self._lock:
            return self._records.get(doc_id)

    def filenames(self) -> set[str]:
        with self._lock:
            return {r.filename for r in self._records.values()}

    def add(self, records: list[DocumentRecord]) -> None:
        with self._lock:
            for record in records:
                self._records[record.id] = record
            self._save()

    def update(self, doc_id: str, **changes) -> DocumentRecord | None:
        """The record with `changes` applied; None (and nothing written) when it was deleted meanwhile."""
        with self._lock:
            record = self._records.get(doc_id)
            if record is None:
                return None
            record = dataclasses.replace(record, **changes)
            self._records[doc_id] = record
            self._save()
            return record

    def remove(self, doc_id: str) -> DocumentRecord | None:
        with self._lock:
            record = self._records.pop(doc_id, None)
            if record is not None:
                self._save()
            return record


class PostgresDocuments:
    """Rows of `funnel_documents` (made by the home's `tables`): one per document, its record as JSON (the
    fields `DocumentRecord` has)."""

    def __init__(self, tables: ComponentTables, collection: str):
        self.tables, self.collection = tables, collection  # the collections component's tables

    def list(self) -> list[DocumentRecord]:
        with self.tables.connection() as conn:
            rows = conn.execute("SELECT record FROM funnel_documents WHERE collection = %s ORDER BY seq",
                                [self.collection]).fetchall()
        return [DocumentRecord.from_json(r[0]) for r in rows]

    def get(self, doc_id: str) -> DocumentRecord | None:
        with self.tables.connection() as conn:
            row = conn.execute("SELECT record FROM funnel_documents WHERE collection = %s AND id = %s",
                               [self.collection, doc_id]).fetchone()
        return DocumentRecord.from_json(row[0]) if row else None

    def filenames(self) -> set[str]:
        with self.tables.connection() as conn:
            rows = conn.execute("SELECT filename FROM funnel_documents WHERE collection = %s",
                                [self.collection]).fetchall()
        return {r[0] for r in rows}

    def add(self, records: list[DocumentRecord]) -> None:
        with self.tables.transaction() as conn:
            for record in records:
                conn.execute("INSERT INTO funnel_documents (collection, id, filename, record) "
                             "VALUES (%s, %s, %s, %s)",
                             [self.collection, record.id, record.filename, _json(record)])

    def update(self, doc_id: str, **changes) -> DocumentRecord | None:
        with self.tables.transaction() as conn:
            row = conn.execute("SELECT record FROM funnel_documents WHERE collection = %s AND id = %s "
                               "FOR UPDATE", [self.collection, doc_id]).fetchone()
            if row is None:
                return None
            record = dataclasses.replace(DocumentRecord.from_json(row[0]), **changes)
            conn.execute("UPDATE funnel_documents SET record = %s WHERE collection = %s AND id = %s",
                         [_json(record), self.collection, doc_id])
            return record

    def remove(self, doc_id: str) -> DocumentRecord | None:
        with self.tables.connection() as conn:
            row = conn.execute("DELETE FROM funnel_documents WHERE collection = %s AND id = %s "
                               "RETURNING record", [self.collection, doc_id]).fetchone()
        return DocumentRecord.from_json(row[0]) if row else None


def _json(record: DocumentRecord):
    from psycopg.types.json import Jsonb

    return Jsonb(record.to_json())
