"""`Jobs` in the service database (`funnel.apps.state.jobs` says what a job queue promises), and
`open_jobs`, which chooses it or the embedded queue.

A claim is one statement: lapsed leases go back to the queue (or fail, out of attempts), then the oldest
runnable job of a lane with nothing running is locked with `FOR UPDATE SKIP LOCKED` and marked running. A
partial unique index (one running job per lane) settles two workers that pick the same lane at the same
instant: the loser's update fails, and it looks again without that lane.
"""

from __future__ import annotations

import json
import time
from collections.abc import Collection, Mapping

from funnel.apps.state.db import Database
from funnel.apps.state.jobs import LEASE_S, MAX_ATTEMPTS, RETRY_AFTER_S, EmbeddedJobs, Job, Jobs, JobState
from funnel.apps.state.tables import ComponentTables

MIGRATIONS = [
    """CREATE TABLE funnel_jobs (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        kind text NOT NULL, lane text NOT NULL, key text NOT NULL, payload jsonb NOT NULL,
        state text NOT NULL DEFAULT 'queued', attempts int NOT NULL DEFAULT 0, error text,
        worker text, lease_until timestamptz, run_after timestamptz NOT NULL DEFAULT now(),
        cancel boolean NOT NULL DEFAULT false,
        created timestamptz NOT NULL DEFAULT now(), updated timestamptz NOT NULL DEFAULT now())""",
    "CREATE INDEX funnel_jobs_queued ON funnel_jobs (id) WHERE state = 'queued'",
    "CREATE UNIQUE INDEX funnel_jobs_one_per_lane ON funnel_jobs (lane) WHERE state = 'running'",
    "CREATE INDEX funnel_jobs_key ON funnel_jobs (key) WHERE state IN ('queued', 'running')",
]
_COLUMNS = "id, kind, lane, key, payload, attempts, state, error"
# Ended jobs are kept this long (their errors can be read), then deleted by later claims.
KEEP_ENDED = "7 days"
CLEAN_EVERY_S = 60.0


def open_jobs(db: Database | None) -> Jobs:
    """The service's job queue: in `db` when it has one (any process's workers take its jobs), else in this
    process."""
    return EmbeddedJobs() if db is None else PostgresJobs(db)


def _job(row) -> Job:
    job_id, kind, lane, key, payload, attempts, state, error = row
    payload = payload if isinstance(payload, dict) else json.loads(payload)
    return Job(job_id, kind, lane, key, payload, attempts, JobState(state), error)


