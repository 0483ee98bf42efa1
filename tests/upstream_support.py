"""The fake upstreams the tests talk to, in one place.

- `serve()` / the `fake` fixture: a real HTTP server on 127.0.0.1 that records every request (`requests`,
  `last`) and answers from a script: one `Reply`, a queue of them (`queue`), or a function of the path and
  body. A reply is a JSON body, raw bytes, or streamed lines (NDJSON or SSE) that can be delayed or cut
  mid-body. The LLM backends, the HTTP reranker and the Slack notifier are tested against it; the
  misbehaving-socket cases (refuse, hang, trickle, garbage, close) are `reliability/faults.py`.
- `ScriptedChat`: a ChatModel in process, for tests of what calls a model (the generator, the triage agent).
- `closed_port`, `ndjson`, `sse`: a port nothing listens on, and the two streamed wire formats.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

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


def serve() -> tuple[FakeServer, ThreadingHTTPServer]:
    """A fake server and the server under it (stop it with `shutdown()` and `server_close()`)."""
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
            self._send(reply)

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
            if reply.cut:
                self.close_connection = True  # no terminating chunk: the body stops mid-way
                return
            self.wfile.write(b"0\r\n\r\n")

    server = _QuietServer(("127.0.0.1", 0), Handler)
    state = FakeServer(f"http://127.0.0.1:{server.server_address[1]}")
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    return state, server


@pytest.fixture
def fake():
    state, server = serve()
    yield state
    server.shutdown()
    server.server_close()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ndjson(*objects: dict) -> list[str]:
    return [json.dumps(o) for o in objects]


def sse(*objects: dict | str) -> list[str]:
    """Server-sent events: each object a `data:` line followed by the blank line that ends the event."""
    lines = []
    for o in objects:
        lines += [f"data: {o if isinstance(o, str) else json.dumps(o)}", ""]
    return lines


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
