"""A chat LLM in this process: llama.cpp (llama-cpp-python) over a GGUF file, no server.

`local` is the packaged reader (`funnel.generate.gguf_parts`, assembled by `make llm`); `local:PATH` is any
GGUF a user brings (a 7B on a workstation). The model loads on first use (`warm_up()` loads it now) and stays
loaded: `funnel serve` keeps one for every request, and a process that never answers never loads it.

One model answers one request at a time (llama.cpp's context is not shared between threads): the others wait
their turn for at most `queue_s`, then get `UpstreamTimeout`, which the answer's fallback turns into the
extractive answer with a status. A generation longer than `timeout_s` is cut: the stream raises
`UpstreamTimeout` after the text it already gave, and the answer keeps that text, flagged "interrupted".

llama-cpp-python keeps the previous prompt's tokens in its KV cache and evaluates only what differs, so a
fixed system prompt put first is computed once per process.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Generator, Iterator
from pathlib import Path

from funnel.generate.base import CONTEXT_WINDOW, LLM_TIMEOUT_S
from funnel.errors import BackendUnavailable, UpstreamError, UpstreamTimeout, missing_dependency
from funnel.generate.chat import ChatBackend, ChatCall, ChatMessage, ChatReply, ToolCall, parse_arguments
from funnel.generate.gguf_parts import checked, default_path

STAGE = "llm"
QUEUE_S = 30.0  # how long a request waits for the model another request holds


class LocalChat(ChatBackend):
    """The ChatModel protocol over llama.cpp in process (a `ChatBackend`: the calls it answers are streamed)."""

    def __init__(
        self,
        path: Path | str | None = None,
        *,
        threads: int | None = None,
        context_window: int = CONTEXT_WINDOW,
        timeout_s: float = LLM_TIMEOUT_S,
        queue_s: float = QUEUE_S,
    ):
        self.path = Path(path).expanduser() if path else default_path()
        self.threads = threads or max(1, os.cpu_count() or 1)
        self.context_window = context_window
        self.timeout_s = timeout_s
        self.queue_s = queue_s
        self.name = f"local:{self.path.stem}"
        self._llama = None
        self._load_lock = threading.Lock()
        self._busy = threading.Lock()
        self.last_stats: dict[str, float] = {}  # of the latest reply: prompt/answer tokens, seconds

    def __repr__(self) -> str:
        return f"LocalChat(path={str(self.path)!r}, threads={self.threads})"

    def warm_up(self) -> None:
        self._model()

    def count_tokens(self, text: str) -> int:
        return len(self._model().tokenize(text.encode("utf-8"), add_bos=False, special=False))

    # --- internals -----------------------------------------------------------------------------------

    def _model(self):
        if self._llama is not None:
            return self._llama
        with self._load_lock:
            if self._llama is None:
                try:
                    from llama_cpp import Llama
                except ImportError:
                    raise missing_dependency("the local LLM", "llama-cpp-python", "llm") from None
                path = checked(self.path)
                try:
                    self._llama = Llama(model_path=str(path), n_ctx=self.context_window, n_threads=self.threads,
                                        n_batch=512, verbose=False)
                except (ValueError, RuntimeError, OSError) as e:
                    raise BackendUnavailable(f"llama.cpp could not load {path}: {e}") from None
        return self._llama

    def _stream(self, call: ChatCall) -> Generator[str, None, ChatReply]:
        llama = self._model()
        if not self._busy.acquire(timeout=self.queue_s):
            raise UpstreamTimeout(STAGE, f"the local model was busy with another answer for {self.queue_s:g} s")
        try:
            return (yield from self._generate(llama, call))
        finally:
            self._busy.release()

    def _generate(self, llama, call: ChatCall) -> Generator[str, None, ChatReply]:
        options: dict = {}
        if call.tools:
            options["tools"] = call.function_tools()
        if call.json_schema is not None:
            options["response_format"] = {"type": "json_object", "schema": call.json_schema}
        started = time.perf_counter()
        prompt = [_message(m) for m in call.messages]
        try:
            chunks: Iterator[dict] = llama.create_chat_completion(
                messages=prompt, max_tokens=call.max_tokens, temperature=call.temperature, stream=True,
                **options)
        except ValueError as e:  # "Requested tokens (N) exceed context window of M"
            raise UpstreamError(STAGE, f"the prompt does not fit the local model: {e}") from None
        parts: list[str] = []
        first_at = None
        finish = None
        try:
            for chunk in _guarded(chunks):
                choice = (chunk.get("choices") or [{}])[0]
                finish = choice.get("finish_reason") or finish
                delta = (choice.get("delta") or {}).get("content")
                if delta:
                    if first_at is None:
                        first_at = time.perf_counter()
                    parts.append(delta)
                    yield delta
                if time.perf_counter() - started > self.timeout_s:
                    raise UpstreamTimeout(STAGE, f"the answer took over {self.timeout_s:g} s and was cut")
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()
        ended = time.perf_counter()
        text, calls = tool_calls("".join(parts)) if call.tools else ("".join(parts), ())
        prompt_tokens = getattr(llama, "n_tokens", None)
        answer_tokens = self._count(llama, "".join(parts))
        self.last_stats = {
            "first_token_s": (first_at or ended) - started, "seconds": ended - started,
            "answer_tokens": answer_tokens,
        }
        return ChatReply(text, calls, self.name, prompt_tokens - answer_tokens if prompt_tokens else None,
                         answer_tokens, "tool_calls" if calls else finish)

    @staticmethod
    def _count(llama, text: str) -> int:
        return len(llama.tokenize(text.encode("utf-8"), add_bos=False, special=False)) if text else 0


_TOOL_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)


def tool_calls(text: str) -> tuple[str, tuple[ToolCall, ...]]:
    """The text less its tool calls, and the calls: the `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`
    blocks that Qwen2.5's (and Hermes') chat template tells the model to write. A block that is not a call
    (no name, arguments not an object) stays in the text."""
    calls: list[ToolCall] = []

    def take(match: re.Match) -> str:
        try:
            call = json.loads(match.group(1))
        except ValueError:
            return match.group(0)
        name = call.get("name") if isinstance(call, dict) else None
        if not isinstance(name, str) or not name:
            return match.group(0)
        arguments = parse_arguments(call.get("arguments"), f"local tool call {name}")
        calls.append(ToolCall(f"call_{len(calls)}", name, arguments))
        return ""

    text = _TOOL_CALL.sub(take, text)
    return text.strip() if calls else text, tuple(calls)


def _guarded(chunks: Iterator[dict]) -> Generator[dict, None, None]:
    """llama-cpp-python's errors (a prompt over the window found while decoding) as UpstreamError."""
    try:
        yield from chunks
    except (ValueError, RuntimeError) as e:
        raise UpstreamError(STAGE, f"the local model failed: {e}") from None


def _message(message: ChatMessage) -> dict:
    out: dict = {"role": message.role, "content": message.content}
    if message.name and message.role == "tool":
        out["name"] = message.name
    if message.tool_calls:
        out["tool_calls"] = [{"id": c.id, "type": "function",
                              "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
                             for c in message.tool_calls]
    return out
