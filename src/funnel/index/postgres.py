"""A `Store` in PostgreSQL with pgvector: one index that several processes (API workers, ingest jobs,
other machines) share.

Every `transaction()` is one SQL transaction, so readers only ever see committed state, and an
exception, Ctrl-C or a killed process leaves the last committed index. One writer at a time: a
transaction-scoped advisory lock, taken without waiting.

Tables, named after a prefix (default "funnel"), in the connection's schema:

    {p}_meta      one row: format, embedder, dim, version (+1 per commit), counts, BM25 totals
    {p}_chunks    a row per chunk: its fields, `embedding vector(dim)`, its BM25 length and term ids
    {p}_terms     term -> term_id, df (documents holding it)
    {p}_blocks    (term_id, blk) -> a term's postings among 2**14 chunk keys, packed (postgres_blocks)

BM25 is computed from the project's own statistics (postgres_bm25), with the analyser and formula of
LanceDB's full-text index (bm25_text.py), so both backends rank alike. Dense search scans exactly below
ANN_MIN_ROWS chunks (like LanceStore); from there an HNSW index (cosine) is built at commit. An index of
format 1 (a row per posting) is converted by its next write; until then BM25 refuses it in one line.
"""

from __future__ import annotations

import logging
import re
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from funnel.errors import ConfigError, StoreError, missing_dependency
from funnel.index.base import Filter, IndexInfo, OutlineEntry, ScoredChunk, chunk_from_row, vectors_in_order
from funnel import analyze
from funnel.index.bm25_text import Analyzer
from funnel.index.postgres_bm25 import top_n
from funnel.index.postgres_blocks import migrate_postings
from funnel.index.postgres_tables import _COLUMNS, _SELECT, FORMAT, PgTransaction, create_tables, where_sql
from funnel.types import Chunk

log = logging.getLogger(__name__)

_PREFIX = re.compile(r"[a-z_][a-z0-9_]{0,39}")
# Index formats this version converts on its next write (and reads all but lexically until then).
_CONVERTED = (1,)


def _psycopg():
    try:
        import psycopg
    except ImportError:
        raise missing_dependency("the PostgreSQL index", "psycopg", "postgres") from None
    return psycopg


def _row_to_chunk(row) -> Chunk:
    return chunk_from_row(dict(zip(_COLUMNS, row)))


def _first_line(error: Exception, secret: str | None) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    text = text.removeprefix("connection failed: ")
    return text.replace(secret, "***") if secret else text


