"""Soak: the real `funnel serve` (embedded defaults: MiniLM, the built-in reranker, extractive answers, no
key; triage over a copy of samples/repo) under mixed load — search, ask streamed as server-sent events,
uploads (.md, .txt, small PDFs), deletes, triage, reads, and requests meant to fail — while its memory and
file descriptors are sampled.

Promises, checked over the run (`make test`: ~30 s of load; `make soak`, FUNNEL_SOAK=1: 10 minutes;
FUNNEL_SOAK_SECONDS overrides either):
- no unexpected failure: no 5xx, no status other than the one a request asked for, no refused or reset
  connection, no request unanswered after 60 s, no stream that ends without its `done` event, no upload
  left `failed`, no traceback in the server's log;
- nothing grows without bound once warmed up (the first half of the run is warm-up: model arenas, caches,
  the first calibrations). Over the second half:
  * file descriptors: the last sample is at most FD_SLACK above the highest of the half's first samples;
  * threads: never more than THREAD_SLACK above the start (the request threadpool is capped at 40 by
    anyio; a thread left behind per request or per stream would pass that within the first minute);
  * RSS: the least-squares slope, projected over 10 minutes, stays under RSS_BOUND_MB (100 MB, i.e. a leak
    of 170 KB/s would fail it). A half shorter than two minutes is too short to project from, so there the
    rise itself (last sample minus the half's first) must stay under RSS_BOUND_MB;
- SIGTERM after the load stops it cleanly within SHUTDOWN_S: uvicorn finishes the lifespan's shutdown and
  logs "Finished server process". The exit status is then 0 or SIGTERM's own: uvicorn (0.29 on) raises the
  signal again after a graceful shutdown so that a supervisor sees what ended the process.
"""

from __future__ import annotations

import os
import shutil
import signal
import statistics
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import soak_driver as soak
from api_support import wait_calibrated
from helpers import serving
from tally import scale

from funnel.apps.api import create_app
from funnel.apps.settings import Settings
from funnel.types import RerankResult


SECONDS = float(os.environ.get("FUNNEL_SOAK_SECONDS") or scale(30, 600))
CLIENTS = 4
SAMPLE_EVERY_S = 2.0 if SECONDS < 120 else 5.0
RSS_BOUND_MB = 100.0
PROJECT_OVER_S = 600.0
FD_SLACK = 16
THREAD_SLACK = 40 + 16
SHUTDOWN_S = 15.0


def a_real_trace() -> str:
    """A traceback raised for real by samples/repo (a user that does not exist)."""
    sys.path.insert(0, str(Path(__file__).parent.parent))
    from test_triage import raised_in_sample_app

    return raised_in_sample_app("user_not_found")


def setup_collection(url: str) -> None:
    with httpx.Client(base_url=url, timeout=soak.REQUEST_TIMEOUT_S) as client:
        client.post("/v1/collections", json={"name": soak.COLLECTION}).raise_for_status()
        files = [("file", (p.name, p.read_bytes())) for p in sorted(soak.SAMPLE_DOCS.iterdir())]
        client.post(f"/v1/collections/{soak.COLLECTION}/documents", files=files).raise_for_status()
        deadline = time.monotonic() + 300
        while True:
            docs = client.get(f"/v1/collections/{soak.COLLECTION}/documents").json()
            if all(d["status"] in ("ready", "failed") for d in docs):
                break
            assert time.monotonic() < deadline, f"samples still ingesting: {docs}"
            time.sleep(0.2)
        assert all(d["status"] == "ready" for d in docs), docs


def leftover_failures(url: str) -> list[str]:
    """Uploads the load left behind that did not ingest (each one an unexpected failure)."""
    with httpx.Client(base_url=url, timeout=soak.REQUEST_TIMEOUT_S) as client:
        docs = client.get(f"/v1/collections/{soak.COLLECTION}/documents").json()
    return [f"document {d['filename']}: {d['status']} {d.get('error')}" for d in docs if d["status"] == "failed"]


