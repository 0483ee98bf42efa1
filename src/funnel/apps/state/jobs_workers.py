"""The workers that run the queue's jobs (`funnel.apps.state.jobs` says what the queue promises): threads
that claim jobs of their handlers' kinds, hold a `Lease` renewed while a handler works, and record its end;
and `Queue`, a process's hand on the queue, which wakes this process's workers when it puts a job.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from funnel.apps.state.jobs import LEASE_S, RENEW_S, Job, Jobs, JobState

log = logging.getLogger("funnel.jobs")


class Lease:
    """What a running job's handler holds: `cancelled` turns true when the job is cancelled (by key, from
    any process) or its lease is lost; the handler checks it between pages or slices and stops."""

    def __init__(self, jobs: Jobs, job: Job, worker: str, lease_s: float):
        self.job, self._jobs, self._worker, self._lease_s = job, jobs, worker, lease_s
        self.cancelled = threading.Event()
        self.stopping = False  # cancelled because this process is stopping: the job goes back to the queue
        self._done = threading.Event()
        self._renewer = threading.Thread(target=self._renew, name=f"funnel-lease-{job.id}", daemon=True)
        self._renewer.start()

    def _renew(self) -> None:
        while not self._done.wait(RENEW_S):
            try:
                if not self._jobs.renew(self.job.id, self._worker, self._lease_s):
                    self.cancelled.set()
                    return
            except Exception:  # noqa: BLE001 (the database is down: keep working; the lease may lapse)
                continue

    def end(self) -> None:
        self._done.set()
        self._renewer.join(timeout=5)


Handler = Callable[[Job, Lease], None]


class Workers:
    """`threads` loops that claim jobs of the handlers' kinds and run them. A handler that raises fails its
    job (retried while attempts remain); `Permanent` fails it at once."""

    def __init__(self, jobs: Jobs, handlers: Mapping[str, Handler], name: str, threads: int = 1,
                 poll_s: float = 0.2, lease_s: float = LEASE_S):
        self.jobs, self.handlers, self.name = jobs, dict(handlers), name
        self._threads_n, self._poll_s, self._lease_s = threads, poll_s, lease_s
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._threads: list[threading.Thread] = []
        self._running: set[Lease] = set()
        self._lock = threading.Lock()

    def start(self) -> None:
        for n in range(self._threads_n):
            thread = threading.Thread(target=self._loop, args=(f"{self.name}-{n}",), name=f"funnel-worker-{n}",
                                      daemon=True)
            thread.start()
            self._threads.append(thread)

    def wake(self) -> None:
        """A job was queued here: look now rather than at the next poll."""
        self._wake.set()

    def _loop(self, worker: str) -> None:
        while not self._stop.is_set():
            try:
                job = self.jobs.claim(self.handlers, worker, self._lease_s)
            except Exception:  # noqa: BLE001 (the database is down: try again at the next poll)
                job = None
            if job is None:
                self._wake.wait(self._poll_s)
                self._wake.clear()
                continue
            self.run(job, worker)

    def run(self, job: Job, worker: str) -> None:
        lease = Lease(self.jobs, job, worker, self._lease_s)
        with self._lock:
            self._running.add(lease)
            if self._stop.is_set():
                lease.stopping = True
                lease.cancelled.set()
        try:
            self.handlers[job.kind](job, lease)
            if lease.stopping:
                _quietly(self.jobs.release, job.id, worker)
                return
        except Permanent as e:
            log.warning("job %d (%s %s) cannot succeed: %s", job.id, job.kind, job.key, e)
            _quietly(self.jobs.fail, job.id, worker, str(e), False)
        except Exception as e:  # noqa: BLE001 (recorded on the job; retried while attempts remain)
            log.warning("job %d (%s %s) failed on try %d", job.id, job.kind, job.key, job.attempts, exc_info=True)
            _quietly(self.jobs.fail, job.id, worker, f"{type(e).__name__}: {e}")
        else:
            _quietly(self.jobs.finish, job.id, worker)
        finally:
            lease.end()
            with self._lock:
                self._running.discard(lease)

    def stop_running(self, key: str | None = None, lane: str | None = None) -> None:
        """Tell this process's running jobs of `key` (or of `lane`) that they were cancelled, without waiting
        for a renewal."""
        with self._lock:
            for lease in self._running:
                if (key is not None and lease.job.key == key) or (lane is not None and lease.job.lane == lane):
                    lease.cancelled.set()

    def close(self, wait: bool = True) -> None:
        """Stop taking jobs; a running one is cancelled (it stops at its next check) and goes back to the
        queue, for this process's next start or another process's workers."""
        with self._lock:
            self._stop.set()
            for lease in self._running:
                lease.stopping = True
                lease.cancelled.set()
        self._wake.set()
        for thread in self._threads if wait else ():
            thread.join()


class Queue:
    """A process's hand on the job queue: `put` wakes this process's workers at once; `wait` waits for a
    job's end (a DELETE waits briefly for its document's chunks to go)."""

    def __init__(self, jobs: Jobs, wake: Callable[[], None] = lambda: None,
                 stop_running: Callable[[str], None] = lambda key: None):
        self.jobs, self._wake, self._stop_running = jobs, wake, stop_running

    def cancel(self, key: str) -> int:
        """Cancel `key`'s jobs; one running in this process hears it at once (elsewhere: at its next renewal),
        so a deleted document's ingest stops before it commits rather than after."""
        cancelled = self.jobs.cancel(key)
        if cancelled:
            self._stop_running(key)
        return cancelled

    def put(self, kind: str, lane: str, key: str, payload: Mapping | None = None, unique: bool = False) -> int:
        job_id = self.jobs.put(kind, lane, key, payload, unique)
        self._wake()
        return job_id

    def wait(self, job_id: int, timeout_s: float) -> Job | None:
        """The job once it ended (done, failed, cancelled), or None if it had not within `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while True:
            job = self.jobs.get(job_id)
            if job is None or job.state in (JobState.DONE, JobState.FAILED, JobState.CANCELLED):
                return job
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.02)


class Permanent(Exception):
    """A job that cannot succeed however often it is tried (a payload that cannot be parsed)."""


def _quietly(call, *args) -> None:
    try:
        call(*args)
    except Exception as e:  # noqa: BLE001 (the database is down: the lease expires and the job is taken again)
        log.warning("could not record a job's end (%s); its lease will lapse and it runs again", e)
