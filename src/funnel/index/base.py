"""The Store protocol: where chunks and their vectors live, searchable two ways."""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from funnel.errors import StoreError
from funnel.types import Chunk, SectionKind


@dataclass(frozen=True)
class ScoredChunk:
    chunk: Chunk
    score: float  # the retriever's own scale: BM25 score, or cosine similarity


@dataclass(frozen=True)
class OutlineEntry:
    """One chunk without its text or vector: where it is and what it defines. A code index's outline is its
    symbol table (which file defines which class or function); triage reads it to follow a stack trace."""

    chunk_id: str
    doc_id: str
    path: str
    kind: str
    heading: str | None
    line_start: int | None
    line_end: int | None


@dataclass(frozen=True)
class Filter:
    """Restricts a search before ranking (prefilter). Empty = everything."""

    path_prefix: str | None = None
    kinds: tuple[str, ...] = ()
    doc_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class IndexInfo:
    embedder: str
    dim: int
    chunks: int
    documents: int
    version: int
    analyzer: str = "english"  # funnel.analyze: how its BM25 text is analyzed (older indexes: english)


def chunk_from_row(fields: dict) -> Chunk:
    """A stored row (one value per `Chunk` field, enums as their strings) back as a `Chunk`."""
    return Chunk(**{**fields, "section_kind": SectionKind(fields["section_kind"])})


def vectors_in_order(found: dict[str, np.ndarray], chunk_ids: list[str], where: object) -> np.ndarray:
    """`Store.vectors`' answer from what a backend found: rows in the asked order, or a StoreError."""
    missing = [c for c in chunk_ids if c not in found]
    if missing:
        raise StoreError(f"{where}: no chunk {missing[0]!r} in the index")
    return np.stack([found[c] for c in chunk_ids]) if chunk_ids else np.zeros((0, 0), dtype=np.float32)


class Transaction(Protocol):
    def delete_documents(self, doc_ids: set[str]) -> None: ...

    def add(self, chunks: list[Chunk], vectors: np.ndarray) -> None: ...


@runtime_checkable
class Store(Protocol):
    """A versioned chunk store. Writes happen in a transaction and become visible to readers only when
    it commits; an exception, Ctrl-C or a killed process leaves the last committed index as it was."""

    def info(self) -> IndexInfo | None: ...

    def document_hashes(self) -> dict[str, str]: ...

    def search_dense(self, vector: np.ndarray, n: int, filter: Filter | None = None) -> list[ScoredChunk]: ...

    def search_lexical(self, query: str, n: int, filter: Filter | None = None) -> list[ScoredChunk]: ...

    def get_chunks(self, doc_id: str) -> list[Chunk]: ...

    def outline(self, filter: Filter | None = None) -> list[OutlineEntry]: ...

    def vectors(self, chunk_ids: list[str]) -> np.ndarray:
        """The stored vectors of these chunks, one row each in the given order (StoreError if one is missing)."""
        ...

    def transaction(
        self, embedder: str, dim: int, analyzer: str | None = None
    ) -> AbstractContextManager[Transaction]: ...

    def read_calibration(self) -> dict | None:
        """The index's stored calibration (`funnel.calibrate.Calibration.to_json`), or None."""
        ...

    def write_calibration(self, data: dict) -> None:
        """Replace the stored calibration atomically (a reader sees the old one or the new one)."""
        ...
