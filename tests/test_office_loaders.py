"""Word, PowerPoint and their OpenDocument twins (issue 32): files made here with python-docx, python-pptx and
odfpy, loaded, ingested with the hashing embedder and searched; every bad file is one line."""

from __future__ import annotations

import io
import re
import sys
import zipfile
from pathlib import Path

import pytest
from helpers import refusal as refused_for

from funnel.apps.api.errors import UnsupportedType
from funnel.apps.api.uploads import Upload, check
from funnel.errors import IngestError
from funnel.ingest import office, opendocument, zipped
from funnel.ingest.loaders import BY_KIND, find
from funnel.ingest.slides import load_odp, load_pptx
from funnel.ingest.walk import discover
from funnel.ingest.word import load_docx, load_odt
from funnel.types import Kind, SectionKind

pytest.importorskip("docx")
pytest.importorskip("pptx")
pytest.importorskip("odf")

COMPANIES = [["Company", "CEO", "City"], ["Zentara Robotics", "Iris Kallas", "Tallinn"], ["Acme", "", "Lima"]]


def make_docx(path: Path, title: str = "") -> Path:
    from docx import Document

    doc = Document()
    doc.core_properties.title = title
    doc.add_heading("Field Guide", 0)
    doc.add_heading("Install", 1)
    doc.add_paragraph("Run the installer on the target host.")
    doc.add_paragraph("first step", style="List Bullet")
    doc.add_paragraph("second step", style="List Bullet")
    doc.add_paragraph("a detail", style="List Bullet 2")
    doc.add_heading("Suppliers", 2)
    table = doc.add_table(rows=len(COMPANIES), cols=3)
    for i, row in enumerate(COMPANIES):
        for j, value in enumerate(row):
            table.cell(i, j).text = value
    doc.add_heading("Usage", 1)
    doc.add_paragraph("Call it daily.")
    doc.save(path)
    return path


def make_pptx(path: Path) -> Path:
    from pptx import Presentation
    from pptx.util import Inches

    deck = Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[1])
    slide.shapes.title.text = "Intro"
    slide.placeholders[1].text = "Welcome to the review\nAgenda follows"
    slide.notes_slide.notes_text_frame.text = "Greet the board first."
    slide = deck.slides.add_slide(deck.slide_layouts[5])
    slide.shapes.title.text = "Numbers"
    table = slide.shapes.add_table(2, 2, Inches(1), Inches(2), Inches(4), Inches(1)).table
    for (i, j), value in {(0, 0): "Region", (0, 1): "Revenue", (1, 0): "North", (1, 1): "42 million"}.items():
        table.cell(i, j).text = value
    slide.notes_slide.notes_text_frame.text = "Mention the quokka budget."
    deck.save(path)
    return path


def make_odt(path: Path) -> Path:
    from odf import dc
    from odf.opendocument import OpenDocumentText
    from odf.table import Table, TableColumn, TableHeaderRows, TableRow
    from odf.text import H, List, ListItem, P, S

    doc = OpenDocumentText()
    doc.meta.addElement(dc.Title(text="Operations Manual"))
    doc.text.addElement(H(outlinelevel=1, text="Install"))
    spaced = P(text="Run the")
    spaced.addElement(S(c=3))
    spaced.addText("installer.")
    doc.text.addElement(spaced)
    items = List()
    for text in ("first step", "second step"):
        item = ListItem()
        item.addElement(P(text=text))
        items.addElement(item)
    inner, nested = List(), ListItem()
    nested.addElement(P(text="a detail"))
    inner.addElement(nested)
    item.addElement(inner)
    doc.text.addElement(items)
    doc.text.addElement(H(outlinelevel=2, text="Suppliers"))
    table, header = Table(name="Companies"), TableHeaderRows()
    table.addElement(TableColumn(numbercolumnsrepeated=3))
    table.addElement(header)
    for i, values in enumerate(COMPANIES):
        (header if i == 0 else table).addElement(odf_row(TableRow, values))
    doc.text.addElement(table)
    doc.save(str(path))
    return path


def odf_row(row_type, values):
    from odf.table import TableCell
    from odf.text import P

    row = row_type()
    for value in values:
        cell = TableCell()
        cell.addElement(P(text=value))
        row.addElement(cell)
    return row


