"""Every loader in one table: the kind of document it makes, the file names it takes, how its content gives
it away, whether it is text, which size limit it falls under and the media type it is served as.

Discovery (`walk`), the folder watcher, the HTTP upload checks (`apps/api/uploads.py`) and the web page's
file picker all read this table and nothing else, so a new file type is a loader module plus one row here.
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from enum import Enum
from pathlib import Path
from typing import BinaryIO

from funnel.ingest import image, table
from funnel.ingest import epub, html, mail, sheets
from funnel.ingest.code import CODE_FILENAMES, CODE_LANGUAGES, load_code
from funnel.ingest.pdf import load_pdf
from funnel.ingest import slides, word
from funnel.ingest import hwp, hwpx
from funnel.ingest import legacy_office, ppt, rtf
from funnel.ingest.ole import OLE_SIGNATURE, POWERPOINT, recogniser as ole_recogniser, top_level_streams
from funnel.ingest.office import ZIP_MAGIC, package_recogniser
from funnel.ingest.text import load_markdown, load_text
from funnel.types import LOCATION_UNITS, Kind, LoadedDocument

# How much of a file is read to tell what it is (git's rule for binaries looks at the first 8 KB too).
SNIFF_BYTES = 8192
PDF_MAGIC = b"%PDF-"
# PDF readers accept a little junk before the header; pdfplumber does too.
MAGIC_WINDOW = 1024

# (path, doc_id, display_path, language, pages) -> the loaded document
Read = Callable[[Path, str, str, "str | None", object], LoadedDocument]


@dataclass(frozen=True)
class Probe:
    """What a recogniser looks at: a file's first SNIFF_BYTES, its name, and the file itself (a path, or an
    open binary file a recogniser may seek in) for a format whose mark is not at its start, such as a zip's
    list of entries; None when only the name is known."""

    head: bytes
    path: Path
    file: Path | BinaryIO | None = None

    @cached_property
    def zip_entries(self) -> frozenset[str] | None:
        """The names in the file's zip directory, read once however many recognisers ask (Word, PowerPoint
        and Excel each look for their parts); None when it is not a readable zip."""
        if not self.head.startswith(ZIP_MAGIC) or self.file is None:
            return None
        try:
            # A file object passed in is left open (and rewound below); a path is opened and closed here.
            with zipfile.ZipFile(self.file) as archive:
                return frozenset(archive.namelist())
        except (zipfile.BadZipFile, OSError, ValueError, EOFError):
            return None
        finally:
            if not isinstance(self.file, Path):
                self.file.seek(0)

    @cached_property
    def ole_streams(self) -> frozenset[str] | None:
        """The lower-case names at the root of an OLE compound file, read once however many recognisers ask
        (.doc, .xls, .ppt, .hwp); None when it is not a readable OLE file."""
        return top_level_streams(self.file) if self.head.startswith(OLE_SIGNATURE) else None


# True when the content is this format, whatever the file is called
Recognise = Callable[[Probe], bool]


class SizeLimit(str, Enum):
    """Which size limit a file type falls under (`walk.FileLimits`)."""

    TEXT = "text"  # setting max_file_mb: a 5 MB source file or note is generated data
    DOCUMENT = "document"  # setting max_pdf_mb: a laid-out document of a few MB is normal


@dataclass(frozen=True)
class Loader:
    kind: Kind  # the loader's name, stored with every chunk: Kind("csv") needs no member in types.py
    label: str  # how a message names the file type: "PDF", "Markdown"
    extensions: Mapping[str, str | None]  # lower-case suffix -> language (code only); the first is shown
    media_type: str  # as an uploaded file is served back
    read: Read
    binary: bool = False  # not text: the NUL-byte check and the text decoding do not apply to it
    limit: SizeLimit = SizeLimit.TEXT
    recognise: Recognise | None = None  # content that means this format whatever the name; binary formats
    mark: str = ""  # what `recognise` looks for, for a message: "its content lacks <mark>"
    uploadable: bool = False  # the web page and POST .../documents take it (code comes from folders)
    file_names: Mapping[str, str] = field(default_factory=dict)  # exact names without a suffix -> language
    # An empty one in a folder is normal (a package's __init__.py) and skipped without a word; an empty
    # document is reported by its loader.
    quiet_when_empty: bool = False
    # Whether a file this row takes is no document when met in a folder (an icon): counted with the files no
    # loader takes, not read (OCR would spend a second on each); named on its own, or uploaded, it is read.
    is_icon: Callable[[Path], bool] | None = None
    # How a citation names a chunk's place (`Chunk.location`): "p." + page ("slide " for a presentation),
    # "L" + lines ("row " for a table's rows).
    page_unit: str = "p."
    line_unit: str = "L"


def _is_pdf(probe: Probe) -> bool:
    """%PDF- within the first KB of a file named .pdf, as PDF readers allow; at the very start of a file
    named otherwise, so a note that mentions `%PDF-` near its top stays a note."""
    if probe.path.suffix.lower() == ".pdf":
        return PDF_MAGIC in probe.head[:MAGIC_WINDOW]
    return probe.head.startswith(PDF_MAGIC)


def zip_holding(*names: str) -> Recognise:
    """A recogniser for a zip-based format by the entries it must hold ("[Content_Types].xml" and
    "word/document.xml" for Word): a plain zip, or another format's, is not taken for it."""
    return lambda probe: (entries := probe.zip_entries) is not None and all(n in entries for n in names)


