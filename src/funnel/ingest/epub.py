"""E-books (.epub): the chapters in reading (spine) order, each through the web-page walk (`html.HtmlWalk`).

A chapter's sections are headed by its title in the book's table of contents (else its own <title>), then
the headings inside it: "Chapter 2 > The Andes". A chapter's XHTML is walked whole, not through
trafilatura: a book has no navigation or boilerplate to cut, and trafilatura drops short chapters. The
document's title is the book's. A book with DRM (META-INF/rights.xml, or META-INF/encryption.xml naming
content encrypted with anything but the font obfuscation EPUB allows) is refused in one line, and the zip's
sizes are checked before anything is unpacked (`zipped.open_zip`).
"""

from __future__ import annotations

import warnings
from dataclasses import replace
from pathlib import Path

from funnel.errors import IngestError, missing_dependency
from funnel.ingest.html import HtmlWalk, parse_html, visible
from funnel.ingest.text import file_document
from funnel.ingest.zipped import open_zip
from funnel.types import Kind, LoadedDocument, Section

EPUB = Kind("epub")
MAX_CHAPTER_BYTES = 10_000_000  # one chapter's XHTML, as a web page's limit
_ENCRYPTION = "META-INF/encryption.xml"
_RIGHTS = "META-INF/rights.xml"
# Encryption that is not DRM: the obfuscation of embedded fonts (IDPF's and Adobe's)
_FONT_OBFUSCATION = ("http://www.idpf.org/2008/embedding", "http://ns.adobe.com/pdf/enc#RC")


def load_epub(
    path: Path, doc_id: str, display_path: str, language: str | None = None, pages: object = None
) -> LoadedDocument:
    """An EPUB's chapters as sections (the signature of a `LOADERS` row's `read`)."""
    try:
        from ebooklib import ITEM_DOCUMENT, epub
    except ImportError as e:
        needs = missing_dependency("the epub loader", "ebooklib", "formats")
        raise IngestError(display_path, str(needs)) from e
    with open_zip(path, display_path, "EPUB") as archive:
        if _has_drm(archive):
            raise IngestError(display_path, "DRM-protected; funnel reads only e-books without DRM")
    try:
        with warnings.catch_warnings():  # ebooklib warns about its own future defaults
            warnings.simplefilter("ignore")
            book = epub.read_epub(str(path), options={"ignore_ncx": True})
    except Exception as e:  # ebooklib passes on zipfile's, lxml's and its own errors for a damaged book
        raise IngestError(display_path, f"not a readable EPUB ({type(e).__name__}: {e})") from e
    titles = _toc_titles(book.toc)
    sections: list[Section] = []
    for idref, _linear in book.spine:
        item = book.get_item_with_id(idref)
        if item is None or item.get_type() != ITEM_DOCUMENT or isinstance(item, epub.EpubNav):
            continue
        content = item.get_content()
        if len(content) > MAX_CHAPTER_BYTES:
            raise IngestError(display_path, f"{item.get_name()} is over {MAX_CHAPTER_BYTES // 1_000_000} MB")
        sections += chapter_sections(content, titles.get(item.get_name()))
    if not sections:
        raise IngestError(display_path, "no text in any chapter")
    document = file_document(doc_id, display_path, EPUB, path.read_bytes())
    title = " ".join(str((book.get_metadata("DC", "title") or [("",)])[0][0]).split())
    return LoadedDocument(document=replace(document, title=title or document.title), sections=tuple(sections))


def chapter_sections(content: bytes, title: str | None) -> list[Section]:
    """A chapter's sections, their heading trails under the chapter's title."""
    page = parse_html(content)
    if page is None:
        return []
    if not title:
        found = page.find(".//title")
        title = " ".join(found.text_content().split()) if found is not None else None
    sections = HtmlWalk().sections(visible(page))
    return [replace(section, heading=_under(title, section.heading)) for section in sections]


def _under(title: str | None, heading: str | None) -> str | None:
    """The chapter's title above a section's heading trail, unless the trail already starts with it."""
    if not title or (heading and (heading == title or heading.startswith(f"{title} > "))):
        return heading
    return f"{title} > {heading}" if heading else title


def _toc_titles(toc) -> dict[str, str]:
    """File name -> its first title in the table of contents (nested sections walked; anchors dropped)."""
    titles: dict[str, str] = {}
    pending = list(toc)
    while pending:
        entry = pending.pop(0)
        if isinstance(entry, (tuple, list)):
            pending[:0] = [entry[0], *entry[1]] if len(entry) == 2 else list(entry)
            continue
        href, title = getattr(entry, "href", None), " ".join(str(getattr(entry, "title", "") or "").split())
        if href and title:
            titles.setdefault(href.split("#", 1)[0], title)
    return titles


def _has_drm(archive) -> bool:
    """Whether the book's content is encrypted: rights.xml (Adobe ADEPT), or encryption.xml naming an
    algorithm other than font obfuscation."""
    names = set(archive.namelist())
    if _RIGHTS in names:
        return True
    if _ENCRYPTION not in names:
        return False
    import lxml.etree

    parser = lxml.etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=False)
    try:
        declared = lxml.etree.fromstring(archive.read(_ENCRYPTION), parser=parser)
    except lxml.etree.XMLSyntaxError:
        return True  # unreadable: assume the worst, as a reader that cannot decrypt would fail anyway
    methods = declared.iter("{*}EncryptionMethod")
    return any(method.get("Algorithm", "") not in _FONT_OBFUSCATION for method in methods)
