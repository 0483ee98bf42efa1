"""The LLM chat backends (Ollama `/api/chat`, OpenAI-compatible `/v1/chat/completions` and `/v1/completions`).

Round trips go over real loopback HTTP to a small stdlib server that speaks each documented wire format:
tests assert on what the server RECEIVED (bodies, tools, schemas, the auth header) as well as on the parsed
reply. Protocol edge cases (500s, malformed JSON, missing fields) go through `httpx.MockTransport`; slow and
cut streams, refused connections and timeouts go through real sockets.
"""

from __future__ import annotations

import json

import httpx
import pytest
from upstream_support import Reply, closed_port, fake, ndjson, sse  # noqa: F401 (fake: the fixture)

from funnel.errors import ConfigError, UpstreamError, UpstreamTimeout
from funnel.generate.chat import ChatMessage, ChatModel, ChatReply, ChatStream, ToolCall, ToolSpec
from funnel.generate.ollama import OllamaChat
from funnel.generate.openai_compat import OpenAIChat, render_prompt


def mocked(cls, handler, **kw):
    client = httpx.Client(transport=httpx.MockTransport(handler))
    return cls(kw.pop("base_url", "http://llm.test"), model="m", client=client, **kw)


SEARCH_TOOL = ToolSpec(
    "search_files",
    "Search the repository for files relevant to a query",
    {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
)
SCHEMA = {
    "title": "Triage analysis",
    "type": "object",
    "properties": {"cause": {"type": "string"}, "files": {"type": "array", "items": {"type": "string"}}},
    "required": ["cause"],
}
ASK = [ChatMessage("system", "Be brief."), ChatMessage("user", "Why is the sky blue?")]


def ollama_final(**extra) -> dict:
    return {
        "model": "llama3.2",
        "created_at": "2024-07-22T20:33:28.123648Z",
        "done": True,
        "done_reason": "stop",
        "total_duration": 885095291,
        "prompt_eval_count": 26,
        "eval_count": 12,
        **extra,
    }


# --- the protocol ----------------------------------------------------------------------------------------


def test_backends_implement_the_chat_protocol():
    assert isinstance(OllamaChat(model="llama3.2"), ChatModel)
    assert isinstance(OpenAIChat(model="gpt-4o-mini"), ChatModel)
    assert OllamaChat(model="llama3.2").name == "ollama:llama3.2"
    assert OpenAIChat(model="gpt-4o-mini").name == "openai:gpt-4o-mini"


def test_bad_configuration_fails_at_construction():
    with pytest.raises(ConfigError, match="valid roles: system, user, assistant, tool"):
        ChatMessage("robot", "hi")
    with pytest.raises(ConfigError, match="http:// or https://"):
        OllamaChat("localhost:11434", model="x")
    with pytest.raises(ConfigError, match="timeout"):
        OpenAIChat(model="x", timeout=0)
    with pytest.raises(ConfigError, match="model"):
        OllamaChat(model="")


# --- Ollama ----------------------------------------------------------------------------------------------


def test_ollama_chat_sends_the_documented_request_and_parses_the_reply(fake):
    fake.answer(Reply(ollama_final(message={"role": "assistant", "content": "Rayleigh scattering."})))
    reply = OllamaChat(fake.url, model="llama3.2").chat(ASK, max_tokens=50, temperature=0.2)

    assert reply == ChatReply("Rayleigh scattering.", (), "llama3.2", 26, 12, "stop")
    assert fake.last.path == "/api/chat"
    assert fake.last.body == {
        "model": "llama3.2",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Why is the sky blue?"},
        ],
        "stream": False,
        "options": {"temperature": 0.2, "num_predict": 50},
    }
    assert "authorization" not in fake.last.headers


def test_ollama_json_schema_goes_out_as_format(fake):
    fake.answer(Reply(ollama_final(message={"role": "assistant", "content": '{"cause": "x"}'})))
    reply = OllamaChat(fake.url, model="llama3.1").chat(ASK, json_schema=SCHEMA)
    assert fake.last.body["format"] == SCHEMA
    assert json.loads(reply.content) == {"cause": "x"}
    assert "num_predict" not in fake.last.body["options"]  # no max_tokens: the model's default


