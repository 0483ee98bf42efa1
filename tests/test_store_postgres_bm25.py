"""PgStore's BM25 on its block postings (postgres_blocks, postgres_bm25), on a real PostgreSQL: the pruned
top n is the exhaustive one to the bit, both are the closed form's, and the blocks stay exact through adds,
deletes and the conversion of a format-1 index. Blocks span 8 chunk keys here: a small corpus fills many."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

psycopg = pytest.importorskip("psycopg")

from funnel.errors import StoreError  # noqa: E402
from funnel.index import postgres_blocks, postgres_bm25  # noqa: E402
from funnel.index.base import Filter  # noqa: E402
from funnel.analyze import lexical_text  # noqa: E402
from funnel.index.bm25_text import Analyzer, score
from funnel.index.postgres import PgStore  # noqa: E402

from helpers import chunk  # noqa: E402
from test_store_contract import EMB, _write  # noqa: E402

VOCABULARY = "heart attack risk cancer cell gene protein dose trial blood sugar brain mouse rat liver".split()
QUERIES = ["heart attack", "mouse brain gene", "blood sugar trial dose", "heart heart cancer risk cell",
           "liver rat protein cell gene heart", "attack"]
FILTERS = [None, Filter(kinds=("code",)), Filter(path_prefix="src/1"),
           Filter(doc_ids=("d3", "d8", "d40", "x1"))]
WIDE = 33_000  # tokens: the chunk's postings do not fit a narrow block


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    monkeypatch.setattr(postgres_blocks, "KEY_BITS", 3)


def _docs(rng: np.random.Generator, ids: list[str]) -> list:
    """Chunks of random texts over a skewed vocabulary; every fifth repeats an earlier text (equal scores)."""
    p = np.linspace(3, 0.2, len(VOCABULARY))
    out, texts = [], []
    for doc_id in ids:
        for ordinal in range(int(rng.integers(1, 3))):
            if texts and len(out) % 5 == 4:
                text = texts[int(rng.integers(len(texts)))]
            else:
                text = " ".join(rng.choice(VOCABULARY, size=int(rng.integers(1, 30)), p=p / p.sum()))
            texts.append(text)
            kind = "code" if rng.random() < 0.3 else "text"
            out.append(chunk(doc_id, ordinal, text, kind=kind, path=f"src/{doc_id[1:]}.py"))
    return out


def _reference(chunks: dict[str, object], query: str, filter: Filter | None) -> list[tuple[str, float]]:
    """The closed form over every chunk (statistics ignore filters), best first."""
    analyzer = Analyzer()
    docs = {cid: Counter(analyzer.terms(lexical_text(c.text))) for cid, c in chunks.items()}
    counted = [d for d in docs.values() if d]
    avgdl = sum(sum(d.values()) for d in counted) / len(counted)
    df = Counter(t for d in counted for t in d)
    terms = analyzer.terms(lexical_text(query))
    scored = []
    for cid, c in chunks.items():
        if filter and not ((not filter.kinds or c.kind in filter.kinds)
                           and (not filter.path_prefix or c.path.startswith(filter.path_prefix))
                           and (not filter.doc_ids or c.doc_id in filter.doc_ids)):
            continue
        s = score(terms, docs[cid], df, len(counted), avgdl)
        if s:
            scored.append((cid, s))
    return sorted(scored, key=lambda x: -x[1])  # stable: equal scores in the order added, as chunk keys


def _same_ranking(got: list[tuple[str, float]], want: list[tuple[str, float]], n: int) -> None:
    """`got` is the head of `want`, up to float noise in the scores and which of the chunks tied for the last
    place it holds."""
    assert len(got) == min(n, len(want))
    assert [s for _, s in got] == pytest.approx([s for _, s in want[:n]], rel=1e-12)
    if got:
        last = got[-1][1]
        assert [c for c, s in got if s > last * (1 + 1e-9)] == [c for c, s in want if s > last * (1 + 1e-9)]
        tied = [{c for c, s in hits if abs(s - last) <= 1e-9 * last} for hits in (got, want)]
        assert tied[0] <= tied[1]


def _check_searches(store: PgStore, chunks: dict, monkeypatch) -> int:
    """Every query and filter, pruned (pilots from one posting to all) and exhaustive: the same chunks in the
    same order with the same scores, and the closed form's. Returns how many searches pruned a term."""
    exhaustive_lists = []
    real = postgres_bm25._exhaustive
    monkeypatch.setattr(postgres_bm25, "_exhaustive",
                        lambda lists: exhaustive_lists.append(len(lists)) or real(lists))
    pruned = 0
    for query in QUERIES:
        for f in FILTERS:
            monkeypatch.setattr(postgres_bm25, "PRUNE_MIN_POSTINGS", 10**9)
            plain = [(h.chunk.chunk_id, h.score) for h in store.search_lexical(query, 7, f)]
            _same_ranking(plain, _reference(chunks, query, f), 7)
            for pilot in (1, 3, 10_000):
                monkeypatch.setattr(postgres_bm25, "PRUNE_MIN_POSTINGS", 0)
                monkeypatch.setattr(postgres_bm25, "PILOT_POSTINGS", pilot)
                exhaustive_lists.clear()
                got = [(h.chunk.chunk_id, h.score) for h in store.search_lexical(query, 7, f)]
                assert got == plain, (query, f, pilot)  # to the bit, ties in chunk-key order
                pruned += any(k < len(set(Analyzer().terms(query))) for k in exhaustive_lists)
    return pruned


