"""Plain-text and Markdown loaders.

Markdown is split at headings so every section knows its heading path ("Guide > Install"); pipe tables
become TABLE sections of self-describing "Header: value | Header: value" rows, the form in which a table
row can win retrieval on its own. Line numbers always refer to the file as it is on disk.
"""

from __future__ import annotations

import codecs
import hashlib
import re
from pathlib import Path

from funnel.errors import IngestError
from funnel.types import Document, Kind, LoadedDocument, Section, SectionKind

# More than this share of control characters and the "text" is really binary data.
_MAX_CONTROL_SHARE = 0.02
# A UTF-8 file with a few bad bytes (a stray cp1252 quote, a truncated copy-paste) is still UTF-8: up to
# this many undecodable bytes, or this share of the characters if more, cost a U+FFFD each, not the file.
_MAX_REPLACEMENTS = 8
_MAX_REPLACEMENT_SHARE = 0.01
_REPLACEMENT = "\ufffd"
_ALLOWED_CONTROLS = frozenset("\t\n\r\f\v\x1b")

_ATX_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT_UNDERLINE = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FENCE_OPEN = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_TABLE_DELIMITER = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")


def error_detail(error: BaseException) -> str:
    """A parser's error as a short detail for a one-line refusal: its first line, at most 120 characters."""
    text = str(error).strip()
    return text.splitlines()[0][:120] if text else type(error).__name__


def read_file(path: Path, display_path: str) -> bytes:
    """The file's bytes; `IngestError` naming the file when it cannot be read (gone, no permission)."""
    try:
        return path.read_bytes()
    except OSError as e:
        raise IngestError(display_path, f"cannot read ({e.strerror or e})") from e


def read_source(path: Path, display_path: str) -> tuple[bytes, str]:
    """Raw bytes (for the content hash) and decoded text with `\\n` line ends."""
    raw = read_file(path, display_path)
    text = decode_text(raw, display_path)
    if not text.strip():
        raise IngestError(display_path, "empty file")
    return raw, text


def decode_text(raw: bytes, display_path: str) -> str:
    """UTF-8 (BOM allowed, rare bad bytes replaced) or UTF-16 with BOM; else cp1252/latin-1.

    Whatever the encoding, only bytes that read as text pass.
    """
    if raw.startswith(codecs.BOM_UTF8):
        text = raw[len(codecs.BOM_UTF8) :].decode("utf-8", errors="replace")
    elif raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        text = raw.decode("utf-16", errors="replace")
    elif b"\x00" in raw[:8192]:
        raise IngestError(display_path, "not a text file (binary content)")
    else:
        text = _decode_legacy(raw)
    if not _looks_like_text(text):
        raise IngestError(display_path, "not a text file (binary content)")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def load_text(path: Path, doc_id: str, display_path: str) -> LoadedDocument:
    raw, text = read_source(path, display_path)
    section = _whole_text_section(text.split("\n"))
    return LoadedDocument(document=file_document(doc_id, display_path, Kind.TEXT, raw), sections=(section,))


def load_markdown(path: Path, doc_id: str, display_path: str) -> LoadedDocument:
    raw, text = read_source(path, display_path)
    sections = parse_markdown(text)
    if not sections:
        raise IngestError(display_path, "empty file")
    document = file_document(doc_id, display_path, Kind.MARKDOWN, raw)
    return LoadedDocument(document=document, sections=tuple(sections))


def parse_markdown(text: str) -> list[Section]:
    """Sections in file order: prose per heading (fenced code kept inside), pipe tables as TABLE sections.

    A file of headings alone (an outline, a stub) has no section under any heading; its heading lines,
    as they are on disk, become one section, since they are all the file says. Only blank text gives none.
    """
    lines = text.split("\n")
    sections = _MarkdownSplitter(lines).run()
    if not sections and text.strip():
        sections = [_whole_text_section(lines)]
    return sections


