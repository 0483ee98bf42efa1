"""The job queue's contract (`funnel.apps.state.jobs`), in memory and in a real PostgreSQL, and its workers."""

from __future__ import annotations

import threading
import time

import pytest

from funnel.apps.state import jobs as jobs_module
from funnel.apps.state.jobs import EmbeddedJobs, JobState
from funnel.apps.state.jobs_workers import Permanent, Workers


@pytest.fixture(params=["memory", "postgres"])
def jobs(request, monkeypatch):
    monkeypatch.setattr(jobs_module, "RETRY_AFTER_S", 0.0)
    if request.param == "memory":
        yield EmbeddedJobs()
        return
    pytest.importorskip("psycopg_pool")
    from funnel.apps.state import jobs_pg
    from funnel.apps.state.db import Database

    monkeypatch.setattr(jobs_pg, "RETRY_AFTER_S", 0.0)
    db = Database(request.getfixturevalue("pg_dsn"))
    yield jobs_pg.PostgresJobs(db)
    db.close()


def test_jobs_run_in_order_one_per_lane(jobs):
    a1 = jobs.put("ingest", "a", "a/1", {"doc": 1})
    jobs.put("ingest", "a", "a/2")
    b1 = jobs.put("ingest", "b", "b/1")
    assert jobs.waiting("a", "ingest") == ["a/1", "a/2"] and jobs.busy("a") == 2
    first = jobs.claim(["ingest"], "w1")
    assert (first.id, first.payload, first.attempts, first.state) == (a1, {"doc": 1}, 1, JobState.RUNNING)
    second = jobs.claim(["ingest"], "w2")  # lane a runs a/1: the next runnable job is b's
    assert second.id == b1
    assert jobs.claim(["ingest"], "w3") is None
    jobs.finish(first.id, "w1")
    assert jobs.claim(["ingest"], "w3").key == "a/2"
    assert jobs.get(a1).state is JobState.DONE
    assert jobs.claim(["triage"], "w4") is None  # only the kinds a worker handles


def test_a_failing_job_is_retried_then_stops_with_its_error(jobs):
    job_id = jobs.put("ingest", "a", "a/1")
    for attempt in (1, 2, 3):
        job = jobs.claim(["ingest"], "w")
        assert job.attempts == attempt
        state = jobs.fail(job.id, "w", f"boom {attempt}")
    assert state is JobState.FAILED and jobs.claim(["ingest"], "w") is None
    assert (jobs.get(job_id).state, jobs.get(job_id).error) == (JobState.FAILED, "boom 3")
    other = jobs.put("ingest", "a", "a/2")
    assert jobs.fail(jobs.claim(["ingest"], "w").id, "w", "bad payload", retry=False) is JobState.FAILED
    assert jobs.get(other).attempts == 1


def test_a_job_whose_worker_died_is_taken_again_after_its_lease(jobs):
    job_id = jobs.put("ingest", "a", "a/1")
    assert jobs.claim(["ingest"], "dead", lease_s=0.3).id == job_id
    assert jobs.claim(["ingest"], "alive") is None  # leased
    time.sleep(0.6)
    again = jobs.claim(["ingest"], "alive")
    assert (again.id, again.attempts) == (job_id, 2)
    assert not jobs.renew(job_id, "dead")  # the dead worker, back, has lost it
    jobs.finish(job_id, "dead")  # and cannot end it
    assert jobs.get(job_id).state is JobState.RUNNING
    jobs.finish(job_id, "alive")
    assert jobs.get(job_id).state is JobState.DONE


def test_cancel_by_key_stops_a_queued_job_and_tells_a_running_one(jobs):
    running = jobs.put("ingest", "a", "a/1")
    queued = jobs.put("ingest", "a", "a/2")
    assert jobs.claim(["ingest"], "w").id == running
    assert jobs.renew(running, "w")
    assert jobs.cancel("a/1") == 1 and jobs.cancel("a/2") == 1
    assert not jobs.renew(running, "w")  # the handler's lease sees the cancel
    assert jobs.get(queued).state is JobState.CANCELLED and jobs.waiting("a", "ingest") == []
    jobs.finish(running, "w")
    assert jobs.get(running).state is JobState.CANCELLED and jobs.busy("a") == 0


def test_a_unique_job_is_queued_once(jobs):
    first = jobs.put("calibrate", "a", "a", unique=True)
    assert jobs.put("calibrate", "a", "a", unique=True) == first
    jobs.claim(["calibrate"], "w")
    assert jobs.put("calibrate", "a", "a", unique=True) != first  # one running, a new one queued behind it


def test_workers_run_handlers_retry_failures_and_stop_a_cancelled_job(jobs):
    ran, cancelled = [], threading.Event()
    flaky = {"tries": 0}

    def ingest(job, lease):
        if job.key == "a/slow":
            assert lease.cancelled.wait(20), "the cancel never reached the running job"
            cancelled.set()
            return
        if job.key == "a/flaky":
            flaky["tries"] += 1
            if flaky["tries"] < 2:
                raise RuntimeError("transient")
        if job.key == "a/bad":
            raise Permanent("payload cannot be parsed")
        ran.append(job.key)

    workers = Workers(jobs, {"ingest": ingest}, "test", threads=2, poll_s=0.05)
    workers.start()
    try:
        slow = jobs.put("ingest", "s", "a/slow")
        ids = [jobs.put("ingest", "a", key) for key in ("a/1", "a/flaky", "a/bad", "a/2")]
        time.sleep(0.3)
        jobs.cancel("a/slow")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (jobs.busy("a") or jobs.busy("s")):
            time.sleep(0.05)
        assert cancelled.is_set() and jobs.get(slow).state is JobState.CANCELLED
        assert ran == ["a/1", "a/2", "a/flaky"] or ran == ["a/1", "a/flaky", "a/2"]
        assert [jobs.get(i).state for i in ids] == [JobState.DONE, JobState.DONE, JobState.FAILED, JobState.DONE]
        assert jobs.get(ids[2]).error == "payload cannot be parsed" and jobs.get(ids[2]).attempts == 1
    finally:
        workers.close()


def test_two_processes_never_run_two_jobs_of_one_lane(pg_dsn):
    pytest.importorskip("psycopg_pool")
    from funnel.apps.state.db import Database
    from funnel.apps.state.jobs_pg import PostgresJobs

    databases = [Database(pg_dsn) for _ in range(4)]
    queues = [PostgresJobs(db) for db in databases]
    for n in range(12):
        queues[0].put("ingest", f"lane{n % 3}", f"k{n}")
    running: dict[str, int] = {}
    overlap, lock, done = [], threading.Lock(), []

    def handler(job, lease):
        with lock:
            running[job.lane] = running.get(job.lane, 0) + 1
            if running[job.lane] > 1:
                overlap.append(job.lane)
        time.sleep(0.05)
        with lock:
            running[job.lane] -= 1
            done.append(job.key)

    workers = [Workers(q, {"ingest": handler}, f"p{i}", threads=2, poll_s=0.02) for i, q in enumerate(queues)]
    for w in workers:
        w.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(done) < 12:
        time.sleep(0.05)
    for w in workers:
        w.close()
    for db in databases:
        db.close()
    assert sorted(done) == sorted(f"k{n}" for n in range(12)) and not overlap
