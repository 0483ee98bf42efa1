"""The documents of one collection and where each stands, in a JSON file that survives a restart.

Every change rewrites the whole file atomically (write beside it, fsync, rename), so a crash leaves either
the old list or the new one, never half of either. A collection holds uploads a person made by hand:
hundreds of records, not millions, so rewriting the file is cheap.
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

    def to_json(self) -> dict:
        return {**dataclasses.asdict(self), "status": self.status.value}

    @classmethod
    def from_json(cls, data: dict) -> DocumentRecord:
        fields = {f.name for f in dataclasses.fields(cls)}
        known = {k: v for k, v in data.items() if k in fields}
        return cls(**{**known, "status": DocumentStatus(data["status"])})


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class DocumentRegistry:
    """Thread-safe; every method returns frozen records, so callers never share mutable state."""

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
