"""LlmGenerator (context packing, prompt, citations, streaming) and FallbackGenerator.

The generator logic runs against `ScriptedChat`, a ChatModel whose reply the test states; the round trips
run over the real HTTP backends against the fake server of upstream_support, and the fallback is checked
with the model server down (a closed port) through the whole pipeline.
"""

from __future__ import annotations

import pytest
from helpers import chunk, write_files
from upstream_support import Reply, ScriptedChat, closed_port, fake, ndjson, sse  # noqa: F401 (fixture)

from funnel.embed import HashingEmbedder
from funnel.errors import BackendUnavailable, ConfigError
from funnel.generate.abstain import NOT_IN_DOCUMENTS
from funnel.generate.base import Generator
from funnel.generate.extractive import NOT_FOUND, ExtractiveGenerator
from funnel.generate.llm import (
    INTERRUPTED,
    AnswerInterrupted,
    AnswerStream,
    FallbackGenerator,
    LlmGenerator,
    approximate_tokens,
)
from funnel.generate.ollama import OllamaChat
from funnel.generate.openai_compat import OpenAIChat
from funnel.group import group
from funnel.index.lance import LanceStore
from funnel.pipeline import Pipeline
from funnel.types import Candidate, Chunk, Hit, RerankStatus, SearchResult

WORDS = HashingEmbedder().count_tokens  # the embedder's tokenizer: one token per word


def search_result(chunks: list[Chunk], query: str = "q") -> SearchResult:
    """The chunks in final order (best first), grouped into documents as the pipeline does."""
    hits = [
        Hit(Candidate(c, fused_rank=i, fused_score=1.0 / (60 + i)), final_rank=i, final_score=1.0 / i)
        for i, c in enumerate(chunks, start=1)
    ]
    return SearchResult(query, tuple(group(hits, k=10)), tuple(hits), RerankStatus.SKIPPED)


REPORT = [
    chunk("report", 0, "Annual report\nRevenue grew 12% in 2023.", title="Annual report", page=3),
    chunk("handbook", 0, "Staff handbook\nThe CEO of Acme is Jane Roe.", title="Staff handbook", page=1),
    chunk("report", 1, "Annual report\nThe board met four times.", title="Annual report", page=7),
    chunk(
        "code",
        0,
        "src/app.py\ndef main():\n    run()",
        path="src/app.py",
        kind="code",
        line_start=10,
        line_end=12,
    ),
]


# --- context packing ---------------------------------------------------------------------------------------


def test_packing_keeps_rank_order_and_the_token_budget():
    chunks = [
        chunk("a", 0, "alpha " * 10),
        chunk("b", 0, "bravo " * 10),
        chunk("a", 1, "charlie " * 40),  # too big for what is left: skipped
        chunk("c", 0, "delta " * 5),  # smaller, later: still fits
    ]
    generator = LlmGenerator(ScriptedChat(), context_tokens=40, count_tokens=WORDS)
    passages = generator.pack(search_result(chunks))

    assert [p.chunk.chunk_id for p in passages] == ["a#0", "b#0", "c#0"]
    assert [p.number for p in passages] == [1, 2, 3]
    assert all(p.tokens == WORDS(p.render()) for p in passages)
    assert sum(p.tokens for p in passages) <= 40


def test_packing_orders_by_final_rank_across_documents():
    # a#0, b#0, a#1 in final order: grouping puts a#1 under document a, the context still goes by rank.
    chunks = [chunk("a", 0), chunk("b", 0), chunk("a", 1)]
    result = search_result(chunks)
    assert [h.chunk.chunk_id for d in result.documents for h in d.hits] == ["a#0", "a#1", "b#0"]
    passages = LlmGenerator(ScriptedChat()).pack(result)
    assert [p.chunk.chunk_id for p in passages] == ["a#0", "b#0", "a#1"]


def test_a_best_passage_longer_than_the_budget_is_cut_to_fit():
    chunks = [chunk("a", 0, " ".join(f"w{i}" for i in range(500))), chunk("b", 0, "short one")]
    passages = LlmGenerator(ScriptedChat(), context_tokens=50, count_tokens=WORDS).pack(search_result(chunks))
    assert [p.chunk.chunk_id for p in passages] == ["a#0"]
    assert 45 <= passages[0].tokens <= 50 and passages[0].text.startswith("w0 w1 w2")


def test_the_default_counter_is_four_characters_a_token():
    assert approximate_tokens("abcd" * 10) == 10 and approximate_tokens("abcde") == 2
    long = [chunk(f"d{i}", 0, "x" * 400) for i in range(10)]  # ~100 tokens each with the header
    passages = LlmGenerator(ScriptedChat(), context_tokens=350).pack(search_result(long))
    assert len(passages) == 3


# --- prompt ------------------------------------------------------------------------------------------------


