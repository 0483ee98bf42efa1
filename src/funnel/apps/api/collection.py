"""A collection: an index, a document registry and the original files (a `Place` in the service's `Home`),
with its jobs on the service's queue.

Ingesting, dropping a deleted document's chunks and calibrating are jobs in the collection's lane
(`funnel.apps.state.jobs`): one runs at a time per collection, in any process, so a collection has one
writer. Readers search the last committed index version meanwhile (both stores commit atomically). A
document left "queued" or "ingesting" with no job behind it (an embedded server that stopped) is queued
again when its collection is next opened.

Deleting never waits for an ingest: a queued document's job is cancelled, an ingesting one sees the cancel
between pages and between slices of embedded chunks (its transaction rolls back, so none of it is written),
and a ready one's chunks leave the index in a job of their own, behind the running one (search hides them
meanwhile).
"""

from __future__ import annotations

import logging
import secrets
import threading
from dataclasses import dataclass, replace
from pathlib import Path

from funnel.apps.api.calibration import for_the_service, needs_calibration, page_status
from funnel.apps.api.scope import document_scope
from funnel.apps.api.uploads import check
from funnel.apps.state.documents import DocumentRecord, DocumentStatus, utc_now
from funnel.apps.state.files import Upload
from funnel.apps.state.home import Place
from funnel.apps.state.jobs import Job
from funnel.apps.state.jobs_workers import Lease, Permanent, Queue
from funnel.apps.state.replica import ReplicaReads, on_primary
from funnel.embed.base import Embedder
from funnel.errors import Cancelled, Conflict, FunnelError, IngestError, NotFound
from funnel.generate.base import Generator
from funnel.index.base import Filter
from funnel.ingest import SourceFile, load
from funnel.engine_config import EngineConfig
from funnel.pipeline import Pipeline
from funnel.rerank.base import Reranker
from funnel.types import Chunk, SearchResult

log = logging.getLogger("funnel.api")

# A failed ingest's error is shown in a list: one line, bounded.
MAX_ERROR_CHARS = 300


def one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"


# A long PDF's upload status is rewritten every this many pages (the registry is a file written whole);
# chunk progress once per embedded slice (funnel.indexer.EMBED_SLICE chunks).
PROGRESS_EVERY_PAGES = 10
# Deleting a ready document waits this long for its chunks to leave the index; behind a running ingest
# (or calibration) it returns sooner and search hides the chunks until they are gone.
DROP_WAIT_S = 1.0
NO_PROGRESS = {"progress": None, "progress_done": None, "progress_total": None}


@dataclass(frozen=True)
class Services:
    """What every collection's pipeline shares: one embedder, reranker and generator for the server."""

    embedder: Embedder
    reranker: Reranker | None
    generator: Generator
    config: EngineConfig  # the collections' pipelines are built from it, limits and analyzer included
    max_upload_bytes: int



class _CutShort(Exception):
    """A calibration given up for a newer job or a shutdown; the previous calibration stays."""


INGEST, DROP, CALIBRATE, SYNC = "ingest", "drop", "calibrate", "sync"
CHANGES = (INGEST, DROP, SYNC)


