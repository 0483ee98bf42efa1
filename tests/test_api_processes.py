"""Several real `funnel serve --database` processes and `funnel worker`s on one PostgreSQL act as one
service: upload through one, search through another, a worker killed mid-ingest hands its job on, and
many clients at once lose nothing."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from api_support import CEO_QUESTION, FakeOpenAI, samples, upload, wait_done
from upstream_support import fake  # noqa: F401 (a fixture)

pytest.importorskip("psycopg_pool")
psycopg = pytest.importorskip("psycopg")

CLI = "import sys; from funnel.apps.main import run; sys.argv[0] = 'funnel'; run()"
LEASE_S = 3  # a killed worker's job is taken again after this


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Service:
    """API processes and workers on one database; every process is stopped at the end."""

    def __init__(self, dsn: str, folder: Path):
        self.dsn, self.folder = dsn, folder
        self.env = {**os.environ, "FUNNEL_EMBEDDER": "hashing", "FUNNEL_RERANK__BACKEND": "none", "FUNNEL_DATABASE__URL": dsn,
                    "FUNNEL_SERVE__JOB_THREADS": "0", "FUNNEL_SERVE__JOB_LEASE_S": str(LEASE_S), "FUNNEL_SERVE__MAX_UPLOAD_MB": "64"}
        self.processes: list[subprocess.Popen] = []
        self.urls: list[str] = []

    def _start(self, *args: str) -> subprocess.Popen:
        n = len(self.processes)
        log = open(self.folder / f"process-{n}.log", "w")  # noqa: SIM115 (closed with the process)
        process = subprocess.Popen([sys.executable, "-c", CLI, *args], env=self.env, cwd=self.folder,
                                   stdout=log, stderr=subprocess.STDOUT)
        self.processes.append(process)
        return process

    def api(self, *flags: str) -> str:
        url = self.serve(*flags)
        self.urls.append(url)
        return url

    def serve(self, *flags: str, timeout: float = 90) -> str:
        """`funnel serve` with `flags` on a free port, once /health answers; its URL."""
        port = free_port()
        process = self._start("serve", "--port", str(port), *flags)
        log = self.folder / f"process-{len(self.processes) - 1}.log"
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + timeout
        while True:
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    return url
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline and process.poll() is None, log.read_text()
            time.sleep(0.1)

    def worker(self) -> subprocess.Popen:
        return self._start("worker", "--threads", "1")

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()


@pytest.fixture
def service(pg_dsn, tmp_path):
    running = Service(pg_dsn, tmp_path)
    yield running
    running.stop()


def running_job_pid(dsn: str) -> int | None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT worker FROM funnel_jobs WHERE state = 'running' AND kind = 'ingest'").fetchone()
    return int(row[0].split("-")[-2]) if row else None  # host-pid-thread


def big_text(megabytes: float) -> bytes:
    rng = random.Random(3)
    words = [f"w{rng.randrange(30_000)}" for _ in range(4000)]
    lines = [" ".join(rng.choice(words) for _ in range(100)) + "." for _ in range(int(megabytes * 2**20 / 600))]
    return "\n\n".join(lines).encode()


@pytest.mark.slow
def test_three_servers_and_two_workers_act_as_one_service(service):
    a, b, c = (httpx.Client(base_url=service.api(), timeout=60) for _ in range(3))
    workers = [service.worker(), service.worker()]
    assert a.post("/v1/collections", json={"name": "team"}).status_code == 201
    assert upload(b, "team", samples()).status_code == 202
    docs = wait_done(c, "team", timeout=120)
    assert {d["status"] for d in docs} == {"ready"}
    found = a.post("/v1/collections/team/search", json={"query": CEO_QUESTION}).json()
    assert found["results"][0]["document_id"] in {d["id"] for d in docs}

    # A worker killed in the middle of an ingest: the other takes the job once its lease lapses.
    [big] = upload(c, "team", [("big.txt", big_text(12))]).json()
    deadline = time.monotonic() + 60
    while (pid := running_job_pid(service.dsn)) is None:
        assert time.monotonic() < deadline, "the big ingest never started"
        time.sleep(0.02)
    killed = next(w for w in workers if w.pid == pid)
    killed.send_signal(signal.SIGKILL)
    killed.wait(10)
    record = next(d for d in wait_done(a, "team", timeout=180) if d["id"] == big["id"])
    assert record["status"] == "ready", record
    summary = next(x for x in b.get("/v1/collections").json() if x["name"] == "team")
    total = sum(d["chunks"] for d in b.get("/v1/collections/team/documents").json())
    assert summary["chunks"] == total  # the killed try wrote nothing: no chunk twice
    with psycopg.connect(service.dsn, autocommit=True) as conn:
        attempts = conn.execute("SELECT attempts FROM funnel_jobs WHERE key = %s", [f"team/{big['id']}"]).fetchone()
    assert attempts == (2,)
    for client in (a, b, c):
        client.close()


@pytest.mark.slow
def test_fifty_clients_across_three_servers_lose_nothing(service):
    urls = [service.api() for _ in range(3)]
    service.worker()
    service.worker()
    with httpx.Client(base_url=urls[0], timeout=60) as first:
        assert first.post("/v1/collections", json={"name": "many"}).status_code == 201

    def client(n: int) -> str:
        with httpx.Client(base_url=urls[n % 3], timeout=120) as http:
            text = f"Note {n}: the harbour pilot number {n * 7919} answers at night.".encode()
            response = upload(http, "many", [(f"note-{n}.txt", text)])
            assert response.status_code == 202, response.text
            return response.json()[0]["id"]

    with ThreadPoolExecutor(50) as pool:
        ids = list(pool.map(client, range(50)))
    with httpx.Client(base_url=urls[1], timeout=60) as http:
        docs = wait_done(http, "many", timeout=180)
        assert sorted(d["id"] for d in docs) == sorted(ids) and {d["status"] for d in docs} == {"ready"}
        assert len({d["filename"] for d in docs}) == 50
        hit = http.post("/v1/collections/many/search", json={"query": f"pilot number {17 * 7919}"}).json()
        assert hit["results"][0]["document_id"] == ids[17]


@pytest.mark.slow
def test_a_server_killed_while_it_streams_an_answer_ends_the_stream_and_another_answers(service, fake):
    llm = FakeOpenAI(fake)
    llm.deltas = [f"word{n} " for n in range(200)]
    llm.delay = 0.1  # 20 s of answer: the kill lands in the middle
    flags = ("--llm", f"openai:{llm.url}")
    doomed, other = service.api(*flags), service.api(*flags)
    service.worker()
    with httpx.Client(base_url=doomed, timeout=30) as client:
        upload(client, "default", samples())
        wait_done(client, "default", timeout=120)
        body = {"question": CEO_QUESTION, "stream": True, "conversation_id": "shared-1"}
        events, ended = [], None
        started = time.monotonic()
        try:
            with client.stream("POST", "/v1/collections/default/ask", json=body) as response:
                for line in response.iter_lines():
                    if line.startswith("event:"):
                        events.append(line.split(":", 1)[1].strip())
                    if events.count("delta") == 3:
                        service.processes[0].send_signal(signal.SIGKILL)  # the first API process
        except httpx.TransportError as e:  # the connection went with the process: a clear end, not a hang
            ended = e
        assert time.monotonic() - started < 15, "the client hung after the server died"
        assert "delta" in events and "done" not in events  # the page says "the answer stream ended early"
        assert ended is not None or events[-1] != "done"
    llm.deltas, llm.delay = ["Iris Kallas is the CEO."], 0.0
    with httpx.Client(base_url=other, timeout=30) as client:  # the same conversation, on the survivor
        again = client.post("/v1/collections/default/ask", json={**body, "stream": False})
        assert again.status_code == 200 and again.json()["conversation_id"] == "shared-1"


@pytest.mark.slow
def test_the_api_key_and_cors_behave_the_same_on_every_process(service):
    service.env.update({"FUNNEL_SERVE__API_KEY": "team-key-123456", "FUNNEL_SERVE__CORS_ORIGINS": '["http://app.example"]'})
    urls = [service.api(), service.api()]
    for url in urls:
        assert httpx.get(url + "/v1/collections").status_code == 401
        ok = httpx.get(url + "/v1/collections", headers={"X-API-Key": "team-key-123456"})
        assert ok.status_code == 200
        preflight = httpx.options(url + "/v1/collections", headers={
            "Origin": "http://app.example", "Access-Control-Request-Method": "GET"})
        assert preflight.headers.get("access-control-allow-origin") == "http://app.example"
        other = httpx.options(url + "/v1/collections", headers={
            "Origin": "http://evil.example", "Access-Control-Request-Method": "GET"})
        assert "access-control-allow-origin" not in other.headers


def children_of(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


@pytest.mark.slow
def test_serve_workers_runs_that_many_processes_on_one_port(service):
    service.env["FUNNEL_SERVE__JOB_THREADS"] = "1"
    url = service.serve("--workers", "2")
    parent = service.processes[-1]
    with httpx.Client(base_url=url, timeout=60) as client:
        upload(client, "default", samples())
        assert {d["status"] for d in wait_done(client, "default", timeout=120)} == {"ready"}
        assert client.post("/v1/collections/default/search", json={"query": CEO_QUESTION}).json()["results"]
    commands = [Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                for pid in children_of(parent.pid)]
    assert sum("spawn_main" in c for c in commands) == 2, commands  # uvicorn's two server processes
