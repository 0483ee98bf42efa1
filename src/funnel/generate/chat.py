"""The chat protocol every LLM backend implements, the values it exchanges, and the HTTP plumbing the two
HTTP backends (`ollama`, `openai_compat`) share, so that both convert errors the same way, once.

A backend's `stream` yields text deltas. The HTTP backends return a `ChatStream`: an iterator of those
deltas whose `reply` holds the whole `ChatReply` (tool calls assembled, token counts, finish reason) once
the last delta has been read. A stream that breaks part-way raises `UpstreamError` from the iterator, after
the deltas it already yielded.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import httpx

from funnel.deadline import DeadlineExceeded, call_within, iterate_within
from funnel.errors import ConfigError, UpstreamError, UpstreamTimeout, body_excerpt

STAGE = "llm"
ROLES = ("system", "user", "assistant", "tool")
# Failures before a connection exists: the server is down, the name does not resolve, the URL is wrong.
_UNREACHABLE = (httpx.ConnectError, httpx.UnsupportedProtocol, httpx.ProxyError)


@dataclass(frozen=True)
class ToolCall:
    """A function the model asks to run. `arguments` is already parsed from the model's JSON."""

    id: str
    name: str
    arguments: dict


@dataclass(frozen=True)
class ToolSpec:
    """A function the model may call; `parameters` is a JSON schema of its arguments."""

    name: str
    description: str
    parameters: dict


@dataclass(frozen=True)
class ChatMessage:
    """One turn. An assistant turn may carry `tool_calls`; a "tool" turn answers one of them, named by
    `tool_call_id` (OpenAI) and `name` (Ollama; filled from the matching call when left out)."""

    role: str
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ConfigError(f"unknown chat role {self.role!r}; valid roles: {', '.join(ROLES)}")


@dataclass(frozen=True)
class ChatReply:
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    model: str = ""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None


@runtime_checkable
class ChatModel(Protocol):
    """A chat LLM. `name` says which, e.g. "ollama:llama3.2" or "openai:gpt-4o-mini"."""

    name: str

    def chat(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec] = (),
        *,
        json_schema: dict | None = None,
        max_tokens: int | None = None,
        temperature: float = 0.0,
    ) -> ChatReply: ...

    def stream(
        self, messages: Sequence[ChatMessage], *, max_tokens: int | None = None, temperature: float = 0.0
    ) -> Iterator[str]: ...


class ChatStream(Iterator[str]):
    """The text deltas of one streamed reply. `reply` is None until the deltas are exhausted, then the
    whole `ChatReply`. `close()` drops the connection of a stream read only in part."""

    def __init__(self, events: Generator[str, None, ChatReply]):
        self._events = events
        self.reply: ChatReply | None = None

    def __next__(self) -> str:
        try:
            return next(self._events)
        except StopIteration as stop:
            self.reply = stop.value
            raise

    def close(self) -> None:
        self._events.close()


def parse_arguments(raw: object, where: str) -> dict:
    """A tool call's arguments: an object as Ollama sends it, or the JSON text OpenAI sends."""
    if isinstance(raw, str):
        if not raw.strip():
            return {}  # some servers send "" for a function without parameters
        try:
            raw = json.loads(raw)
        except (ValueError, RecursionError):  # RecursionError: nested too deeply
            raise UpstreamError(
                STAGE, f"{_one_line(where)} has arguments that are not valid JSON: {raw[:80]!r}"
            ) from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise UpstreamError(
            STAGE, f"{_one_line(where)} has arguments of type {type(raw).__name__}, not an object"
        )
    return raw


def _one_line(text: str) -> str:
    return " ".join(text.split())  # `where` names a tool the server chose: it may hold a newline