def test_ollama_tool_round_trip(fake):
    fake.answer(
        Reply(
            ollama_final(
                message={
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {"function": {"name": "search_files", "arguments": {"query": "KeyError user_id"}}},
                        {"function": {"index": 1, "name": "search_files", "arguments": {"query": "login"}}},
                    ],
                }
            )
        )
    )
    chat = OllamaChat(fake.url, model="qwen3")
    reply = chat.chat(ASK, [SEARCH_TOOL])
    assert reply.tool_calls == (
        ToolCall("call_0", "search_files", {"query": "KeyError user_id"}),
        ToolCall("call_1", "search_files", {"query": "login"}),
    )
    assert fake.last.body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "search_files",
                "description": "Search the repository for files relevant to a query",
                "parameters": SEARCH_TOOL.parameters,
            },
        }
    ]

    # The results go back as role "tool" with the tool's name (taken from the call when not given).
    fake.answer(Reply(ollama_final(message={"role": "assistant", "content": "auth.py is at fault."})))
    history = [
        *ASK,
        ChatMessage("assistant", "", tool_calls=reply.tool_calls),
        ChatMessage("tool", "src/auth.py", tool_call_id="call_0"),
        ChatMessage("tool", "src/login.py", tool_call_id="call_1", name="search_files"),
    ]
    assert chat.chat(history, [SEARCH_TOOL]).content == "auth.py is at fault."
    sent = fake.last.body["messages"]
    assert sent[2] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"function": {"name": "search_files", "arguments": {"query": "KeyError user_id"}}},
            {"function": {"name": "search_files", "arguments": {"query": "login"}}},
        ],
    }
    assert sent[3] == {"role": "tool", "content": "src/auth.py", "tool_name": "search_files"}
    assert sent[4] == {"role": "tool", "content": "src/login.py", "tool_name": "search_files"}


def test_ollama_keeps_tool_call_ids_a_newer_server_sends(fake):
    call = {"id": "abc", "function": {"name": "search_files", "arguments": {"query": "q"}}}
    fake.answer(Reply(ollama_final(message={"role": "assistant", "content": "", "tool_calls": [call]})))
    assert OllamaChat(fake.url, model="m").chat(ASK, [SEARCH_TOOL]).tool_calls[0].id == "abc"


def test_ollama_stream_yields_deltas_until_done(fake):
    fake.answer(
        Reply(
            lines=ndjson(
                {"model": "llama3.2", "message": {"role": "assistant", "content": "The"}, "done": False},
                {"model": "llama3.2", "message": {"role": "assistant", "content": " sky"}, "done": False},
                {"model": "llama3.2", "message": {"role": "assistant", "content": ""}, "done": False},
                {
                    "model": "llama3.2",
                    "message": {"role": "assistant", "content": " scatters."},
                    "done": False,
                },
                ollama_final(message={"role": "assistant", "content": ""}),
            ),
            content_type="application/x-ndjson",
        )
    )
    stream = OllamaChat(fake.url, model="llama3.2").stream(ASK, max_tokens=20)
    assert isinstance(stream, ChatStream) and stream.reply is None
    assert list(stream) == ["The", " sky", " scatters."]
    assert stream.reply == ChatReply("The sky scatters.", (), "llama3.2", 26, 12, "stop")
    assert fake.last.body["stream"] is True
    assert fake.last.body["options"] == {"temperature": 0.0, "num_predict": 20}
    assert "tools" not in fake.last.body


def test_ollama_stream_with_tools_collects_the_calls(fake):
    call = {"function": {"name": "search_files", "arguments": {"query": "q"}}}
    fake.answer(
        Reply(
            lines=ndjson(
                {"message": {"role": "assistant", "content": "Looking."}, "done": False},
                {"message": {"role": "assistant", "content": "", "tool_calls": [call]}, "done": False},
                ollama_final(message={"role": "assistant", "content": ""}),
            )
        )
    )
    stream = OllamaChat(fake.url, model="qwen3").stream(ASK, tools=[SEARCH_TOOL])
    assert list(stream) == ["Looking."]
    assert stream.reply.tool_calls == (ToolCall("call_0", "search_files", {"query": "q"}),)
    assert fake.last.body["tools"][0]["function"]["name"] == "search_files"


