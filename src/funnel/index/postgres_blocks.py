"""BM25 postings in PostgreSQL as blocks: one row per term and range of 2**KEY_BITS chunk keys, holding that
term's postings in the range as packed (key offset, tf, dl) triples. A query reads a term's whole list in a
few rows instead of a row per posting (a million-chunk index: ~1 GB of blocks instead of a 5 GB table of
70 million posting rows, and a common term's 400k postings in 62 rows).

A block row is (term_id, blk, n, max_tf, min_dl, payload): blk = chunk_key >> KEY_BITS; payload is n
triples in chunk-key order, each three big-endian int2 (`NARROW`), or three int4 (`WIDE`) in the rare
block that holds a tf or dl above 32767; the payload's length tells which. max_tf and min_dl bound what a
posting of the block can score, whatever the average length (the score rises with tf, falls with dl).

Chunk keys only grow (one writer at a time draws them from a sequence), so a write transaction fills
blocks in order: each range is written once it is complete, and only the first one it touches can hold
postings of earlier commits (merged then). Deleted chunks' blocks are rewritten at commit, in one pass."""

from __future__ import annotations

import numpy as np

KEY_BITS = 14
NARROW = np.dtype(">i2")
WIDE = np.dtype(">i4")
NARROW_MAX = 32767
# The rows of blocks rewritten for deletions are fetched this many at a time.
REWRITE_ROWS = 20_000
_COLUMNS = "term_id, blk, n, max_tf, min_dl, payload"


def create_blocks_table(conn, table: str) -> None:
    conn.execute(f"""
        CREATE TABLE {table} (
            term_id integer NOT NULL, blk integer NOT NULL, n integer NOT NULL,
            max_tf integer NOT NULL, min_dl integer NOT NULL, payload bytea NOT NULL,
            PRIMARY KEY (term_id, blk));
        -- Payloads are packed integers: compression would save little and cost every read.
        ALTER TABLE {table} ALTER COLUMN payload SET STORAGE EXTERNAL;
    """)


def decode(rows: list) -> np.ndarray:
    """Rows (term_id, blk, n, payload) -> postings, a (4, k) int64 array of term_id, chunk_key, tf, dl in
    the rows' order."""
    if not rows:
        return np.zeros((4, 0), dtype=np.int64)
    terms = np.fromiter((r[0] for r in rows), np.int64, len(rows))
    blks = np.fromiter((r[1] for r in rows), np.int64, len(rows))
    ns = np.fromiter((r[2] for r in rows), np.int64, len(rows))
    payload = b"".join(r[3] for r in rows)
    if len(payload) == 6 * int(ns.sum()):  # every block narrow: one view of them all
        triples = np.frombuffer(payload, NARROW).reshape(-1, 3)
    else:
        triples = np.concatenate([
            np.frombuffer(r[3], NARROW if len(r[3]) == 6 * r[2] else WIDE).reshape(-1, 3).astype(np.int64)
            for r in rows
        ])
    out = np.empty((4, len(triples)), dtype=np.int64)
    out[0] = np.repeat(terms, ns)
    out[1] = triples[:, 0]
    out[1] += np.repeat(blks << KEY_BITS, ns)
    out[2] = triples[:, 1]
    out[3] = triples[:, 2]
    return out


def encode(postings: np.ndarray) -> list[tuple]:
    """Postings (term_id, chunk_key, tf, dl columns, any order) -> block rows (term_id, blk, n, max_tf,
    min_dl, payload), one per term and key range."""
    if postings.shape[1] == 0:
        return []
    term, key, tf, dl = postings
    blk = key >> KEY_BITS
    order = np.lexsort((key, term, blk))
    term, key, tf, dl, blk = term[order], key[order], tf[order], dl[order], blk[order]
    starts = np.flatnonzero(np.r_[True, (term[1:] != term[:-1]) | (blk[1:] != blk[:-1])])
    ends = np.r_[starts[1:], len(term)]
    max_tf = np.maximum.reduceat(tf, starts)
    min_dl = np.minimum.reduceat(dl, starts)
    wide = np.maximum.reduceat(np.maximum(tf, dl), starts) > NARROW_MAX
    offsets = key - (blk << KEY_BITS)
    narrow = np.column_stack((offsets, np.minimum(tf, NARROW_MAX), np.minimum(dl, NARROW_MAX))).astype(NARROW)
    packed = narrow.tobytes()
    rows = []
    for i, (s, e) in enumerate(zip(starts.tolist(), ends.tolist())):
        if wide[i]:
            payload = np.column_stack((offsets[s:e], tf[s:e], dl[s:e])).astype(WIDE).tobytes()
        else:
            payload = packed[6 * s : 6 * e]
        rows.append((int(term[s]), int(blk[s]), e - s, int(max_tf[i]), int(min_dl[i]), payload))
    return rows


def write(conn, table: str, postings: np.ndarray) -> None:
    rows = encode(postings)
    if not rows:
        return
    with conn.cursor().copy(f"COPY {table} ({_COLUMNS}) FROM STDIN WITH (FORMAT BINARY)") as copy:
        copy.set_types(["integer", "integer", "integer", "integer", "integer", "bytea"])
        for row in rows:
            copy.write_row(row)


