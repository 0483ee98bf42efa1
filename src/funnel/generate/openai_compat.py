"""OpenAI-compatible servers: OpenAI itself, llama.cpp's `llama-server`, vLLM, LM Studio.

Chat (the default): `POST {base}/chat/completions` with `{model, messages, temperature, stream,
max_tokens?, stop?, tools?, response_format?}`. Tools are `{"type": "function", "function": {name,
description, parameters}}`; a call comes back as `choices[0].message.tool_calls[] = {id, type, function:
{name, arguments}}` with `arguments` JSON *text*, parsed here (invalid JSON is an `UpstreamError`). A JSON
schema is asked for with `response_format = {"type": "json_schema", "json_schema": {name, schema}}`.
Streamed, the answer is server-sent events: `data: {chunk}` lines whose `choices[0].delta` holds a
`content` delta and/or `tool_calls` deltas (pieces of one call share an `index`: id and name come first,
the argument text arrives in pieces), ended by `data: [DONE]`.

Base models (`completion_prompt=True`): a model with no chat template (say Gemma 3 270M under
llama-server) only continues text, so the messages are rendered into one plain prompt ("User: ...",
"Assistant:") and sent to `POST {base}/completions` with `{model, prompt, max_tokens, temperature, stop,
stream}`; the text is `choices[0].text`, streamed the same way. "\\nUser:" is always a stop sequence
there, so the model does not go on to write the user's next turn. Tools and JSON schemas need a chat
model and are refused in this mode.

`max_tokens` is sent under that name: every server above accepts it (OpenAI's newest reasoning models want
`max_completion_tokens` instead; leave `max_tokens` None for those).
"""

from __future__ import annotations

import json
from collections.abc import Generator, Iterator, Sequence

import httpx

from funnel.errors import ConfigError
from funnel.generate.chat import ChatCall, ChatMessage, ChatReply, HttpChatModel, ToolCall, parse_arguments

CHAT_PATH = "/chat/completions"
COMPLETIONS_PATH = "/completions"
_TURN_STOP = "\nUser:"


