"""Web pages (.html, .htm): the main text, without navigation, scripts and boilerplate, as sections.

trafilatura finds the main content (its XML output: `head`, `p`, `list`, `table` elements). When it finds
none, or its cut is no shorter than the page's visible text (on a short page it falls back to all the text,
navigation included, headings flattened), the visible text is taken instead: parsed by lxml with scripts,
styles, navigation, asides and footers dropped (`DROPPED`). Either tree is walked the same way (`HtmlWalk`,
which the EPUB loader uses for chapters): a heading starts a section whose heading trail is the headings
above it ("Guide > Install"), paragraphs and list items (`- item`) are its prose, and a table becomes a
TABLE section of "Header: value | Header: value" rows (its first row is the header, as in a CSV). The
document's title is the page's <title>, else its file name.

Bounded: a page over MAX_HTML_BYTES is refused before parsing (trafilatura takes seconds per MB), and lxml's
parser keeps its default depth limit (no `huge_tree`), so 10,000 nested elements cost no more than 256.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from funnel.errors import IngestError, missing_dependency
from funnel.ingest.text import file_document, table_lines
from funnel.types import Kind, LoadedDocument, Section, SectionKind

HTML = Kind("html")
MAX_HTML_BYTES = 10_000_000  # a saved article is well under; trafilatura needs ~2 s a MB
# Not text a reader sees, or not the page's content (the fallback drops these; trafilatura does its own)
DROPPED = frozenset({"script", "style", "noscript", "template", "head", "nav", "aside", "footer", "iframe",
                     "svg", "form", "button", "select", "object", "canvas", "math"})
_BLOCKS = frozenset({"p", "div", "li", "item", "list", "ul", "ol", "dl", "dt", "dd", "blockquote", "pre",
                     "section", "article", "main", "aside", "header", "footer", "figure", "figcaption",
                     "br", "hr", "lb", "address", "details", "summary", "quote", "body", "doc"})
_ITEMS = frozenset({"li", "item"})  # HTML's and trafilatura's list items
_HEADING = re.compile(r"h([1-6])")
# A block's class or id that says it is navigation, not content (the visible-text fallback drops it).
_NAVIGATION = re.compile(
    r"(?:^|[\s_-])(?:nav\w*|menu\w*|breadcrumbs?|sidebar|footer|cookies?|skip-?link)(?:$|[\s_-])",
    re.IGNORECASE,
)
_NO_TEXT = "no text in the page"
_TOO_LARGE = f"over {MAX_HTML_BYTES // 1_000_000} MB of HTML; not a page to read"


def load_html(
    path: Path, doc_id: str, display_path: str, language: str | None = None, pages: object = None
) -> LoadedDocument:
    """A web page's main text as sections (the signature of a `LOADERS` row's `read`)."""
    try:
        if path.stat().st_size > MAX_HTML_BYTES:
            raise IngestError(display_path, _TOO_LARGE)
        raw = path.read_bytes()
    except OSError as e:
        raise IngestError(display_path, f"cannot read ({e.strerror or e})") from e
    title, sections = html_sections(raw, display_path)
    document = file_document(doc_id, display_path, HTML, raw)
    return LoadedDocument(document=replace(document, title=title or document.title), sections=tuple(sections))


def html_sections(raw: bytes, display_path: str) -> tuple[str | None, list[Section]]:
    """(the page's title, its main text as sections); `IngestError` when it has no text at all."""
    if len(raw) > MAX_HTML_BYTES:
        raise IngestError(display_path, _TOO_LARGE)
    page = parse_html(raw)
    title = _title(page)
    shown = visible(page) if page is not None else None
    main = _main_content(raw, display_path)
    # trafilatura falls back to the whole text on a short page, navigation included and headings flattened,
    # and it drops the headings of some generated manuals (DocBook's titlepage divs): when its cut is no
    # shorter than the visible text, or has no heading where the page has some, the visible text, walked with
    # its structure, is better.
    if main is not None and shown is not None and (
        _length(main) >= _length(shown) or (not _headings(main) and _headings(shown))
    ):
        main = None
    sections = HtmlWalk().sections(main) if main is not None else []
    if not sections and shown is not None:
        sections = HtmlWalk().sections(shown)
    if not sections:
        raise IngestError(display_path, _NO_TEXT)
    return title, sections


def parse_html(raw: bytes):
    """The page as an lxml tree (comments dropped, default depth limit); None when nothing parses."""
    import lxml.etree
    import lxml.html

    parser = lxml.html.HTMLParser(remove_comments=True, remove_pis=True, huge_tree=False)
    try:
        return lxml.html.document_fromstring(raw, parser=parser)
    except (lxml.etree.ParserError, ValueError):
        return None


def visible(page):
    """The tree without the elements whose text no reader sees as the page's (`DROPPED`), nor blocks whose
    class or id says they are navigation (`_NAVIGATION`: DocBook's navheader, a site's menu); changes
    `page`."""
    for element in list(page.iter(*DROPPED)):
        if element.getparent() is not None:
            element.drop_tree()  # keeps its tail text, which belongs to the parent
    for element in list(page.iter()):
        if not isinstance(element.tag, str):
            continue
        marks = f"{element.get('class') or ''} {element.get('id') or ''}"
        if marks.strip() and _NAVIGATION.search(marks) and element.getparent() is not None:
            element.drop_tree()
    return page


def _headings(tree) -> int:
    return sum(1 for element in tree.iter() if _level(element, _local(element)))


def _length(tree) -> int:
    return sum(len(text.strip()) for text in tree.itertext())


def _title(page) -> str | None:
    if page is None:
        return None
    found = page.find(".//title")
    text = " ".join(found.text_content().split()) if found is not None else ""
    return text or None


def _main_content(raw: bytes, display_path: str):
    """trafilatura's main content as an XML tree, or None when it finds none."""
    try:
        import trafilatura
    except ImportError as e:
        needs = missing_dependency("the html loader", "trafilatura", "formats")
        raise IngestError(display_path, str(needs)) from e
    import lxml.etree

    found = trafilatura.extract(raw, output_format="xml", include_tables=True, include_formatting=False,
                                include_comments=False, include_images=False)
    if not found:
        return None
    parser = lxml.etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=False)
    try:
        tree = lxml.etree.fromstring(found.encode("utf-8"), parser=parser)
    except lxml.etree.XMLSyntaxError:
        return None
    main = tree.find("main")
    return main if main is not None else tree


