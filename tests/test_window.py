"""The second stage's window and the grouping after it, on one long document (issue 16, part 1)."""

from dataclasses import replace

from funnel.apps.cli import window_note
from funnel.group import group
from funnel.index.base import ScoredChunk
from funnel.retrieve.first_stage import FirstStageConfig, fuse
from funnel.rerank.policies import RerankPolicy, Rrf, second_stage
from funnel.types import RerankStatus, SearchResult

from helpers import ScriptedReranker, chunk


def scored(chunks):
    return [ScoredChunk(c, 1.0 / rank) for rank, c in enumerate(chunks, start=1)]


def pdf_chunk(doc_id, ordinal, page):
    return chunk(doc_id, ordinal, path=f"{doc_id}.pdf", kind="pdf", page=page)


def test_one_long_document_fills_the_window_past_the_cap():
    # The case: every retrieved chunk is from one manual; the cap of 3 used to leave 3 candidates.
    manual = [pdf_chunk("manual", i, page=1 + i // 2) for i in range(30)]
    window = fuse(scored(manual), scored(manual), 25, FirstStageConfig(), max_per_document=3)
    assert len(window) == 25
    assert [c.chunk.ordinal for c in window] == list(range(25))  # fused order kept
    assert [c.past_cap for c in window] == [False] * 3 + [True] * 22


def test_with_many_documents_the_cap_holds_and_nothing_goes_past_it():
    many = [chunk(f"d{i}", j) for i in range(20) for j in range(4)]
    window = fuse(scored(many), [], 25, FirstStageConfig(), max_per_document=3)
    assert len(window) == 25 and not any(c.past_cap for c in window)
    per_document = {}
    for c in window:
        per_document[c.chunk.doc_id] = per_document.get(c.chunk.doc_id, 0) + 1
    assert max(per_document.values()) <= 3


def test_a_short_window_takes_the_best_chunks_past_the_cap_in_fused_order():
    # a: 6 chunks, b: 2 chunks, ranked a a a a b a b a a; cap 2, window 6.
    order = [chunk("a", 0), chunk("a", 1), chunk("a", 2), chunk("a", 3), chunk("b", 0), chunk("a", 4),
             chunk("b", 1), chunk("a", 5)]
    window = fuse(scored(order), [], 6, FirstStageConfig(), max_per_document=2)
    assert [c.chunk.chunk_id for c in window] == ["a#0", "a#1", "a#2", "a#3", "b#0", "b#1"]
    assert [c.chunk.chunk_id for c in window if c.past_cap] == ["a#2", "a#3"]


def test_fewer_documents_than_k_returns_pages_each_with_its_own_chunks():
    manual = [pdf_chunk("manual", i, page=p) for i, p in enumerate([23, 25, 23, 7, 25, 9, 9, 11])]
    window = fuse(scored(manual), [], 25, FirstStageConfig(), max_per_document=3)
    hits = second_stage("q", window, None, RerankPolicy.NONE).hits
    results = group(hits, k=5)
    assert [(d.doc_id, d.page) for d in results] == [("manual", 23), ("manual", 25), ("manual", 7),
                                                     ("manual", 9), ("manual", 11)]
    assert [h.chunk.ordinal for h in results[0].hits] == [0, 2]
    assert [d.rank for d in results] == [1, 2, 3, 4, 5]


def test_k_documents_or_more_keep_document_results_from_chunks_within_the_cap():
    order = [chunk("a", 0), chunk("b", 0), chunk("a", 1), chunk("a", 2), chunk("c", 0), chunk("a", 3)]
    window = fuse(scored(order), [], 25, FirstStageConfig(), max_per_document=2)
    hits = second_stage("q", window, None, RerankPolicy.NONE).hits
    # A reranker that loved a#2 (past the cap) most: it does not move document a or become its passage.
    loved = [replace(h, final_rank=0) if h.chunk.chunk_id == "a#2" else h for h in hits]
    results = group(loved, k=3, chunks_per_document=2)
    assert [d.doc_id for d in results] == ["a", "b", "c"] and all(d.page is None for d in results)
    assert [h.chunk.chunk_id for h in results[0].hits] == ["a#0", "a#1"]


def test_explain_says_the_cap_shaped_the_window_and_what_the_reranker_received():
    manual = [pdf_chunk("manual", i, page=i) for i in range(10)]
    window = fuse(scored(manual), [], 25, FirstStageConfig(), max_per_document=3)
    hits = second_stage("q", window, None, RerankPolicy.NONE).hits
    result = SearchResult("q", tuple(group(hits, 5)), tuple(hits), RerankStatus.SKIPPED)
    note = window_note(result)
    assert note.startswith("window: 10 candidates from 1 document(s); the reranker scored 0")
    assert "would have left 3, so 7 chunks past the cap" in note
    plain = fuse(scored([chunk(f"d{i}") for i in range(4)]), [], 25, FirstStageConfig(), max_per_document=3)
    hits = second_stage("q", plain, None, RerankPolicy.NONE).hits
    assert "cap" not in window_note(SearchResult("q", (), tuple(hits), RerankStatus.SKIPPED))


def test_explain_says_whether_the_gate_let_the_reranker_reorder():
    window = fuse(scored([chunk(f"d{i}") for i in range(4)]), [], 25, FirstStageConfig())
    for scores, says in (({"d0": 0.2, "d1": 0.95, "d2": 0.9, "d3": 0.1}, "led its second by 0.050, under the gate 0.2, so "
                          "the first-stage order stands"),
                         ({"d0": 0.2, "d1": 0.95, "d2": 0.5, "d3": 0.1}, "led its second by 0.450, at least the gate 0.2, "
                          "so it reordered")):
        hits = second_stage("q", window, ScriptedReranker(scores), Rrf(gate=0.2)).hits
        result = SearchResult("q", (), tuple(hits), RerankStatus.OK, policy="auto: rrf:1|gate:0.2")
        assert says in window_note(result)
        assert [h.chunk.doc_id for h in hits][0] == ("d0" if "stands" in says else "d1")
    ungated = SearchResult("q", (), tuple(hits), RerankStatus.OK, policy="rrf")
    assert "gate" not in window_note(ungated)
