"""Shared by the HTTP API tests: uploading and waiting, parsing server-sent events, a fake OpenAI server."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

SAMPLES = Path(__file__).parent.parent / "samples" / "docs"
CEO_QUESTION = "Who is the CEO of Zentara Robotics?"


def upload(client: httpx.Client, collection: str, files: list[tuple[str, bytes]]) -> httpx.Response:
    return client.post(f"/v1/collections/{collection}/documents", files=[("file", f) for f in files])


def samples() -> list[tuple[str, bytes]]:
    return [(p.name, p.read_bytes()) for p in sorted(SAMPLES.iterdir())]


def wait_done(client: httpx.Client, collection: str, timeout: float = 60) -> list[dict]:
    """The collection's documents once none is queued or ingesting."""
    deadline = time.monotonic() + timeout
    while True:
        docs = client.get(f"/v1/collections/{collection}/documents").json()
        if all(d["status"] in ("ready", "failed") for d in docs):
            return docs
        assert time.monotonic() < deadline, f"still ingesting: {docs}"
        time.sleep(0.05)


def wait_calibrated(client: httpx.Client, collection: str, timeout: float = 120) -> dict:
    """The collection's calibration (from /health) once the worker has measured it after its last ingest, so
    a test's search does not race the calibration (before it: first stage; after it: what it chose)."""
    deadline = time.monotonic() + timeout
    while True:
        calibration = client.get("/health").json()["calibration"].get(collection, {})
        if calibration.get("reason") not in (None, "not calibrated yet"):
            return calibration
        assert time.monotonic() < deadline, f"not calibrated: {calibration}"
        time.sleep(0.05)


def ingested_samples(data: Path, **settings) -> Path:
    """`data` as a data dir whose "default" collection holds the samples, ingested and calibrated by an app
    under `Settings(embedder="hashing", **settings)`; module fixtures share it between servers."""
    from funnel.apps.api import create_app
    from funnel.apps.settings import Settings
    from helpers import serving

    app = create_app(Settings(embedder="hashing", data_dir=data, **settings))
    with serving(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        assert upload(client, "default", samples()).status_code == 202
        assert {d["status"] for d in wait_done(client, "default")} == {"ready"}
        wait_calibrated(client, "default")
    return data


def expected_rerank_status(client: httpx.Client, collection: str) -> str:
    """What `rerank_status` a search of a calibrated collection reports under the default `auto` policy."""
    return "skipped" if wait_calibrated(client, collection)["option"] == "first_stage" else "ok"


def sse_events(response: httpx.Response) -> list[tuple[str, dict]]:
    """(event, data) pairs of a server-sent event stream, in order; comments are skipped."""
    events: list[tuple[str, dict]] = []
    name, data = "message", []
    for line in response.iter_lines():
        if line.startswith(":"):
            continue
        if not line:
            if data:
                events.append((name, json.loads("\n".join(data))))
            name, data = "message", []
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())
    return events


class FakeOpenAI:
    """An OpenAI-compatible chat server on 127.0.0.1: answers `content`, streams `deltas` (one every `delay`
    seconds), and closes the connection without `[DONE]` after `die_after` deltas when that is set. A rewrite
    request (the system prompt asks to rewrite) is answered with `rewrite`. `aborted` is set when a client
    hangs up while a stream is being written; `written` counts the deltas that went out."""

    def __init__(self):
        self.content = "Iris Kallas is the CEO of Zentara Robotics [1]."
        self.deltas = ["Iris Kallas ", "is the CEO ", "[1]."]
        self.delay = 0.0
        self.die_after: int | None = None
        self.rewrite = "How many employees does Zentara Robotics have?"
        self.requests: list[dict] = []
        self.aborted = threading.Event()
        self.written = 0
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append(body)
                system = body["messages"][0]["content"] if body.get("messages") else ""
                if body.get("stream"):
                    fake._stream(self)
                    return
                content = fake.rewrite if system.startswith("Rewrite") else fake.content
                payload = json.dumps({"choices": [{"message": {"role": "assistant", "content": content},
                                                   "finish_reason": "stop"}], "model": "fake"}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def _stream(self, handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Connection", "close")
        handler.end_headers()
        try:
            for i, delta in enumerate(self.deltas):
                if self.die_after is not None and i >= self.die_after:
                    return  # the connection closes with no [DONE]: the model server died
                chunk = {"choices": [{"delta": {"content": delta}, "index": 0}]}
                handler.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                handler.wfile.flush()
                self.written += 1
                time.sleep(self.delay)
            handler.wfile.write(b"data: [DONE]\n\n")
            handler.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.aborted.set()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def ingest_recording_progress(tmp_path: Path, path: Path, seconds: float = 120) -> tuple[list, object]:
    """Upload `path` to a fresh in-process collection (hashing embedder), wait until it is ready, and return
    every `progress` a client polling its status would have seen, in order, with its final record."""
    from funnel.apps.api.library import Collection, Services
    from funnel.apps.api.registry import DocumentStatus
    from funnel.apps.api.uploads import Upload
    from funnel.embed import HashingEmbedder
    from funnel.generate.extractive import ExtractiveGenerator
    from funnel.pipeline import SearchConfig

    embedder = HashingEmbedder()
    services = Services(embedder, None, ExtractiveGenerator(embedder), SearchConfig(), None, 50 * 2**20)
    collection = Collection("c", tmp_path / "c", services)
    seen = []
    update = collection.registry.update

    def recording(doc_id, **changes):
        if "progress" in changes:
            seen.append(changes["progress"])
        return update(doc_id, **changes)

    collection.registry.update = recording
    try:
        with open(path, "rb") as fh:
            [record] = collection.add([Upload(path.name, fh, path.stat().st_size)])
        deadline = time.monotonic() + seconds
        while collection.registry.get(record.id).status is not DocumentStatus.READY:
            assert time.monotonic() < deadline, collection.registry.get(record.id)
            time.sleep(0.05)
    finally:
        collection.close()
    return seen, collection.registry.get(record.id)
