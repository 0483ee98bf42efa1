"""A `Store` in PostgreSQL with pgvector: one index that several processes (API workers, ingest jobs,
other machines) share.

Every `transaction()` is one SQL transaction, so readers only ever see committed state, and an
exception, Ctrl-C or a killed process leaves the last committed index. One writer at a time: a
transaction-scoped advisory lock, taken without waiting.

Tables, named after a prefix (default "funnel"), in the connection's schema:

    {p}_meta      one row: format, embedder, dim, version (+1 per commit), counts, BM25 totals
    {p}_chunks    a row per chunk: its fields, `embedding vector(dim)`, its BM25 length and term ids
    {p}_terms     term -> term_id, df (documents holding it)
    {p}_postings  (term_id, chunk_key) -> tf, dl; primary key (term_id, chunk_key) including (tf, dl)

BM25 is computed in SQL from the project's own statistics, with the analyser and formula of LanceDB's
full-text index (bm25_text.py), so both backends rank alike. Dense search scans exactly below
ANN_MIN_ROWS chunks (like LanceStore); from there an HNSW index (cosine) is built at commit.
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
from funnel.index.base import Filter, IndexInfo, OutlineEntry, ScoredChunk
from funnel.index.bm25_text import K1, Analyzer, B
from funnel.index.lance import lexical_text
from funnel.types import Chunk, SectionKind

log = logging.getLogger(__name__)

FORMAT = 1
# Below this many chunks an exact scan beats an ANN index on latency and recall (as in LanceStore).
ANN_MIN_ROWS = 50_000
# A commit that changes more than this share of the chunks refreshes the planner's statistics.
ANALYZE_SHARE = 0.1
_PREFIX = re.compile(r"[a-z_][a-z0-9_]{0,39}")

_COLUMNS = [
    "chunk_id", "doc_id", "ordinal", "text", "path", "title", "kind", "n_tokens", "language", "heading",
    "page", "line_start", "line_end", "section_kind", "content_hash",
]
_SELECT = ", ".join(f"c.{name}" for name in _COLUMNS)
_COPY_TYPES = [
    "integer", "text", "text", "integer", "text", "text", "text", "text", "integer", "text", "text",
    "integer", "integer", "integer", "text", "text", "integer", "integer[]", "vector",
]


def _psycopg():
    try:
        import psycopg
    except ImportError:
        raise missing_dependency("the PostgreSQL index", "psycopg", "postgres") from None
    return psycopg


def _row_to_chunk(row) -> Chunk:
    fields = dict(zip(_COLUMNS, row))
    fields["section_kind"] = SectionKind(fields["section_kind"])
    return Chunk(**fields)


def _where(filter: Filter | None, alias: str = "c") -> tuple[str, list]:
    clauses, params = [], []
    if filter is not None:
        if filter.path_prefix:
            clauses.append(f"starts_with({alias}.path, %s)")
            params.append(filter.path_prefix)
        if filter.kinds:
            clauses.append(f"{alias}.kind = ANY(%s)")
            params.append(list(filter.kinds))
        if filter.doc_ids:
            clauses.append(f"{alias}.doc_id = ANY(%s)")
            params.append(list(filter.doc_ids))
    return " AND ".join(clauses) or "true", params


def _first_line(error: Exception, secret: str | None) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    text = text.removeprefix("connection failed: ")
    return text.replace(secret, "***") if secret else text


class PgStore:
    """A PostgreSQL-backed `Store` at `dsn` (libpq URL or key=value string), tables `{table_prefix}_*`.

    Cheap to build: it connects on first use. Reads share one connection (a lock serialises the threads
    of a server); each write transaction opens its own."""

    def __init__(self, dsn: str, table_prefix: str = "funnel"):
        if not _PREFIX.fullmatch(table_prefix):
            raise ConfigError(f"table prefix {table_prefix!r}: use lower-case letters, digits and _ (max 40)")
        psycopg = _psycopg()
        try:
            params = psycopg.conninfo.conninfo_to_dict(dsn)
        except psycopg.ProgrammingError as e:
            raise ConfigError(f"not a PostgreSQL connection string: {_first_line(e, None)}") from None
        self._dsn = dsn
        self._password = params.get("password") or None
        host = params.get("host") or "localhost"
        port = params.get("port") or "5432"
        user = f"{params['user']}@" if params.get("user") else ""
        self._where_to = f"{host}:{port}/{params.get('dbname') or params.get('user') or ''}"
        self._label = f"postgresql://{user}{self._where_to} (tables {table_prefix}_*)"
        self.prefix = table_prefix
        self._t = {name: f"{table_prefix}_{name}" for name in ("meta", "chunks", "terms", "postings")}
        self._conn = None
        self._exists = False
        self._lock = threading.Lock()
        self._analyzer: Analyzer | None = None

    def __str__(self) -> str:
        return self._label

    def analyzer(self) -> Analyzer:
        if self._analyzer is None:
            self._analyzer = Analyzer()
        return self._analyzer

    # ---- connections -----------------------------------------------------------------------------

    def _connect(self):
        psycopg = _psycopg()
        extra = {} if "connect_timeout" in self._dsn else {"connect_timeout": 10}
        try:
            return psycopg.connect(self._dsn, autocommit=True, **extra)
        except psycopg.Error as e:
            reason = _first_line(e, self._password)
            raise StoreError(f"cannot connect to PostgreSQL at {self._where_to}: {reason}") from None

    @contextmanager
    def _reading(self):
        """The shared reader connection, or None while no index exists there yet."""
        psycopg = _psycopg()
        with self._lock:
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = self._connect()
                if not self._exists:
                    found = self._conn.execute("SELECT to_regclass(%s)", [self._t["meta"]]).fetchone()[0]
                    self._exists = found is not None
                yield self._conn if self._exists else None
            except psycopg.OperationalError as e:
                self._conn.close()
                raise StoreError(f"lost the connection to PostgreSQL at {self._where_to}: "
                                 f"{_first_line(e, self._password)}") from None
            except psycopg.Error as e:
                raise StoreError(f"{self}: the index is damaged ({_first_line(e, self._password)}); "
                                 "ingest into a new index") from None

    # ---- reading -------------------------------------------------------------------------------

    def info(self) -> IndexInfo | None:
        with self._reading() as conn:
            if conn is None:
                return None
            row = conn.execute(
                f"SELECT format, embedder, dim, chunks, documents, version FROM {self._t['meta']}"
            ).fetchone()
        if row is None:
            raise StoreError(f"{self}: the meta row is missing; ingest into a new index")
        if row[0] != FORMAT:
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

    def outline(self, filter: Filter | None = None) -> list[OutlineEntry]:
        where, params = _where(filter)
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
        where, params = _where(filter)
        with self._reading() as conn:
            if conn is None:
                return []
            with conn.transaction():
                # The HNSW scan (when there is one) keeps going until the filter has let n rows through;
                # relaxed order, so the rows are sorted again below.
                conn.execute("SELECT set_config('hnsw.ef_search', %s, true)", [str(min(max(40, n), 1000))])
                conn.execute("SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true)")
                rows = conn.execute(
                    f"SELECT {_SELECT}, c.embedding <=> %s::vector AS distance FROM {self._t['chunks']} c"
                    f" WHERE {where} ORDER BY distance LIMIT %s",
                    [literal, *params, n],
                ).fetchall()
        rows.sort(key=lambda r: r[-1])
        return [ScoredChunk(_row_to_chunk(r[:-1]), 1.0 - float(r[-1])) for r in rows]

    def search_lexical(self, query: str, n: int, filter: Filter | None = None) -> list[ScoredChunk]:
        text = lexical_text(query).strip()
        if n <= 0 or not text:
            return []
        counts = Counter(self.analyzer().terms(text))
        if not counts:
            return []
        where, params = _where(filter, "f")
        join = f"JOIN {self._t['chunks']} f ON f.chunk_key = p.chunk_key AND {where}" if filter else ""
        t = self._t
        # One statement: idf from df and N, BM25 per posting, summed per chunk, best n, then their rows.
        # The query's terms are materialised first (a handful of rows), so the postings are read through
        # their primary key, term by term; N and avgdl are scalar subqueries, evaluated once.
        n_docs = f"(SELECT bm25_docs::float8 FROM {t['meta']})"
        avgdl = f"(SELECT bm25_tokens::float8 / greatest(bm25_docs, 1) FROM {t['meta']})"
        sql = f"""
            WITH q AS MATERIALIZED (
                SELECT t.term_id, c.qtf * ln(1 + ({n_docs} - t.df + 0.5::float8) / (t.df + 0.5::float8)) AS w
                FROM unnest(%s::text[], %s::int[]) AS c(term, qtf) JOIN {t['terms']} t ON t.term = c.term
                WHERE t.df > 0),
            s AS (SELECT p.chunk_key,
                         sum(q.w * p.tf * {K1 + 1}::float8
                             / (p.tf + {K1 * (1 - B)}::float8 + {K1 * B}::float8 * p.dl / {avgdl})) AS score
                  FROM q JOIN {t['postings']} p ON p.term_id = q.term_id {join}
                  GROUP BY p.chunk_key ORDER BY score DESC, p.chunk_key LIMIT %s)
            SELECT {_SELECT}, s.score FROM s JOIN {t['chunks']} c ON c.chunk_key = s.chunk_key
            ORDER BY s.score DESC, s.chunk_key"""
        with self._reading() as conn:
            if conn is None:
                return []
            rows = conn.execute(sql, [list(counts), list(counts.values()), *params, n]).fetchall()
        return [ScoredChunk(_row_to_chunk(r[:-1]), float(r[-1])) for r in rows]

    # ---- writing -------------------------------------------------------------------------------

    @contextmanager
    def transaction(self, embedder: str, dim: int) -> Iterator[_PgTransaction]:
        psycopg = _psycopg()
        conn = self._connect()
        try:
            with conn.transaction():
                got = conn.execute("SELECT pg_try_advisory_xact_lock(hashtextextended(%s, 0))",
                                   [f"funnel:{self._t['meta']}"]).fetchone()[0]
                if not got:
                    raise StoreError(f"{self} is being written by another ingest; try again when it ends")
                meta = self._prepare(conn, embedder, dim)
                tx = _PgTransaction(self, conn, dim)
                yield tx
                tx.commit(meta)
        except psycopg.OperationalError as e:
            raise StoreError(f"lost the connection to PostgreSQL at {self._where_to}: "
                             f"{_first_line(e, self._password)}") from None
        except psycopg.Error as e:
            raise StoreError(f"{self}: the write failed ({_first_line(e, self._password)})") from None
        finally:
            conn.close()

    def _prepare(self, conn, embedder: str, dim: int) -> tuple | None:
        """The committed meta row (None for a new index, whose tables are created now), after checking
        that this writer may add to it."""
        t = self._t
        if conn.execute("SELECT to_regclass(%s)", [t["meta"]]).fetchone()[0] is None:
            self._create(conn, embedder, dim)
            return None
        meta = conn.execute(f"SELECT format, embedder, dim, version FROM {t['meta']} FOR UPDATE").fetchone()
        if meta is None:
            raise StoreError(f"{self}: the meta row is missing; ingest into a new index")
        if meta[0] != FORMAT:
            raise StoreError(f"{self}: index format {meta[0]} is not {FORMAT}; re-ingest")
        if (meta[1], meta[2]) != (embedder, dim):
            raise ConfigError(
                f"{self} was built with embedder {meta[1]} (dim {meta[2]}), not {embedder} (dim {dim}); "
                "use that embedder or ingest into a new index"
            )
        _register_vector(conn, self)
        return meta

    def _create(self, conn, embedder: str, dim: int) -> None:
        psycopg = _psycopg()
        t = self._t
        try:
            with conn.transaction():  # a savepoint: the error below must not abort the whole write
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except psycopg.Error as e:
            raise StoreError(
                f"{self}: the pgvector extension is missing and could not be created "
                f"({_first_line(e, self._password)}); run CREATE EXTENSION vector as the database owner"
            ) from None
        _register_vector(conn, self)
        conn.execute(f"""
            CREATE TABLE {t['meta']} (
                one boolean PRIMARY KEY DEFAULT true CHECK (one),
                format integer NOT NULL, embedder text NOT NULL, dim integer NOT NULL,
                version bigint NOT NULL,
                chunks bigint NOT NULL, documents bigint NOT NULL,
                bm25_docs bigint NOT NULL, bm25_tokens bigint NOT NULL);
            CREATE SEQUENCE {t['chunks']}_key AS integer;
            CREATE TABLE {t['chunks']} (
                chunk_key integer PRIMARY KEY,
                chunk_id text NOT NULL, doc_id text NOT NULL, ordinal integer NOT NULL, text text NOT NULL,
                path text NOT NULL, title text NOT NULL, kind text NOT NULL, n_tokens integer NOT NULL,
                language text, heading text, page integer, line_start integer, line_end integer,
                section_kind text NOT NULL, content_hash text NOT NULL,
                lex_len integer NOT NULL, term_ids integer[] NOT NULL, embedding vector({int(dim)}) NOT NULL);
            -- Vectors stay in the row (other columns go to TOAST first): exact scans read no TOAST.
            ALTER TABLE {t['chunks']} ALTER COLUMN embedding SET STORAGE MAIN;
            CREATE INDEX {t['chunks']}_doc ON {t['chunks']} (doc_id) INCLUDE (content_hash);
            CREATE TABLE {t['terms']} (
                term_id integer GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
                term text NOT NULL UNIQUE, df integer NOT NULL);
            CREATE TABLE {t['postings']} (
                term_id integer NOT NULL, chunk_key integer NOT NULL,
                tf integer NOT NULL, dl integer NOT NULL,
                PRIMARY KEY (term_id, chunk_key) INCLUDE (tf, dl));
        """)
        conn.execute(
            f"INSERT INTO {t['meta']}"
            " (format, embedder, dim, version, chunks, documents, bm25_docs, bm25_tokens)"
            " VALUES (%s, %s, %s, 0, 0, 0, 0, 0)",
            [FORMAT, embedder, dim],
        )


def _register_vector(conn, store: PgStore) -> None:
    try:
        from pgvector.psycopg import register_vector
    except ImportError:
        raise missing_dependency("the PostgreSQL index", "pgvector", "postgres") from None
    register_vector(conn)


class _PgTransaction:
    """Writes of one SQL transaction. df changes are summed here and written once, at commit: updating a
    term's row per batch would leave a dead row version per batch (none can be vacuumed before the commit),
    and a million-chunk ingest would bloat the terms table many times over."""

    def __init__(self, store: PgStore, conn, dim: int):
        self._store = store
        self._conn = conn
        self._dim = dim
        self._t = store._t
        self.changed = False
        self._delta = Counter()  # chunks, documents, bm25_docs, bm25_tokens, added, deleted
        self._df = Counter()  # term_id -> change of df
        self._ids: dict[str, int] = {}  # term -> term_id, for the terms this transaction has met

    def delete_documents(self, doc_ids: set[str]) -> None:
        if not doc_ids:
            return
        t = self._t
        # The chunks go, with their postings (found through the chunks' term ids).
        row = self._conn.execute(
            f"""
            WITH gone AS (DELETE FROM {t['chunks']} WHERE doc_id = ANY(%s)
                          RETURNING chunk_key, doc_id, lex_len, term_ids),
            post AS (DELETE FROM {t['postings']} p
                     USING (SELECT chunk_key, unnest(term_ids) AS term_id FROM gone) g
                     WHERE p.term_id = g.term_id AND p.chunk_key = g.chunk_key RETURNING p.term_id),
            df AS (SELECT term_id, count(*)::int AS n FROM post GROUP BY term_id)
            SELECT count(*), count(DISTINCT doc_id), count(*) FILTER (WHERE lex_len > 0),
                   coalesce(sum(lex_len), 0),
                   (SELECT array_agg(term_id) FROM df), (SELECT array_agg(n) FROM df)
            FROM gone""",
            [sorted(doc_ids)],
        ).fetchone()
        if row[0]:
            self._delta.subtract(dict(zip(("chunks", "documents", "bm25_docs", "bm25_tokens"), row[:4])))
            self._delta["deleted"] += row[0]
            self._df.subtract(dict(zip(row[4] or [], row[5] or [])))
            self.changed = True

    def _term_ids(self, terms: set[str]) -> dict[str, int]:
        unknown = sorted(terms - self._ids.keys())
        if unknown:
            t = self._t
            self._conn.execute(
                f"INSERT INTO {t['terms']} (term, df) SELECT unnest(%s::text[]), 0"
                " ON CONFLICT (term) DO NOTHING",
                [unknown],
            )
            self._ids.update(self._conn.execute(
                f"SELECT term, term_id FROM {t['terms']} WHERE term = ANY(%s)", [unknown]
            ).fetchall())
        return self._ids

    def add(self, chunks: list[Chunk], vectors: np.ndarray) -> None:
        if not chunks:
            return
        if vectors.shape != (len(chunks), self._dim):
            raise StoreError(f"got {vectors.shape} vectors for {len(chunks)} chunks of dim {self._dim}")
        conn, t = self._conn, self._t
        analyzer = self._store.analyzer()
        counts = [Counter(analyzer.terms(lexical_text(c.text))) for c in chunks]
        ids = self._term_ids({term for c in counts for term in c})
        for c in counts:
            self._df.update(ids[term] for term in c)
        new_docs = conn.execute(
            f"SELECT count(*) FROM unnest(%s::text[]) d(id)"
            f" WHERE NOT EXISTS (SELECT 1 FROM {t['chunks']} c WHERE c.doc_id = d.id)",
            [sorted({c.doc_id for c in chunks})],
        ).fetchone()[0]
        keys = [k for (k,) in conn.execute(
            f"SELECT nextval('{t['chunks']}_key') FROM generate_series(1, %s)", [len(chunks)]
        ).fetchall()]
        lengths = [sum(c.values()) for c in counts]
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        with conn.cursor().copy(
            f"COPY {t['chunks']} (chunk_key, {', '.join(_COLUMNS)}, lex_len, term_ids, embedding)"
            " FROM STDIN WITH (FORMAT BINARY)"
        ) as copy:
            copy.set_types(_COPY_TYPES)
            for key, chunk, c, dl, vector in zip(keys, chunks, counts, lengths, vectors):
                copy.write_row((
                    key, chunk.chunk_id, chunk.doc_id, chunk.ordinal, chunk.text, chunk.path, chunk.title,
                    chunk.kind, chunk.n_tokens, chunk.language, chunk.heading, chunk.page, chunk.line_start,
                    chunk.line_end, chunk.section_kind.value, chunk.content_hash, dl,
                    [ids[term] for term in c], vector,
                ))
        with conn.cursor().copy(
            f"COPY {t['postings']} (term_id, chunk_key, tf, dl) FROM STDIN WITH (FORMAT BINARY)"
        ) as copy:
            copy.set_types(["integer", "integer", "integer", "integer"])
            for key, c, dl in zip(keys, counts, lengths):
                for term, tf in c.items():
                    copy.write_row((ids[term], key, tf, dl))
        self._delta.update({
            "chunks": len(chunks), "documents": new_docs, "added": len(chunks),
            "bm25_docs": sum(1 for n in lengths if n), "bm25_tokens": sum(lengths),
        })
        self.changed = True

    def commit(self, meta: tuple | None) -> None:
        """Runs inside the SQL transaction, before COMMIT: df, counts, version, indexes, statistics."""
        if not self.changed and meta is not None:
            return
        conn, t, d = self._conn, self._t, self._delta
        changes = sorted((term_id, n) for term_id, n in self._df.items() if n)
        if changes:
            conn.execute(
                f"UPDATE {t['terms']} t SET df = t.df + c.n"
                " FROM unnest(%s::int[], %s::int[]) AS c(term_id, n)"
                " WHERE t.term_id = c.term_id",
                [[i for i, _ in changes], [n for _, n in changes]],
            )
        if d["deleted"]:
            conn.execute(f"DELETE FROM {t['terms']} WHERE df <= 0")
        total = conn.execute(
            f"UPDATE {t['meta']} SET version = version + 1, chunks = chunks + %s, documents = documents + %s,"
            " bm25_docs = bm25_docs + %s, bm25_tokens = bm25_tokens + %s RETURNING chunks",
            [d["chunks"], d["documents"], d["bm25_docs"], d["bm25_tokens"]],
        ).fetchone()[0]
        if total >= ANN_MIN_ROWS and conn.execute(
            "SELECT to_regclass(%s)", [f"{t['chunks']}_hnsw"]
        ).fetchone()[0] is None:
            # Built once, on the loaded rows (much faster than growing it row by row); later inserts
            # maintain it. Readers keep using the exact scan until this commits.
            conn.execute(
                f"CREATE INDEX {t['chunks']}_hnsw ON {t['chunks']} USING hnsw (embedding vector_cosine_ops)"
            )
        if d["added"] + d["deleted"] > ANALYZE_SHARE * max(total, 1) or meta is None:
            for name in ("meta", "chunks", "terms", "postings"):
                conn.execute(f"ANALYZE {t[name]}")
