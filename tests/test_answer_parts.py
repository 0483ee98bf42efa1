"""A question that asks two things is answered part by part, each part with its citation (issue 33, part 3)."""

import pytest

from funnel.embed import HashingEmbedder
from funnel.generate.extractive import ExtractiveGenerator
from funnel.generate.question_parts import question_parts
from funnel.group import group
from funnel.rerank.policies import RerankPolicy, second_stage
from funnel.types import Candidate, RerankStatus, SearchResult

from helpers import chunk


@pytest.mark.parametrize(("question", "parts"), [
    ("What was the root cause, and who owns the fix?", ("What was the root cause", "who owns the fix?")),
    ("Who is the CEO and how many employees does the company have?",
     ("Who is the CEO", "how many employees does the company have?")),
    ("Who is the CEO? How many employees are there?", ("Who is the CEO?", "How many employees are there?")),
    ("When was the office opened; where is the office?", ("When was the office opened", "where is the office?")),
    ("대표는 누구입니까 그리고 직원은 몇 명입니까?", ("대표는 누구입니까", "직원은 몇 명입니까?")),
])
def test_a_question_of_several_parts_is_split_where_a_new_question_starts(question, parts):
    assert question_parts(question) == parts


@pytest.mark.parametrize("question", [
    "What are the pros and cons of the new billing system?",
    "Who are Tom and Jerry?",
    "How and why does the cache expire?",
    "Which plan is cheaper and why?",
    "What is the difference between the export and the backup, and the restore?",
    "가격 및 보증 기간은 무엇입니까?",
    "I am and what?",
    "Who owns the follow-up action? March outage payment service",  # a rewritten follow-up's search query
    "",
])
def test_a_question_of_one_part_stays_whole(question):
    assert question_parts(question) == (question.strip() or question,)


def test_a_part_that_says_it_keeps_the_subject_of_the_first():
    first, second = question_parts("What is the Heron gateway, and how does it route payments?")
    assert first == "What is the Heron gateway"
    assert second.startswith("how does it route payments?") and "Heron" in second and "gateway" in second


POSTMORTEM = [
    "Summary: what the root cause was, who owns the fix, and what the outage cost.",
    "The March outage of the payment service lasted four hours and stopped card payments in three countries.",
    "The root cause was an expired TLS certificate on the payment gateway.",
]
ACTIONS = [
    "Dana Whitfield of the platform team owns the fix, automating certificate renewal.",
    "Customers who paid twice were refunded within two days.",
]


def _result(question: str, *chunks) -> SearchResult:
    window = [Candidate(c, rank, 1.0 / rank) for rank, c in enumerate(chunks, start=1)]
    hits = second_stage(question, window, None, RerankPolicy.NONE).hits
    return SearchResult(question, tuple(group(hits, k=len(chunks))), tuple(hits), RerankStatus.SKIPPED)


def test_each_part_is_answered_with_its_own_sentence_and_citation():
    question = "What was the root cause, and who owns the fix?"
    report = chunk("postmortem.md", 0, text=" ".join(POSTMORTEM), kind="markdown")
    actions = chunk("actions.md", 0, text=" ".join(ACTIONS), kind="markdown")
    answer = ExtractiveGenerator(HashingEmbedder(dim=256)).answer(question, _result(question, report, actions))
    # Not the summary that echoes the question (what the answer was before parts were answered one by one).
    assert answer.text.splitlines() == [f"{POSTMORTEM[2]} [1]", f"{ACTIONS[0]} [2]"]
    assert [c.chunk_id for c in answer.citations] == [report.chunk_id, actions.chunk_id]


def test_one_sentence_answering_both_parts_is_given_once_and_cited_once():
    question = "Who is the CEO of Zentara, and how many employees does Zentara have?"
    text = ("Iris Kallas is the CEO of Zentara, which has 240 employees in Tallinn. "
            "Zentara was founded in 2011 and makes warehouse robots.")
    answer = ExtractiveGenerator(HashingEmbedder(dim=256)).answer(question, _result(question, chunk("z.md", 0, text)))
    assert answer.text.count("Iris Kallas") == 1
    assert [c.number for c in answer.citations] == [1]


def test_a_list_in_one_part_stays_complete():
    lead_in = "npm gets its config settings from the following sources, sorted by priority:"
    items = ["- Command line flags: putting --foo bar on the command line sets foo to bar.",
             "- Environment variables: any variable that starts with npm_config_ is read.",
             "- npmrc files: the per-project, per-user, global and built-in files."]
    config = chunk("config.md", 0, text="\n".join([lead_in, *items]), kind="markdown")
    people = chunk("people.md", 0, text="The npm CLI is maintained by the npm team at GitHub.")
    question = "In what order does npm read its config settings, and who maintains the npm CLI?"
    answer = ExtractiveGenerator(HashingEmbedder(dim=256)).answer(question, _result(question, config, people))
    joined = next(line for line in answer.text.splitlines() if lead_in in line)
    assert all(item in joined for item in items)
    assert "maintained by the npm team" in answer.text
    assert {c.chunk_id for c in answer.citations} == {config.chunk_id, people.chunk_id}


def test_the_llm_is_asked_to_answer_every_part():
    from funnel.generate.llm import LlmGenerator

    messages = LlmGenerator.__new__(LlmGenerator).messages("What failed, and who fixes it?", ())
    assert "answer every part" in messages[0].content
