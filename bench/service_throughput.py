"""`funnel serve --database` with 1, 2 and 4 HTTP processes on one PostgreSQL, side by side in one run:
requests per second and latency of search, ask and upload (+ ingest until ready), and the time a queued
ingest takes to become searchable.

    python bench/service_throughput.py                       # an embedded PostgreSQL, started and stopped here
    python bench/service_throughput.py --database postgresql://... --processes 1 2 --seconds 10
    python bench/service_throughput.py --replica 2           # + 2 processes searching a streaming replica

Each configuration: `funnel serve --workers N` (N uvicorn processes sharing the port, each with its job
threads) over the same database, the samples ingested into a collection of its own, then `--clients`
concurrent clients for `--seconds` per workload. The embedder is the packaged MiniLM (what users run);
the reranker is off, so what is measured is the service, the first stage and the database.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples" / "docs"
CLI = "import sys; from funnel.apps.main import run; sys.argv[0] = 'funnel'; run()"
QUESTIONS = ["Who is the CEO of Zentara Robotics?", "How many employees does Zentara have?",
             "When was the company founded?", "What does the office culture value?"]


@contextmanager
def embedded_database(replica: bool):
    """An embedded PostgreSQL's URL, and a streaming replica's (or None)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from pg_support import PgServer

    roots = [Path(tempfile.mkdtemp(prefix="funnel-bench-pg-")) for _ in range(2)]
    servers = [PgServer(roots[0])]
    try:
        if replica:
            servers.append(servers[0].replica(roots[1]))
        yield servers[0].url, servers[1].url if replica else None
    finally:
        for server in reversed(servers):
            server.stop()
        for root in roots:
            shutil.rmtree(root, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def service(database: str, processes: int, log: Path, replica: str | None = None):
    port = free_port()
    env = {**os.environ, "FUNNEL_DATABASE": database, "FUNNEL_RERANKER": "none", "FUNNEL_EMBEDDER": "minilm"}
    if replica:
        env["FUNNEL_SEARCH_DATABASE"] = replica
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-c", CLI, "serve", "--port", str(port), "--workers", str(processes)],
                                env=env, stdout=out, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    if httpx.get(url + "/health", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit(f"funnel serve did not start: {log.read_text()[-2000:]}")
                time.sleep(0.2)
            yield url
        finally:
            proc.terminate()
            proc.wait(60)


def wait_ready(client: httpx.Client, collection: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while True:
        docs = client.get(f"/v1/collections/{collection}/documents").json()
        if docs and all(d["status"] in ("ready", "failed") for d in docs):
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"ingest did not finish: {docs}")
        time.sleep(0.1)


def load(url: str, clients: int, seconds: float, request) -> dict:
    """`clients` threads calling `request(client, n)` for `seconds`; throughput and latency."""
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def run(k: int) -> None:
        with httpx.Client(base_url=url, timeout=120) as client:
            n = 0
            while time.monotonic() < stop:
                started = time.perf_counter()
                ok = request(client, k * 100_000 + n)
                with lock:
                    latencies.append(time.perf_counter() - started)
                    errors[0] += not ok
                n += 1

    threads = [threading.Thread(target=run, args=(k,)) for k in range(clients)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    latencies.sort()
    return {"rps": len(latencies) / elapsed, "p50": 1000 * statistics.median(latencies),
            "p95": 1000 * latencies[int(0.95 * (len(latencies) - 1))], "n": len(latencies), "errors": errors[0]}


def workloads(collection: str) -> dict:
    def search(client, n):
        body = {"query": QUESTIONS[n % len(QUESTIONS)]}
        return client.post(f"/v1/collections/{collection}/search", json=body).status_code == 200

    def ask(client, n):
        body = {"question": QUESTIONS[n % len(QUESTIONS)], "stream": False}
        return client.post(f"/v1/collections/{collection}/ask", json=body).status_code == 200

    def upload(client, n):
        text = f"Bench note {n}: harbour pilot {n * 7919} answers the radio at night.".encode()
        files = [("file", (f"note-{n}.txt", text))]
        return client.post(f"/v1/collections/{collection}-up/documents", files=files).status_code == 202

    return {"search": search, "ask": ask, "upload": upload}


def caught_up(client: httpx.Client, collection: str, timeout: float = 60) -> None:
    """Wait until searches on the replica no longer say it lags."""
    deadline = time.monotonic() + timeout
    while client.post(f"/v1/collections/{collection}/search", json={"query": QUESTIONS[0]}).json()["notes"]:
        if time.monotonic() > deadline:
            raise SystemExit("the replica did not catch up")
        time.sleep(0.1)


def searchable_after(client: httpx.Client, collection: str) -> float:
    """Seconds from an upload's 202 to its first appearance in a search."""
    marker = f"zebracorn{time.monotonic_ns()}"
    started = time.monotonic()
    client.post(f"/v1/collections/{collection}/documents",
                files=[("file", ("fresh.txt", f"The {marker} grazes by the harbour.".encode()))])
    while True:
        hits = client.post(f"/v1/collections/{collection}/search", json={"query": marker}).json().get("results", [])
        if hits and hits[0]["path"].endswith("fresh.txt"):
            return time.monotonic() - started
        time.sleep(0.02)


def measure(database: str, processes: int, clients: int, seconds: float, out: Path,
            replica: str | None = None) -> dict:
    collection = f"bench{processes}" + ("r" if replica else "")
    with service(database, processes, out / f"serve-{collection}.log", replica) as url, \
            httpx.Client(base_url=url, timeout=120) as client:
        for name in (collection, f"{collection}-up"):
            client.post("/v1/collections", json={"name": name})
        files = [("file", (p.name, p.read_bytes())) for p in sorted(SAMPLES.iterdir())]
        client.post(f"/v1/collections/{collection}/documents", files=files)
        wait_ready(client, collection)
        if replica:
            caught_up(client, collection)
        label = f"{processes}, searching a replica" if replica else str(processes)
        row = {"processes": label, "searchable_s": searchable_after(client, collection)}
        for name, request in workloads(collection).items():
            row[name] = load(url, clients, seconds, request)
        started = time.monotonic()
        wait_ready(client, f"{collection}-up")
        row["upload_drain_s"] = time.monotonic() - started
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database", help="a PostgreSQL URL (default: an embedded server for this run)")
    parser.add_argument("--processes", type=int, nargs="*", default=[1, 2, 4])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--replica", type=int, nargs="*", default=[],
                        help="also these process counts with searches on a streaming replica (embedded only)")
    parser.add_argument("--out", type=Path, default=Path("eval-out/service"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.replica and args.database:
        parser.error("--replica starts a replica of the embedded database: drop --database")
    with (embedded_database(bool(args.replica)) if args.database is None else _given(args.database)) as (database,
                                                                                                     replica):
        rows = [measure(database, n, args.clients, args.seconds, args.out) for n in args.processes]
        rows += [measure(database, n, args.clients, args.seconds, args.out, replica) for n in args.replica]
    print(f"machine: {os.cpu_count()} CPUs, {platform.processor() or platform.machine()}, Python "
          f"{platform.python_version()}, {time.strftime('%Y-%m-%d')}; {args.clients} clients, {args.seconds:g} s each")
    print("| processes | search req/s (p50 / p95 ms) | ask req/s (p50 / p95 ms) | upload req/s (p50 / p95 ms) | "
          "uploads ingested after (s) | queued upload searchable after (s) |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        cells = [f"{r[w]['rps']:.1f} ({r[w]['p50']:.0f} / {r[w]['p95']:.0f})"
                 + (f", {r[w]['errors']} errors" if r[w]["errors"] else "") for w in ("search", "ask", "upload")]
        print(f"| {r['processes']} | {' | '.join(cells)} | {r['upload_drain_s']:.1f} | {r['searchable_s']:.2f} |")


@contextmanager
def _given(url: str):
    yield url, None


if __name__ == "__main__":
    main()