def optional_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class LlmHttp:
    """One base URL, one lazily created `httpx.Client` (or the injected one), and every httpx error turned
    into an `UpstreamError` naming the server, never its credentials."""

    def __init__(
        self, base_url: str, timeout: float, client: httpx.Client | None, api_key: str | None = None
    ):
        if timeout <= 0:
            raise ConfigError(f"timeout must be positive, got {timeout}")
        base = base_url.rstrip("/")
        if not base.startswith(("http://", "https://")):
            raise ConfigError(f"the LLM base URL must start with http:// or https://, got {base_url!r}")
        self.base = base
        self.shown = without_userinfo(base)
        self.timeout = timeout
        self._api_key = api_key
        self._client = client
        self._owns_client = client is None
        self._lock = threading.Lock()

    def post(self, path: str, payload: dict) -> object:
        """The JSON body of a successful POST."""
        def send() -> httpx.Response:
            url, headers = self._url(path), self._headers()
            return self._http().post(url, json=payload, headers=headers, timeout=self.timeout)

        try:
            # httpx's timeout bounds each read; the deadline bounds the answer (a server trickling it)
            response = call_within(self.timeout, send)
        except (httpx.TimeoutException, DeadlineExceeded) as e:
            raise self.timed_out() from e
        except _UNREACHABLE as e:
            raise self.unreachable(e) from e
        except httpx.HTTPError as e:  # connected, then the exchange broke (reset, truncated body)
            raise self.error(f"{path} broke off: {type(e).__name__}: {self.redact(str(e))}") from e
        if not response.is_success:
            raise self.error(f"{path} answered HTTP {response.status_code}: {self.excerpt(response.text)}")
        try:
            return response.json()
        except (ValueError, RecursionError):  # malformed, not text, or nested too deeply
            raise self.error(f"{path} answered malformed JSON: {self.excerpt(response.text)}") from None

    def stream_lines(self, path: str, payload: dict) -> Generator[str, None, None]:
        """The non-blank lines of a streamed POST, as they arrive. Close it to drop the connection early.
        Each line is due within the timeout of the one before (the first, of the request): a server that
        trickles bytes is cut off like one that hangs."""
        try:
            yield from iterate_within(self.timeout, self._lines(path, payload))
        except DeadlineExceeded:
            raise self.timed_out() from None

    def _lines(self, path: str, payload: dict) -> Generator[str, None, None]:
        connected = False
        try:
            with self._http().stream(
                "POST", self._url(path), json=payload, headers=self._headers(), timeout=self.timeout
            ) as response:
                connected = True
                if not response.is_success:
                    response.read()
                    raise self.error(
                        f"{path} answered HTTP {response.status_code}: {self.excerpt(response.text)}"
                    )
                for line in response.iter_lines():
                    if line.strip():
                        yield line
        except httpx.TimeoutException as e:
            raise self.timed_out() from e
        except httpx.HTTPError as e:
            if not connected and isinstance(e, _UNREACHABLE):
                raise self.unreachable(e) from e
            raise self.error(
                f"the stream from {path} broke: {type(e).__name__}: {self.redact(str(e))}"
            ) from e

    def json_line(self, text: str, path: str) -> dict:
        """One streamed JSON object (an NDJSON line or an SSE data field)."""
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):  # malformed, or nested too deeply
            raise self.error(f"{path} streamed malformed JSON: {self.excerpt(text)}") from None
        if not isinstance(value, dict):
            raise self.error(f"{path} streamed {type(value).__name__}, not an object: {self.excerpt(text)}")
        return value

    def close(self) -> None:
        if self._owns_client and self._client is not None:
            self._client.close()
            self._client = None

    # --- messages ------------------------------------------------------------------------------------

    def error(self, problem: str) -> UpstreamError:
        return UpstreamError(STAGE, f"{self.shown} {problem}")

    def timed_out(self) -> UpstreamTimeout:
        return UpstreamTimeout(STAGE, f"{self.shown} after {self.timeout:g}s")

    def unreachable(self, e: Exception) -> UpstreamError:
        return UpstreamError(STAGE, f"cannot reach {self.shown}: {type(e).__name__}: {self.redact(str(e))}")

    def excerpt(self, text: str) -> str:
        return body_excerpt(self.redact(text))

    def redact(self, text: str) -> str:
        """A server (or a proxy) may echo the request headers back: the key never reaches a message."""
        return text.replace(self._api_key, "***") if self._api_key else text

    # --- plumbing ------------------------------------------------------------------------------------

    def _url(self, path: str) -> str:
        # user:password in the URL becomes Basic auth (a proxy in front of the server); a key replaces it.
        return (self.shown if self._api_key else self.base) + path

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    def _http(self) -> httpx.Client:
        if self._client is None:
            with self._lock:
                if self._client is None:
                    self._client = httpx.Client()
        return self._client


def without_userinfo(url: str) -> str:
    """`https://user:secret@host/x` -> `https://host/x`: URLs go into messages and logs."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    authority, slash, path = rest.partition("/")
    return f"{scheme}://{authority.rpartition('@')[2]}{slash}{path}"
