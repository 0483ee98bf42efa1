"""The public Python API (issue 15): `funnel.open` and the README's example of it, run as written."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
from pathlib import Path

import pytest

import funnel
from funnel.errors import ConfigError
from funnel.rerank.cache import CachedReranker
from funnel.rerank.lexical import LexicalReranker

ROOT = Path(__file__).parent.parent


def readme_python_block() -> str:
    readme = (ROOT / "README.md").read_text()
    start = readme.index("### Python")
    section = readme[start:readme.index("\n## ", start)]
    (block,) = re.findall(r"```python\n(.*?)```", section, re.S)
    return block


@pytest.mark.model
def test_the_readme_example_runs_as_written(tmp_path):
    shutil.copytree(ROOT / "samples" / "docs", tmp_path / "samples" / "docs")
    printed = io.StringIO()
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        with contextlib.redirect_stdout(printed):
            exec(compile(readme_python_block(), "README.md", "exec"), {})
    finally:
        os.chdir(cwd)
    text = printed.getvalue()
    samples = len(list((ROOT / "samples" / "docs").iterdir()))
    assert f"{samples} added, 0 updated, 0 removed" in text
    assert "\nok " in f"\n{text}"  # the built-in reranker ran under guaranteed_slots
    assert "Iris Kallas" in text and "portfolio_companies.pdf" in text  # the answer and its citation


def test_open_takes_the_index_embedder_and_a_reranker_spec(tmp_path):
    index = tmp_path / "index"
    (tmp_path / "notes.md").write_text("# Notes\n\nThe quarterly review is on Friday.\n")
    funnel.open(index, embedder="hashing", reranker="none").ingest([tmp_path / "notes.md"])
    pipeline = funnel.open(index, reranker="lexical", policy="rrf", k=2)
    assert pipeline.embedder.name.startswith("hashing")  # the index's embedder, not the default MiniLM
    assert isinstance(pipeline.reranker, CachedReranker) and pipeline.config.grouping.k == 2
    result = pipeline.search("quarterly review")
    assert result.rerank_status.value == "ok" and result.policy == "rrf"
    assert funnel.open(index, reranker=LexicalReranker()).search("review").documents
    assert funnel.open(index).reranker is not None  # the built-in reranker by default
    assert funnel.open(index, reranker="none").search("review").rerank_reason == "no reranker configured"


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [({"reranker": "cohere-ish"}, "unknown reranker"), ({"policy": "sideways"}, "policy"), ({"k": 0}, "k must")],
)
def test_open_refuses_bad_arguments_in_one_line(tmp_path, kwargs, words):
    with pytest.raises(ConfigError, match=words) as caught:
        funnel.open(tmp_path / "index", embedder="hashing", **kwargs)
    assert "\n" not in str(caught.value)
