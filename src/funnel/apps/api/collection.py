"""A collection: an index directory, an uploads folder and a document registry, with its ingest worker.

Ingestion runs in the background on one worker thread per collection, so a collection has one writer at a
time. Readers search the last committed index version meanwhile (LanceStore commits atomically). A document
left "queued" or "ingesting" by a stopped server is queued again when its collection is next opened.

Deleting never waits for an ingest: a queued document is skipped when its turn comes, an ingesting one is
cancelled (checked between pages and between slices of embedded chunks; its transaction rolls back, so none
of it is written), and a ready one's chunks leave the index on the worker, behind the running ingest
(search hides them meanwhile).
"""

from __future__ import annotations

import logging
import secrets
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, replace
from pathlib import Path

from funnel import index
from funnel.apps.api.errors import Conflict
from funnel.apps.api.registry import DocumentRecord, DocumentRegistry, DocumentStatus, utc_now
from funnel.apps.api.uploads import Upload, check, save
from funnel.embed.base import Embedder
from funnel.errors import Cancelled, FunnelError, IngestError, NotFound
from funnel.generate.base import Generator
from funnel.ingest import SourceFile, load
from funnel.pipeline import Pipeline, SearchConfig
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
    config: SearchConfig
    max_tokens: int | None
    max_upload_bytes: int



def calibration_summary(store, reranker: Reranker | None) -> dict:
    """What `auto` does on an index with this reranker and why, from the stored calibration only (no model is
    loaded, so /health stays cheap)."""
    from funnel.calibrate import Calibration

    try:
        data = store.read_calibration()
        c = Calibration.from_json(data) if data is not None else None
    except FunnelError as e:
        return {"option": "first_stage", "reason": str(e)}
    if reranker is None:
        return {"option": "first_stage", "reason": "no reranker configured"}
    if c is None:
        return {"option": "first_stage", "reason": "not calibrated yet"}
    mismatch = c.mismatch(reranker.name, c.embedder)  # the embedder is not loaded here: only the reranker is checked
    if mismatch:
        return {"option": "first_stage", "reason": mismatch}
    return {"option": c.option, "reason": c.reason, "created": c.created, "queries": c.queries}


class _CutShort(Exception):
    """A calibration given up for a newer job or a shutdown; the previous calibration stays."""


