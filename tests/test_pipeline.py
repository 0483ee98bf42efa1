"""The pipeline end to end on real files, with the deterministic HashingEmbedder."""

import subprocess
from dataclasses import replace
from pathlib import Path
import sys
import textwrap

import pytest

from funnel.embed import HashingEmbedder
from funnel.errors import ConfigError, StoreError
from funnel.index.lance import LanceStore
from funnel.engine_config import EngineConfig, IngestConfig
from funnel.pipeline import Pipeline
from funnel.types import RerankStatus

from helpers import FailingReranker


class CountingEmbedder(HashingEmbedder):
    """Records every text it embeds; raises `fail_with` on a text containing `fail_on`."""

    def __init__(self, fail_on: str | None = None, fail_with: BaseException | None = None):
        super().__init__(dim=32, max_tokens=64)
        self.embedded: list[str] = []
        self.fail_on, self.fail_with = fail_on, fail_with

    def embed(self, texts):
        if self.fail_on and any(self.fail_on in t for t in texts):
            raise self.fail_with
        self.embedded.extend(texts)
        return super().embed(texts)


@pytest.fixture
def corpus(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "anvils.txt").write_text("Acme makes anvils. The CEO of Acme is Jane Roe.\n")
    (docs / "birds.md").write_text("# Birds\n\nRoadrunners run fast across the desert.\n\n## Coyotes\n\nCoyotes chase them.\n")
    (docs / "gears.txt").write_text("Gears transmit torque between shafts.\n")
    return docs


def make(tmp_path, embedder=None, **config):
    return Pipeline.build(EngineConfig.of(**config), store=LanceStore(tmp_path / "index"), embedder=embedder or CountingEmbedder(), reranker=None)


def test_ingest_then_search_and_ask(tmp_path, corpus):
    p = make(tmp_path)
    report = p.ingest([corpus])
    assert (report.added, report.problems) == (3, [])
    result = p.search("who is the CEO of Acme?", k=2)
    assert result.documents[0].path.endswith("anvils.txt")
    assert len(result.documents) == 2
    assert result.rerank_status is RerankStatus.SKIPPED
    answer = p.ask("who is the CEO of Acme?")
    assert "Jane Roe" in answer.text and "[1]" in answer.text
    assert answer.citations[0].path.endswith("anvils.txt")
    assert answer.generator == "extractive"


def test_reingest_touches_only_the_changed_file_and_drops_removed_ones(tmp_path, corpus):
    embedder = CountingEmbedder()
    p = make(tmp_path, embedder)
    p.ingest([corpus])
    embedder.embedded.clear()

    (corpus / "gears.txt").write_text("Gears transmit torque. Worm gears reduce speed.\n")
    (corpus / "birds.md").unlink()
    report = p.ingest([corpus])
    assert (report.added, report.updated, report.unchanged, report.removed) == (0, 1, 1, 1)
    assert embedder.embedded and all("Gears" in t for t in embedder.embedded)
    assert not any(d.endswith("birds.md") for d in p.store.document_hashes())
    assert p.search("worm gears").documents[0].path.endswith("gears.txt")

    embedder.embedded.clear()
    assert p.ingest([corpus]).unchanged == 2 and embedder.embedded == []


def test_a_failed_ingest_leaves_the_previous_index_readable(tmp_path, corpus):
    make(tmp_path).ingest([corpus])
    before = LanceStore(tmp_path / "index").document_hashes()
    (corpus / "new.txt").write_text("BOOM this file breaks the embedder\n")
    (corpus / "gears.txt").write_text("Gears, changed.\n")
    with pytest.raises(KeyboardInterrupt):
        make(tmp_path, CountingEmbedder("BOOM", KeyboardInterrupt())).ingest([corpus])
    p = make(tmp_path)
    assert p.store.document_hashes() == before
    assert p.search("roadrunners desert").documents[0].path.endswith("birds.md")
    (corpus / "new.txt").write_text("now a fine file\n")
    assert p.ingest([corpus]).problems == []


