"""Reading odfpy's element tree, for the OpenDocument loaders (.odt in `word.py`, .odp in `slides.py`).

odfpy parses the package's XML with defusedxml and keeps it as a DOM-like tree; these helpers take the
text a reader sees from it: spaces (`text:s`), tabs and line breaks as spaces, no comments, no footnote
marks; tables as rows of cells, `number-columns-repeated` and `number-rows-repeated` expanded up to
MAX_REPEAT (a spreadsheet-made table repeats an empty cell thousands of times, and says nothing by it).
"""

from __future__ import annotations

import contextlib
import io
import zipfile
from collections.abc import Iterator
from typing import Any

from funnel.errors import IngestError

TEXT = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
TABLE = "urn:oasis:names:tc:opendocument:xmlns:table:1.0"
OFFICE = "urn:oasis:names:tc:opendocument:xmlns:office:1.0"
DRAW = "urn:oasis:names:tc:opendocument:xmlns:drawing:1.0"
PRESENTATION = "urn:oasis:names:tc:opendocument:xmlns:presentation:1.0"
STYLE = "urn:oasis:names:tc:opendocument:xmlns:style:1.0"
SVG = "urn:oasis:names:tc:opendocument:xmlns:svg-compatible:1.0"
MAX_REPEAT = 1000
_BREAKS = {(TEXT, "tab"), (TEXT, "line-break")}
_UNREAD = {(OFFICE, "annotation"), (OFFICE, "annotation-end"), (TEXT, "note-citation"),
           (TEXT, "tracked-changes"), (SVG, "title"), (SVG, "desc")}
_ROW_GROUPS = {(TABLE, "table-header-rows"), (TABLE, "table-rows"), (TABLE, "table-row-group")}
_CELLS = {(TABLE, "table-cell"), (TABLE, "covered-table-cell")}
_NOTE_BODY = (TEXT, "note-body")
_ODFPY_FAILED = "SAX FAILED TO PARSE"  # what odfpy prints before a part it could not parse
_ODFPY_PARTS = ("settings.xml", "meta.xml", "content.xml", "styles.xml")  # the parts odfpy parses


def load_odf(raw: bytes, display_path: str, label: str) -> Any:
    """The odfpy document of a package whose sizes were checked; an encrypted one is refused first.

    odfpy prints an XML part it cannot parse to stdout, whole, and goes on without it. It also breaks parts
    itself: it adds namespace declarations it thinks missing by looking for " xmlns:x" after a space, so a
    part that declares them one to a line (pandoc's) gets each twice, and its content is lost ("empty
    file"). So odfpy runs with its stdout captured, and when it failed on a part the package is read again
    from its XML parts re-written by lxml (one line, the same content); a part lxml cannot parse either is
    left out, except content.xml, without which there is no document.
    """
    from odf.opendocument import load

    with zipfile.ZipFile(io.BytesIO(raw)) as archive:
        if "META-INF/manifest.xml" in archive.namelist():
            if b"encryption-data" in archive.read("META-INF/manifest.xml"):
                raise IngestError(display_path, f"password-protected {label} (save it without a password)")
        document, failed = _quiet(load, io.BytesIO(raw))
        if not failed:
            return document
        document, failed = _quiet(load, io.BytesIO(_rewritten(archive, display_path, label)))
    if failed:
        raise IngestError(display_path, f"not a readable {label} (its XML does not parse)")
    return document


