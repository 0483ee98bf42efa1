"""BM25 over PostgreSQL's block postings (`postgres_blocks`): the exact top n, scored in numpy.

The query terms' posting lists are read in one query (a few rows per term) and scored here; the
statistics come from `postgres_tables`, the analyser and formula are `bm25_text`'s. Each chunk's score is
summed over the query terms in term_id order, whichever way it is reached, so equal scores are equal bit
for bit and ties fall to the lower chunk key: the pruned top n is the exhaustive one, scores included."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from funnel.index.base import Filter
from funnel.index.bm25_text import B, K1, idf
from funnel.index.postgres_blocks import decode
from funnel.index.postgres_tables import _SELECT, where_sql

# Below this many postings in all, every chunk is scored; beyond, MaxScore.
PRUNE_MIN_POSTINGS = 100_000
# The MaxScore pilot scores the chunks of the rarest terms holding about this many postings.
PILOT_POSTINGS = 5_000
# Bounds are compared with this much room, so float rounding never prunes a chunk that ties the n-th.
SLACK = 1e-9
# A term's scores for some chunks are found by binary search when the term has this many times more postings
# than there are chunks; else in one pass over its postings.
SEARCH_RATIO = 16
# A filtered search checks the best 4n chunks against the filter first, then 8 times as many each round.
FILTER_FIRST = 4

_C1, _C2, _C3 = K1 + 1, K1 * (1 - B), K1 * B  # as the SQL of format 1 wrote them, so scores match to the bit


@dataclass(frozen=True)
class QueryTerm:
    term_id: int
    df: int
    w: float  # qtf * idf


class _Postings:
    """One query term's postings: chunk keys ascending, their tf and dl, and the most one can score."""

    def __init__(self, q: QueryTerm, postings: np.ndarray, avgdl: float, max_tf: np.ndarray,
                 min_dl: np.ndarray):
        self.term_id = q.term_id
        self._w = q.w
        self._avgdl = avgdl
        self.keys = postings[1]
        self._tf = postings[2]
        self._dl = postings[3]
        self.bound = float(self._score(max_tf, min_dl).max())  # per block (max tf, min dl): a true bound

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

    def add_to(self, total: np.ndarray, keys: _Keys) -> None:
        """Adds this term's score to total[i] for each keys[i] whose chunk holds the term."""
        if not len(keys.keys):
            return
        if len(keys.keys) * SEARCH_RATIO < len(self.keys):  # few keys: binary searches
            idx = np.minimum(np.searchsorted(self.keys, keys.keys), len(self.keys) - 1)
            held = self.keys[idx] == keys.keys
            total[held] += self._score(self._tf[idx[held]], self._dl[idx[held]])
        else:  # many: one pass over the postings
            mine = self.keys[: np.searchsorted(self.keys, keys.keys[-1], side="right")]
            where = keys.positions()[mine]
            hit = np.flatnonzero(where >= 0)
            total[where[hit]] += self._score(self._tf[hit], self._dl[hit])


class _Keys:
    """Sorted chunk keys, and (made when first asked) where each key is among them."""

    def __init__(self, keys: np.ndarray):
        self.keys = keys
        self._positions: np.ndarray | None = None

    def positions(self) -> np.ndarray:
        """positions()[k] is the index of chunk key k in keys, or -1."""
        if self._positions is None:
            self._positions = np.full(int(self.keys[-1]) + 1, -1, dtype=np.int64)
            self._positions[self.keys] = np.arange(len(self.keys))
        return self._positions


def top_n(conn, t: dict[str, str], counts: Counter[str], n: int, filter: Filter | None) -> list:
    """The best n chunks by BM25 for a query's term counts, exactly: rows of the chunks' columns and the
    score, best first. Its queries should share a snapshot (a REPEATABLE READ transaction)."""
    lists = _read(conn, t, counts)
    if not lists:
        return []
    if where_sql(filter)[1]:
        keys, scores = _filtered(conn, t["chunks"], lists, n, filter)
    elif sum(len(p) for p in lists) <= PRUNE_MIN_POSTINGS:
        keys, scores = _best(*_exhaustive(lists), n)
    else:
        keys, scores = _maxscore(lists, n)
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
    row_terms, ns, max_tf, min_dl = (np.fromiter((r[i] for r in rows), np.int64, len(rows))
                                     for i in (0, 2, 4, 5))
    offsets = np.r_[0, np.cumsum(ns)]
    starts = np.flatnonzero(np.r_[True, row_terms[1:] != row_terms[:-1]]).tolist()
    lists = []
    for s, e in zip(starts, [*starts[1:], len(rows)]):
        term, term_id, df = rows[s][6], rows[s][0], rows[s][7]
        q = QueryTerm(term_id, df, counts[term] * idf(df, docs))
        lists.append(_Postings(q, postings[:, offsets[s] : offsets[e]], avgdl, max_tf[s:e], min_dl[s:e]))
    return lists


def _exhaustive(lists: list[_Postings]) -> tuple[np.ndarray, np.ndarray]:
    """Every chunk holding a term of `lists`, ascending, and its score over those terms."""
    total = np.bincount(np.concatenate([p.keys for p in lists]), np.concatenate([p.scores() for p in lists]))
    keys = np.flatnonzero(total)  # every posting scores above 0
    return keys, total[keys]


def _score(lists: list[_Postings], keys: np.ndarray) -> np.ndarray:
    """The full scores of `keys` (sorted), summed in the same order as `_exhaustive` sums them."""
    total, found = np.zeros(len(keys)), _Keys(keys)
    for p in lists:
        p.add_to(total, found)
    return total


def _best(keys: np.ndarray, scores: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The first n by score, then chunk key."""
    if len(scores) > n:
        keep = scores >= np.partition(scores, len(scores) - n)[len(scores) - n]
        keys, scores = keys[keep], scores[keep]
    order = np.lexsort((keys, -scores))[:n]
    return keys[order], scores[order]


def _maxscore(lists: list[_Postings], n: int) -> tuple[np.ndarray, np.ndarray]:
    """MaxScore: a pilot over the rarest terms finds n chunks scoring at least theta. The terms whose bounds
    sum below theta cannot lift a chunk holding none of the others into the top n: only the chunks of the
    other (essential) terms are scored, and the rest's scores are added, highest bound first, for the
    chunks that can still reach theta."""
    pilot, budget = [], 0
    for p in sorted(lists, key=lambda p: (len(p), p.term_id)):
        if pilot and budget + len(p) > PILOT_POSTINGS:
            break
        pilot.append(p)
        budget += len(p)
    found = np.unique(np.concatenate([p.keys for p in pilot]))
    if len(found) < n:
        return _best(*_exhaustive(lists), n)
    theta = float(np.partition(_score(lists, found), len(found) - n)[len(found) - n]) * (1 - SLACK)
    optional, bound = [], 0.0  # ascending bounds
    for p in sorted(lists, key=lambda p: (p.bound, p.term_id)):
        if bound + p.bound >= theta:
            break
        optional.append(p)
        bound += p.bound
    if not optional or len(optional) == len(lists):  # (all of them: only if float rounding says so)
        return _best(*_exhaustive(lists), n)
    keys, partial = _exhaustive([p for p in lists if all(p is not o for o in optional)])
    while optional:
        keep = partial + sum(p.bound for p in optional) >= theta
        keys, partial = keys[keep], partial[keep]
        optional.pop().add_to(partial, _Keys(keys))
    keys = keys[partial >= theta]
    return _best(keys, _score(lists, keys), n)


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
