"""Word (.docx, python-docx) and OpenDocument text (.odt, odfpy) documents.

Headings (a Heading 1..n style, or any paragraph with an outline level; `text:h` in ODF) start sections
that carry the heading trail ("Guide > Install"); paragraphs are prose, list items `- item` lines (nested
ones indented), and a table is a TABLE section of "Header: value | Header: value" rows, as CSV and PDF
tables are, so a row can win retrieval on its own. Headers, footers, comments and footnotes are left out;
a table of contents too (it repeats the headings). The title is the file's own (core properties,
`dc:title`), else its first heading, else its file name. These formats have no pages and no lines: a
chunk is cited by its heading. Bad files are refused in one line before a parser sees them (`office.py`).
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

from funnel.errors import IngestError
from funnel.ingest import opendocument as odf
from funnel.ingest.office import Outline, library, loaded, parsed, read_package
from funnel.types import Kind, LoadedDocument

DOCX = Kind("docx")
ODT = Kind("odt")
DOCX_LABEL = "Word document"
ODT_LABEL = "OpenDocument text"
_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_HEADING_STYLE = re.compile(r"heading\s*(\d+)", re.IGNORECASE)
_LIST_STYLE = re.compile(r"list(?: bullet| number| paragraph)?(?: (\d))?", re.IGNORECASE)
_BODY_TEXT_LEVEL = 9  # w:outlineLvl 9 is "body text"; 0..8 are heading levels 1..9
# A paragraph's runs, also inside tracked insertions, fields and content controls (python-docx's
# Paragraph.text reads only its direct runs and links); not deleted text, not a text box's (its own
# paragraphs), and not the fallback copy of a drawing, which repeats its choice.
_RUNS = ".//w:r[not(ancestor::w:del or ancestor::w:txbxContent or ancestor::*[local-name()='Fallback'])]"


def load_docx(
    path: Path, doc_id: str, display_path: str, language: str | None = None, pages: object = None
) -> LoadedDocument:
    """A .docx as sections (the signature of a `LOADERS` row's `read`)."""
    docx = library(display_path, "Word", "python-docx", _import_docx)
    raw = read_package(path, display_path, DOCX_LABEL)

    def parse() -> tuple[list, str | None]:
        document = docx.Document(io.BytesIO(raw))
        outline = Outline()
        _read_docx_body(document, document.element.body, outline)
        return outline.done(), document.core_properties.title or outline.first_heading

    sections, title = parsed(display_path, DOCX_LABEL, parse)
    return loaded(doc_id, display_path, DOCX, raw, sections, title)


def _import_docx() -> Any:
    import docx

    return docx


def _read_docx_body(document: Any, body: Any, outline: Outline) -> None:
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    for child in body.iterchildren():
        if child.tag == f"{_W}p":
            _docx_paragraph(Paragraph(child, document), outline)
        elif child.tag == f"{_W}tbl":
            table = Table(child, document)
            outline.table([[_cell_text(cell) for cell in row.cells] for row in table.rows])
        elif child.tag == f"{_W}sdt":  # a content control (a cover page, a form field): its content counts
            for content in child.iterchildren(f"{_W}sdtContent"):
                _read_docx_body(document, content, outline)


def _docx_paragraph(paragraph: Any, outline: Outline) -> None:
    style = paragraph.style
    name = (style.name or "") if style is not None else ""
    if name.lower().startswith("toc"):
        return  # a table of contents repeats the headings
    level = _heading_level(paragraph, style, name)
    text = _text(paragraph._p)
    if level is not None:
        outline.heading(level, text)
        return
    depth = _list_depth(paragraph, name)
    if depth is not None:
        outline.item(text, depth)
    else:
        outline.paragraph(text)


def _text(p: Any) -> str:
    return "".join(run.text for run in p.xpath(_RUNS))


def _cell_text(cell: Any) -> str:
    return "\n".join(_text(p) for p in cell._tc.xpath("./w:p"))


def _heading_level(paragraph: Any, style: Any, name: str) -> int | None:
    """1.. for a heading, 0 for the Title style, None for body text."""
    if name.lower() == "title":
        return 0
    levels = paragraph._p.xpath("./w:pPr/w:outlineLvl/@w:val")
    while not levels and style is not None:  # a style inherits its base style's outline level
        levels = style.element.xpath("./w:pPr/w:outlineLvl/@w:val")
        style = style.base_style
    if levels and str(levels[0]).isdigit():
        value = int(levels[0])
        return value + 1 if value < _BODY_TEXT_LEVEL else None
    match = _HEADING_STYLE.fullmatch(name)
    return int(match.group(1)) if match else None


def _list_depth(paragraph: Any, name: str) -> int | None:
    """0.. for a list item (numbering on the paragraph, or a List style), None otherwise."""
    if paragraph._p.xpath("./w:pPr/w:numPr"):
        depth = paragraph._p.xpath("./w:pPr/w:numPr/w:ilvl/@w:val")
        return int(depth[0]) if depth and str(depth[0]).isdigit() else 0
    match = _LIST_STYLE.fullmatch(name)
    if match is None:
        return None
    return max(int(match.group(1)) - 1, 0) if match.group(1) else 0


def load_odt(
    path: Path, doc_id: str, display_path: str, language: str | None = None, pages: object = None
) -> LoadedDocument:
    """An .odt as sections (the signature of a `LOADERS` row's `read`)."""
    library(display_path, "OpenDocument", "odfpy", _import_odfpy)
    raw = read_package(path, display_path, ODT_LABEL)

    def parse() -> tuple[list, str | None]:
        document = odf.load_odf(raw, display_path, ODT_LABEL)
        outline = Outline()
        text = odf.body(document, "text")
        if text is None:
            raise IngestError(display_path, f"not a readable {ODT_LABEL} (it has no text body)")
        _read_odt_body(text, outline, _title_styles(document))
        return outline.done(), odf.meta_title(document) or outline.first_heading

    sections, title = parsed(display_path, ODT_LABEL, parse)
    return loaded(doc_id, display_path, ODT, raw, sections, title)


def _import_odfpy() -> Any:
    import odf.opendocument

    return odf.opendocument


_ODT_SKIPPED = {"table-of-content", "illustration-index", "alphabetical-index", "sequence-decls",
                "variable-decls", "user-field-decls", "tracked-changes"}


def _title_styles(document: Any) -> set[str]:
    """The paragraph styles that are the Title style or made from it (LibreOffice's "P1" for a Title
    paragraph with its own formatting): a paragraph in one is the document's outermost heading."""
    parents = {odf.attr(style, odf.STYLE, "name"): odf.attr(style, odf.STYLE, "parent-style-name")
               for styles in (document.styles, document.automaticstyles) for style in odf.elements(styles)}
    return {name for name in parents if _is_title(name, parents)}


def _is_title(name: str, parents: dict[str, str], hops: int = 8) -> bool:
    if name == "Title":
        return True
    return hops > 0 and bool(parents.get(name)) and _is_title(parents[name], parents, hops - 1)


def _read_odt_body(node: Any, outline: Outline, titles: set[str]) -> None:
    for child in odf.elements(node):
        namespace, name = child.qname
        if (namespace, name) == (odf.TEXT, "h"):
            level = odf.attr(child, odf.TEXT, "outline-level")
            outline.heading(int(level) if level.isdigit() else 1, odf.text_of(child))
        elif (namespace, name) == (odf.TEXT, "p") and odf.attr(child, odf.TEXT, "style-name") in titles:
            outline.heading(0, odf.text_of(child))
        elif (namespace, name) == (odf.TEXT, "p"):
            outline.paragraph(odf.text_of(child))
        elif (namespace, name) == (odf.TEXT, "list"):
            for depth, text in odf.list_items(child):
                outline.item(text, depth)
        elif (namespace, name) == (odf.TABLE, "table"):
            outline.table(odf.table_rows(child))
        elif namespace == odf.TEXT and name not in _ODT_SKIPPED:  # text:section and the like: read inside
            _read_odt_body(child, outline, titles)
