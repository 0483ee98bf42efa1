"""Bringing a store up to date with sources: load -> chunk -> embed -> write, incrementally.

A document is re-embedded only when its fingerprint (content hash + chunking settings) changed;
documents that disappeared from an ingested folder are deleted. Everything happens in one store
transaction, so an error or Ctrl-C leaves the previous index exactly as it was.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from funnel.analyze.detect import with_language
from funnel.embed.base import Embedder
from funnel.errors import Cancelled, ConfigError, IngestError
from funnel.index.base import Store
from funnel.ingest import chunk_document, discover, load
from funnel.ingest.walk import FileLimits
from funnel.types import Chunk, LoadedDocument

log = logging.getLogger(__name__)

# Chunks are embedded and written in batches of this size: bounded memory, steady progress.
BATCH = 256
# A batch is embedded this many chunks at a time, and progress told (and a cancel obeyed) between them: a
# CPU model takes seconds per slice on a busy machine, half a minute per batch.
EMBED_SLICE = 64

Progress = Callable[[int, int], None]  # (documents done, documents to do)
PageProgress = Callable[[str, int, int], None]  # (document path, pages read, pages) while a PDF loads
# (chunks embedded, chunks found so far): told around every EMBED_SLICE chunks embedded. An exception
# raised from it (funnel.errors.Cancelled) stops the ingest there, and the store transaction rolls back.
ChunkProgress = Callable[[int, int], None]


@dataclass
class IngestReport:
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    removed: int = 0
    chunks: int = 0
    problems: list[IngestError] = field(default_factory=list)
    # Documents indexed with a part left unread (scanned pages OCR failed on): (path, what), a line each.
    warnings: list[tuple[str, str]] = field(default_factory=list)
    seconds: float = 0.0
    # Files in the named folders that no loader takes, by extension (walk's `unsupported`): not problems,
    # but counted so that no file leaves without a word.
    unsupported: dict[str, int] = field(default_factory=dict)

    @property
    def chunks_per_second(self) -> float:
        return self.chunks / self.seconds if self.seconds else 0.0

    def not_documents(self) -> str:
        """'not a document type 4, by extension (.mp3 ×3, .zip ×1)'; empty when every file was a document."""
        if not self.unsupported:
            return ""
        files = sum(self.unsupported.values())
        return f"not a document type {files}, by extension ({by_extension(self.unsupported)})"

    def to_json(self) -> dict:
        return {
            "added": self.added, "updated": self.updated, "unchanged": self.unchanged,
            "removed": self.removed, "chunks": self.chunks, "seconds": round(self.seconds, 3),
            "skipped": [{"path": p.path, "reason": p.reason} for p in self.problems],
            "warnings": [{"path": path, "warning": warning} for path, warning in self.warnings],
            "not_a_document_type": {"files": sum(self.unsupported.values()),
                                    "by_extension": dict(self.unsupported)},
        }


def by_extension(counts: dict[str, int], listed: int = 8) -> str:
    """'.mp3 ×3, .zip ×1, (no extension) ×1': the most common first; past `listed` types, how many more."""
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    words = [f"{suffix or '(no extension)'} ×{n}" for suffix, n in ranked[:listed]]
    if len(ranked) > listed:
        words.append(f"{len(ranked) - listed} more types")
    return ", ".join(words)


@dataclass(frozen=True)
class _Pending:
    """A document whose fingerprint changed; loaded lazily so unchanged files are never parsed."""

    doc_id: str
    fingerprint: str
    is_new: bool
    load: Callable[[], LoadedDocument]


def doc_id_for(path: Path) -> str:
    return path.as_posix()


def _prefix(path: Path) -> str:
    return doc_id_for(path).rstrip("/") + "/"


def _under(doc_id: str, prefixes: list[str]) -> bool:
    return any(doc_id.startswith(p) for p in prefixes)


def display_path(path: Path) -> str:
    """Relative to the working directory when the file is under it, else absolute."""
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive on Windows
        return str(path)
    return str(path) if relative.startswith("..") else relative


class Indexer:
    def __init__(
        self, store: Store, embedder: Embedder, max_tokens: int | None = None,
        limits: FileLimits | None = None, analyzer: str | None = None,
    ):
        self.store = store
        self.limits = limits or FileLimits()
        self.embedder = embedder
        self.analyzer = analyzer  # funnel.analyze: None/"auto": the index's own, or the default for a new one
        if max_tokens is not None and not 16 <= max_tokens <= embedder.max_tokens:
            raise ConfigError(
                f"max_tokens must be between 16 and {embedder.max_tokens} ({embedder.name}'s window), "
                f"got {max_tokens}: longer chunks would be truncated when embedded"
            )
        self.max_tokens = max_tokens or embedder.max_tokens

    def _fingerprint(self, content_hash: str) -> str:
        return f"{content_hash}:{self.embedder.name}:{self.max_tokens}"

    def ingest_paths(
        self, paths: list[Path], progress: Progress | None = None, pages: PageProgress | None = None
    ) -> IngestReport:
        """Ingest files and folders. Files gone from a folder named here leave the index. `pages` hears
        how far a long PDF has been read, page by page."""
        started = time.perf_counter()
        found = discover([Path(p) for p in paths], self.limits)
        report = IngestReport(problems=list(found.problems), unsupported=dict(found.unsupported))

        def plan(stored: dict[str, str]) -> tuple[list[_Pending], set[str]]:
            pending: list[_Pending] = []
            seen: set[str] = set()
            for source in found.files:
                doc_id = doc_id_for(source.path)
                seen.add(doc_id)
                try:
                    digest = hashlib.sha256(source.path.read_bytes()).hexdigest()
                except OSError as e:
                    report.problems.append(IngestError(display_path(source.path), e.strerror or str(e)))
                    continue
                fingerprint = self._fingerprint(digest)
                if stored.get(doc_id) == fingerprint:
                    report.unchanged += 1
                    continue
                load_it = lambda s=source, d=doc_id: load(s, d, display_path(s.path), pages)  # noqa: E731
                pending.append(_Pending(doc_id, fingerprint, doc_id not in stored, load_it))
            # Only folders the user named lose documents, and never under a folder we could not list.
            roots = [_prefix(r) for r in found.removal_roots]
            unlisted = [_prefix(r) for r in found.unlisted]
            unlisted_ids = {doc_id_for(r) for r in found.unlisted}
            removed = {
                d for d in stored
                if d not in seen and _under(d, roots) and not _under(d, unlisted) and d not in unlisted_ids
            }
            return pending, removed

        self._sync(plan, report, progress)
        report.seconds = time.perf_counter() - started
        return report

    def ingest_documents(
        self, documents: Iterable[LoadedDocument], progress: Progress | None = None,
        chunks: ChunkProgress | None = None,
    ) -> IngestReport:
        """Ingest already-loaded documents (datasets, API uploads). Nothing is removed. `chunks` hears how
        many chunks are embedded, slice by slice, and may stop the ingest."""
        started = time.perf_counter()
        report = IngestReport()

        def plan(stored: dict[str, str]) -> tuple[list[_Pending], set[str]]:
            pending = []
            for doc in documents:
                doc_id = doc.document.doc_id
                fingerprint = self._fingerprint(doc.document.content_hash)
                if stored.get(doc_id) == fingerprint:
                    report.unchanged += 1
                    continue
                pending.append(_Pending(doc_id, fingerprint, doc_id not in stored, lambda d=doc: d))
            return pending, set()

        self._sync(plan, report, progress, chunks)
        report.seconds = time.perf_counter() - started
        return report

    def _sync(self, plan: Callable[[dict[str, str]], tuple[list[_Pending], set[str]]], report: IngestReport,
              progress: Progress | None, chunk_progress: ChunkProgress | None = None) -> None:
        # What changed is decided under the write lock, against the committed index: two ingests of the
        # same tree can then never both add a document.
        with self.store.transaction(self.embedder.name, self.embedder.dim, self.analyzer) as tx:
            pending, removed = plan(self.store.document_hashes())
            if removed:
                tx.delete_documents(removed)
                report.removed += len(removed)
            # Batches are cut between documents, so a document's old chunks are deleted in the same
            # batch that adds its new ones, and never after.
            # One batch is embedded and written in a worker thread while the next is loaded and chunked
            # here (onnxruntime and Lance release the GIL): at most two batches in memory, written in
            # order. Leaving the executor waits for the worker, so a failure here rolls back after it.
            batch: list[Chunk] = []
            replaced: set[str] = set()
            writing: Future[int] | None = None
            found = embedded = 0
            stopping = threading.Event()  # set when this thread fails (a Ctrl-C): the writer stops too

            def tell(n: int) -> None:  # in the writer thread
                nonlocal embedded
                if stopping.is_set():  # rather than embed the rest of its batch for a rollback
                    raise Cancelled("the ingest is stopping")
                embedded += n
                if chunk_progress:
                    chunk_progress(embedded, found)
            with ThreadPoolExecutor(max_workers=1, thread_name_prefix="funnel-ingest") as writer:

                def flush() -> None:
                    nonlocal writing
                    if writing is not None:
                        report.chunks += writing.result()
                    writing = writer.submit(self._write, tx, batch, replaced, tell)

                def heard() -> None:  # while a document is chunked: a cancel need not wait for the end
                    chunk_progress(embedded, found)

                try:
                    chunked = self._chunked(pending, report, heard if chunk_progress else None)
                    for done, (item, chunks, drop_old) in enumerate(chunked, start=1):
                        batch.extend(chunks)
                        found += len(chunks)
                        if drop_old and not item.is_new:
                            replaced.add(item.doc_id)
                        if len(batch) >= BATCH:
                            flush()
                            batch, replaced = [], set()
                        if progress:
                            progress(done, len(pending))
                    flush()
                    report.chunks += writing.result()
                except BaseException:
                    stopping.set()  # leaving the executor waits for the writer: for one slice, not a batch
                    raise

    def _chunked(
        self, pending: list[_Pending], report: IngestReport, heard: Callable[[], None] | None = None
    ) -> Iterator[tuple[_Pending, list[Chunk], bool]]:
        """Each pending document's new chunks, and whether its old chunks go. A document that fails to
        load keeps its old chunks (a corrupt save loses nothing); one that became empty loses them
        (its text is gone on purpose, and must not stay searchable)."""
        for item in pending:
            try:
                loaded = with_language(item.load())
                tokenizer = _Heard(self.embedder, heard) if heard else self.embedder
                chunks = chunk_document(loaded, tokenizer, self.max_tokens)
            except IngestError as e:
                report.problems.append(e)
                emptied = e.reason == "empty file" and not item.is_new
                if emptied:
                    report.removed += 1
                yield item, [], emptied
                continue
            except (KeyboardInterrupt, SystemExit):
                raise
            except Exception as e:  # a parser bug on one odd file must not abort the whole ingest
                log.warning("loading %s failed", item.doc_id, exc_info=True)
                report.problems.append(IngestError(item.doc_id, f"could not be read ({type(e).__name__}: {e})"))
                yield item, [], False
                continue
            if not chunks:
                report.problems.append(IngestError(loaded.document.path, "no text to index"))
                yield item, [], False
                continue
            report.warnings += [(loaded.document.path, warning) for warning in loaded.warnings]
            if item.is_new:
                report.added += 1
            else:
                report.updated += 1
            yield item, [replace(c, content_hash=item.fingerprint) for c in chunks], True

    def _write(self, tx, chunks: list[Chunk], replaced: set[str], tell: Callable[[int], None]) -> int:
        if replaced:
            tx.delete_documents(replaced)
        if not chunks:
            return 0
        # One long document is one batch (batches are cut between documents), but it is embedded a slice
        # at a time, so its progress is heard, and a cancel obeyed, every EMBED_SLICE chunks.
        vectors = []
        for start in range(0, len(chunks), EMBED_SLICE):
            tell(0)
            part = chunks[start : start + EMBED_SLICE]
            vectors.append(np.asarray(self.embedder.embed([c.text for c in part]), dtype=np.float32))
            tell(len(part))
        tx.add(chunks, np.concatenate(vectors))
        return len(chunks)


class _Heard:
    """The embedder as the chunker's tokenizer, calling `heard` every HEARD_EVERY token counts: chunking a
    10 MB file takes a minute with the real tokenizer, and a cancel (raised from `heard`) must not wait."""

    HEARD_EVERY = 200

    def __init__(self, embedder: Embedder, heard: Callable[[], None]):
        self._embedder = embedder
        self._heard = heard
        self._counted = 0
        self.max_tokens = embedder.max_tokens

    def count_tokens(self, text: str) -> int:
        self._tick()
        return self._embedder.count_tokens(text)

    def token_offsets(self, text: str) -> list[tuple[int, int]]:
        self._tick()
        return self._embedder.token_offsets(text)

    def _tick(self) -> None:
        self._counted += 1
        if self._counted % self.HEARD_EVERY == 0:
            self._heard()