def _check_blocks(dsn: str) -> None:
    """Each block holds exactly its term's postings in its key range, sorted, with true n, max tf and min dl;
    together they are the postings of the chunks in the table."""
    with psycopg.connect(dsn) as conn:
        rows = conn.cursor(binary=True).execute(
            "SELECT term_id, blk, n, payload, max_tf, min_dl FROM funnel_blocks ORDER BY term_id, blk"
        ).fetchall()
        chunks = conn.execute("SELECT chunk_key, text, lex_len FROM funnel_chunks").fetchall()
        names = dict(conn.execute("SELECT term_id, term FROM funnel_terms").fetchall())
    bits = postgres_blocks.KEY_BITS
    for term_id, blk, n, payload, max_tf, min_dl in rows:
        term, keys, tf, dl = postgres_blocks.decode([(term_id, blk, n, payload)])
        assert len(keys) == n > 0 and (keys >> bits == blk).all() and (np.diff(keys) > 0).all()
        assert (max_tf, min_dl) == (tf.max(), dl.min())
        assert len(payload) == (6 if max(tf.max(), dl.max()) <= postgres_blocks.NARROW_MAX else 12) * n
    postings = postgres_blocks.decode([r[:4] for r in rows]).T.tolist()
    got = {(names[t], k): (tf, dl) for t, k, tf, dl in postings}
    analyzer = Analyzer()
    want = {(term, key): (tf, lex_len) for key, text, lex_len in chunks
            for term, tf in Counter(analyzer.terms(lexical_text(text))).items()}
    assert got == want


def test_pruned_search_is_the_exhaustive_one_through_adds_and_deletes(pg_dsn, monkeypatch):
    rng = np.random.default_rng(11)
    store = PgStore(pg_dsn)
    live: dict[str, object] = {}

    def commit(add: list, delete: set[str] = frozenset()) -> None:
        with store.transaction(EMB.name, EMB.dim) as tx:
            tx.delete_documents(set(delete))
            for start in range(0, len(add), 13):  # batches that straddle block boundaries
                tx.add(add[start : start + 13], EMB.embed([c.text for c in add[start : start + 13]]))
        for cid in [cid for cid, c in live.items() if c.doc_id in delete]:
            del live[cid]
        live.update({c.chunk_id: c for c in add})

    pruned = 0
    commit(_docs(rng, [f"d{i}" for i in range(60)]))
    pruned += _check_searches(store, live, monkeypatch)
    wide = chunk("x1", 0, " ".join(["heart"] * WIDE + ["cell"] * 3), path="src/1x.py")
    commit([*_docs(rng, [f"d{i}" for i in range(10, 25)] + [f"n{i}" for i in range(20)]), wide],
           delete={f"d{i}" for i in range(0, 25, 2)} | {f"d{i}" for i in range(10, 25)})
    _check_blocks(pg_dsn)
    pruned += _check_searches(store, live, monkeypatch)
    commit([], delete={"x1", "d31", "d33", "n4"})  # deletes alone, the wide block's chunk among them
    commit(_docs(rng, ["z1", "z2"]), delete={"z1", "d40", "d41"})  # added and deleted in one transaction
    _check_blocks(pg_dsn)
    pruned += _check_searches(store, live, monkeypatch)
    assert pruned > 20  # the MaxScore path did leave terms out


def test_a_format_1_index_is_converted_by_its_next_write(pg_dsn):
    """An index of the previous format (a row per posting) still answers everything but BM25, which says
    in one line what to do; the next write converts it in place, to the blocks a fresh build writes."""
    rng = np.random.default_rng(5)
    store = PgStore(pg_dsn)
    chunks = _docs(rng, [f"d{i}" for i in range(40)]) + [chunk("x1", 0, "heart " * WIDE + "cell")]
    _write(store, chunks)
    before = {q: [(h.chunk.chunk_id, h.score) for h in store.search_lexical(q, 10)] for q in QUERIES}
    select = "SELECT term_id, blk, n, payload, max_tf, min_dl FROM funnel_blocks ORDER BY term_id, blk"
    with psycopg.connect(pg_dsn) as conn:
        blocks = conn.cursor(binary=True).execute(select).fetchall()
        conn.execute("CREATE TABLE funnel_postings (term_id integer NOT NULL, chunk_key integer NOT NULL,"
                     " tf integer NOT NULL, dl integer NOT NULL,"
                     " PRIMARY KEY (term_id, chunk_key) INCLUDE (tf, dl))")
        with conn.cursor().copy("COPY funnel_postings FROM STDIN") as copy:
            for row in postgres_blocks.decode([b[:4] for b in blocks]).T.tolist():
                copy.write_row(row)
        conn.execute("DROP TABLE funnel_blocks")
        conn.execute("UPDATE funnel_meta SET format = 1")
    old = PgStore(pg_dsn)
    assert old.info().chunks == len(chunks)
    assert old.search_dense(EMB.embed(["heart"])[0], 3)
    with pytest.raises(StoreError, match="format 1 .* any ingest into it converts it") as refused:
        old.search_lexical("heart attack", 3)
    assert "\n" not in str(refused.value)
    with store.transaction(EMB.name, EMB.dim):
        pass  # a write with nothing to write
    with psycopg.connect(pg_dsn) as conn:
        assert conn.cursor(binary=True).execute(select).fetchall() == blocks  # byte for byte
        gone = conn.execute("SELECT to_regclass('funnel_postings'), format FROM funnel_meta").fetchone()
        assert gone == (None, 2)
    assert {q: [(h.chunk.chunk_id, h.score) for h in old.search_lexical(q, 10)] for q in QUERIES} == before
