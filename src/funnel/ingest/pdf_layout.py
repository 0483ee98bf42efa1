"""The layout side of reading a PDF page: lines as pdfminer sees them, columns, running headers and footers,
and pdfium as the second opinion on a page pdfminer garbles (used by `funnel.ingest.pdf`)."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Running headers and footers: a margin line whose text, digits aside, recurs on at least this share of the
# pages (and on 3 pages or more).
_REPEATED_SHARE = 0.3
# A column gutter: a vertical strip at least this wide (points), in the middle half of the page, that
# almost no character crosses, with text on both sides of it on at least _COLUMN_LINES lines.
_GUTTER_POINTS = 9.0
_COLUMN_LINES = 6


@dataclass(frozen=True)
class Line:
    """A line of text outside any table, with what heading and paragraph detection need."""

    text: str
    top: float
    bottom: float
    size: float  # mean font size of its characters
    n_chars: int
    in_margin: bool = False  # in the top or bottom band of the page, where running headers sit


def garbled(lines: list[Line]) -> bool:
    """Whether pdfminer read the page as letters apart ("C", "h a p t e r"): fonts whose size it gets wrong
    (Type 3 fonts scaled by their matrix, as in Graphviz's guides). Most words of real text are longer."""
    words = [token for line in lines for token in line.text.split() if any(c.isalpha() for c in token)]
    return len(words) >= 20 and sum(len(w) == 1 for w in words) > 0.7 * len(words)


class PdfiumPages:
    """A PDF opened with pdfium (pypdfium2, which pdfplumber installs) on the first page asked for, and closed
    when the `with` block ends."""

    def __init__(self, path: Path):
        self.path = path
        self.document: Any = None

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        if self.document is not None:
            self.document.close()

    def page(self, index: int) -> Any:
        if self.document is None:
            import pypdfium2

            self.document = pypdfium2.PdfDocument(str(self.path))
        return self.document[index]


class SecondOpinion(PdfiumPages):
    """Pages pdfminer garbles are read again with pdfium: on 628 pages of 94 real PDFs its words agree with
    pdftotext on every page (F1 >= 0.9), pdfminer's on all but the 35 pages set in such fonts. Its text has
    no tables or font sizes, so it is the second opinion only. Opened on the first garbled page."""

    def lines(self, index: int) -> list[Line]:
        try:
            text = self.page(index).get_textpage().get_text_range()
        except Exception:  # no second opinion: keep what pdfminer read
            return []
        rows = [" ".join(row.split()) for row in text.splitlines()]
        # No geometry: one line a row, 12 points apart, so paragraphs are cut by the chunker, not by gaps.
        return [Line(row, top=12.0 * i, bottom=12.0 * i + 10, size=0.0, n_chars=len(row))
                for i, row in enumerate(rows) if row]


def columns(page: Any, depth: int = 0) -> list[Any]:
    """The page's columns, left to right (the page itself when it is not set in columns)."""
    chars = page.chars
    x0, x1 = float(page.bbox[0]), float(page.bbox[2])
    width = x1 - x0
    if depth >= 2 or len(chars) < 100 or width < 4 * _GUTTER_POINTS:
        return [page]
    lines = line_spans(chars)
    crossing = [0] * int(width + 2)
    for spans in lines:
        for left, right in spans:
            for x in range(max(0, int(left - x0)), min(len(crossing), int(right - x0) + 1)):
                crossing[x] += 1
    allowed = max(1, len(lines) // 30)  # a title or rule that runs across the gutter
    best: tuple[int, int] | None = None
    start = None
    for x in range(int(width * 0.25), int(width * 0.75) + 1):
        if crossing[x] <= allowed:
            start = x if start is None else start
            if best is None or x - start > best[1] - best[0]:
                best = (start, x)
        else:
            start = None
    if best is None or best[1] - best[0] < _GUTTER_POINTS:
        return [page]
    gutter = x0 + (best[0] + best[1]) / 2
    both_sides = sum(
        1 for spans in lines
        if any(right < gutter for _, right in spans) and any(left > gutter for left, _ in spans)
    )
    if both_sides < _COLUMN_LINES:
        return [page]
    top, bottom = float(page.bbox[1]), float(page.bbox[3])
    left = page.crop((x0, top, gutter, bottom), strict=False)
    right = page.crop((gutter, top, x1, bottom), strict=False)
    return columns(left, depth + 1) + columns(right, depth + 1)


def line_spans(chars: list[dict[str, Any]]) -> list[list[tuple[float, float]]]:
    """Per text line (characters grouped by their top, to 2 points), the x-spans of its words."""
    rows: dict[int, list[tuple[float, float]]] = {}
    for ch in chars:
        if ch.get("text", "").strip():
            rows.setdefault(round(float(ch["top"]) / 2), []).append((float(ch["x0"]), float(ch["x1"])))
    spans_per_line = []
    for row in rows.values():
        row.sort()
        spans: list[tuple[float, float]] = []
        for left, right in row:
            gap = max(1.0, 0.3 * (right - left) * 2)
            if spans and left - spans[-1][1] <= gap:
                spans[-1] = (spans[-1][0], max(spans[-1][1], right))
            else:
                spans.append((left, right))
        spans_per_line.append(spans)
    return spans_per_line


def without_running_lines(read: list[tuple[list, list[Line]]]) -> list[tuple[list, list[Line]]]:
    """Drop running headers and footers: margin lines whose text, digits aside, recurs on many pages."""
    if len(read) < 3:
        return read
    pages_with: Counter[str] = Counter()
    for _, lines in read:
        pages_with.update({shape(line.text) for line in lines if line.in_margin})
    least = max(3, _REPEATED_SHARE * len(read))
    running = {shape for shape, n in pages_with.items() if n >= least}
    if not running:
        return read
    return [(tables, [ln for ln in lines if not (ln.in_margin and shape(ln.text) in running)]) for tables, lines in read]


def shape(text: str) -> str:
    """A line's text with its numbers (page numbers, dates) and case set aside."""
    return re.sub(r"\d+", "#", text.lower()).strip()
