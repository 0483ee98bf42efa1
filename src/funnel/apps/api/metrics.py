"""`GET /health` and `GET /metrics`: request counts per route and status, per-stage latency percentiles over
the last WINDOW observations, the ingest queue. `Metrics` counts in this process (thread-safe; a restart
starts from zero); with `funnel serve --database`, `funnel.apps.state.metrics.SharedMetrics` counts for
every process of the service and renders the same document (`summary`).

Routes are counted by their template (`/v1/collections/{name}/search`), never by the raw path, so the
number of counters stays bounded whatever clients send; paths that match no route count as "unmatched".
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter, deque

from fastapi import APIRouter, Request

import funnel

WINDOW = 1000
STAGES = ("first_stage", "rerank", "group", "generate")


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of already sorted values."""
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


class Metrics:
    def __init__(self, window: int = WINDOW):
        self._lock = threading.Lock()
        self._requests: Counter[tuple[str, str, int]] = Counter()
        self._stages: dict[str, deque[float]] = {}
        self._window = window
        self._started = time.time()

    def count_request(self, method: str, route: str, status: int) -> None:
        with self._lock:
            self._requests[(method, route, status)] += 1

    def observe(self, timings_ms: dict[str, float]) -> None:
        with self._lock:
            for stage, ms in timings_ms.items():
                self._stages.setdefault(stage, deque(maxlen=self._window)).append(float(ms))

    def snapshot(self) -> dict:
        with self._lock:
            requests = Counter(self._requests)
            stages = {name: list(values) for name, values in self._stages.items()}
        return summary(requests, stages, self._window, self._started)

    def close(self) -> None:
        """Nothing to hand back; here so the app closes either kind of metrics the same way."""


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


router = APIRouter(tags=["health"])


@router.get("/health")
def health(request: Request) -> dict:
    state = request.app.state
    reranker = state.reranker
    chat = state.chat
    return {
        "status": "ok",
        "version": funnel.__version__,
        "reranker": reranker.name if reranker else None,
        "llm": chat.name if chat else None,
        "generator": state.generator_name,
        "embedder": state.embedder_spec,
        "collections": len(state.library.names()),
        # What the second stage does on each collection (the `auto` policy) and why.
        "calibration": state.library.calibrations(),
        "auth": state.settings.api_key is not None,
        # Where the state is and where searches read the indexes (no user or password).
        "database": _label(state.settings.database),
        "search_database": _label(state.settings.search_database),
        # Folders kept in sync (`funnel serve --watch`): when each last synced, what changed, the last error.
        "watched": state.watched.statuses(),
    }


def _label(url) -> str | None:
    from funnel.apps.state.db import url_label

    return url_label(url.get_secret_value()) if url is not None else None


@router.get("/metrics")
def metrics(request: Request) -> dict:
    state = request.app.state
    return {**state.metrics.snapshot(), "ingest_queue": state.library.pending()}
