"""LanceStore's table: its columns, `Chunk` <-> Arrow rows, filters as Lance SQL, and the writes of one
transaction. The store itself (`lance.py`) keeps the state file, the lock and the commit protocol."""

from __future__ import annotations

from dataclasses import asdict

import numpy as np
import pyarrow as pa

from funnel.errors import StoreError
from funnel.index.base import Filter, chunk_from_row
from funnel.analyze import Analyzer, has_cjk
from funnel.types import Chunk

CHUNK_FIELDS = [
    ("chunk_id", pa.string()),
    ("doc_id", pa.string()),
    ("ordinal", pa.int32()),
    ("text", pa.string()),
    ("path", pa.string()),
    ("title", pa.string()),
    ("kind", pa.string()),
    ("n_tokens", pa.int32()),
    ("language", pa.string()),
    ("heading", pa.string()),
    ("page", pa.int32()),
    ("line_start", pa.int32()),
    ("line_end", pa.int32()),
    ("section_kind", pa.string()),
    ("content_hash", pa.string()),
]
READ_COLUMNS = [name for name, _ in CHUNK_FIELDS]

def schema(dim: int) -> pa.Schema:
    return pa.schema(CHUNK_FIELDS + [("lex", pa.string()), ("vector", pa.list_(pa.float32(), dim))])


def sql_str(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def where_clause(filter: Filter | None) -> str | None:
    if filter is None:
        return None
    clauses = []
    if filter.path_prefix:
        clauses.append(f"starts_with(path, {sql_str(filter.path_prefix)})")
    if filter.kinds:
        clauses.append(f"kind IN ({', '.join(sql_str(k) for k in filter.kinds)})")
    if filter.doc_ids:
        clauses.append(f"doc_id IN ({', '.join(sql_str(d) for d in filter.doc_ids)})")
    return " AND ".join(clauses) or None


def scan(table, columns: list[str], where: str | None = None) -> pa.Table:
    """Every row (no ranking), only the named columns."""
    query = table.search().select(columns).limit(None)
    if where:
        query = query.where(where)
    return query.to_arrow()


def row_to_chunk(row: dict) -> Chunk:
    return chunk_from_row({name: row[name] for name in READ_COLUMNS})


def chunks_to_arrow(chunks: list[Chunk], vectors: np.ndarray, dim: int, analyzer: Analyzer) -> pa.Table:
    columns: dict[str, list] = {name: [] for name, _ in CHUNK_FIELDS}
    for chunk in chunks:
        row = asdict(chunk)
        row["section_kind"] = chunk.section_kind.value
        for name in columns:
            columns[name].append(row[name])
    columns["lex"] = [analyzer.lex(c.text) for c in chunks]
    flat = pa.array(np.ascontiguousarray(vectors, dtype=np.float32).reshape(-1), type=pa.float32())
    columns["vector"] = pa.FixedSizeListArray.from_arrays(flat, dim)
    return pa.table(columns, schema=schema(dim))


class LanceTransaction:
    def __init__(self, table, dim: int, analyzer: Analyzer):
        self._table = table
        self._dim = dim
        self._analyzer = analyzer
        self.changed = False
        self.cjk = False  # whether a chunk added holds Hangul, Han or Kana (what the BM25 text is made from)

    def delete_documents(self, doc_ids: set[str]) -> None:
        ids = sorted(doc_ids)
        for start in range(0, len(ids), 500):
            batch = ids[start : start + 500]
            self._table.delete(f"doc_id IN ({', '.join(sql_str(d) for d in batch)})")
            self.changed = True

    def add(self, chunks: list[Chunk], vectors: np.ndarray) -> None:
        if not chunks:
            return
        if vectors.shape != (len(chunks), self._dim):
            raise StoreError(f"got {vectors.shape} vectors for {len(chunks)} chunks of dim {self._dim}")
        self._table.add(chunks_to_arrow(chunks, vectors, self._dim, self._analyzer))
        self.cjk = self.cjk or any(has_cjk(c.text) for c in chunks)
        self.changed = True
