"""Asking one document or a chosen set (issue 33, part 4): `funnel ask/search --document`, the MCP tools'
`documents`, and the names they take (a path, a document id, the path a result shows). An unknown document
is a one-line error naming it, never an empty answer. (The HTTP API's `documents`: test_api_documents_scope.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from helpers import FIRMS
from mcp import Client, StdioServerParameters

from funnel.embed import HashingEmbedder
from funnel.errors import NotFound
from funnel.index.base import Filter
from funnel.index.lance import LanceStore
from funnel.index.scope import document_filter
from funnel.pipeline import Pipeline

FUNNEL = [sys.executable, "-c", "from funnel.apps.cli import run; run()"]
MCP = str(Path(sys.executable).parent / "funnel")
QUESTION = "Who is the CEO?"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """Three documents, each naming a CEO, ingested by `funnel ingest` (hashing embedder) into .funnel."""
    root = tmp_path_factory.mktemp("scope")
    (root / "docs").mkdir()
    for name, text in FIRMS.items():
        (root / "docs" / name).write_text(text)
    assert funnel("ingest", "docs", cwd=root).returncode == 0
    return root


def funnel(*args, cwd):
    env = {**os.environ, "FUNNEL_EMBEDDER": "hashing"}
    return subprocess.run([*FUNNEL, *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=120,
                          check=False)


def cited_paths(stdout: str) -> set[str]:
    body = json.loads(stdout)
    return {Path(c["path"]).name for c in body["citations"]}


def test_ask_one_document_from_the_cli(workspace):
    everything = funnel("ask", QUESTION, "--json", cwd=workspace)
    assert everything.returncode == 0 and len(cited_paths(everything.stdout)) > 1  # all three name a CEO
    one = funnel("ask", QUESTION, "--document", "docs/brix.txt", "--json", cwd=workspace)
    assert one.returncode == 0, one.stderr
    assert cited_paths(one.stdout) == {"brix.txt"} and "Tom Poe" in json.loads(one.stdout)["answer"]
    sources = json.loads(one.stdout)["search"]["documents"]
    assert {Path(d["path"]).name for d in sources} == {"brix.txt"}


def test_search_a_chosen_set_from_the_cli(workspace):
    result = funnel("search", "makes", "--document", "docs/acme.txt", "--document",
                    str(workspace / "docs" / "cole.txt"), "--json", cwd=workspace)
    assert result.returncode == 0, result.stderr
    assert {Path(d["path"]).name for d in json.loads(result.stdout)["documents"]} == {"acme.txt", "cole.txt"}


def test_an_unknown_document_is_a_one_line_error_naming_it(workspace):
    for command in ("ask", "search"):
        result = funnel(command, QUESTION, "--document", "docs/brix.txt", "--document", "docs/nope.txt",
                        cwd=workspace)
        assert result.returncode == NotFound.exit_code and result.stdout == ""
        assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
        assert "'docs/nope.txt'" in result.stderr and "brix" not in result.stderr


def test_a_document_is_named_by_its_id_its_path_or_the_path_results_show(tmp_path, monkeypatch):
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in FIRMS.items():
        (docs / name).write_text(text)
    store = LanceStore(tmp_path / "index")
    monkeypatch.chdir(tmp_path)  # results show paths relative to where the ingest ran: docs/brix.txt
    Pipeline.build(store=store, embedder=HashingEmbedder(dim=64), reranker=None).ingest([docs])
    monkeypatch.chdir(docs)  # from here, docs/brix.txt is no file: found by the path results show
    brix = (docs / "brix.txt").resolve().as_posix()
    assert brix in store.document_hashes()  # the CLI's documents are stored under their absolute paths
    shown = {Path(e.path).name: e.path for e in store.outline()}  # what a search result's `path` says
    assert shown["brix.txt"] == "docs/brix.txt" and not Path("docs/brix.txt").exists()
    for name in (brix, "brix.txt", "./brix.txt", "docs/brix.txt", f"  {brix} "):
        assert document_filter(store, [name]) == Filter(doc_ids=(brix,))
    assert document_filter(store, []) is None and document_filter(store, [" "]) is None
    both = document_filter(store, [shown["brix.txt"], shown["acme.txt"], brix])
    assert sorted(both.doc_ids) == sorted([brix, (docs / "acme.txt").resolve().as_posix()])
    with pytest.raises(NotFound, match=r"no document 'x\.txt', 'y' in collection 'c'"):
        document_filter(store, [brix, "x.txt", "y"], "collection 'c'")


def test_the_mcp_tools_take_documents(workspace):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUNNEL_")}
    env |= {"FUNNEL_EMBEDDER": "hashing", "FUNNEL_SERVE__DATA_DIR": str(workspace / "data")}
    params = StdioServerParameters(command=MCP, args=["mcp"], cwd=str(workspace), env=env)

    async def session():
        async with Client(params, read_timeout_seconds=120) as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
            assert "documents" in tools["ask"].input_schema["properties"]
            answer = await c.call_tool("ask", {"question": QUESTION, "documents": ["docs/cole.txt"]})
            assert not answer.is_error, answer.content[0].text
            body = answer.structured_content
            assert "Ann Lee" in body["answer"] and {Path(x["path"]).name for x in body["citations"]} == {"cole.txt"}
            found = await c.call_tool("search", {"query": "makes", "documents": ["docs/acme.txt", "docs/cole.txt"]})
            assert {Path(d["path"]).name for d in found.structured_content["documents"]} == {"acme.txt", "cole.txt"}
            unknown = await c.call_tool("ask", {"question": QUESTION, "documents": ["docs/nope.txt"]})
            assert unknown.is_error and "no document 'docs/nope.txt' in collection 'default'" in unknown.content[0].text
            assert "\n" not in unknown.content[0].text

    anyio.run(session)
