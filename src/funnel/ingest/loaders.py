"""Every loader in one table: the kind of document it makes, the file names it takes, the bytes that give
its content away and the media type it is served as.

Discovery (`walk`), the HTTP upload checks (`apps/api/uploads.py`) and the web page's file picker all read
this table, so a new file type is a loader module plus one row here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from funnel.ingest.code import CODE_FILENAMES, CODE_LANGUAGES, load_code
from funnel.ingest.pdf import load_pdf
from funnel.ingest.text import load_markdown, load_text
from funnel.types import Kind, LoadedDocument

# How much of a file is read to tell what it is (git's rule for binaries looks at the first 8 KB too).
SNIFF_BYTES = 8192
PDF_MAGIC = b"%PDF-"
# PDF readers accept a little junk before the header; pdfplumber does too.
MAGIC_WINDOW = 1024

# (path, doc_id, display_path, language, pages) -> the loaded document
Read = Callable[[Path, str, str, "str | None", object], LoadedDocument]


@dataclass(frozen=True)
class Loader:
    kind: Kind
    label: str  # how a message names the file type: "PDF", "Markdown"
    extensions: Mapping[str, str | None]  # lower-case suffix -> language (code only); the first is shown
    media_type: str  # as an uploaded file is served back
    read: Read
    magic: bytes = b""  # content that means this kind whatever the file is called
    uploadable: bool = False  # the web page and POST .../documents take it (code comes from folders)
    file_names: Mapping[str, str] = field(default_factory=dict)  # exact names without a suffix -> language


def _pdf(path: Path, doc_id: str, display_path: str, language: str | None, pages) -> LoadedDocument:
    return load_pdf(path, doc_id, display_path, pages)


def _markdown(path: Path, doc_id: str, display_path: str, language: str | None, pages) -> LoadedDocument:
    return load_markdown(path, doc_id, display_path)


def _text(path: Path, doc_id: str, display_path: str, language: str | None, pages) -> LoadedDocument:
    return load_text(path, doc_id, display_path)


def _code(path: Path, doc_id: str, display_path: str, language: str | None, pages) -> LoadedDocument:
    return load_code(path, doc_id, display_path, language=language)


def _plain(*suffixes: str) -> dict[str, str | None]:
    return dict.fromkeys(suffixes)


TEXT_MEDIA_TYPE = "text/plain; charset=utf-8"
LOADERS: tuple[Loader, ...] = (
    Loader(Kind.PDF, "PDF", _plain(".pdf"), "application/pdf", _pdf, magic=PDF_MAGIC, uploadable=True),
    Loader(Kind.MARKDOWN, "Markdown", _plain(".md", ".markdown", ".mdown", ".mkd"),
           "text/markdown; charset=utf-8", _markdown, uploadable=True),
    Loader(Kind.TEXT, "text", _plain(".txt", ".text", ".rst"), TEXT_MEDIA_TYPE, _text, uploadable=True),
    Loader(Kind.CODE, "code", CODE_LANGUAGES, TEXT_MEDIA_TYPE, _code, file_names=CODE_FILENAMES),
)
BY_KIND: dict[Kind, Loader] = {loader.kind: loader for loader in LOADERS}
UPLOADABLE: tuple[Loader, ...] = tuple(loader for loader in LOADERS if loader.uploadable)


def sniff(head: bytes) -> Kind | None:
    """The kind the first bytes of a file give away (a PDF), whatever its name says; None for plain text."""
    window = head[:MAGIC_WINDOW]
    return next((loader.kind for loader in LOADERS if loader.magic and loader.magic in window), None)


def by_name(path: Path) -> tuple[Loader, str | None] | None:
    """The loader for a file name, and the language it implies (code); None when no loader takes it."""
    suffix = path.suffix.lower()
    for loader in LOADERS:
        if suffix in loader.extensions:
            return loader, loader.extensions[suffix]
    for loader in LOADERS:
        if path.name in loader.file_names:
            return loader, loader.file_names[path.name]
    return None


def classify(path: Path, head: bytes) -> tuple[Kind, str | None] | None:
    """(kind, language) from the name and the first bytes; None when funnel cannot load it.

    The magic bytes win over the extension when the file starts with them, so a PDF saved as `.txt` is still
    read as a PDF; a Markdown or text file that merely mentions `%PDF-` near its top stays text.
    """
    sniffed = next((loader.kind for loader in LOADERS if loader.magic and head.startswith(loader.magic)), None)
    if sniffed is not None:
        return sniffed, None
    found = by_name(path)
    return (found[0].kind, found[1]) if found else None


def looks_binary(head: bytes) -> bool:
    """Git's rule: a NUL byte in the first 8 KB means binary. UTF-16 has NULs too; its BOM exempts it."""
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return False
    return b"\x00" in head


def upload_accept() -> str:
    """The file picker's `accept` list: every uploadable extension, then the media types."""
    suffixes = [suffix for loader in UPLOADABLE for suffix in loader.extensions]
    media = dict.fromkeys(loader.media_type.split(";")[0] for loader in UPLOADABLE)
    return ",".join([*suffixes, *media])
