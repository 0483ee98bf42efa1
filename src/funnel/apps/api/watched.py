"""Collections that mirror a folder (`funnel serve --watch DIR`).

The folder's collection is named after it (or `--watch-collection NAME`), listed and searched like any
other. Its documents are the folder's files, named by their absolute paths, and only its watcher writes
them: each sync is the ingest `funnel ingest DIR` runs (one transaction, unchanged files skipped), run on the
collection's own worker, so a collection still has one writer at a time. Uploads, deletes of documents and
deleting the collection while it is watched are refused with 409: uploads and a folder never mix in one
index. Restarted without --watch, the collection stays searchable as last synced (and may be deleted).

`watch_specs` checks the folders `--watch` names; `WatchedFolders` (`watched_folders.py`) runs their watcher
threads. Each collection's `watch` status (in the collections list and /health) says when it last synced,
what changed and the last error.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path

from funnel.apps.api.collection import SYNC, Collection, Services, one_line
from funnel.apps.api.uploads import MEDIA_TYPES
from funnel.apps.state.documents import DocumentRecord, DocumentStatus, utc_now
from funnel.apps.state.files import Upload
from funnel.apps.state.home import Place, check_name
from funnel.apps.state.jobs import Job, JobState
from funnel.apps.state.jobs_workers import Lease, Permanent, Queue
from funnel.apps.watch import WatchStatus, describe, folder_name
from funnel.errors import Cancelled, ConfigError, Conflict, IngestError, NotFound
from funnel.ingest.walk import classify
from funnel.types import Chunk, SearchResult

log = logging.getLogger("funnel.api.watch")


class WatchedCollection(Collection):
    def __init__(self, name: str, place: Place, services: Services, queue: Queue, folder: Path):
        super().__init__(name, place, services, queue)
        self.folder = folder
        self.status = WatchStatus(str(folder))
        self._stop: threading.Event | None = None

    # --- what the folder holds, from the index ------------------------------------------------------------

    def _hashes(self) -> dict[str, str]:
        return self.store.document_hashes() if self.store.info() is not None else {}

    def summary(self) -> dict:
        return {**super().summary(), "documents": len(self._hashes()), "watch": self.status.to_json()}

    def documents(self) -> list[DocumentRecord]:
        return [self._record(doc_id, fp) for doc_id, fp in sorted(self._hashes().items())]

    def document(self, doc_id: str) -> DocumentRecord:
        fingerprint = self._hashes().get(doc_id)
        if fingerprint is None:
            raise NotFound(f"no document {doc_id[:200]!r} in collection {self.name!r}")
        return self._record(doc_id, fingerprint)

    def _record(self, doc_id: str, fingerprint: str) -> DocumentRecord:
        path = Path(doc_id)
        try:
            size = path.stat().st_size
        except OSError:
            size = 0
        kind = (classify(path, b"") or ("text", None))[0]
        return DocumentRecord(
            id=doc_id, filename=path.relative_to(self.folder).as_posix() if path.is_relative_to(self.folder)
            else path.name, kind=kind if kind in MEDIA_TYPES else "text", bytes=size,
            sha256=fingerprint.partition(":")[0], uploaded_at=self.status.last_sync or "",
            status=DocumentStatus.READY,
        )

    def file_content(self, record: DocumentRecord) -> Path:
        path = Path(record.id)
        if not path.is_file():
            raise NotFound(f"the file {record.filename} is gone from {self.folder}")
        return path

    def chunk(self, chunk_id: str) -> Chunk:
        doc_id, _, _ = chunk_id.rpartition("#")
        found = next((c for c in self.store.get_chunks(doc_id) if c.chunk_id == chunk_id), None)
        if found is None:
            raise NotFound(f"no chunk {chunk_id[:200]!r} in collection {self.name!r}")
        return found

    def _without_deleted(self, result: SearchResult) -> SearchResult:
        return result  # nothing waits to leave this index: a sync removes documents in its own transaction

    # --- written by the watcher only ----------------------------------------------------------------------

    def add(self, uploads: list[Upload]) -> list[DocumentRecord]:
        raise Conflict(self._refusal("uploading"))

    def delete_document(self, doc_id: str) -> None:
        raise Conflict(self._refusal("deleting a document"))

    def check_deletable(self) -> None:
        if self.status.watching:
            raise Conflict(self._refusal("deleting it") + " (restart the server without --watch first)")

    def _refusal(self, what: str) -> str:
        return (f"collection {self.name!r} mirrors the folder {self.folder}: {what} is refused; change the "
                "files in the folder, or use another collection")

    def sync(self, stop: threading.Event) -> None:
        """One incremental ingest of the folder, as a job in the collection's lane (its one writer), waited
        for; its failure is raised here (the watcher says it and tries again at the next change)."""
        self._stop = stop
        key = f"{self.name}:sync"
        job_id = self._queue.put(SYNC, self.name, key)
        while (job := self._queue.wait(job_id, 0.2)) is None:
            if stop.is_set():  # the server is stopping: the sync is cancelled (and rolls back) wherever it is
                self._queue.jobs.cancel(key)
                raise Cancelled(f"the sync of {self.folder}")
        if job.state is JobState.FAILED:
            raise IngestError(str(self.folder), job.error or "the sync failed")

    def run(self, job: Job, lease: Lease) -> None:
        if job.kind != SYNC:
            return super().run(job, lease)
        try:
            self._sync_now(lease)
        except Cancelled:
            return
        except Exception as e:
            self.calibrate_after_changes()  # what it committed before it failed is measured too
            raise Permanent(one_line(str(e))) from e
        self.calibrate_after_changes()

    def _sync_now(self, lease: Lease) -> bool:
        def cancelled(*_) -> None:
            if lease.cancelled.is_set() or (self._stop is not None and self._stop.is_set()):
                raise Cancelled(f"the sync of {self.folder}")

        report = self.pipeline.indexer.ingest_paths([self.folder], progress=cancelled, pages=cancelled)
        self.status.syncs += 1
        self.status.last_sync, self.status.last_error = utc_now(), None
        if not (report.added or report.updated or report.removed):
            return False
        self.status.last_change = describe(report)
        log.info("collection %s synced: %s", self.name, describe(report))
        return True

    def failed(self, error: Exception) -> None:
        self.status.last_error = one_line(str(error))
        log.warning("syncing collection %s with %s failed: %s", self.name, self.folder, error)


@dataclass(frozen=True)
class WatchSpec:
    folder: Path
    name: str


def watch_specs(folders: list[Path], name: str | None) -> list[WatchSpec]:
    """The folders to watch and their collections' names, checked: ConfigError before the server starts."""
    if name is not None and len(folders) != 1:
        raise ConfigError("--watch-collection names the collection of one --watch folder; give one folder")
    specs = []
    for folder in folders:
        resolved = folder.expanduser().resolve()
        if not resolved.is_dir():
            raise ConfigError(f"--watch {folder}: not a folder")
        specs.append(WatchSpec(resolved, check_name(name or folder_name(resolved))))
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ConfigError(f"two watched folders would share a collection name ({', '.join(names)}); "
                          "watch them one server at a time with --watch-collection")
    return specs
