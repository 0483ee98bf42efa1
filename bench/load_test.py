"""A bounded load test of `funnel serve` on 127.0.0.1: requests/s and latency of `search` (and `ask`)
under concurrent clients, while the server is otherwise idle and, optionally, while an ingest runs.

    .venv/bin/python bench/load_test.py --clients 1,4,8,20 --seconds 15

Starts the real server (uvicorn, one process) as a subprocess with a fresh data dir, uploads samples/docs,
waits until every document is ready, then for each client count runs `--seconds` of closed-loop clients
(each sends its next request when the previous one returns) over a rotating list of questions.
"""

from __future__ import annotations

import argparse
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
QUESTIONS = [
    "Who is the CEO of Zentara Robotics?",
    "How many employees does Zentara Robotics have?",
    "What does the handbook say about incident reviews?",
    "Which companies are in the portfolio?",
    "What is the refund policy?",
    "Where is the headquarters?",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(data_dir: Path, port: int, embedder: str, reranker: str) -> subprocess.Popen:
    env = {**os.environ, "FUNNEL_DATA_DIR": str(data_dir), "FUNNEL_EMBEDDER": embedder, "FUNNEL_RERANKER": reranker}
    proc = subprocess.Popen(
        [sys.executable, "-c", "from funnel.apps.cli import run; run()", "serve", "--port", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited: {proc.stderr.read()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.terminate()
    raise SystemExit("server did not start in 120 s")


def upload_samples(client: httpx.Client, collection: str) -> float:
    files = sorted(p for p in (REPO / "samples" / "docs").iterdir() if p.suffix in (".pdf", ".md", ".txt"))
    started = time.perf_counter()
    client.post("/v1/collections", json={"name": collection}).raise_for_status()
    for path in files:
        with path.open("rb") as f:
            r = client.post(f"/v1/collections/{collection}/documents", files={"file": (path.name, f)})
        r.raise_for_status()
    while True:
        docs = client.get(f"/v1/collections/{collection}/documents").json()
        if docs and all(d["status"] in ("ready", "failed") for d in docs):
            break
        time.sleep(0.2)
    return time.perf_counter() - started


def run_clients(base: str, route: str, clients: int, seconds: float, body) -> dict:
    latencies: list[float] = []
    errors = 0
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def worker(offset: int) -> None:
        nonlocal errors
        with httpx.Client(base_url=base, timeout=120) as client:
            i = offset
            while time.monotonic() < stop:
                t0 = time.perf_counter()
                try:
                    ok = client.post(route, json=body(QUESTIONS[i % len(QUESTIONS)])).status_code == 200
                except httpx.HTTPError:
                    ok = False
                elapsed = 1000 * (time.perf_counter() - t0)
                with lock:
                    if ok:
                        latencies.append(elapsed)
                    else:
                        errors += 1
                i += 1

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - started
    ordered = sorted(latencies) or [float("nan")]
    return {
        "clients": clients, "requests": len(latencies), "errors": errors, "rps": len(latencies) / wall,
        "p50": statistics.median(ordered), "p95": ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", default="1,4,8,20")
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--embedder", default="minilm")
    parser.add_argument("--reranker", default="none")
    parser.add_argument("--ask", action="store_true", help="also load `ask` (extractive answers)")
    args = parser.parse_args(argv)

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as tmp:
        proc = start_server(Path(tmp) / "data", port, args.embedder, args.reranker)
        try:
            with httpx.Client(base_url=base, timeout=120) as client:
                ingest_s = upload_samples(client, "bench")
            print(f"# load test, {platform.machine()} {os.cpu_count()} cpus, {time.strftime('%Y-%m-%d')}, embedder "
                  f"{args.embedder}, reranker {args.reranker}; samples/docs ingested in {ingest_s:.1f} s")
            routes = [("search", "/v1/collections/bench/search", lambda q: {"query": q})]
            if args.ask:
                routes.append(("ask", "/v1/collections/bench/ask", lambda q: {"question": q}))
            print(f"{'route':<8}{'clients':>8}{'requests':>10}{'errors':>8}{'req/s':>9}{'p50 ms':>9}{'p95 ms':>9}")
            for name, route, body in routes:
                for clients in (int(c) for c in args.clients.split(",")):
                    r = run_clients(base, route, clients, args.seconds, body)
                    print(f"{name:<8}{r['clients']:>8}{r['requests']:>10}{r['errors']:>8}{r['rps']:>9.1f}"
                          f"{r['p50']:>9.1f}{r['p95']:>9.1f}", flush=True)
        finally:
            proc.terminate()
            proc.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
