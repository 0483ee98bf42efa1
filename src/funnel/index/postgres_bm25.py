"""BM25 over PostgreSQL's block postings (`postgres_blocks`): the exact top n, scored in numpy.

The query terms' posting lists are read in one query (a few rows per term) and scored here; the
statistics come from `postgres_tables`, the analyser and formula are `bm25_text`'s. Each chunk's score is
summed over the query terms in term_id order, so equal scores are equal bit for bit and ties fall to the
lower chunk key."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from funnel.index.base import Filter
from funnel.index.bm25_text import B, K1, idf
from funnel.index.postgres_blocks import decode
from funnel.index.postgres_tables import _SELECT, where_sql

# A filtered search checks the best 4n chunks against the filter first, then 8 times as many each round.
FILTER_FIRST = 4

_C1, _C2, _C3 = K1 + 1, K1 * (1 - B), K1 * B  # as the SQL of format 1 wrote them, so scores match to the bit


@dataclass(frozen=True)
class QueryTerm:
    term_id: int
    df: int
    w: float  # qtf * idf


class _Postings:
    """One query term's postings: chunk keys ascending, their tf and dl."""

    def __init__(self, q: QueryTerm, postings: np.ndarray, avgdl: float):
        self.term_id = q.term_id
        self._w = q.w
        self._avgdl = avgdl
        self.keys = postings[1]
        self._tf = postings[2]
        self._dl = postings[3]

    def __len__(self) -> int:
        return len(self.keys)

    def _score(self, tf: np.ndarray, dl: np.ndarray) -> np.ndarray:
        tf = tf.astype(np.float64)
        return self._w * tf * _C1 / (tf + _C2 + _C3 * dl / self._avgdl)

    def scores(self) -> np.ndarray:
        """Every posting's score; looked up in a table of the (tf, dl) pairs when that is the smaller."""
        tfs, dls = int(self._tf.max()) + 1, int(self._dl.max()) + 1
        if tfs * dls > len(self.keys):
            return self._score(self._tf, self._dl)
        table = self._score(np.repeat(np.arange(tfs), dls), np.tile(np.arange(dls), tfs))
        return table[self._tf * dls + self._dl]


def top_n(conn, t: dict[str, str], counts: Counter[str], n: int, filter: Filter | None) -> list:
    """The best n chunks by BM25 for a query's term counts, exactly: rows of the chunks' columns and the
    score, best first. Its queries should share a snapshot (a REPEATABLE READ transaction)."""
    lists = _read(conn, t, counts)
    if not lists:
        return []
    if where_sql(filter)[1]:
        keys, scores = _filtered(conn, t["chunks"], lists, n, filter)
    else:
        keys, scores = _best(*_exhaustive(lists), n)
    if not len(keys):
        return []
    rows = conn.execute(
        f"SELECT {_SELECT}, c.chunk_key FROM {t['chunks']} c WHERE c.chunk_key = ANY(%s)", [keys.tolist()]
    ).fetchall()
    by_key = {r[-1]: r[:-1] for r in rows}
    return [(*by_key[k], s) for k, s in zip(keys.tolist(), scores.tolist())]


def _read(conn, t: dict[str, str], counts: Counter[str]) -> list[_Postings]:
    """The query terms' statistics and postings, in one query; in term_id order."""
    rows = conn.cursor(binary=True).execute(
        "SELECT b.term_id, b.blk, b.n, b.payload, b.max_tf, b.min_dl,"
        " t.term, t.df, m.bm25_docs, m.bm25_tokens"
        f" FROM {t['terms']} t CROSS JOIN {t['meta']} m JOIN {t['blocks']} b ON b.term_id = t.term_id"
        " WHERE t.term = ANY(%s) AND t.df > 0 ORDER BY b.term_id, b.blk",
        [list(counts)],
    ).fetchall()
    if not rows:
        return []
    docs, tokens = rows[0][8], rows[0][9]
    avgdl = tokens / max(docs, 1)
    postings = decode(rows)
    row_terms, ns = (np.fromiter((r[i] for r in rows), np.int64, len(rows)) for i in (0, 2))
    offsets = np.r_[0, np.cumsum(ns)]
    starts = np.flatnonzero(np.r_[True, row_terms[1:] != row_terms[:-1]]).tolist()
    lists = []
    for s, e in zip(starts, [*starts[1:], len(rows)]):
        term, term_id, df = rows[s][6], rows[s][0], rows[s][7]
        q = QueryTerm(term_id, df, counts[term] * idf(df, docs))
        lists.append(_Postings(q, postings[:, offsets[s] : offsets[e]], avgdl))
    return lists


def _exhaustive(lists: list[_Postings]) -> tuple[np.ndarray, np.ndarray]:
    """Every chunk holding a term of `lists`, ascending, and its score over those terms."""
    total = np.bincount(np.concatenate([p.keys for p in lists]), np.concatenate([p.scores() for p in lists]))
    keys = np.flatnonzero(total)  # every posting scores above 0
    return keys, total[keys]


def _best(keys: np.ndarray, scores: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The first n by score, then chunk key."""
    if len(scores) > n:
        keep = scores >= np.partition(scores, len(scores) - n)[len(scores) - n]
        keys, scores = keys[keep], scores[keep]
    order = np.lexsort((keys, -scores))[:n]
    return keys[order], scores[order]


def _filtered(conn, chunks: str, lists: list[_Postings], n: int,
              filter: Filter) -> tuple[np.ndarray, np.ndarray]:
    """The best n chunks that pass `filter`: every chunk is scored, and the best are checked against the
    filter in growing rounds, in order, until n pass."""
    keys, scores = _exhaustive(lists)
    where, params = where_sql(filter, "c")
    passed: list[int] = []
    checked, want = 0, FILTER_FIRST * n
    while True:
        top, top_scores = _best(keys, scores, want)
        fresh = top[checked:].tolist()
        ok = {k for (k,) in conn.execute(
            f"SELECT c.chunk_key FROM {chunks} c WHERE c.chunk_key = ANY(%s) AND {where}", [fresh, *params]
        ).fetchall()}
        passed.extend(i for i, k in enumerate(fresh, start=checked) if k in ok)
        if len(passed) >= n or len(top) == len(keys):
            chosen = np.asarray(passed[:n], dtype=np.int64)
            return top[chosen], top_scores[chosen]
        checked, want = len(top), want * 8
