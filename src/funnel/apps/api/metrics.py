"""`GET /health` and `GET /metrics`: request counts per route and status, per-stage latency percentiles over
the last WINDOW observations, the ingest queue. In-process and thread-safe; a restart starts from zero.

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
            requests = sorted(self._requests.items())
            stages = {name: sorted(values) for name, values in self._stages.items()}
        latency = {}
        for name in [*STAGES, *sorted(set(stages) - set(STAGES))]:
            values = stages.get(name, [])
            latency[name] = {
                "count": len(values),
                "p50_ms": round(percentile(values, 50), 3) if values else None,
                "p95_ms": round(percentile(values, 95), 3) if values else None,
            }
        return {
            "uptime_s": round(time.time() - self._started, 1),
            "requests": [
                {"method": m, "route": r, "status": s, "count": n} for (m, r, s), n in requests
            ],
            "requests_total": sum(n for _, n in requests),
            "latency_ms": latency,
            "window": self._window,
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
        # Folders kept in sync (`funnel serve --watch`): when each last synced, what changed, the last error.
        "watched": state.watched.statuses(),
    }


@router.get("/metrics")
def metrics(request: Request) -> dict:
    state = request.app.state
    return {**state.metrics.snapshot(), "ingest_queue": state.library.pending()}
