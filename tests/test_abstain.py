"""Abstention (issue 33): with the real packaged embedder over the samples, a question the documents answer is
answered and one they do not is an abstention that lists the closest passages; the threshold comes from the
index's calibration, the `[answer] abstain` setting and the `[search] cutoff` work as they say, and odd
questions (one character, 10,000 characters, another language) abstain instead of failing."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from funnel.engine_config import AnswerConfig, EngineConfig, GroupingConfig
from funnel.analyze import has_cjk
from funnel.errors import ConfigError
from funnel.generate import abstain
from funnel.index.lance import LanceStore
from funnel.pipeline import Pipeline
from funnel.types import Answer

pytestmark = pytest.mark.model

DOCS = Path(__file__).parent.parent / "samples" / "docs"
ANSWERED = "Who is the CEO of Zentara Robotics?"
UNANSWERED = "Who leads Project Heron and what is its budget?"


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    folder = tmp_path_factory.mktemp("idx")
    p = Pipeline.build(EngineConfig(index=str(folder)), reranker=None)
    p.ingest([DOCS])
    p.calibrate()
    return folder, p


def test_an_answer_where_the_documents_hold_one_and_an_abstention_where_they_do_not(index):
    _, p = index
    answered = p.ask(ANSWERED)
    assert not answered.abstained and "Iris Kallas" in answered.text
    assert answered.evidence is not None and answered.evidence >= p.evidence(answered.search).threshold
    refused = p.ask(UNANSWERED)
    assert refused.abstained and "abstained" in refused.flags
    assert refused.text.startswith(abstain.NOT_IN_DOCUMENTS) and abstain.CLOSEST in refused.text
    assert 1 <= len(refused.citations) <= 3  # the closest passages, each cited once, none as support
    assert all(f"[{c.number}]" in refused.text for c in refused.citations)
    assert refused.evidence < p.evidence(refused.search).threshold


def test_the_calibration_sets_the_threshold_and_says_what_it_abstains_on(index):
    _, p = index
    c = p.calibration()
    assert c.abstain_threshold is not None and 0 < c.abstain_threshold <= 1 and c.abstain_reason
    m = c.abstain_measured
    every = abstain_module().foreign_questions()
    english = [q for q in every if not has_cjk(q)]
    assert m["foreign_questions"] == len(english) < len(every)  # a fund's English papers: no Korean asked
    assert m["foreign_abstained"] >= 0.8  # questions about cooking and sport abstain on a fund's papers
    assert m["answerable_abstained"] <= 0.03 + 1e-9
    assert p.evidence(p.search(ANSWERED)).threshold == pytest.approx(c.abstain_threshold)


def abstain_module():
    from funnel.calibrate import abstain as calibration

    return calibration


@pytest.mark.parametrize("question", ["?", "x" * 10_000, "포트폴리오 회사의 평균 연봉은 얼마인가요?",
                                      "Quelle est la recette de la ratatouille ?"])
def test_odd_questions_abstain_rather_than_fail(index, question):
    answer = index[1].ask(question)
    assert answer.abstained, answer.text


def test_the_setting_turns_it_off_or_fixes_the_threshold(index):
    folder, _ = index
    off = Pipeline.build(EngineConfig(index=str(folder), answer=AnswerConfig(abstain="off")), reranker=None)
    assert off.evidence(off.search(UNANSWERED)) is None and not off.ask(UNANSWERED).abstained
    strict = Pipeline.build(EngineConfig(index=str(folder), answer=AnswerConfig(abstain="1")), reranker=None)
    assert strict.ask(ANSWERED).abstained  # nothing clears 1
    for bad in ("sometimes", "1.5", "-0.1"):
        with pytest.raises(ConfigError, match="answer.abstain must be auto, off or a number from 0 to 1"):
            AnswerConfig(abstain=bad)


def test_an_llm_that_says_the_documents_do_not_answer_abstained(index):
    _, p = index
    result = p.search(UNANSWERED)
    evidence = replace(p.evidence(result), score=1.0)  # the gate let it through; the LLM knew better
    said = Answer(UNANSWERED, f"{abstain.NOT_IN_DOCUMENTS} [1]", (), "llm", result)
    assert abstain.gated(said, evidence).abstained
    answered = Answer(ANSWERED, "Iris Kallas [1]", (), "llm", result)
    assert not abstain.gated(answered, evidence).abstained and abstain.gated(answered, evidence).evidence == 1.0


def test_the_cutoff_returns_fewer_than_k_when_the_rest_are_not_relevant(index):
    folder, p = index
    cut = Pipeline.build(EngineConfig(index=str(folder), grouping=GroupingConfig(k=5, cutoff=0.5)), reranker=None)
    full, kept = p.search(ANSWERED, k=5), cut.search(ANSWERED, k=5)
    assert len(full.documents) == 5
    assert 1 <= len(kept.documents) < 5
    assert kept.documents[0].path.endswith("portfolio_companies.pdf")
    assert any("relevance cut-off" in n for n in kept.notes)


def test_ask_json_says_abstained(index):
    folder, _ = index
    run = [sys.executable, "-c", "from funnel.apps.main import run; run()", "ask", "--index", str(folder), "--json"]
    for question, expected in ((ANSWERED, False), (UNANSWERED, True)):
        done = subprocess.run([*run, question], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["abstained"] is expected


def test_calibrating_an_english_index_never_loads_the_korean_analyzer(index):
    folder, _ = index
    code = ("import sys; from funnel.engine_config import EngineConfig; from funnel.pipeline import Pipeline; "
            f"Pipeline.build(EngineConfig(index={str(folder)!r}), reranker=None).calibrate(); "
            "print('kiwipiepy' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "False"


def test_korean_foreign_questions_are_asked_only_of_an_index_that_holds_such_text():
    from funnel.calibrate.abstain import asked

    questions = ("How do I bake bread?", "김치찌개는 어떻게 끓이나요?")
    assert asked(questions, cjk_index=True) == list(questions)
    assert asked(questions, cjk_index=False) == ["How do I bake bread?"]
