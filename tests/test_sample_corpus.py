"""The README's demo, with the real packaged embedder: ingest the sample corpus, ask, cite."""

from pathlib import Path

import pytest

from funnel.embed import load_embedder
from funnel.index.lance import LanceStore
from funnel.pipeline import Pipeline

pytestmark = pytest.mark.model

SAMPLES = Path(__file__).parent.parent / "samples"


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    p = Pipeline.build(store=LanceStore(tmp_path_factory.mktemp("idx")), embedder=load_embedder("minilm"), reranker=None)
    report = p.ingest([SAMPLES / "docs", SAMPLES / "repo", SAMPLES / "korean"])
    assert report.problems == []
    return p


def test_table_row_answers_the_ceo_question_with_a_page_citation(pipeline):
    answer = pipeline.ask("Who is the CEO of Zentara Robotics?")
    assert "Iris Kallas" in answer.text
    cited = answer.citations[0]
    assert cited.path.endswith("portfolio_companies.pdf") and cited.page is not None
    assert "Company: Zentara Robotics" in cited.text and "CEO: Iris Kallas" in cited.text


def test_gitignored_files_are_not_indexed(pipeline):
    paths = {d for d in pipeline.store.document_hashes()}
    assert any(p.endswith("user_service.py") for p in paths)
    assert not any(p.endswith(("secrets.local", "local_settings.py")) for p in paths)


def test_code_chunks_carry_language_and_lines(pipeline):
    result = pipeline.search("UserService get_user raises UserNotFoundError", k=3)
    top = result.documents[0].best.chunk
    assert top.path.endswith("user_service.py")
    assert top.language == "python" and top.line_start is not None and top.line_end >= top.line_start


def test_a_korean_question_is_answered_from_the_hwpx_notice(pipeline):
    # `make run`'s Korean question: the sentence that amends 제3조제2항, cited in the real HWPX notice.
    answer = pipeline.ask('의료기기 보고 방법 개정고시안에서 제3조제2항의 "서한"은 어떤 말로 바뀌나요?')
    assert "“공식 문서”로 한다" in answer.text
    assert any(c.path.endswith("mfds_admin_notice.hwpx") for c in answer.citations)
