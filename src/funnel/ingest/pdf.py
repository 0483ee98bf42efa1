"""PDF loader (pdfplumber): prose per paragraph, tables as "Header: value | ..." rows, pages kept.

Words are split where the gap between two characters exceeds 0.15 of the characters' size
(`x_tolerance_ratio`), not pdfplumber's fixed 3 points: on 628 pages of 94 real PDFs from Debian packages the
fixed tolerance glued words on 292 pages ("Thedefaultweightvalueis50"), the ratio on none
(bench/pdf_extraction.py, BENCHMARKS.md). Lines repeated at the top or bottom of most pages (running
headers, footers, page numbers) are dropped; a page set in columns is read column by column; ligatures
(ﬁ, ﬂ) are expanded; a word hyphenated at a line end and an identifier broken after an underscore there
are rejoined, and a superscript footnote mark glued to its word is set apart (`funnel.ingest.pdf_text`).

Tables are the reason this loader exists. Flattened to text, a table row loses its headers and a question
like "who is the CEO of Zentara Robotics?" has nothing to match; as "Company: Zentara Robotics | CEO: Iris
Kallas" the row answers it alone. Text inside a table's box is taken out of the prose so it is not
indexed twice. A table that runs on over a page break without repeating its header row keeps the header
of the page before.

A page with no text layer (a scan) is rendered and read by OCR (`funnel.ingest.pdf_ocr`); only such pages
are. When OCR cannot run (Tesseract missing, failing, too slow), a PDF with text pages keeps them, and one
with none is skipped with one line that says why.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from funnel.errors import IngestError, missing_dependency
from funnel.ingest.ocr import OcrEngine
from funnel.ingest.pdf_layout import Line, SecondOpinion, columns, garbled, without_running_lines
from funnel.ingest.pdf_ocr import ScannedPages, has_text_layer
from funnel.ingest.pdf_tables import with_borderless_tables
from funnel.ingest.pdf_text import join_lines, line_text
from funnel.ingest.text import file_document, name_headers, read_file, table_row_line
from funnel.types import Kind, LoadedDocument, Section, SectionKind

# A line this much larger than the page's body text, and short, is taken as a heading.
_HEADING_SIZE_RATIO = 1.15
_HEADING_MAX_CHARS = 120
# A vertical gap wider than this share of the line height starts a new paragraph.
_PARAGRAPH_GAP_RATIO = 0.6
# A table continued on the next page sits between the same left and right edges, to within this (points).
_SAME_EDGE_POINTS = 3.0
# Two characters further apart than this share of their size are two words (see the module docstring).
_TEXT_OPTIONS = {"x_tolerance_ratio": 0.15}
# Running headers and footers: a line in this top or bottom share of the page's height (see pdf_layout).
_MARGIN_BAND = 0.1


@dataclass(frozen=True)
class _Block:
    """A piece of a page's text in reading order: a paragraph or a heading."""

    top: float
    kind: str  # "paragraph" | "heading"
    text: str
    size: float = 0.0  # font size, for headings: a larger heading is an outer one


@dataclass(frozen=True)
class _Table:
    """A table as extracted: its rows still raw, since its header may be on the page before."""

    top: float
    x0: float
    x1: float
    rows: list[list[str]]

    @property
    def n_columns(self) -> int:
        return max(len(row) for row in self.rows)


@dataclass(frozen=True)
class _Header:
    """The header row in force for the last table read, and where that table was."""

    page: int
    x0: float
    x1: float
    n_columns: int
    cells: list[str]  # whitespace-normalised, as in the header row


def load_pdf(
    path: Path, doc_id: str, display_path: str, pages=None, engine: OcrEngine | None = None
) -> LoadedDocument:
    """The PDF's sections; `pages(display_path, read, total)` is told after each page (long manuals) and
    before a scanned page's OCR. A page with no text layer is read by OCR (`engine`, default Tesseract)."""
    pdfplumber = _import_pdfplumber()
    raw = read_file(path, display_path)
    scans = ScannedPages(path, engine)
    try:
        with pdfplumber.open(path) as pdf:
            on_page = (lambda read, total: pages(display_path, read, total)) if pages else None
            with SecondOpinion(path) as second, scans:
                sections = _sections(pdf.pages, on_page, second, scans)
    except IngestError:
        raise
    except Exception as e:  # pdfminer raises a zoo of types for broken files; all mean the same here
        raise IngestError(display_path, _reason(e)) from e
    if not sections:
        raise IngestError(display_path, _why_empty(scans))
    document = file_document(doc_id, display_path, Kind.PDF, raw)
    return LoadedDocument(document=document, sections=tuple(sections), warnings=scans.warnings())