def zip_mimetype(media_type: str) -> Recognise:
    """A recogniser for a format whose zip starts with a stored `mimetype` entry holding its media type
    (EPUB: "application/epub+zip"; OpenDocument) — read from the first bytes alone."""
    expected = media_type.encode("ascii")

    def recognise(probe: Probe) -> bool:
        head = probe.head  # a local file header: 30 bytes, the entry's name, an extra field, the data
        if not head.startswith(ZIP_MAGIC) or head[30:38] != b"mimetype":
            return False
        name_length = int.from_bytes(head[26:28], "little")
        extra_length = int.from_bytes(head[28:30], "little")
        start = 30 + name_length + extra_length
        return name_length == 8 and head[start : start + len(expected)] == expected

    return recognise


def _pdf(path: Path, doc_id: str, display_path: str, language: str | None, pages) -> LoadedDocument:
    return load_pdf(path, doc_id, display_path, pages)


def _markdown(path: Path, doc_id: str, display_path: str, language: str | None, pages) -> LoadedDocument:
    return load_markdown(path, doc_id, display_path)


def _text(path: Path, doc_id: str, display_path: str, language: str | None, pages) -> LoadedDocument:
    return load_text(path, doc_id, display_path)


def _code(path: Path, doc_id: str, display_path: str, language: str | None, pages) -> LoadedDocument:
    return load_code(path, doc_id, display_path, language=language)


def _eml(path: Path, doc_id: str, display_path: str, language: str | None, pages) -> LoadedDocument:
    return mail.load_eml(path, doc_id, display_path, find=find)  # attachments through this table


def _mbox(path: Path, doc_id: str, display_path: str, language: str | None, pages) -> LoadedDocument:
    return mail.load_mbox(path, doc_id, display_path, find=find)


def _plain(*suffixes: str) -> dict[str, str | None]:
    return dict.fromkeys(suffixes)


