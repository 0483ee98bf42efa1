"""A question that asks two things ("What was the root cause, and who owns the fix?") split into its parts,
so the answer can answer each one with its own sentence and citation.

The split is conservative: a question is cut only where a new question plainly starts, and a question
that merely names two things ("the pros and cons of X", "Who are Tom and Jerry?") stays one part.

- a second question mark: "Who is the CEO? How many people work there?" (words that follow the last one
  without asking, like a follow-up's added search terms, stay with the question);
- "; " between two questions: "When was it founded; where is it based?";
- "(,) and" (or ", also", ", plus") followed by a question word, after a question of its own:
  "Who is the CEO and how many employees does the company have?";
- Korean "그리고" or "및" when the text on both sides asks something (has an interrogative: 누구, 무엇,
  언제, 어디, 왜, 어떻게, 몇, 얼마, 어느, 무슨, 뭐): "대표는 누구입니까 그리고 직원은 몇 명입니까?".

A part that refers back with a pronoun ("... and how does it work?") keeps the first part's subject
words, so it is scored for the thing the question is about.
"""

from __future__ import annotations

import re

MAX_PARTS = 4
_WH = r"(?:who|whom|whose|what|which|when|where|why|how)"
_AUX = (
    "is are was were do does did can could should would will has have had may must shall am"
).split()
_WH_WORDS = frozenset({"who", "whom", "whose", "what", "which", "when", "where", "why", "how"})
_PREPOSITIONS = frozenset("in on at by for from to with under of".split())
_STARTS = frozenset({*_WH_WORDS, *_AUX,
                     "list", "name", "describe", "explain", "tell", "give", "show"})
# ", and who ...", " and how many ...", ", also what ...": the joint and the question word after it.
_AND_WH = re.compile(rf"(?:,\s*(?:and|also|plus)|\s+and|,\s*and\s+also)\s+(?={_WH}\b)", re.IGNORECASE)
_QUESTION_MARK = re.compile(r"(?<=\?)\s+")
_SEMICOLON = re.compile(r"\s*;\s+")
_KO_JOINT = re.compile(r"\s+(?:그리고|및)\s+")
_KO_ASKS = re.compile(r"누구|무엇|무슨|뭐|언제|어디|왜|어떻게|어떤|어느|몇|얼마")
_WORD = re.compile(r"[A-Za-z0-9][\w'-]*")
_PRONOUNS = frozenset("it its they them their this that these those he she his her".split())
_STOP = frozenset(
    "a an the of in on at to for from by with and or not what which who whom whose when where why how "
    "is are was were be been does do did has have had it its this that can could would should will "
    "many much".split()
)


def question_parts(question: str) -> tuple[str, ...]:
    """The question's parts, in order; a question of one part is returned as it is, alone."""
    text = question.strip()
    parts = [text]
    for cut in (_by_question_marks, _by_semicolons, _by_and_wh, _by_korean_joint):
        parts = [piece for part in parts for piece in cut(part)]
    parts = [p for p in parts if p]
    if len(parts) < 2 or len(parts) > MAX_PARTS:
        return (text,) if text else (question,)
    return tuple(_with_subject(parts))


def _asks(text: str) -> bool:
    words = _WORD.findall(text.lower())
    # "In what order ...", "By whom ...": a preposition before the question word.
    return len(words) >= 2 and (words[0] in _STARTS or (words[0] in _PREPOSITIONS and words[1] in _WH_WORDS))


def _both_ask(pieces: list[str]) -> bool:
    return len(pieces) > 1 and all(_asks(p) for p in pieces)


def _by_question_marks(text: str) -> list[str]:
    pieces = [p.strip() for p in _QUESTION_MARK.split(text) if p.strip()]
    # Each piece a question of its own: words after the last "?" that do not ask (a follow-up's search
    # terms, "Who owns it? March outage payment service") belong to the question before them.
    asks = all(len(_WORD.findall(p)) >= 2 and (p.endswith("?") or _asks(p)) for p in pieces)
    return pieces if len(pieces) > 1 and asks else [text]


def _by_semicolons(text: str) -> list[str]:
    pieces = [p.strip() for p in _SEMICOLON.split(text) if p.strip()]
    return pieces if _both_ask(pieces) else [text]


def _by_and_wh(text: str) -> list[str]:
    pieces = [p.strip(" ,") for p in _AND_WH.split(text) if p.strip(" ,")]
    # "Who is the CEO and how many ...": the first piece must be a question too, and every piece more than
    # a bare question word ("How and why does it fail?" has a one-word first piece: one part).
    if len(pieces) > 1 and _asks(pieces[0]) and all(len(_WORD.findall(p)) >= 3 for p in pieces[1:]):
        return pieces
    return [text]


def _by_korean_joint(text: str) -> list[str]:
    pieces = [p.strip() for p in _KO_JOINT.split(text) if p.strip()]
    return pieces if len(pieces) > 1 and all(_KO_ASKS.search(p) for p in pieces) else [text]


def _with_subject(parts: list[str]) -> list[str]:
    """A later part that says "it"/"they" gets the first part's content words after it."""
    subject = [w for w in _WORD.findall(parts[0]) if w.lower() not in _STOP]
    out = [parts[0]]
    for part in parts[1:]:
        words = {w.lower() for w in _WORD.findall(part)}
        if subject and words & _PRONOUNS:
            part = f"{part} ({' '.join(w for w in subject if w.lower() not in words)})"
        out.append(part)
    return out
