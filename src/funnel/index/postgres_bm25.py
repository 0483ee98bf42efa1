"""BM25 over PostgreSQL's own postings: the exact top n, reading as few postings as it can (MaxScore).
The statistics come from `postgres_tables`; the analyser and formula are `bm25_text`'s."""

from __future__ import annotations

from dataclasses import dataclass

from funnel.index.base import Filter
from funnel.index.bm25_text import B, K1
from funnel.index.postgres_tables import _SELECT, where_sql

# BM25 reads every posting of the query's terms when they hold at most this many in all; beyond, MaxScore.
PRUNE_MIN_POSTINGS = 50_000
# The MaxScore pilot scores the chunks of the rarest terms holding about this many postings.
PILOT_POSTINGS = 20_000


@dataclass(frozen=True)
class QueryTerm:
    term_id: int
    df: int
    w: float  # qtf * idf: the most a term can add is w * (k1 + 1)


def top_n(conn, t: dict[str, str], terms: list[QueryTerm], avgdl: float, n: int, filter: Filter | None) -> list:
    """The best n chunks by BM25, exactly, reading as few postings as it can (MaxScore).

    A term's contribution is below w * (k1 + 1) whatever its tf. So once some n chunks are known to
    score at least theta, the chunks that hold none but the most common terms, whose bounds sum below
    theta, cannot enter the top n: their long posting lists are only probed for the candidates that
    the other terms found. A pilot over the rarest terms gives theta; the common terms whose bounds fit
    under it are deferred. Small queries (few postings in all) take one plain pass."""
    if sum(q.df for q in terms) <= PRUNE_MIN_POSTINGS:
        return _score(conn, t, terms, {q.term_id for q in terms}, avgdl, n, filter)
    common_first = sorted(terms, key=lambda q: (-q.df, q.term_id))
    pilot, budget = set(), 0
    for q in reversed(common_first):  # the rarest terms, up to a postings budget (at least one)
        if pilot and budget + q.df > PILOT_POSTINGS:
            break
        pilot.add(q.term_id)
        budget += q.df
    rows = _score(conn, t, terms, pilot, avgdl, n, filter)
    theta = float(rows[-1][-1]) if len(rows) == n else 0.0
    deferred, bound = set(), 0.0
    for q in common_first:
        if bound + q.w * (K1 + 1) >= theta:
            break
        deferred.add(q.term_id)
        bound += q.w * (K1 + 1)
    essential = {q.term_id for q in terms} - deferred
    if essential <= pilot:  # the pilot's candidates already include every chunk that can make the top n
        return rows
    return _score(conn, t, terms, essential, avgdl, n, filter)

def _score(conn, t: dict[str, str], terms: list[QueryTerm], essential: set[int], avgdl: float, n: int,
           filter: Filter | None) -> list:
    """Full BM25 scores of the chunks holding an essential term (every query term counts), best n."""
    where, params = where_sql(filter, "f")
    keep = f"JOIN {t['chunks']} f ON f.chunk_key = e.chunk_key AND {where}" if params else ""
    sql = f"""
        WITH q AS MATERIALIZED (
            SELECT * FROM unnest(%s::int[], %s::float8[], %s::bool[]) AS q(term_id, w, essential)),
        cand AS MATERIALIZED (
            SELECT DISTINCT e.chunk_key FROM q JOIN {t['postings']} e ON e.term_id = q.term_id {keep}
            WHERE q.essential),
        s AS (SELECT p.chunk_key,
                     sum(q.w * p.tf * {K1 + 1}::float8
                         / (p.tf + {K1 * (1 - B)}::float8 + {K1 * B}::float8 * p.dl / %s::float8)) AS score
              FROM cand CROSS JOIN q
              JOIN {t['postings']} p ON p.term_id = q.term_id AND p.chunk_key = cand.chunk_key
              GROUP BY p.chunk_key ORDER BY score DESC, p.chunk_key LIMIT %s)
        SELECT {_SELECT}, s.score FROM s JOIN {t['chunks']} c ON c.chunk_key = s.chunk_key
        ORDER BY s.score DESC, s.chunk_key"""
    if len(essential) == len(terms):  # nothing deferred: one pass over the postings, no probing
        sql = f"""
            WITH q AS MATERIALIZED (
                SELECT * FROM unnest(%s::int[], %s::float8[], %s::bool[]) AS q(term_id, w, essential)),
            s AS (SELECT e.chunk_key,
                         sum(q.w * e.tf * {K1 + 1}::float8
                             / (e.tf + {K1 * (1 - B)}::float8 + {K1 * B}::float8 * e.dl / %s::float8)) AS score
                  FROM q JOIN {t['postings']} e ON e.term_id = q.term_id {keep}
                  GROUP BY e.chunk_key ORDER BY score DESC, e.chunk_key LIMIT %s)
            SELECT {_SELECT}, s.score FROM s JOIN {t['chunks']} c ON c.chunk_key = s.chunk_key
            ORDER BY s.score DESC, s.chunk_key"""
        args = [[q.term_id for q in terms], [q.w for q in terms], [True] * len(terms), avgdl, *params, n]
    else:
        args = [[q.term_id for q in terms], [q.w for q in terms], [q.term_id in essential for q in terms],
                *params, avgdl, n]
    return conn.execute(sql, args).fetchall()
