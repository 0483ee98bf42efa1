"""Where a section's text may be cut, as [start, end) spans of it: paragraphs (code fences kept whole),
sentences, lines, code lines and table cells. The chunker (`chunk.py`) packs these into chunks."""

from __future__ import annotations

import re

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
# A sentence ends at . ! ? (plus closing quotes/brackets) before a capital or digit; a list item starts one.
_SENTENCE_BREAK = re.compile(
    r"(?P<end>[.!?]+[\"'\u201d\u2019)\]]*)\s+(?=[\"'\u201c\u2018(\[]?[A-Z0-9])"
    r"|\n(?=[ \t]*(?:[-*+]|\d+[.)])[ \t])"
)

_ENUMERATOR = re.compile(r"^\s*(\d{1,3}|[A-Za-z]|[ivxIVX]{1,4})\s*$")
_ABBREVIATIONS = frozenset(
    {"dr", "mr", "mrs", "ms", "prof", "st", "vs", "etc", "no", "fig", "e.g", "i.e", "inc", "ltd"}
)


def paragraphs(text: str) -> list[tuple[int, int, bool]]:
    """(start, end, is_fenced) spans between blank lines; a fenced code block is one span, blanks and all."""
    spans: list[tuple[int, int, bool]] = []
    start: int | None = None
    fence: str | None = None
    pos = 0
    for line in text.split("\n"):
        line_end = pos + len(line)
        opener = _FENCE.match(line)
        if fence is not None:
            if line.strip().startswith(fence) and not line.strip().strip(fence[0]):
                spans.append((start, line_end, True))  # type: ignore[arg-type]
                start, fence = None, None
        elif opener:
            if start is not None:
                spans.append((start, pos - 1, False))
            start, fence = pos, opener.group(1)
        elif not line.strip():
            if start is not None:
                spans.append((start, pos - 1, False))
                start = None
        elif start is None:
            start = pos
        pos = line_end + 1
    if start is not None:
        spans.append((start, len(text), fence is not None))
    return [strip_span(text, s, e) + (f,) for s, e, f in spans if text[s:e].strip()]


def sentences(text: str, start: int, end: int) -> list[tuple[int, int]]:
    spans = []
    cursor = start
    for m in _SENTENCE_BREAK.finditer(text, start, end):
        line_start = max(cursor, text.rfind("\n", 0, m.start()) + 1)
        if m.group("end") and _not_a_sentence_end(text, line_start, m.start()):
            continue
        stop = m.end("end") if m.group("end") else m.start()
        spans.append((cursor, stop))
        cursor = m.end()
    spans.append((cursor, end))
    return [strip_span(text, s, e) for s, e in spans if text[s:e].strip()]


def _not_a_sentence_end(text: str, line_start: int, dot: int) -> bool:
    """A list number at the start of a line ("2. Pellucid Bio") or a known abbreviation ("Dr. Kallas")."""
    if _ENUMERATOR.match(text[line_start:dot]):
        return True
    word = text[line_start:dot].rsplit(None, 1)[-1] if text[line_start:dot].strip() else ""
    return word.lower() in _ABBREVIATIONS


def lines(text: str, start: int, end: int) -> list[tuple[int, int]]:
    spans = []
    pos = start
    for line in text[start:end].split("\n"):
        if line.strip():
            spans.append(strip_span(text, pos, pos + len(line)))
        pos += len(line) + 1
    return spans


def code_lines(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """Lines with their indentation kept: a chunk that starts mid-definition should still read as code."""
    spans = []
    pos = start
    for line in text[start:end].split("\n"):
        if line.strip():
            spans.append((pos, strip_span(text, pos, pos + len(line))[1]))
        pos += len(line) + 1
    return spans


def cells(text: str, start: int, end: int) -> list[tuple[int, int]]:
    spans = []
    cursor = start
    for m in re.finditer(re.escape(" | "), text[start:end]):
        spans.append((cursor, start + m.start()))
        cursor = start + m.end()
    spans.append((cursor, end))
    return [s for s in spans if s[1] > s[0]]


def strip_span(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end
