"""Table lookups for the extractive answer: the row and the column a question names, and their cell.

Every loader writes a table row as one line, "Header: value | Header: value" (`funnel.ingest.text`:
csv/tsv, xlsx/ods, docx/odt, html, Markdown and PDF tables alike). A question such as "What is the per
diem for Berlin?" names a row by one of its values ("Berlin") and a column by its header ("Per diem");
the answer is that cell, said with its row and column, and the row it was read from:
"Per diem (EUR) for Berlin: 28 — City: Berlin | Per diem (EUR): 28 [1]".

Only a confident lookup answers: a value of the row stands whole in the question, a header other than
that value's matches the question's words (a word, its plural or past form, or an acronym: "TZ" for "time
zone"), and the row scored near the best passage anyway. Otherwise `find_cell` gives None and the answer
is chosen as before.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from funnel.types import Answer, Chunk, Citation, SearchResult

# A row whose score is under this share of the best passage's is not looked up: a question about prose
# that happens to share a value and a header with some table is not a table lookup. 0.6 let a one-word value
# ("binary") and a loose header ("Assigned values") of another manual's table answer a prose question about
# R's writeBin on the real-PDF set; 0.85 keeps every cell answer of the formats set's table questions.
MIN_SCORE_RATIO = 0.85
# A header matches when at least this share of its words are in the question.
MIN_HEADER_SHARE = 0.5
_WORD = re.compile(r"[a-z0-9]+")
_ALTERNATIVES = re.compile(r"\s*[;,]\s*")
_STOP = frozenset({
    "a", "an", "the", "of", "in", "on", "at", "to", "for", "from", "by", "with", "and", "or", "is", "are",
    "was", "were", "be", "what", "which", "who", "when", "where", "how", "does", "do", "did", "it", "its",
    "this", "that", "as", "per", "no", "not",
})


@dataclass(frozen=True)
class Cell:
    """A cell found for a question: from pool unit `index`, the row line `row` of `chunk`."""

    index: int
    column: str
    label: str  # the row's value the question names
    value: str
    row: str
    chunk: Chunk

    @property
    def text(self) -> str:
        return f"{self.column} for {self.label}: {self.value} — {self.row}"


def parse_row(line: str) -> list[tuple[str, str]] | None:
    """(header, value) pairs of a "Header: value | Header: value" line; None for any other line."""
    pairs = []
    for part in line.split(" | "):
        header, sep, value = part.partition(": ")
        if not sep or not header.strip() or not value.strip():
            return None
        pairs.append((header.strip(), value.strip()))
    return pairs if len(pairs) >= 2 else None


def find_cell(question: str, pool: list[tuple[str, Chunk]], scores: np.ndarray) -> Cell | None:
    """The cell of a table row in `pool` whose row and column `question` names, or None when none does
    confidently. `scores` are the pool's answer scores; among equal matches the higher-scored row wins."""
    if not len(pool):
        return None
    asked = " ".join(_WORD.findall(question.lower()))
    terms = asked.split()
    floor = MIN_SCORE_RATIO * float(scores.max())
    best: tuple[tuple[float, ...], Cell] | None = None
    for i, (text, chunk) in enumerate(pool):
        if chunk.section_kind.value != "table" or scores[i] < floor:
            continue
        pairs = parse_row(text)
        if pairs is None:
            continue
        labels = [(len(value), n) for n, (_, value) in enumerate(pairs) if _named(value, asked)]
        if not labels:
            continue
        label_columns = {n for _, n in labels}
        columns = [(_header_match(header, terms), n) for n, (header, _) in enumerate(pairs)
                   if n not in label_columns]
        share, column = max(columns, default=(0.0, -1))
        if share < MIN_HEADER_SHARE:
            continue
        label = _label([pairs[n][1] for n in sorted(label_columns)])
        rank = (share, float(sum(length for length, _ in labels)), float(scores[i]))
        cell = Cell(i, pairs[column][0], label, pairs[column][1], text, chunk)
        if best is None or rank > best[0]:
            best = (rank, cell)
    return best[1] if best is not None else None


def _label(values: list[str]) -> str:
    """The row's values the question names, left to right, each once ("12, Bookworm", not "bookworm" again)."""
    kept: list[str] = []
    for value in values:
        words = f" {' '.join(_WORD.findall(value.lower()))} "
        if not any(words in f" {' '.join(_WORD.findall(k.lower()))} " for k in kept):
            kept.append(value)
    return ", ".join(kept)


def cell_answer(question: str, cell: Cell, result: SearchResult, generator: str) -> Answer:
    """The answer that is `cell`, cited by its row."""
    citation = Citation.of(1, cell.chunk, cell.row)
    return Answer(question, f"{cell.text} [1]", (citation,), generator, result)


def _named(value: str, asked: str) -> bool:
    """Whether the question holds `value` whole (as words, case and punctuation aside), or one of the
    names a value lists ("Navajo; Navaho", "Ahom, Tai Ahom")."""
    for name in (value, *_ALTERNATIVES.split(value)):
        words = " ".join(_WORD.findall(name.lower()))
        if len(words) >= 2 and words not in _STOP and f" {words} " in f" {asked} ":
            return True
    return False


def _header_match(header: str, terms: list[str]) -> float:
    """The share of the header's words the question has (as written, or in another form of the word)."""
    words = [w for w in _WORD.findall(header.lower()) if w not in _STOP] or _WORD.findall(header.lower())
    if not words:
        return 0.0
    if len(words) == 1 and header.strip().isupper() and 2 <= len(words[0]) <= 4 and _acronym(words[0], terms):
        return 1.0
    joined = [a + b for a, b in pairwise(terms)]  # "code name" for a "codename" column
    return sum(any(_same_word(w, t) for t in [*terms, *joined]) for w in words) / len(words)


def _same_word(a: str, b: str) -> bool:
    if a == b:
        return True
    short, long_ = sorted((a, b), key=len)
    return len(short) >= 4 and long_.startswith(short) and len(long_) - len(short) <= 3


def _acronym(word: str, terms: list[str]) -> bool:
    """Whether consecutive question words start with the letters of `word` ("tz": "time zone")."""
    n = len(word)
    return any("".join(t[0] for t in terms[i:i + n]) == word for i in range(len(terms) - n + 1))
