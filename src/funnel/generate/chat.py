"""The chat protocol every LLM backend implements, the values it exchanges, the base every backend here
builds on (`ChatBackend`: the protocol's calls as one `ChatCall`), and the base the two HTTP backends
(`ollama`, `openai_compat`) share over `funnel.http.Upstream`, which converts errors for both.

A backend's `stream` yields text deltas. Funnel's backends return a `ChatStream`: an iterator of those
deltas whose `reply` holds the whole `ChatReply` (tool calls assembled, token counts, finish reason) once
the last delta has been read. A stream that breaks part-way raises `UpstreamError` from the iterator, after
the deltas it already yielded.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar, runtime_checkable

import httpx

from funnel.errors import ConfigError, UpstreamError
from funnel.http import Upstream

STAGE = "llm"
R = TypeVar("R")
ROLES = ("system", "user", "assistant", "tool")


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


class ReturningStream(Iterator[str], Generic[R]):
    """The text deltas of a generator that returns a final value: `value` is None until the deltas are
    exhausted, then what the generator returned. `close()` drops a stream read only in part."""

    def __init__(self, events: Generator[str, None, R]):
        self._events = events
        self.value: R | None = None

    def __next__(self) -> str:
        try:
            return next(self._events)
        except StopIteration as stop:
            self.value = stop.value
            raise

    def close(self) -> None:
        self._events.close()

    def finish(self) -> R:
        """Read the rest of the deltas; the final value."""
        for _ in self:
            pass
        assert self.value is not None
        return self.value


class ChatStream(ReturningStream[ChatReply]):
    """The text deltas of one streamed reply. `reply` is None until the deltas are exhausted, then the
    whole `ChatReply`. `close()` drops the connection of a stream read only in part."""

    @property
    def reply(self) -> ChatReply | None:
        return self.value


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


@dataclass(frozen=True)
class ChatCall:
    """The arguments of one `chat` or `stream` call, as an HTTP backend builds its request from them."""

    messages: Sequence[ChatMessage]
    tools: Sequence[ToolSpec] = ()
    json_schema: dict | None = None
    max_tokens: int | None = None
    temperature: float = 0.0
    stream: bool = False

    def function_tools(self) -> list[dict]:
        """The tools as Ollama and OpenAI both take them: `{"type": "function", "function": {...}}`."""
        return [
            {
                "type": "function",
                "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
            }
            for t in self.tools
        ]


class ChatBackend:
    """The `ChatModel` calls as every backend takes them: `chat` and `stream` put their arguments in one
    `ChatCall`, which the backend answers whole (`_answer`; by default its stream, read to the end) or as a
    stream of text deltas (`_stream`)."""

    def chat(self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] = (), **options) -> ChatReply:
        """`ChatModel.chat`; `options` are its keywords (json_schema, max_tokens, temperature: `ChatCall`'s)."""
        return self._answer(ChatCall(messages, tools, **options))

    def stream(
        self,
        messages: Sequence[ChatMessage],
        *,
        max_tokens: int | None = None,
        temperature: float = 0.0,
        tools: Sequence[ToolSpec] = (),
        json_schema: dict | None = None,
    ) -> ChatStream:
        """Text deltas; `tools` and `json_schema` (extensions of the protocol) let the reply carry tool calls
        too, assembled into `ChatStream.reply.tool_calls`, or hold to a schema."""
        call = ChatCall(messages, tools, json_schema, max_tokens, temperature, stream=True)
        return ChatStream(self._stream(call))

    def _answer(self, call: ChatCall) -> ChatReply:
        return ChatStream(self._stream(call)).finish()

    def _stream(self, call: ChatCall) -> Generator[str, None, ChatReply]:
        raise NotImplementedError


def llm_upstream(
    base_url: str, timeout: float, client: httpx.Client | None, api_key: str | None = None
) -> Upstream:
    """The LLM server at `base_url`, every httpx error turned into an `UpstreamError` naming the server,
    never its credentials."""
    if timeout <= 0:
        raise ConfigError(f"timeout must be positive, got {timeout}")
    if not base_url.rstrip("/").startswith(("http://", "https://")):
        raise ConfigError(f"the LLM base URL must start with http:// or https://, got {base_url!r}")
    return Upstream(STAGE, base_url, timeout, client, api_key)


class HttpChatModel(ChatBackend):
    """What the HTTP backends (`ollama`, `openai_compat`) share: one request, one reply. A backend says how
    to build the request (`_request`), read a whole reply (`_reply`) and read a streamed one (`_events`)."""

    model: str
    _http: Upstream

    def __init__(
        self,
        base_url: str,
        model: str,
        timeout: float,
        client: httpx.Client | None,
        api_key: str | None = None,
        *,
        no_model: str,
    ):
        """`no_model` is the error for an empty model name (each backend says what a name looks like)."""
        if not model:
            raise ConfigError(no_model)
        self.model = model
        self._http = llm_upstream(base_url, timeout, client, api_key)

    def __repr__(self) -> str:  # never shows the key
        return f"{type(self).__name__}(base_url={self._http.shown!r}, model={self.model!r})"

    def _answer(self, call: ChatCall) -> ChatReply:
        path, payload = self._request(call)
        body = self._http.post(path, payload)
        if not isinstance(body, dict):
            raise self._http.error(f"{path} answered {type(body).__name__}, expected an object")
        return self._reply(body, path)

    def _stream(self, call: ChatCall) -> Generator[str, None, ChatReply]:
        path, payload = self._request(call)  # here, so a request that cannot be built fails `stream()` itself
        return self._events(path, payload)

    def close(self) -> None:
        self._http.close()

    def _request(self, call: ChatCall) -> tuple[str, dict]:
        """The path and JSON body of one call."""
        raise NotImplementedError

    def _reply(self, body: dict, path: str) -> ChatReply:
        raise NotImplementedError

    def _events(self, path: str, payload: dict) -> Generator[str, None, ChatReply]:
        raise NotImplementedError

    def _function_name(self, item: object, what: str) -> str:
        """The function name of one tool call (Ollama's and OpenAI's share this shape)."""
        function = item.get("function") if isinstance(item, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str) or not name:
            raise self._http.error(f"{what} has no function name")
        return name

    def _stream_chunk(self, data: str, path: str) -> dict:
        """One streamed JSON object; an `{"error": ...}` one is the server reporting a failure mid-stream."""
        chunk = self._http.json_line(data, path)
        if "error" in chunk:
            raise self._http.error(
                f"{path} stream reported an error: {self._http.excerpt(str(chunk['error']))}"
            )
        return chunk

    def _tool_calls(self, raw: object, path: str = "", first: int = 0) -> tuple[ToolCall, ...]:
        """Whole tool calls, `[{id?, function: {name, arguments}}]` in both APIs, numbered from `first` (the
        calls a stream has read before); `call_N` where the server sends no id. Errors start with `path`."""
        if not raw:
            return ()
        prefix = f"{path} " if path else ""
        if not isinstance(raw, list):
            raise self._http.error(f"{prefix}tool_calls is {type(raw).__name__}, not a list")
        calls = []
        for position, item in enumerate(raw, start=first):
            name = self._function_name(item, f"{prefix}tool call {position}")
            where = f"{self._http.shown} tool call {position} ({name})"
            call_id = str(item.get("id") or f"call_{position}")
            calls.append(ToolCall(call_id, name, parse_arguments(item["function"].get("arguments"), where)))
        return tuple(calls)

    def _counted_reply(
        self,
        content: str,
        calls: tuple[ToolCall, ...],
        model: object,
        counts: tuple[object, object],
        finish_reason: str | None,
    ) -> ChatReply:
        """The reply with what the server said of it: its model (else ours), the prompt's and the completion's
        token counts (None where one is missing or not an integer) and why it stopped."""
        prompt_tokens, completion_tokens = counts
        return ChatReply(
            content=content,
            tool_calls=calls,
            model=str(model or self.model),
            prompt_tokens=optional_int(prompt_tokens),
            completion_tokens=optional_int(completion_tokens),
            finish_reason=finish_reason,
        )
