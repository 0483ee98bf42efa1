"""The embedded default store: one LanceDB table per index directory.

Atomicity comes from Lance's versioned manifests plus a small state file: every write goes to new
table versions, but readers open the version named in `funnel_index.json`, which is replaced
atomically (os.replace) only when an ingest commits. An interrupted ingest therefore leaves readers on
the previous version; the rollback (or, after a kill, the next writer) restores the table to it and
deletes what the interrupted ingest wrote.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
import threading
import warnings
from datetime import timedelta
from pathlib import Path

import numpy as np

from funnel.errors import ConfigError, StoreError
from funnel.index.base import Filter, IndexInfo, OutlineEntry, ScoredChunk, vectors_in_order
from funnel import analyze
from funnel.analyze.scripts import CjkWordsApart
from funnel.index.lance_rows import (
    READ_COLUMNS,
    LanceTransaction,
    row_to_chunk,
    scan,
    schema,
    sql_str,
    where_clause,
)
from funnel.types import Chunk

log = logging.getLogger(__name__)

TABLE = "chunks"
STATE_FILE = "funnel_index.json"
CALIBRATION_FILE = "funnel_calibration.json"
LOCK_FILE = ".funnel.lock"
FORMAT = 1
# Below this many rows an exact scan beats an ANN index on latency and recall.
ANN_MIN_ROWS = 50_000
# optimize() prunes versions older than 7 days unless told otherwise; pruning must wait for the commit.
NEVER = timedelta(days=36500)
# Versions this much older than the previous commit are pruned at a commit (see _drop_old_versions).
PRUNE_MARGIN = timedelta(seconds=30)
# Write failures that are about the disk, not the index: said in one line, as an index problem.
_DISK_ERRORS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM}
# Lance (Rust) reports them as a RuntimeError or OSError whose text ends in "(os error 28)".
_OS_ERROR = re.compile(r"\(os error (\d+)\)")

class LanceStore:
    """A LanceDB-backed `Store` in one directory. Safe to read from many processes; one writer at a time."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._table = None
        self._state_mtime: float | None = None
        self._state: dict | None = None
        self._lock = threading.Lock()  # one reload at a time when a server shares this store

    # ---- calibration (funnel.calibrate): a JSON object beside the state, replaced atomically ----------

    def read_calibration(self) -> dict | None:
        try:
            with open(self.path / CALIBRATION_FILE, encoding="utf-8") as fh:
                return json.load(fh)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except (OSError, json.JSONDecodeError) as e:
            raise StoreError(f"{self.path}: unreadable calibration ({e}); run `funnel calibrate`") from e

    def write_calibration(self, data: dict) -> None:
        if self._read_state() is None:
            raise StoreError(f"{self.path}: the index is empty; ingest before calibrating")
        _write_json_atomically(self.path / CALIBRATION_FILE, data)

    # ---- reading -------------------------------------------------------------------------------

    def _read_state(self) -> dict | None:
        try:
            with open(self.path / STATE_FILE, encoding="utf-8") as fh:
                state = json.load(fh)
        except FileNotFoundError:
            return None
        except NotADirectoryError:
            raise StoreError(f"{self.path} is a file, not an index directory") from None
        except (OSError, json.JSONDecodeError) as e:
            raise StoreError(f"{self.path}: unreadable index state ({e})") from e
        if not isinstance(state, dict) or not {"version", "embedder", "dim"} <= set(state):
            raise StoreError(f"{self.path}: {STATE_FILE} is damaged; ingest into a new index")
        if state.get("format") != FORMAT:
            raise StoreError(f"{self.path}: index format {state.get('format')} is not {FORMAT}; re-ingest")
        return state

    def _connect(self):
        import lancedb

        return lancedb.connect(self.path)

    def _reader(self):
        """The table pinned at the last committed version, reopened when another process commits."""
        try:
            mtime = (self.path / STATE_FILE).stat().st_mtime_ns
        except (FileNotFoundError, NotADirectoryError):
            mtime = None
        with self._lock:
            if (self._table is None and self._state is None) or mtime != self._state_mtime:
                state, table = self._open_committed()
                self._state, self._state_mtime, self._table = state, mtime, table
            return self._table

    def _open_committed(self) -> tuple[dict | None, object]:
        state = self._read_state()
        if state is None:
            return None, None
        try:
            table = self._connect().open_table(TABLE)
            table.checkout(state["version"])
            return state, table
        except Exception as e:
            # A rollback moves readers to a copy of the committed version, then prunes the original:
            # a reader that read the state file just before may find its version gone. The state says where.
            again = self._read_state()
            if again is None or again["version"] == state["version"]:  # files deleted or corrupted under us
                raise StoreError(f"{self.path}: the index is damaged ({e}); ingest into a new index") from e
            return self._open_committed()

    def info(self) -> IndexInfo | None:
        self._reader()
        if self._state is None:
            return None
        s = self._state
        return IndexInfo(s["embedder"], s["dim"], s["chunks"], s["documents"], s["version"],
                         s.get("analyzer", analyze.LEGACY))

    def document_hashes(self) -> dict[str, str]:
        table = self._reader()
        if table is None:
            return {}
        rows = scan(table, ["doc_id", "content_hash"]).to_pylist()
        return {r["doc_id"]: r["content_hash"] for r in rows}

    def get_chunks(self, doc_id: str) -> list[Chunk]:
        table = self._reader()
        if table is None:
            return []
        rows = scan(table, READ_COLUMNS, f"doc_id = {sql_str(doc_id)}").to_pylist()
        return sorted((row_to_chunk(r) for r in rows), key=lambda c: c.ordinal)

    def vectors(self, chunk_ids: list[str]) -> np.ndarray:
        table = self._reader()
        found: dict[str, np.ndarray] = {}
        for start in range(0, len(chunk_ids) if table is not None else 0, 500):
            batch = chunk_ids[start : start + 500]
            where = "chunk_id IN (" + ", ".join(sql_str(c) for c in batch) + ")"
            rows = scan(table, ["chunk_id", "vector"], where)
            ids = rows.column("chunk_id").to_pylist()
            flat = rows.column("vector").combine_chunks().flatten().to_numpy(zero_copy_only=False)
            for chunk_id, vector in zip(ids, flat.reshape(len(ids), -1) if ids else []):
                found[chunk_id] = vector.astype(np.float32)
        return vectors_in_order(found, chunk_ids, self.path)

    def outline(self, filter: Filter | None = None) -> list[OutlineEntry]:
        table = self._reader()
        if table is None:
            return []
        columns = ["chunk_id", "doc_id", "path", "kind", "heading", "line_start", "line_end"]
        rows = scan(table, columns + ["ordinal"], where_clause(filter)).to_pylist()
        rows.sort(key=lambda r: (r["path"], r["ordinal"]))
        return [OutlineEntry(**{c: r[c] for c in columns}) for r in rows]

    def search_dense(self, vector: np.ndarray, n: int, filter: Filter | None = None) -> list[ScoredChunk]:
        table = self._reader()
        if table is None or n <= 0:
            return []
        query = (
            table.search(np.asarray(vector, dtype=np.float32), query_type="vector", vector_column_name="vector")
            .distance_type("cosine")
            .select(READ_COLUMNS + ["_distance"])
            .limit(n)
        )
        where = where_clause(filter)
        if where:
            query = query.where(where, prefilter=True)
        return [ScoredChunk(row_to_chunk(r), 1.0 - float(r["_distance"])) for r in query.to_list()]

    def query_analyzer(self) -> analyze.Analyzer:
        """The index's analyzer, except on an index known to hold no Hangul, Han or Kana: there a question's
        CJK words can match nothing whatever their analysis, so they are set apart whole (`CjkWordsApart`)
        rather than loading Kiwi (~500 MB) to analyze them; the Latin words they were joined to are searched
        as Kiwi would have split them."""
        self._reader()  # the committed state, read again when another process committed
        state = self._state or {}
        name = state.get("analyzer", analyze.LEGACY)
        return CjkWordsApart() if name == "korean" and state.get("cjk") is False else analyze.get(name)

    def search_lexical(self, query: str, n: int, filter: Filter | None = None) -> list[ScoredChunk]:
        table = self._reader()
        if table is None or n <= 0:
            return []
        text = self.query_analyzer().lex(query).strip()
        if not text:
            return []
        from lancedb.query import MatchQuery

        # A MatchQuery treats the text as plain terms: quotes, AND/OR, colons in user input are words.
        search = (
            table.search(MatchQuery(text, "lex"), query_type="fts")
            .select(READ_COLUMNS + ["_score"])
            .limit(n)
        )
        where = where_clause(filter)
        if where:
            search = search.where(where, prefilter=True)
        return [ScoredChunk(row_to_chunk(r), float(r["_score"])) for r in search.to_list()]

    # ---- writing -------------------------------------------------------------------------------

    @contextmanager
    def transaction(self, embedder: str, dim: int, analyzer: str | None = None) -> Iterator[LanceTransaction]:
        try:
            with self._transaction(embedder, dim, analyzer) as tx:
                yield tx
        except (OSError, RuntimeError) as e:
            code = _disk_error(e)
            if code is None:
                raise
            raise StoreError(
                f"cannot write the index at {self.path}: {os.strerror(code)}; it keeps the last ingest that completed"
            ) from e

    @contextmanager
    def _transaction(self, embedder: str, dim: int, analyzer: str | None) -> Iterator[LanceTransaction]:
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            raise StoreError(f"{self.path} is a file, not an index directory") from None
        except OSError as e:
            raise StoreError(f"cannot create the index at {self.path}: {e.strerror or e}") from None
        with self._write_lock():
            state = self._read_state()
            if state is not None and (state["embedder"], state["dim"]) != (embedder, dim):
                raise ConfigError(
                    f"{self.path} was built with embedder {state['embedder']} (dim {state['dim']}), "
                    f"not {embedder} (dim {dim}); use that embedder or ingest into a new index"
                )
            recorded = state.get("analyzer", analyze.LEGACY) if state else None
            analyzer = analyze.settle(analyzer, recorded, self.path)
            table, state = self._open_for_write(state, dim)
            tx = LanceTransaction(table, dim, analyze.get(analyzer))
            try:
                yield tx
            except BaseException:
                # Readers never saw these versions; put the table back so the next writer starts clean.
                self._discard(table, state)
                raise
            if tx.changed or state is None:
                self._refresh_indexes(table)
                # Whether the index holds CJK text: known for an index made since it was recorded (None: not).
                cjk = tx.cjk if state is None else (state["cjk"] or tx.cjk if "cjk" in state else None)
                new_state = self._write_state(self._state_for(table, embedder, dim, analyzer, cjk))
                if state is not None and self._drop_old_versions(table, keep=state["version"]):
                    # Same rows, compacted: point readers there (the counts are unchanged).
                    self._write_state({**new_state, "version": table.version})

    @contextmanager
    def _write_lock(self) -> Iterator[None]:
        fh = open(self.path / LOCK_FILE, "a+")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as e:
            fh.close()
            raise StoreError(f"{self.path} is being written by another ingest; try again when it ends") from e
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
            fh.close()

    def _open_for_write(self, state: dict | None, dim: int) -> tuple[object, dict | None]:
        """The table to write, at the committed version, and the state (moved when a killed ingest is undone)."""
        db = self._connect()
        exists = TABLE in db.table_names()
        if exists and state is None:
            db.drop_table(TABLE)  # left by a first ingest that never committed
            exists = False
        if not exists:
            return db.create_table(TABLE, schema=schema(dim)), None
        table = db.open_table(TABLE)
        if table.version != state["version"]:
            log.info("discarding an interrupted ingest (table v%s -> v%s)", table.version, state["version"])
            state = self._roll_back(table, state)
        return table, state

    def _discard(self, table, state: dict | None) -> None:
        try:
            if state is None:
                self._connect().drop_table(TABLE, ignore_missing=True)
            elif table.version != state["version"]:
                self._roll_back(table, state)
        except Exception as e:  # the next writer rolls back anyway; never mask the original error
            log.warning("could not roll back %s now (%s); the next ingest will", self.path, e)

    def _roll_back(self, table, state: dict) -> dict:
        """Put the table back at the committed version and delete every file the interrupted ingest wrote.

        Lance restores by writing a copy of the committed version as the newest one, and prunes only by
        age, while the versions to drop are younger than the committed one. So readers move to the copy
        first (same rows, same counts), then every other version goes, with any file no version
        references (a write killed before its commit; we hold the write lock, so none is in progress).
        A query still running on the committed version keeps its files (the copy references them); one
        still running on a version before it, from before the last commit, may not."""
        table.restore(state["version"])
        state = self._write_state({**state, "version": table.version})
        with warnings.catch_warnings():  # "removes every version except the latest": that is the point here
            warnings.simplefilter("ignore", UserWarning)
            table.optimize(cleanup_older_than=timedelta(0), delete_unverified=True)
        if table.version != state["version"]:  # optimize compacted: same rows again
            state = self._write_state({**state, "version": table.version})
        return state

    def _refresh_indexes(self, table) -> None:
        from lancedb.index import FTS

        indexed = {idx.columns[0] for idx in table.list_indices()}
        rows = table.count_rows()
        if rows == 0:
            return
        if "lex" not in indexed:
            table.create_index("lex", config=FTS(with_position=False), replace=True)
        if "vector" not in indexed and rows >= ANN_MIN_ROWS:
            table.create_index(metric="cosine", index_type="IVF_HNSW_SQ", vector_column_name="vector")
        # Folds new rows into existing indexes (FTS and ANN) so queries stay indexed, not scanned.
        table.optimize(cleanup_older_than=NEVER)

    def _drop_old_versions(self, table, keep: int) -> bool:
        """Free the disk held by versions older than `keep`, the version readers used until this commit.

        Runs only after the new state is durable (before that, `keep` is what a crash falls back to).
        `keep` itself survives until the next commit, so queries other processes started on it finish.
        Lance prunes by creation time, hence the cut-off is `keep`'s own timestamp."""
        before = table.version
        try:
            stamps = {v["version"]: v["timestamp"] for v in table.list_versions()}
            # Both stamps come from Lance's clock (no time-zone guesswork); the newest version was written
            # moments ago, so "older than newest - keep + margin" cuts just before `keep`.
            age = stamps[max(stamps)] - stamps[keep] + PRUNE_MARGIN
            # delete_unverified: files no version references are left by a killed write, as no other
            # write can be in progress under our lock.
            table.optimize(cleanup_older_than=age, delete_unverified=True)
        except Exception as e:  # disk space is reclaimed by a later commit instead
            log.warning("could not drop old versions of %s: %s", self.path, e)
        return table.version != before

    def _state_for(self, table, embedder: str, dim: int, analyzer: str, cjk: bool | None) -> dict:
        docs = scan(table, ["doc_id"]).column("doc_id").unique()
        return {
            "format": FORMAT,
            "version": table.version,
            "embedder": embedder,
            "dim": dim,
            "analyzer": analyzer,
            "chunks": table.count_rows(),
            "documents": len(docs),
            **({} if cjk is None else {"cjk": cjk}),
        }

    def _write_state(self, state: dict) -> dict:
        _write_json_atomically(self.path / STATE_FILE, state)
        self._table = None  # the next read reopens at the new version
        return state


def _disk_error(e: BaseException) -> int | None:
    """The errno of a full, read-only or forbidden disk behind `e`, from Python or from Lance; else None."""
    code = getattr(e, "errno", None)
    if code is None and (match := _OS_ERROR.search(str(e))):
        code = int(match.group(1))
    return code if code in _DISK_ERRORS else None


def _write_json_atomically(path: Path, data: dict) -> None:
    """A reader sees the old file or the new one, never half of one (a kill mid-write leaves the old)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
