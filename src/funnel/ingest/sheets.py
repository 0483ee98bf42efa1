"""Spreadsheets (.xlsx, .ods): each sheet's rows as TABLE sections, "Column: value | Column: value", the
way `table.py` reads a CSV.

A sheet is a section group headed by its name; a sheet with nothing in it is skipped. Its first row with
content is the header when every cell in it is text (a label); otherwise the columns are "Column 1",
"Column 2"... and that row is data. Every row carries the header's names, an empty cell is left out, and a
section's `line_start`/`line_end` are the rows' numbers in the sheet, so a citation reads "row 12-14" (the
loader row's `line_unit`); rows on consecutive numbers share a section, a gap starts a new one (the chunker
counts a TABLE section's lines from its first).

xlsx is streamed with openpyxl (`read_only`, `data_only`: a formula gives its value as last saved); a large
sheet that does not declare its size is refused first, as openpyxl would parse all of it before the first
row. ods is read with odfpy, whose repeated rows and columns (a sheet formatted to row 1,048,576) are
skipped, not expanded; odfpy is not streaming, so more than MAX_ODS_XML_BYTES of XML is refused. Both are
zips, checked before unpacking (`zipped.open_zip`). A workbook of more than
`table.MAX_ROWS` rows, or more than MAX_TEXT_CHARS of cell text, is refused — as a CSV is — rather than
cut short: half a table found by search would look whole.
"""

from __future__ import annotations

import datetime
import importlib
import re
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from funnel.errors import IngestError, missing_dependency
from funnel.ingest import table
from funnel.ingest.opendocument import body as opendocument_body, load_odf
from funnel.ingest.text import file_document, name_headers, table_row_line
from funnel.ingest.zipped import open_zip
from funnel.types import Kind, LoadedDocument, Section

XLSX = Kind("xlsx")
ODS = Kind("ods")
MAX_TEXT_CHARS = 50_000_000  # of rows' text in a workbook: past this it is a database export
MAX_COLUMNS = 1_000  # cells past this in a row are not read (a row formatted out to column XFD)
# odfpy builds a DOM of the XML (~2 s and 25 MB of memory a MB of it): larger is refused, not parsed
MAX_ODS_XML_BYTES = 16 * 2**20
_ODS_CONTENT = "content.xml"
MAX_UNDIMENSIONED_BYTES = 32 * 2**20  # a sheet without a <dimension> openpyxl parses whole, up front
_WORKSHEET = re.compile(r"xl/worksheets/[^/]+\.xml")
_DIMENSION = re.compile(rb"<(\w+:)?dimension\b")
_DIMENSION_WITHIN = 16_384  # it comes before <sheetData>, after a few short elements

Row = list[str]  # a row's cells: `str` for text, `Value` for anything else (numbers, dates)


class Value(str):
    """A cell shown as text that was not typed as text: a number, a date. A first row holding one is data,
    not a header."""


