"""What the Hangul (Hancom Office) readers share: the HWP 5 binary reader (`hwp.py`) and the HWPX reader
(`hwpx.py`) read a document into paragraphs, tables and notes of the same shape, and this module turns them
into sections as the Word loader does (`office.Outline`).

A paragraph of an outline level (개요 1..7) is a heading and starts a section under its heading trail; a
numbered or bulleted paragraph (문단 번호, 글머리표) is a `- item` line; a table of two or more columns and
rows is a TABLE section of "Header: value | Header: value" rows, its merged cells repeated across their
span. A one-column table is how Korean documents draw a box around text (a notice's summary, a form's
title), so its cells are paragraphs. A footnote or endnote follows its paragraph as "Footnote: ...". Text
boxes and captions are read where they are anchored; headers, footers, master pages and hidden comments are
left out (they repeat on every page or are not the document's text).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from funnel.ingest.office import Outline, one_line
from funnel.types import Section

# A grid past this many cells is a table no person wrote (a crafted span): its cells are read as paragraphs.
MAX_GRID_CELLS = 200_000


class Role(str, Enum):
    TEXT = "text"
    HEADING = "heading"  # an outline level (개요)
    ITEM = "item"  # a numbered or bulleted paragraph


@dataclass
class Cell:
    row: int
    col: int
    rows: int  # how many rows and columns the cell spans
    cols: int
    paragraphs: list[Paragraph]


@dataclass
class Table:
    cells: list[Cell]
    caption: list[Paragraph] = field(default_factory=list)


@dataclass
class Paragraph:
    """A paragraph's pieces in reading order: text, tables and text boxes anchored in it (a box is its own
    paragraphs), and its footnotes' text."""

    role: Role = Role.TEXT
    level: int = 0  # a heading's or an item's level, 0 the outermost
    pieces: list[str | Table | list[Paragraph]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def sections(paragraphs: list[Paragraph]) -> tuple[list[Section], str | None]:
    """The sections of a document's paragraphs, and its first heading (the title when it names none)."""
    outline = Outline()
    for paragraph in paragraphs:
        _write(paragraph, outline)
    found = outline.done()
    if not found and outline.first_heading:  # headings and nothing under them: the headings are the text
        headings = [plain([p]) for p in paragraphs if p.role is Role.HEADING]
        found = [Section(text="\n".join(h for h in headings if h))]
    return found, outline.first_heading


def _write(paragraph: Paragraph, outline: Outline) -> None:
    def flush(text: str) -> None:
        if paragraph.role is Role.HEADING:
            outline.heading(paragraph.level + 1, text)
        elif paragraph.role is Role.ITEM:
            outline.item(text, paragraph.level)
        else:
            outline.paragraph(text)

    text = ""
    for piece in paragraph.pieces:
        if isinstance(piece, str):
            text += piece
            continue
        flush(text)
        text = ""
        if isinstance(piece, Table):
            for caption in piece.caption:
                _write(caption, outline)
            _table(piece, outline)
        else:
            for inner in piece:
                _write(inner, outline)
    flush(text)
    for note in paragraph.notes:
        outline.paragraph(f"Footnote: {note}")


def _table(table: Table, outline: Outline) -> None:
    grid = _grid(table)
    filled = sum(1 for cell in table.cells if plain(cell.paragraphs))
    if not grid or len(grid[0]) < 2 or filled < 2:  # a box drawn as a table (one column): its text is prose
        for cell in sorted(table.cells, key=lambda c: (c.row, c.col)):
            for paragraph in cell.paragraphs:
                _write(paragraph, outline)
        return
    while len(grid) > 2 and len({origin for _, origin in grid[0]}) == 1:  # a title merged across: no header
        outline.paragraph(grid[0][0][0])
        grid = grid[1:]
    # Below the header a cell merged across columns is said once, not once per column it spans, and a
    # header cell merged down is not its own value.
    header = grid[0]
    rows = [[text for text, _ in header]]
    rows += [[text if (j == 0 or origin != row[j - 1][1]) and origin != header[j][1] else ""
              for j, (text, origin) in enumerate(row)] for row in grid[1:]]
    outline.table(rows)


def rows_of(table: Table) -> list[list[str]] | None:
    """The table as rows of cell texts, a merged cell's text in each row and column it spans; None when its
    grid would be too large to hold."""
    grid = _grid(table)
    return None if grid is None else [[text for text, _ in row] for row in grid]


def _grid(table: Table) -> list[list[tuple[str, int]]] | None:
    """Each row's (text, the cell it comes from) per column; None when too large to hold."""
    if not table.cells:
        return []
    height = max(cell.row + 1 for cell in table.cells)
    width = max(cell.col + 1 for cell in table.cells)
    if height * width > MAX_GRID_CELLS:
        return None
    grid = [[("", -1 - i * width - j) for j in range(width)] for i in range(height)]  # empty: no cell
    for number, cell in enumerate(table.cells):
        text = plain(cell.paragraphs)
        for row in range(cell.row, min(cell.row + max(cell.rows, 1), height)):
            for col in range(cell.col, min(cell.col + max(cell.cols, 1), width)):
                grid[row][col] = (text, number)
    return grid


def plain(paragraphs: list[Paragraph]) -> str:
    """Paragraphs as one text (a cell's, a note's): a table inside them as its cells' texts."""
    lines = []
    for paragraph in paragraphs:
        parts = []
        for piece in paragraph.pieces:
            if isinstance(piece, str):
                parts.append(piece)
            elif isinstance(piece, Table):
                parts.append(" ".join(text for row in rows_of(piece) or [] for text in row if text.strip()))
            else:
                parts.append(plain(piece))
        parts += paragraph.notes
        if line := one_line(" ".join(parts)):
            lines.append(line)
    return "\n".join(lines)
