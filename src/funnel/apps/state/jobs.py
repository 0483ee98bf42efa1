"""The job queue: slow work (an upload's ingest, a collection's calibration, a triage's analysis) leaves the
request and runs on workers.

One contract, two homes (`open_jobs` in `jobs_pg.py` chooses):
- `EmbeddedJobs`: one process (`funnel serve` without a database). Jobs live as long as the process; what
  they work on says itself where it stands (a document "queued" is queued again at the next start).
- `PostgresJobs` (`jobs_pg.py`): a table in the service database. Any process's workers claim with
  `FOR UPDATE SKIP LOCKED` and hold a lease they renew while working; a job whose worker died is taken
  again once its lease ends, and a job that fails `max_attempts` times stops, its error recorded.

Every job has a `lane` (a collection): at most one job of a lane runs at a time, anywhere, so a collection
has one writer (the PostgreSQL index would refuse a second) and its documents are ingested in upload order.
A job can be cancelled by its `key` (a document deleted while queued or running): a queued one never runs,
a running one sees `Lease.cancelled` at its next check.

The workers that run jobs, and a process's hand on the queue, are in `jobs_workers.py`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Protocol

MAX_ATTEMPTS = 3
LEASE_S = 30.0  # a worker renews its lease every RENEW_S; one that stops renewing loses the job after this
RENEW_S = 0.5  # also how soon a running job sees that it was cancelled from another process
RETRY_AFTER_S = 2.0  # a failed job waits this long (times its attempts) before its next try


class JobState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


@dataclass(frozen=True)
class Job:
    id: int
    kind: str  # "ingest", "calibrate", "triage": which handler runs it
    lane: str  # at most one running job per lane
    key: str  # what it works on (cancel by key)
    payload: Mapping
    attempts: int = 0  # tries started, this one included once claimed
    state: JobState = JobState.QUEUED
    error: str | None = None


class Jobs(Protocol):
    durable: bool  # jobs outlive the process (the database's) or not (memory's)
    max_attempts: int  # tries before a failing job stops (a handler can tell its last try by the job's attempts)

    def put(self, kind: str, lane: str, key: str, payload: Mapping | None = None, unique: bool = False) -> int:
        """Queue a job; `unique`: not when one of this kind and key is already queued (returns its id)."""

    def claim(self, kinds: Collection[str], worker: str, lease_s: float = LEASE_S) -> Job | None:
        """The oldest runnable job of `kinds` whose lane runs nothing, now leased to `worker`; or None."""

    def renew(self, job_id: int, worker: str, lease_s: float = LEASE_S) -> bool:
        """Extend the lease; False when the job was cancelled or is no longer this worker's."""

    def finish(self, job_id: int, worker: str) -> None: ...

    def fail(self, job_id: int, worker: str, error: str, retry: bool = True) -> JobState:
        """Queued again (after a pause) while attempts remain and `retry`; else failed, with `error`."""

    def cancel(self, key: str) -> int:
        """Cancel the queued and running jobs of `key`; how many there were."""

    def cancel_lane(self, lane: str) -> int:
        """Cancel every queued and running job of `lane` (a deleted collection's)."""

    def release(self, job_id: int, worker: str) -> None:
        """Back to the queue as if never tried: its worker is stopping (a server shutting down)."""

    def active(self, key: str) -> bool:
        """Whether a job of `key` is queued or running."""

    def waiting(self, lane: str, kind: str) -> list[str]:
        """The keys of `lane`'s queued jobs of `kind`, in the order they will run."""

    def busy(self, lane: str, kinds: Collection[str] | None = None) -> int:
        """Jobs of `lane` (of `kinds`, or any) queued or running."""

    def get(self, job_id: int) -> Job | None: ...

    def close(self) -> None: ...


@dataclass
class _Entry:
    job: Job
    worker: str | None = None
    lease_until: float = 0.0
    run_after: float = 0.0
    cancel: bool = False