def _library(display_path: str, kind: str, package: str, module: str) -> Any:
    """The module a loader reads with, or the one line saying which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise _missing(display_path, kind, package) from e


def load_xlsx(
    path: Path, doc_id: str, display_path: str, language: str | None = None, pages: object = None
) -> LoadedDocument:
    """An Excel workbook as TABLE sections, a group per sheet (the signature of a `LOADERS` row's `read`)."""
    openpyxl = _library(display_path, "xlsx", "openpyxl", "openpyxl")
    with open_zip(path, display_path, "Excel workbook") as archive:
        _check_undimensioned(archive, display_path)
    try:
        workbook = openpyxl.load_workbook(path, read_only=True, data_only=True)
    except Exception as e:  # openpyxl and the XML parser under it raise many kinds for a damaged file
        raise IngestError(display_path, f"not a readable Excel workbook ({type(e).__name__}: {e})") from e
    try:
        sheets = ((sheet.title, _xlsx_rows(sheet)) for sheet in workbook.worksheets)
        sections = workbook_sections(sheets, display_path, "Excel workbook")
    finally:
        workbook.close()
    return LoadedDocument(document=file_document(doc_id, display_path, XLSX, path.read_bytes()),
                          sections=tuple(sections))


def _check_undimensioned(archive: zipfile.ZipFile, display_path: str) -> None:
    """Refuse a large sheet that does not declare its size: openpyxl would parse all of it to find the size
    before reading a row (its `parse_dimensions` reads to the end of <sheetData>), past any row limit."""
    for info in archive.infolist():
        if not _WORKSHEET.fullmatch(info.filename) or info.file_size <= MAX_UNDIMENSIONED_BYTES:
            continue
        with archive.open(info) as sheet:
            head = sheet.read(_DIMENSION_WITHIN)
        if not _DIMENSION.search(head):
            raise IngestError(display_path, f"{info.filename} declares no size and unpacks to "
                                            f"{info.file_size / 2**20:,.0f} MB; save it again in a "
                                            "spreadsheet program, or as CSV")


def _xlsx_rows(sheet) -> Iterator[tuple[int, Row]]:
    sheet.reset_dimensions()  # the declared size may be wrong; read every row the file holds
    # No max_col: openpyxl would pad every row out to it
    for number, cells in enumerate(sheet.iter_rows(values_only=True), start=1):
        yield number, [_shown(value) for value in cells[:MAX_COLUMNS]]


def _shown(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, datetime.datetime) and value.time() == datetime.time():
        return Value(value.date().isoformat())
    if isinstance(value, (datetime.date, datetime.time)):
        return Value(value.isoformat())
    if isinstance(value, float) and value.is_integer():
        return Value(str(int(value)))
    return Value(str(value))


def load_ods(
    path: Path, doc_id: str, display_path: str, language: str | None = None, pages: object = None
) -> LoadedDocument:
    """An OpenDocument spreadsheet as TABLE sections, a group per sheet."""
    _library(display_path, "ods", "odfpy", "odf.opendocument")
    from odf.table import Table

    with open_zip(path, display_path, "OpenDocument spreadsheet") as archive:
        names = set(archive.namelist())
        size = sum(info.file_size for info in archive.infolist() if info.filename.endswith(".xml"))
    if _ODS_CONTENT not in names:
        raise IngestError(display_path, f"not a readable OpenDocument spreadsheet (no {_ODS_CONTENT})")
    if size > MAX_ODS_XML_BYTES:
        raise IngestError(display_path, f"its XML unpacks to {size / 2**20:,.0f} MB, over "
                                        f"{MAX_ODS_XML_BYTES // 2**20} MB; save it as .xlsx or CSV")
    raw = path.read_bytes()
    try:
        document = load_odf(raw, display_path, "OpenDocument spreadsheet")  # as the .odt and .odp loaders
    except IngestError:
        raise
    except Exception as e:  # odfpy passes on zipfile's, expat's and its own errors for a damaged file
        raise IngestError(display_path, f"not a readable OpenDocument spreadsheet ({type(e).__name__}: {e})"
                          ) from e
    # A text or presentation whose mimetype entry says spreadsheet has no spreadsheet body (found by
    # tests/reliability/test_reliability_loaders.py).
    body = opendocument_body(document, "spreadsheet")
    tables = body.getElementsByType(Table) if body else []
    sheets = ((sheet.getAttribute("name") or "Sheet", _ods_rows(sheet)) for sheet in tables)
    sections = workbook_sections(sheets, display_path, "OpenDocument spreadsheet")
    return LoadedDocument(document=file_document(doc_id, display_path, ODS, raw),
                          sections=tuple(sections))


def _ods_rows(sheet) -> Iterator[tuple[int, Row]]:
    """The sheet's rows with their numbers; a repeated row is given once per repeat only when it holds
    something (the repeats of an empty one are counted, not made)."""
    from odf.table import TableRow

    number = 0
    for row in sheet.getElementsByType(TableRow):
        repeat = int(row.getAttribute("numberrowsrepeated") or 1)
        cells = _ods_cells(row)
        if not any(cells):
            number += repeat
            continue
        for _ in range(min(repeat, table.MAX_ROWS + 1)):
            number += 1
            yield number, cells
        number += max(0, repeat - table.MAX_ROWS - 1)


def _ods_cells(row) -> Row:
    cells: Row = []
    for cell in row.childNodes:
        if getattr(cell, "qname", (None, None))[1] not in ("table-cell", "covered-table-cell"):
            continue
        repeat = int(cell.getAttribute("numbercolumnsrepeated") or 1)
        text = _ods_text(cell)
        cells.extend([text] * min(repeat, MAX_COLUMNS - len(cells)))
        if len(cells) >= MAX_COLUMNS:
            break
    while cells and not cells[-1]:
        cells.pop()
    return cells


def _ods_text(cell) -> str:
    from odf.text import P

    text = "\n".join(str(p) for p in cell.getElementsByType(P))
    kind = cell.getAttribute("valuetype") if cell.qname[1] == "table-cell" else None
    if not text and kind:
        text = cell.getAttribute("value") or cell.getAttribute("datevalue") or ""
    return Value(text) if kind and kind != "string" and text else text


def workbook_sections(
    sheets: Iterable[tuple[str, Iterable[tuple[int, Row]]]], display_path: str, label: str
) -> list[Section]:
    """The TABLE sections of every sheet with a row in it, headed by the sheet's name; `IngestError` when
    no sheet has one, or the workbook is over the row or text limit."""
    sections: list[Section] = []
    budget = _Budget(display_path)
    for name, rows in sheets:
        name = " ".join(str(name).split()) or "Sheet"
        sections += [replace(s, heading=name) for s in _sheet_sections(rows, budget)]
    if not sections:
        raise IngestError(display_path, f"no rows in any sheet of the {label}")
    return sections


def _sheet_sections(rows: Iterable[tuple[int, Row]], budget: _Budget) -> list[Section]:
    header: list[str] | None = None
    runs = table.Runs()
    for number, cells in rows:
        if not any(cell.strip() for cell in cells):
            continue
        if header is None:
            labels = all(not isinstance(c, Value) for c in cells if c.strip())
            header = name_headers(cells) if labels else []
            if labels:
                continue
        line = table_row_line(header, cells)
        if line:
            budget.spend(line)
            runs.add(line, number, number)
    return runs.done()


class _Budget:
    """The workbook's rows and text so far, against `table.MAX_ROWS` and MAX_TEXT_CHARS."""

    def __init__(self, display_path: str) -> None:
        self.display_path = display_path
        self.rows = self.chars = 0

    def spend(self, line: str) -> None:
        self.rows += 1
        self.chars += len(line)
        if self.rows > table.MAX_ROWS:
            raise IngestError(self.display_path, f"more than {table.MAX_ROWS:,} rows; split it into smaller "
                                                 "files")
        if self.chars > MAX_TEXT_CHARS:
            raise IngestError(self.display_path, f"more than {MAX_TEXT_CHARS // 1_000_000} MB of cell text; "
                                                 "split it into smaller files")


def _missing(display_path: str, kind: str, package: str) -> IngestError:
    """A missing library as this file's one line, with the fix: the other files still load."""
    return IngestError(display_path, str(missing_dependency(f"the {kind} loader", package, "formats")))
