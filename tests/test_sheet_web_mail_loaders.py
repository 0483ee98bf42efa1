"""Spreadsheets (.xlsx, .ods), web pages (.html), e-books (.epub) and mail (.eml, .mbox): each a loader
module and a row in LOADERS; built here with their own libraries, ingested with the hashing embedder."""

from __future__ import annotations

import datetime
import io
import zipfile
from pathlib import Path

import pytest

from funnel.errors import IngestError
from funnel.ingest import load, loaders, mail, table
from funnel.ingest.walk import discover
from funnel.types import SectionKind


def read(path: Path):
    """The file loaded by the row `find` chooses for it, as ingest does."""
    head = path.read_bytes()[: loaders.SNIFF_BYTES]
    found = loaders.find(path, head, path)
    assert found is not None, path
    return found[0].read(path, "d", path.name, found[1], None)


def sections(path: Path) -> list[tuple[str | None, str, int | None]]:
    return [(s.heading, s.text, s.line_start) for s in read(path).sections]


def write_xlsx(path: Path) -> Path:
    openpyxl = pytest.importorskip("openpyxl")
    book = openpyxl.Workbook()
    towns = book.active
    towns.title = "Towns"
    towns.append(["city", "country", "founded"])
    for i in range(1, 30):
        towns.append([f"Town {i}", f"Country {i}", 1800 + i])
    towns.append(["Zanzibar City", "Tanzania", datetime.date(1830, 5, 1)])
    book.create_sheet("Empty")
    numbers = book.create_sheet("Readings")
    numbers.append([12.5, 7, "kelvin"])  # no header-looking first row
    numbers.append([13.0, 8, "kelvin"])
    book.save(path)
    return path


def write_ods(path: Path) -> Path:
    pytest.importorskip("odf")
    from odf.opendocument import OpenDocumentSpreadsheet
    from odf.table import Table, TableCell, TableRow
    from odf.text import P

    document = OpenDocumentSpreadsheet()
    sheet = Table(name="Planets")
    for values, repeat in ((("planet", "moons"), 1), ((None,), 1000), (("Mars", 2), 1), (("Jupiter", 95), 1)):
        row = TableRow(numberrowsrepeated=repeat) if repeat > 1 else TableRow()
        for value in values:
            cell = TableCell(valuetype="float", value=value) if isinstance(value, int) else TableCell()
            if value is not None:
                cell.addElement(P(text=str(value)))
            row.addElement(cell)
        sheet.addElement(row)
    document.spreadsheet.addElement(sheet)
    document.spreadsheet.addElement(Table(name="Blank"))
    document.save(str(path))
    return path


PAGE = """<html><head><title>Camelid Guide</title><script>var x = "SCRIPTWORD";</script>
<style>.a { color: red }</style></head><body>
<nav><a href="/">Home NAVWORD</a> <a href="/about">About NAVWORD</a></nav>
<article><h1>Camelids</h1>
<p>Camelids are even-toed ungulates; the family includes camels, llamas, alpacas, vicuñas and guanacos.</p>
<h2>Llamas</h2>
<p>Llamas were domesticated in the Andes thousands of years ago and are still used as pack animals there.</p>
<table><tr><th>Animal</th><th>Region</th></tr><tr><td>Llama</td><td>Peru</td></tr>
<tr><td>Vicuna</td><td>Altiplano</td></tr></table>
<h2>Alpacas</h2><p>Alpacas are bred for their fibre, which is soft, warm and free of lanolin.</p>
<ul><li>Huacaya: crimped, fluffy fleece</li><li>Suri: long silky locks</li></ul>
</article><footer>Copyright FOOTERWORD</footer></body></html>"""


