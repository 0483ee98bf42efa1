"""Word 97-2003 documents (.doc) and Excel 97-2003 workbooks (.xls), the binary formats before 2007.

A .doc is read by antiword as DocBook XML (`antiword -x db`): its heading styles become headings
("Guide > Install"), its lists `- item` lines and its tables TABLE sections of "Header: value" rows, as
.docx is read (`office.Outline`); the title is the file's own (summary information), else its first
heading. Where antiword cannot read a file (Word 6 and older, a few odd writers) catdoc reads its text, a
paragraph a line. Both are Debian programs (`make legacy`, ~1.3 MB together; LibreOffice headless would be
73 packages and 310 MB). Measured on 12 .doc files of Tika's and textract's tests (2026-12-07): of the 9
unprotected Word 97-2003 files antiword read all 9 with headings, lists and tables (10-20 ms each); catdoc
read them flat (no headings, cells run together, field codes such as HYPERLINK and PAGEREF in the text) but
alone read the Word 6 file; both refused the encrypted one, and neither reads WordPerfect.

A .xls is read with xlrd (BIFF2 to BIFF8, sheets, typed cells) into TABLE sections a group per sheet, as
.xlsx is (`sheets.workbook_sections`); a password-protected workbook is one line. Debian's xls2csv, measured
on 13 .xls files of Tika's, textract's and xlrd's tests, loses the sheets' names, writes dates as serial
numbers (21916) and could not read the Excel 4 file; xlrd read 10 (2 are encrypted, and an Excel 95 file
has no cells for either). A .xls or .doc that is really another format (a web page, Word's or Excel's 2003
XML, text) is read as what it is (`misnamed.py`).
"""

from __future__ import annotations

import io
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from funnel.errors import IngestError
from funnel.ingest import text
from funnel.ingest.misnamed import other_format, text_format
from funnel.ingest.office import Outline, loaded, one_line, parsed
from funnel.ingest.ole import (
    EXCEL, OLE_SIGNATURE, WORD, ToolMissing, last_line, open_ole, recogniser, run_tool,
)
from funnel.ingest.sheets import Row, Value, _shown, workbook_sections
from funnel.types import Kind, LoadedDocument, Section

DOC = Kind("doc")
XLS = Kind("xls")
DOC_LABEL = "Word 97-2003 document"
XLS_LABEL = "Excel 97-2003 workbook"
_SNIFF = 4096
_DOCBOOK_SECTIONS = {"chapter": 1, "sect1": 2, "sect2": 3, "sect3": 4, "sect4": 5, "sect5": 6, "section": 2}
_LISTS = {"itemizedlist", "orderedlist"}
_TABLES = {"informaltable", "table"}
# An Excel 2.x-4.x worksheet is not OLE: its first record is a BOF (type 0x0009, 0x0209 or 0x0409)
_BIFF_BOF = (b"\x09\x00", b"\x09\x02", b"\x09\x04")


def _named_text(suffixes: tuple[str, ...], formats: tuple[str, ...]):
    ole = recogniser(WORD if ".doc" in suffixes else EXCEL, suffixes)

    def recognised(probe: Any) -> bool:
        if ole(probe):
            return True
        if probe.path.suffix.lower() not in suffixes or probe.head.startswith(OLE_SIGNATURE):
            return False
        return text_format(probe.head) in formats or (".xls" in suffixes and _is_biff(probe.head))

    return recognised


is_doc = _named_text((".doc",), ("html", "mht", "wordml", "text"))
is_xls = _named_text((".xls",), ("html", "mht", "xmlss", "text"))
MARK_DOC = "the streams of a Word 97-2003 document (an OLE file holding WordDocument)"
MARK_XLS = "the streams of an Excel workbook (an OLE file holding Workbook or Book)"


def _is_biff(head: bytes) -> bool:
    return head[:2] in _BIFF_BOF and 4 <= int.from_bytes(head[2:4], "little") <= 16


def load_doc(
    path: Path, doc_id: str, display_path: str, language: str | None = None, pages: object = None
) -> LoadedDocument:
    """A .doc as sections (the signature of a `LOADERS` row's `read`)."""
    head = _head(path, display_path)
    if not head.startswith(OLE_SIGNATURE):
        return other_format(path, doc_id, display_path, head, DOC, DOC_LABEL, spreadsheet=False)
    open_ole(path, display_path, DOC_LABEL, WORD).close()
    raw = text.read_file(path, display_path)
    status, out, err = run_tool(["antiword", "-x", "db", _argument(path)], display_path)
    if b"encrypted" in err.lower():
        raise IngestError(display_path, "password-protected; save it without a password")
    read = _docbook(out) if status == 0 else None
    if read is None:
        try:
            catdoc_status, plain, catdoc_err = run_tool(["catdoc", "-d", "utf-8", "-w", _argument(path)],
                                                        display_path)
        except ToolMissing:
            catdoc_status, plain, catdoc_err = 1, b"", b""
        if b"encrypted" in catdoc_err.lower():
            raise IngestError(display_path, "password-protected; save it without a password")
        if catdoc_status != 0 or not plain.strip():
            raise IngestError(display_path, f"not a readable {DOC_LABEL} (antiword: {last_line(err)})")
        outline = Outline()
        for line in plain.decode("utf-8", errors="replace").splitlines():
            outline.paragraph(line.replace("\t", " | "))
        read = outline.done(), None
    sections, title = read
    return loaded(doc_id, display_path, DOC, raw, sections, title)


