"""HWPX documents (Hangul 2014 and later, .hwpx; OWPML, KS X 6101), read from their XML with the standard
library.

An HWPX file is a zip whose first entry, `mimetype`, holds "application/hwp+zip" (stored, as EPUB's and
OpenDocument's are); Contents/content.hpf lists the body parts in order (Contents/section0.xml, ...) and
Contents/header.xml the paragraph shapes, which say which paragraphs are outline headings (`hh:heading
type="OUTLINE"`) and which are numbered or bulleted. A paragraph (`hp:p`) is runs (`hp:run`) of text
(`hp:t`), tables (`hp:tbl`: rows of cells, each with its address, span and paragraphs), controls (`hp:ctrl`:
footnotes, endnotes, headers, fields) and drawn objects whose text is their own paragraphs. Sections are
made as `hangul.py` says; an HWPX holds no page numbers (pages are laid out when it is shown), so a chunk
is cited by its heading. Elements are matched by local name: Hancom's namespaces carry a year (2011, 2016)
that has changed before.

Refused in one line, before any XML is parsed (`office.read_package`): a zip bomb, a part too large to
parse, a corrupt or truncated zip; then an encrypted (password or DRM) package, whose
META-INF/manifest.xml carries `encryption-data` as OpenDocument's does.
"""

from __future__ import annotations

import io
import re
import zipfile
from pathlib import Path
from xml.etree import ElementTree

from funnel.errors import IngestError
from funnel.ingest import hangul
from funnel.ingest.hangul import Cell, Paragraph, Role, Table
from funnel.ingest.office import loaded, parsed, read_package
from funnel.types import Kind, LoadedDocument

HWPX = Kind("hwpx")
LABEL = "HWPX document"
MEDIA_TYPE = "application/hwp+zip"
_SECTION = re.compile(r"Contents/section(\d+)\.xml")
_SPACES = {"tab": "\t", "lineBreak": "\n", "nbSpace": " ", "fwSpace": " ", "hyphen": "-"}
_NOTES = {"footNote", "endNote"}
_SKIPPED = {"header", "footer", "hiddenComment", "secPr", "colPr"}  # not the document's running text
_ROLES = {"OUTLINE": Role.HEADING, "NUMBER": Role.ITEM, "BULLET": Role.ITEM}


def load_hwpx(
    path: Path, doc_id: str, display_path: str, language: str | None = None, pages: object = None
) -> LoadedDocument:
    """An .hwpx as sections (the signature of a `LOADERS` row's `read`)."""
    raw = read_package(path, display_path, LABEL)

    def parse() -> list[Paragraph]:
        with zipfile.ZipFile(io.BytesIO(raw)) as package:
            names = set(package.namelist())
            if "META-INF/manifest.xml" in names and b"encryption-data" in package.read("META-INF/manifest.xml"):
                raise IngestError(display_path, "password-protected or DRM-protected HWPX document: its "
                                                "parts are encrypted")
            shapes = _shapes(package) if "Contents/header.xml" in names else {}
            paragraphs: list[Paragraph] = []
            for name in _body_parts(package, names, display_path):
                root = ElementTree.fromstring(package.read(name))
                paragraphs += [_paragraph(p, shapes) for p in root if _local(p.tag) == "p"]
            return paragraphs

    paragraphs = parsed(display_path, LABEL, parse)
    found, heading = hangul.sections(paragraphs)
    return loaded(doc_id, display_path, HWPX, raw, found, heading)


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _body_parts(package: zipfile.ZipFile, names: set[str], display_path: str) -> list[str]:
    """The sections in the order content.hpf's spine gives; by their number when it gives none."""
    ordered = []
    if "Contents/content.hpf" in names:
        root = ElementTree.fromstring(package.read("Contents/content.hpf"))
        hrefs = {item.get("id"): item.get("href", "") for item in root.iter() if _local(item.tag) == "item"}
        for ref in (e for e in root.iter() if _local(e.tag) == "itemref"):
            href = hrefs.get(ref.get("idref"), "")
            href = href if href in names else f"Contents/{href}"
            if _SECTION.fullmatch(href) and href not in ordered:
                ordered.append(href)
    if ordered:
        return ordered
    found = [(int(m.group(1)), name) for name in names if (m := _SECTION.fullmatch(name))]
    if not found:
        raise IngestError(display_path, f"not a readable {LABEL} (no Contents/section0.xml)")
    return [name for _, name in sorted(found)]


