"""The contract every answerer passes, through the one answer step (`Pipeline.prepare` -> stream -> settle):
the extractive picker; the reader over an Ollama and an OpenAI-compatible server (the fake server of
upstream_support, speaking each wire format) and over a chat model in process; the passages LLM over the
same. The local llama.cpp model passes the same checks in tests/test_local_llm.py.

Each must: stream deltas that join to the settled answer's text; cite only chunks of the search, by
numbers the text uses; abstain (listing the closest passages) when the gate finds no support; and name
itself in `Answer.generator`.
"""

from __future__ import annotations

import re

import pytest
from helpers import write_files
from upstream_support import Reply, ScriptedChat, fake, ndjson, sse  # noqa: F401 (fixture)

from funnel.embed import HashingEmbedder
from funnel.engine_config import AnswerConfig, EngineConfig
from funnel.generate.extractive import ExtractiveGenerator
from funnel.generate.llm import FallbackGenerator, LlmGenerator
from funnel.generate.ollama import OllamaChat
from funnel.generate.openai_compat import OpenAIChat
from funnel.generate.reader import ReaderGenerator
from funnel.index.lance import LanceStore
from funnel.pipeline import Pipeline

REPLY = "The CEO of Acme is Jane Roe [1]."
EMBEDDER = HashingEmbedder(dim=32, max_tokens=64)
PICKER = ExtractiveGenerator(EMBEDDER)


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    root = tmp_path_factory.mktemp("contract")
    docs = write_files(root / "docs", {"anvils.txt": "Acme makes anvils. The CEO of Acme is Jane Roe.\n",
                                       "gears.txt": "Gears transmit torque between shafts.\n"})
    pipeline = Pipeline.build(EngineConfig(index=str(root / "index"), answer=AnswerConfig(abstain="0.35")),
                              store=LanceStore(root / "index"), embedder=EMBEDDER, reranker=None, generator=PICKER)
    pipeline.ingest([docs])
    return pipeline


def ollama(fake):
    fake.answer(Reply(lines=ndjson(*({"message": {"role": "assistant", "content": piece}, "done": False}
                                     for piece in ("The CEO of Acme ", "is Jane Roe [1].")),
                                   {"message": {"role": "assistant", "content": ""}, "done": True})))
    return OllamaChat(fake.url, model="llama3.2")


def openai(fake):
    fake.answer(Reply(lines=sse(*({"choices": [{"delta": {"content": piece}, "finish_reason": None}]}
                                  for piece in ("The CEO of Acme ", "is Jane Roe [1].")), "[DONE]"),
                      content_type="text/event-stream"))
    return OpenAIChat(fake.url + "/v1", model="m")


ANSWERERS = {
    "extractive": lambda fake: PICKER,
    "reader+scripted": lambda fake: FallbackGenerator(ReaderGenerator(ScriptedChat(REPLY), PICKER), PICKER),
    "reader+ollama": lambda fake: FallbackGenerator(ReaderGenerator(ollama(fake), PICKER), PICKER),
    "reader+openai": lambda fake: FallbackGenerator(ReaderGenerator(openai(fake), PICKER), PICKER),
    "passages+ollama": lambda fake: FallbackGenerator(LlmGenerator(ollama(fake)), PICKER),
    "passages+openai": lambda fake: FallbackGenerator(LlmGenerator(openai(fake)), PICKER),
}


@pytest.mark.parametrize("name", ANSWERERS)
def test_every_answerer_streams_cites_and_abstains_through_the_answer_step(name, index, fake):
    generator = ANSWERERS[name](fake)
    step = index.prepare(index.search("Who is the CEO of Acme?"), generator)
    stream = step.stream()
    deltas = list(stream)
    answer = stream.answer
    assert answer is not None and "".join(deltas) == answer.text
    assert "Jane Roe" in answer.text and not answer.abstained and not answer.fallback_reason, answer
    chunk_ids = {h.chunk.chunk_id for h in step.result.hits}
    assert answer.citations and all(c.chunk_id in chunk_ids for c in answer.citations)
    used = {int(n) for n in re.findall(r"\[(\d+)\]", answer.text)}
    assert {c.number for c in answer.citations} <= used
    assert answer.generator != "abstained" and answer.evidence is not None
    assert answer.search is not None and "generate" in answer.search.timings_ms

    off_topic = index.prepare(index.search("What is the boiling point of mercury on Venus?"), generator)
    refused = off_topic.answer()
    assert refused.abstained and "abstained" in refused.flags and refused.citations  # the closest, not an answer
