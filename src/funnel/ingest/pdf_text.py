"""Repairs of the text pdfplumber reads from a PDF's lines (for `funnel.ingest.pdf`).

- A superscript footnote mark glued to its word ("or later11", "MySQL1,", a footnote's own "10A description")
  is set apart ("later 11"), so the word is found again. A mark is told by pdfplumber's characters: digits
  or footnote symbols set smaller than the line's body text and raised above its baseline. A raised digit
  after a digit or after a one-letter word is an exponent (2^24, R²) and stays as it is.
- A word hyphenated at a line end is rejoined ("infor-" + "mation").
- An identifier broken after an underscore at a line end ("ASN1_" + "SYNTAX_ERROR"; Texinfo breaks @code
  there) is rejoined; a space after an underscore inside a line is the author's and stays.

On the 343 pages of bench/data/realpdf: 47 marks set apart on 25 pages, 12 identifiers rejoined on 8, beside
208 hyphenated words (bench/pdf_text.py). A raised digit after a word of two letters or more is taken for a
mark, so an exponent there is set apart too ("mc2" -> "mc 2" in lshort-ko); the words stay whole.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

# A footnote mark is set at most this share of the line's body size...
_MARK_SIZE_RATIO = 0.85
# ...and its characters' bottom at least this share of the body size above the body text's.
_MARK_RISE_RATIO = 0.2
_MARK_CHARS = frozenset("0123456789*†‡§¶")
# What a mark may follow: the end of a word or of a sentence, a closing bracket or quote.
_BEFORE_MARK = re.compile(r"[^\W\d_]|[.,;:)\]’'\"”]")
# An identifier's piece before a line break: word characters ending in one underscore ("ASN1_MAX_"); a
# name that ends in two ("__init__") is whole.
_IDENTIFIER_HEAD = re.compile(r"(?<![\w])(?=\w*[A-Za-z0-9])\w*[A-Za-z0-9]_$")
_IDENTIFIER_TAIL = re.compile(r"[A-Za-z0-9]")


def line_text(text: str, chars: list[dict[str, Any]]) -> str:
    """`text` of one pdfplumber text line (its `chars` as pdfplumber returns them) with its footnote marks
    set apart from the words they are glued to."""
    marks = footnote_marks(text, chars)
    if not marks:
        return text
    out = []
    last = 0
    for start, end in marks:
        out.append(text[last:start])
        if start > 0 and text[start - 1] != " ":
            out.append(" ")
        out.append(text[start:end])
        if end < len(text) and text[end].isalpha():
            out.append(" ")
        last = end
    out.append(text[last:])
    return "".join(out)


def footnote_marks(text: str, chars: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """(start, end) in `text` of each footnote mark glued to the text before or after it."""
    # pdfplumber's line text is its characters' text in order with spaces put between words: every
    # other position is one character (a ligature or "(cid:80)" repeats its character). If not, no marks.
    where = [i for i, ch in enumerate(text) if ch != " "]
    if len(where) != len(chars) or len(chars) < 2:
        return []
    sizes: Counter[float] = Counter(round(float(ch.get("size", 0.0)), 1) for ch in chars)
    body = sizes.most_common(1)[0][0]
    if body <= 0:
        return []
    bottoms = sorted(float(ch["bottom"]) for ch in chars if round(float(ch.get("size", 0.0)), 1) == body)
    baseline = bottoms[len(bottoms) // 2]
    raised = [
        ch["text"] in _MARK_CHARS
        and float(ch.get("size", 0.0)) <= _MARK_SIZE_RATIO * body
        and float(ch["bottom"]) <= baseline - _MARK_RISE_RATIO * body
        for ch in chars
    ]
    marks = []
    i = 0
    while i < len(where):
        if not raised[i]:
            i += 1
            continue
        j = i
        while j + 1 < len(where) and raised[j + 1] and where[j + 1] == where[j] + 1:
            j += 1
        start, end = where[i], where[j] + 1
        if _glued(text, start, end):
            marks.append((start, end))
        i = j + 1
    return marks


def _glued(text: str, start: int, end: int) -> bool:
    before = text[start - 1] if start > 0 else " "
    after = text[end] if end < len(text) else " "
    if before == " ":
        return after.isalpha()  # a footnote's own mark, at the start of its text
    if not _BEFORE_MARK.fullmatch(before):
        return False  # after a digit: an exponent
    word = text[:start].rsplit(" ", 1)[-1]
    return not (len(word) == 1 and word.isalpha())  # R², x²: an exponent of a variable


def join_lines(lines: list[str]) -> str:
    """A paragraph's lines as one line of text: a word hyphenated across a line break is rejoined, and so
    is an identifier broken after an underscore."""
    out = lines[0]
    for line in lines[1:]:
        if hyphenated(out, line):
            out = out[:-1] + line
        elif identifier_broken(out, line):
            out = out + line
        else:
            out = f"{out} {line}"
    return out


def hyphenated(line: str, following: str) -> bool:
    """Whether `line` ends in a word hyphenated onto `following`."""
    return line.endswith("-") and len(line) > 1 and line[-2].isalpha() and following[:1].islower()


def identifier_broken(line: str, following: str) -> bool:
    """Whether `line` ends in an identifier broken after an underscore that `following` goes on with."""
    return bool(_IDENTIFIER_HEAD.search(line)) and bool(_IDENTIFIER_TAIL.match(following))
