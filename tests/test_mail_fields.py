"""Header questions about e-mail (issue 42 item 6): who sent a message, to whom, when, under what subject,
answered by its header line, over the real CPython test messages of the formats set."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from funnel.embed import HashingEmbedder
from funnel.generate.mail_fields import asked_fields
from funnel.index.lance import LanceStore
from funnel.pipeline import Pipeline

MAIL = Path(__file__).resolve().parents[1] / "bench" / "data" / "formats" / "docs"


@pytest.mark.parametrize(("question", "fields"), [
    ("Who sent the e-mail about the dingus fish?", {"from"}),
    ("Who wrote the test messages collected in the digest?", {"from"}),
    ("To whom was the dingus fish mail addressed?", {"to", "cc"}),
    ("Who received the bounce?", {"to", "cc"}),
    ("When was the dingus fish e-mail sent?", {"date"}),
    ("What was the subject of the message that bounced?", {"subject"}),
    ("Why could the message not be delivered?", set()),
    ("When does the annual audit start?", set()),
])
def test_the_header_a_question_asks_for(question, fields):
    assert asked_fields(question) == fields


@pytest.fixture(scope="module")
def mail_pipeline(tmp_path_factory):
    root = tmp_path_factory.mktemp("mail")
    docs = root / "docs"
    docs.mkdir()
    for path in MAIL.glob("python-email-*"):
        shutil.copy(path, docs)
    pipeline = Pipeline.build(store=LanceStore(root / "index"), embedder=HashingEmbedder(), reranker=None)
    assert pipeline.ingest([docs]).problems == []
    return pipeline


@pytest.mark.parametrize(("question", "line"), [
    ("Who sent the e-mail about the dingus fish?", "From: Barry <barry@digicool.com>"),
    ("When was the dingus fish e-mail sent?", "Date: Fri, 20 Apr 2001 19:35:02 -0400"),
    ("To whom was the dingus fish e-mail sent?", "To: Dingus Lovers <cravindogs@cravindogs.com>"),
])
def test_a_header_question_is_answered_by_the_header_line(mail_pipeline, question, line):
    answer = mail_pipeline.ask(question)
    assert answer.text.splitlines()[0].startswith(line), answer.text
    assert answer.citations[0].path.endswith("python-email-msg07-attachment.eml")


def test_a_question_about_the_body_is_still_answered_from_the_body(mail_pipeline):
    answer = mail_pipeline.ask("What is the dingus fish e-mail's attached picture called?")
    assert not answer.text.startswith(("From:", "To:", "Date:"))