TEXT_MEDIA_TYPE = "text/plain; charset=utf-8"
LOADERS: tuple[Loader, ...] = (
    Loader(Kind.PDF, "PDF", _plain(".pdf"), "application/pdf", _pdf, binary=True, limit=SizeLimit.DOCUMENT,
           recognise=_is_pdf, mark=f"a {PDF_MAGIC.decode()} header in its first {MAGIC_WINDOW} bytes",
           uploadable=True),
    Loader(Kind.MARKDOWN, "Markdown", _plain(".md", ".markdown", ".mdown", ".mkd"),
           "text/markdown; charset=utf-8", _markdown, uploadable=True),
    Loader(Kind.TEXT, "text", _plain(".txt", ".text", ".rst"), TEXT_MEDIA_TYPE, _text, uploadable=True),
    Loader(Kind.CODE, "code", CODE_LANGUAGES, TEXT_MEDIA_TYPE, _code, file_names=CODE_FILENAMES,
           quiet_when_empty=True),
    Loader(table.KIND, "CSV", _plain(".csv", ".tsv"), "text/csv; charset=utf-8", table.load_table,
           uploadable=True, line_unit="row "),
    # Office's formats before 2007 and RTF. Before the .docx/.xlsx/.pptx rows: a real .doc renamed .docx is
    # read as the .doc it is; an encrypted .docx (an OLE file too) falls through to its own row's one line.
    Loader(rtf.RTF, rtf.RTF_LABEL, _plain(".rtf"), "application/rtf", rtf.load_rtf, binary=True,
           limit=SizeLimit.DOCUMENT, recognise=rtf.is_rtf, mark=rtf.MARK, uploadable=True),
    Loader(legacy_office.DOC, legacy_office.DOC_LABEL, _plain(".doc"), "application/msword",
           legacy_office.load_doc, binary=True, limit=SizeLimit.DOCUMENT, recognise=legacy_office.is_doc,
           mark=legacy_office.MARK_DOC, uploadable=True),
    Loader(legacy_office.XLS, legacy_office.XLS_LABEL, _plain(".xls"), "application/vnd.ms-excel",
           legacy_office.load_xls, binary=True, limit=SizeLimit.DOCUMENT, recognise=legacy_office.is_xls,
           mark=legacy_office.MARK_XLS, uploadable=True, line_unit="row "),
    Loader(ppt.PPT, ppt.PPT_LABEL, _plain(".ppt", ".pps"), "application/vnd.ms-powerpoint", ppt.load_ppt,
           binary=True, limit=SizeLimit.DOCUMENT, recognise=ole_recogniser(POWERPOINT, (".ppt", ".pps")),
           mark=ppt.MARK, uploadable=True, page_unit="slide "),
    Loader(word.DOCX, word.DOCX_LABEL, _plain(".docx"),
           "application/vnd.openxmlformats-officedocument.wordprocessingml.document", word.load_docx,
           binary=True, limit=SizeLimit.DOCUMENT, uploadable=True,
           recognise=package_recogniser(zip_holding("[Content_Types].xml", "word/document.xml"), ".docx"),
           mark="the parts of a Word document ([Content_Types].xml, word/document.xml)"),
    Loader(word.ODT, word.ODT_LABEL, _plain(".odt"), "application/vnd.oasis.opendocument.text",
           word.load_odt, binary=True, limit=SizeLimit.DOCUMENT, uploadable=True,
           recognise=zip_mimetype("application/vnd.oasis.opendocument.text"),
           mark="a zip starting with the mimetype application/vnd.oasis.opendocument.text"),
    # Hangul word processor (Hancom Office), Korea's usual format for public and school documents.
    Loader(hwp.HWP, hwp.LABEL, _plain(".hwp"), "application/x-hwp", hwp.load_hwp, binary=True,
           limit=SizeLimit.DOCUMENT, uploadable=True, recognise=hwp.is_hwp, mark=hwp.MARK),
    Loader(hwpx.HWPX, hwpx.LABEL, _plain(".hwpx"), hwpx.MEDIA_TYPE, hwpx.load_hwpx, binary=True,
           limit=SizeLimit.DOCUMENT, uploadable=True, recognise=zip_mimetype(hwpx.MEDIA_TYPE),
           mark=f"a zip starting with the mimetype {hwpx.MEDIA_TYPE}"),
    Loader(slides.PPTX, slides.PPTX_LABEL, _plain(".pptx"),
           "application/vnd.openxmlformats-officedocument.presentationml.presentation", slides.load_pptx,
           binary=True, limit=SizeLimit.DOCUMENT, uploadable=True, page_unit="slide ",
           recognise=package_recogniser(zip_holding("[Content_Types].xml", "ppt/presentation.xml"), ".pptx"),
           mark="the parts of a PowerPoint presentation ([Content_Types].xml, ppt/presentation.xml)"),
    Loader(slides.ODP, slides.ODP_LABEL, _plain(".odp"), "application/vnd.oasis.opendocument.presentation",
           slides.load_odp, binary=True, limit=SizeLimit.DOCUMENT, uploadable=True, page_unit="slide ",
           recognise=zip_mimetype("application/vnd.oasis.opendocument.presentation"),
           mark="a zip starting with the mimetype application/vnd.oasis.opendocument.presentation"),
    Loader(sheets.XLSX, "Microsoft Excel workbook", _plain(".xlsx"),
           "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet", sheets.load_xlsx, binary=True,
           limit=SizeLimit.DOCUMENT, recognise=zip_holding("[Content_Types].xml", "xl/workbook.xml"),
           mark="the parts of an Excel workbook ([Content_Types].xml, xl/workbook.xml)", uploadable=True,
           line_unit="row "),
    Loader(sheets.ODS, "OpenDocument spreadsheet", _plain(".ods"),
           "application/vnd.oasis.opendocument.spreadsheet", sheets.load_ods, binary=True,
           limit=SizeLimit.DOCUMENT, recognise=zip_mimetype("application/vnd.oasis.opendocument.spreadsheet"),
           mark="a zip starting with the mimetype application/vnd.oasis.opendocument.spreadsheet",
           uploadable=True, line_unit="row "),
    # Served back as text: an uploaded page served as text/html would run its scripts on the service's origin.
    Loader(html.HTML, "web page", _plain(".html", ".htm"), TEXT_MEDIA_TYPE, html.load_html,
           limit=SizeLimit.DOCUMENT, uploadable=True),
    Loader(epub.EPUB, "book (EPUB)", _plain(".epub"), "application/epub+zip", epub.load_epub, binary=True,
           limit=SizeLimit.DOCUMENT, recognise=zip_mimetype("application/epub+zip"),
           mark="a zip starting with the mimetype application/epub+zip", uploadable=True),
    Loader(mail.EML, "mail message", _plain(".eml"), "message/rfc822", _eml, limit=SizeLimit.DOCUMENT,
           uploadable=True),
    Loader(mail.MBOX, "mailbox", _plain(".mbox"), "application/mbox", _mbox, limit=SizeLimit.DOCUMENT,
           uploadable=True),
    # Scans and photos of text, read by OCR; served as image/png (browsers sniff an image's real format).
    Loader(image.KIND, image.LABEL, _plain(".png", ".jpg", ".jpeg", ".tif", ".tiff"), "image/png",
           image.load_image, binary=True, limit=SizeLimit.DOCUMENT, recognise=image.is_image, mark=image.MARK,
           uploadable=True, is_icon=image.is_icon),
)
BY_KIND: dict[Kind, Loader] = {loader.kind: loader for loader in LOADERS}
LOCATION_UNITS.update({loader.kind.value: (loader.page_unit, loader.line_unit) for loader in LOADERS
                       if (loader.page_unit, loader.line_unit) != ("p.", "L")})
