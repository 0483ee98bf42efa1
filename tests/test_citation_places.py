"""Citations point into the file (issue 32): every surface that shows a cited source or a hit shows its
location in its file type's units ("row 12-14" for a CSV, "p.3", "slide 3", "L12-14") and its heading trail
(Markdown, Word, HTML sections): the CLI (plain, --explain, --json), the HTTP API (search, ask, SSE) and MCP.
The web page is driven in tests/test_web_page.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import funnel.ingest.loaders  # noqa: F401 (its rows fill LOCATION_UNITS: a CSV's unit is "row ")
from funnel.types import Chunk, Citation

FUNNEL = [sys.executable, "-c", "from funnel.apps.cli import run; run()"]
CITIES = "city,country,founded\n" + "".join(f"Town {i},Country {i},{1800 + i}\n" for i in range(1, 60)) + (
    "Zanzibar City,Tanzania,1830\n")
GUIDE = ("# Shipping\n\nGeneral words about shipping.\n\n## Anvils\n\n"
         "The anvil ships on Mondays by freight train.\n")
ZANZIBAR = "Which country is Zanzibar City in?"
ANVIL = "anvil ships Mondays freight"
ROWS = re.compile(r"row \d+-\d+")


@pytest.fixture
def docs(tmp_path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "cities.csv").write_text(CITIES)
    (folder / "guide.md").write_text(GUIDE)
    return folder


def test_a_citation_carries_its_chunks_location_and_heading():
    chunk = Chunk(chunk_id="c", doc_id="d", ordinal=0, text="t", path="g.md", title="g", kind="markdown",
                  n_tokens=1, heading="Shipping > Anvils", line_start=7, line_end=7)
    cited = Citation.of(1, chunk, "t")
    assert (cited.location, cited.heading) == ("L7-7", "Shipping > Anvils")
    row = Citation.of(2, Chunk(chunk_id="r", doc_id="d", ordinal=0, text="t", path="c.csv", title="c",
                               kind="csv", n_tokens=1, line_start=4, line_end=6), "t")
    assert (row.location, row.heading) == ("row 4-6", None)


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "FUNNEL_EMBEDDER": "hashing", "FUNNEL_RERANK__BACKEND": "none"}
    result = subprocess.run([*FUNNEL, *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    return result


def test_the_cli_shows_location_and_heading(docs, tmp_path):
    cli("ingest", str(docs), "--no-calibrate", cwd=tmp_path)
    asked = cli("ask", ZANZIBAR, cwd=tmp_path).stdout
    assert re.search(r"^\[1\] docs/cities\.csv \(row \d+-\d+\)$", asked, re.M), asked
    found = cli("search", ANVIL, cwd=tmp_path).stdout
    assert re.search(r"^1\. docs/guide\.md \(L\d+-\d+ · Shipping > Anvils\)", found, re.M), found
    explained = cli("search", ZANZIBAR, "--explain", cwd=tmp_path).stdout
    assert ROWS.search(explained) and "Shipping > Anvils" in explained, explained

    as_json = json.loads(cli("search", ANVIL, "--json", cwd=tmp_path).stdout)
    chunk = as_json["documents"][0]["hits"][0]["candidate"]["chunk"]
    assert (chunk["path"], chunk["heading"]) == ("docs/guide.md", "Shipping > Anvils")
    assert re.fullmatch(r"L\d+-\d+", chunk["location"])
    assert all("location" in h["candidate"]["chunk"] for h in as_json["hits"])
    answer = json.loads(cli("ask", ZANZIBAR, "--json", cwd=tmp_path).stdout)
    assert ROWS.fullmatch(answer["citations"][0]["location"]) and "heading" in answer["citations"][0]


@pytest.mark.slow  # a server on loopback, as the other HTTP tests
def test_the_api_shows_location_and_heading_in_search_ask_and_its_stream(tmp_path):
    import httpx
    from api_support import sse_events, upload, wait_done
    from helpers import serving

    from funnel.apps.api import create_app
    from funnel.apps.settings import Settings

    app = create_app(Settings(embedder="hashing", data_dir=tmp_path / "data", reranker="none"))
    with serving(app) as url, httpx.Client(base_url=url, timeout=60) as client:
        files = [("cities.csv", CITIES.encode()), ("guide.md", GUIDE.encode())]
        assert upload(client, "default", files).status_code == 202
        assert all(d["status"] == "ready" for d in wait_done(client, "default"))
        found = client.post("/v1/collections/default/search", json={"query": ANVIL, "explain": True}).json()
        best = found["results"][0]["hits"][0]
        assert best["path"] == "guide.md" and best["heading"] == "Shipping > Anvils"
        assert re.fullmatch(r"L\d+-\d+", best["location"])
        assert all("location" in c and "heading" in c for c in found["candidates"])

        asked = {"question": ZANZIBAR, "stream": False}
        answer = client.post("/v1/collections/default/ask", json=asked).json()
        cited = answer["citations"][0]
        assert cited["path"] == "cities.csv" and ROWS.fullmatch(cited["location"]) and "heading" in cited
        assert ROWS.fullmatch(answer["sources"][0]["location"]) and "heading" in answer["sources"][0]

        body = {"question": ANVIL, "stream": True}
        with client.stream("POST", "/v1/collections/default/ask", json=body) as response:
            events = dict(sse_events(response))
        source = events["meta"]["sources"][0]
        assert (source["path"], source["heading"]) == ("guide.md", "Shipping > Anvils")
        cited = events["done"]["citations"][0]
        assert cited["heading"] == "Shipping > Anvils" and re.fullmatch(r"L\d+-\d+", cited["location"])


def test_mcp_tools_show_location_and_heading(docs, tmp_path):
    import funnel
    from funnel.apps.settings import Settings
    from funnel.integrations.mcp import FunnelTools

    index = tmp_path / "index"
    assert funnel.open(index, embedder="hashing", reranker="none").ingest([docs]).problems == []
    settings = Settings(embedder="hashing", reranker="none", index=str(index), data_dir=tmp_path / "data")
    tools = FunnelTools(settings)
    hit = tools.search(ANVIL).documents[0]
    assert hit.path.endswith("docs/guide.md") and hit.heading == "Shipping > Anvils"
    assert re.fullmatch(r"L\d+-\d+", hit.location)
    cited = tools.ask(ZANZIBAR).citations[0]
    assert cited.path.endswith("docs/cities.csv") and ROWS.fullmatch(cited.location) and cited.heading is None
    cited = tools.ask("Which day does the anvil ship by freight train?").citations[0]
    assert cited.heading == "Shipping > Anvils"
    document = tools.get_document(hit.doc_id)
    assert any(p.heading == "Shipping > Anvils" for p in document.chunks)