@pytest.mark.parametrize(
    "lines, cut, problem",
    [
        (ndjson({"message": {"content": "Half"}, "done": False}), True, "stream from /api/chat broke"),
        (ndjson({"message": {"content": "Half"}, "done": False}), False, "ended before a line with done"),
        (
            ndjson({"message": {"content": "Half"}, "done": False}, {"error": "out of memory"}),
            False,
            "out of memory",
        ),
        (
            ndjson({"message": {"content": "Half"}, "done": False}) + ["{not json"],
            False,
            "streamed malformed JSON",
        ),
    ],
    ids=["connection-cut", "no-done-line", "error-line", "not-json"],
)
def test_ollama_stream_broken_midway_raises_after_the_deltas(fake, lines, cut, problem):
    fake.answer(Reply(lines=lines, cut=cut))
    stream = OllamaChat(fake.url, model="m").stream(ASK)
    assert next(stream) == "Half"
    with pytest.raises(UpstreamError, match=problem) as caught:
        next(stream)
    assert caught.value.stage == "llm"


def test_ollama_model_not_found_is_an_upstream_error_with_the_body(fake):
    fake.answer(Reply({"error": 'model "nope" not found, try pulling it first'}, status=404))
    with pytest.raises(UpstreamError, match=r'HTTP 404: \{"error": "model \\"nope\\" not found'):
        OllamaChat(fake.url, model="nope").chat(ASK)
    with pytest.raises(UpstreamError, match="HTTP 404"):
        next(OllamaChat(fake.url, model="nope").stream(ASK))


def test_ollama_invalid_tool_arguments_are_an_upstream_error(fake):
    call = {"function": {"name": "search_files", "arguments": "{query: oops"}}
    fake.answer(Reply(ollama_final(message={"role": "assistant", "content": "", "tool_calls": [call]})))
    with pytest.raises(UpstreamError, match="not valid JSON"):
        OllamaChat(fake.url, model="m").chat(ASK, [SEARCH_TOOL])


# --- OpenAI-compatible: chat -------------------------------------------------------------------------------


def openai_completion(message: dict, finish: str = "stop") -> dict:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}],
        "usage": {"prompt_tokens": 31, "completion_tokens": 7, "total_tokens": 38},
    }


def test_openai_chat_sends_the_documented_request_and_parses_the_reply(fake):
    fake.answer(Reply(openai_completion({"content": "Rayleigh scattering."})))
    chat = OpenAIChat(fake.url + "/v1", model="gpt-4o-mini", api_key="sk-secret", stop=("\n\n",))
    reply = chat.chat(ASK, max_tokens=64)

    assert reply == ChatReply("Rayleigh scattering.", (), "gpt-4o-mini-2024-07-18", 31, 7, "stop")
    assert fake.last.path == "/v1/chat/completions"
    assert fake.last.headers["authorization"] == "Bearer sk-secret"
    assert fake.last.body == {
        "model": "gpt-4o-mini",
        "temperature": 0.0,
        "stream": False,
        "max_tokens": 64,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Why is the sky blue?"},
        ],
        "stop": ["\n\n"],
    }
    assert "sk-secret" not in repr(chat)


def test_openai_json_schema_goes_out_as_response_format(fake):
    fake.answer(Reply(openai_completion({"content": '{"cause": "x"}'})))
    OpenAIChat(fake.url + "/v1", model="m").chat(ASK, json_schema=SCHEMA)
    assert fake.last.body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "Triage_analysis", "schema": SCHEMA},
    }
    assert "max_tokens" not in fake.last.body and "authorization" not in fake.last.headers


def test_openai_tool_round_trip(fake):
    calls = [
        {
            "id": "call_a",
            "type": "function",
            "function": {"name": "search_files", "arguments": '{"query": "KeyError"}'},
        },
        {"id": "call_b", "type": "function", "function": {"name": "list_files", "arguments": ""}},
    ]
    fake.answer(Reply(openai_completion({"content": None, "tool_calls": calls}, finish="tool_calls")))
    chat = OpenAIChat(fake.url + "/v1", model="m")
    reply = chat.chat(ASK, [SEARCH_TOOL])
    assert reply.content == "" and reply.finish_reason == "tool_calls"
    assert reply.tool_calls == (
        ToolCall("call_a", "search_files", {"query": "KeyError"}),
        ToolCall("call_b", "list_files", {}),
    )
    assert fake.last.body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "search_files",
                "description": SEARCH_TOOL.description,
                "parameters": SEARCH_TOOL.parameters,
            },
        }
    ]

    fake.answer(Reply(openai_completion({"content": "auth.py"})))
    history = [
        *ASK,
        ChatMessage("assistant", "", tool_calls=reply.tool_calls),
        ChatMessage("tool", "src/auth.py", tool_call_id="call_a", name="search_files"),
    ]
    chat.chat(history, [SEARCH_TOOL])
    sent = fake.last.body["messages"]
    assert sent[2] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_a",
                "type": "function",
                "function": {"name": "search_files", "arguments": '{"query": "KeyError"}'},
            },
            {"id": "call_b", "type": "function", "function": {"name": "list_files", "arguments": "{}"}},
        ],
    }
    assert sent[3] == {"role": "tool", "content": "src/auth.py", "tool_call_id": "call_a"}