def growth(samples: list[soak.Sample], seconds: float) -> dict:
    """The second half's figures: where it started, where it ended, and the RSS trend."""
    half = [s for s in samples if s.t >= seconds / 2]
    first = half[: max(1, len(half) // 5)]
    rss_slope = soak.slope_per_s([(s.t, s.rss_mb) for s in half])
    span = half[-1].t - half[0].t if len(half) > 1 else 0.0
    projected = rss_slope * PROJECT_OVER_S if span >= 120 else half[-1].rss_mb - half[0].rss_mb
    return {
        "fds_half_start": max(s.fds for s in first),
        "rss_half_start_mb": round(half[0].rss_mb, 1),
        "rss_slope_mb_per_min": round(60 * rss_slope, 2),
        "rss_growth_mb": round(projected, 1),
        "rss_growth_is": "slope x 10 min" if span >= 120 else "rise over the second half",
    }


@pytest.mark.model
@pytest.mark.slow
def test_funnel_serve_under_mixed_load(tmp_path, tally):
    repo = tmp_path / "repo"
    shutil.copytree(soak.REPO / "samples" / "repo", repo)
    trace = a_real_trace()
    with soak.funnel_serve(tmp_path, repo) as server:
        setup_collection(server.url)
        sampler = soak.Sampler(server.proc.pid, SAMPLE_EVERY_S).start()
        started = time.monotonic()
        load = soak.Load(server.url, trace)
        outcomes = load.run(CLIENTS, SECONDS)
        ran_s = time.monotonic() - started
        samples = sampler.stop()
        unexpected = list(outcomes.unexpected) + leftover_failures(server.url)
        code, shutdown_s = server.stop(SHUTDOWN_S)
    log = server.log_text()
    if "Traceback" in log:
        unexpected.append(f"the server logged a traceback:\n{log[log.index('Traceback') - 300:][:3000]}")

    g = growth(samples, ran_s)
    rss = [s.rss_mb for s in samples]
    latency = {k: round(statistics.median(v)) for k, v in outcomes.latency_ms.items()}
    tally.add(
        "soak", "funnel serve mixed load",
        tried=outcomes.tried, failed=len(unexpected), seconds=round(ran_s, 1), clients=CLIENTS,
        rss_start_mb=round(rss[0], 1), rss_end_mb=round(rss[-1], 1), rss_peak_mb=round(max(rss), 1),
        fds_start=samples[0].fds, fds_end=samples[-1].fds, threads_start=samples[0].threads,
        threads_end=samples[-1].threads, threads_peak=max(s.threads for s in samples), by_kind=outcomes.by_kind(), errors_expected=sum(outcomes.expected.values()),
        median_ms=latency, shutdown_s=round(shutdown_s, 2), exit_status=code, **g,
    )
    print(f"\nsoak: {outcomes.tried} requests in {ran_s:.0f} s {outcomes.by_kind()}, "
          f"{sum(outcomes.expected.values())} expected errors, {len(unexpected)} unexpected; "
          f"RSS {rss[0]:.0f} -> {rss[-1]:.0f} MB (peak {max(rss):.0f}), fds {samples[0].fds} -> "
          f"{samples[-1].fds}, threads {samples[0].threads} -> {samples[-1].threads}; {g}; "
          f"median ms {latency}; shutdown {shutdown_s:.1f} s, exit {code}")

    assert not unexpected, f"{len(unexpected)} unexpected failures, first ones:\n" + "\n".join(unexpected[:10])
    assert all(outcomes.ok[k] for k in ("search", "ask", "upload", "delete", "triage")), outcomes.ok
    assert samples[-1].fds <= g["fds_half_start"] + FD_SLACK, g
    assert g["rss_growth_mb"] < RSS_BOUND_MB, g
    assert max(s.threads for s in samples) <= samples[0].threads + THREAD_SLACK, [s.threads for s in samples]
    clean = code in (0, -signal.SIGTERM) and "Finished server process" in log
    assert clean, f"SIGTERM: exit {code} after {shutdown_s:.1f} s\n{log[-2000:]}"


def test_the_proc_sampler_agrees_with_psutil():
    """Without psutil the soak reads /proc; both must see the same process."""
    psutil = pytest.importorskip("psutil")
    rss, fds, threads = soak._measure_proc(os.getpid())
    me = psutil.Process()
    assert abs(rss - me.memory_info().rss / 2**20) < 20
    assert abs(fds - me.num_fds()) <= 2 and threads >= 1


class SlowReranker:
    """Scores by word overlap, slowly: a calibration with it takes seconds, like the built-in model's on two
    busy cores."""

    name = "slow-overlap"

    def __init__(self, delay: float):
        self.delay = delay
        self.calls = 0
        self.started = threading.Event()

    def rerank(self, query, candidates):
        self.calls += 1
        self.started.set()
        time.sleep(self.delay)
        words = set(query.lower().split())
        return RerankResult(tuple(float(len(words & set(c.chunk.text.lower().split()))) for c in candidates))


def test_a_delete_and_a_shutdown_do_not_wait_for_a_calibration(tmp_path):
    """Found by the soak: every upload ends with a calibration of the collection (120 test queries through
    the reranker: tens of seconds on two busy cores), and a DELETE (which waits for its chunks to leave the
    index) and SIGTERM (which waits for the worker) queued behind it — a DELETE timed out at 60 s, a
    shutdown took over 15. A job that arrives, or a shutdown, now cuts the calibration short; it is made
    again once the queue is empty."""
    reranker = SlowReranker(delay=0.1)  # 120 queries: 12 s or more for a whole calibration
    app = create_app(Settings(embedder="hashing", data_dir=tmp_path / "data"), reranker=reranker)
    files = [("file", (p.name, p.read_bytes())) for p in sorted(soak.SAMPLE_DOCS.iterdir())]
    with serving(app) as url:
        client = httpx.Client(base_url=url, timeout=60)
        docs = client.post("/v1/collections/default/documents", files=files).json()
        assert reranker.started.wait(60), "no calibration started"
        t0 = time.monotonic()
        assert client.delete(f"/v1/collections/default/documents/{docs[0]['id']}").status_code == 204
        assert time.monotonic() - t0 < 3, "the delete waited for the calibration"
        # The calibration is made again after the delete, and this one is left to finish.
        calibration = wait_calibrated(client, "default", timeout=120)
        assert calibration["reason"] != "not calibrated yet"
        client.post("/v1/collections/default/documents", files=files[1:2])
        reranker.started.clear()
        assert reranker.started.wait(60)
        t0 = time.monotonic()
    assert time.monotonic() - t0 < 3, "the shutdown waited for the calibration"