@dataclass
class EmbeddedJobs:
    """`Jobs` in this process's memory."""

    max_attempts: int = MAX_ATTEMPTS
    durable: bool = False
    _entries: dict[int, _Entry] = field(default_factory=dict)
    _next: int = 1
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def put(self, kind: str, lane: str, key: str, payload: Mapping | None = None, unique: bool = False) -> int:
        with self._lock:
            if unique:
                same = [e.job.id for e in self._entries.values()
                        if (e.job.kind, e.job.key, e.job.state) == (kind, key, JobState.QUEUED)]
                if same:
                    return same[0]
            job_id, self._next = self._next, self._next + 1
            self._entries[job_id] = _Entry(Job(job_id, kind, lane, key, dict(payload or {})))
            return job_id

    def claim(self, kinds: Collection[str], worker: str, lease_s: float = LEASE_S) -> Job | None:
        now = time.monotonic()
        with self._lock:
            self._expire(now)
            running = {e.job.lane for e in self._entries.values() if e.job.state is JobState.RUNNING}
            for entry in sorted(self._entries.values(), key=lambda e: e.job.id):
                job = entry.job
                if (job.state is JobState.QUEUED and job.kind in kinds and job.lane not in running
                        and entry.run_after <= now):
                    entry.job = replace(job, state=JobState.RUNNING, attempts=job.attempts + 1)
                    entry.worker, entry.lease_until = worker, now + lease_s
                    return entry.job
            return None

    def _expire(self, now: float) -> None:
        for entry in self._entries.values():
            if entry.job.state is JobState.RUNNING and entry.lease_until < now:
                self._retry_or_fail(entry, "its worker stopped without finishing it", now)

    def _retry_or_fail(self, entry: _Entry, error: str, now: float, retry: bool = True) -> None:
        again = retry and entry.job.attempts < self.max_attempts and not entry.cancel
        state = JobState.QUEUED if again else JobState.CANCELLED if entry.cancel else JobState.FAILED
        entry.job = replace(entry.job, state=state, error=error)
        entry.worker, entry.run_after = None, now + RETRY_AFTER_S * entry.job.attempts

    def _mine(self, job_id: int, worker: str) -> _Entry | None:
        entry = self._entries.get(job_id)
        if entry is None or entry.worker != worker or entry.job.state is not JobState.RUNNING:
            return None
        return entry

    def renew(self, job_id: int, worker: str, lease_s: float = LEASE_S) -> bool:
        with self._lock:
            entry = self._mine(job_id, worker)
            if entry is None or entry.cancel:
                return False
            entry.lease_until = time.monotonic() + lease_s
            return True

    def finish(self, job_id: int, worker: str) -> None:
        with self._lock:
            if (entry := self._mine(job_id, worker)) is not None:
                entry.job = replace(entry.job, state=JobState.CANCELLED if entry.cancel else JobState.DONE)
                entry.worker = None
            self._forget_ended()

    def fail(self, job_id: int, worker: str, error: str, retry: bool = True) -> JobState:
        with self._lock:
            entry = self._mine(job_id, worker)
            if entry is None:
                return JobState.CANCELLED
            self._retry_or_fail(entry, error, time.monotonic(), retry)
            return entry.job.state

    def release(self, job_id: int, worker: str) -> None:
        with self._lock:
            if (entry := self._mine(job_id, worker)) is not None:
                state = JobState.CANCELLED if entry.cancel else JobState.QUEUED
                entry.job = replace(entry.job, state=state, attempts=entry.job.attempts - 1)
                entry.worker, entry.run_after = None, 0.0

    def active(self, key: str) -> bool:
        with self._lock:
            return any(e.job.key == key and e.job.state in (JobState.QUEUED, JobState.RUNNING)
                       for e in self._entries.values())

    def _forget_ended(self, keep: int = 1000) -> None:
        ended = [i for i, e in self._entries.items()
                 if e.job.state in (JobState.DONE, JobState.CANCELLED, JobState.FAILED)]
        for job_id in ended[:-keep] if len(ended) > keep else ():
            del self._entries[job_id]

    def cancel(self, key: str) -> int:
        return self._cancel(lambda job: job.key == key)

    def cancel_lane(self, lane: str) -> int:
        return self._cancel(lambda job: job.lane == lane)

    def _cancel(self, matches: Callable[[Job], bool]) -> int:
        with self._lock:
            hit = 0
            for entry in self._entries.values():
                if matches(entry.job) and entry.job.state in (JobState.QUEUED, JobState.RUNNING):
                    hit += 1
                    entry.cancel = True
                    if entry.job.state is JobState.QUEUED:
                        entry.job = replace(entry.job, state=JobState.CANCELLED)
            return hit

    def waiting(self, lane: str, kind: str) -> list[str]:
        with self._lock:
            return [e.job.key for e in sorted(self._entries.values(), key=lambda e: e.job.id)
                    if (e.job.lane, e.job.kind, e.job.state) == (lane, kind, JobState.QUEUED)]

    def busy(self, lane: str, kinds: Collection[str] | None = None) -> int:
        with self._lock:
            return sum(1 for e in self._entries.values()
                       if e.job.lane == lane and e.job.state in (JobState.QUEUED, JobState.RUNNING)
                       and (kinds is None or e.job.kind in kinds))

    def get(self, job_id: int) -> Job | None:
        with self._lock:
            entry = self._entries.get(job_id)
            return entry.job if entry else None

    def close(self) -> None:
        pass