def _why_empty(scans: ScannedPages) -> str:
    if scans.failure is not None:
        return f"no extractable text: no text layer (a scanned PDF?), and OCR failed: {scans.failure}"
    if scans.read_pages:
        return f"no extractable text: no text layer, and OCR found none on its {scans.read_pages} page(s)"
    return "no extractable text"


def _import_pdfplumber() -> Any:
    try:
        import pdfplumber
    except ImportError as e:
        raise missing_dependency("the pdf loader", "pdfplumber") from e
    # pdfminer logs a warning for every odd-but-harmless construct it meets; they are noise to a user.
    logging.getLogger("pdfminer").setLevel(logging.ERROR)
    return pdfplumber


def _reason(error: Exception) -> str:
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    names = " ".join(type(e).__name__ for e in chain) + " " + " ".join(str(e) for e in chain)
    if "Password" in names or "Encrypt" in names or "password" in names:
        return "encrypted PDF (needs a password)"
    detail = str(chain[-1]).splitlines()[0][:120] if str(chain[-1]) else type(chain[-1]).__name__
    return f"not a readable PDF ({detail})"


def _read_pages(pages: list[Any], on_page, second: SecondOpinion | None, scans: ScannedPages | None) -> list:
    """(tables, lines) of every page: pdfminer's, pdfium's for a page it garbles, OCR's for a scanned one."""
    read = []
    for number, page in enumerate(pages, start=1):
        if scans is not None and not has_text_layer(page):
            page.close()
            if on_page:
                on_page(number - 1, len(pages))  # OCR takes seconds: show the file meanwhile
            tables, lines = [], scans.lines(number - 1)
        else:
            tables, lines = _read_page(page)
            if second is not None and garbled(lines):
                tables, lines = [], second.lines(number - 1) or lines
        read.append((tables, lines))
        if on_page:
            on_page(number, len(pages))
    return without_running_lines(read)


def _sections(
    pages: list[Any], on_page=None, second: SecondOpinion | None = None, scans: ScannedPages | None = None
) -> list[Section]:
    read = _read_pages(pages, on_page, second, scans)
    # Body size is judged over the whole document, so a cover page holding only a big title still
    # reads as a heading rather than as the "body" of that page.
    body_size = _body_font_size([line for _, lines in read for line in lines])
    sections: list[Section] = []
    # (font size, text) from the outermost heading in; carries over page breaks, as sections do.
    headings: list[tuple[float, str]] = []

    def heading() -> str | None:
        return " > ".join(text for _, text in headings) or None

    last_header: _Header | None = None  # of the last table read, for one that runs on over a page break
    for number, (tables, lines) in enumerate(read, start=1):
        prose: list[str] = []
        first_table = True

        def flush(prose: list[str] = prose, number: int = number) -> None:
            if prose:
                sections.append(Section(text="\n\n".join(prose), page=number, heading=heading()))
                prose.clear()

        blocks: list[_Block | _Table] = [*tables, *_text_blocks(lines, body_size)]
        for block in sorted(blocks, key=lambda b: b.top):
            if isinstance(block, _Table):
                flush()
                continued = first_table and _continues(last_header, block, number)
                first_table = False
                last_header, rows = _header_and_body(block, number, last_header if continued else None)
                if text := _table_text(last_header.cells, rows):
                    table = Section(text=text, kind=SectionKind.TABLE, page=number, heading=heading())
                    sections.append(table)
            elif block.kind == "heading":
                flush()
                last_header = None  # a table under a new heading is a new table
                while headings and headings[-1][0] <= block.size + 0.1:
                    headings.pop()
                headings.append((block.size, block.text))
            else:
                prose.append(block.text)
        flush()
    return sections


def _continues(previous: _Header | None, table: _Table, page: int) -> bool:
    """Whether `table`, the first on `page`, runs on from the last table of the page before."""
    return (
        previous is not None
        and previous.page == page - 1
        and previous.n_columns == table.n_columns
        and abs(previous.x0 - table.x0) <= _SAME_EDGE_POINTS
        and abs(previous.x1 - table.x1) <= _SAME_EDGE_POINTS
    )


