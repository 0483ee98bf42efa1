"""`funnel mcp` end to end: the real command, spawned by the official SDK's client over stdio (every tool, the
errors, the server answering after them) and over streamable HTTP on 127.0.0.1; stdout carries nothing
but the protocol."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from funnel.embed import load_embedder
from funnel.index.lance import LanceStore
from funnel.pipeline import Pipeline

ROOT = Path(__file__).parent.parent
FUNNEL = str(Path(sys.executable).parent / "funnel")
CEO_QUESTION = "Who is the CEO of Zentara Robotics?"
TOOLS = {"search", "ask", "get_document", "list_collections", "triage"}
CALC = '''"""Averages of order lines."""


def average(values):
    total = sum(values)
    return total / len(values)
'''


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """The sample documents' index, a `funnel serve` collection beside it, and a tiny repository."""
    root = tmp_path_factory.mktemp("mcp")
    embedder = load_embedder("minilm")  # the packaged model, loaded once for both indexes
    docs = ROOT / "samples" / "docs"
    assert Pipeline.build(store=LanceStore(root / "index"), embedder=embedder, reranker=None).ingest([docs]).problems == []
    notes = root / "data" / "collections" / "notes"
    Pipeline.build(store=LanceStore(notes / "index"), embedder=embedder, reranker=None).ingest([docs / "glossary.txt"])
    marker = {"name": "notes", "created_at": "2025-01-01T00:00:00+00:00"}  # as `funnel serve` writes it
    (notes / "collection.json").write_text(json.dumps(marker))
    repo = root / "repo"
    (repo / "app").mkdir(parents=True)
    (repo / "app" / "calc.py").write_text(CALC)
    (repo / "app" / "names.py").write_text('def greet(name):\n    return "hello " + name\n')
    return root


def trace_from(repo: Path) -> str:
    """A real traceback raised by the repository's own file."""
    path = repo / "app" / "calc.py"
    scope: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), scope)
    try:
        scope["average"]([])
    except ZeroDivisionError:
        return traceback.format_exc()
    raise AssertionError("average([]) did not raise")


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("FUNNEL_")}


def env_for(root: Path) -> dict[str, str]:
    return {**clean_env(), "FUNNEL_REPO_CACHE": str(root / "repos"),
            "FUNNEL_TRIAGE__INCIDENTS": str(root / "inc.sqlite"), "FUNNEL_SERVE__DATA_DIR": str(root / "data")}


def stdio(root: Path, *args: str) -> Client:
    params = StdioServerParameters(command=FUNNEL, args=["mcp", *args], cwd=str(root), env=env_for(root))
    return Client(params, read_timeout_seconds=120)


def data(result) -> dict:
    assert not result.is_error, result.content[0].text
    return result.structured_content


def error(result) -> str:
    assert result.is_error
    (content,) = result.content
    assert "\n" not in content.text
    return content.text


@pytest.mark.model
def test_every_tool_over_stdio(workspace):
    trace = trace_from(workspace / "repo")

    async def session():
        args = ("--index", str(workspace / "index"), "--repo", str(workspace / "repo"))
        async with stdio(workspace, *args) as c:
            listed = (await c.list_tools()).tools
            assert {t.name for t in listed} == TOOLS
            assert all(t.input_schema["type"] == "object" and t.output_schema for t in listed)

            collections = data(await c.call_tool("list_collections", {}))["collections"]
            samples = len(list((ROOT / "samples" / "docs").iterdir()))
            assert {c["name"]: c["documents"] for c in collections} == {"default": samples, "serve/notes": 1}

            query = {"query": CEO_QUESTION, "k": 3, "policy": "guaranteed_slots"}
            found = data(await c.call_tool("search", query))
            assert found["rerank_status"] == "ok" and found["policy"].startswith("guaranteed_slots")
            top = {d["path"].rsplit("/", 1)[-1]: d for d in found["documents"]}
            pdf = top["portfolio_companies.pdf"]
            assert pdf["location"] == "p.2" and pdf["page"] == 2 and "Iris Kallas" in pdf["snippet"]
            assert pdf["rerank_score"] is not None and pdf["score"] > 0

            answer = data(await c.call_tool("ask", {"question": CEO_QUESTION}))
            assert "Iris Kallas" in answer["answer"] and "[1]" in answer["answer"]
            cited = answer["citations"][0]
            assert cited["number"] == 1 and cited["page"] == 2
            assert cited["path"].endswith("portfolio_companies.pdf")
            assert answer["answered_by"] == "extractive" and answer["rerank_status"] in ("ok", "skipped")

            document = data(await c.call_tool("get_document", {"doc_id": cited["doc_id"], "limit": 50}))
            assert document["next_offset"] is None and document["total_chunks"] == len(document["chunks"])
            assert any("Iris Kallas" in p["text"] and p["page"] == 2 for p in document["chunks"])

            triaged = data(await c.call_tool("triage", {"stack_trace": trace}))
            assert triaged["files"][0]["path"] == "app/calc.py"
            assert triaged["exception_type"] == "ZeroDivisionError"
            assert triaged["analysis_status"] == "llm_unavailable" and triaged["incident_id"] == 1

            # Mistakes are tool errors with funnel's one line, and the server goes on answering.
            assert error(await c.call_tool("search", {"query": "   "})).endswith("the query is empty")
            unknown = await c.call_tool("ask", {"question": "x", "collection": "nope"})
            assert "no collection 'nope'" in error(unknown)
            assert "no document" in error(await c.call_tool("get_document", {"doc_id": "missing.txt"}))
            assert "trace is empty" in error(await c.call_tool("triage", {"stack_trace": " "}))
            assert (await c.call_tool("search", {"query": "x", "k": 0})).is_error  # schema: k >= 1
            again = data(await c.call_tool("search", {"query": "glossary", "collection": "serve/notes"}))
            assert again["documents"][0]["path"].endswith("glossary.txt")

    anyio.run(session)


