"""A .doc or .xls that holds another format, as web applications and Word's and Excel's "save as" write
them: read as what it is, under the kind its name gives (`legacy_office.py`).

- a web page (Word's and Excel's "web page", a report exported as an HTML table): the HTML loader;
- a single-file web page (.mht, MIME multipart/related): the HTML part, by the HTML loader;
- Word 2003 XML (WordprocessingML): paragraphs, "heading N" styles as headings, tables;
- Excel 2003 XML (SpreadsheetML): each worksheet's rows, as TABLE sections a group per sheet;
- text: a .doc as a text file, a .xls as CSV or TSV (`table.py` sniffs the delimiter).
The XML is parsed by the standard library's expat, which resolves no external entity and (2.4.1 on)
stops an entity expansion bomb.
"""

from __future__ import annotations

import email
import email.policy
import re
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from funnel.errors import IngestError
from funnel.ingest import html, table, text
from funnel.ingest.office import Outline, loaded, one_line, parsed
from funnel.ingest.sheets import Row, Value, workbook_sections
from funnel.types import Kind, LoadedDocument, Section

_SNIFF = 4096
_XMLSS = "urn:schemas-microsoft-com:office:spreadsheet"
_W = "{http://schemas.microsoft.com/office/word/2003/wordml}"
_HEADING = re.compile(r"heading\s*(\d)", re.IGNORECASE)
_MAX_COLUMNS = 1_000


def text_format(head: bytes) -> str | None:
    """What a file that is not OLE holds, from its first bytes: "html", "mht" (a web archive), "xmlss"
    (Excel 2003 XML), "wordml" (Word 2003 XML), "text"; None for anything else (binary)."""
    start = head.lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    if start.startswith(b"{\\rtf"):
        return None  # the RTF loader's, whatever the name
    if start.startswith(b"mime-version:") and b"multipart/related" in start[:_SNIFF]:
        return "mht"
    if start.startswith(b"<"):
        if _XMLSS.encode() in start:
            return "xmlss"
        if b"<w:worddocument" in start or b"schemas.microsoft.com/office/word/2003/wordml" in start:
            return "wordml"
        if start.startswith((b"<!doctype html", b"<html")) or b"<html" in start[:1024] or b"<table" in start:
            return "html"
    if head and b"\x00" not in head:
        return "text"
    return None


def other_format(path: Path, doc_id: str, display_path: str, head: bytes, kind: Kind, label: str,
                 spreadsheet: bool) -> LoadedDocument:
    """A file named as `kind` that holds another format, read as what it is (module docstring), under
    `kind`; `spreadsheet`: a .xls (text as CSV; Excel's XML), else a .doc (text as text; Word's XML)."""
    found = text_format(head)
    if found == "html":
        document = html.load_html(path, doc_id, display_path)
    elif found == "mht":
        document = _web_archive(path, doc_id, display_path, label)
    elif found == "xmlss" and spreadsheet:
        raw = text.read_file(path, display_path)
        sections = parsed(display_path, "Excel 2003 XML spreadsheet", lambda: workbook_sections(
            _xml_sheets(raw), display_path, "Excel 2003 XML spreadsheet"))
        document = LoadedDocument(text.file_document(doc_id, display_path, kind, raw), tuple(sections))
    elif found == "text" and spreadsheet:
        document = table.load_table(path, doc_id, display_path)
    elif found == "text":
        document = text.load_text(path, doc_id, display_path)
    elif found == "wordml" and not spreadsheet:
        raw = text.read_file(path, display_path)
        sections, title = parsed(display_path, "Word 2003 XML document", lambda: _wordml(raw))
        document = loaded(doc_id, display_path, kind, raw, sections, title)
    else:
        raise IngestError(display_path, f"not a {label} (not an OLE compound file)")
    return replace(document, document=replace(document.document, kind=kind))


def _wordml(raw: bytes) -> tuple[list[Section], str | None]:
    """Word 2003 XML: paragraphs (a "heading N" style makes a heading), tables, the title."""
    root = ElementTree.fromstring(raw)
    names = {style.get(f"{_W}styleId"): style.findtext(f"{_W}name") or _attribute(style.find(f"{_W}name"))
             for style in root.iter(f"{_W}style")}
    outline = Outline()
    body = root.find(f"{_W}body")
    if body is not None:
        _wordml_body(body, outline, names)
    title = root.findtext("{urn:schemas-microsoft-com:office:office}DocumentProperties/"
                          "{urn:schemas-microsoft-com:office:office}Title")
    return outline.done(), (one_line(title) if title else None) or outline.first_heading


def _wordml_body(node: Any, outline: Outline, names: dict[str | None, str]) -> None:
    for child in node:
        if child.tag == f"{_W}p":
            style = child.find(f"{_W}pPr/{_W}pStyle")
            level = _HEADING.fullmatch(names.get(style.get(f"{_W}val"), "") if style is not None else "")
            words = "".join(t.text or "" for t in child.iter(f"{_W}t"))
            outline.heading(int(level[1]), words) if level else outline.paragraph(words)
        elif child.tag == f"{_W}tbl":
            outline.table([["".join(t.text or "" for t in cell.iter(f"{_W}t"))
                            for cell in row.findall(f"{_W}tc")] for row in child.findall(f"{_W}tr")])
        else:  # wx:sub-section and the like: read inside
            _wordml_body(child, outline, names)


def _attribute(node: Any) -> str:
    return node.get(f"{_W}val", "") if node is not None else ""


def _web_archive(path: Path, doc_id: str, display_path: str, label: str) -> LoadedDocument:
    """A single-file web page (.mht, as Word and Excel save one): the page in it, read by the HTML loader."""
    raw = text.read_file(path, display_path)
    message = email.message_from_bytes(raw, policy=email.policy.default)
    for part in message.walk():
        if part.get_content_type() == "text/html":
            payload = part.get_payload(decode=True) or b""
            title, sections = html.html_sections(payload, display_path)
            document = text.file_document(doc_id, display_path, html.HTML, raw)
            return LoadedDocument(replace(document, title=title or document.title), tuple(sections))
    raise IngestError(display_path, f"not a {label} (a web archive without a page)")


def _xml_sheets(raw: bytes) -> Iterator[tuple[str, Iterator[tuple[int, Row]]]]:
    """Excel 2003 XML's worksheets and their rows (ss:Index skips rows and cells that are empty)."""
    ss = f"{{{_XMLSS}}}"
    root = ElementTree.fromstring(raw)
    for sheet in root.iter(f"{ss}Worksheet"):
        yield sheet.get(f"{ss}Name") or "Sheet", _xml_rows(sheet, ss)


def _xml_rows(sheet: Any, ss: str) -> Iterator[tuple[int, Row]]:
    number = 0
    for row in sheet.iter(f"{ss}Row"):
        number = int(row.get(f"{ss}Index") or number + 1)
        cells: Row = []
        for cell in row.findall(f"{ss}Cell"):
            index = int(cell.get(f"{ss}Index") or len(cells) + 1)
            cells.extend([""] * min(max(index - 1 - len(cells), 0), _MAX_COLUMNS))
            data = cell.find(f"{ss}Data")
            value = "".join(data.itertext()) if data is not None else ""
            typed = data is not None and data.get(f"{ss}Type") in ("Number", "DateTime", "Boolean")
            cells.append(Value(value) if typed and value else value)
        yield number, cells[:_MAX_COLUMNS]