def write_epub(path: Path, drm: bool = False) -> Path:
    pytest.importorskip("ebooklib")
    from ebooklib import epub

    book = epub.EpubBook()
    book.set_identifier("camelids-1")
    book.set_title("A Book of Camelids")
    book.set_language("en")
    one = epub.EpubHtml(title="Chapter One: Llamas", file_name="one.xhtml")
    one.content = "<h1>Chapter One: Llamas</h1><p>Llamas carry packs across the puna.</p>"
    two = epub.EpubHtml(title="Chapter Two: Alpacas", file_name="two.xhtml")
    two.content = "<h2>Fibre</h2><p>Alpaca fleece is shorn once a year.</p>"
    book.add_item(one)
    book.add_item(two)
    book.toc = (one, two)
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = ["nav", two, one]  # reading order is the spine's, not the files'
    epub.write_epub(str(path), book)
    if drm:
        with zipfile.ZipFile(path, "a") as archive:
            archive.writestr("META-INF/encryption.xml", ENCRYPTION)
    return path


ENCRYPTION = """<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container"
 xmlns:enc="http://www.w3.org/2001/04/xmlenc#"><enc:EncryptedData>
<enc:EncryptionMethod Algorithm="http://www.w3.org/2001/04/xmlenc#aes128-cbc"/>
<enc:CipherData><enc:CipherReference URI="EPUB/one.xhtml"/></enc:CipherData>
</enc:EncryptedData></encryption>"""


def message(subject: str, body: str, attachment: tuple[str, str, bytes] | None = None) -> bytes:
    from email.message import EmailMessage

    msg = EmailMessage()
    msg["From"] = "Ana Souza <ana@example.org>"
    msg["To"] = "Herd Team <team@example.org>"
    msg["Date"] = "Tue, 01 Dec 2026 10:00:00 +0000"
    msg["Subject"] = subject
    msg.set_content(body)
    if attachment:
        name, kind, data = attachment
        maintype, subtype = kind.split("/")
        msg.add_attachment(data, maintype=maintype, subtype=subtype, filename=name)
    msg.add_attachment(b"PK\x05\x06" + b"\0" * 18, maintype="application", subtype="zip",
                       filename="old-records.zip")  # no loader takes a plain zip
    return bytes(msg)


CENSUS = b"farm,llamas\nPampa Verde,42\nAltiplano Sur,17\n"


def write_mail(folder: Path) -> tuple[Path, Path]:
    eml = folder / "census.eml"
    eml.write_bytes(message("Quarterly llama census", "Hi all, the census numbers are attached.",
                            ("census.csv", "text/csv", CENSUS)))
    box = folder / "herd.mbox"
    box.write_bytes(b"".join(b"From ana@example.org Tue Dec  1 10:00:00 2026\n" + message(s, b) + b"\n"
                             for s, b in (("Shearing day", "Shearing starts on Monday at the north barn."),
                                          ("Vet visit", "The vet comes on Thursday for the cria."))))
    return eml, box


# --- spreadsheets -------------------------------------------------------------------------------------------


def test_an_xlsx_is_a_section_group_per_sheet_with_the_header_on_each_row(tmp_path):
    found = sections(write_xlsx(tmp_path / "towns.xlsx"))
    assert [heading for heading, _, _ in found] == ["Towns", "Readings"]  # the empty sheet is skipped
    towns, readings = found
    assert towns[1].splitlines()[0] == "city: Town 1 | country: Country 1 | founded: 1801"
    assert towns[1].splitlines()[-1] == "city: Zanzibar City | country: Tanzania | founded: 1830-05-01"
    assert towns[2] == 2  # its first row's number: the header is row 1
    assert readings[1:] == ("Column 1: 12.5 | Column 2: 7 | Column 3: kelvin\n"
                            "Column 1: 13 | Column 2: 8 | Column 3: kelvin", 1)
    assert all(s.kind is SectionKind.TABLE for s in read(tmp_path / "towns.xlsx").sections)


def test_an_ods_skips_repeated_empty_rows_and_keeps_the_row_numbers(tmp_path):
    found = sections(write_ods(tmp_path / "planets.ods"))
    assert found == [("Planets", "planet: Mars | moons: 2\nplanet: Jupiter | moons: 95", 1002)]


