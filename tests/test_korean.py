"""Korean end to end: a Korean policy and an English note in one index, asked in both languages (issue 31).
Real pipeline, real LanceDB index, the real Korean analyzer; the deterministic HashingEmbedder stands in for
the embedding model, which (like all-MiniLM-L6-v2 on Hangul) contributes little here."""

from pathlib import Path

import pytest

from funnel.embed import HashingEmbedder
from funnel.index.lance import LanceStore
from funnel.pipeline import Pipeline

from helpers import write_files

POLICY = """# 출장 규정

## 승인
국내 출장은 소속 팀장이 승인합니다. 해외 출장은 재무팀장의 별도 승인이 필요합니다.
승인 요청은 출발 5일 전까지 제출해야 합니다.

## 경비
숙박비는 1박에 12만 원까지 지원됩니다. 식비는 하루 3만 원을 넘을 수 없습니다.
택시는 밤 11시 이후에만 이용할 수 있습니다.

## 보고
출장에서 돌아온 뒤 7일 안에 결과 보고서를 제출합니다.
"""
NOTE = """# Release checklist

The release manager tags the build on Thursday. Security fixes are backported to the two latest versions.
"""


@pytest.fixture
def pipeline(tmp_path):
    docs = write_files(tmp_path / "docs", {"출장 규정.md": POLICY, "release.md": NOTE})
    p = Pipeline.build(store=LanceStore(tmp_path / "index"), embedder=HashingEmbedder(dim=64), reranker=None)
    p.ingest([docs])
    p.calibrate()
    return p


@pytest.mark.parametrize("question, expected", [
    ("해외 출장은 누가 승인하나요?", "재무팀장"),
    ("숙박비는 하룻밤에 얼마까지 받을 수 있어?", "12만 원"),
    ("택시는 언제 탈 수 있나요?", "11시"),
    ("출장 결과 보고서는 언제까지 내야 하나요?", "7일"),
])
def test_a_korean_question_gets_the_korean_sentence_that_answers_it(pipeline, question, expected):
    answer = pipeline.ask(question)
    first = answer.text.splitlines()[0]
    assert expected in first, answer.text
    assert answer.citations[0].path.endswith("출장 규정.md")


def test_an_english_question_in_the_same_index_gets_the_english_passage(pipeline):
    answer = pipeline.ask("Which versions get security fixes?")
    assert "two latest versions" in answer.text.splitlines()[0]
    assert pipeline.store.info().analyzer == "korean"


def test_each_document_is_tagged_with_its_language_and_the_calibration_counts_them(pipeline):
    store = pipeline.store
    languages = {Path(doc_id).name: {c.language for c in store.get_chunks(doc_id)} for doc_id in store.document_hashes()}
    assert languages == {"출장 규정.md": {"ko"}, "release.md": {"en"}}
    assert next(iter(pipeline.calibration().languages)) == "ko"


def test_the_stage_choices_are_shown_with_the_search(pipeline):
    result = pipeline.search("해외 출장 승인")
    assert result.first_stage.startswith("auto: ") or result.first_stage == "hybrid"
    assert result.documents[0].path.endswith("출장 규정.md")
