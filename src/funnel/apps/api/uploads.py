"""What an upload must be before it is kept: a file of an uploadable type of the loaders' table by name AND by
content, within the size limit, under a name that cannot leave the uploads folder.

The checks run on every file of a request before any is saved, so a request is taken whole or not at all.
An `Upload` and where it is kept once it passed (a folder, or rows of the service database):
`funnel.apps.state.files`.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

from funnel.apps.api.errors import TooLarge, UnsupportedType
from funnel.apps.state.files import Upload
from funnel.errors import IngestError
from funnel.ingest.loaders import SNIFF_BYTES, UPLOADABLE, Loader, find, looks_binary, one_of
from funnel.ingest.split import Cut, cut_at
from funnel.ingest.text import decode_text
from funnel.types import Kind

# The loaders' table decides what an upload may be; these are its views for the routes.
BY_SUFFIX: dict[str, Loader] = {suffix: loader for loader in UPLOADABLE for suffix in loader.extensions}
KINDS: dict[str, Kind] = {suffix: loader.kind for suffix, loader in BY_SUFFIX.items()}
MEDIA_TYPES: dict[Kind, str] = {loader.kind: loader.media_type for loader in UPLOADABLE}
MAX_NAME_CHARS = 120
# A name may take 255 bytes on Linux and macOS; this leaves room for the " (9999)" of a taken name.
MAX_NAME_BYTES = 240
# What Windows refuses in a name; the slashes are folder separators everywhere and are split off first.
_FORBIDDEN = frozenset('<>:"|?*')
# Zero-width (non-)joiners belong to Persian words and emoji; other format characters, such as the bidi
# overrides that make "gpj.exe" show as "exe.jpg", do not belong in a file name.
_JOINERS = frozenset("\u200c\u200d")
_WINDOWS_RESERVED = frozenset(
    {"CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$"}
    | {f"{port}{n}" for port in ("COM", "LPT") for n in [*"123456789", "\u00b9", "\u00b2", "\u00b3"]}
)


def safe_filename(name: str) -> str:
    """The last path part of `name`, its characters kept in any script (NFC, so a Mac's decomposed
    "회의 메모.md" and a PC's are one name), made safe to store on any system: no folders, no `..`, no hidden
    file, no control or bidi characters, none Windows forbids, no reserved device name (CON, LPT1, ...), at
    most MAX_NAME_CHARS characters and MAX_NAME_BYTES bytes of UTF-8, extension kept (and lower-cased)."""
    name = unicodedata.normalize("NFC", name or "")
    name = re.split(r"[\\/]", name)[-1]  # a Windows path arrives with backslashes
    name = _replace_unsafe(name)
    stem, dot, suffix = name.rpartition(".")
    if not dot:
        stem, suffix = name, ""
    stem = stem.strip(" ._") or "upload"
    suffix = suffix.strip(" ._").lower()
    suffix = "." + suffix if suffix else ""
    if len(suffix.encode()) > MAX_NAME_BYTES // 2:  # no extension but a long name with a dot in it
        stem, suffix = stem + suffix, ""
    if stem.split(".")[0].rstrip(" ").upper() in _WINDOWS_RESERVED:
        stem = "_" + stem
    stem = _shorten(stem, MAX_NAME_CHARS - len(suffix), MAX_NAME_BYTES - len(suffix.encode()))
    return (stem.rstrip(" .") or "upload") + suffix


def _replace_unsafe(name: str) -> str:
    """Each run of characters unsafe in a name, one "_"."""
    out: list[str] = []
    for ch in name:
        category = unicodedata.category(ch)
        unsafe = (
            ch in _FORBIDDEN
            or category in ("Cc", "Cs", "Zl", "Zp")
            or (category == "Cf" and ch not in _JOINERS)
        )
        if not unsafe:
            out.append(ch)
        elif not out or out[-1] != "\0":
            out.append("\0")  # a placeholder: a "_" of the name itself is not merged with a run
    return "".join(out).replace("\0", "_")


def _shorten(stem: str, max_chars: int, max_bytes: int) -> str:
    """The longest start of `stem` within both limits that does not end inside a character (an accent,
    a Hangul syllable written as jamo, an emoji sequence)."""
    end = min(len(stem), max(max_chars, 0))
    while end and len(stem[:end].encode()) > max_bytes:
        end -= 1
    while 0 < end < len(stem) and cut_at(stem, end) == Cut.NEVER:
        end -= 1
    return stem[:end]


def loader_of(filename: str) -> Loader:
    """The uploadable loader for a name; UnsupportedType listing every extension an upload may have."""
    suffix = Path(filename).suffix.lower()
    if suffix not in BY_SUFFIX:
        shown = f"'{suffix}'" if suffix else "no extension"
        types = one_of(f"{loader.label} ({', '.join(loader.extensions)})" for loader in UPLOADABLE)
        raise UnsupportedType(f"{filename}: unsupported file type ({shown}); upload {types}")
    return BY_SUFFIX[suffix]


def check(upload: Upload, max_bytes: int) -> tuple[str, Kind]:
    """(safe name, kind) of an upload funnel will take; TooLarge, UnsupportedType or IngestError otherwise."""
    name = safe_filename(upload.filename)
    loader = loader_of(name)
    if upload.size > max_bytes:
        raise TooLarge(f"{name}: {upload.size / 2**20:.1f} MiB is over the {max_bytes / 2**20:.0f} MiB limit")
    if upload.size == 0:
        raise IngestError(name, "empty file")
    upload.file.seek(0)
    head = upload.file.read(SNIFF_BYTES)
    found = find(Path(name), head, upload.file)
    upload.file.seek(0)
    if found is None:  # named as a format its content is not
        raise UnsupportedType(f"{name} is not a {loader.label}: its content lacks {loader.mark}")
    if found[0] is not loader:  # content a recogniser knows, under another type's name
        other = found[0]
        rename = f"; upload it with a {next(iter(other.extensions))} name" if other.uploadable else ""
        raise UnsupportedType(f"{name} is a {other.label} named as {loader.label}{rename}")
    if not loader.binary:
        if looks_binary(head):
            raise IngestError(name, "not a text file (binary content)")
        decode_text(head, name)  # IngestError when the bytes do not read as text in any encoding
    return name, loader.kind
