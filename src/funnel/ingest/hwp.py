"""HWP 5 documents (Hangul Word Processor 5.x, .hwp), read with olefile and the format's own records.

An HWP 5 file is an OLE compound file (D0 CF 11 E0) with a "FileHeader" stream that starts with
"HWP Document File"; its text is in BodyText/Section0, Section1, ..., each a zlib-deflated run of records
(a 32-bit header: tag, nesting level, size). A paragraph is a PARA_HEADER record whose children hold its
text (PARA_TEXT, UTF-16LE with control characters inline) and its controls (CTRL_HEADER: a table, a
footnote, a text box, a header...), in the order of the control characters in its text. No published
parser fits: pyhwp is AGPL-3.0 (funnel is Apache-2.0), and the permissively licensed ones leaked control
characters into the text and dropped cell spans when measured on real files (bench/data/hwp/SOURCE.md), so
this reader is the few records text retrieval needs. Sections are made as `hangul.py` says; an HWP has no
page numbers in it (pages are laid out when it is shown), so a chunk is cited by its heading.

Refused in one line: a password-protected, distribution (배포용) or DRM document, whose body is encrypted;
a corrupt or truncated one; a stream that would inflate past MAX_STREAM_BYTES (a zip bomb's trick).
"""

from __future__ import annotations

import struct
import sys
import zlib
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from funnel.errors import IngestError
from funnel.ingest import hangul
from funnel.ingest.hangul import Cell, Paragraph, Role, Table
from funnel.ingest.office import OLE_MAGIC, library, loaded, parsed
from funnel.ingest.text import read_file
from funnel.types import Kind, LoadedDocument

HWP = Kind("hwp")
LABEL = "HWP document"
SIGNATURE = b"HWP Document File"
HWP3_SIGNATURE = b"HWP Document File V3"  # HWP 97 and older: not an OLE file, not read here
MARK = "an OLE file with a FileHeader stream starting with 'HWP Document File'"
# A section of a few hundred pages inflates to a few MB; a stream past this is refused rather than inflated.
MAX_STREAM_BYTES = 256 * 2**20

_COMPRESSED, _PASSWORD, _DISTRIBUTION, _DRM = 1, 2, 4, 16  # FileHeader properties
# Record tags (HWPTAG_BEGIN = 16)
_PARA_SHAPE, _PARA_HEADER, _PARA_TEXT, _CTRL_HEADER, _LIST_HEADER, _TABLE = 25, 66, 67, 71, 72, 77
# Controls whose paragraphs are not the document's running text: header, footer, hidden comment, and the
# section definition (it holds the master pages).
_SKIPPED_CONTROLS = {b"head", b"foot", b"tcmt", b"secd"}
_NOTES = {b"fn  ", b"en  "}
# Control characters that take 8 UTF-16 units (inline and extended); of them, the extended ones each stand
# for the paragraph's next CTRL_HEADER.
_WIDE = {1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23}
_EXTENDED = {1, 2, 3, 11, 12, 14, 15, 16, 17, 18, 21, 22, 23}
_SPACES = {9: "\t", 10: "\n", 24: "-", 30: " ", 31: " "}  # tab, line break, hyphen, fixed spaces


@dataclass
class _Record:
    tag: int
    payload: bytes
    children: list[_Record] = field(default_factory=list)

    def ctrl_id(self) -> bytes:
        return self.payload[:4][::-1]  # stored as a little-endian number whose bytes spell it backwards


def is_hwp(probe: Any) -> bool:
    """An OLE file holding a FileHeader that says HWP; also, for a file named .hwp, an OLE file too broken to
    list (its loader says so in one line) and an HWP 3 file (its loader says it is too old)."""
    named = probe.path.suffix.lower() == ".hwp"
    if named and probe.head.startswith(HWP3_SIGNATURE):
        return True
    if not probe.head.startswith(OLE_MAGIC) or probe.file is None:
        return False
    streams = probe.ole_streams  # the directory every OLE row reads, listed once
    if streams is not None and "fileheader" not in streams:
        return False  # another OLE format's (.doc, .xls, .ppt)
    try:
        import olefile
    except ImportError:
        return named  # the loader says what to install
    try:
        with olefile.OleFileIO(probe.file) as ole:
            if not ole.exists("FileHeader"):
                return False
            return ole.openstream("FileHeader").read(len(SIGNATURE)) == SIGNATURE
    except Exception:  # olefile's errors for a broken file are of many types
        return named
    finally:
        if not isinstance(probe.file, Path):
            probe.file.seek(0)