class PostgresJobs:
    durable = True

    def __init__(self, db: Database, max_attempts: int = MAX_ATTEMPTS):
        # Tables made on first use: a server starts while the database is down and recovers when it is back.
        self.db, self.max_attempts = db, max_attempts
        self.tables = ComponentTables(db, "jobs", MIGRATIONS)
        self._cleaned = float("-inf")

    def put(
        self, kind: str, lane: str, key: str, payload: Mapping | None = None, unique: bool = False
    ) -> int:
        with self.tables.transaction() as conn:
            if unique:
                conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"{kind}:{key}"])
                row = conn.execute("SELECT id FROM funnel_jobs WHERE kind = %s AND key = %s "
                                   "AND state = 'queued'", [kind, key]).fetchone()
                if row:
                    return row[0]
            return conn.execute(
                "INSERT INTO funnel_jobs (kind, lane, key, payload) VALUES (%s, %s, %s, %s) RETURNING id",
                [kind, lane, key, json.dumps(dict(payload or {}))]).fetchone()[0]

    def claim(self, kinds: Collection[str], worker: str, lease_s: float = LEASE_S) -> Job | None:
        psycopg = _psycopg()
        self._expire()  # (also creates the tables on first use)
        skipped: list[str] = []
        for _ in range(8):  # each failed try rules out a lane another worker just took
            try:
                with self.db.transaction() as conn:  # raw: a unique violation names the lane to skip
                    row = conn.execute(_CLAIM, {"kinds": list(kinds), "skip": skipped, "worker": worker,
                                                 "lease": lease_s}).fetchone()
                    return _job(row) if row else None
            except psycopg.errors.UniqueViolation as e:
                lane = _lane_of(e)
                if lane is None:
                    return None
                skipped.append(lane)
        return None

    def _expire(self) -> None:
        with self.tables.transaction() as conn:
            conn.execute(
                "UPDATE funnel_jobs SET state = CASE WHEN cancel THEN 'cancelled' WHEN attempts < %s "
                "THEN 'queued' ELSE 'failed' END, error = 'its worker stopped without finishing it', "
                "worker = NULL, lease_until = NULL, "
                "run_after = now() + make_interval(secs => %s * attempts), updated = now() "
                "WHERE state = 'running' AND lease_until < now()",
                [self.max_attempts, RETRY_AFTER_S])
            if time.monotonic() - self._cleaned > CLEAN_EVERY_S:  # not at every poll: a scan of the table
                self._cleaned = time.monotonic()
                conn.execute(f"DELETE FROM funnel_jobs WHERE state IN ('done', 'cancelled', 'failed') "
                             f"AND updated < now() - interval '{KEEP_ENDED}'")

    def renew(self, job_id: int, worker: str, lease_s: float = LEASE_S) -> bool:
        with self.tables.connection() as conn:
            row = conn.execute(
                "UPDATE funnel_jobs SET lease_until = now() + make_interval(secs => %s), updated = now() "
                "WHERE id = %s AND worker = %s AND state = 'running' RETURNING cancel",
                [lease_s, job_id, worker]).fetchone()
        return row is not None and not row[0]

    def finish(self, job_id: int, worker: str) -> None:
        with self.tables.connection() as conn:
            conn.execute(
                "UPDATE funnel_jobs SET state = CASE WHEN cancel THEN 'cancelled' ELSE 'done' END, "
                "worker = NULL, lease_until = NULL, updated = now() "
                "WHERE id = %s AND worker = %s AND state = 'running'",
                [job_id, worker])

    def fail(self, job_id: int, worker: str, error: str, retry: bool = True) -> JobState:
        with self.tables.connection() as conn:
            row = conn.execute(
                "UPDATE funnel_jobs SET state = CASE WHEN cancel THEN 'cancelled' WHEN %s AND attempts < %s "
                "THEN 'queued' ELSE 'failed' END, error = %s, worker = NULL, lease_until = NULL, "
                "run_after = now() + make_interval(secs => %s * attempts), updated = now() "
                "WHERE id = %s AND worker = %s AND state = 'running' RETURNING state",
                [retry, self.max_attempts, error[:2000], RETRY_AFTER_S, job_id, worker]).fetchone()
        return JobState(row[0]) if row else JobState.CANCELLED

    def release(self, job_id: int, worker: str) -> None:
        with self.tables.connection() as conn:
            conn.execute(
                "UPDATE funnel_jobs SET state = CASE WHEN cancel THEN 'cancelled' ELSE 'queued' END, "
                "attempts = attempts - 1, worker = NULL, lease_until = NULL, run_after = now(), "
                "updated = now() WHERE id = %s AND worker = %s AND state = 'running'", [job_id, worker])

    def active(self, key: str) -> bool:
        with self.tables.connection() as conn:
            return conn.execute("SELECT EXISTS (SELECT 1 FROM funnel_jobs WHERE key = %s AND state IN "
                                "('queued', 'running'))", [key]).fetchone()[0]

    def cancel(self, key: str) -> int:
        return self._cancel("key", key)

    def cancel_lane(self, lane: str) -> int:
        return self._cancel("lane", lane)

    def _cancel(self, column: str, value: str) -> int:
        with self.tables.connection() as conn:
            return conn.execute(
                "UPDATE funnel_jobs SET cancel = true, state = CASE WHEN state = 'queued' THEN 'cancelled' "
                f"ELSE state END, updated = now() WHERE {column} = %s AND state IN ('queued', 'running')",
                [value]).rowcount

    def waiting(self, lane: str, kind: str) -> list[str]:
        with self.tables.connection() as conn:
            rows = conn.execute("SELECT key FROM funnel_jobs WHERE lane = %s AND kind = %s "
                                "AND state = 'queued' ORDER BY id", [lane, kind]).fetchall()
        return [r[0] for r in rows]

    def busy(self, lane: str, kinds: Collection[str] | None = None) -> int:
        chosen = None if kinds is None else list(kinds)
        with self.tables.connection() as conn:
            return conn.execute("SELECT count(*) FROM funnel_jobs WHERE lane = %s AND state IN ('queued', "
                                "'running') AND (%s::text[] IS NULL OR kind = ANY(%s::text[]))",
                                [lane, chosen, chosen]).fetchone()[0]

    def get(self, job_id: int) -> Job | None:
        with self.tables.connection() as conn:
            row = conn.execute(f"SELECT {_COLUMNS} FROM funnel_jobs WHERE id = %s", [job_id]).fetchone()
        return _job(row) if row else None

    def close(self) -> None:
        pass


_CLAIM = f"""
UPDATE funnel_jobs SET state = 'running', attempts = attempts + 1, worker = %(worker)s,
       lease_until = now() + make_interval(secs => %(lease)s), updated = now()
WHERE id = (
    SELECT id FROM funnel_jobs j
    WHERE state = 'queued' AND kind = ANY(%(kinds)s::text[]) AND run_after <= now()
      AND NOT (lane = ANY(%(skip)s::text[]))
      AND NOT EXISTS (SELECT 1 FROM funnel_jobs r WHERE r.lane = j.lane AND r.state = 'running')
    ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING {_COLUMNS}"""


def _psycopg():
    import psycopg

    return psycopg


def _lane_of(error) -> str | None:
    """The lane a unique violation on one-running-job-per-lane names (its detail: Key (lane)=(x))."""
    detail = getattr(error.diag, "message_detail", None) or ""
    start, end = detail.find("=("), detail.rfind(")")
    return detail[start + 2:end] if start >= 0 and end > start else None
