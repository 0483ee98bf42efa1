"""One real misbehaving upstream on 127.0.0.1, for the upstream-fault tests.

`FaultServer(upstream)` listens on a fixed loopback port and answers each request as `mode` says:

- `ok`       the upstream's proper answer (`upstream.reply(path, request)`);
- `refuse`   nothing listens on the port any more (connection refused), until the mode changes;
- `hang`     the request is read, nothing is ever answered (the connection stays open);
- `trickle`  the proper answer, status line included, one byte every `trickle_s` seconds: no single read
             waits long, so only a deadline on the whole call ends it;
- `garbage`  `garbage_variant` says which: `html` (200, an HTML page), `proxy` (a proxy's 502 HTML page),
             `shape` (200, JSON of the wrong shape), `bytes` (no HTTP at all, just bytes);
- `close`    the status line, headers and part of the body, then the connection closes; a streamed answer
             sends its first `close_after` events, then closes.

An `Upstream` plays one kind of server: the reranker (Cohere shape), an OpenAI-compatible LLM (streamed as
server-sent events when asked), Ollama (NDJSON) and a Slack webhook. Bodies go out with Content-Length,
streams with chunked encoding, so a cut is an HTTP error and never looks like a finished answer.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass

MODES = ("refuse", "hang", "trickle", "garbage", "close")
GARBAGE = ("html", "proxy", "shape", "bytes")
HTML_PAGE = (b"<!DOCTYPE html><html><head><title>502 Bad Gateway</title><style>body{color:red}</style></head>"
             b"<body><h1>Bad Gateway</h1><p>upstream went away</p></body></html>")


@dataclass
class Reply:
    status: int = 200
    content_type: str = "application/json"
    body: bytes = b""
    events: list[bytes] | None = None  # a streamed answer: one chunk per event


class Upstream:
    """The proper answers of one kind of server."""

    def reply(self, path: str, request: dict) -> Reply:  # pragma: no cover - overridden
        raise NotImplementedError


class CohereReranker(Upstream):
    """`/v1/rerank`: a score for every document, the longer ones first (any order will do)."""

    def reply(self, path, request):
        docs = request.get("documents", [])
        results = [{"index": i, "relevance_score": min(1.0, len(d) / 1000)} for i, d in enumerate(docs)]
        return Reply(body=json.dumps({"results": results}).encode())


class OpenAILlm(Upstream):
    """`/v1/chat/completions`, whole or streamed as server-sent events ended by `data: [DONE]`."""

    deltas = ["Iris Kallas ", "is the CEO ", "of Zentara ", "Robotics ", "[1]."]

    def reply(self, path, request):
        if request.get("stream"):
            events = [_sse({"choices": [{"delta": {"content": d}}]}) for d in self.deltas]
            return Reply(content_type="text/event-stream", events=events + [b"data: [DONE]\n\n"])
        message = {"role": "assistant", "content": "".join(self.deltas)}
        body = {"choices": [{"message": message, "finish_reason": "stop"}], "model": "fault"}
        return Reply(body=json.dumps(body).encode())


class OllamaLlm(OpenAILlm):
    """`/api/chat`, whole or streamed as NDJSON lines, the last one `done: true`."""

    def reply(self, path, request):
        if request.get("stream"):
            chunks = [{"message": {"content": d}, "done": False} for d in self.deltas]
            chunks.append({"message": {"content": ""}, "done": True})
            lines = [json.dumps(c).encode() + b"\n" for c in chunks]
            return Reply(content_type="application/x-ndjson", events=lines)
        body = {"message": {"role": "assistant", "content": "".join(self.deltas)}, "done": True}
        return Reply(body=json.dumps(body).encode())


class SlackWebhook(Upstream):
    def reply(self, path, request):
        return Reply(content_type="text/plain", body=b"ok")


class NotPostgres(Upstream):
    """A port where PostgreSQL should be: no HTTP, the client speaks first (libpq's startup or SSL
    request). `ok` is not played; the faults are: hang (read, never answer), trickle (a valid start of the
    protocol that never reaches ReadyForQuery, a byte at a time), garbage (bytes that are no PostgreSQL
    message), close (read, then close)."""

    raw = True


def _sse(obj: dict) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


class FaultServer:
    """A loopback server whose behaviour `mode` sets per request (see the module's docstring). `requests`
    counts the requests it read; `stop()` closes every connection it holds."""

    def __init__(self, upstream: Upstream, trickle_s: float = 0.05, close_after: int = 2):
        self.upstream = upstream
        self.trickle_s = trickle_s
        self.close_after = close_after
        self.garbage_variant = "html"
        self.requests = 0
        self._mode = "ok"
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._stopped = threading.Event()
        self._listener: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self.port = self._listen(0)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def mode(self) -> str:
        return self._mode

    @mode.setter
    def mode(self, mode: str) -> None:
        assert mode == "ok" or mode in MODES, mode
        with self._lock:
            self._mode = mode
            if mode == "refuse" and self._listener is not None:
                self._close_listener()
            elif mode != "refuse" and self._listener is None:
                self._listen(self.port)
        self.drop_connections()  # no kept-alive connection carries one mode's behaviour into the next

    def drop_connections(self) -> None:
        with self._lock:
            conns, self._conns = self._conns, []
        for conn in conns:
            _close(conn)

    def stop(self) -> None:
        self._stopped.set()
        with self._lock:
            self._close_listener()
        self.drop_connections()

    # --- plumbing --------------------------------------------------------------------------------------

    def _listen(self, port: int) -> int:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(64)
        self._listener = listener
        self._thread = threading.Thread(target=self._accept, args=(listener,), daemon=True)
        self._thread.start()
        return listener.getsockname()[1]

    def _close_listener(self) -> None:
        if self._listener is not None:
            # shutdown wakes the accept() blocked in the listener's thread; close alone would not
            try:
                self._listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._listener.close()
            self._listener = None

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with self._lock:
                self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        if getattr(self.upstream, "raw", False):
            return self._serve_raw(conn)
        try:
            while not self._stopped.is_set():
                request = _read_request(conn)
                if request is None:
                    return
                self.requests += 1
                path, body = request
                if not self._answer(conn, path, body):
                    return
        except OSError:  # the client went away
            pass
        finally:
            _close(conn)

    def _serve_raw(self, conn: socket.socket) -> None:
        noise = b"\x00\x17\xfe garbage \xff\x00 not PostgreSQL\r\n" * 4
        try:
            if not conn.recv(65536):
                return
            self.requests += 1
            if self._mode == "hang":
                while conn.recv(65536):
                    pass
            elif self._mode == "garbage":
                conn.sendall(noise)
            elif self._mode == "trickle":
                first = b"x" * 8
                while len(first) == 8:  # SSLRequest / GSSENCRequest: "not here", then the startup packet
                    conn.sendall(b"N")
                    first = conn.recv(65536)
                    if not first:
                        return
                # a valid answer that never ends: AuthenticationOk, then ParameterStatus after ParameterStatus
                status = b"application_name\x00funnel\x00"
                message = b"S" + (4 + len(status)).to_bytes(4, "big") + status
                stream = b"R\x00\x00\x00\x08\x00\x00\x00\x00" + message * 10_000
                for i in range(len(stream)):
                    if self._stopped.wait(self.trickle_s):
                        return
                    conn.sendall(stream[i : i + 1])
        except OSError:
            pass
        finally:
            _close(conn)

    def _answer(self, conn: socket.socket, path: str, body: dict) -> bool:
        """Answers one request as the mode says; False when the connection is done with."""
        mode = self._mode
        if mode == "hang":
            while conn.recv(65536):  # until the client gives up, or the server drops the connection
                pass
            return False
        if mode == "garbage" and self.garbage_variant == "bytes":
            conn.sendall(b"\x00\x17\xfe garbage \xff\x00 no HTTP here\r\n\r\n" * 4)
            return False
        reply = self.upstream.reply(path, body)
        if mode == "garbage":
            if self.garbage_variant in ("html", "proxy"):
                reply = Reply(200 if self.garbage_variant == "html" else 502, "text/html", HTML_PAGE)
            else:
                reply = Reply(200, "application/json", b'{"unexpected": [1, 2, 3], "message": "shape"}')
        if reply.events is None:
            head = _head(reply, f"Content-Length: {len(reply.body)}")
            data = head + reply.body
            if mode == "close":
                conn.sendall(head + reply.body[: max(1, len(reply.body) // 2)])
                return False
        else:
            events = [b"%x\r\n%s\r\n" % (len(e), e) for e in reply.events]
            if mode == "close":
                head = _head(reply, "Transfer-Encoding: chunked")
                conn.sendall(head + b"".join(events[: self.close_after]))
                return False
            data = _head(reply, "Transfer-Encoding: chunked") + b"".join(events) + b"0\r\n\r\n"
        if mode == "trickle":
            for i in range(len(data)):
                if self._stopped.wait(self.trickle_s):
                    return False
                conn.sendall(data[i : i + 1])
            return True
        conn.sendall(data)
        return True


def _head(reply: Reply, length: str) -> bytes:
    reason = {200: "OK", 502: "Bad Gateway"}.get(reply.status, "Status")
    head = f"HTTP/1.1 {reply.status} {reason}\r\nContent-Type: {reply.content_type}\r\n{length}\r\n\r\n"
    return head.encode()


def _read_request(conn: socket.socket) -> tuple[str, dict] | None:
    """(path, JSON body) of the next request on `conn`, or None when the client closed it."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    path = lines[0].split(" ")[1] if len(lines[0].split(" ")) > 1 else "/"
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    while len(rest) < length:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        rest += chunk
    try:
        body = json.loads(rest[:length] or b"{}")
    except ValueError:
        body = {}
    return path, body if isinstance(body, dict) else {}


def _close(conn: socket.socket) -> None:
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    conn.close()


def closed_port() -> int:
    """A loopback port nobody listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def timed(fn, *args, **kw):
    """(fn's result, seconds it took)."""
    t0 = time.monotonic()
    out = fn(*args, **kw)
    return out, time.monotonic() - t0
