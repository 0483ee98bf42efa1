"""Rich Text Format (.rtf): paragraphs, headings and tables as sections, read with striprtf.

striprtf (pure Python, BSD) turns RTF into text: code pages and \\u escapes decoded, destinations that are
not text (fonts, styles, pictures, fields' instructions, headers and footers) skipped; a table cell ends
in "|" and a row in a line break. Its group stack is a list, so 100,000 nested groups cost a tenth of a
second, not a recursion. Before it runs:
- a paragraph's outline level (\\outlinelevelN, what Word writes for its Heading N styles) is marked with
  a private-use character, so the line it starts is a heading;
- a line break is put before each "{" (RTF ignores line breaks), so no line holds two fields: striprtf's
  hyperlink pattern backtracks cubically on a long line of fields (1,000 on one line took 13 s);
- runs of hex digits of MIN_HEX_RUN or more (pictures, embedded objects) are dropped, and what is left is
  refused past MAX_RTF_CHARS (striprtf reads ~1.5 MB a second).
Lines ending in "|" are a table's rows (the first its header, `office.table_lines`); the rest are
paragraphs under the last heading. The title is the file's own (\\info \\title), else its first heading.
Chosen over catdoc's RTF reading on the 3 RTF files of bench/data/legacy: catdoc garbled Japanese and
Gothic text and ran a table's cells together; striprtf decoded both and marks the cells.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from funnel.errors import IngestError
from funnel.ingest.office import Outline, library, loaded, parsed
from funnel.ingest.text import read_file
from funnel.types import Kind, LoadedDocument, Section

RTF = Kind("rtf")
RTF_LABEL = "RTF document"
MARK = "{\\rtf at its start"
MAX_RTF_CHARS = 24 * 2**20  # ~16 s of striprtf; a 5,000-page book of plain text
MIN_HEX_RUN = 256
_HEADING_MARK = 0xE000  # + outline level (0..8): a heading's first character, private use
_OUTLINE_LEVEL = re.compile(r"\\outlinelevel(\d)(?![0-9])")
_GROUP = re.compile(r"(?<!\\)\{")
_HEX_RUN = re.compile(r"[0-9a-fA-F\r\n]{%d,}" % MIN_HEX_RUN)
_TITLE = re.compile(r"\{\\title\s?([^{}]{0,500})\}")
_TITLE_WITHIN = 256 * 1024  # \info comes after the font, colour and style tables, before the text
_CODEPAGE = re.compile(r"\\ansicpg\d{1,5}")
_NO_MARKS = {_HEADING_MARK + level: None for level in range(9)}


def is_rtf(probe: Any) -> bool:
    return probe.head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{\\rtf")


def load_rtf(
    path: Path, doc_id: str, display_path: str, language: str | None = None, pages: object = None
) -> LoadedDocument:
    """An RTF file as sections (the signature of a `LOADERS` row's `read`)."""
    rtf_to_text = library(display_path, "RTF", "striprtf", _import_striprtf)
    raw = read_file(path, display_path)
    source = _HEX_RUN.sub("", raw.decode("latin-1"))  # RTF is 7-bit; other bytes pass through as they are
    if len(source) > MAX_RTF_CHARS:
        raise IngestError(display_path, f"over {MAX_RTF_CHARS // 2**20} MB of RTF besides pictures; save it "
                                        "as .docx or text")

    def parse() -> tuple[list[Section], str | None]:
        marked = _OUTLINE_LEVEL.sub(lambda m: f"{m[0]}{{\\uc1\\u{_HEADING_MARK + int(m[1])}?}}", source)
        text = _whole(rtf_to_text(_GROUP.sub("\n{", marked), errors="replace"))
        outline = Outline()
        rows: list[list[str]] = []
        for line in text.splitlines():
            level = ord(line[0]) - _HEADING_MARK if line else -1
            line = line.translate(_NO_MARKS)
            if line.rstrip().endswith("|"):
                rows.append([cell.strip() for cell in line.rstrip()[:-1].split("|")])
                continue
            if rows:
                outline.table(rows)
                rows = []
            if 0 <= level <= 8:
                outline.heading(level + 1, line)
            else:
                outline.paragraph(line)
        if rows:
            outline.table(rows)
        return outline.done(), _title(source, rtf_to_text) or outline.first_heading

    sections, title = parsed(display_path, RTF_LABEL, parse)
    return loaded(doc_id, display_path, RTF, raw, sections, title)


def _title(source: str, rtf_to_text: Any) -> str | None:
    """The title in the file's information group, its escapes decoded in the file's code page; of a title
    given twice (ANSI, then Unicode in \\upr), the one that is not question marks."""
    codepage = _CODEPAGE.search(source, 0, 1024)
    prefix = "{\\rtf1\\ansi" + (codepage[0] if codepage else "") + " "
    for match in _TITLE.finditer(source, 0, _TITLE_WITHIN):
        title = _whole(rtf_to_text(prefix + match[1] + "}", errors="replace")).strip()
        if title.strip("? "):
            return title
    return None


def _import_striprtf() -> Any:
    from striprtf.striprtf import rtf_to_text

    return rtf_to_text


def _whole(text: str) -> str:
    """striprtf's text with the surrogate pairs of \\u escapes (one escape each half) joined."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