class Collection:
    def __init__(self, name: str, place: Place, services: Services, queue: Queue):
        self.name = name
        self.store, self.registry, self.files = place.store, place.registry, place.files
        self._replica = ReplicaReads(place.reader) if place.reader is not None else None
        self._services = services
        self._queue = queue
        self._pipelines: dict[int, Pipeline] = {}  # by id of the store: the primary's, the replica's
        self._pipeline_lock = threading.Lock()
        self._names_lock = threading.Lock()  # upload names are claimed one request at a time
        self._closed = False
        self._calibration_error: str | None = None  # why this process's last calibration failed
        self._recover()

    def _recover(self) -> None:
        """Documents left queued or ingesting with no job behind them are queued again (in upload order)."""
        for record in self.registry.list():
            if record.status not in (DocumentStatus.QUEUED, DocumentStatus.INGESTING):
                continue
            if self._queue.jobs.active(self._key(record.id)):
                continue  # another process's job holds it (a shared home)
            if record.status is DocumentStatus.INGESTING:  # stopped mid-way: it starts again, in the queue
                self.registry.update(record.id, status=DocumentStatus.QUEUED, **NO_PROGRESS)
            self._queue.put(INGEST, self.name, self._key(record.id), {"doc": record.id})

    def _key(self, doc_id: str) -> str:
        return f"{self.name}/{doc_id}"

    # --- reading ------------------------------------------------------------------------------------------

    @property
    def pipeline(self) -> Pipeline:
        """The pipeline on the collection's index (on the primary, where there is a replica)."""
        return self._pipeline_on(self.store)

    def _pipeline_on(self, store) -> Pipeline:
        # Built on first use: building it reads the embedder's window, which loads the model.
        with self._pipeline_lock:
            if id(store) not in self._pipelines:
                s = self._services
                self._pipelines[id(store)] = Pipeline.build(
                    s.config, store=store, embedder=s.embedder, reranker=s.reranker, generator=s.generator
                )
            return self._pipelines[id(store)]

    @property
    def pending(self) -> int:
        """Changes (ingests, drops, syncs) queued or running on this collection, in any process; a
        calibration is not one."""
        return self._queue.jobs.busy(self.name, CHANGES)

    def summary(self) -> dict:
        info = self.store.info()
        return {
            "name": self.name,
            "documents": len(self.registry.list()),
            "chunks": info.chunks if info else 0,
            "pending": self.pending,
        }

    def document(self, doc_id: str) -> DocumentRecord:
        record = self.registry.get(doc_id)
        if record is None:
            raise NotFound(f"no document {doc_id[:80]!r} in collection {self.name!r}")
        return self._with_place(record, self.queue_places())

    def documents(self) -> list[DocumentRecord]:
        """Every document; a queued one's progress says its place in the queue."""
        places = self.queue_places()
        return [self._with_place(r, places) for r in self.registry.list()]

    def queue_places(self) -> dict[str, int]:
        """Each queued document's place in the queue: 1 is next."""
        keys = self._queue.jobs.waiting(self.name, INGEST)
        return {key.partition("/")[2]: n for n, key in enumerate(keys, start=1)}

    @staticmethod
    def _with_place(record: DocumentRecord, places: dict[str, int]) -> DocumentRecord:
        place = places.get(record.id)
        if record.status is not DocumentStatus.QUEUED or place is None:
            return record
        return replace(record, progress=f"position {place} of {len(places)} in the queue",
                       progress_done=place, progress_total=len(places))

    def file_content(self, record: DocumentRecord) -> Path | bytes:
        try:
            return self.files.content(record.filename)
        except NotFound:
            raise NotFound(f"the file of document {record.id} is gone from {self.name!r}") from None

    def chunk(self, chunk_id: str) -> Chunk:
        doc_id, sep, _ = chunk_id.rpartition("#")
        missing = NotFound(f"no chunk {chunk_id[:80]!r} in collection {self.name!r}")
        if not sep or self.registry.get(doc_id) is None:
            raise missing
        found = next((c for c in self.store.get_chunks(doc_id) if c.chunk_id == chunk_id), None)
        if found is None:
            raise missing
        return found

    def scope(self, documents: list[str] | None) -> Filter | None:
        """A request's `documents` (ids or file names, as listed) as a filter (`funnel.apps.api.scope`)."""
        return document_scope(self.documents(), documents, self.name) if documents else None

    def search(
        self, query: str, k: int | None = None, policy: str | None = None, filter: Filter | None = None
    ) -> SearchResult:
        info = self.store.info()
        if info is None or info.chunks == 0:
            waiting = self.pending
            more = f"; {waiting} upload(s) still being ingested" if waiting else ": upload documents first"
            raise Conflict(f"collection {self.name!r} has no indexed documents yet{more}")
        if self._replica is None:
            return self._for_the_service(self.pipeline.search(query, k=k, policy=policy, filter=filter))
        result, why = self._replica.search(
            lambda store: self._pipeline_on(store).search(query, k=k, policy=policy, filter=filter), info.version)
        if result is None:
            result = on_primary(self.pipeline.search(query, k=k, policy=policy, filter=filter), why)
        return self._for_the_service(result)

    def _for_the_service(self, result: SearchResult) -> SearchResult:
        result = self._without_deleted(result)
        reason = for_the_service(result.rerank_reason, self.calibrating)
        return result if reason == result.rerank_reason else replace(result, rerank_reason=reason)

    def _without_deleted(self, result: SearchResult) -> SearchResult:
        """The result without documents deleted whose chunks still wait to leave the index."""
        known = {r.id for r in self.registry.list()}
        if {d.doc_id for d in result.documents} | {h.chunk.doc_id for h in result.hits} <= known:
            return result
        documents = [d for d in result.documents if d.doc_id in known]
        return replace(
            result,
            documents=tuple(replace(d, rank=rank) for rank, d in enumerate(documents, start=1)),
            hits=tuple(h for h in result.hits if h.chunk.doc_id in known),
        )

    # --- writing ------------------------------------------------------------------------------------------

    def add(self, uploads: list[Upload]) -> list[DocumentRecord]:
        """Check every upload, then save them all and queue their ingestion (in upload order)."""
        max_bytes = self._services.max_upload_bytes
        checked = [(upload, *check(upload, max_bytes)) for upload in uploads]
        records: list[DocumentRecord] = []
        try:
            with self._names_lock:
                taken = self.registry.filenames()
                for upload, name, kind in checked:
                    if self._closed:  # deleted while this request was being read
                        raise Conflict(f"collection {self.name!r} was deleted")
                    stored, digest = self.files.save(upload, name, taken)
                    taken.add(stored)
                    records.append(
                        DocumentRecord(secrets.token_hex(8), stored, kind, upload.size, digest, utc_now())
                    )
            self.registry.add(records)
        except BaseException:
            for record in records:
                self.files.delete(record.filename)
            raise
        for record in records:
            self._queue.put(INGEST, self.name, self._key(record.id), {"doc": record.id})
        return records

    def delete_document(self, doc_id: str) -> None:
        """Forget the document now, without waiting for its job: a queued one is never ingested, an
        ingesting one is cancelled (nothing of it is written), a ready one's chunks leave the index in a job
        of their own (waited for up to DROP_WAIT_S)."""
        record = self.registry.remove(doc_id)
        if record is None:
            raise NotFound(f"no document {doc_id[:80]!r} in collection {self.name!r}")
        had_job = self._queue.cancel(self._key(doc_id))  # its running ingest drops what it wrote
        self.files.delete(record.filename)
        if not had_job:
            job = self._queue.put(DROP, self.name, self._key(doc_id) + ":drop", {"doc": doc_id})
            self._queue.wait(job, DROP_WAIT_S)  # behind a running job: search hides the chunks until then

    def check_deletable(self) -> None:
        """Raises Conflict when the collection may not be deleted now (a watched folder's, while watched)."""

    def close(self) -> None:
        """No more uploads through this object (its jobs stay queued, here or in the database)."""
        self._closed = True

    # --- jobs (run by the service's workers) --------------------------------------------------------------

    def run(self, job: Job, lease: Lease) -> None:
        doc_id = job.payload.get("doc", "") if isinstance(job.payload, dict) else None
        if not isinstance(doc_id, str) or job.kind not in (INGEST, DROP, CALIBRATE):
            raise Permanent(f"a {job.kind} job whose payload cannot be read: {str(job.payload)[:200]}")
        {INGEST: self._ingest, DROP: self._drop_chunks, CALIBRATE: self._calibrate}[job.kind](doc_id, lease)
        if job.kind != CALIBRATE:
            self.calibrate_after_changes()

    def calibrate_after_changes(self) -> None:
        """After the lane's last change, measure the reranker on the index as it now is when no calibration
        measured it: whatever that last job did (a batch whose last file failed changed the index too)."""
        if self.pending <= 1 and needs_calibration(self.store):
            self._queue.put(CALIBRATE, self.name, f"{self.name}:calibrate", unique=True)

    @property
    def calibrating(self) -> bool:
        """A calibration is queued or running on this collection, in any process."""
        return self._queue.jobs.busy(self.name, (CALIBRATE,)) > 0

    def calibrate(self) -> dict:
        """Queue a calibration (the page's Calibrate button) unless one is queued or running; its status."""
        info = self.store.info()
        if info is None or info.chunks == 0:
            raise Conflict(f"collection {self.name!r} has nothing to calibrate yet: upload documents first")
        if not self.calibrating:
            self._calibration_error = None
            self._queue.put(CALIBRATE, self.name, f"{self.name}:calibrate", unique=True)
        return self.calibration_status()

    def calibration_status(self) -> dict:
        """The calibration as the page shows it (`page_status`)."""
        return page_status(self.store, self._services.reranker, self.calibrating, self.pending > 0,
                           self._calibration_error)

    def _calibrate(self, _: str, lease: Lease) -> bool:
        """Measure the reranker on the collection as it now is (`auto` uses it). A failure keeps the previous
        calibration and is logged; searches go on meanwhile."""
        if self.store.info() is None:  # with no reranker it still chooses the first stage
            return False

        def keep_going(done: int, total: int) -> None:
            # A calibration takes tens of seconds on a busy CPU; a job behind it or a shutdown must not wait
            # that long for a measurement the change makes stale anyway (the job behind calibrates again).
            if lease.cancelled.is_set() or self.pending:
                raise _CutShort

        try:
            result = self.pipeline.calibrate(progress=keep_going)
            self._calibration_error = None
            log.info("collection %s calibrated: %s (%s)", self.name, result.option, result.reason)
        except _CutShort:
            log.info("calibrating collection %s was cut short by a newer job or a shutdown", self.name)
        except Exception as e:
            self._calibration_error = one_line(str(e) or type(e).__name__)
            log.warning("calibrating collection %s failed; the previous calibration is kept", self.name,
                        exc_info=True)
        return False

    def _ingest(self, doc_id: str, lease: Lease) -> bool:
        if self.registry.get(doc_id) is None:
            return False  # deleted before its turn
        try:
            return self._ingest_running(doc_id, lease.cancelled)
        finally:
            # A delete while this ran left its chunks to this job: it may have finished writing before the
            # cancel reached it.
            if self.registry.get(doc_id) is None:
                self._drop_chunks(doc_id, lease)

    def _ingest_running(self, doc_id: str, cancel: threading.Event) -> bool:
        record = self.registry.update(doc_id, status=DocumentStatus.INGESTING, error=None)
        if record is None:
            return False  # deleted just now

        def pages(_: str, read: int, total: int) -> None:  # a long PDF's status says how far it is
            if cancel.is_set():
                raise Cancelled(doc_id)
            if read % PROGRESS_EVERY_PAGES == 0 and read < total:
                self.registry.update(doc_id, progress=f"page {read} of {total}", progress_done=read,
                                     progress_total=total)

        said: list[tuple[int, int]] = []

        def embedded(done: int, total: int) -> None:  # told around each embedded slice, and while chunking
            if cancel.is_set():
                raise Cancelled(doc_id)
            if total == 0 or said[-1:] == [(done, total)]:  # still being chunked, or nothing new to say
                return
            said.append((done, total))
            self.registry.update(doc_id, progress=f"chunks {done} of {total}", progress_done=done,
                                 progress_total=total)

        try:
            with self.files.local(record.filename) as path:
                loaded = load(SourceFile(path=path, kind=record.kind), doc_id, record.filename, pages)
                report = self.pipeline.indexer.ingest_documents([loaded], chunks=embedded)
            if report.problems:
                raise report.problems[0]
            chunks = len(self.store.get_chunks(doc_id))
        except Cancelled:
            # Nothing was written (the transaction rolled back). Deleted: its record and file are gone
            # already. The server stopping: it is queued again, and its job goes back to the queue.
            self.registry.update(doc_id, status=DocumentStatus.QUEUED, **NO_PROGRESS)
            return False
        except (IngestError, FunnelError) as e:
            reason = e.reason if isinstance(e, IngestError) else str(e)
            self.registry.update(doc_id, status=DocumentStatus.FAILED, error=one_line(reason), chunks=0,
                                 **NO_PROGRESS)
            return False
        except Exception as e:  # a loader bug on one odd file fails that document, not the worker
            log.warning("ingesting %s into %s failed", record.filename, self.name, exc_info=True)
            error = one_line(f"could not be ingested ({type(e).__name__}: {e})")
            self.registry.update(doc_id, status=DocumentStatus.FAILED, error=error, chunks=0, **NO_PROGRESS)
            return False
        self.registry.update(doc_id, status=DocumentStatus.READY, chunks=chunks, warnings=loaded.warnings,
                             **NO_PROGRESS)
        return True

    def _drop_chunks(self, doc_id: str, lease: Lease | None = None) -> bool:
        info = self.store.info()
        if info is None or not self.store.get_chunks(doc_id):
            return False
        # The index's own embedder and dim: deleting must not need the model loaded.
        with self.store.transaction(info.embedder, info.dim) as tx:
            tx.delete_documents({doc_id})
        return True
