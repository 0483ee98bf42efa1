"""What the Office loaders share (`word.py`, `slides.py`): the checks made before a parser sees a file, the
conversion of a parser's errors to one line, and the sections a document or a slide becomes.

Word, PowerPoint and OpenDocument files are zip packages. Before python-docx, python-pptx or odfpy opens
one, its zip directory is read and refused when its declared sizes make it a zip bomb named .docx
(`zipped.zip_is_safe`: too much unpacked in all, or an entry of a MiB or more packed too tightly); `zipfile`
then holds every entry to those sizes, so the check bounds the memory and time parsing takes.
An OLE compound file (D0 CF 11 E0) under an Office name is a password-protected OOXML package, which
Office encrypts into one, or a .doc/.xls/.ppt of before 2007 renamed: found by content, that is read by
its own loader (`legacy_office.py`, `ppt.py`); called on one directly, the message says which it is.
"""

from __future__ import annotations

import io
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from funnel.errors import IngestError, missing_dependency
from funnel.ingest.text import error_detail, file_document, read_file, table_lines
from funnel.ingest.zipped import zip_is_safe
from funnel.types import Kind, LoadedDocument, Section, SectionKind

OLE_MAGIC = b"\xd0\xcf\x11\xe0"
ZIP_MAGIC = b"PK\x03\x04"
# A parser holds a whole XML part as a tree of a few times its size (lxml; odfpy's DOM more): one part past
# this (a document.xml of tens of thousands of pages) is refused rather than read into gigabytes.
MAX_XML_BYTES = 64 * 2**20
_CORRUPT = (zipfile.BadZipFile, zlib.error, EOFError)

T = TypeVar("T")


def read_package(path: Path, display_path: str, label: str) -> bytes:
    """The file's bytes, once they are known to be a zip package of a safe size; `IngestError` otherwise."""
    raw = read_file(path, display_path)
    if raw.startswith(OLE_MAGIC):
        raise IngestError(display_path, _ole_reason(path, raw, label))
    if not raw.startswith(ZIP_MAGIC):
        raise IngestError(display_path, f"not a {label} (not a zip package)")
    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as archive:
            unsafe = zip_is_safe(archive) or _too_much_xml(archive.infolist())
    except (*_CORRUPT, ValueError, OSError) as e:
        raise IngestError(display_path, f"corrupt or truncated {label} ({error_detail(e)})") from e
    if unsafe is not None:
        raise IngestError(display_path, f"refused: {unsafe}")
    return raw


def _ole_reason(path: Path, raw: bytes, label: str) -> str:
    """Why an OLE file is no package: a .doc, .xls or .ppt (its own loader reads it under its own name),
    an encrypted package, or either (olefile cannot tell)."""
    from funnel.ingest.ole import ENCRYPTED, EXCEL, POWERPOINT, WORD, ole_format, top_level_streams

    found = ole_format(raw[:8], top_level_streams(path))
    old = {WORD: ".doc", EXCEL: ".xls", POWERPOINT: ".ppt"}.get(found or "")
    if old:
        return f"an old binary Office file (a {old}), not a {label} package: rename it {old} to read it"
    if found == ENCRYPTED:
        return f"password-protected, not a {label} package (save it without a password)"
    return (f"password-protected or an old binary Office file, not a {label} package (save it without a "
            "password in the current format)")


def _too_much_xml(entries: list[zipfile.ZipInfo]) -> str | None:
    for entry in entries:
        if entry.filename.endswith((".xml", ".rels")) and entry.file_size > MAX_XML_BYTES:
            return (f"{entry.filename} unpacks to {entry.file_size / 2**20:,.0f} MB of XML, over "
                    f"{MAX_XML_BYTES // 2**20} MB (too large to parse)")
    return None


def library(display_path: str, label: str, package: str, load: Callable[[], T]) -> T:
    """`load()` (it imports the parser), or the one line that says how to install it."""
    try:
        return load()
    except ImportError as e:
        needs = missing_dependency(f"the {label} loader", package, "formats")
        raise IngestError(display_path, str(needs)) from e


def parsed(display_path: str, label: str, parse: Callable[[], T]) -> T:
    """`parse()`, with whatever the parser raises for a broken file as one `IngestError` line."""
    try:
        return parse()
    except IngestError:
        raise
    except (RecursionError, MemoryError) as e:
        raise IngestError(display_path, f"not a readable {label} (nested or large beyond reading)") from e
    except _CORRUPT as e:
        raise IngestError(display_path, f"corrupt or truncated {label} ({error_detail(e)})") from e
    except Exception as e:  # lxml, zipfile, the libraries' own: every failure here means the same
        raise IngestError(display_path, f"not a readable {label} ({error_detail(e)})") from e