def test_spreadsheets_html_epub_and_mail_are_ingested_and_found(tmp_path):
    import funnel

    docs = tmp_path / "docs"
    docs.mkdir()
    write_xlsx(docs / "towns.xlsx")
    write_ods(docs / "planets.ods")
    (docs / "guide.html").write_text(PAGE)
    write_epub(docs / "camelids.epub")
    write_mail(docs)
    pipeline = funnel.open(tmp_path / "index", embedder="hashing", reranker="none")
    report = pipeline.ingest([docs])
    assert report.added == 6 and not report.problems, report.problems
    row = pipeline.search("Zanzibar Tanzania").documents[0].best.chunk
    assert row.kind == "xlsx" and row.heading == "Towns" and row.location.startswith("row ")
    assert "city: Zanzibar City | country: Tanzania" in row.text and row.line_end == 31
    farm = pipeline.search("Pampa Verde llamas").documents[0].best.chunk
    assert farm.kind == "eml" and farm.heading == "Quarterly llama census > census.csv"
    assert "farm: Pampa Verde | llamas: 42" in farm.text
    assert pipeline.search("Vicuna Altiplano").documents[0].best.chunk.kind == "html"
    assert pipeline.search("alpaca fleece shorn").documents[0].best.chunk.kind == "epub"
    assert pipeline.search("vet Thursday cria").documents[0].best.chunk.heading == "Vet visit"


# --- web pages and books ------------------------------------------------------------------------------------


def test_a_web_page_keeps_its_headings_and_tables_and_drops_navigation_and_scripts(tmp_path):
    path = tmp_path / "guide.html"
    path.write_text(PAGE)
    loaded = read(path)
    assert loaded.document.title == "Camelid Guide" and loaded.document.kind == "html"
    found = [(s.heading, s.kind, s.text) for s in loaded.sections]
    assert [heading for heading, _, _ in found] == [
        "Camelids", "Camelids > Llamas", "Camelids > Llamas", "Camelids > Alpacas"]
    assert found[2][1:] == (SectionKind.TABLE,
                            "Animal: Llama | Region: Peru\nAnimal: Vicuna | Region: Altiplano")
    assert found[3][2].endswith("lanolin.\n\n- Huacaya: crimped, fluffy fleece\n\n- Suri: long silky locks")
    text = " ".join(s.text for s in loaded.sections)
    assert not any(word in text for word in ("SCRIPTWORD", "NAVWORD", "FOOTERWORD", "color"))


def test_a_short_page_is_walked_whole_without_its_navigation(tmp_path):
    path = tmp_path / "short.htm"
    path.write_text("<title>T</title><nav>NAVWORD</nav><h1>Hi</h1><p>short</p>"
                    "<table><tr><th>a</th><th>b</th></tr><tr><td>1</td><td>2</td></tr></table>")
    assert sections(path) == [("Hi", "short", None), ("Hi", "a: 1 | b: 2", None)]


def test_an_epubs_chapters_are_sections_in_spine_order_under_their_titles(tmp_path):
    loaded = read(write_epub(tmp_path / "camelids.epub"))
    assert loaded.document.title == "A Book of Camelids"
    assert [(s.heading, s.text) for s in loaded.sections] == [
        ("Chapter Two: Alpacas > Fibre", "Alpaca fleece is shorn once a year."),
        ("Chapter One: Llamas", "Llamas carry packs across the puna.")]


# --- mail ---------------------------------------------------------------------------------------------------