class HtmlWalk:
    """Sections from an element tree, HTML's tags or trafilatura's: headings, prose, tables."""

    def __init__(self) -> None:
        self.out: list[Section] = []
        self.trail: list[tuple[int, str]] = []  # the headings above, (level, text)
        self.paragraphs: list[str] = []
        self.words: list[str] = []

    def sections(self, root) -> list[Section]:
        self._walk(root)
        self._flush()
        return self.out

    def _walk(self, element) -> None:
        tag = _local(element)
        level = _level(element, tag)
        if level:  # before DROPPED: trafilatura's heading is a <head>, as is HTML's document head
            self._heading(level, " ".join(element.itertext()))
        elif tag is None or tag in DROPPED:
            pass
        elif tag == "table":
            self._table(element)
        else:
            block = tag in _BLOCKS
            if block:
                self._break()
            if tag in _ITEMS:
                self.words.append("-")  # a list item as "- item", as the Word loader writes it
            self._add(element.text)
            for child in element:
                self._walk(child)
            if block:
                self._break()
        self._add(element.tail)

    def _add(self, text: str | None) -> None:
        if text and text.strip():
            self.words.append(" ".join(text.split()))

    def _break(self) -> None:
        if self.words:
            self.paragraphs.append(" ".join(self.words))
            self.words = []

    def _heading(self, level: int, title: str) -> None:
        self._flush()
        title = " ".join(title.split())
        while self.trail and self.trail[-1][0] >= level:
            self.trail.pop()
        if title:
            self.trail.append((level, title))

    def _table(self, element) -> None:
        self._flush()
        rows = [[" ".join(" ".join(cell.itertext()).split()) for cell in row
                 if _local(cell) in ("td", "th", "cell")]
                for row in element.iter() if _local(row) in ("tr", "row")]
        rows = [row for row in rows if any(row)]
        if len(rows) < 2:  # a layout table, or a lone row: prose
            self.paragraphs += [" ".join(cell for cell in row if cell) for row in rows]
            return
        lines = table_lines(rows)
        text = "\n".join(line for line in lines if line)
        if text:
            self.out.append(Section(text=text, kind=SectionKind.TABLE, heading=self._trail()))

    def _flush(self) -> None:
        self._break()
        if self.paragraphs:
            self.out.append(Section(text="\n\n".join(self.paragraphs), heading=self._trail()))
        self.paragraphs = []

    def _trail(self) -> str | None:
        return " > ".join(title for _, title in self.trail) or None


def _local(element) -> str | None:
    """The tag without a namespace (XHTML's), lower-case; None for a comment or processing instruction."""
    tag = element.tag
    if not isinstance(tag, str):
        return None
    return tag.rsplit("}", 1)[-1].lower()


def _level(element, tag: str | None) -> int:
    """1-6 for a heading (HTML's h1-h6, trafilatura's <head rend="h2">), else 0."""
    if tag == "head" and element.get("rend"):
        found = _HEADING.fullmatch(element.get("rend", ""))
        return int(found.group(1)) if found else 2
    found = _HEADING.fullmatch(tag or "")
    return int(found.group(1)) if found else 0
