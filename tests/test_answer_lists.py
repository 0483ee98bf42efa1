"""An answer never ends on a lead-in: a sentence ending in a colon keeps its list (issue 16, part 3)."""

import numpy as np
import pytest

from funnel.embed import HashingEmbedder
from funnel.generate.context import with_continuations
from funnel.generate.extractive import ExtractiveGenerator, split_sentences
from funnel.group import group
from funnel.index.lance import LanceStore
from funnel.rerank.policies import RerankPolicy, second_stage
from funnel.types import Candidate, RerankStatus, SearchResult

from helpers import chunk

LEAD_IN = "npm gets its config settings from the following sources, sorted by priority:"
ITEMS = [
    "- Command line flags: putting --foo bar on the command line sets foo to bar.",
    "- Environment variables: any variable that starts with npm_config_ is read.",
    "- npmrc files: the per-project, per-user, global and built-in files.",
    "- Default configs: run npm config ls -l to see them all.",
]
QUESTION = "In what order does npm read its configuration?"


def test_a_lead_in_carries_its_list_items_and_never_stands_alone():
    c = chunk("config.md", 0, text="\n".join(["Some words before this.", LEAD_IN, *ITEMS]), kind="markdown")
    units = split_sentences(c)
    joined = next(u for u in units if LEAD_IN in u)
    assert all(item in joined for item in ITEMS)
    assert not any(u.endswith(":") for u in units)  # never a lead-in alone
    assert ITEMS[1] in units  # an item is still a unit of its own


def test_a_lead_in_to_one_sentence_takes_that_sentence():
    c = chunk("a.md", 0, text="Note the following: the cache is cleared every night at two.", kind="markdown")
    assert split_sentences(c) == ["Note the following: the cache is cleared every night at two."]


@pytest.mark.slow
def test_a_lead_in_ending_its_chunk_brings_the_next_chunk_into_the_answer(tmp_path):
    embedder = HashingEmbedder(dim=32)
    store = LanceStore(tmp_path / "index")
    first = chunk("config.md", 0, text="npm configuration.\n" + LEAD_IN, kind="markdown")
    second = chunk("config.md", 1, text="\n".join(ITEMS), kind="markdown")
    other = chunk("other.md", 0, text="Unrelated text about gardens and their flowers.", kind="markdown")
    chunks = [first, second, other]
    with store.transaction(embedder.name, embedder.dim) as tx:
        tx.add(chunks, np.asarray(embedder.embed([c.text for c in chunks])))
    # The search found only the lead-in's chunk of config.md.
    window = [Candidate(first, 1, 1.0), Candidate(other, 2, 0.5)]
    hits = second_stage(QUESTION, window, None, RerankPolicy.NONE).hits
    result = SearchResult(QUESTION, tuple(group(hits, k=2)), tuple(hits), RerankStatus.SKIPPED)

    without = ExtractiveGenerator(embedder).answer(QUESTION, result)
    assert LEAD_IN not in without.text  # a dangling lead-in is never the answer

    completed = with_continuations(result, store)
    assert [h.chunk.chunk_id for h in completed.documents[0].hits] == [first.chunk_id, second.chunk_id]
    answer = ExtractiveGenerator(embedder).answer(QUESTION, completed)
    assert LEAD_IN in answer.text and "Command line flags" in answer.text and "Default configs" in answer.text
    assert with_continuations(completed, store).documents == completed.documents  # held already: no repeat


def test_a_lead_in_to_sub_sections_is_answered_with_their_headings(tmp_path):
    # npm's config.md: the lead-in ends its section, and the "list" is the four sub-sections after it.
    from funnel.pipeline import Pipeline

    docs = tmp_path / "docs"
    docs.mkdir()
    body = "Some words about this source that go on for a while and say little. " * 3
    (docs / "config.md").write_text(
        "# config\n\n### Description\n\nThis article details npm configuration in general.\n\n"
        "npm gets its configuration values from the following sources, sorted by priority:\n\n"
        + "".join(f"#### {name}\n\n{body}\n\n" for name in
                  ["Command Line Flags", "Environment Variables", "npmrc Files", "Default Configs"])
        + "### Shorthands\n\nThe following shorthands are parsed on the command line.\n"
    )
    pipeline = Pipeline.build(store=LanceStore(tmp_path / "index"), embedder=HashingEmbedder(dim=64), reranker=None)
    pipeline.ingest([docs])
    answer = pipeline.ask("npm configuration values sources sorted by priority")
    assert ("sorted by priority: - Command Line Flags - Environment Variables - npmrc Files - Default Configs"
            in answer.text)
    assert "Shorthands" not in answer.text
