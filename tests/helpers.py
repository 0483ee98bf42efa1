"""Small builders shared by tests."""

from __future__ import annotations

import socket
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import uvicorn

from funnel.types import Candidate, Chunk, RerankResult


# Three documents, each naming its firm's CEO: the CEO an answer names says which documents it was scoped to.
FIRMS = {
    "acme.txt": "The CEO of Acme is Jane Roe. Acme makes anvils in Ohio.\n",
    "brix.txt": "The CEO of Brix is Tom Poe. Brix makes bricks in Leeds.\n",
    "cole.txt": "The CEO of Cole is Ann Lee. Cole makes coal stoves in Lille.\n",
}


def chunk(doc_id: str, ordinal: int = 0, text: str = "", **kw) -> Chunk:
    return Chunk(
        chunk_id=f"{doc_id}#{ordinal}",
        doc_id=doc_id,
        ordinal=ordinal,
        text=text or f"text of {doc_id} {ordinal}",
        path=kw.pop("path", doc_id),
        title=kw.pop("title", doc_id),
        kind=kw.pop("kind", "text"),
        n_tokens=kw.pop("n_tokens", 5),
        content_hash=kw.pop("content_hash", "h-" + doc_id),
        **kw,
    )


def write_files(folder: Path, files: dict[str, str]) -> Path:
    """`folder`, created, holding `files` (name -> text)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


def candidates(doc_ids: list[str]) -> list[Candidate]:
    """Candidates in first-stage order; a repeated doc id becomes that document's next chunk."""
    seen: dict[str, int] = {}
    out = []
    for rank, doc_id in enumerate(doc_ids, start=1):
        ordinal = seen.get(doc_id, 0)
        seen[doc_id] = ordinal + 1
        out.append(Candidate(chunk(doc_id, ordinal), fused_rank=rank, fused_score=1.0 / (60 + rank)))
    return out


class ScriptedReranker:
    """A reranker whose scores are given per doc id: lets a test say exactly what the model thinks."""

    def __init__(self, scores: dict[str, float], name: str = "scripted"):
        self.scores = scores
        self.name = name
        self.calls = 0

    def rerank(self, query, candidates):
        self.calls += 1
        return RerankResult(tuple(self.scores[c.chunk.doc_id] for c in candidates))


class FailingReranker:
    name = "failing"

    def __init__(self, error: Exception):
        self.error = error

    def rerank(self, query, candidates):
        raise self.error


@contextmanager
def serving(app):
    """Run an ASGI app with uvicorn on 127.0.0.1 (a free port) in a thread, with the options `funnel serve`
    uses (uvicorn believes no X-Forwarded-For); yields its base URL."""
    from funnel.apps.api import uvicorn_options

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", **uvicorn_options()))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


class FakeClock:
    """A clock a test moves by hand (`clock.now += 61`)."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def packaged_embedder():
    """The packaged ONNX embedder, loaded; the test is skipped where its runtime or its model is missing."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("tokenizers")
    from funnel.embed.onnx import OnnxEmbedder
    from funnel.errors import BackendUnavailable

    try:
        embedder = OnnxEmbedder.default()
        embedder.warm_up()
    except BackendUnavailable as exc:
        pytest.skip(str(exc))
    return embedder


def refusal(path: Path, load) -> str:
    """The reason a loader (`load(path, doc_id, display_path)`) refuses the file, checked to be one line
    naming the file."""
    from funnel.errors import IngestError

    with pytest.raises(IngestError) as refused:
        load(path, "d", path.name)
    message = str(refused.value)
    assert message.startswith(f"{path.name}: ") and "\n" not in message and "Traceback" not in message
    return refused.value.reason
