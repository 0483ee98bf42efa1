"""PowerPoint (.pptx, python-pptx) and OpenDocument (.odp, odfpy) presentations: one section per slide.

A slide's number is its sections' `page`, and the loader's row names the unit "slide ", so a citation
reads "slide 3". Its title is the heading; its text frames follow in the order the slide holds them
(groups read inside), then its speaker notes as "Notes: ..."; a table is a TABLE section of "Header:
value" rows. Footers, slide numbers and dates on a slide are left out, as are pictures and charts. The
presentation's title is its own (core properties, `dc:title`), else its first slide's title, else its
file name. Bad files are refused in one line before a parser sees them (`office.py`).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from funnel.errors import IngestError
from funnel.ingest import opendocument as odf
from funnel.ingest.office import library, loaded, parsed, read_package, slide_sections
from funnel.types import Kind, LoadedDocument, Section

PPTX = Kind("pptx")
ODP = Kind("odp")
PPTX_LABEL = "PowerPoint presentation"
ODP_LABEL = "OpenDocument presentation"
# Placeholders that repeat on every slide and say nothing about it (python-pptx's PP_PLACEHOLDER values).
_PPTX_CHROME = {"FOOTER", "SLIDE_NUMBER", "DATE"}
_ODP_CHROME = {"footer", "page-number", "date-time", "header"}


class _Slide:
    """What a slide shows, gathered from its shapes."""

    def __init__(self) -> None:
        self.title = ""
        self.texts: list[str] = []
        self.tables: list[list[list[str]]] = []
        self.notes = ""

    def sections(self, number: int) -> list[Section]:
        return slide_sections(number, self.title, self.texts, self.tables, self.notes)


def load_pptx(
    path: Path, doc_id: str, display_path: str, language: str | None = None, pages: object = None
) -> LoadedDocument:
    """A .pptx as sections, one slide each (the signature of a `LOADERS` row's `read`)."""
    pptx = library(display_path, "PowerPoint", "python-pptx", _import_pptx)
    raw = read_package(path, display_path, PPTX_LABEL)

    def parse() -> tuple[list[Section], str | None]:
        presentation = pptx.Presentation(io.BytesIO(raw))
        sections: list[Section] = []
        first_title = None
        for number, slide in enumerate(presentation.slides, start=1):
            read = _pptx_slide(slide)
            first_title = first_title or read.title.strip() or None
            sections += read.sections(number)
        return sections, presentation.core_properties.title or first_title

    sections, title = parsed(display_path, PPTX_LABEL, parse)
    return loaded(doc_id, display_path, PPTX, raw, sections, title)


def _import_pptx() -> Any:
    import pptx

    return pptx


def _pptx_slide(slide: Any) -> _Slide:
    read = _Slide()
    title = slide.shapes.title
    if title is not None and title.has_text_frame:
        read.title = title.text_frame.text
    _pptx_shapes(slide.shapes, read, title.shape_id if title is not None else None)
    if slide.has_notes_slide and (frame := slide.notes_slide.notes_text_frame) is not None:
        read.notes = frame.text
    return read


def _pptx_shapes(shapes: Any, read: _Slide, title_id: int | None) -> None:
    from pptx.shapes.group import GroupShape

    for shape in shapes:
        if isinstance(shape, GroupShape):
            _pptx_shapes(shape.shapes, read, title_id)
        elif shape.shape_id == title_id or _is_chrome(shape):
            continue
        elif shape.has_text_frame:
            read.texts.append(shape.text_frame.text)
        elif getattr(shape, "has_table", False):
            read.tables.append([[cell.text for cell in row.cells] for row in shape.table.rows])


def _is_chrome(shape: Any) -> bool:
    if not shape.is_placeholder:
        return False
    kind = shape.placeholder_format.type
    return getattr(kind, "name", "") in _PPTX_CHROME


def load_odp(
    path: Path, doc_id: str, display_path: str, language: str | None = None, pages: object = None
) -> LoadedDocument:
    """An .odp as sections, one slide each (the signature of a `LOADERS` row's `read`)."""
    library(display_path, "OpenDocument", "odfpy", _import_odfpy)
    raw = read_package(path, display_path, ODP_LABEL)

    def parse() -> tuple[list[Section], str | None]:
        document = odf.load_odf(raw, display_path, ODP_LABEL)
        sections: list[Section] = []
        first_title = None
        presentation = odf.body(document, "presentation")
        if presentation is None:
            raise IngestError(display_path, f"not a readable {ODP_LABEL} (it has no presentation body)")
        slides = [page for page in odf.elements(presentation) if page.qname == (odf.DRAW, "page")]
        for number, page in enumerate(slides, start=1):
            read = _Slide()
            _odp_shapes(page, read)
            first_title = first_title or read.title.strip() or None
            sections += read.sections(number)
        return sections, odf.meta_title(document) or first_title

    sections, title = parsed(display_path, ODP_LABEL, parse)
    return loaded(doc_id, display_path, ODP, raw, sections, title)


def _import_odfpy() -> Any:
    import odf.opendocument

    return odf.opendocument


def _odp_shapes(node: Any, read: _Slide) -> None:
    for child in odf.elements(node):
        if child.qname == (odf.PRESENTATION, "notes"):
            read.notes = "\n".join(_odp_lines(child))
        elif _is_odp_chrome(child) or child.qname in {(odf.SVG, "title"), (odf.SVG, "desc")}:
            continue
        elif odf.attr(child, odf.PRESENTATION, "class") == "title" and not read.title:
            read.title = " ".join(_odp_lines(child))
        elif child.qname == (odf.TABLE, "table"):
            read.tables.append(odf.table_rows(child))
        elif child.qname in {(odf.TEXT, "p"), (odf.TEXT, "h"), (odf.TEXT, "list")}:
            read.texts += _odp_lines(node=child, alone=True)
        else:  # a frame, a text box, a custom shape, a group: read inside
            _odp_shapes(child, read)


def _is_odp_chrome(node: Any) -> bool:
    return odf.attr(node, odf.PRESENTATION, "class") in _ODP_CHROME


def _odp_lines(node: Any, alone: bool = False) -> list[str]:
    """The lines of text in `node` (or of `node` itself, `alone`), list items as "- item"."""
    lines: list[str] = []
    for child in [node] if alone else odf.elements(node):
        if child.qname == (odf.TEXT, "list"):
            lines += [f"{'  ' * depth}- {text}" for depth, text in odf.list_items(child)]
        elif child.qname in {(odf.TEXT, "p"), (odf.TEXT, "h")}:
            lines.append(odf.text_of(child))
        elif child.qname not in {(odf.SVG, "title"), (odf.SVG, "desc")} and not _is_odp_chrome(child):
            lines += _odp_lines(child)
    return [line for line in lines if line.strip()]