def test_openai_invalid_tool_arguments_are_an_upstream_error(fake):
    calls = [{"id": "c", "type": "function", "function": {"name": "search_files", "arguments": '{"query": '}}]
    fake.answer(Reply(openai_completion({"content": None, "tool_calls": calls})))
    with pytest.raises(
        UpstreamError, match=r"tool call 0 \(search_files\) has arguments that are not valid JSON"
    ):
        OpenAIChat(fake.url + "/v1", model="m").chat(ASK, [SEARCH_TOOL])
    calls[0]["function"]["arguments"] = '["a list"]'
    fake.answer(Reply(openai_completion({"content": None, "tool_calls": calls})))
    with pytest.raises(UpstreamError, match="not an object"):
        OpenAIChat(fake.url + "/v1", model="m").chat(ASK, [SEARCH_TOOL])


def chunk(delta: dict, finish: str | None = None) -> dict:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "llama-3.2-3b",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def test_openai_stream_yields_deltas_until_done(fake):
    usage = {"id": "x", "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 3}}
    lines = [": keep-alive", ""] + sse(
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "Ray"}),
        chunk({"content": "leigh"}),
        chunk({"content": " scattering."}),
        chunk({}, finish="stop"),
        usage,
        "[DONE]",
    )
    fake.answer(Reply(lines=lines, content_type="text/event-stream"))
    stream = OpenAIChat(fake.url + "/v1", model="m", api_key="k").stream(ASK, temperature=0.5)
    assert list(stream) == ["Ray", "leigh", " scattering."]
    assert stream.reply == ChatReply("Rayleigh scattering.", (), "llama-3.2-3b", 9, 3, "stop")
    assert fake.last.body["stream"] is True and fake.last.body["temperature"] == 0.5
    assert fake.last.headers["authorization"] == "Bearer k"


def test_openai_streamed_tool_call_deltas_are_assembled_by_index(fake):
    def call(index, **kw):
        return {"index": index, **kw}

    lines = sse(
        chunk(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    call(0, id="call_a", type="function", function={"name": "search_files", "arguments": ""})
                ],
            }
        ),
        chunk({"tool_calls": [call(0, function={"arguments": '{"que'})]}),
        chunk(
            {
                "tool_calls": [
                    call(
                        1,
                        id="call_b",
                        type="function",
                        function={"name": "search_files", "arguments": '{"query"'},
                    )
                ]
            }
        ),
        chunk({"tool_calls": [call(0, function={"arguments": 'ry": "KeyError"}'})]}),
        chunk({"tool_calls": [call(1, function={"arguments": ': "login"}'})]}),
        chunk({}, finish="tool_calls"),
        "[DONE]",
    )
    fake.answer(Reply(lines=lines, content_type="text/event-stream"))
    stream = OpenAIChat(fake.url + "/v1", model="m").stream(ASK, tools=[SEARCH_TOOL])
    assert list(stream) == []
    assert stream.reply.finish_reason == "tool_calls"
    assert stream.reply.tool_calls == (
        ToolCall("call_a", "search_files", {"query": "KeyError"}),
        ToolCall("call_b", "search_files", {"query": "login"}),
    )
    assert fake.last.body["tools"][0]["type"] == "function"


def test_openai_streamed_tool_call_with_invalid_json_raises_at_the_end(fake):
    lines = sse(
        chunk({"content": "Let me look."}),
        chunk(
            {
                "tool_calls": [
                    {"index": 0, "id": "c", "function": {"name": "search_files", "arguments": '{"q'}}
                ]
            }
        ),
        "[DONE]",
    )
    fake.answer(Reply(lines=lines))
    stream = OpenAIChat(fake.url + "/v1", model="m").stream(ASK, tools=[SEARCH_TOOL])
    assert next(stream) == "Let me look."
    with pytest.raises(UpstreamError, match="not valid JSON"):
        next(stream)


