"""Metrics and conversation memory, in one process and shared through PostgreSQL (`funnel serve --database`):
one contract for both, then what only the shared kind promises (two processes act as one service, a
database outage loses no counts, no password in any error). Two `Database`s on one database stand for two
processes."""

from __future__ import annotations

import logging
import socket
import threading
import time
from contextlib import contextmanager

import pytest

from funnel.apps.state.conversations import (ANSWER_CHARS, CITED_TEXT_CHARS, TITLE_CHARS, CitedPassage,
                                             EmbeddedConversations, Turn)
from funnel.apps.state.metrics import STAGES, EmbeddedMetrics
from funnel.apps.state import db as state_db
from funnel.apps.state.conversations import PostgresConversations, open_conversations
from funnel.apps.state.db import Database, DatabaseUnavailable
from funnel.apps.state.metrics import PostgresMetrics, open_metrics
from funnel.errors import StoreError
from pg_support import PASSWORD

pytest.importorskip("psycopg_pool")


@pytest.fixture(params=["embedded", "postgres"])
def database(request):
    """None (the in-process kind) or a Database on a fresh PostgreSQL database (the shared kind)."""
    if request.param == "embedded":
        yield None
        return
    db = Database(request.getfixturevalue("pg_dsn"))
    yield db
    db.close()


@pytest.fixture
def two_processes(pg_dsn):
    dbs = Database(pg_dsn), Database(pg_dsn)
    yield dbs
    for db in dbs:
        db.close()


C = "default"  # the collection the conversations belong to


def counts(snapshot: dict) -> dict[tuple[str, str, int], int]:
    return {(r["method"], r["route"], r["status"]): r["count"] for r in snapshot["requests"]}


def questions(history: tuple[Turn, ...]) -> list[str]:
    return [t.question for t in history]


# --- the contract: both kinds -----------------------------------------------------------------------


def test_the_factories_choose_by_database(database, tmp_path):
    embedded, shared = (EmbeddedMetrics, EmbeddedConversations), (PostgresMetrics, PostgresConversations)
    kinds = embedded if database is None else shared
    assert (type(open_metrics(database)), type(open_conversations(database, tmp_path))) == kinds


def test_requests_are_counted_per_method_route_and_status(database):
    metrics = open_metrics(database)
    for status in (200, 200, 404):
        metrics.count_request("POST", "/v1/collections/{name}/search", status)
    metrics.count_request("GET", "unmatched", 404)
    snapshot = metrics.snapshot()
    metrics.close()
    assert counts(snapshot) == {
        ("GET", "unmatched", 404): 1,
        ("POST", "/v1/collections/{name}/search", 200): 2,
        ("POST", "/v1/collections/{name}/search", 404): 1,
    }
    assert snapshot["requests"][0]["method"] == "GET"  # sorted
    assert snapshot["requests_total"] == 4 and snapshot["uptime_s"] >= 0


def test_latency_is_the_nearest_rank_over_each_stages_last_window(database):
    metrics = open_metrics(database, window=4)
    for n, ms in enumerate([60.0, 10.0, 50.0, 20.0, 40.0, 30.0]):
        metrics.observe({"first_stage": ms, "rewrite": 7.0} if n == 5 else {"first_stage": ms})
        if n % 2 and isinstance(metrics, PostgresMetrics):
            metrics.flush()  # some in the database, some still in this process
    latency = metrics.snapshot()["latency_ms"]
    metrics.close()
    assert list(latency) == [*STAGES, "rewrite"]  # the known stages first, in pipeline order
    # The last four: 50, 20, 40, 30; nearest rank: p50 the 2nd smallest, p95 the 4th.
    assert latency["first_stage"] == {"count": 4, "p50_ms": 30.0, "p95_ms": 50.0}
    assert latency["rewrite"] == {"count": 1, "p50_ms": 7.0, "p95_ms": 7.0}
    assert latency["generate"] == {"count": 0, "p50_ms": None, "p95_ms": None}


