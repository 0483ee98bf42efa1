"""The soak's machinery: start the real `funnel serve`, sample its memory and file descriptors, and drive it
with a mix of clients (search, ask over server-sent events, uploads, deletes, triage, and requests that are
meant to fail), classifying every outcome as ok, expected error or unexpected failure.

Used by test_reliability_soak.py; bench/load_test.py measures throughput, this measures staying power.
"""

from __future__ import annotations

import io
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
SAMPLE_DOCS = REPO / "samples" / "docs"
COLLECTION = "soak"
QUESTIONS = [
    "Who is the CEO of Zentara Robotics?",
    "How many employees does Zentara Robotics have?",
    "What is the maximum payload of the P3?",
    "Which companies are in the portfolio?",
    "What did the board decide in the third quarter?",
    "What does the investment policy say about concentration limits?",
]
# Every request has a deadline: a request still unanswered after this long counts as a hang.
REQUEST_TIMEOUT_S = 60.0


# --- the server -------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    proc: subprocess.Popen
    url: str
    log: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self, timeout: float) -> tuple[int | None, float]:
        """SIGTERM, then wait up to `timeout` s: (exit status or None if it had to be killed, seconds taken)."""
        if self.proc.poll() is not None:
            return self.proc.returncode, 0.0
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            return None, time.monotonic() - started
        return code, time.monotonic() - started