def test_prompt_numbers_passages_with_title_and_location():
    chat = ScriptedChat("Revenue grew 12% [1].")
    LlmGenerator(chat).answer("How much did revenue grow?", search_result(REPORT))
    system, user = chat.sent[0]
    assert system.role == "system" and "ONLY" in system.content and "[1]" in system.content
    # It may say the documents do not answer, in the sentence the abstention gate recognises (issue 33).
    assert NOT_IN_DOCUMENTS in system.content
    assert user.role == "user"
    assert user.content == (
        "Context passages:\n\n"
        "[1] Annual report (p.3)\nRevenue grew 12% in 2023.\n\n"
        "[2] Staff handbook (p.1)\nThe CEO of Acme is Jane Roe.\n\n"
        "[3] Annual report (p.7)\nThe board met four times.\n\n"
        "[4] src/app.py (L10-12)\ndef main():\n    run()\n\n"
        "Question: How much did revenue grow?"
    )


# --- citations ---------------------------------------------------------------------------------------------


def test_citations_are_the_cited_chunks_with_their_pages_and_lines():
    chat = ScriptedChat("The CEO is Jane Roe [2]; main() calls run() [4, 2].")
    answer = LlmGenerator(chat).answer("who?", search_result(REPORT))
    assert answer.generator == "scripted:model" and answer.flags == () and answer.fallback_reason == ""
    assert [(c.number, c.chunk_id, c.page, c.line_start, c.line_end) for c in answer.citations] == [
        (2, "handbook#0", 1, None, None),
        (4, "code#0", None, 10, 12),
    ]
    assert answer.citations[0].text == "The CEO of Acme is Jane Roe."
    assert answer.citations[0].location == "p.1" and answer.citations[1].location == "L10-12"
    assert answer.search is not None and answer.question == "who?"


def test_an_answer_citing_nothing_is_flagged_uncited():
    answer = LlmGenerator(ScriptedChat("I don't know.")).answer("q", search_result(REPORT))
    assert answer.citations == () and answer.flags == ("uncited",)


def test_a_citation_no_passage_has_is_flagged():
    answer = LlmGenerator(ScriptedChat("Yes [1][9].")).answer("q", search_result(REPORT))
    assert [c.number for c in answer.citations] == [1]
    assert answer.flags == ("unknown_citation",)


def test_no_documents_means_no_model_call():
    chat = ScriptedChat("never")
    answer = LlmGenerator(chat).answer("q", search_result([]))
    assert (answer.text, answer.flags, chat.sent) == (NOT_FOUND, ("no_context",), [])


# --- streaming ---------------------------------------------------------------------------------------------


def test_stream_answer_yields_deltas_then_the_cited_answer():
    chat = ScriptedChat(deltas=["Jane Roe ", "runs Acme ", "[2]."])
    stream = LlmGenerator(chat).stream_answer("who runs Acme?", search_result(REPORT))
    assert isinstance(stream, AnswerStream) and stream.answer is None
    assert list(stream) == ["Jane Roe ", "runs Acme ", "[2]."]
    assert stream.answer.text == "Jane Roe runs Acme [2]."
    assert [c.chunk_id for c in stream.answer.citations] == ["handbook#0"]


def test_a_stream_broken_midway_raises_with_the_partial_answer():
    chat = ScriptedChat(deltas=["Jane Roe [2]", " and", " more"], fail_after=2)
    stream = LlmGenerator(chat).stream_answer("q", search_result(REPORT))
    assert [next(stream), next(stream)] == ["Jane Roe [2]", " and"]
    with pytest.raises(AnswerInterrupted, match="broke after 16 characters: the stream broke") as caught:
        next(stream)
    partial = caught.value.partial
    assert partial.text == "Jane Roe [2] and" and partial.flags == ("interrupted",)
    assert [c.number for c in partial.citations] == [2]


# --- over real HTTP ----------------------------------------------------------------------------------------


def test_answer_through_an_openai_compatible_server(fake):
    fake.answer(
        Reply(
            {
                "model": "m",
                "choices": [
                    {
                        "message": {"role": "assistant", "content": "Revenue grew 12% [1]."},
                        "finish_reason": "stop",
                    }
                ],
            }
        )
    )
    generator = LlmGenerator(OpenAIChat(fake.url + "/v1", model="m"), max_answer_tokens=100)
    answer = generator.answer("revenue?", search_result(REPORT))
    assert answer.generator == "openai:m" and [c.page for c in answer.citations] == [3]
    sent = fake.last.body
    assert sent["max_tokens"] == 100 and sent["temperature"] == 0.0
    assert sent["messages"][1]["content"].startswith("Context passages:\n\n[1] Annual report (p.3)\n")