@pytest.mark.parametrize(
    "tail, cut, problem",
    [
        ([], True, "stream from /chat/completions broke"),
        ([], False, r"ended before data: \[DONE\]"),
        (
            sse({"error": {"message": "context length exceeded", "type": "server_error"}}),
            False,
            "context length",
        ),
        (["data: {not json", ""], False, "streamed malformed JSON"),
    ],
    ids=["connection-cut", "no-done", "error-event", "not-json"],
)
def test_openai_stream_broken_midway_raises_after_the_deltas(fake, tail, cut, problem):
    fake.answer(Reply(lines=sse(chunk({"content": "Half"})) + tail, cut=cut))
    stream = OpenAIChat(fake.url + "/v1", model="m").stream(ASK)
    assert next(stream) == "Half"
    with pytest.raises(UpstreamError, match=problem):
        next(stream)


# --- OpenAI-compatible: completions for base models --------------------------------------------------------


def test_completion_prompt_renders_the_messages_for_a_base_model(fake):
    fake.answer(
        Reply(
            {
                "id": "cmpl-1",
                "object": "text_completion",
                "model": "gemma-3-270m",
                "choices": [
                    {"index": 0, "text": " Because of Rayleigh scattering.", "finish_reason": "stop"}
                ],
                "usage": {"prompt_tokens": 20, "completion_tokens": 6},
            }
        )
    )
    chat = OpenAIChat(fake.url + "/v1", model="gemma-3-270m", completion_prompt=True, stop=("\n\n",))
    reply = chat.chat(ASK, max_tokens=32)
    assert reply == ChatReply(" Because of Rayleigh scattering.", (), "gemma-3-270m", 20, 6, "stop")
    assert fake.last.path == "/v1/completions"
    assert fake.last.body == {
        "model": "gemma-3-270m",
        "temperature": 0.0,
        "stream": False,
        "max_tokens": 32,
        "prompt": "Be brief.\n\nUser: Why is the sky blue?\n\nAssistant:",
        "stop": ["\n\n", "\nUser:"],
    }


def test_completion_prompt_streams_text(fake):
    lines = sse(
        {"choices": [{"index": 0, "text": " Rayleigh", "finish_reason": None}]},
        {"choices": [{"index": 0, "text": " scattering.", "finish_reason": "stop"}]},
        "[DONE]",
    )
    fake.answer(Reply(lines=lines, content_type="text/event-stream"))
    stream = OpenAIChat(fake.url + "/v1", model="g", completion_prompt=True).stream(ASK)
    assert list(stream) == [" Rayleigh", " scattering."]
    assert stream.reply.content == " Rayleigh scattering." and stream.reply.finish_reason == "stop"
    assert fake.last.path == "/v1/completions" and fake.last.body["stop"] == ["\nUser:"]


def test_completion_prompt_refuses_tools_and_schemas():
    chat = OpenAIChat(model="g", completion_prompt=True)
    with pytest.raises(ConfigError, match="need a chat model"):
        chat.chat(ASK, [SEARCH_TOOL])
    with pytest.raises(ConfigError, match="need a chat model"):
        chat.chat(ASK, json_schema=SCHEMA)


def test_render_prompt_labels_turns_and_tool_results():
    prompt = render_prompt(
        [
            ChatMessage("user", "q1"),
            ChatMessage("assistant", "a1"),
            ChatMessage("tool", "result", name="search_files"),
        ]
    )
    assert prompt == "User: q1\n\nAssistant: a1\n\nTool result (search_files): result\n\nAssistant:"


# --- errors, both backends ---------------------------------------------------------------------------------

BACKENDS = [OllamaChat, OpenAIChat]


@pytest.mark.parametrize("cls", BACKENDS)
def test_http_500_is_an_upstream_error_with_status_and_excerpt(cls):
    chat = mocked(
        cls, lambda request: httpx.Response(500, text="internal failure: CUDA out of memory " + "x" * 500)
    )
    with pytest.raises(UpstreamError, match=r"HTTP 500: internal failure: CUDA out of memory x+…$") as e:
        chat.chat(ASK)
    assert len(str(e.value)) < 320


