"""A question about a message's sender, recipients, date or subject ("Who sent the e-mail about the dingus
fish?") is answered by that header line ("From: Barry A. Warsaw <barry@digicool.com>"): the mail loader
writes each message's From, To, Cc, Date and Subject lines first (`funnel.ingest.mail`), but they share few
words with such a question, so the sentence picker alone answers with the body sentence that matches it.

`header_scores` lifts the asked header lines of a mail chunk to just above the best sentence of that chunk:
the message the question is about is still chosen by its body, and its header line answers.
"""

from __future__ import annotations

import re

import numpy as np

from funnel.types import Chunk

MAIL_KINDS = frozenset({"eml", "mbox"})  # the mail loader's kinds (`funnel.ingest.mail`)
# Over the best sentence of its chunk, so the header line leads the answer; the sentences within the
# picker's keep ratio of it may follow.
MARGIN = 0.05
_ASKS: tuple[tuple[frozenset[str], re.Pattern[str]], ...] = (
    (frozenset({"from"}), re.compile(
        r"\b(?:who\s+(?:sent|wrote|mailed|e-?mailed|is\s+it\s+from|was\s+it\s+from)|sender|sent\s+by|"
        r"from\s+whom|(?:which|what)\s+address\s+(?:sent|was\s+it\s+sent\s+from))\b", re.IGNORECASE)),
    (frozenset({"to", "cc"}), re.compile(
        r"\b(?:to\s+whom|who\s+(?:received|got)|recipients?|addressees?|sent\s+to\s+whom|"
        r"who\s+(?:was|were)\s+(?:it|the\s+\w+(?:\s+\w+)?)\s+(?:sent|addressed)\s+to)\b", re.IGNORECASE)),
    (frozenset({"date"}), re.compile(
        r"\b(?:when\s+(?:was|were|did)\b.*\b(?:sent|send|mailed|posted|written|write)|"
        r"(?:what|which)\s+(?:date|day)\b.*\b(?:sent|send|mail|message|e-?mail))\b", re.IGNORECASE)),
    (frozenset({"subject"}), re.compile(r"\bsubject(?:\s+line)?\b", re.IGNORECASE)),
)
_HEADER = re.compile(r"^(from|to|cc|date|subject):\s", re.IGNORECASE)


def asked_fields(question: str) -> frozenset[str]:
    """The header fields the question asks for, lower-case ("from", "to", "cc", "date", "subject")."""
    return frozenset().union(*(fields for fields, asks in _ASKS if asks.search(question)))


def header_scores(question: str, pool: list[tuple[str, Chunk]], scores: np.ndarray) -> np.ndarray:
    """`scores` with the asked header lines of each mail chunk set just above that chunk's best sentence."""
    fields = asked_fields(question)
    if not fields:
        return scores
    lifted = scores.copy()
    best: dict[str, float] = {}
    for (_, chunk), score in zip(pool, scores, strict=True):
        best[chunk.chunk_id] = max(best.get(chunk.chunk_id, float("-inf")), float(score))
    for i, (sentence, chunk) in enumerate(pool):
        match = _HEADER.match(sentence)
        if chunk.kind.value in MAIL_KINDS and match and match.group(1).lower() in fields:
            lifted[i] = best[chunk.chunk_id] + MARGIN + 0.01 * float(scores[i])  # its own score breaks ties
    return lifted