def loaded(
    doc_id: str, display_path: str, kind: Kind, raw: bytes, sections: list[Section], title: str | None
) -> LoadedDocument:
    """The loaded document, titled `title` when the file names one (else by its file name)."""
    if not sections:
        raise IngestError(display_path, "empty file")  # as text loaders say: an ingest drops its old chunks
    document = file_document(doc_id, display_path, kind, raw)
    if title and title.strip():
        document = replace(document, title=" ".join(title.split()))
    return LoadedDocument(document=document, sections=tuple(sections))



def one_line(text: str) -> str:
    return " ".join(text.split())


class Outline:
    """A document read top to bottom: headings set the heading trail, paragraphs and list items gather as
    prose under it, a table becomes a TABLE section of rows."""

    def __init__(self) -> None:
        self.sections: list[Section] = []
        self.first_heading: str | None = None
        self._headings: list[tuple[int, str]] = []  # (level, text), outermost first
        self._blocks: list[str] = []  # paragraphs; consecutive list items share one block
        self._in_list = False

    @property
    def trail(self) -> str | None:
        return " > ".join(text for _, text in self._headings) or None

    def heading(self, level: int, text: str) -> None:
        if not (text := one_line(text)):
            return
        self._flush()
        self.first_heading = self.first_heading or text
        while self._headings and self._headings[-1][0] >= level:
            self._headings.pop()
        self._headings.append((level, text))

    def paragraph(self, text: str) -> None:
        if text := one_line(text):
            self._blocks.append(text)
            self._in_list = False

    def item(self, text: str, depth: int = 0) -> None:
        if not (text := one_line(text)):
            return
        line = f"{'  ' * depth}- {text}"
        if self._in_list and self._blocks:
            self._blocks[-1] += "\n" + line
        else:
            self._blocks.append(line)
        self._in_list = True

    def table(self, rows: list[list[str]]) -> None:
        lines = table_lines(rows)
        if len(rows) < 2 or not lines:  # one row is a line of cells, not a table
            cells = [one_line(cell) for row in rows for cell in row if cell.strip()]
            # a merged cell comes back once per column it spans
            self.paragraph(" | ".join(c for i, c in enumerate(cells) if i == 0 or c != cells[i - 1]))
            return
        self._flush()
        self.sections.append(Section(text="\n".join(lines), kind=SectionKind.TABLE, heading=self.trail))

    def done(self) -> list[Section]:
        self._flush()
        return self.sections

    def _flush(self) -> None:
        if self._blocks:
            self.sections.append(Section(text="\n\n".join(self._blocks), heading=self.trail))
        self._blocks = []
        self._in_list = False


def slide_sections(
    number: int, title: str, texts: list[str], tables: list[list[list[str]]], notes: str
) -> list[Section]:
    """A slide's sections, its number as their page: its text frames then its notes ("Notes: ..."), under
    its title, and a TABLE section per table. A slide of a title alone is that title."""
    title = one_line(title)
    prose = [line for text in texts for line in map(one_line, text.splitlines()) if line]
    if notes := "\n".join(line for line in map(one_line, notes.splitlines()) if line):
        prose.append(f"Notes: {notes}")
    rows = [lines for table in tables if (lines := table_lines(table))]
    if not prose and not rows and title:
        prose = [title]
    sections = [Section(text="\n".join(prose), page=number, heading=title or None)] if prose else []
    sections += [Section(text="\n".join(lines), kind=SectionKind.TABLE, page=number, heading=title or None)
                 for lines in rows]
    return sections


def package_recogniser(recognise: Callable[[Any], bool], suffix: str) -> Callable[[Any], bool]:
    """A loader row's recogniser: the package's own (`loaders.zip_holding`), or, for a file named `suffix`,
    an OLE compound file (an encrypted package) or a zip too broken to list (a truncated copy): its
    loader then refuses it in one line that says which, rather than "not a Word document"."""

    def recognised(probe: Any) -> bool:
        if recognise(probe):
            return True
        if probe.path.suffix.lower() != suffix:
            return False
        listable = probe.file is None or probe.zip_entries is not None  # its directory, read once
        return probe.head.startswith(OLE_MAGIC) or (probe.head.startswith(ZIP_MAGIC) and not listable)

    return recognised