def test_conversations_are_bounded(database, tmp_path):
    conversations = open_conversations(database, tmp_path, max_conversations=3, max_turns=2, max_chars=100)
    for n in range(5):
        conversations.add(C, f"c{n}", Turn("q", "q", "a"))
    assert len(conversations) == 3 and conversations.history(C, "c0") == ()
    for n in range(4):
        conversations.add(C, "c4", Turn(f"q{n}", f"q{n}", "a" * 10))
    assert questions(conversations.history(C, "c4")) == ["q2", "q3"]
    conversations.add(C, "c4", Turn("long", "long", "b" * 95))  # 99 characters: the turn before it goes
    assert questions(conversations.history(C, "c4")) == ["long"]
    conversations.add(C, "c4", Turn("huge", "huge", "c" * 500))  # over the limit alone: still remembered
    assert questions(conversations.history(C, "c4")) == ["huge"]


def test_forgetting_never_crosses_a_collection_or_another_key(database, tmp_path):
    """Issue 40: the bound was global, so one collection's reader flooding new conversations forgot every
    other collection's. Now a key's flood forgets its own first, then its collection's, never another's."""
    conversations = open_conversations(database, tmp_path, max_conversations=5, max_per_owner=3)
    conversations.add("b", "b-chat", Turn("qb", "qb", "x"), owner="key-b")
    conversations.add("a", "a-chat", Turn("qa", "qa", "x"), owner="key-a2")
    for n in range(12):
        conversations.add("a", f"flood{n}", Turn("q", "q", "x"), owner="key-a")
    assert {c.id for c in conversations.list("a")} == {"a-chat", "flood9", "flood10", "flood11"}
    assert questions(conversations.history("b", "b-chat")) == ["qb"]
    assert conversations.owner("a", "flood11") == "key-a" and conversations.owner("a", "gone") is None
    for n in range(3):  # three more keys: past the collection's bound its least recently used go
        conversations.add("a", f"other{n}", Turn("q", "q", "x"), owner=f"key-o{n}")
    assert len(conversations.list("a")) == 5 and conversations.history("a", "a-chat") == ()
    assert questions(conversations.history("b", "b-chat")) == ["qb"]


def test_a_service_without_keys_is_bounded_per_collection_only(database, tmp_path):
    conversations = open_conversations(database, tmp_path, max_conversations=4, max_per_owner=2)
    for n in range(6):
        conversations.add(C, f"c{n}", Turn("q", "q", "x"))  # owner: "open"
    assert len(conversations.list(C)) == 4


def test_reading_a_conversation_keeps_it_from_being_forgotten(database, tmp_path):
    conversations = open_conversations(database, tmp_path, max_conversations=2)
    conversations.add(C, "a", Turn("qa", "qa", "x"))
    conversations.add(C, "b", Turn("qb", "qb", "x"))
    assert questions(conversations.history(C, "a")) == ["qa"]
    conversations.add(C, "c", Turn("qc", "qc", "x"))
    assert (conversations.history(C, "b"), questions(conversations.history(C, "a"))) == ((), ["qa"])


def test_a_turn_is_remembered_cut_to_size_and_without_nul(database, tmp_path):
    conversations = open_conversations(database, tmp_path, max_chars=50)
    assert conversations.history(C, "never-seen") == ()
    conversations.add(C, "c", Turn("q\x00" + "w" * 80, "search\x00 query", "a" * (ANSWER_CHARS + 10)))
    (turn,) = conversations.history(C, "c")
    assert turn == Turn("q" + "w" * 49, "search query", "a" * ANSWER_CHARS)


def test_a_conversation_is_named_by_its_collection_and_id(database, tmp_path):
    conversations = open_conversations(database, tmp_path)
    conversations.add("alpha", "c1", Turn("Who is the CEO of Zentara Robotics?", "CEO Zentara", "Iris Kallas."))
    assert conversations.history("beta", "c1") == ()  # another collection's id reads nothing
    assert conversations.get("beta", "c1") is None and conversations.rename("beta", "c1", "x") is None
    assert conversations.delete("beta", "c1") is False
    conversations.add("beta", "c1", Turn("What is the leverage limit?", "leverage limit", "2x."))
    assert questions(conversations.history("alpha", "c1")) == ["Who is the CEO of Zentara Robotics?"]
    assert questions(conversations.history("beta", "c1")) == ["What is the leverage limit?"]
    conversations.forget_collection("beta")
    assert conversations.list("beta") == [] and len(conversations.history("alpha", "c1")) == 1


