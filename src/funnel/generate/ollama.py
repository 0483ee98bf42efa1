"""Ollama's native chat API: `POST {base}/api/chat`.

Request: `{model, messages, stream, tools?, format?, options: {temperature, num_predict?}}`; `format` is the
JSON schema the reply must match. Tools are `{"type": "function", "function": {name, description,
parameters}}`; a tool call comes back as `message.tool_calls[].function.{name, arguments}` with `arguments`
an object (not JSON text, unlike OpenAI), and its result goes back as `{"role": "tool", "content",
"tool_name"}`. Ollama gives calls no id unless it is a recent version; funnel then numbers them `call_0`...

Non-streamed, one JSON object answers, with `message`, `done_reason`, `prompt_eval_count` and
`eval_count`. Streamed, NDJSON lines each carry a `message.content` delta until a line with `done: true`
(which holds the counts); an `{"error": ...}` line reports a failure mid-stream.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence

import httpx

from funnel.errors import ConfigError
from funnel.generate.chat import (
    ChatMessage,
    ChatReply,
    ChatStream,
    LlmHttp,
    ToolCall,
    ToolSpec,
    optional_int,
    parse_arguments,
)

PATH = "/api/chat"


class OllamaChat:
    """A model served by Ollama. Cheap to build: nothing is sent before the first `chat` or `stream`."""

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:11434",
        *,
        model: str,
        client: httpx.Client | None = None,
        timeout: float = 60.0,
    ):
        if not model:
            raise ConfigError("OllamaChat needs a model name, e.g. model='llama3.2'")
        self.model = model
        self.name = f"ollama:{model}"
        self._http = LlmHttp(base_url, timeout, client)

    def __repr__(self) -> str:
        return f"OllamaChat(base_url={self._http.shown!r}, model={self.model!r})"

    def chat(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec] = (),
        *,
        json_schema: dict | None = None,
        max_tokens: int | None = None,
        temperature: float = 0.0,
    ) -> ChatReply:
        payload = self._payload(messages, tools, json_schema, max_tokens, temperature, stream=False)
        body = self._http.post(PATH, payload)
        if not isinstance(body, dict):
            raise self._http.error(f"{PATH} answered {type(body).__name__}, expected an object")
        if "error" in body:
            raise self._http.error(f"{PATH} reported an error: {self._http.excerpt(str(body['error']))}")
        message = body.get("message")
        if not isinstance(message, dict):
            raise self._http.error(f"{PATH} answer has no message: {self._http.excerpt(str(body))}")
        content = message.get("content") or ""
        if not isinstance(content, str):
            raise self._http.error(f"{PATH} message content is {type(content).__name__}, not text")
        return ChatReply(
            content=content,
            tool_calls=self._tool_calls(message.get("tool_calls"), 0),
            model=str(body.get("model") or self.model),
            prompt_tokens=optional_int(body.get("prompt_eval_count")),
            completion_tokens=optional_int(body.get("eval_count")),
            finish_reason=body.get("done_reason"),
        )

    def stream(
        self,
        messages: Sequence[ChatMessage],
        *,
        max_tokens: int | None = None,
        temperature: float = 0.0,
        tools: Sequence[ToolSpec] = (),
    ) -> ChatStream:
        """Text deltas; `tools` (an extension of the protocol) lets the reply carry tool calls too."""
        payload = self._payload(messages, tools, None, max_tokens, temperature, stream=True)
        return ChatStream(self._events(payload))

    def close(self) -> None:
        self._http.close()

    # --- one request ---------------------------------------------------------------------------------

    def _payload(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec],
        json_schema: dict | None,
        max_tokens: int | None,
        temperature: float,
        stream: bool,
    ) -> dict:
        options: dict = {"temperature": temperature}
        if max_tokens is not None:
            options["num_predict"] = max_tokens
        payload: dict = {
            "model": self.model,
            "messages": _messages(messages),
            "stream": stream,
            "options": options,
        }
        if tools:
            payload["tools"] = [
                {
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
                }
                for t in tools
            ]
        if json_schema is not None:
            payload["format"] = json_schema
        return payload

    def _events(self, payload: dict) -> Generator[str, None, ChatReply]:
        parts: list[str] = []
        calls: list[ToolCall] = []
        lines = self._http.stream_lines(PATH, payload)
        try:
            for line in lines:
                chunk = self._http.json_line(line, PATH)
                if "error" in chunk:
                    raise self._http.error(
                        f"{PATH} stream reported an error: {self._http.excerpt(str(chunk['error']))}"
                    )
                message = chunk.get("message") or {}
                if not isinstance(message, dict):
                    raise self._http.error(f"{PATH} streamed a message of type {type(message).__name__}")
                delta = message.get("content") or ""
                if not isinstance(delta, str):
                    raise self._http.error(
                        f"{PATH} streamed content of type {type(delta).__name__}, not text"
                    )
                if delta:
                    parts.append(delta)
                    yield delta
                calls.extend(self._tool_calls(message.get("tool_calls"), len(calls)))
                if chunk.get("done") is True:
                    return ChatReply(
                        content="".join(parts),
                        tool_calls=tuple(calls),
                        model=str(chunk.get("model") or self.model),
                        prompt_tokens=optional_int(chunk.get("prompt_eval_count")),
                        completion_tokens=optional_int(chunk.get("eval_count")),
                        finish_reason=chunk.get("done_reason"),
                    )
        finally:
            lines.close()
        raise self._http.error(f"{PATH} stream ended before a line with done: true")

    def _tool_calls(self, raw: object, first: int) -> tuple[ToolCall, ...]:
        if not raw:
            return ()
        if not isinstance(raw, list):
            raise self._http.error(f"{PATH} tool_calls is {type(raw).__name__}, not a list")
        calls = []
        for position, item in enumerate(raw, start=first):
            where = f"{self._http.shown} tool call {position}"
            function = item.get("function") if isinstance(item, dict) else None
            if (
                not isinstance(function, dict)
                or not isinstance(function.get("name"), str)
                or not function["name"]
            ):
                raise self._http.error(f"{PATH} tool call {position} has no function name")
            call_id = item.get("id") or f"call_{position}"
            calls.append(
                ToolCall(str(call_id), function["name"], parse_arguments(function.get("arguments"), where))
            )
        return tuple(calls)


def _messages(messages: Sequence[ChatMessage]) -> list[dict]:
    names = {call.id: call.name for m in messages for call in m.tool_calls}
    out = []
    for m in messages:
        message: dict = {"role": m.role, "content": m.content}
        if m.tool_calls:
            message["tool_calls"] = [
                {"function": {"name": c.name, "arguments": c.arguments}} for c in m.tool_calls
            ]
        if m.role == "tool":
            tool_name = m.name or names.get(m.tool_call_id or "")
            if tool_name:
                message["tool_name"] = tool_name
        out.append(message)
    return out