def _take(conn, table: str, terms: np.ndarray, blks: np.ndarray) -> np.ndarray:
    """Deletes the blocks (terms[i], blks[i]) and returns their postings."""
    rows = conn.cursor(binary=True).execute(
        f"DELETE FROM {table} b USING unnest(%s::int[], %s::int[]) AS w(term_id, blk)"
        " WHERE b.term_id = w.term_id AND b.blk = w.blk RETURNING b.term_id, b.blk, b.n, b.payload",
        [terms.tolist(), blks.tolist()],
    ).fetchall()
    return decode(rows)


class BlockWriter:
    """The postings of one write transaction. Added postings wait here until their key range is complete
    (or the commit); deletions are applied at commit, each touched block rewritten once."""

    def __init__(self, conn, table: str):
        self._conn = conn
        self._table = table
        self._pending: list[np.ndarray] = []  # (4, k) postings of the ranges not written yet
        self._first_blk: int | None = None  # the range this transaction started in: may hold older postings
        self._gone_keys: list[np.ndarray] = []
        self._gone_blocks: list[np.ndarray] = []  # (2, k): term_id, blk of the blocks that lose postings

    def add(self, postings: np.ndarray) -> None:
        """Postings (term_id, chunk_key, tf, dl) of new chunks, whose keys are above all keys added before."""
        if postings.shape[1] == 0:
            return
        if self._first_blk is None:
            self._first_blk = int(postings[1].min()) >> KEY_BITS
        self._pending.append(postings)
        self._write_ranges_below(int(postings[1].max()) >> KEY_BITS)

    def delete(self, keys: list[int], terms: list[int], blks: list[int]) -> None:
        """Deleted chunks' keys, and the (term_id, blk) blocks that hold their postings."""
        if keys:
            self._gone_keys.append(np.asarray(keys, dtype=np.int64))
            self._gone_blocks.append(np.array([terms, blks], dtype=np.int64))

    def flush(self) -> None:
        """At commit: the pending postings, then the deletions."""
        self._write_ranges_below(None)
        if not self._gone_keys:
            return
        gone = np.unique(np.concatenate(self._gone_keys))
        pairs = np.unique(np.concatenate(self._gone_blocks, axis=1), axis=1)
        for start in range(0, pairs.shape[1], REWRITE_ROWS):
            part = pairs[:, start : start + REWRITE_ROWS]
            kept = _take(self._conn, self._table, part[0], part[1])
            write(self._conn, self._table, kept[:, ~np.isin(kept[1], gone)])
        self._gone_keys, self._gone_blocks = [], []

    def _write_ranges_below(self, blk: int | None) -> None:
        """Writes the pending postings of the ranges below `blk` (all of them for None)."""
        if not self._pending or (blk is not None and int(self._pending[0][1].min()) >> KEY_BITS >= blk):
            return  # (the oldest pending postings have the lowest keys)
        pending = np.concatenate(self._pending, axis=1)
        done = np.ones(pending.shape[1], dtype=bool) if blk is None else (pending[1] >> KEY_BITS) < blk
        ready, self._pending = pending[:, done], [pending[:, ~done]]
        first = self._first_blk
        if int(ready[1].min()) >> KEY_BITS == first:  # merge with the earlier commits' postings in that range
            terms = np.unique(ready[0, (ready[1] >> KEY_BITS) == first])
            older = _take(self._conn, self._table, terms, np.full(len(terms), first))
            ready = np.concatenate([older, ready], axis=1)
        write(self._conn, self._table, ready)


def migrate_postings(conn, postings: str, blocks: str, chunks: str) -> None:
    """Format 1 -> 2 inside the writer's transaction: the blocks built in SQL from the row-per-posting table
    (byte for byte what `encode` writes), which is then dropped. A block is wide when a chunk in it is longer
    than NARROW_MAX tokens (a tf is never above its chunk's length)."""
    create_blocks_table(conn, blocks)
    conn.execute(
        f"CREATE TEMP TABLE funnel_wide_blocks ON COMMIT DROP AS SELECT DISTINCT u.term_id,"
        f" c.chunk_key >> {KEY_BITS} AS blk FROM {chunks} c CROSS JOIN unnest(c.term_ids) AS u(term_id)"
        f" WHERE c.lex_len > {NARROW_MAX}"
    )
    offset = f"(chunk_key & {(1 << KEY_BITS) - 1})"
    for send, wide in (("int2send({}::int2)", "NOT EXISTS"), ("int4send({})", "EXISTS")):
        triple = " || ".join(send.format(value) for value in (offset, "tf", "dl"))
        conn.execute(
            f"INSERT INTO {blocks} ({_COLUMNS})"
            f" SELECT term_id, chunk_key >> {KEY_BITS}, count(*), max(tf), min(dl),"
            f" string_agg({triple}, ''::bytea ORDER BY chunk_key) FROM {postings} p"
            f" WHERE {wide} (SELECT 1 FROM funnel_wide_blocks w"
            f" WHERE w.term_id = p.term_id AND w.blk = p.chunk_key >> {KEY_BITS})"
            f" GROUP BY term_id, chunk_key >> {KEY_BITS}"
        )
    conn.execute(f"DROP TABLE {postings}")