def test_conversations_are_listed_newest_first_in_pages_with_titles_and_turns(database, tmp_path):
    clock = iter(range(1_800_000_000, 1_800_000_100))
    conversations = open_conversations(database, tmp_path)
    conversations._clock = lambda: float(next(clock))
    long_question = "What does the investment policy say about " + "very " * 30 + "long questions?"
    conversations.add(C, "old", Turn(long_question, "q", "a"))
    conversations.add(C, "new", Turn("Second?", "q", "a"))
    cited = CitedPassage(1, "doc#0", "doc", "policy.pdf", "Policy", "p.2", "Leverage is capped" * 50, 2)
    conversations.add(C, "old", Turn("And then?", "q", "It is capped [1].", (cited,)))
    listed = conversations.list(C)
    assert [c.id for c in listed] == ["old", "new"]  # "old" was updated last
    old = listed[0]
    assert old.turns == 2 and old.title.endswith("…") and len(old.title) <= TITLE_CHARS
    assert old.title.startswith("What does the investment policy say about very")
    assert old.created_at == "2027-01-15T08:00:00+00:00" and old.updated_at == "2027-01-15T08:00:02+00:00"
    assert [c.id for c in conversations.list(C, limit=1, offset=1)] == ["new"]
    assert conversations.list(C, limit=1, offset=2) == []
    found = conversations.get(C, "old")
    assert found.summary == old and questions(found.turns) == [long_question, "And then?"]
    (kept,) = found.turns[1].citations
    assert kept.path == "policy.pdf" and kept.page == 2 and len(kept.text) == CITED_TEXT_CHARS
    renamed = conversations.rename(C, "old", "  Leverage\nlimits  ")
    assert renamed.title == "Leverage limits" and conversations.list(C)[0].title == "Leverage limits"
    assert conversations.delete(C, "old") is True and conversations.get(C, "old") is None
    assert [c.id for c in conversations.list(C)] == ["new"] and len(conversations) == 1


def test_an_embedded_conversation_outlives_a_restart(tmp_path):
    open_conversations(None, tmp_path).add(C, "c", Turn("q1", "q1", "a1"))
    again = open_conversations(None, tmp_path)  # a new process on the same data dir
    assert questions(again.history(C, "c")) == ["q1"] and (tmp_path / "conversations.sqlite").is_file()


@pytest.mark.parametrize("spoil", ["folder is a file", "not sqlite", "file is a folder"])
def test_an_embedded_store_that_cannot_be_used_is_a_one_line_store_error(tmp_path, spoil):
    path = tmp_path / "conversations.sqlite"
    if spoil == "folder is a file":
        (tmp_path / "data").write_text("x")
        path = tmp_path / "data" / "conversations.sqlite"
    elif spoil == "not sqlite":
        path.write_bytes(b"this is no database " * 100)
    else:  # (a read-only file would do, but tests may run as root, who writes it anyway)
        path.mkdir()
    conversations = EmbeddedConversations(path)
    for call in (lambda: conversations.add(C, "c", Turn("q", "q", "a")), lambda: conversations.history(C, "c"),
                 lambda: conversations.list(C)):
        with pytest.raises(StoreError) as caught:
            call()
        assert "\n" not in str(caught.value) and tmp_path.name in str(caught.value)


# --- shared: several processes are one service -----------------------------------------------------


def test_every_process_shows_the_whole_services_counts(two_processes):
    a, b = (PostgresMetrics(db) for db in two_processes)
    a.count_request("GET", "/health", 200)
    a.count_request("GET", "/health", 200)
    a.observe({"rerank": 5.0})
    a.flush()
    b.count_request("GET", "/health", 200)  # not written yet: the snapshot adds what b holds
    b.observe({"rerank": 15.0})
    from_b = b.snapshot()
    from_a = a.snapshot()  # b's snapshot wrote b's counts
    for metrics in (a, b):
        metrics.close()
    for snapshot in (from_a, from_b):
        assert counts(snapshot) == {("GET", "/health", 200): 3}
        assert snapshot["latency_ms"]["rerank"] == {"count": 2, "p50_ms": 5.0, "p95_ms": 15.0}