def load_hwp(
    path: Path, doc_id: str, display_path: str, language: str | None = None, pages: object = None
) -> LoadedDocument:
    """An .hwp as sections (the signature of a `LOADERS` row's `read`)."""
    olefile = library(display_path, "HWP", "olefile", _import_olefile)
    raw = read_file(path, display_path)
    if raw.startswith(HWP3_SIGNATURE):
        raise IngestError(display_path, "an HWP 3 document (Hangul 97 or older): not read; save it as HWP "
                                        "5 or HWPX")
    if not raw.startswith(OLE_MAGIC):
        raise IngestError(display_path, f"not an {LABEL} (not an OLE compound file)")

    def parse() -> list[Paragraph]:
        with olefile.OleFileIO(raw) as ole:
            properties = _check_header(ole, display_path)
            compressed = bool(properties & _COMPRESSED)
            shapes = _heading_shapes(_records(_stream(ole, ["DocInfo"], compressed, display_path)))
            paragraphs: list[Paragraph] = []
            for name in _sections(ole):
                body = _records(_stream(ole, name, compressed, display_path))
                paragraphs += [_paragraph(r, shapes) for r in _tree(body) if r.tag == _PARA_HEADER]
            return paragraphs

    paragraphs = parsed(display_path, LABEL, parse)
    found, heading = hangul.sections(paragraphs)
    return loaded(doc_id, display_path, HWP, raw, found, heading)


def _import_olefile() -> Any:
    import olefile

    return olefile


def _check_header(ole: Any, display_path: str) -> int:
    if not ole.exists("FileHeader"):
        raise IngestError(display_path, f"not an {LABEL} (an OLE file without a FileHeader: another "
                                        "program's document named .hwp, or a damaged one)")
    header = ole.openstream("FileHeader").read(256)
    if not header.startswith(SIGNATURE) or len(header) < 40:
        raise IngestError(display_path, f"corrupt or truncated {LABEL} (its FileHeader does not say HWP)")
    properties = struct.unpack_from("<I", header, 36)[0]
    if properties & _PASSWORD:
        raise IngestError(display_path, "password-protected HWP document (save it without a password)")
    if properties & (_DISTRIBUTION | _DRM):
        raise IngestError(display_path, "a distribution-only (배포용) or DRM-protected HWP document: its text "
                                        "is encrypted")
    return properties


def _sections(ole: Any) -> list[list[str]]:
    names = [entry for entry in ole.listdir() if len(entry) == 2 and entry[0] == "BodyText"
             and entry[1].startswith("Section") and entry[1][7:].isdigit()]
    return sorted(names, key=lambda entry: int(entry[1][7:]))


def _stream(ole: Any, name: list[str], compressed: bool, display_path: str) -> bytes:
    data = ole.openstream(name).read()
    if not compressed:
        return data
    inflater = zlib.decompressobj(-15)
    out = inflater.decompress(data, MAX_STREAM_BYTES)
    if inflater.unconsumed_tail:
        raise IngestError(display_path, f"refused: {'/'.join(name)} inflates past "
                                        f"{MAX_STREAM_BYTES // 2**20} MB (a compression bomb)")
    return out


def _records(data: bytes) -> list[tuple[int, int, bytes]]:
    """(tag, level, payload) of each record; a record cut short ends the list (a truncated stream keeps
    what it holds)."""
    records, at, end = [], 0, len(data)
    while at + 4 <= end:
        header = struct.unpack_from("<I", data, at)[0]
        tag, level, size = header & 0x3FF, (header >> 10) & 0x3FF, header >> 20
        at += 4
        if size == 0xFFF:
            if at + 4 > end:
                break
            size = struct.unpack_from("<I", data, at)[0]
            at += 4
        records.append((tag, level, data[at : at + size]))
        at += size
    return records


def _tree(records: list[tuple[int, int, bytes]]) -> list[_Record]:
    """The records as a tree by their levels: the top-level ones, each with its children."""
    top: list[_Record] = []
    stack: list[tuple[int, _Record]] = []
    for tag, level, payload in records:
        record = _Record(tag, payload)
        while stack and stack[-1][0] >= level:
            stack.pop()
        (stack[-1][1].children if stack else top).append(record)
        stack.append((level, record))
    return top