def make_odp(path: Path) -> Path:
    from odf.draw import Frame, Page, TextBox
    from odf.namespaces import PRESENTATIONNS
    from odf.opendocument import OpenDocumentPresentation
    from odf.presentation import Notes
    from odf.style import MasterPage, PageLayout
    from odf.text import P

    deck = OpenDocumentPresentation()
    layout = PageLayout(name="PM1")
    deck.automaticstyles.addElement(layout)
    master = MasterPage(name="Default", pagelayoutname=layout)
    deck.masterstyles.addElement(master)

    def frame(role: str, text: str):
        made = Frame(width="20cm", height="3cm", x="1cm", y="1cm")
        made.setAttrNS(PRESENTATIONNS, "class", role)
        box = TextBox()
        box.addElement(P(text=text))
        made.addElement(box)
        return made

    slides = [("Intro", "Welcome to the review", "Greet the board first."),
              ("Numbers", "Revenue by region", "Mention the quokka budget.")]
    for title, body, note in slides:
        page = Page(masterpagename=master)
        page.addElement(frame("title", title))
        page.addElement(frame("outline", body))
        notes = Notes()
        notes.addElement(frame("notes", note))
        page.addElement(notes)
        deck.presentation.addElement(page)
    deck.save(str(path))
    return path


def sections(loaded) -> list[tuple[str | None, str, str]]:
    return [(s.heading, s.kind.value, s.text) for s in loaded.sections]


def test_a_word_document_keeps_its_headings_lists_and_table_rows(tmp_path):
    loaded = load_docx(make_docx(tmp_path / "guide.docx"), "d", "guide.docx")
    assert loaded.document.kind == "docx" and loaded.document.title == "Field Guide"  # its first heading
    assert sections(loaded) == [
        ("Field Guide > Install", "prose",
         "Run the installer on the target host.\n\n- first step\n- second step\n  - a detail"),
        ("Field Guide > Install > Suppliers", "table",
         "Company: Zentara Robotics | CEO: Iris Kallas | City: Tallinn\nCompany: Acme | City: Lima"),
        ("Field Guide > Usage", "prose", "Call it daily."),
    ]
    titled = load_docx(make_docx(tmp_path / "titled.docx", title="Q3 Guide"), "d", "titled.docx")
    assert titled.document.title == "Q3 Guide"  # the core properties' title first


def test_a_word_paragraph_keeps_tracked_insertions_and_drops_deletions(tmp_path):
    from docx import Document
    from docx.oxml import parse_xml

    w = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main" w:id="1" w:author="a"'
    doc = Document()
    paragraph = doc.add_paragraph("Ship it ")
    paragraph._p.append(parse_xml(f'<w:ins {w}><w:r><w:t>on Friday</w:t></w:r></w:ins>'))
    paragraph._p.append(parse_xml(f'<w:del {w}><w:r><w:delText>on Monday</w:delText></w:r></w:del>'))
    doc.save(tmp_path / "changes.docx")
    loaded = load_docx(tmp_path / "changes.docx", "d", "changes.docx")
    assert sections(loaded) == [(None, "prose", "Ship it on Friday")]
    assert loaded.document.title == "changes.docx"  # no title, no heading: its file name


def test_an_opendocument_text_reads_as_its_word_twin(tmp_path):
    loaded = load_odt(make_odt(tmp_path / "manual.odt"), "d", "manual.odt")
    assert loaded.document.kind == "odt" and loaded.document.title == "Operations Manual"  # dc:title
    assert sections(loaded) == [
        ("Install", "prose", "Run the installer.\n\n- first step\n- second step\n  - a detail"),
        ("Install > Suppliers", "table",
         "Company: Zentara Robotics | CEO: Iris Kallas | City: Tallinn\nCompany: Acme | City: Lima"),
    ]


@pytest.mark.parametrize(("make", "load", "name"), [(make_pptx, load_pptx, "deck.pptx"),
                                                    (make_odp, load_odp, "deck.odp")])
def test_a_presentation_is_a_section_per_slide_with_its_notes(tmp_path, make, load, name):
    loaded = load(make(tmp_path / name), "d", name)
    assert loaded.document.title == "Intro"  # no title of its own: the first slide's
    first, *rest = loaded.sections
    assert (first.page, first.heading) == (1, "Intro")
    assert first.text.startswith("Welcome to the review")
    assert first.text.endswith("\nNotes: Greet the board first.")
    assert {s.page for s in rest} == {2} and {s.heading for s in rest} == {"Numbers"}
    assert "Notes: Mention the quokka budget." in rest[0].text
    if name.endswith(".pptx"):
        table = [(s.kind, s.text) for s in rest[1:]]
        assert table == [(SectionKind.TABLE, "Region: North | Revenue: 42 million")]


def test_office_files_are_ingested_searched_and_cited_by_slide(tmp_path):
    import funnel

    docs = tmp_path / "docs"
    docs.mkdir()
    make_docx(docs / "guide.docx")
    make_pptx(docs / "deck.pptx")
    make_odt(docs / "manual.odt")
    make_odp(docs / "talk.odp")
    pipeline = funnel.open(tmp_path / "index", embedder="hashing", reranker="none")
    report = pipeline.ingest([docs])
    assert report.added == 4 and not report.problems
    row = pipeline.search("Zentara Robotics CEO").documents[0].best.chunk
    assert "Company: Zentara Robotics | CEO: Iris Kallas" in row.text and row.kind in ("docx", "odt")
    found: dict[str, object] = {}
    for result in pipeline.search("quokka").documents:  # the best result of each file comes first
        found.setdefault(Path(result.best.chunk.path).name, result.best.chunk)
    assert found["deck.pptx"].location == "slide 2" and "quokka budget" in found["deck.pptx"].text
    assert found["talk.odp"].location == "slide 2"