class OpenAIChat(HttpChatModel):
    """A model behind an OpenAI-compatible API. Cheap to build: nothing is sent before the first call.

    `base_url` includes the version prefix (`.../v1`). `api_key` goes out as `Authorization: Bearer` and
    never into a message, a repr or an error.
    """

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8080/v1",
        *,
        model: str,
        api_key: str | None = None,
        client: httpx.Client | None = None,
        timeout: float = 60.0,
        completion_prompt: bool = False,
        stop: tuple[str, ...] = (),
    ):
        no_model = "OpenAIChat needs a model name (llama-server accepts any, e.g. model='default')"
        super().__init__(base_url, model, timeout, client, api_key, no_model=no_model)
        self.name = f"openai:{model}"
        self.completion_prompt = completion_prompt
        self.stop = tuple(stop)

    # --- one request ---------------------------------------------------------------------------------

    def _request(self, call: ChatCall) -> tuple[str, dict]:
        payload: dict = {"model": self.model, "temperature": call.temperature, "stream": call.stream}
        if call.max_tokens is not None:
            payload["max_tokens"] = call.max_tokens
        if self.completion_prompt:
            if call.tools or call.json_schema is not None:
                raise ConfigError(
                    f"{self.name} runs with completion_prompt=True (a base model, no chat template): "
                    "tool calls and JSON schemas need a chat model"
                )
            payload["prompt"] = render_prompt(call.messages)
            payload["stop"] = list(self.stop) + ([_TURN_STOP] if _TURN_STOP not in self.stop else [])
            return COMPLETIONS_PATH, payload
        payload["messages"] = _messages(call.messages)
        if self.stop:
            payload["stop"] = list(self.stop)
        if call.tools:
            payload["tools"] = call.function_tools()
        if call.json_schema is not None:
            name = str(call.json_schema.get("title") or "response")
            safe = "".join(c if c.isalnum() or c in "_-" else "_" for c in name)[:64]
            payload["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": safe, "schema": call.json_schema},
            }
        return CHAT_PATH, payload

    def _reply(self, body: dict, path: str) -> ChatReply:
        choice = self._choice(body, path)
        if choice is None:
            raise self._http.error(f"{path} answer has no choices: {self._http.excerpt(json.dumps(body))}")
        usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
        if self.completion_prompt:
            content, calls = choice.get("text"), ()
        else:
            message = choice.get("message")
            if not isinstance(message, dict):
                raise self._http.error(
                    f"{path} choice has no message: {self._http.excerpt(json.dumps(choice))}"
                )
            content, calls = message.get("content"), self._tool_calls(message.get("tool_calls"))
        if content is not None and not isinstance(content, str):
            raise self._http.error(f"{path} content is {type(content).__name__}, not text")
        finish = choice.get("finish_reason")
        return self._counted_reply(content or "", calls, body.get("model"), _counts(usage), finish)

    def _events(self, path: str, payload: dict) -> Generator[str, None, ChatReply]:
        parts: list[str] = []
        pieces: dict[int, dict] = {}  # tool-call index -> {"id", "name", "arguments"} assembled so far
        model, finish, usage = self.model, None, {}
        lines = self._http.stream_lines(path, payload)
        other: list[str] = []  # lines that are not server-sent events (an HTML page, a JSON error)
        try:
            for data in _sse_data(lines, other):
                if data == "[DONE]":
                    text, calls = "".join(parts), self._assemble(pieces)
                    return self._counted_reply(text, calls, model, _counts(usage), finish)
                chunk = self._stream_chunk(data, path)
                model = str(chunk.get("model") or model)
                if isinstance(chunk.get("usage"), dict):  # vLLM/OpenAI with include_usage, llama-server
                    usage = chunk["usage"]
                choice = self._choice(chunk, path)
                if choice is None:
                    continue  # a usage-only chunk
                finish = choice.get("finish_reason") or finish
                if self.completion_prompt:
                    delta, calls = choice.get("text"), None
                else:
                    message = choice.get("delta") or {}
                    if not isinstance(message, dict):
                        raise self._http.error(f"{path} streamed a delta of type {type(message).__name__}")
                    delta, calls = message.get("content"), message.get("tool_calls")
                if delta is not None and not isinstance(delta, str):
                    raise self._http.error(
                        f"{path} streamed content of type {type(delta).__name__}, not text"
                    )
                if delta:
                    parts.append(delta)
                    yield delta
                if calls:
                    self._merge(pieces, calls, path)
        finally:
            lines.close()
        if other and not parts and not pieces:
            sent = self._http.excerpt(" ".join(other))
            raise self._http.error(f"{path} sent no server-sent events: {sent}")
        raise self._http.error(f"{path} stream ended before data: [DONE]")

    # --- the answer ----------------------------------------------------------------------------------

    def _choice(self, body: dict, path: str) -> dict | None:
        choices = body.get("choices")
        if choices is None or choices == []:
            return None
        if not isinstance(choices, list) or not isinstance(choices[0], dict):
            raise self._http.error(
                f"{path} choices is not a list of objects: {self._http.excerpt(json.dumps(choices))}"
            )
        return choices[0]

    def _merge(self, pieces: dict[int, dict], deltas: object, path: str) -> None:
        if not isinstance(deltas, list):
            raise self._http.error(f"{path} streamed tool_calls of type {type(deltas).__name__}, not a list")
        for delta in deltas:
            if not isinstance(delta, dict):
                raise self._http.error(f"{path} streamed a tool-call delta of type {type(delta).__name__}")
            index = delta.get("index")
            if isinstance(index, bool) or not isinstance(index, int):
                # No index (some servers send each call whole): a new id starts a new call.
                known = [i for i, p in pieces.items() if delta.get("id") and p["id"] == delta.get("id")]
                new = delta.get("id") and not known
                index = known[0] if known else (len(pieces) if new or not pieces else max(pieces))
            piece = pieces.setdefault(index, {"id": "", "name": "", "arguments": ""})
            piece["id"] = piece["id"] or str(delta.get("id") or "")
            function = delta.get("function") or {}
            if not isinstance(function, dict):
                raise self._http.error(
                    f"{path} streamed a tool-call function of type {type(function).__name__}"
                )
            piece["name"] = piece["name"] or str(function.get("name") or "")
            arguments = function.get("arguments")
            if isinstance(arguments, dict):  # a server that sends the object whole
                piece["arguments"] = json.dumps(arguments)
            elif arguments:
                piece["arguments"] += str(arguments)

    def _assemble(self, pieces: dict[int, dict]) -> tuple[ToolCall, ...]:
        calls = []
        for index in sorted(pieces):
            piece = pieces[index]
            if not piece["name"]:
                raise self._http.error(f"streamed tool call {index} never got a function name")
            where = f"{self._http.shown} tool call {index} ({piece['name']})"
            calls.append(
                ToolCall(
                    piece["id"] or f"call_{index}", piece["name"], parse_arguments(piece["arguments"], where)
                )
            )
        return tuple(calls)


def render_prompt(messages: Sequence[ChatMessage]) -> str:
    """Messages as one plain prompt for a base model: the system text, then labelled turns, then the
    label of the turn the model is to write."""
    parts = []
    for m in messages:
        text = m.content.strip()
        if m.role == "system":
            parts.append(text)
        elif m.role == "user":
            parts.append(f"User: {text}")
        elif m.role == "assistant":
            parts.append(f"Assistant: {text}")
        else:
            parts.append(f"Tool result ({m.name or m.tool_call_id or 'tool'}): {text}")
    parts.append("Assistant:")
    return "\n\n".join(p for p in parts if p)


def _messages(messages: Sequence[ChatMessage]) -> list[dict]:
    out = []
    for m in messages:
        message: dict = {"role": m.role, "content": m.content}
        if m.tool_calls:
            message["content"] = m.content or None  # OpenAI's shape for a turn that only calls tools
            message["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
                }
                for c in m.tool_calls
            ]
        if m.role == "tool":
            if m.tool_call_id is not None:
                message["tool_call_id"] = m.tool_call_id
        elif m.name:
            message["name"] = m.name
        out.append(message)
    return out


def _counts(usage: dict) -> tuple[object, object]:
    """The prompt's and the completion's token counts in OpenAI's `usage` object."""
    return usage.get("prompt_tokens"), usage.get("completion_tokens")


def _sse_data(lines: Iterator[str], other: list[str]) -> Iterator[str]:
    """The `data:` fields of server-sent events; comments (`: ping`), `event:` and `id:` lines are skipped,
    and the first lines that are none of these are kept in `other`."""
    for line in lines:
        if line.startswith("data:"):
            yield line[5:].strip()
        elif not line.startswith((":", "event:", "id:", "retry:")) and len(other) < 20:
            other.append(line)