@pytest.mark.model
def test_a_missing_index_and_no_repository_are_tool_errors(workspace):
    async def session():
        async with stdio(workspace, "--index", str(workspace / "never-built")) as c:
            assert "index is empty" in error(await c.call_tool("search", {"query": "anything"}))
            assert "triage needs a repository" in error(await c.call_tool("triage", {"stack_trace": "boom"}))
            listed = data(await c.call_tool("list_collections", {}))["collections"]
            assert listed[0] == {**listed[0], "name": "default", "chunks": 0, "embedder": None}

    anyio.run(session)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.model
def test_streamable_http(workspace):
    port = free_port()
    server = subprocess.Popen([FUNNEL, "mcp", "--http", "--port", str(port), "--index", str(workspace / "index")],
                              cwd=workspace, env=env_for(workspace), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
            assert server.poll() is None and time.monotonic() < deadline, server.stderr.read().decode()
            time.sleep(0.2)

        async def session():
            # The initialize handshake, as desktop agents connect (the stdio tests use the SDK's discovery).
            async with Client(f"http://127.0.0.1:{port}/mcp", read_timeout_seconds=120, mode="legacy") as c:
                assert c.protocol_version == "2025-11-25"
                assert {t.name for t in (await c.list_tools()).tools} == TOOLS
                assert "no collection" in error(await c.call_tool("search", {"query": "x", "collection": "x"}))
                query = {"query": "glossary of terms", "collection": "serve/notes"}
                found = data(await c.call_tool("search", query))
                assert found["collection"] == "serve/notes"
                assert found["documents"][0]["path"].endswith("glossary.txt")

        anyio.run(session)
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_stdout_carries_only_the_protocol(tmp_path):
    """A stdio server may print nothing else on stdout: a stray line would break the client's framing."""
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
         "params": {"name": "triage", "arguments": {"stack_trace": "x"}}},
    ]
    server = subprocess.Popen([FUNNEL, "-v", "mcp", "--index", str(tmp_path / "none")], cwd=tmp_path, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_env())
    watchdog = threading.Timer(60, server.kill)
    watchdog.start()
    try:
        server.stdin.write("".join(json.dumps(m) + "\n" for m in messages))
        server.stdin.flush()
        replies = [json.loads(server.stdout.readline()) for _ in range(3)]  # stdin stays open until all are in
        server.stdin.close()
        assert server.wait() == 0 and server.stdout.read() == ""
    finally:
        watchdog.cancel()
        server.kill()
    stderr = server.stderr.read()
    assert [r["id"] for r in replies] == [1, 2, 3], stderr
    assert replies[0]["result"]["serverInfo"]["name"] == "funnel"
    assert {t["name"] for t in replies[1]["result"]["tools"]} == TOOLS
    assert replies[2]["result"]["isError"]
    assert "triage needs a repository" in replies[2]["result"]["content"][0]["text"]
    assert "funnel mcp on stdio" in stderr and "triage needs a repository" in stderr  # -v: logged on stderr
