"""PowerPoint 97-2003 presentations (.ppt): one section per slide, read from the file's records.

A .ppt's "PowerPoint Document" stream is a tree of records ([MS-PPT]). The slides in show order are the
SlidePersistAtoms of the document's SlideListWithText, each naming its Slide container through the
persist directory, which the UserEditAtom chain leads to (the newest edit wins, so a fast-saved file gives
its slides once, as last saved). A slide's text is the text of its shapes in drawing order: a text box
holds its text, a placeholder (title, body) points into the SlideListWithText (OutlineTextRefAtom). The
title is the text of the title placeholder; speaker notes are the text of the Notes container whose
NotesAtom names the slide. Masters, layouts, footers and pictures are left out, as they are for .pptx
(`slides.py`). A table is a group of text boxes in PowerPoint 97's format: its cells come as lines.

Measured against Debian's catppt (catdoc) on the 22 .ppt files of Apache Tika's tests (2026-12-07): catppt
printed more than a theme's name for 5 (for testPPT_various.ppt "Office Theme" alone, for the 14-slide
testPPT_skipBadCompressedObject.ppt 14 words of its 804), and no slide numbers; this reader gave the slides'
text of 16, a section a slide, in under 0.05 s each; 1 is password-protected (one line) and 5 have no text on
their slides (only on the master, or in pictures: "empty file"). No program is run, only olefile.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

from funnel.errors import IngestError
from funnel.ingest.office import loaded, parsed, slide_sections
from funnel.ingest.text import read_file
from funnel.ingest.ole import POWERPOINT, open_ole, stream_bytes
from funnel.types import Kind, LoadedDocument, Section

PPT = Kind("ppt")
PPT_LABEL = "PowerPoint 97-2003 presentation"
MARK = "the streams of a PowerPoint 97-2003 presentation (an OLE file holding \"PowerPoint Document\")"
_DOCUMENT, _SLIDE, _SLIDE_ATOM, _NOTES, _NOTES_ATOM = 0x03E8, 0x03EE, 0x03EF, 0x03F0, 0x03F1
_SLIDE_LIST, _SLIDE_PERSIST, _USER_EDIT, _PERSIST_DIRECTORY = 0x0FF0, 0x03F3, 0x0FF5, 0x1772
_TEXT_HEADER, _TEXT_CHARS, _TEXT_BYTES, _OUTLINE_TEXT_REF = 0x0F9F, 0x0FA0, 0x0FA8, 0x0F9E
_MASTER_TYPES = {0x03F8, 0x0FD9}  # MainMaster, HeadersFooters: under the document, not a slide's
_TITLE_TYPES = {0, 6}  # TextHeaderAtom: Title, CenterTitle
_ENCRYPTED_TOKEN = 0xF3D1C4DF  # CurrentUserAtom.headerToken of an encrypted file
_MAX_DEPTH = 32
_MAX_EDITS = 10_000
_TITLE_CHARS = 100


@dataclass
class _Slide:
    persist: int
    slide_id: int
    texts: list[tuple[int, str]] = field(default_factory=list)  # (text type, text) from the list


def load_ppt(
    path: Path, doc_id: str, display_path: str, language: str | None = None, pages: object = None
) -> LoadedDocument:
    """A .ppt as sections, one slide each (the signature of a `LOADERS` row's `read`)."""
    ole = open_ole(path, display_path, PPT_LABEL, POWERPOINT)
    try:
        stream = stream_bytes(ole, "PowerPoint Document", display_path, PPT_LABEL)
        current = stream_bytes(ole, "Current User", display_path, PPT_LABEL) if ole.exists("Current User") \
            else b""
        encrypted = ole.exists("EncryptedSummary")
    finally:
        ole.close()
    raw = read_file(path, display_path)
    if encrypted or (len(current) >= 16 and struct.unpack_from("<I", current, 12)[0] == _ENCRYPTED_TOKEN):
        raise IngestError(display_path, "password-protected; save it without a password")
    sections, title = parsed(display_path, PPT_LABEL, lambda: _read(stream, current, display_path))
    return loaded(doc_id, display_path, PPT, raw, sections, title)


def _read(stream: bytes, current: bytes, display_path: str) -> tuple[list[Section], str | None]:
    persist, document = _persist_directory(stream, current)
    if document is None or _header(stream, document)[2] != _DOCUMENT:
        raise IngestError(display_path, f"not a readable {PPT_LABEL} (no document record)")
    slides, notes_lists = _slide_lists(stream, document)
    notes = _notes(stream, persist, notes_lists)
    sections: list[Section] = []
    first_title = None
    for number, slide in enumerate(slides, start=1):
        offset = persist.get(slide.persist)
        drawn = _texts(stream, offset, slide) if offset is not None else []
        used = {text for _, text in drawn}
        texts = drawn + [(kind, text) for kind, text in slide.texts if text not in used]
        title = next((text for kind, text in texts if kind in _TITLE_TYPES), "") or _untyped_title(texts)
        body = [text for kind, text in texts if kind not in _TITLE_TYPES or text != title]
        first_title = first_title or title.strip() or None
        sections += slide_sections(number, title, body, [], notes.get(slide.slide_id, ""))
    return sections, first_title


def _untyped_title(texts: list[tuple[int, str]]) -> str:
    """A slide whose text boxes say no type (some writers make every one "other"): its first text, when
    that is one short line, is its title."""
    if not texts:
        return ""
    first = texts[0][1]
    return first if "\n" not in first and 0 < len(first) <= _TITLE_CHARS else ""


def _header(stream: bytes, offset: int) -> tuple[int, int, int, int]:
    """(version, instance, type, length) of the record at `offset`; struct.error past the end."""
    version_instance, kind, length = struct.unpack_from("<HHI", stream, offset)
    return version_instance & 0xF, version_instance >> 4, kind, length


def _children(stream: bytes, offset: int) -> list[tuple[int, int, int, int, int]]:
    """(offset, version, instance, type, length) of a container's records, cut at the container's end."""
    _, _, _, length = _header(stream, offset)
    end, at, found = min(offset + 8 + length, len(stream)), offset + 8, []
    while at + 8 <= end:
        version, instance, kind, size = _header(stream, at)
        found.append((at, version, instance, kind, min(size, end - at - 8)))
        at += 8 + size
    return found


def _persist_directory(stream: bytes, current: bytes) -> tuple[dict[int, int], int | None]:
    """{persist id: offset} from the UserEditAtom chain, newest first, and the document's offset."""
    if len(current) < 20:
        raise ValueError("no Current User record")
    edit = struct.unpack_from("<I", current, 16)[0]
    persist: dict[int, int] = {}
    document_ref = None
    seen: set[int] = set()
    while edit and edit not in seen and len(seen) < _MAX_EDITS:
        seen.add(edit)
        _, _, kind, _ = _header(stream, edit)
        if kind != _USER_EDIT:
            break
        last_edit, directory, doc_ref = struct.unpack_from("<III", stream, edit + 16)
        document_ref = document_ref or doc_ref
        _, _, _, length = _header(stream, directory)
        at, end = directory + 8, min(directory + 8 + length, len(stream))
        while at + 4 <= end:
            entry = struct.unpack_from("<I", stream, at)[0]
            first, count = entry & 0xFFFFF, entry >> 20
            for i in range(min(count, (end - at - 4) // 4)):
                persist.setdefault(first + i, struct.unpack_from("<I", stream, at + 4 + 4 * i)[0])
            at += 4 + 4 * count
        edit = last_edit
    return persist, persist.get(document_ref) if document_ref is not None else None


def _slide_lists(stream: bytes, document: int) -> tuple[list[_Slide], list[_Slide]]:
    """The slides (SlideListWithText instance 0) and the notes pages (instance 2), in order."""
    lists: dict[int, list[_Slide]] = {0: [], 2: []}
    for at, _, instance, kind, _ in _children(stream, document):
        if kind != _SLIDE_LIST or instance not in lists:
            continue
        text_type = 4
        for child, _, _, child_kind, length in _children(stream, at):
            if child_kind == _SLIDE_PERSIST:
                persist, _, _, slide_id = struct.unpack_from("<IIiI", stream, child + 8)
                lists[instance].append(_Slide(persist, slide_id))
            elif child_kind == _TEXT_HEADER:
                text_type = struct.unpack_from("<I", stream, child + 8)[0]
            elif child_kind in (_TEXT_CHARS, _TEXT_BYTES) and lists[instance]:
                lists[instance][-1].texts.append((text_type, _text(stream, child, child_kind, length)))
    return lists[0], lists[2]


def _texts(stream: bytes, offset: int, slide: _Slide) -> list[tuple[int, str]]:
    """A slide's (or notes page's) text, shape by shape in drawing order."""
    found: list[tuple[int, str]] = []
    text_type = 4

    def walk(at: int, depth: int) -> None:
        nonlocal text_type
        for child, version, _, kind, length in _children(stream, at):
            if kind == _TEXT_HEADER:
                text_type = struct.unpack_from("<I", stream, child + 8)[0]
            elif kind in (_TEXT_CHARS, _TEXT_BYTES):
                found.append((text_type, _text(stream, child, kind, length)))
            elif kind == _OUTLINE_TEXT_REF:
                index = struct.unpack_from("<I", stream, child + 8)[0]
                if index < len(slide.texts):
                    found.append(slide.texts[index])
            elif version == 0xF and depth < _MAX_DEPTH and kind not in _MASTER_TYPES:
                walk(child, depth + 1)

    walk(offset, 0)
    return found


def _notes(stream: bytes, persist: dict[int, int], pages: list[_Slide]) -> dict[int, str]:
    """{slide id: its speaker notes}."""
    notes: dict[int, str] = {}
    for page in pages:
        offset = persist.get(page.persist)
        if offset is None or _header(stream, offset)[2] != _NOTES:
            continue
        atom = next((at for at, _, _, kind, _ in _children(stream, offset) if kind == _NOTES_ATOM), None)
        if atom is None:
            continue
        slide_id = struct.unpack_from("<I", stream, atom + 8)[0]
        texts = [text for kind, text in _texts(stream, offset, page) if kind == 2 or kind == 4]
        if texts:
            notes[slide_id] = "\n".join(texts)
    return notes


def _text(stream: bytes, offset: int, kind: int, length: int) -> str:
    data = stream[offset + 8 : offset + 8 + length]
    text = data.decode("utf-16-le", errors="replace") if kind == _TEXT_CHARS else data.decode("latin-1")
    # paragraphs end in \r, a line break is \v; \x00-\x1f are field marks (a slide number, a date)
    return "".join(ch if ch >= " " or ch == "\n" else "\n" if ch in "\r\v" else " " for ch in text).strip()
