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

from funnel.generate.chat import ChatCall, ChatMessage, ChatReply, HttpChatModel, ToolCall

PATH = "/api/chat"


class OllamaChat(HttpChatModel):
    """A model served by Ollama. Cheap to build: nothing is sent before the first `chat` or `stream`."""

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:11434",
        *,
        model: str,
        client: httpx.Client | None = None,
        timeout: float = 60.0,
    ):
        super().__init__(
            base_url, model, timeout, client, no_model="OllamaChat needs a model name, e.g. model='llama3.2'"
        )
        self.name = f"ollama:{model}"

    # --- one request ---------------------------------------------------------------------------------

    def _request(self, call: ChatCall) -> tuple[str, dict]:
        options: dict = {"temperature": call.temperature}
        if call.max_tokens is not None:
            options["num_predict"] = call.max_tokens
        payload: dict = {
            "model": self.model,
            "messages": _messages(call.messages),
            "stream": call.stream,
            "options": options,
        }
        if call.tools:
            payload["tools"] = call.function_tools()
        if call.json_schema is not None:
            payload["format"] = call.json_schema
        return PATH, payload

    def _reply(self, body: dict, path: str) -> ChatReply:
        if "error" in body:
            raise self._http.error(f"{path} reported an error: {self._http.excerpt(str(body['error']))}")
        message = body.get("message")
        if not isinstance(message, dict):
            raise self._http.error(f"{path} answer has no message: {self._http.excerpt(str(body))}")
        content = message.get("content") or ""
        if not isinstance(content, str):
            raise self._http.error(f"{path} message content is {type(content).__name__}, not text")
        return self._finished(body, content, self._tool_calls(message.get("tool_calls"), PATH))

    def _finished(self, body: dict, content: str, calls: tuple[ToolCall, ...]) -> ChatReply:
        counts = body.get("prompt_eval_count"), body.get("eval_count")
        return self._counted_reply(content, calls, body.get("model"), counts, body.get("done_reason"))

    def _events(self, path: str, payload: dict) -> Generator[str, None, ChatReply]:
        parts: list[str] = []
        calls: list[ToolCall] = []
        lines = self._http.stream_lines(path, payload)
        try:
            for line in lines:
                chunk = self._stream_chunk(line, path)
                message = chunk.get("message") or {}
                if not isinstance(message, dict):
                    raise self._http.error(f"{path} streamed a message of type {type(message).__name__}")
                delta = message.get("content") or ""
                if not isinstance(delta, str):
                    raise self._http.error(
                        f"{path} streamed content of type {type(delta).__name__}, not text"
                    )
                if delta:
                    parts.append(delta)
                    yield delta
                calls.extend(self._tool_calls(message.get("tool_calls"), PATH, len(calls)))
                if chunk.get("done") is True:
                    return self._finished(chunk, "".join(parts), tuple(calls))
        finally:
            lines.close()
        raise self._http.error(f"{path} stream ended before a line with done: true")


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