def _docbook(out: bytes) -> tuple[list[Section], str | None] | None:
    """antiword's DocBook as sections and the title; None when it is not XML (then catdoc reads the file)."""
    try:
        book = ElementTree.fromstring(out)
    except ElementTree.ParseError:
        return None
    outline = Outline()
    _docbook_body(book, outline, 0)
    title = book.findtext("bookinfo/title") or book.findtext("title")
    return outline.done(), (one_line(title) if title else None) or outline.first_heading


def _docbook_body(node: Any, outline: Outline, depth: int) -> None:
    for child in node:
        tag = child.tag
        if tag in ("bookinfo", "title"):
            continue
        if tag in _DOCBOOK_SECTIONS:
            outline.heading(_DOCBOOK_SECTIONS[tag], _inline(child.find("title")))
            _docbook_body(child, outline, depth)
        elif tag in _LISTS:
            for item in child.iter("listitem"):
                outline.item(_inline(item), depth)
        elif tag in _TABLES:
            outline.table([[one_line("".join(entry.itertext())) for entry in row.iter("entry")]
                           for row in child.iter("row")])
        elif tag == "para":
            outline.paragraph(_inline(child))
            _docbook_body(child, outline, depth)  # a list or a table inside a paragraph
        else:
            _docbook_body(child, outline, depth)


def _inline(node: Any) -> str:
    """The text of a paragraph, a title or a list item, less the lists and tables nested in it."""
    if node is None:
        return ""
    parts = [node.text or ""]
    for child in node:
        if child.tag not in _LISTS and child.tag not in _TABLES:
            parts.append(_inline(child))
        parts.append(child.tail or "")
    return one_line("".join(parts))


def load_xls(
    path: Path, doc_id: str, display_path: str, language: str | None = None, pages: object = None
) -> LoadedDocument:
    """A .xls as TABLE sections, a group per sheet (the signature of a `LOADERS` row's `read`)."""
    head = _head(path, display_path)
    if not head.startswith(OLE_SIGNATURE) and not _is_biff(head):
        return other_format(path, doc_id, display_path, head, XLS, XLS_LABEL, spreadsheet=True)
    try:
        import xlrd
    except ImportError as e:
        from funnel.errors import missing_dependency

        raise IngestError(display_path, str(missing_dependency("the xls loader", "xlrd", "formats"))) from e
    if not _is_biff(head):
        open_ole(path, display_path, XLS_LABEL, EXCEL).close()
    raw = text.read_file(path, display_path)

    def parse() -> list[Section]:
        try:
            book = xlrd.open_workbook(file_contents=raw, logfile=io.StringIO(), ragged_rows=True)
        except xlrd.XLRDError as e:
            if "encrypted" in str(e).lower():
                raise IngestError(display_path, "password-protected; save it without a password") from e
            raise
        sheets = ((sheet.name, _xls_rows(xlrd, book, sheet)) for sheet in book.sheets())
        return workbook_sections(sheets, display_path, XLS_LABEL)

    sections = parsed(display_path, XLS_LABEL, parse)
    return LoadedDocument(text.file_document(doc_id, display_path, XLS, raw), tuple(sections))


def _xls_rows(xlrd: Any, book: Any, sheet: Any) -> Iterator[tuple[int, Row]]:
    for number in range(sheet.nrows):
        yield number + 1, [_xls_cell(xlrd, book, cell) for cell in sheet.row(number)[:1000]]


def _xls_cell(xlrd: Any, book: Any, cell: Any) -> str:
    if cell.ctype == xlrd.XL_CELL_DATE:
        try:
            return _shown(xlrd.xldate.xldate_as_datetime(cell.value, book.datemode))
        except (ValueError, OverflowError, xlrd.xldate.XLDateError):
            return Value(str(cell.value))
    if cell.ctype == xlrd.XL_CELL_BOOLEAN:
        return Value("TRUE" if cell.value else "FALSE")
    if cell.ctype == xlrd.XL_CELL_ERROR:
        return Value(xlrd.error_text_from_code.get(cell.value, ""))
    return _shown(cell.value) if cell.ctype == xlrd.XL_CELL_NUMBER else str(cell.value or "")


def _head(path: Path, display_path: str) -> bytes:
    try:
        with path.open("rb") as file:
            return file.read(_SNIFF)
    except OSError as e:
        raise IngestError(display_path, f"cannot read ({e.strerror or e})") from e



def _argument(path: Path) -> str:
    """The path as a program's argument: never one that starts with "-" (an option)."""
    return str(path) if path.is_absolute() else f"./{path}"