def zip_of(*entries: tuple[str, bytes], method: int = zipfile.ZIP_STORED) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name, data in entries:
            archive.writestr(name, data, compress_type=method)
    return out.getvalue()


def refusal(tmp_path: Path, name: str, data: bytes, load=load_docx) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return refused_for(path, load)


def test_broken_and_locked_files_are_one_line_each(tmp_path):
    good = make_docx(tmp_path / "good.docx").read_bytes()
    cut = refusal(tmp_path, "cut.docx", good[: len(good) // 2])
    assert cut.startswith("corrupt or truncated Word document")
    ole = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 4000
    assert refusal(tmp_path, "secret.docx", ole).startswith("password-protected or an old binary Office file")
    assert refusal(tmp_path, "secret.pptx", ole, load_pptx).startswith("password-protected")
    lacking = zip_of(("[Content_Types].xml", b"<Types/>"), ("word/document.xml", b"<not xml"))
    assert refusal(tmp_path, "bad.docx", lacking).startswith("not a readable Word document (")
    broken_odt = make_odt(tmp_path / "ok.odt").read_bytes().replace(b"content.xml", b"content.xmX")
    broken = refusal(tmp_path, "broken.odt", broken_odt, load_odt)
    assert broken.startswith("not a readable OpenDocument text")
    locked = zip_of(("mimetype", b"application/vnd.oasis.opendocument.text"),
                    ("META-INF/manifest.xml", b"<manifest:encryption-data/>"), ("content.xml", b"\x93\x01"))
    assert refusal(tmp_path, "locked.odt", locked, load_odt).startswith("password-protected OpenDocument")
    assert refusal(tmp_path, "text.docx", b"just words") == "not a Word document (not a zip package)"


def test_a_zip_bomb_named_docx_is_refused_from_its_directory(tmp_path, monkeypatch):
    bomb = zip_of(("[Content_Types].xml", b"<Types/>"), ("word/document.xml", b"\x00" * 20_000_000),
                  method=zipfile.ZIP_DEFLATED)
    assert len(bomb) < 100_000
    assert refusal(tmp_path, "bomb.docx", bomb).startswith("refused: a zip bomb (word/document.xml unpacks ")
    monkeypatch.setattr(zipped, "MAX_UNPACKED_BYTES", 10_000)  # the total, with the ratio of a real file
    good = make_docx(tmp_path / "good.docx").read_bytes()
    assert refusal(tmp_path, "big.docx", good).startswith("refused: a zip bomb (unpacks to ")


def test_an_xml_part_too_large_to_parse_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(office, "MAX_XML_BYTES", 1000)
    odt = make_odt(tmp_path / "long.odt").read_bytes()
    refused = refusal(tmp_path, "long.odt", odt, load_odt)
    # odfpy writes its parts in no fixed order: whichever comes first over the limit is named
    assert re.match(r"refused: (content|styles|meta|settings)\.xml unpacks to 0 MB of XML, over 0 MB", refused)


def test_repeated_cells_and_rows_of_an_opendocument_table_are_bounded():
    from odf.table import Table, TableCell, TableRow
    from odf.text import P

    table = Table(name="T")
    for values, repeat in [(["Name", "Qty"], 1), (["bolt", "7"], 3), (["", ""], 1_048_576)]:
        row = TableRow(numberrowsrepeated=repeat)
        for value in values:
            cell = TableCell()
            cell.addElement(P(text=value))
            row.addElement(cell)
        row.addElement(TableCell(numbercolumnsrepeated=16_384))  # formatting out to the last column
        table.addElement(row)
    assert opendocument.table_rows(table) == [["Name", "Qty"]] + [["bolt", "7"]] * 3


def test_without_the_library_the_line_says_what_to_install(tmp_path, monkeypatch):
    path = make_docx(tmp_path / "guide.docx")
    monkeypatch.setitem(sys.modules, "docx", None)  # import docx raises ImportError
    with pytest.raises(IngestError, match=r"guide.docx: the Word loader needs python-docx: "
                                          r"pip install 'funnel\[formats\]'"):
        load_docx(path, "d", "guide.docx")


def test_names_that_lie_are_refused_by_the_recogniser(tmp_path):
    (tmp_path / "notes.docx").write_text("plain words, no zip")
    (tmp_path / "plain.pptx").write_bytes(zip_of(("readme.txt", b"hello")))
    (tmp_path / "plain.odt").write_bytes(zip_of(("mimetype", b"application/x-unknown")))
    result = discover([tmp_path])
    assert result.files == []
    reasons = {Path(p.path).name: p.reason for p in result.problems}
    assert reasons == {
        "notes.docx": f"not a Word document: its content lacks {BY_KIND[Kind('docx')].mark}",
        "plain.pptx": f"not a PowerPoint presentation: its content lacks {BY_KIND[Kind('pptx')].mark}",
        "plain.odt": f"not a OpenDocument text: its content lacks {BY_KIND[Kind('odt')].mark}",
    }
    pdf = tmp_path / "scan.docx"  # a PDF named .docx is a PDF (the content wins), and an upload says so
    pdf.write_bytes(b"%PDF-1.4\n")
    assert find(pdf, pdf.read_bytes(), pdf)[0].kind == Kind.PDF
    with pytest.raises(UnsupportedType, match="scan.docx is a PDF named as Word document; upload it with a"):
        check(Upload("scan.docx", io.BytesIO(b"%PDF-1.4\n"), 9), 10_000)


def test_uploads_take_the_office_formats_by_content(tmp_path):
    for make, name, kind in [(make_docx, "a.docx", "docx"), (make_pptx, "b.pptx", "pptx"),
                             (make_odt, "c.odt", "odt"), (make_odp, "d.odp", "odp")]:
        data = make(tmp_path / name).read_bytes()
        assert check(Upload(name, io.BytesIO(data), len(data)), 10_000_000) == (name, Kind(kind))
    with pytest.raises(UnsupportedType, match="is not a Word document"):
        check(Upload("z.docx", io.BytesIO(zip_of(("a.txt", b"x"))), 120), 10_000)


def test_an_ingest_lists_each_bad_office_file_in_one_line_and_goes_on(tmp_path):
    import funnel

    docs = tmp_path / "docs"
    docs.mkdir()
    good = make_pptx(docs / "deck.pptx").read_bytes()
    (docs / "cut.pptx").write_bytes(good[: len(good) // 3])
    (docs / "secret.docx").write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 4000)
    bomb = zip_of(("[Content_Types].xml", b"<Types/>"), ("word/document.xml", b" " * 20_000_000),
                  method=zipfile.ZIP_DEFLATED)
    (docs / "bomb.docx").write_bytes(bomb)
    report = funnel.open(tmp_path / "index", embedder="hashing", reranker="none").ingest([docs])
    assert report.added == 1
    reasons = {Path(p.path).name: p.reason for p in report.problems}
    assert sorted(reasons) == ["bomb.docx", "cut.pptx", "secret.docx"]
    assert reasons["bomb.docx"].startswith("refused: a zip bomb")
    assert reasons["secret.docx"].startswith("password-protected or an old binary Office file")
    assert reasons["cut.pptx"].startswith("corrupt or truncated PowerPoint presentation (")
    assert all("\n" not in str(p) and "could not be read" not in p.reason for p in report.problems)


PANDOC_ODT = Path(__file__).parent / "data" / "pandoc_dejavu_readme.odt"


def test_an_odt_written_by_pandoc_is_read_whole_and_prints_nothing(capfd):
    # pandoc indents its XML (odfpy took the white space before <office:text> for the body: "empty file")
    # and declares namespaces one to a line (odfpy declared them twice and printed styles.xml to stdout).
    document = load_odt(PANDOC_ODT, "d", "readme.odt")
    text = "\n".join(section.text for section in document.sections)
    assert "The DejaVu fonts are a font family based on the Bitstream Vera Fonts" in text
    assert "DejaVu Serif Condensed Bold Italic (experimental)" in text
    assert document.sections[1].heading.startswith("DejaVu fonts 2.37")  # after the badge's alt text
    out, err = capfd.readouterr()
    assert out == "" and err == ""


def test_an_ingest_of_every_real_sample_keeps_stdout_clean(tmp_path, capfd):
    # Each loader's real files (bench/data holds one folder per format set) in one folder: what reaches
    # stdout is funnel's alone, and the library API prints nothing.
    import shutil

    import funnel

    docs = tmp_path / "docs"
    docs.mkdir()
    shutil.copy(PANDOC_ODT, docs)
    bench = Path(__file__).resolve().parents[1] / "bench" / "data"
    for path in sorted(bench.glob("*/docs/*")):
        if path.is_file() and path.stat().st_size < 2_000_000 and path.suffix.lower() != ".pdf":
            shutil.copy(path, docs / f"{path.parent.parent.name}-{path.name}")
    report = funnel.open(tmp_path / "index", embedder="hashing", reranker="none").ingest([docs])
    assert report.added >= 20
    assert "readme.odt" not in str([problem.path for problem in report.problems])
    out, _ = capfd.readouterr()
    assert out == ""