UPLOADABLE: tuple[Loader, ...] = tuple(loader for loader in LOADERS if loader.uploadable)


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


def find(
    path: Path, head: bytes = b"", file: Path | BinaryIO | None = None
) -> tuple[Loader, str | None] | None:
    """(loader, language) from the content, else the name; None when funnel cannot load the file.

    A format's recogniser wins over the name, so a PDF saved as `.txt` is still read as a PDF. A file named
    as a format that has a recogniser but whose content (`head` given) is not that format is None: a plain
    zip named `.docx` is not a Word document. With `head` empty only the name counts.
    """
    probe = Probe(head, path, file)
    if head:
        for loader in LOADERS:
            if loader.recognise is not None and loader.recognise(probe):
                return loader, None
    found = by_name(path)
    if found is not None and head and found[0].recognise is not None:
        return None  # its recogniser said no above
    return found


def classify(path: Path, head: bytes, file: Path | BinaryIO | None = None) -> tuple[Kind, str | None] | None:
    """(kind, language) of `find`."""
    found = find(path, head, file)
    return (found[0].kind, found[1]) if found else None


def looks_binary(head: bytes) -> bool:
    """Git's rule: a NUL byte in the first 8 KB means binary. UTF-16 has NULs too; its BOM exempts it."""
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return False
    return b"\x00" in head


def one_of(words: Iterable[str], conjunction: str = "or") -> str:
    """The words as "a, b or c"."""
    *others, last = words
    return f"{', '.join(others)} {conjunction} {last}" if others else last


def upload_extensions() -> list[str]:
    return [suffix for loader in UPLOADABLE for suffix in loader.extensions]


def upload_accept() -> str:
    """The file picker's `accept` list: every uploadable extension, then the media types."""
    media = dict.fromkeys(loader.media_type.split(";")[0] for loader in UPLOADABLE)
    return ",".join([*upload_extensions(), *media])