def table_row_line(headers: list[str], cells: list[str]) -> str:
    """One table row as "Header: value | Header: value"; empty cells are left out, they say nothing, and a
    cell past the header's width is named "Column N". The one form every loader's table rows take (CSV,
    spreadsheets, Word, OpenDocument, web pages, PDF)."""
    parts = []
    names = list(headers) + [f"Column {i}" for i in range(len(headers) + 1, len(cells) + 1)]
    for header, cell in zip(names, cells):
        value = " ".join(cell.split())
        if value:
            parts.append(f"{header}: {value}")
    return " | ".join(parts)


def table_lines(rows: list[list[str]]) -> list[str]:
    """A table's rows, the first its header, as "Header: value | Header: value" lines (CSV's form); cells
    past the header's width are named "Column N", an empty row is left out."""
    rows = [row for row in rows if any(cell.strip() for cell in row)]
    if not rows:
        return []
    header = name_headers(rows[0])
    lines = []
    for cells in rows[1:]:
        if line := table_row_line(header, cells):
            lines.append(line)
    return lines


def name_headers(cells: list[str]) -> list[str]:
    """Clean header cells; an empty one becomes "Column N" so its values keep a label."""
    return [" ".join(c.split()) or f"Column {i}" for i, c in enumerate(cells, start=1)]


def _decode_legacy(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        pass
    text = raw.decode("utf-8", errors="replace")
    if _mostly_utf8(raw, text):
        return text
    try:
        return raw.decode("cp1252")  # what most non-UTF-8 Western text files are
    except UnicodeDecodeError:
        return raw.decode("latin-1")  # maps every byte; _looks_like_text decides if that made sense


def _mostly_utf8(raw: bytes, text: str) -> bool:
    """Whether `text`, `raw` decoded as UTF-8 with replacement, is UTF-8 with a few bad bytes.

    It is when the bad bytes are rare and the file also holds valid multi-byte sequences. Without any,
    nothing says UTF-8: the bytes are a legacy encoding, and cp1252 reads them whole (an ASCII file with
    one cp1252 quote). cp1252 prose, in turn, almost never forms valid UTF-8 sequences by chance.
    """
    bad = text.count(_REPLACEMENT) - raw.count(_REPLACEMENT.encode("utf-8"))
    valid_non_ascii = len(text) - len(text.encode("ascii", errors="ignore")) - bad
    if bad > max(_MAX_REPLACEMENTS, _MAX_REPLACEMENT_SHARE * len(text)):
        return False
    return bad <= valid_non_ascii


def _looks_like_text(text: str) -> bool:
    sample = text[:8192]
    if not sample:
        return True
    controls = sum(1 for ch in sample if (ch < " " or "\x7f" <= ch <= "\x9f") and ch not in _ALLOWED_CONTROLS)
    return controls / len(sample) <= _MAX_CONTROL_SHARE


def _whole_text_section(lines: list[str]) -> Section:
    """One PROSE section from the first to the last non-blank line; `lines` must hold one."""
    non_blank = [i for i, line in enumerate(lines) if line.strip()]
    first, last = non_blank[0], non_blank[-1]
    return Section(
        text="\n".join(lines[first : last + 1]),
        kind=SectionKind.PROSE,
        line_start=first + 1,
        line_end=last + 1,
    )


def file_document(
    doc_id: str, display_path: str, kind: Kind, raw: bytes, language: str | None = None
) -> Document:
    """The `Document` of a file a loader read: titled by its name, identified by its bytes' SHA-256."""
    return Document(
        doc_id=doc_id,
        path=display_path,
        title=Path(display_path).name,
        kind=kind,
        content_hash=hashlib.sha256(raw).hexdigest(),
        language=language,
    )


def _split_cells(line: str) -> list[str]:
    """Cells of a pipe-table line; `\\|` and pipes inside `code` do not separate cells."""
    body = line.strip()
    if body.startswith("|"):
        body = body[1:]
    if body.endswith("|") and not body.endswith("\\|"):
        body = body[:-1]
    cells, current, in_code = [], [], False
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body) and body[i + 1] == "|":
            current.append("|")
            i += 2
            continue
        if ch == "`":
            in_code = not in_code
        if ch == "|" and not in_code:
            cells.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
        i += 1
    cells.append("".join(current).strip())
    return cells