def test_stream_through_ollama(fake):
    fake.answer(
        Reply(
            lines=ndjson(
                {"message": {"role": "assistant", "content": "12%"}, "done": False},
                {"message": {"role": "assistant", "content": " [1]"}, "done": False},
                {"message": {"role": "assistant", "content": ""}, "done": True, "done_reason": "stop"},
            )
        )
    )
    stream = LlmGenerator(OllamaChat(fake.url, model="llama3.2")).stream_answer(
        "revenue?", search_result(REPORT)
    )
    assert "".join(stream) == "12% [1]"
    assert stream.answer.generator == "ollama:llama3.2" and stream.answer.citations[0].chunk_id == "report#0"
    assert fake.last.body["stream"] is True and fake.last.body["options"]["num_predict"] == 512


# --- fallback ----------------------------------------------------------------------------------------------


def down() -> LlmGenerator:
    return LlmGenerator(OllamaChat(f"http://127.0.0.1:{closed_port()}", model="llama3.2", timeout=2))


@pytest.fixture
def pipeline(tmp_path):
    docs = write_files(tmp_path / "docs", {
        "anvils.txt": "Acme makes anvils. The CEO of Acme is Jane Roe.\n",
        "gears.txt": "Gears transmit torque between shafts.\n",
    })
    embedder = HashingEmbedder(dim=32, max_tokens=64)
    generator = FallbackGenerator(down(), ExtractiveGenerator(embedder))
    p = Pipeline.build(store=LanceStore(tmp_path / "index"), embedder=embedder, reranker=None, generator=generator)
    p.ingest([docs])
    return p


def test_generators_implement_the_protocol():
    assert isinstance(LlmGenerator(ScriptedChat()), Generator)
    assert isinstance(FallbackGenerator(down(), ExtractiveGenerator(HashingEmbedder())), Generator)


def test_with_the_model_server_down_the_extractive_generator_answers(pipeline):
    answer = pipeline.ask("who is the CEO of Acme?")
    assert answer.generator == "extractive"
    assert "Jane Roe" in answer.text and answer.citations[0].path.endswith("anvils.txt")
    assert answer.fallback_reason.startswith("ollama:llama3.2 failed: llm: cannot reach http://127.0.0.1:")


def test_a_stream_with_the_model_server_down_streams_the_fallback(pipeline):
    result = pipeline.search("who is the CEO of Acme?")
    stream = pipeline.generator.stream_answer(result.query, result)
    deltas = list(stream)
    assert deltas == [stream.answer.text] and "Jane Roe" in deltas[0]
    assert stream.answer.generator == "extractive" and "cannot reach" in stream.answer.fallback_reason


def test_a_stream_cut_midway_ends_with_the_interrupted_marker(fake):
    fake.answer(
        Reply(
            lines=sse({"choices": [{"delta": {"content": "Revenue grew 12% [1]"}, "finish_reason": None}]}),
            cut=True,
        )
    )
    primary = LlmGenerator(OpenAIChat(fake.url, model="m"))
    stream = FallbackGenerator(primary, ExtractiveGenerator(HashingEmbedder())).stream_answer(
        "q", search_result(REPORT)
    )
    deltas = list(stream)
    assert deltas[0] == "Revenue grew 12% [1]"
    assert len(deltas) == 2
    assert deltas[1] == INTERRUPTED.format(reason=deltas[1][len("\n\n[answer interrupted: ") : -1])
    assert deltas[1].startswith(
        f"\n\n[answer interrupted: llm: {fake.url} the stream from /chat/completions broke"
    )
    answer = stream.answer
    assert answer.text == "".join(deltas) and answer.flags == ("interrupted",)
    assert answer.generator == "openai:m" and answer.fallback_reason == ""
    assert [c.chunk_id for c in answer.citations] == ["report#0"]


def test_a_primary_without_streaming_streams_its_whole_answer():
    class Broken:
        name = "broken"

        def answer(self, question, result):
            raise BackendUnavailable("the model file is missing")

    stream = FallbackGenerator(LlmGenerator(ScriptedChat("A [1].")), Broken()).stream_answer(
        "q", search_result(REPORT)
    )
    assert list(stream) == ["A [1]."] and stream.answer.fallback_reason == ""
    stream = FallbackGenerator(Broken(), LlmGenerator(ScriptedChat("B [1]."))).stream_answer(
        "q", search_result(REPORT)
    )
    assert list(stream) == ["B [1]."]
    assert stream.answer.fallback_reason == "broken failed: the model file is missing"


def test_only_backend_failures_fall_back():
    class Misconfigured:
        name = "misconfigured"

        def answer(self, question, result):
            raise ConfigError("bad setting")

    generator = FallbackGenerator(Misconfigured(), LlmGenerator(ScriptedChat("B [1].")))
    with pytest.raises(ConfigError):
        generator.answer("q", search_result(REPORT))
    healthy = FallbackGenerator(LlmGenerator(ScriptedChat("A [1].")), Misconfigured())
    assert healthy.answer("q", search_result(REPORT)).text == "A [1]."
