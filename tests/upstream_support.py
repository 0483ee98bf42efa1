"""The fake upstreams the tests talk to, in one place.

- `fake_upstream()` / the `fake` fixture: a real HTTP server on 127.0.0.1 that records every request
  (`requests`, `last`), the streamed lines that went out (`streamed`) and a client hanging up mid-reply
  (`hung_up`), and answers from a script: one `Reply`, a queue of them (`queue`), or a function of the path
  and body. A reply is a JSON body, raw bytes, or streamed lines (NDJSON or SSE) that can be delayed or cut
  mid-body. Every fake HTTP upstream of the tests is one: the LLM backends, the HTTP reranker, the Slack
  webhook, and api_support's `FakeOpenAI` (a script played by it). The misbehaving-socket cases (refuse,
  hang, trickle, garbage, close) are `reliability/faults.py`, below HTTP.
- `plain_web_server`: `python -m http.server`, the wrong kind of server for a URL to point at.
- `ScriptedChat`: a ChatModel in process, for tests of what calls a model (the generator, the triage agent).
- `closed_port`, `ndjson`, `sse`: a port nothing listens on, and the two streamed wire formats.
"""

from __future__ import annotations

import functools
import json
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from funnel.errors import UpstreamError
from funnel.generate.chat import ChatMessage, ChatReply

# --- a scripted HTTP server ---------------------------------------------------------------------------


@dataclass
class Reply:
    """What the fake server answers: a JSON body, or streamed lines (NDJSON or SSE), optionally cut off
    mid-body (the chunked encoding is never finished) or delayed."""

    body: object = None
    status: int = 200
    lines: list[str] | None = None
    content_type: str = "application/json"
    cut: bool = False  # drop the connection after the lines, mid-body
    delay_s: float = 0.0  # before the response
    line_delay_s: float = 0.0  # before each streamed line after the first
    raw: bytes | None = None  # sent as it is, instead of `body` as JSON
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: object  # the JSON sent, None when it was not JSON
    raw: bytes = b""


@dataclass
class FakeServer:
    url: str
    requests: list[Received] = field(default_factory=list)
    script: Callable[[str, object], Reply] | Reply = field(default_factory=Reply)
    queued: deque[Reply] = field(default_factory=deque)
    lock: threading.Lock = field(default_factory=threading.Lock)
    streamed: int = 0  # streamed lines written (an `sse` event is one)
    hung_up: threading.Event = field(default_factory=threading.Event)  # a client left mid-reply

    def answer(self, reply: Reply | Callable[[str, object], Reply]) -> None:
        """The answer to every request from now on (after any `queue`d ones)."""
        self.script = reply

    def queue(self, *replies: Reply) -> None:
        """Answers for the next requests, one each, before `answer`'s."""
        with self.lock:
            self.queued.extend(replies)

    def reply_to(self, received: Received) -> Reply:
        with self.lock:
            self.requests.append(received)
            if self.queued:
                return self.queued.popleft()
        return self.script(received.path, received.body) if callable(self.script) else self.script

    @property
    def last(self) -> Received:
        return self.requests[-1]


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], ConnectionError):  # a client hanging up is no error here
            super().handle_error(request, client_address)


@contextmanager
def _serving(handler: Callable[..., BaseHTTPRequestHandler]) -> Iterator[str]:
    """`handler` served on 127.0.0.1 while the block runs; yields the base URL."""
    server = _QuietServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def fake_upstream() -> Iterator[FakeServer]:
    """A fake server while the block runs (the `fake` fixture gives each test its own)."""
    state: FakeServer

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # keep test output clean
            pass

        def do_POST(self):
            raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = None
            headers = {k.lower(): v for k, v in self.headers.items()}
            reply = state.reply_to(Received(self.path, headers, body, raw))
            time.sleep(reply.delay_s)
            try:
                self._send(reply)
            except ConnectionError:
                state.hung_up.set()
                raise

        def _send(self, reply: Reply) -> None:
            if reply.lines is None:
                data = reply.raw if reply.raw is not None else json.dumps(reply.body).encode()
                self.send_response(reply.status)
                self.send_header("Content-Type", reply.content_type)
                self.send_header("Content-Length", str(len(data)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)
                return
            self.send_response(reply.status)
            self.send_header("Content-Type", reply.content_type)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i, line in enumerate(reply.lines):
                if i:
                    time.sleep(reply.line_delay_s)
                data = (line + "\n").encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
                with state.lock:
                    state.streamed += 1
            if reply.cut:
                self.close_connection = True  # no terminating chunk: the body stops mid-way
                return
            self.wfile.write(b"0\r\n\r\n")

    with _serving(Handler) as url:
        state = FakeServer(url)
        yield state


@pytest.fixture
def fake():
    with fake_upstream() as state:
        yield state


@contextmanager
def plain_web_server(directory: Path) -> Iterator[str]:
    """`python -m http.server` serving `directory` while the block runs: GET gets its files, anything else
    the stdlib's own HTML error page (what a URL pointing at the wrong server answers); yields the URL."""

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    with _serving(functools.partial(Quiet, directory=str(directory))) as url:
        yield url


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ndjson(*objects: dict) -> list[str]:
    return [json.dumps(o) for o in objects]


def sse(*objects: dict | str) -> list[str]:
    """Server-sent events, one streamed line each, as a server writes them: a `data:` line and the blank
    line that ends the event."""
    return [f"data: {o if isinstance(o, str) else json.dumps(o)}\n" for o in objects]


class ScriptedChat:
    """A ChatModel that answers from a script and records what it was sent (what calls it is under test).

    `replies` is a text (the reply to every `chat`) or a list of `ChatReply`s and exceptions, one per call,
    in order (an exception is raised). `stream` yields `deltas` (the text, whole, by default) and raises an
    `UpstreamError` before delta number `fail_after`. `sent` holds each call's messages; `calls` each
    call's messages, tool names and JSON schema.
    """

    name = "scripted:model"

    def __init__(
        self, replies: str | list = "", deltas: list[str] | None = None, fail_after: int | None = None
    ):
        self.replies = replies
        self.deltas = deltas if deltas is not None else [replies if isinstance(replies, str) else ""]
        self.fail_after = fail_after
        self.sent: list[list[ChatMessage]] = []
        self.calls: list[tuple[list[ChatMessage], list[str], dict | None]] = []

    def chat(self, messages, tools=(), *, json_schema=None, max_tokens=None, temperature=0.0) -> ChatReply:
        self.sent.append(list(messages))
        self.calls.append((list(messages), [t.name for t in tools], json_schema))
        if isinstance(self.replies, str):
            return ChatReply(self.replies)
        reply = self.replies.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        return reply

    def stream(self, messages, *, max_tokens=None, temperature=0.0) -> Iterator[str]:
        self.sent.append(list(messages))
        for i, delta in enumerate(self.deltas):
            if i == self.fail_after:
                raise UpstreamError("llm", "the stream broke")
            yield delta