def _clean_heading(title: str) -> str:
    return " ".join(title.replace("`", "").split())


class _MarkdownSplitter:
    """A line scanner; enough of CommonMark for headings, fences and pipe tables, which is all we split on."""

    def __init__(self, lines: list[str]):
        self.lines = lines
        self.sections: list[Section] = []
        self.headings: list[tuple[int, str]] = []  # (level, title) from the outermost heading down
        self.prose: list[int] = []  # indices of lines waiting to become a PROSE section

    @property
    def heading_path(self) -> str | None:
        return " > ".join(title for _, title in self.headings) or None

    def run(self) -> list[Section]:
        i = self._front_matter()
        while i < len(self.lines):
            i = self._step(i)
        self._flush_prose()
        return self.sections

    def _front_matter(self) -> int:
        # YAML front matter would otherwise read as a paragraph underlined by "---": a bogus heading.
        if not self.lines or self.lines[0].strip() != "---":
            return 0
        for end in range(1, min(len(self.lines), 200)):
            if self.lines[end].strip() in ("---", "..."):
                self.prose.extend(range(0, end + 1))
                self._flush_prose()
                return end + 1
        return 0

    def _step(self, i: int) -> int:
        line = self.lines[i]
        fence = _FENCE_OPEN.match(line)
        if fence:
            return self._fenced_block(i, fence.group(1))
        atx = _ATX_HEADING.match(line)
        if atx:
            self._heading(len(atx.group(1)), atx.group(2) or "")
            return i + 1
        nxt = self.lines[i + 1] if i + 1 < len(self.lines) else ""
        if line.strip() and (not self.prose or not self.lines[self.prose[-1]].strip()):
            underline = _SETEXT_UNDERLINE.match(nxt)
            if underline and "|" not in line:
                self._heading(1 if underline.group(1)[0] == "=" else 2, line.strip())
                return i + 2
        if "|" in line and _TABLE_DELIMITER.match(nxt) and "|" in nxt and "-" in nxt:
            return self._table(i)
        self.prose.append(i)
        return i + 1

    def _fenced_block(self, i: int, marker: str) -> int:
        # The whole block, closing fence included, joins the section's prose: the chunker keeps it whole.
        end = i + 1
        while end < len(self.lines):
            stripped = self.lines[end].strip()
            if stripped.startswith(marker[0] * len(marker)) and not stripped.strip(marker[0]):
                break
            end += 1
        last = min(end, len(self.lines) - 1)
        self.prose.extend(range(i, last + 1))
        return last + 1

    def _heading(self, level: int, title: str) -> None:
        self._flush_prose()
        while self.headings and self.headings[-1][0] >= level:
            self.headings.pop()
        title = _clean_heading(title)
        if title:
            self.headings.append((level, title))

    def _table(self, i: int) -> int:
        headers = name_headers(_split_cells(self.lines[i]))
        end = i + 2
        rows: list[str] = []
        first_row = end
        while end < len(self.lines) and self.lines[end].strip() and "|" in self.lines[end]:
            row = table_row_line(headers, _split_cells(self.lines[end]))
            if row:
                rows.append(row)
            end += 1
        if not rows:  # a header with no body says nothing as rows; keep it as prose
            self.prose.extend(range(i, end))
            return end
        self._flush_prose()
        self.sections.append(
            Section(
                text="\n".join(rows),
                kind=SectionKind.TABLE,
                # Starts at the first body row so row n of the section is line line_start + n.
                line_start=first_row + 1,
                line_end=end,
                heading=self.heading_path,
            )
        )
        return end

    def _flush_prose(self) -> None:
        indices = [i for i in self.prose if self.lines[i].strip()]
        if indices:
            first, last = indices[0], indices[-1]
            self.sections.append(
                Section(
                    text="\n".join(self.lines[first : last + 1]),
                    kind=SectionKind.PROSE,
                    line_start=first + 1,
                    line_end=last + 1,
                    heading=self.heading_path,
                )
            )
        self.prose = []