@pytest.mark.slow
def test_a_killed_ingest_leaves_the_previous_index_readable(tmp_path, corpus):
    make(tmp_path).ingest([corpus])
    before = LanceStore(tmp_path / "index").document_hashes()
    for i in range(40):
        (corpus / f"extra{i}.txt").write_text(f"extra file {i} " + "words " * 300)
    # The child writes several batches, then dies with SIGKILL: no handler, no cleanup runs.
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(tmp_path)!r})
        from funnel import indexer
        from funnel.embed import HashingEmbedder
        from funnel.index.lance import LanceStore
        from funnel.pipeline import Pipeline
        indexer.BATCH = 8
        class Dying(HashingEmbedder):
            calls = 0
            def embed(self, texts):
                Dying.calls += 1
                if Dying.calls == 4:
                    os.kill(os.getpid(), signal.SIGKILL)
                return super().embed(texts)
        Pipeline.build(store=LanceStore({str(tmp_path / "index")!r}), embedder=Dying(dim=32, max_tokens=64),
                       reranker=None).ingest([{str(corpus)!r}])
    """)
    child = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert child.returncode == -9, child.stderr
    p = make(tmp_path)
    assert p.store.document_hashes() == before
    report = p.ingest([corpus])  # the next writer discards the half-written versions
    assert report.added == 40 and report.problems == []


def test_bad_sources_are_reported_and_the_rest_ingested(tmp_path, corpus):
    (corpus / "broken.pdf").write_bytes(b"%PDF-1.4 this is not really a pdf")
    (corpus / "empty.txt").write_text("")
    (corpus / "latin1.txt").write_bytes("Caf\xe9 cr\xe8me is served at noon.".encode("latin-1"))
    missing = tmp_path / "nope"
    report = make(tmp_path).ingest([corpus, missing])
    problems = " | ".join(str(p) for p in report.problems)
    assert "broken.pdf" in problems and "empty.txt" in problems and "nope" in problems
    assert report.added == 4  # three good files + the latin-1 one


def test_query_edge_cases(tmp_path, corpus):
    p = make(tmp_path)
    with pytest.raises(StoreError, match="empty"):
        p.search("anything")
    p.ingest([corpus])
    with pytest.raises(ConfigError):
        p.search("   ")
    result = p.search("gears " * 20_000)  # ~120 KB
    assert result.documents[0].path.endswith("gears.txt")
    with pytest.raises(ConfigError, match="valid"):
        p.search("x", policy="smart_merge")


def test_reranker_failure_is_reported_not_raised(tmp_path, corpus):
    p = Pipeline.build(store=LanceStore(tmp_path / "index"), embedder=CountingEmbedder(), reranker=FailingReranker(OSError("down")))
    p.ingest([corpus])
    first = p.search("CEO of Acme", policy="none")
    result = p.search("CEO of Acme", policy="replace")
    assert result.rerank_status is RerankStatus.FALLBACK and "down" in result.rerank_reason
    assert [h.chunk.chunk_id for h in result.hits] == [h.chunk.chunk_id for h in first.hits]


def test_ingesting_one_file_leaves_its_siblings_alone(tmp_path, corpus):
    p = make(tmp_path)
    p.ingest([corpus])
    (corpus / "gears.txt").write_text("Gears, revised.\n")
    report = p.ingest([corpus / "gears.txt"])
    assert (report.updated, report.removed) == (1, 0)
    assert len(p.store.document_hashes()) == 3


def test_documents_under_an_unreadable_folder_are_kept(tmp_path, corpus, monkeypatch):
    from funnel import indexer
    from funnel.ingest import discover as real_discover

    p = make(tmp_path)
    p.ingest([corpus])

    def discover_without_birds(paths, *a, **kw):  # as if birds.md's folder could not be listed
        found = real_discover(paths, *a, **kw)
        birds = corpus.resolve() / "birds.md"
        return type(found)(**{**found.__dict__, "files": [f for f in found.files if f.path != birds],
                              "unlisted": [birds]})

    monkeypatch.setattr(indexer, "discover", discover_without_birds)
    assert p.ingest([corpus]).removed == 0
    assert len(p.store.document_hashes()) == 3


def test_a_loader_crash_on_one_file_is_reported_and_the_rest_ingested(tmp_path, corpus, monkeypatch):
    from funnel import indexer

    real = indexer.chunk_document

    def fragile(doc, *a, **kw):
        if doc.document.path.endswith("gears.txt"):
            raise RecursionError("maximum recursion depth exceeded")
        return real(doc, *a, **kw)

    monkeypatch.setattr(indexer, "chunk_document", fragile)
    report = make(tmp_path).ingest([corpus])
    assert report.added == 2
    assert any("gears.txt" in str(e) and "RecursionError" in str(e) for e in report.problems)


def test_k_counts_documents_even_when_one_document_has_many_chunks(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(3):
        (docs / f"long{i}.txt").write_text("zebra stripes. " * 400)
    for i in range(10):
        (docs / f"short{i}.txt").write_text(f"a zebra number {i}.\n")
    p = make(tmp_path, candidates=25, k=10)
    p.ingest([docs])
    assert len(p.search("zebra").documents) == 10


def test_chunks_larger_than_the_embedder_window_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="window"):
        Pipeline.build(replace(EngineConfig(), ingest=IngestConfig(chunk_tokens=1000)), store=LanceStore(tmp_path / "i"),
                       embedder=CountingEmbedder(), reranker=None)


def test_a_truncated_query_is_reported(tmp_path, corpus):
    p = make(tmp_path)
    p.ingest([corpus])
    assert p.search("gears").notes == ()
    assert "query cut" in p.search("gears " * 2000).notes[0]


def test_searching_with_another_embedder_is_a_clear_error(tmp_path, corpus):
    make(tmp_path).ingest([corpus])
    other = Pipeline.build(store=LanceStore(tmp_path / "index"), embedder=HashingEmbedder(dim=48), reranker=None)
    with pytest.raises(ConfigError, match="built with embedder"):
        other.search("gears")


def test_a_file_emptied_on_purpose_leaves_the_index_but_a_corrupt_one_keeps_its_text(tmp_path, corpus):
    p = make(tmp_path)
    (corpus / "report.pdf").write_bytes((Path(__file__).parent.parent / "samples/docs/portfolio_companies.pdf").read_bytes())
    p.ingest([corpus])
    (corpus / "gears.txt").write_text("")
    (corpus / "report.pdf").write_bytes(b"%PDF-1.4 truncated by a crashed editor")
    report = p.ingest([corpus])
    stored = p.store.document_hashes()
    assert not any(d.endswith("gears.txt") for d in stored) and report.removed == 1
    assert any(d.endswith("report.pdf") for d in stored)
    assert p.search("Zentara Robotics CEO").documents[0].path.endswith("report.pdf")


def test_search_is_its_three_steps_over_one_request(tmp_path, corpus):
    from funnel.rerank.policies import RerankPolicy
    from helpers import ScriptedReranker

    p = make(tmp_path, policy=RerankPolicy.GUARANTEED_SLOTS, guaranteed=1)
    p.ingest([corpus])
    p.reranker = ScriptedReranker({})
    searched = p.search("who is the CEO of Acme?", k=2)
    request = p.plan("who is the CEO of Acme?", k=2)
    assert (request.k, request.candidates, request.policy.label) == (2, 25, "guaranteed_slots")
    second = p.second_stage(request, p.first_stage(request))
    documents = p.group(request, second.hits)
    assert [h.chunk.chunk_id for h in second.hits] == [h.chunk.chunk_id for h in searched.hits]
    assert [(d.doc_id, d.score) for d in documents] == [(d.doc_id, d.score) for d in searched.documents]
    assert second.status is searched.rerank_status


def test_ask_leaves_the_search_result_frozen_and_reports_the_generation_time(tmp_path, corpus, monkeypatch):
    import funnel.pipeline as pipeline_module

    p = make(tmp_path)
    p.ingest([corpus])
    seen = []
    original = pipeline_module.with_continuations
    monkeypatch.setattr(pipeline_module, "with_continuations", lambda r, s: seen.append(original(r, s)) or seen[-1])
    answer = p.ask("who is the CEO of Acme?")
    assert "generate" not in seen[0].timings_ms  # the result the answer was made from is not changed
    assert set(answer.search.timings_ms) == {"first_stage", "rerank", "group", "generate"}