def _shapes(package: zipfile.ZipFile) -> dict[str, tuple[Role, int]]:
    """Each paragraph shape's role by id: an outline level, a numbered or bulleted item."""
    shapes = {}
    for shape in ElementTree.fromstring(package.read("Contents/header.xml")).iter():
        if _local(shape.tag) != "paraPr":
            continue
        heading = next((e for e in shape.iter() if _local(e.tag) == "heading"), None)
        role = _ROLES.get(heading.get("type", "")) if heading is not None else None
        if role is not None:
            level = heading.get("level", "0")
            shapes[shape.get("id", "")] = (role, int(level) if level.isdigit() else 0)
    return shapes


def _paragraph(element: ElementTree.Element, shapes: dict[str, tuple[Role, int]]) -> Paragraph:
    role, level = shapes.get(element.get("paraPrIDRef", ""), (Role.TEXT, 0))
    paragraph = Paragraph(role, level)
    for run in element:
        if _local(run.tag) != "run":
            continue
        for child in run:
            name = _local(child.tag)
            if name == "t":
                paragraph.pieces.append(_text(child))
            elif name == "tbl":
                paragraph.pieces.append(_table(child, shapes))
            elif name == "ctrl":
                for control in child:
                    if _local(control.tag) in _NOTES and (note := hangul.plain(_inner(control, shapes))):
                        paragraph.notes.append(note)
            elif name not in _SKIPPED and (inner := _inner(child, shapes)):  # a text box, a caption
                paragraph.pieces.append(inner)
    return paragraph


def _text(element: ElementTree.Element) -> str:
    parts = [element.text or ""]
    for child in element:
        parts += [_SPACES.get(_local(child.tag), ""), _text(child) if len(child) else child.text or "",
                  child.tail or ""]
    return "".join(parts)


def _inner(element: ElementTree.Element, shapes: dict[str, tuple[Role, int]]) -> list[Paragraph]:
    """The paragraphs inside an element (a note's, a text box's), not those of paragraphs inside them."""
    found = []
    for child in element:
        name = _local(child.tag)
        if name == "p":
            found.append(_paragraph(child, shapes))
        elif name not in _SKIPPED:
            found += _inner(child, shapes)
    return found


def _table(element: ElementTree.Element, shapes: dict[str, tuple[Role, int]]) -> Table:
    table = Table(cells=[])
    for child in element:
        name = _local(child.tag)
        if name == "caption":
            table.caption = _inner(child, shapes)
        elif name == "tr":
            for cell in (c for c in child if _local(c.tag) == "tc"):
                table.cells.append(_cell(cell, len(table.cells), shapes))
    return table


def _cell(element: ElementTree.Element, number: int, shapes: dict[str, tuple[Role, int]]) -> Cell:
    address = span = None
    paragraphs: list[Paragraph] = []
    for child in element:
        name = _local(child.tag)
        if name == "cellAddr":
            address = child
        elif name == "cellSpan":
            span = child
        elif name == "subList":
            paragraphs = _inner(child, shapes)

    def number_of(node: ElementTree.Element | None, attribute: str, default: int) -> int:
        value = node.get(attribute, "") if node is not None else ""
        return int(value) if value.isdigit() else default

    return Cell(row=number_of(address, "rowAddr", number), col=number_of(address, "colAddr", 0),
                rows=number_of(span, "rowSpan", 1), cols=number_of(span, "colSpan", 1), paragraphs=paragraphs)