def test_a_message_starts_with_its_headers_and_its_attachment_goes_through_the_loaders(tmp_path):
    eml, _ = write_mail(tmp_path)
    own, census = read(eml).sections
    assert own.heading == "Quarterly llama census"
    assert own.text.splitlines()[:4] == [
        "From: Ana Souza <ana@example.org>", "To: Herd Team <team@example.org>",
        "Date: Tue, 01 Dec 2026 10:00:00 +0000", "Subject: Quarterly llama census"]
    assert "Hi all, the census numbers are attached." in own.text
    assert "Attachments skipped: old-records.zip (no loader for it)" in own.text
    assert (census.heading, census.kind, census.text, census.line_start) == (
        "Quarterly llama census > census.csv", SectionKind.TABLE,
        "farm: Pampa Verde | llamas: 42\nfarm: Altiplano Sur | llamas: 17", 2)


def test_a_mailbox_is_a_section_per_message_up_to_its_cap(tmp_path, monkeypatch):
    _, box = write_mail(tmp_path)
    assert [s.heading for s in read(box).sections] == ["Shearing day", "Vet visit"]
    monkeypatch.setattr(mail, "MAX_MESSAGES", 1)
    capped = read(box).sections
    assert [s.heading for s in capped] == ["Shearing day", "Not read"]
    assert capped[-1].text == "Only the first 1 of the 2 messages in this mailbox were read."


def test_a_forwarded_message_is_read_as_one_under_the_outer_subject(tmp_path):
    import email
    from email import policy

    inner = email.message_from_bytes(message("Shearing day", "Shearing starts on Monday."),
                                     policy=policy.default)
    outer = email.message_from_bytes(message("Fwd: Shearing day", "See below."), policy=policy.default)
    outer.add_attachment(inner)  # message/rfc822, as a mail program forwards
    path = tmp_path / "fwd.eml"
    path.write_bytes(bytes(outer))
    found = [(s.heading, s.text.splitlines()[-1]) for s in read(path).sections]
    assert found[1] == ("Fwd: Shearing day > Shearing day",
                        "Attachments skipped: old-records.zip (no loader for it)")
    assert "Shearing starts on Monday." in read(path).sections[1].text


def test_an_html_only_message_is_read_through_the_page_walk(tmp_path):
    path = tmp_path / "news.eml"
    path.write_bytes(b"From: a@example.org\nSubject: News\nContent-Type: text/html\n\n"
                     b"<html><script>SCRIPTWORD</script><body><p>The herd grew by nine.</p></body></html>")
    (own,) = read(path).sections
    assert own.text == "From: a@example.org\nSubject: News\n\nThe herd grew by nine."


# --- bad input: one line each, naming the file --------------------------------------------------------------


def bomb() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        archive.writestr("xl/workbook.xml", "<workbook/>")
        archive.writestr("xl/worksheets/sheet1.xml", b"\0" * 20_000_000)
    return out.getvalue()