class Collection:
    def __init__(self, name: str, root: Path, services: Services):
        self.name = name
        self.root = root
        self.uploads = root / "uploads"
        self.uploads.mkdir(parents=True, exist_ok=True)
        self.store = index.open(root / "index")
        self.registry = DocumentRegistry(root / "documents.json")
        self._services = services
        self._pipeline: Pipeline | None = None
        self._pipeline_lock = threading.Lock()
        self._names_lock = threading.Lock()  # upload names are claimed one request at a time
        self._lock = threading.Lock()  # the worker's bookkeeping
        self._pending = 0
        self._changed = False  # an ingest or delete since the last calibration
        self._closed = False
        self._queue: list[str] = []  # documents waiting for the worker, in order (for their place)
        self._running: str | None = None  # the document being ingested
        self._cancel = threading.Event()  # set to stop the running ingest
        self._worker = ThreadPoolExecutor(1, thread_name_prefix=f"funnel-ingest-{name}")
        for record in self.registry.list():
            if record.status is DocumentStatus.INGESTING:  # stopped mid-way: it starts again, in the queue
                self.registry.update(record.id, status=DocumentStatus.QUEUED, **NO_PROGRESS)
            if record.status in (DocumentStatus.QUEUED, DocumentStatus.INGESTING):
                self._queue_ingest(record.id)

    # --- reading ------------------------------------------------------------------------------------------

    @property
    def pipeline(self) -> Pipeline:
        # Built on first use: building it reads the embedder's window, which loads the model.
        with self._pipeline_lock:
            if self._pipeline is None:
                s = self._services
                self._pipeline = Pipeline(
                    self.store, s.embedder, s.reranker, s.generator, s.config, s.max_tokens
                )
            return self._pipeline

    @property
    def pending(self) -> int:
        """Jobs queued or running on this collection's worker."""
        with self._lock:
            return self._pending

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
        with self._lock:
            return {doc_id: n for n, doc_id in enumerate(self._queue, start=1)}

    @staticmethod
    def _with_place(record: DocumentRecord, places: dict[str, int]) -> DocumentRecord:
        place = places.get(record.id)
        if record.status is not DocumentStatus.QUEUED or place is None:
            return record
        return replace(record, progress=f"position {place} of {len(places)} in the queue",
                       progress_done=place, progress_total=len(places))

    def file_path(self, record: DocumentRecord) -> Path:
        path = self.uploads / record.filename
        if not path.is_file():
            raise NotFound(f"the file of document {record.id} is gone from {self.name!r}")
        return path

    def chunk(self, chunk_id: str) -> Chunk:
        doc_id, sep, _ = chunk_id.rpartition("#")
        missing = NotFound(f"no chunk {chunk_id[:80]!r} in collection {self.name!r}")
        if not sep or self.registry.get(doc_id) is None:
            raise missing
        found = next((c for c in self.store.get_chunks(doc_id) if c.chunk_id == chunk_id), None)
        if found is None:
            raise missing
        return found

    def search(self, query: str, k: int | None = None, policy: str | None = None) -> SearchResult:
        info = self.store.info()
        if info is None or info.chunks == 0:
            waiting = self.pending
            more = f"; {waiting} upload(s) still being ingested" if waiting else ": upload documents first"
            raise Conflict(f"collection {self.name!r} has no indexed documents yet{more}")
        return self._without_deleted(self.pipeline.search(query, k=k, policy=policy))

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
                    stored, digest = save(upload, self.uploads, name, taken)
                    taken.add(stored)
                    records.append(
                        DocumentRecord(secrets.token_hex(8), stored, kind, upload.size, digest, utc_now())
                    )
            self.registry.add(records)
        except BaseException:
            for record in records:
                (self.uploads / record.filename).unlink(missing_ok=True)
            raise
        for record in records:
            self._queue_ingest(record.id)
        return records

    def delete_document(self, doc_id: str) -> None:
        """Forget the document now, without waiting for the worker: a queued one is never ingested, an
        ingesting one is cancelled (nothing of it is written), a ready one's chunks leave the index on the
        worker (waited for up to DROP_WAIT_S)."""
        with self._lock:
            record = self.registry.remove(doc_id)
            if record is None:
                raise NotFound(f"no document {doc_id[:80]!r} in collection {self.name!r}")
            queued = doc_id in self._queue
            if queued:
                self._queue.remove(doc_id)  # its job finds no record and does nothing
            running = self._running == doc_id
            if running:
                self._cancel.set()  # the ingest stops at its next page or batch and drops what it wrote
        (self.uploads / record.filename).unlink(missing_ok=True)
        if queued or running:
            return
        try:
            self._submit(self._drop_chunks, doc_id).result(timeout=DROP_WAIT_S)
        except FutureTimeout:
            pass  # behind a running job: the chunks go when it ends; search hides them until then

    def check_deletable(self) -> None:
        """Raises Conflict when the collection may not be deleted now (a watched folder's, while watched)."""

    def close(self, wait: bool = True) -> None:
        """Stop taking jobs and cancel the running ingest. The queued and cancelled documents stay
        "queued" in the registry and resume on the next start (unless the collection is being deleted).
        `wait` waits for the worker to stop, which takes at most one page or embedded slice."""
        with self._lock:
            self._closed = True
            self._queue.clear()
            self._cancel.set()
        self._worker.shutdown(wait=wait, cancel_futures=True)

    def _queue_ingest(self, doc_id: str) -> None:
        with self._lock:
            self._queue.append(doc_id)
        try:
            self._submit(self._ingest, doc_id)
        except BaseException:
            with self._lock:
                if doc_id in self._queue:
                    self._queue.remove(doc_id)
            raise

    def _submit(self, job, doc_id: str) -> Future:
        with self._lock:
            if self._closed:
                raise Conflict(f"collection {self.name!r} is being closed or deleted")
            self._pending += 1
            future = self._worker.submit(self._run, job, doc_id)
            return future

    def _run(self, job, doc_id: str) -> None:
        try:
            job(doc_id)
        finally:
            with self._lock:
                self._pending -= 1
                if self._pending == 0 and self._changed and not self._closed:
                    self._changed = False
                    # A task of its own on the worker: the job's future (a DELETE waits on it) is done first.
                    self._worker.submit(self._calibrate)

    def _calibrate(self) -> None:
        """After the last queued job: measure the reranker on the collection as it now is (`auto` uses it).
        A failure keeps the previous calibration and is logged; searches go on meanwhile."""
        if self._services.reranker is None or self.store.info() is None:
            return

        def keep_going(done: int, total: int) -> None:
            # A calibration takes tens of seconds on a busy CPU; a job behind it (a DELETE waits for its
            # own) or a shutdown must not wait that long for a measurement the change makes stale anyway.
            if self._closed or self.pending:
                raise _CutShort

        try:
            result = self.pipeline.calibrate(progress=keep_going)
            log.info("collection %s calibrated: %s (%s)", self.name, result.option, result.reason)
        except _CutShort:
            with self._lock:
                self._changed = True  # measured again once the queue is empty
            log.info("calibrating collection %s was cut short by a newer job or a shutdown", self.name)
        except Exception:
            log.warning("calibrating collection %s failed; the previous calibration is kept", self.name,
                        exc_info=True)

    def calibration(self) -> dict:
        """What `auto` does on this collection and why, for /health."""
        return calibration_summary(self.store, self._services.reranker)

    def _ingest(self, doc_id: str) -> None:
        # Running and cancellable before its record says "ingesting": a delete from here on cancels it.
        with self._lock:
            if doc_id not in self._queue or self._closed:
                return  # deleted before its turn, or the server is stopping (it stays queued)
            self._queue.remove(doc_id)
            self._running = doc_id
            self._cancel = cancel = threading.Event()
        try:
            self._ingest_running(doc_id, cancel)
        finally:
            # A delete that saw this document running left its chunks to this job: it may have finished
            # writing before it noticed. A delete from here on sees it ready and drops them itself.
            with self._lock:
                self._running = None
                deleted = cancel.is_set() and self.registry.get(doc_id) is None
            if deleted:
                self._drop_chunks(doc_id)

    def _ingest_running(self, doc_id: str, cancel: threading.Event) -> None:
        record = self.registry.update(doc_id, status=DocumentStatus.INGESTING, error=None)
        if record is None:
            return  # deleted just now

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
            path = self.uploads / record.filename
            loaded = load(SourceFile(path=path, kind=record.kind), doc_id, record.filename, pages)
            report = self.pipeline.indexer.ingest_documents([loaded], chunks=embedded)
            if report.problems:
                raise report.problems[0]
            chunks = len(self.store.get_chunks(doc_id))
        except Cancelled:
            # Nothing was written (the transaction rolled back). Deleted: its record and file are gone
            # already. The server stopping: it is queued again for the next start.
            self.registry.update(doc_id, status=DocumentStatus.QUEUED, **NO_PROGRESS)
            return
        except IngestError as e:
            self.registry.update(doc_id, status=DocumentStatus.FAILED, error=one_line(e.reason), chunks=0,
                                 **NO_PROGRESS)
        except FunnelError as e:
            self.registry.update(doc_id, status=DocumentStatus.FAILED, error=one_line(str(e)), chunks=0,
                                 **NO_PROGRESS)
        except Exception as e:  # a loader bug on one odd file fails that document, not the worker
            log.warning("ingesting %s into %s failed", record.filename, self.name, exc_info=True)
            error = one_line(f"could not be ingested ({type(e).__name__}: {e})")
            self.registry.update(doc_id, status=DocumentStatus.FAILED, error=error, chunks=0, **NO_PROGRESS)
        else:
            self.registry.update(doc_id, status=DocumentStatus.READY, chunks=chunks, **NO_PROGRESS)
            self._changed = True

    def _drop_chunks(self, doc_id: str) -> None:
        info = self.store.info()
        if info is None or not self.store.get_chunks(doc_id):
            return
        # The index's own embedder and dim: deleting must not need the model loaded.
        with self.store.transaction(info.embedder, info.dim) as tx:
            tx.delete_documents({doc_id})
        self._changed = True
