"""Request counts per route and status, and per-stage latency percentiles over the last `window`
observations: what `GET /metrics` shows (`summary`, one document whichever counts). `EmbeddedMetrics` counts
in this process (thread-safe; a restart starts from zero); `PostgresMetrics` counts for every process of
the service in its PostgreSQL (`funnel serve --database`), so any process answers with the whole
service's numbers. `open_metrics` chooses.

Routes are counted by their template (`/v1/collections/{name}/search`), never by the raw path, so the
number of counters stays bounded whatever clients send; paths that match no route count as "unmatched".

In the database a request never waits on it: `count_request` and `observe` add to this process's buffer
(they run on the event loop), and a thread writes the buffer every FLUSH_S seconds, and at `close`, in one
transaction (counters as `n = n + EXCLUDED.n`, timings as rows trimmed to the last `window` per stage). A
snapshot is the database's totals plus what this process has not written yet. While the database is down
the buffer is kept (bounded: one counter per route and status, `window` timings per stage) and written
once it is back; the failure is logged once, and /metrics itself answers 503 rather than one process's
partial counts, which a scraper would read as a counter reset.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import Counter, deque
from typing import Protocol

from funnel.apps.state.db import Database

log = logging.getLogger(__name__)

WINDOW = 1000
STAGES = ("first_stage", "rerank", "group", "generate")
FLUSH_S = 1.0


class Metrics(Protocol):
    """Where the service counts (`open_metrics` chooses)."""

    def count_request(self, method: str, route: str, status: int) -> None: ...

    def observe(self, timings_ms: dict[str, float]) -> None: ...

    def snapshot(self) -> dict:
        """The /metrics document (`summary`)."""

    def close(self) -> None: ...


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of already sorted values."""
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def summary(requests: Counter, stages: dict[str, list[float]], window: int, started: float) -> dict:
    """The /metrics document, one shape for this process's counts and the whole service's: counts per
    (method, route, status), and p50/p95 over each stage's last `window` observations."""
    rows = sorted(requests.items())
    latency = {}
    for name in [*STAGES, *sorted(set(stages) - set(STAGES))]:
        values = sorted(stages.get(name, []))
        latency[name] = {
            "count": len(values),
            "p50_ms": round(percentile(values, 50), 3) if values else None,
            "p95_ms": round(percentile(values, 95), 3) if values else None,
        }
    return {
        "uptime_s": round(time.time() - started, 1),
        "requests": [{"method": m, "route": r, "status": s, "count": n} for (m, r, s), n in rows],
        "requests_total": sum(n for _, n in rows),
        "latency_ms": latency,
        "window": window,
    }


class _Counts:
    """This process's counts since the last look: all of them (embedded), or those not written yet."""

    def __init__(self, window: int):
        self._lock = threading.Lock()
        self._requests: Counter[tuple[str, str, int]] = Counter()
        self._stages: dict[str, deque[float]] = {}
        self._window = window
        self._started = time.time()

    def count_request(self, method: str, route: str, status: int) -> None:
        with self._lock:
            self._requests[(method, route, status)] += 1
            self._counted()

    def observe(self, timings_ms: dict[str, float]) -> None:
        with self._lock:
            for stage, ms in timings_ms.items():
                self._stages.setdefault(stage, deque(maxlen=self._window)).append(float(ms))
            self._counted()

    def _counted(self) -> None:
        """Called under the lock after every count."""


class EmbeddedMetrics(_Counts):
    def __init__(self, window: int = WINDOW):
        super().__init__(window)

    def snapshot(self) -> dict:
        with self._lock:
            requests = Counter(self._requests)
            stages = {name: list(values) for name, values in self._stages.items()}
        return summary(requests, stages, self._window, self._started)

    def close(self) -> None:
        """Nothing to hand back; here so the app closes either kind of metrics the same way."""


# --- in the service database ---------------------------------------------------------------------------

MIGRATIONS = (
    """CREATE TABLE funnel_metric_requests (
        method text NOT NULL, route text NOT NULL, status int NOT NULL, n bigint NOT NULL,
        PRIMARY KEY (method, route, status))""",
    """CREATE TABLE funnel_metric_timings (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        stage text NOT NULL, ms double precision NOT NULL)""",
    "CREATE INDEX funnel_metric_timings_stage ON funnel_metric_timings (stage, id)",
)
ADD_REQUESTS = """INSERT INTO funnel_metric_requests (method, route, status, n) VALUES (%s, %s, %s, %s)
    ON CONFLICT (method, route, status) DO UPDATE SET n = funnel_metric_requests.n + EXCLUDED.n"""
ADD_TIMING = "INSERT INTO funnel_metric_timings (stage, ms) VALUES (%s, %s)"
# Everything older than the stage's last `window` timings; run after the commit, so a trim that loses a
# race with another process's trim (or fails) costs nothing but a later retry.
TRIM_TIMINGS = """DELETE FROM funnel_metric_timings WHERE stage = %(stage)s AND id <= (
    SELECT id FROM funnel_metric_timings WHERE stage = %(stage)s
    ORDER BY id DESC OFFSET %(window)s LIMIT 1)"""