def test_what_is_counted_while_a_snapshot_reads_is_in_it(pg_dsn):
    db = Database(pg_dsn)
    metrics = PostgresMetrics(db, flush_s=3600)

    class CountedMeanwhile:
        """The database, but a request is counted (on the event loop) as the snapshot starts reading."""

        def __getattr__(self, name):
            return getattr(db, name)

        @contextmanager
        def connection(self):
            metrics.count_request("GET", "/health", 200)
            metrics.observe({"rerank": 3.0})
            with db.connection() as conn:
                yield conn

    metrics.db = CountedMeanwhile()
    snapshot = metrics.snapshot()
    assert counts(snapshot) == {("GET", "/health", 200): 1}
    assert snapshot["latency_ms"]["rerank"]["count"] == 1
    metrics.db = db
    metrics.close()
    db.close()


def test_counts_are_written_by_the_thread_and_at_close(two_processes):
    a, b = two_processes
    reader = PostgresMetrics(b)
    ticking = PostgresMetrics(a, flush_s=0.05)
    ticking.count_request("GET", "/metrics", 200)
    deadline = time.monotonic() + 30
    while not counts(reader.snapshot()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert counts(reader.snapshot()) == {("GET", "/metrics", 200): 1}  # without a flush by the test
    idle = PostgresMetrics(a, flush_s=3600)
    idle.count_request("GET", "/metrics", 200)
    idle.close()
    ticking.close()
    assert counts(reader.snapshot()) == {("GET", "/metrics", 200): 2}


def test_processes_flushing_together_count_every_request_once(two_processes):
    routes = [f"/r{n}" for n in range(20)]
    metrics = [PostgresMetrics(db, window=50, flush_s=0.01) for db in two_processes]

    def hammer(m: PostgresMetrics, order: list[str]) -> None:
        for _ in range(25):
            for route in order:
                m.count_request("GET", route, 200)
                m.observe({"group": 1.0})

    threads = [threading.Thread(target=hammer, args=(m, routes[::step])) for m, step in zip(metrics, (1, -1))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for m in metrics:
        m.close()
    snapshot = PostgresMetrics(two_processes[0], window=50).snapshot()
    assert counts(snapshot) == {("GET", route, 200): 50 for route in routes}
    assert snapshot["latency_ms"]["group"]["count"] == 50  # the window, not all 1000
    with two_processes[0].connection() as conn:  # trimmed: the table does not grow with the service's age
        assert conn.execute("SELECT count(*) FROM funnel_metric_timings").fetchone()[0] <= 50


@pytest.mark.slow
def test_an_outage_loses_no_counts_and_is_logged_once(pg_dsn, monkeypatch, caplog):
    import psycopg

    monkeypatch.setattr(state_db, "POOL_TIMEOUT_S", 0.5)  # a refused connection is an error in half a second
    name = pg_dsn.rsplit("/", 1)[1]
    admin = psycopg.connect(pg_dsn.rsplit("/", 1)[0] + "/postgres", autocommit=True)
    db = Database(pg_dsn)
    metrics = PostgresMetrics(db, flush_s=3600)
    metrics.count_request("GET", "/health", 200)
    metrics.flush()
    admin.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS false")
    admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", [name])
    caplog.set_level(logging.WARNING, logger="funnel.apps.state.metrics")
    for _ in range(2):
        metrics.count_request("GET", "/health", 200)  # a request never waits on, nor fails with, the database
        with pytest.raises(DatabaseUnavailable) as caught:
            metrics.snapshot()  # GET /metrics: 503, not one process's partial counts
        assert PASSWORD not in str(caught.value)
    assert len([r for r in caplog.records if "metrics are kept" in r.message]) == 1
    assert PASSWORD not in caplog.text
    admin.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS true")
    deadline = time.monotonic() + 60
    while True:  # the pool reconnects with a back-off of its own
        try:
            metrics.flush()
            break
        except DatabaseUnavailable:
            assert time.monotonic() < deadline, "the database did not come back"
    metrics.close()
    assert counts(PostgresMetrics(db).snapshot()) == {("GET", "/health", 200): 3}  # none lost, none twice
    db.close()
    admin.close()


def test_a_conversation_continues_on_another_process(two_processes):
    a, b = (PostgresConversations(db, max_turns=3) for db in two_processes)
    a.add(C, "c1", Turn("Who is the CEO of Zentara Robotics?", "CEO Zentara Robotics", "Iris Kallas."))
    assert questions(b.history(C, "c1")) == ["Who is the CEO of Zentara Robotics?"]
    b.add(C, "c1", Turn("How many employees does it have?", "employees Zentara Robotics", "About 240."))
    assert questions(a.history(C, "c1")) == [
        "Who is the CEO of Zentara Robotics?", "How many employees does it have?"]


def test_processes_adding_to_one_conversation_together_keep_its_bounds(two_processes):
    a, b = (PostgresConversations(db, max_conversations=5, max_turns=3) for db in two_processes)

    def talk(conversations: PostgresConversations, who: str) -> None:
        for n in range(15):
            conversations.add(C, "shared", Turn(f"{who}{n}", "q", "x"))
            conversations.add(C, f"{who}-own-{n}", Turn("q", "q", "x"))

    threads = [threading.Thread(target=talk, args=pair) for pair in ((a, "a"), (b, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    history = questions(a.history(C, "shared"))
    assert len(history) == 3 and len(set(history)) == 3
    assert {"a14", "b14"} & set(history)  # the last turns survive, whoever wrote them
    assert len(b) == 5


def test_forgetting_is_bounded_per_add_and_catches_up(pg_dsn):
    db = Database(pg_dsn)
    roomy = PostgresConversations(db, max_conversations=100)
    for n in range(10):
        roomy.add(C, f"c{n}", Turn("q", "q", "x"))
    tight = PostgresConversations(db, max_conversations=2, evict_batch=3)  # a restart with a lower bound
    sizes = []
    for n in range(4):
        tight.add(C, "c9", Turn(f"again{n}", "q", "x"))
        sizes.append(len(tight))
    assert sizes == [7, 4, 2, 2]
    assert questions(tight.history(C, "c9")) == ["q", "again0", "again1", "again2", "again3"]
    assert tight.history(C, "c8") != ()  # the most recently used before c9 stays
    db.close()


def test_a_database_that_is_down_is_a_503_without_the_password(monkeypatch):
    monkeypatch.setattr(state_db, "POOL_TIMEOUT_S", 0.5)
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    db = Database(f"postgresql://funnel:s3cret-pw@127.0.0.1:{port}/funnel")
    conversations = PostgresConversations(db)
    metrics = PostgresMetrics(db, flush_s=3600)
    metrics.count_request("POST", "/v1/collections/{name}/ask", 200)
    for call in (lambda: conversations.history(C, "c"), lambda: conversations.add(C, "c", Turn("q", "q", "a")),
                 metrics.snapshot):
        with pytest.raises(DatabaseUnavailable) as caught:
            call()
        assert "s3cret-pw" not in str(caught.value) and "unavailable" in str(caught.value)
    metrics.close()  # logs what it could not write; raises nothing
    db.close()


def test_a_conversation_file_of_the_last_release_gains_owners(tmp_path):
    """Schema 1 (no owner column) is migrated in place: its conversations stay, owned by nobody ("")."""
    import sqlite3

    from funnel.apps.state.conversations import SQLITE_STEPS

    path = tmp_path / "conversations.sqlite"
    with sqlite3.connect(path) as con:
        for statement in SQLITE_STEPS[0]:
            con.execute(statement)
        con.execute("INSERT INTO funnel_conversations (collection, id, title, created_ts, updated_ts) "
                    "VALUES ('default', 'old', 'old', 1, 1)")
        con.execute("PRAGMA user_version = 1")
    conversations = open_conversations(None, tmp_path)
    assert conversations.owner(C, "old") == ""
    conversations.add(C, "new", Turn("q", "q", "x"), owner="k1")
    assert (conversations.owner(C, "new"), len(conversations)) == ("k1", 2)