def truncated_xlsx(tmp_path: Path) -> bytes:
    whole = write_xlsx(tmp_path / "whole.xlsx").read_bytes()
    return whole[: len(whole) // 2]


@pytest.mark.parametrize(("name", "make", "reason"), [
    ("bomb.xlsx", lambda tmp: bomb(), r"refused: a zip bomb \(xl/worksheets/sheet1.xml unpacks \d+:1\)"),
    ("half.xlsx", truncated_xlsx, "not a readable Excel workbook"),
    ("hollow.xlsx", lambda tmp: _minimal_xlsx(), "not a readable Excel workbook"),
    ("broken.ods", lambda tmp: b"PK\x03\x04\x14\x00\x00\x00\x00\x00" + b"\0" * 16
     + b"\x08\x00\x00\x00mimetype" b"application/vnd.oasis.opendocument.spreadsheet" + b"junk",
     "not a readable OpenDocument spreadsheet"),
    ("empty.html", lambda tmp: b"<html><script>only()</script></html>", "no text in the page"),
    ("notes.eml", lambda tmp: b"just some words\nwithout any headers\n", "not an e-mail message"),
    ("notes.mbox", lambda tmp: b"no From line here\n", "not a mailbox"),
])
def test_bad_files_are_one_ingest_error_line(tmp_path, name, make, reason):
    path = tmp_path / name
    path.write_bytes(make(tmp_path))
    loader, language = loaders.by_name(path)  # the row the name picks: discovery would refuse some earlier
    with pytest.raises(IngestError, match=reason) as raised:
        loader.read(path, "d", name, language, None)
    assert raised.value.path == name and "\n" not in str(raised.value)


def test_a_drm_protected_epub_is_refused(tmp_path):
    with pytest.raises(IngestError, match="camelids.epub: DRM-protected"):
        read(write_epub(tmp_path / "camelids.epub", drm=True))


def test_a_workbook_over_the_row_limit_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(table, "MAX_ROWS", 5)
    with pytest.raises(IngestError, match="more than 5 rows; split it into smaller files"):
        read(write_xlsx(tmp_path / "towns.xlsx"))


def test_sheets_a_parser_would_read_whole_before_any_row_are_refused_first(tmp_path, monkeypatch):
    openpyxl = pytest.importorskip("openpyxl")
    from funnel.ingest import sheets

    book = openpyxl.Workbook(write_only=True)  # writes no <dimension>, as some exporters do
    book.create_sheet("Data").append(["a", "b"])
    book.save(tmp_path / "nodim.xlsx")
    monkeypatch.setattr(sheets, "MAX_UNDIMENSIONED_BYTES", 10)
    with pytest.raises(IngestError, match="nodim.xlsx: xl/worksheets/sheet1.xml declares no size"):
        read(tmp_path / "nodim.xlsx")
    monkeypatch.setattr(sheets, "MAX_ODS_XML_BYTES", 100)
    with pytest.raises(IngestError, match=r"planets.ods: its XML unpacks to .* MB, over 0 MB; save it as"):
        read(write_ods(tmp_path / "planets.ods"))


def test_a_huge_or_deeply_nested_page_is_one_line_in_bounded_time(tmp_path):
    import time

    huge, deep = tmp_path / "huge.html", tmp_path / "deep.html"
    huge.write_bytes(b"<p>word</p>" * 5_000_000)
    deep.write_bytes(b"<html><body>" + b"<div>" * 10_000 + b"<p>deep down below</p>" + b"</div>" * 10_000)
    started = time.monotonic()
    with pytest.raises(IngestError, match="huge.html: over 10 MB of HTML"):
        read(huge)
    with pytest.raises(IngestError, match="deep.html: no text in the page"):
        read(deep)  # lxml stops at its depth limit (256), above the text
    assert time.monotonic() - started < 10


def test_a_lying_extension_is_said_by_discovery(tmp_path):
    (tmp_path / "sheet.xlsx").write_text("city,country\n")
    (tmp_path / "book.epub").write_bytes(zipfile.ZipFile.__name__.encode() + b"\0" * 10)
    named = discover([tmp_path / "sheet.xlsx", tmp_path / "book.epub"])
    problems = {Path(p.path).name: p.reason for p in named.problems}
    assert problems["sheet.xlsx"].startswith("not a Microsoft Excel workbook: its content lacks the parts of")
    assert problems["book.epub"].startswith("not a book (EPUB)")


def test_a_missing_library_is_one_line_with_the_fix(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "openpyxl", None)  # import fails as if not installed
    with pytest.raises(IngestError, match=r"pip install 'funnel\[formats\]'"):
        read(write_xlsx_without_library(tmp_path))


def write_xlsx_without_library(tmp_path: Path) -> Path:
    path = tmp_path / "plain.xlsx"
    path.write_bytes(b"".join([]) or _minimal_xlsx())
    return path


def _minimal_xlsx() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        archive.writestr("xl/workbook.xml", "<workbook/>")
    return out.getvalue()


def test_load_dispatches_the_new_kinds(tmp_path):
    from funnel.ingest.walk import SourceFile

    path = write_xlsx(tmp_path / "towns.xlsx")
    loaded = load(SourceFile(path=path, kind="xlsx"), "d", "towns.xlsx")
    assert loaded.document.kind == "xlsx" and loaded.sections