def _heading_shapes(doc_info: list[tuple[int, int, bytes]]) -> list[tuple[Role, int]]:
    """Each paragraph shape's role by id (its index): an outline level, a numbered or bulleted item."""
    shapes = []
    for tag, _, payload in doc_info:
        if tag != _PARA_SHAPE:
            continue
        flags = struct.unpack_from("<I", payload)[0] if len(payload) >= 4 else 0
        kind, level = (flags >> 23) & 3, (flags >> 25) & 7
        shapes.append((Role.HEADING, level) if kind == 1 else (Role.ITEM, level) if kind else (Role.TEXT, 0))
    return shapes


def _paragraph(record: _Record, shapes: list[tuple[Role, int]]) -> Paragraph:
    shape = struct.unpack_from("<H", record.payload, 8)[0] if len(record.payload) >= 10 else -1
    role, level = shapes[shape] if 0 <= shape < len(shapes) else (Role.TEXT, 0)
    paragraph = Paragraph(role, level)
    controls = [child for child in record.children if child.tag == _CTRL_HEADER]
    text = next((child.payload for child in record.children if child.tag == _PARA_TEXT), b"")
    for piece in _text_pieces(text, len(controls)):
        if isinstance(piece, str):
            paragraph.pieces.append(piece)
        else:
            _control(controls[piece], paragraph, shapes)
    return paragraph


def _text_pieces(payload: bytes, controls: int) -> list[str | int]:
    """A PARA_TEXT's text runs, with the index of the control each extended control character stands for
    (any controls its text does not place follow at the end)."""
    units = array("H")
    units.frombytes(payload[: len(payload) // 2 * 2])
    if sys.byteorder == "big":
        units.byteswap()
    pieces: list[str | int] = []
    start = i = placed = 0
    while i < len(units):
        code = units[i]
        if code >= 32:
            i += 1
            continue
        pieces.append(payload[start * 2 : i * 2].decode("utf-16-le", errors="replace"))
        if code in _EXTENDED and placed < controls:
            pieces.append(placed)
            placed += 1
        pieces.append(_SPACES.get(code, ""))
        if code == 13:  # the paragraph's end
            start = i = len(units)
            break
        i += 8 if code in _WIDE else 1
        start = i
    pieces.append(payload[start * 2 : len(units) * 2].decode("utf-16-le", errors="replace"))
    pieces += range(placed, controls)
    return [piece for piece in pieces if piece != ""]


def _control(record: _Record, paragraph: Paragraph, shapes: list[tuple[Role, int]]) -> None:
    kind = record.ctrl_id()
    if kind in _SKIPPED_CONTROLS:
        return
    if kind == b"tbl ":
        paragraph.pieces.append(_table(record, shapes))
    elif kind in _NOTES:
        if note := hangul.plain(_paragraphs_under(record, shapes)):
            paragraph.notes.append(note)
    elif inner := _paragraphs_under(record, shapes):  # a text box, a caption: read where it stands
        paragraph.pieces.append(inner)


def _paragraphs_under(record: _Record, shapes: list[tuple[Role, int]]) -> list[Paragraph]:
    found = []
    for child in record.children:
        if child.tag == _PARA_HEADER:
            found.append(_paragraph(child, shapes))
        elif child.tag != _CTRL_HEADER:  # a nested control belongs to its own paragraph
            found += _paragraphs_under(child, shapes)
    return found


def _table(record: _Record, shapes: list[tuple[Role, int]]) -> Table:
    """A table control: a caption (a list before the TABLE record), then each cell, a LIST_HEADER with the
    cell's address and span followed by its paragraphs."""
    table = Table(cells=[])
    seen_table, current = False, None
    for child in record.children:
        if child.tag == _TABLE:
            seen_table = True
        elif child.tag == _LIST_HEADER and seen_table and len(child.payload) >= 16:
            col, row, cols, rows = struct.unpack_from("<4H", child.payload, 8)
            current = Cell(row, col, rows, cols, [])
            table.cells.append(current)
        elif child.tag == _PARA_HEADER:
            paragraph = _paragraph(child, shapes)
            (current.paragraphs if current is not None else table.caption).append(paragraph)
    return table
