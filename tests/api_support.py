"""Shared by the HTTP API tests: uploading and waiting, parsing server-sent events, a fake OpenAI server (a
script for upstream_support's fake upstream)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
from upstream_support import FakeServer, Reply, sse

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


def wait_triaged(client: httpx.Client, incident_id: int, timeout: float = 60) -> dict:
    """The incident once its analysis and Slack steps have ended (a worker runs them after the request)."""
    deadline = time.monotonic() + timeout
    while True:
        incident = client.get(f"/v1/incidents/{incident_id}").json()
        if all(step["status"] not in ("queued", "running") for step in incident["steps"].values()):
            return incident
        assert time.monotonic() < deadline, f"still triaging: {incident['steps']}"
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
    """An OpenAI-compatible chat server, played by the fake upstream `server` (which records the requests,
    the streamed deltas as `streamed` and a client hanging up as `hung_up`): answers `content`, or `rewrite`
    to a rewrite request (the system prompt asks to rewrite); streams `deltas`, one every `delay` seconds,
    and ends the stream without `[DONE]` after `die_after` deltas when that is set (the model server died).
    Change the attributes at any time: each request reads them."""

    def __init__(self, server: FakeServer):
        self.url = f"{server.url}/v1"
        self.content = "Iris Kallas is the CEO of Zentara Robotics [1]."
        self.deltas = ["Iris Kallas ", "is the CEO ", "[1]."]
        self.delay = 0.0
        self.die_after: int | None = None
        self.rewrite = "How many employees does Zentara Robotics have?"
        server.answer(self._reply)

    def _reply(self, path: str, body: dict) -> Reply:
        if body.get("stream"):
            sent = self.deltas[: self.die_after]
            events = [{"choices": [{"delta": {"content": delta}, "index": 0}]} for delta in sent]
            done = ["[DONE]"] if len(sent) == len(self.deltas) else []
            return Reply(lines=sse(*events, *done), content_type="text/event-stream", line_delay_s=self.delay)
        system = body["messages"][0]["content"] if body.get("messages") else ""
        content = self.rewrite if system.startswith("Rewrite") else self.content
        message = {"role": "assistant", "content": content}
        return Reply(body={"choices": [{"message": message, "finish_reason": "stop"}], "model": "fake"})


def ingest_recording_progress(tmp_path: Path, path: Path, seconds: float = 120) -> tuple[list, object]:
    """Upload `path` to a fresh in-process collection (hashing embedder), wait until it is ready, and return
    every `progress` a client polling its status would have seen, in order, with its final record."""
    from funnel.apps.state.home import EmbeddedHome
    from funnel.apps.api.library import Library, Services
    from funnel.apps.state.documents import DocumentStatus
    from funnel.apps.api.uploads import Upload
    from funnel.embed import HashingEmbedder
    from funnel.generate.extractive import ExtractiveGenerator
    from funnel.engine_config import EngineConfig

    embedder = HashingEmbedder()
    services = Services(embedder, None, ExtractiveGenerator(embedder), EngineConfig(), 50 * 2**20)
    library = Library(EmbeddedHome(tmp_path), services)
    collection = library.create("c")
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
        library.close()
    return seen, collection.registry.get(record.id)