RECENT_TIMINGS = """SELECT stage, ms FROM (
    SELECT stage, ms, id, row_number() OVER (PARTITION BY stage ORDER BY id DESC) AS newer
    FROM funnel_metric_timings) recent WHERE newer <= %s ORDER BY stage, id"""


def open_metrics(db: Database | None, window: int = WINDOW) -> Metrics:
    """The service's metrics: in this process without a database, shared through `db` with one."""
    return EmbeddedMetrics(window) if db is None else PostgresMetrics(db, window)


class PostgresMetrics(_Counts):
    """The same verbs over the service's database; `close()` writes what is left (call it before
    the database is closed). `uptime_s` stays this process's: the service has no single start."""

    def __init__(self, db: Database, window: int = WINDOW, flush_s: float = FLUSH_S):
        super().__init__(window)  # the buffer; its lock is never held while the database is spoken to
        self.db = db
        self._flush_s = flush_s
        # One flush or snapshot at a time: a snapshot adds the buffer to the database's totals, which is
        # right only while no flush is between taking the buffer and committing it.
        self._writing = threading.Lock()
        self._migrated = False
        self._failing = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def snapshot(self) -> dict:
        """The whole service's counts; DatabaseUnavailable (503) while the database is down."""
        with self._writing:
            self._flush()
            self._migrate()
            with self.db.connection() as conn:
                rows = conn.execute("SELECT method, route, status, n FROM funnel_metric_requests").fetchall()
                timings = conn.execute(RECENT_TIMINGS, [self._window]).fetchall()
            requests = Counter({(method, route, status): n for method, route, status, n in rows})
            stages: dict[str, list[float]] = {}
            for stage, ms in timings:
                stages.setdefault(stage, []).append(ms)
            with self._lock:  # counted while the database was read: not in its totals yet
                requests.update(self._requests)
                for stage, values in self._stages.items():
                    stages[stage] = [*stages.get(stage, []), *values][-self._window:]
        return summary(requests, stages, self._window, self._started)

    def flush(self) -> None:
        """Write the buffer now; on failure it stays buffered and the error is raised."""
        with self._writing:
            self._flush()

    def close(self) -> None:
        """Stop the flushing thread and write what is left; what cannot be written is logged and lost."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        try:
            self.flush()
        except Exception as e:  # noqa: BLE001 (shutting down: the counts are lost, the reason logged)
            log.warning("metrics not written at shutdown: %s", self.db.redact(str(e)))

    def _counted(self) -> None:
        # Started by the first count, under the buffer's lock: building the app starts no thread.
        if self._thread is None and not self._stop.is_set():
            self._thread = threading.Thread(target=self._run, name="funnel-metrics-flush", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._flush_s):
            try:
                self.flush()
            except Exception:  # noqa: BLE001 (logged once by _flush; the buffer is kept for the next try)
                pass

    def _flush(self) -> None:
        with self._lock:
            requests, self._requests = self._requests, Counter()
            stages, self._stages = self._stages, {}
        if not requests and not stages:
            return
        try:
            self._write(requests, stages)
        except Exception as e:
            self._keep(requests, stages)
            if not self._failing:
                self._failing = True
                log.warning("metrics are kept in this process until %s takes them again: %s", self.db.label,
                            self.db.redact(str(e)))
            raise
        if self._failing:
            self._failing = False
            log.info("metrics are written to %s again", self.db.label)
        self._trim(stages)

    def _write(self, requests: Counter, stages: dict[str, deque[float]]) -> None:
        self._migrate()
        with self.db.transaction() as conn, conn.cursor() as cur:
            if requests:  # in key order: two processes flushing together lock rows in the same order
                cur.executemany(ADD_REQUESTS, [(*key, n) for key, n in sorted(requests.items())])
            timings = [(stage, ms) for stage, values in stages.items() for ms in values]
            if timings:
                cur.executemany(ADD_TIMING, timings)

    def _migrate(self) -> None:
        if not self._migrated:
            self.db.migrate("metrics", MIGRATIONS)
            self._migrated = True

    def _keep(self, requests: Counter, stages: dict[str, deque[float]]) -> None:
        """Put a failed flush back in front of what was counted meanwhile."""
        with self._lock:
            requests.update(self._requests)
            self._requests = requests
            for stage, newer in self._stages.items():
                stages.setdefault(stage, deque(maxlen=self._window)).extend(newer)
            self._stages = stages

    def _trim(self, stages: dict[str, deque[float]]) -> None:
        try:
            with self.db.connection() as conn:
                for stage in sorted(stages):
                    conn.execute(TRIM_TIMINGS, {"stage": stage, "window": self._window})
        except Exception as e:  # noqa: BLE001 (the next flush trims again; snapshots read only the window)
            log.debug("metric timings not trimmed: %s", self.db.redact(str(e)))