class PgStore:
    """A PostgreSQL-backed `Store` at `dsn` (libpq URL or key=value string), tables `{table_prefix}_*`.

    Cheap to build: it connects on first use. Reads share one connection (a lock serialises the threads
    of a server); each write transaction opens its own."""

    def __init__(self, dsn: str, table_prefix: str = "funnel", read_timeout_s: float = 60.0):
        if not _PREFIX.fullmatch(table_prefix):
            raise ConfigError(f"table prefix {table_prefix!r}: use lower-case letters, digits and _ (max 40)")
        psycopg = _psycopg()
        try:
            params = psycopg.conninfo.conninfo_to_dict(dsn)
        except psycopg.ProgrammingError:
            # libpq quotes the part it could not parse, which may be the password: say no more than this.
            raise ConfigError("not a PostgreSQL connection string (check its quoting: a % in a password "
                              "must be written %25)") from None
        self._dsn = dsn
        self._password = params.get("password") or None
        host = params.get("host") or "localhost"
        port = params.get("port") or "5432"
        user = f"{params['user']}@" if params.get("user") else ""
        self._where_to = f"{host}:{port}/{params.get('dbname') or params.get('user') or ''}"
        self._label = f"postgresql://{user}{self._where_to} (tables {table_prefix}_*)"
        self.prefix = table_prefix
        names = ("meta", "chunks", "terms", "blocks", "postings", "calibration")  # postings: format 1's
        self._t = {name: f"{table_prefix}_{name}" for name in names}
        self._read_timeout_ms = max(1, round(read_timeout_s * 1000))
        self._conn = None
        self._exists = False
        self._lock = threading.Lock()
        self._analyzer: Analyzer | None = None
        self._pgvector: tuple[int, ...] | None = None
        self._lexical_format_ok = False  # checked once: a later conversion only makes it true
        self._lex: analyze.Analyzer | None = None  # the index's analyzer, read with the format

    def __str__(self) -> str:
        return self._label

    def analyzer(self) -> Analyzer:
        if self._analyzer is None:
            self._analyzer = Analyzer()
        return self._analyzer

    # ---- connections -----------------------------------------------------------------------------

    def _connect(self):
        psycopg = _psycopg()
        # Bounded connect, and keepalives so a server that vanished mid-query is noticed (~1 min) instead of
        # a read that never returns; a DSN that sets its own wins.
        defaults = {"connect_timeout": 10, "keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10,
                    "keepalives_count": 3}
        extra = {k: v for k, v in defaults.items() if k not in self._dsn}
        try:
            return psycopg.connect(self._dsn, autocommit=True, **extra)
        except psycopg.Error as e:
            reason = _first_line(e, self._password)
            raise StoreError(f"cannot connect to PostgreSQL at {self._where_to}: {reason}") from None

    @staticmethod
    def _alive(conn) -> bool:
        """One empty round trip (as psycopg's pool checks a connection): a search after the server came back
        reconnects instead of failing once."""
        if conn.closed or conn.broken:
            return False
        try:
            conn.execute("")
            return True
        except Exception:  # noqa: BLE001 (any failure means: reconnect)
            return False

    def drop(self) -> None:
        """Remove the index's tables (a deleted collection's index); nothing else is touched."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            self._exists = False
        with self._connect() as conn:
            for table in self._t.values():
                conn.execute(f"DROP TABLE IF EXISTS {table} CASCADE")

    @contextmanager
    def _reading(self):
        """The shared reader connection, or None while no index exists there yet."""
        psycopg = _psycopg()
        with self._lock:
            try:
                if self._conn is not None and not self._alive(self._conn):
                    self._conn.close()  # the server restarted or dropped it: a fresh one, not an error
                if self._conn is None or self._conn.closed:
                    self._conn = self._connect()
                    # A search stuck behind a lock or a wedged server ends with a line, not a hung request.
                    self._conn.execute(f"SET statement_timeout = {self._read_timeout_ms}")
                    # A read transaction's queries see one snapshot (BEGIN says so: no extra round trip).
                    self._conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
                if not self._exists:
                    found = self._conn.execute("SELECT to_regclass(%s)", [self._t["meta"]]).fetchone()[0]
                    self._exists = found is not None
                yield self._conn if self._exists else None
            except psycopg.errors.QueryCanceled:
                raise StoreError(f"{self}: PostgreSQL did not answer within {self._read_timeout_ms / 1000:g} s "
                                 "(a lock held by a writer, or an overloaded server); try again") from None
            except psycopg.OperationalError as e:
                self._conn.close()
                raise StoreError(f"lost the connection to PostgreSQL at {self._where_to}: "
                                 f"{_first_line(e, self._password)}") from None
            except (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn) as e:
                raise StoreError(f"{self}: the index is damaged ({_first_line(e, self._password)}); "
                                 "ingest into a new index") from None
            except psycopg.Error as e:  # permissions, a bad vector, a server setting: say what it said
                raise StoreError(f"{self}: {_first_line(e, self._password)}") from None

    def _iterative_scan(self, conn) -> bool:
        """Whether pgvector is 0.8 or later (hnsw.iterative_scan); asked once per store."""
        if self._pgvector is None:
            row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
            self._pgvector = tuple(int(p) for p in re.findall(r"\d+", row[0])[:2]) if row else (0, 0)
        return self._pgvector >= (0, 8)

    # ---- calibration (funnel.calibrate): one JSON row, created on first write ------------------------

    def read_calibration(self) -> dict | None:
        with self._reading() as conn:
            if conn is None or conn.execute("SELECT to_regclass(%s)", [self._t["calibration"]]).fetchone()[0] is None:
                return None
            row = conn.execute(f"SELECT data FROM {self._t['calibration']}").fetchone()
            return row[0] if row else None

    def write_calibration(self, data: dict) -> None:
        from psycopg.types.json import Jsonb

        if self.info() is None:
            raise StoreError(f"{self}: the index is empty; ingest before calibrating")
        t = self._t["calibration"]
        with self._connect() as conn, conn.transaction():
            conn.execute(f"CREATE TABLE IF NOT EXISTS {t} "
                         "(one boolean PRIMARY KEY DEFAULT true CHECK (one), data jsonb NOT NULL)")
            conn.execute(f"INSERT INTO {t} (data) VALUES (%s) ON CONFLICT (one) DO UPDATE SET data = EXCLUDED.data",
                         [Jsonb(data)])

    # ---- reading -------------------------------------------------------------------------------

    def info(self) -> IndexInfo | None:
        with self._reading() as conn:
            if conn is None:
                return None
            row = conn.execute(
                # to_jsonb: an index made before analyzers has no such column (it is english)
                f"SELECT format, embedder, dim, chunks, documents, version,"
                f" coalesce(to_jsonb(m)->>'analyzer', %s) FROM {self._t['meta']} m", [analyze.LEGACY]
            ).fetchone()
        if row is None:
            raise StoreError(f"{self}: the meta row is missing; ingest into a new index")
        if row[0] != FORMAT and row[0] not in _CONVERTED:
            raise StoreError(f"{self}: index format {row[0]} is not {FORMAT}; re-ingest")
        return IndexInfo(*row[1:])

    def document_hashes(self) -> dict[str, str]:
        with self._reading() as conn:
            if conn is None:
                return {}
            rows = conn.execute(f"SELECT doc_id, content_hash FROM {self._t['chunks']}").fetchall()
        return dict(rows)

    def get_chunks(self, doc_id: str) -> list[Chunk]:
        with self._reading() as conn:
            if conn is None:
                return []
            rows = conn.execute(
                f"SELECT {_SELECT} FROM {self._t['chunks']} c WHERE c.doc_id = %s ORDER BY c.ordinal",
                [doc_id],
            ).fetchall()
        return [_row_to_chunk(r) for r in rows]

    def vectors(self, chunk_ids: list[str]) -> np.ndarray:
        with self._reading() as conn:
            rows = [] if conn is None else conn.execute(
                f"SELECT chunk_id, embedding::real[] FROM {self._t['chunks']} WHERE chunk_id = ANY(%s)",
                [list(chunk_ids)]
            ).fetchall()
        return vectors_in_order({c: np.asarray(v, dtype=np.float32) for c, v in rows}, chunk_ids, self)

    def outline(self, filter: Filter | None = None) -> list[OutlineEntry]:
        where, params = where_sql(filter)
        with self._reading() as conn:
            if conn is None:
                return []
            rows = conn.execute(
                "SELECT chunk_id, doc_id, path, kind, heading, line_start, line_end"
                f" FROM {self._t['chunks']} c"
                f' WHERE {where} ORDER BY path COLLATE "C", ordinal',
                params,
            ).fetchall()
        return [OutlineEntry(*r) for r in rows]

    def search_dense(self, vector: np.ndarray, n: int, filter: Filter | None = None) -> list[ScoredChunk]:
        if n <= 0:
            return []
        literal = "[" + ",".join(f"{x:.9g}" for x in np.asarray(vector, dtype=np.float32).reshape(-1)) + "]"
        where, params = where_sql(filter)
        with self._reading() as conn:
            if conn is None:
                return []
            sql = (f"SELECT {_SELECT}, c.embedding <=> %s::vector AS distance FROM {self._t['chunks']} c"
                   f" WHERE {where} ORDER BY distance LIMIT %s")
            with conn.transaction():
                # The HNSW scan (when there is one) keeps going until the filter has let n rows through
                # (pgvector 0.8's iterative scan); relaxed order, so the rows are sorted again below.
                conn.execute("SELECT set_config('hnsw.ef_search', %s, true)", [str(min(max(40, n), 1000))])
                if self._iterative_scan(conn):
                    conn.execute("SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true)")
                rows = conn.execute(sql, [literal, *params, n]).fetchall()
                if params and len(rows) < n:
                    # The scan gave up (hnsw.max_scan_tuples) before the filter let n rows through: an
                    # exact scan of the rows that pass returns what LanceStore's prefilter would.
                    conn.execute("SET LOCAL enable_indexscan = off")
                    rows = conn.execute(sql, [literal, *params, n]).fetchall()
        rows.sort(key=lambda r: r[-1])
        return [ScoredChunk(_row_to_chunk(r[:-1]), 1.0 - float(r[-1])) for r in rows]

    def search_lexical(self, query: str, n: int, filter: Filter | None = None) -> list[ScoredChunk]:
        if n <= 0 or not query.strip():
            return []
        with self._reading() as conn:
            if conn is None:
                return []
            if not self._lexical_format_ok:
                found, recorded = conn.execute(
                    f"SELECT format, coalesce(to_jsonb(m)->>'analyzer', %s) FROM {self._t['meta']} m",
                    [analyze.LEGACY]).fetchone()
                if found != FORMAT:
                    raise StoreError(f"{self}: index format {found} keeps its BM25 postings a row each; any "
                                     f"ingest into it converts it to format {FORMAT} in place (or re-ingest)")
                self._lex = analyze.get(recorded)
                self._lexical_format_ok = True
            counts = Counter(self.analyzer().terms(self._lex.lex(query)))
            if not counts:
                return []
            with conn.transaction():  # one snapshot (see _reading) for the statistics, postings and chunks
                rows = top_n(conn, self._t, counts, n, filter)
        return [ScoredChunk(_row_to_chunk(r[:-1]), float(r[-1])) for r in rows]

    # ---- writing -------------------------------------------------------------------------------

    @contextmanager
    def transaction(self, embedder: str, dim: int, analyzer: str | None = None) -> Iterator[PgTransaction]:
        psycopg = _psycopg()
        conn = self._connect()
        try:
            with conn.transaction():
                got = conn.execute("SELECT pg_try_advisory_xact_lock(hashtextextended(%s, 0))",
                                   [f"funnel:{self._t['meta']}"]).fetchone()[0]
                if not got:
                    raise StoreError(f"{self} is being written by another ingest; try again when it ends")
                meta, chosen = self._prepare(conn, embedder, dim, analyzer)
                tx = PgTransaction(conn, self._t, dim, self.analyzer(), analyze.get(chosen))
                yield tx
                tx.commit(meta)
        except psycopg.OperationalError as e:
            raise StoreError(f"lost the connection to PostgreSQL at {self._where_to}: "
                             f"{_first_line(e, self._password)}") from None
        except psycopg.Error as e:
            raise StoreError(f"{self}: the write failed ({_first_line(e, self._password)})") from None
        finally:
            conn.close()

    def _prepare(self, conn, embedder: str, dim: int, analyzer: str | None) -> tuple[tuple | None, str]:
        """The committed meta row (None for a new index, whose tables are created now), after checking
        that this writer may add to it, and the analyzer the write uses (`funnel.analyze.settle`)."""
        t = self._t
        if conn.execute("SELECT to_regclass(%s)", [t["meta"]]).fetchone()[0] is None:
            chosen = analyze.settle(analyzer, None, self)
            self._create(conn, embedder, dim, chosen)
            return None, chosen
        meta = conn.execute(f"SELECT format, embedder, dim, version, coalesce(to_jsonb(m)->>'analyzer', %s)"
                            f" FROM {t['meta']} m FOR UPDATE", [analyze.LEGACY]).fetchone()
        if meta is None:
            raise StoreError(f"{self}: the meta row is missing; ingest into a new index")
        if meta[0] != FORMAT and meta[0] not in _CONVERTED:
            raise StoreError(f"{self}: index format {meta[0]} is not {FORMAT}; re-ingest")
        if (meta[1], meta[2]) != (embedder, dim):
            raise ConfigError(
                f"{self} was built with embedder {meta[1]} (dim {meta[2]}), not {embedder} (dim {dim}); "
                "use that embedder or ingest into a new index"
            )
        if meta[0] in _CONVERTED:  # in this transaction: a failed write leaves the old format whole
            log.info("%s: converting index format %s to %s", self, meta[0], FORMAT)
            migrate_postings(conn, t["postings"], t["blocks"], t["chunks"])
            conn.execute(f"UPDATE {t['meta']} SET format = %s", [FORMAT])
            conn.execute(f"ANALYZE {t['blocks']}")
        chosen = analyze.settle(analyzer, meta[4], self)
        _register_vector(conn, self)
        return meta[:4], chosen

    def _create(self, conn, embedder: str, dim: int, analyzer: str) -> None:
        psycopg = _psycopg()
        try:
            try:
                with conn.transaction():  # a savepoint: the error below must not abort the whole write
                    conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            except psycopg.errors.UniqueViolation:
                # Another first ingest (another collection, another process) created it at the same moment:
                # PostgreSQL made this one wait for that commit, then refused the duplicate. It exists now.
                with conn.transaction():
                    conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except psycopg.Error as e:
            raise StoreError(
                f"{self}: the pgvector extension is missing and could not be created "
                f"({_first_line(e, self._password)}); run CREATE EXTENSION vector as the database owner"
            ) from None
        _register_vector(conn, self)
        create_tables(conn, self._t, embedder, dim, analyzer)


def _register_vector(conn, store: PgStore) -> None:
    try:
        from pgvector.psycopg import register_vector
    except ImportError:
        raise missing_dependency("the PostgreSQL index", "pgvector", "postgres") from None
    register_vector(conn)
