"""A follow-up without a pronoun ("Who owns the follow-up action?") is searched with the conversation's
subject; a question that brings its own subject is searched as asked (issue 33, part 4). Real conversations
over loopback HTTP."""

from __future__ import annotations

import httpx
import pytest
from api_support import upload, wait_calibrated, wait_done
from helpers import serving

from funnel.apps.api import create_app
from funnel.apps.api.rewrite import heuristic_rewrite, is_follow_up
from funnel.apps.settings import Settings
from funnel.apps.state.conversations import Turn

OUTAGE = "What happened in the March outage of the payment service?"
POSTMORTEM = """# Postmortem: March outage of the payment service

The March outage of the payment service lasted four hours and stopped card payments in three countries.
The root cause was an expired TLS certificate on the payment gateway.

## Follow-up

Dana Whitfield owns the follow-up action for the payment service: automating certificate renewal.
"""
TRAVEL = """# Travel claims

Each travel claim that lacks a receipt gets a follow-up action. The claimant owns the follow-up action and
must send the missing receipts to the finance team within 30 days, or the claim is closed unpaid.
"""
GARDEN = """# Office garden

The office garden is watered on Mondays and Thursdays by the facilities team. The garden budget is
EUR 400 a year, spent on seeds, soil and tools.
"""


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    app = create_app(Settings(embedder="hashing", data_dir=tmp_path_factory.mktemp("follow-ups") / "data"))
    files = [("postmortem.md", POSTMORTEM.encode()), ("travel_claims.md", TRAVEL.encode()),
             ("garden.md", GARDEN.encode())]
    with serving(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        assert client.post("/v1/collections", json={"name": "ops"}).status_code == 201
        assert upload(client, "ops", files).status_code == 202
        assert {d["status"] for d in wait_done(client, "ops")} == {"ready"}
        wait_calibrated(client, "ops")
        yield client


def ask(client, question, **kw) -> dict:
    response = client.post("/v1/collections/ops/ask", json={"question": question, **kw})
    assert response.status_code == 200, response.text
    return response.json()


def test_a_follow_up_without_a_pronoun_is_searched_with_the_subject(api):
    first = ask(api, OUTAGE)
    assert "four hours" in first["answer"]
    second = ask(api, "Who owns the follow-up action?", conversation_id=first["conversation_id"])
    assert second["rewritten_by"] == "heuristic"
    assert second["search_query"].startswith("Who owns the follow-up action? ")
    assert {"March", "outage", "payment", "service"} <= set(second["search_query"].split())
    assert "Dana Whitfield" in second["answer"]
    assert second["sources"][0]["path"] == "postmortem.md"
    # The same question alone is searched as asked, and finds the travel claims (what the issue saw).
    alone = ask(api, "Who owns the follow-up action?")
    assert alone["search_query"] == "Who owns the follow-up action?"
    assert alone["sources"][0]["path"] == "travel_claims.md"


def test_a_question_with_its_own_subject_is_not_rewritten(api):
    first = ask(api, OUTAGE)
    for question in ("How often is the office garden watered by the facilities team?",
                     "What does Dana Whitfield own?"):
        body = ask(api, question, conversation_id=first["conversation_id"])
        assert body["search_query"] == question


HISTORY = (Turn(OUTAGE, OUTAGE, "The March outage of the payment service lasted four hours. [1]"),)


@pytest.mark.parametrize("question", [
    "Who owns the follow-up action?", "Who owns the fix?", "What is the budget?", "How long did it last?",
    "And the cost?",
])
def test_a_question_leaning_on_the_conversation_is_a_follow_up(question):
    assert is_follow_up(question, HISTORY)
    assert heuristic_rewrite(question, HISTORY) == f"{question} March outage payment service"


@pytest.mark.parametrize("question", [
    "What does the travel policy say about per diem rates?",  # a subject of its own, many terms
    "Where is Pellucid Bio based?",  # a name the conversation has not seen
    "What about Pellucid?",
    "How often is the office garden watered?",
])
def test_a_question_with_a_subject_of_its_own_is_not_a_follow_up(question):
    assert not is_follow_up(question, HISTORY)
    assert heuristic_rewrite(question, HISTORY) == question


def test_the_subject_is_the_earlier_questions_names_then_its_other_terms():
    history = (Turn("Who is the CEO of Zentara Robotics?", "Who is the CEO of Zentara Robotics?", "Iris"),)
    assert heuristic_rewrite("Who is the CFO?", history) == "Who is the CFO? CEO Zentara Robotics"
    assert heuristic_rewrite("Where are the headquarters of the company?", history) == (
        "Where are the headquarters of the company? CEO Zentara Robotics")