def _header_and_body(table: _Table, page: int, inherited: _Header | None) -> tuple[_Header, list[list[str]]]:
    """The header in force for `table` and its data rows.

    A continued table may repeat its header row (dropped as data) or not (then its first row is data).
    """
    first = _normalised(table.rows[0])
    if inherited is None:
        header = _Header(page, table.x0, table.x1, table.n_columns, first)
        return header, table.rows[1:]
    header = _Header(page, table.x0, table.x1, inherited.n_columns, inherited.cells)
    repeated = first == inherited.cells
    return header, table.rows[1:] if repeated else table.rows


def _normalised(cells: list[str]) -> list[str]:
    return [" ".join(cell.split()) for cell in cells]


def _read_page(page: Any) -> tuple[list[_Table], list[Line]]:
    """The page's tables and its other text as lines; the page's caches are freed after."""
    found = [
        (t.bbox, rows) for t in page.find_tables() if _is_real_table(rows := t.extract(**_TEXT_OPTIONS))
    ]
    found = with_borderless_tables(page, found)
    tables = [
        _Table(top=bbox[1], x0=bbox[0], x1=bbox[2], rows=[[cell or "" for cell in row] for row in rows])
        for bbox, rows in found
    ]
    boxes = [bbox for bbox, _ in found]

    def outside_tables(obj: dict[str, Any]) -> bool:
        if obj.get("object_type") != "char":
            return True
        cx, cy = (obj["x0"] + obj["x1"]) / 2, (obj["top"] + obj["bottom"]) / 2
        return not any(x0 <= cx <= x1 and top <= cy <= bottom for x0, top, x1, bottom in boxes)

    text_page = page.filter(outside_tables) if boxes else page
    band = _MARGIN_BAND * float(page.height)
    page_top, page_bottom = float(page.bbox[1]), float(page.bbox[3])
    lines = []
    for column in columns(text_page):
        for raw in column.extract_text_lines(**_TEXT_OPTIONS):
            chars = raw.get("chars") or []
            text = " ".join(line_text(raw["text"], chars).split())
            if text:
                size = sum(ch.get("size", 0.0) for ch in chars) / len(chars) if chars else 0.0
                margin = raw["bottom"] <= page_top + band or raw["top"] >= page_bottom - band
                lines.append(Line(text, raw["top"], raw["bottom"], size, len(chars), margin))
    page.close()  # pdfplumber keeps every parsed object of a page until closed; long PDFs add up
    return tables, lines


def _is_real_table(rows: list[list[str | None]]) -> bool:
    # Ruled boxes and underlines also come back as "tables"; one row or one column is not a table.
    return len(rows) >= 2 and max(len(r) for r in rows) >= 2


def _table_text(header_cells: list[str], rows: list[list[str]]) -> str:
    headers = name_headers(header_cells)
    lines = [table_row_line(headers, row) for row in rows]
    return "\n".join(line for line in lines if line)


def _text_blocks(lines: list[Line], body_size: float) -> list[_Block]:
    blocks: list[_Block] = []
    paragraph: list[str] = []
    paragraph_top = 0.0
    previous: Line | None = None

    def flush() -> None:
        if paragraph:
            blocks.append(_Block(top=paragraph_top, kind="paragraph", text=join_lines(paragraph)))
            paragraph.clear()

    for line in lines:
        if _is_heading(line, body_size):
            flush()
            last = blocks[-1] if blocks else None
            wrapped = last is not None and last.kind == "heading" and abs(last.size - line.size) < 0.1
            if previous is None and last is not None and wrapped:
                # A heading wrapped onto a second line is still one heading.
                text = f"{last.text} {line.text}"
                blocks[-1] = _Block(top=last.top, kind="heading", text=text, size=last.size)
            else:
                blocks.append(_Block(top=line.top, kind="heading", text=line.text, size=line.size))
            previous = None
            continue
        height = line.bottom - line.top
        if previous is not None and line.top - previous.bottom > _PARAGRAPH_GAP_RATIO * height:
            flush()
        if not paragraph:
            paragraph_top = line.top
        paragraph.append(line.text)
        previous = line
    flush()
    return blocks


def _body_font_size(lines: list[Line]) -> float:
    """The size most of the text is set in, counted by characters."""
    sizes: Counter[float] = Counter()
    for line in lines:
        sizes[round(line.size, 1)] += line.n_chars
    return sizes.most_common(1)[0][0] if sizes else 0.0


def _is_heading(line: Line, body_size: float) -> bool:
    return 0 < body_size * _HEADING_SIZE_RATIO <= line.size and len(line.text) <= _HEADING_MAX_CHARS
