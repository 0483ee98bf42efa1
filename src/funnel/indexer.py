"""Bringing a store up to date with sources: load -> chunk -> embed -> write, incrementally.

A document is re-embedded only when its fingerprint (content hash + chunking settings) changed;
documents that disappeared from an ingested folder are deleted. Everything happens in one store
transaction, so an error or Ctrl-C leaves the previous index exactly as it was.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from funnel.embed.base import Embedder
from funnel.errors import IngestError
from funnel.index.base import Store
from funnel.ingest import chunk_document, discover, load
from funnel.types import Chunk, LoadedDocument

# Chunks are embedded and written in batches of this size: bounded memory, steady progress.
BATCH = 256

Progress = Callable[[int, int], None]  # (documents done, documents to do)


@dataclass
class IngestReport:
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    removed: int = 0
    chunks: int = 0
    problems: list[IngestError] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def chunks_per_second(self) -> float:
        return self.chunks / self.seconds if self.seconds else 0.0


@dataclass(frozen=True)
class _Pending:
    """A document whose fingerprint changed; loaded lazily so unchanged files are never parsed."""

    doc_id: str
    fingerprint: str
    is_new: bool
    load: Callable[[], LoadedDocument]


def doc_id_for(path: Path) -> str:
    return path.as_posix()


def display_path(path: Path) -> str:
    """Relative to the working directory when the file is under it, else absolute."""
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive on Windows
        return str(path)
    return str(path) if relative.startswith("..") else relative


class Indexer:
    def __init__(self, store: Store, embedder: Embedder, max_tokens: int | None = None):
        self.store = store
        self.embedder = embedder
        self.max_tokens = max_tokens or embedder.max_tokens

    def _fingerprint(self, content_hash: str) -> str:
        return f"{content_hash}:{self.embedder.name}:{self.max_tokens}"

    def ingest_paths(self, paths: list[Path], progress: Progress | None = None) -> IngestReport:
        """Ingest files and folders. Removed files under an ingested folder leave the index."""
        started = time.perf_counter()
        found = discover([Path(p) for p in paths])
        report = IngestReport(problems=list(found.problems))
        stored = self.store.document_hashes()
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
            pending.append(
                _Pending(
                    doc_id,
                    fingerprint,
                    doc_id not in stored,
                    lambda s=source, d=doc_id: load(s, d, display_path(s.path)),
                )
            )
        roots = [doc_id_for(r).rstrip("/") + "/" for r in found.roots]
        removed = {d for d in stored if d not in seen and any(d.startswith(r) for r in roots)}
        self._sync(pending, removed, report, progress)
        report.seconds = time.perf_counter() - started
        return report

    def ingest_documents(
        self, documents: Iterable[LoadedDocument], total: int | None = None, progress: Progress | None = None
    ) -> IngestReport:
        """Ingest already-loaded documents (datasets, API uploads). Nothing is removed."""
        started = time.perf_counter()
        report = IngestReport()
        stored = self.store.document_hashes()
        pending = []
        for doc in documents:
            fingerprint = self._fingerprint(doc.document.content_hash)
            if stored.get(doc.document.doc_id) == fingerprint:
                report.unchanged += 1
                continue
            pending.append(
                _Pending(doc.document.doc_id, fingerprint, doc.document.doc_id not in stored, lambda d=doc: d)
            )
        self._sync(pending, set(), report, progress)
        report.seconds = time.perf_counter() - started
        return report

    def _sync(
        self, pending: list[_Pending], removed: set[str], report: IngestReport, progress: Progress | None
    ) -> None:
        if not pending and not removed and self.store.info() is not None:
            return
        with self.store.transaction(self.embedder.name, self.embedder.dim) as tx:
            if removed:
                tx.delete_documents(removed)
                report.removed = len(removed)
            # Batches are cut between documents, so a document's old chunks are deleted in the same
            # batch that adds its new ones, and never after.
            batch: list[Chunk] = []
            replaced: set[str] = set()
            for done, (item, chunks) in enumerate(self._chunked(pending, report), start=1):
                batch.extend(chunks)
                if chunks and not item.is_new:
                    replaced.add(item.doc_id)
                if len(batch) >= BATCH:
                    report.chunks += self._write(tx, batch, replaced)
                    batch, replaced = [], set()
                if progress:
                    progress(done, len(pending))
            report.chunks += self._write(tx, batch, replaced)

    def _chunked(
        self, pending: list[_Pending], report: IngestReport
    ) -> Iterator[tuple[_Pending, list[Chunk]]]:
        """Each pending document's new chunks; a document that fails to load keeps its old chunks."""
        for item in pending:
            try:
                loaded = item.load()
            except IngestError as e:
                report.problems.append(e)
                yield item, []
                continue
            chunks = chunk_document(loaded, self.embedder, self.max_tokens)
            if not chunks:
                report.problems.append(IngestError(loaded.document.path, "no text to index"))
                yield item, []
                continue
            if item.is_new:
                report.added += 1
            else:
                report.updated += 1
            yield item, [replace(c, content_hash=item.fingerprint) for c in chunks]

    def _write(self, tx, chunks: list[Chunk], replaced: set[str]) -> int:
        if replaced:
            tx.delete_documents(replaced)
        if not chunks:
            return 0
        vectors = self.embedder.embed([c.text for c in chunks])
        tx.add(chunks, np.asarray(vectors, dtype=np.float32))
        return len(chunks)