@pytest.mark.parametrize("cls", BACKENDS)
@pytest.mark.parametrize(
    "content, problem",
    [
        (b"<html>proxy error</html>", "malformed JSON: proxy error"),
        (b"[1, 2]", "answered list, expected an object"),
        (b"{}", "has no"),
        (b'{"message": {"content": 5}, "choices": [{"message": {"content": 5}}]}', "not text"),
    ],
)
def test_malformed_answers_are_upstream_errors(cls, content, problem):
    chat = mocked(cls, lambda request: httpx.Response(200, content=content))
    with pytest.raises(UpstreamError, match=problem):
        chat.chat(ASK)


@pytest.mark.parametrize("cls", BACKENDS)
def test_connection_refused_says_which_server(cls):
    port = closed_port()
    chat = cls(f"http://127.0.0.1:{port}", model="m", timeout=2)
    with pytest.raises(
        UpstreamError, match=rf"^llm: cannot reach http://127.0.0.1:{port}: ConnectError"
    ) as caught:
        chat.chat(ASK)
    assert not isinstance(caught.value, UpstreamTimeout)
    with pytest.raises(UpstreamError, match="cannot reach"):
        next(chat.stream(ASK))


@pytest.mark.parametrize("cls", BACKENDS)
def test_dns_failure_says_which_server(cls):
    def refuse(request):
        raise httpx.ConnectError("[Errno -2] Name or service not known", request=request)

    with pytest.raises(UpstreamError, match=r"cannot reach http://llm.test: ConnectError: .*Name or service"):
        mocked(cls, refuse).chat(ASK)


@pytest.mark.parametrize("cls", BACKENDS)
def test_a_body_cut_short_is_not_mistaken_for_an_unreachable_server(fake, cls):
    fake.answer(Reply(lines=['{"message": {"content": "Hal'], cut=True, content_type="application/json"))
    with pytest.raises(UpstreamError, match=r"chat(/completions)? broke off: RemoteProtocolError"):
        cls(fake.url, model="m").chat(ASK)


@pytest.mark.parametrize("cls", BACKENDS)
def test_a_slow_server_times_out(fake, cls):
    fake.answer(Reply({"never": "read"}, delay_s=1.0))
    chat = cls(fake.url, model="m", timeout=0.2)
    with pytest.raises(UpstreamTimeout, match=r"timed out \(http://127.0.0.1:\d+ after 0.2s\)"):
        chat.chat(ASK)
    with pytest.raises(UpstreamTimeout):
        next(chat.stream(ASK))


def test_a_stream_that_stalls_midway_times_out_after_its_deltas(fake):
    fake.answer(Reply(lines=sse(chunk({"content": "Half"}), chunk({"content": "never"})), line_delay_s=1.0))
    stream = OpenAIChat(fake.url, model="m", timeout=0.2).stream(ASK)
    assert next(stream) == "Half"
    with pytest.raises(UpstreamTimeout):
        next(stream)


def test_the_api_key_never_reaches_a_message():
    key = "sk-live-0123456789"

    def echo(request):
        return httpx.Response(401, text=f"invalid key: {request.headers['authorization']}")

    chat = mocked(OpenAIChat, echo, api_key=key)
    with pytest.raises(UpstreamError) as caught:
        chat.chat(ASK)
    assert key not in str(caught.value) and "Bearer ***" in str(caught.value)

    def refuse(request):
        raise httpx.ConnectError(f"refused while sending {request.headers['authorization']}", request=request)

    with pytest.raises(UpstreamError) as caught:
        mocked(OpenAIChat, refuse, api_key=key).chat(ASK)
    assert key not in str(caught.value)


def test_credentials_in_the_base_url_stay_out_of_messages():
    chat = mocked(
        OllamaChat, lambda r: httpx.Response(502, text="bad gateway"), base_url="http://u:pw@llm.test"
    )
    with pytest.raises(UpstreamError) as caught:
        chat.chat(ASK)
    assert "pw" not in str(caught.value) and "http://llm.test" in str(caught.value)
    assert "pw" not in repr(chat)


def test_closing_a_stream_early_drops_the_connection(fake):
    fake.answer(Reply(lines=sse(chunk({"content": "a"}), chunk({"content": "b"}), "[DONE]")))
    stream = OpenAIChat(fake.url, model="m").stream(ASK)
    assert next(stream) == "a"
    stream.close()
    assert stream.reply is None
    with pytest.raises(StopIteration):
        next(stream)