def _quiet(load: Any, source: Any) -> tuple[Any, bool]:
    """odfpy's `load(source)`, and whether it printed a part it failed to parse (printed nowhere)."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        document = load(source)
    return document, _ODFPY_FAILED in printed.getvalue()


def _rewritten(archive: zipfile.ZipFile, display_path: str, label: str) -> bytes:
    """The package again, each of its XML parts parsed and written back by lxml (which declares namespaces
    on one line); a part that does not parse is left out, content.xml excepted."""
    from lxml import etree

    parser = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=False)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as package:
        for entry in archive.infolist():
            data = archive.read(entry)
            if entry.filename in _ODFPY_PARTS:
                try:
                    data = etree.tostring(etree.fromstring(data, parser), xml_declaration=True, encoding="UTF-8")
                except etree.XMLSyntaxError as e:
                    if entry.filename == "content.xml":
                        raise IngestError(display_path, f"not a readable {label} (content.xml: {e})") from e
                    continue
            package.writestr(entry, data)
    return out.getvalue()


def body(document: Any, name: str) -> Any | None:
    """The document's `office:<name>` body ("text", "presentation", "spreadsheet"), or None. Not odfpy's
    `document.text` and the like: those are the body's first child, which is white space in a package
    written with its XML indented (pandoc's), and so an .odt read as empty."""
    for child in elements(document.body):
        if child.qname == (OFFICE, name):
            return child
    return None


def qname(node: Any) -> tuple[str, str] | None:
    return getattr(node, "qname", None)


def attr(node: Any, namespace: str, name: str) -> str:
    """An attribute's value, "" when absent."""
    return node.attributes.get((namespace, name), "") if hasattr(node, "attributes") else ""


def elements(node: Any) -> Iterator[Any]:
    return (child for child in node.childNodes if child.nodeType == child.ELEMENT_NODE)


def text_of(node: Any) -> str:
    """The text a reader sees in an element and everything inside it."""
    parts: list[str] = []
    _gather(node, parts)
    return "".join(parts)


def _gather(node: Any, parts: list[str]) -> None:
    for child in node.childNodes:
        if child.nodeType == child.TEXT_NODE:
            parts.append(child.data)
            continue
        if child.nodeType != child.ELEMENT_NODE or child.qname in _UNREAD:
            continue
        if child.qname == (TEXT, "s"):
            parts.append(" " * min(_count(attr(child, TEXT, "c")), MAX_REPEAT))
        elif child.qname in _BREAKS:
            parts.append(" ")
        elif child.qname == _NOTE_BODY:  # a footnote's text, read where its mark stands, a space apart
            parts.append(" ")
            _gather(child, parts)
        else:
            _gather(child, parts)
            if child.qname in {(TEXT, "p"), (TEXT, "h")}:
                parts.append("\n")


def _count(value: str) -> int:
    return int(value) if value.isdigit() else 1


def table_rows(table: Any) -> list[list[str]]:
    """A `table:table`'s rows of cell texts, header rows first as they are in the file."""
    rows: list[list[str]] = []
    for row in _rows(table):
        cells: list[str] = []
        for cell in elements(row):
            if cell.qname in _CELLS:
                text = " ".join(text_of(cell).split())
                cells += [text] * min(_count(attr(cell, TABLE, "number-columns-repeated")), MAX_REPEAT)
        while cells and not cells[-1]:
            cells.pop()
        if cells:  # an empty row says nothing, however often it is repeated
            rows += [cells] * min(_count(attr(row, TABLE, "number-rows-repeated")), MAX_REPEAT)
    return rows


def _rows(node: Any) -> Iterator[Any]:
    for child in elements(node):
        if child.qname == (TABLE, "table-row"):
            yield child
        elif child.qname in _ROW_GROUPS:
            yield from _rows(child)


def list_items(node: Any, depth: int = 0) -> Iterator[tuple[int, str]]:
    """(depth, text) of each item of a `text:list`, nested lists one deeper."""
    for item in elements(node):
        for child in elements(item):
            if child.qname == (TEXT, "list"):
                yield from list_items(child, depth + 1)
            elif text := text_of(child).strip():
                yield depth, text


def meta_title(document: Any) -> str | None:
    """The `dc:title` of the document's meta.xml, if it has one."""
    for node in document.meta.getElementsByType(_title_class()):
        if text := text_of(node).strip():
            return text
    return None


def _title_class() -> Any:
    from odf.dc import Title

    return Title