@contextmanager
def funnel_serve(root: Path, repo: Path, ready_timeout: float = 300):
    """`funnel serve` (the installed console script) on a free loopback port with its data, triage index
    and incidents under `root`, the embedded defaults and no key; yields a Server once /health answers."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUNNEL_")}  # no stray keys or LLMs
    env.update(
        FUNNEL_SERVE__DATA_DIR=str(root / "data"),
        FUNNEL_TRIAGE__REPO=str(repo),
        FUNNEL_REPO_CACHE=str(root / "repo-index"),
        FUNNEL_TRIAGE__INCIDENTS=str(root / "incidents.sqlite"),
    )
    script = Path(sys.executable).parent / "funnel"
    command = [str(script)] if script.exists() else [sys.executable, "-c", "from funnel.apps.cli import run; run()"]
    log = root / "serve.log"
    # A file, not a pipe: a pipe nobody reads fills up and blocks the server's logging.
    with log.open("wb") as out:
        # -v: uvicorn then logs "Finished server process" once the lifespan's shutdown is done, which is how a
        # clean stop is told from a killed one (both end in SIGTERM's status, see SHUTDOWN in the test).
        proc = subprocess.Popen([*command, "-v", "serve", "--port", str(port)], cwd=root, env=env,
                                stdout=out, stderr=subprocess.STDOUT)
    server = Server(proc, f"http://127.0.0.1:{port}", log)
    try:
        deadline = time.monotonic() + ready_timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"funnel serve exited with {proc.returncode}:\n{server.log_text()[-3000:]}")
            try:
                if httpx.get(f"{server.url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"funnel serve not ready in {ready_timeout} s:\n{server.log_text()[-3000:]}")
            time.sleep(0.2)
        yield server
    finally:
        if proc.poll() is None:
            server.stop(30)


# --- sampling ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    t: float  # seconds since the load started
    rss_mb: float
    fds: int
    threads: int


def measure(pid: int) -> tuple[float, int, int]:
    """(RSS in MB, open file descriptors, threads) of the process and its children."""
    try:
        import psutil
    except ImportError:
        return _measure_proc(pid)
    parent = psutil.Process(pid)
    rss, fds, threads = 0, 0, 0
    for p in [parent, *parent.children(recursive=True)]:
        try:
            rss += p.memory_info().rss
            fds += p.num_fds()
            threads += p.num_threads()
        except psutil.NoSuchProcess:
            pass
    return rss / 2**20, fds, threads


def _measure_proc(pid: int) -> tuple[float, int, int]:
    status = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line
    )
    rss_kb = int(status["VmRSS"].split()[0])
    return rss_kb / 1024, len(os.listdir(f"/proc/{pid}/fd")), int(status["Threads"])


class Sampler:
    """Samples a process every `every` seconds on a thread until stopped."""

    def __init__(self, pid: int, every: float):
        self.pid, self.every = pid, every
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="soak-sampler", daemon=True)

    def start(self) -> Sampler:
        self._started = time.monotonic()
        self._thread.start()
        return self

    def _run(self) -> None:
        while True:
            self.take()
            if self._stop.wait(self.every):
                return

    def take(self) -> None:
        try:
            rss, fds, threads = measure(self.pid)
        except (OSError, KeyError, ProcessLookupError):
            return  # the server is gone: the load's failures say so
        self.samples.append(Sample(time.monotonic() - self._started, rss, fds, threads))

    def stop(self) -> list[Sample]:
        self._stop.set()
        self._thread.join(10)
        self.take()
        return self.samples


def slope_per_s(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (t, y)."""
    n = len(points)
    if n < 2:
        return 0.0
    mt = sum(t for t, _ in points) / n
    my = sum(y for _, y in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    return sum((t - mt) * (y - my) for t, y in points) / var if var else 0.0


# --- the load ---------------------------------------------------------------------------------------------


@dataclass
class Outcomes:
    """Every request's fate, by kind: ok, expected (an error the request asked for) or unexpected."""

    ok: Counter = field(default_factory=Counter)
    expected: Counter = field(default_factory=Counter)
    unexpected: list[str] = field(default_factory=list)
    latency_ms: dict[str, list[float]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, kind: str, verdict: str, ms: float, why: str = "") -> None:
        with self._lock:
            self.latency_ms.setdefault(kind, []).append(ms)
            if verdict == "ok":
                self.ok[kind] += 1
            elif verdict == "expected":
                self.expected[kind] += 1
            else:
                self.unexpected.append(f"{kind}: {why}"[:500])

    def by_kind(self) -> dict[str, int]:
        kinds = set(self.latency_ms)
        return {k: len(self.latency_ms[k]) for k in sorted(kinds)}

    @property
    def tried(self) -> int:
        return sum(len(v) for v in self.latency_ms.values())


class Unexpected(Exception):
    """A response the soak did not expect (its message says what came back)."""


def small_pdf(text: str) -> bytes:
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    buf = io.BytesIO()
    pdf = canvas.Canvas(buf, pagesize=A4)
    for i, line in enumerate(text.splitlines()):
        pdf.drawString(72, 770 - 16 * i, line)
    pdf.showPage()
    pdf.save()
    return buf.getvalue()


def note(n: int) -> str:
    return (f"Soak note {n}\n\nThe maintenance window for line {n % 7} is on day {n % 28 + 1}.\n"
            f"Contact the operator on shift {n % 3} about conveyor {n % 11}; the torque limit is {40 + n % 9} Nm.\n")


class Load:
    """Closed-loop clients: each picks its next request from a weighted mix and sends it when the last one
    came back. Uploaded documents go into a pool that deletes take from (oldest first), so the collection's
    size stays about constant and memory has no honest reason to keep growing."""

    MIX = {"search": 30, "ask": 22, "upload": 12, "delete": 12, "triage": 10, "expected_error": 10,
           "read": 4}
    MAX_POOL = 6

    def __init__(self, url: str, trace: str, seed: int = 17):
        self.url = url
        self.trace = trace
        self.seed = seed
        self.outcomes = Outcomes()
        self.pool: deque[str] = deque()
        self._pool_lock = threading.Lock()
        self._uploads = 0
        self._conversations = [f"soak-{i}" for i in range(8)]  # follow-ups, and a few new ones

    def run(self, clients: int, seconds: float) -> Outcomes:
        stop = time.monotonic() + seconds
        threads = [threading.Thread(target=self._client, args=(i, stop), name=f"soak-client-{i}")
                   for i in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(seconds + 4 * REQUEST_TIMEOUT_S)
        return self.outcomes

    def _client(self, n: int, stop: float) -> None:
        rng = random.Random(self.seed * 1000 + n)
        kinds, weights = list(self.MIX), list(self.MIX.values())
        with httpx.Client(base_url=self.url, timeout=REQUEST_TIMEOUT_S) as client:
            while time.monotonic() < stop:
                kind = rng.choices(kinds, weights)[0]
                if kind == "delete" and not self.pool:
                    kind = "upload"
                elif kind == "upload" and len(self.pool) >= self.MAX_POOL:
                    kind = "delete"
                self._one(client, rng, kind)

    def _one(self, client: httpx.Client, rng: random.Random, kind: str) -> None:
        action: Callable = getattr(self, f"_{kind}")
        t0 = time.perf_counter()
        try:
            verdict = action(client, rng)
            why = ""
            if verdict is None:
                return  # nothing was sent
        except Unexpected as e:
            verdict, why = "unexpected", str(e)
        except httpx.HTTPError as e:  # refused, reset, timed out: never expected
            verdict, why = "unexpected", f"{type(e).__name__}: {e}"
        self.outcomes.record(kind, verdict, 1000 * (time.perf_counter() - t0), why)

    @staticmethod
    def _expect(response: httpx.Response, *statuses: int) -> None:
        if response.status_code not in statuses:
            raise Unexpected(f"{response.request.method} {response.request.url.path} -> "
                             f"{response.status_code} {response.text[:200]!r} (expected {statuses})")

    def _search(self, client, rng) -> str:
        body = {"query": rng.choice(QUESTIONS), "k": rng.choice([3, 5, 10])}
        if rng.random() < 0.2:
            body["explain"] = True
        r = client.post(f"/v1/collections/{COLLECTION}/search", json=body)
        self._expect(r, 200)
        if not r.json()["results"]:
            found = r.json()
            raise Unexpected(f"search {body['query']!r} found nothing (rerank {found['rerank_status']}: "
                             f"{found['rerank_reason']}; notes {found['notes']})")
        return "ok"

    def _ask(self, client, rng) -> str:
        body = {"question": rng.choice(QUESTIONS), "stream": True}
        if rng.random() < 0.7:
            body["conversation_id"] = rng.choice(self._conversations)
        events: list[str] = []
        name = "message"
        with client.stream("POST", f"/v1/collections/{COLLECTION}/ask", json=body) as r:
            self._expect(r, 200)
            if not r.headers.get("content-type", "").startswith("text/event-stream"):
                raise Unexpected(f"ask streamed {r.headers.get('content-type')!r}")
            done = None
            for line in r.iter_lines():  # read to the end: the server closes after done/error
                if line.startswith("event:"):
                    name = line[6:].strip()
                    events.append(name)
                elif line.startswith("data:") and name == "done":
                    done = json.loads(line[5:])
        if not events or events[0] != "meta" or events[-1] != "done":
            raise Unexpected(f"ask stream ended with events {events[:3]}...{events[-3:]}")
        if not done or not done.get("answer") or not done.get("citations"):
            raise Unexpected(f"ask's done event had no answer or citations: {str(done)[:200]}")
        return "ok"

    def _upload(self, client, rng) -> str:
        with self._pool_lock:
            self._uploads += 1
            n = self._uploads
        if n % 5 == 0:
            files = [("file", (f"soak-{n}.pdf", small_pdf(note(n)), "application/pdf"))]
        else:
            suffix = ".md" if n % 2 else ".txt"
            files = [("file", (f"soak-{n}{suffix}", note(n).encode(), "text/plain"))]
        r = client.post(f"/v1/collections/{COLLECTION}/documents", files=files)
        self._expect(r, 202)
        with self._pool_lock:
            self.pool.extend(d["id"] for d in r.json())
        return "ok"

    def _delete(self, client, rng) -> str | None:
        with self._pool_lock:
            if not self.pool:
                return None  # another client took the last one
            doc_id = self.pool.popleft()
        r = client.delete(f"/v1/collections/{COLLECTION}/documents/{doc_id}")
        self._expect(r, 204)
        return "ok"

    def _triage(self, client, rng) -> str:
        body = {"service": "soak", "message": "", "stack_trace": self.trace}
        r = client.post("/v1/errors", json=body)
        self._expect(r, 200)
        result = r.json()
        if not result["result"]["files"] or result["incident_id"] is None:
            raise Unexpected(f"triage found no files or recorded no incident: {r.text[:200]}")
        return "ok"

    def _read(self, client, rng) -> str:
        for path in ("/health", "/metrics", f"/v1/collections/{COLLECTION}/documents", "/v1/incidents?limit=5",
                     f"/v1/collections/{COLLECTION}/conversations?limit=5"):
            self._expect(client.get(path), 200)
        return "ok"

    EXPECTED_ERRORS = [
        ("GET", f"/v1/collections/{COLLECTION}/documents/0000000000000000", None, 404),
        ("DELETE", f"/v1/collections/{COLLECTION}/documents/0000000000000000", None, 404),
        ("GET", f"/v1/collections/{COLLECTION}/chunks/nope%230", None, 404),
        ("POST", f"/v1/collections/{COLLECTION}/search", {"k": 5}, 422),
        ("POST", f"/v1/collections/{COLLECTION}/ask", {"question": "x", "k": 0, "stream": True}, 422),
        ("POST", "/v1/collections/no-such-collection-here/search", {"query": "q"}, 404),
        ("POST", "/v1/errors", {"service": "soak", "message": " ", "stack_trace": ""}, 400),
        ("GET", "/v1/incidents/999999999", None, 404),
        ("GET", f"/v1/collections/{COLLECTION}/conversations/never-asked", None, 404),
        ("PATCH", f"/v1/collections/{COLLECTION}/conversations/never-asked", {"title": "t"}, 404),
        ("DELETE", f"/v1/collections/{COLLECTION}/conversations/never-asked", None, 404),
    ]

    def _expected_error(self, client, rng) -> str:
        if rng.random() < 0.15:  # an upload of a kind funnel does not take
            files = [("file", ("soak.exe", b"MZ\x90\x00", "application/octet-stream"))]
            self._expect(client.post(f"/v1/collections/{COLLECTION}/documents", files=files), 415)
            return "expected"
        method, path, body, status = rng.choice(self.EXPECTED_ERRORS)
        self._expect(client.request(method, path, json=body), status)
        return "expected"
