"""RTF, Word 97-2003 (.doc), Excel 97-2003 (.xls) and PowerPoint 97-2003 (.ppt) (issue 42 item 2): real files
from bench/data/legacy (Apache Tika's and textract's test documents), loaded and ingested with the hashing
embedder; every bad file is one line and the rest of the folder is read. .doc needs antiword and catdoc
(`make legacy`): those tests skip without them, except the one that checks the line naming the install."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from helpers import refusal

from funnel.errors import IngestError
from funnel.ingest.legacy_office import load_doc, load_xls
from funnel.ingest.loaders import BY_KIND, find
from funnel.ingest.ppt import load_ppt
from funnel.ingest.rtf import load_rtf
from funnel.ingest.walk import FileLimits, discover
from funnel.ingest.word import load_docx
from funnel.types import Chunk, Kind, SectionKind

pytest.importorskip("olefile")
pytest.importorskip("xlrd")
pytest.importorskip("striprtf")

DATA = Path(__file__).resolve().parents[1] / "bench" / "data" / "legacy"
DOCS = DATA / "docs"
PROTECTED = DATA / "protected"
needs_antiword = pytest.mark.skipif(shutil.which("antiword") is None or shutil.which("catdoc") is None,
                                    reason="antiword and catdoc are not installed (`make legacy`)")


def kind_of(path: Path) -> str | None:
    found = find(path, path.read_bytes()[:8192], path)
    return found[0].kind.value if found else None


def ingest(folder: Path, tmp_path: Path):
    import funnel

    return funnel.open(tmp_path / "index", embedder="hashing", reranker="none").ingest([folder])


@needs_antiword
def test_a_doc_keeps_its_headings_tables_and_title():
    loaded = load_doc(DOCS / "tika-testWORD.doc", "d", "tika-testWORD.doc")
    assert loaded.document.kind == "doc" and loaded.document.title == "Sample Word Document"
    body = next(s for s in loaded.sections if "sample Microsoft Word Document" in s.text)
    assert body.heading == "Heading Level 1 > Heading Level 2 > Heading Level 3"
    table = next(s for s in loaded.sections if s.kind is SectionKind.TABLE)
    assert "More of our nested table" in table.text and "The table has things in it" in table.text
    assert any("http://poi.apache.org/" in s.text for s in loaded.sections)


@needs_antiword
def test_a_word_6_doc_antiword_cannot_read_is_read_by_catdoc():
    loaded = load_doc(DOCS / "tika-testWORD6.doc", "d", "w6.doc")
    assert [s.text for s in loaded.sections] == ["The quick brown fox jumps over the lazy dog"]


@needs_antiword
def test_a_doc_keeps_its_lists():
    loaded = load_doc(DOCS / "tika-testWORD_numbered_list.doc", "d", "l.doc")
    text = "\n".join(s.text for s in loaded.sections)
    assert "- This\n- Is\n- A multi\n- Level" in text


def test_rtf_text_tables_and_title():
    loaded = load_rtf(DOCS / "textract-raw_text.rtf", "d", "r.rtf")
    text = "\n".join(s.text for s in loaded.sections)
    assert "That is where http://hipsum.co comes in handy." in text and "still using Bootstrap" in text
    various = load_rtf(DOCS / "tika-testRTFVarious.rtf", "d", "v.rtf")
    table = next(s for s in various.sections if s.kind is SectionKind.TABLE)
    assert table.text == "Row 1 Col 1: Row 2 Col 1 | Row 1 Col 2: Row 2 Col 2 | Row 1 Col 3: Row 2 Col 3"
    text = "\n".join(s.text for s in various.sections)
    assert "ゾルゲと尾崎、淡々と最期" in text and "\U00010332" in text  # Gothic: a surrogate pair


def test_rtf_outline_levels_become_headings(tmp_path):
    path = tmp_path / "guide.rtf"
    path.write_bytes(rb"{\rtf1\ansi{\info{\title Field Guide}}"
                     rb"\pard\s1\outlinelevel0 Install\par\pard Run the installer.\par"
                     rb"\pard\s2\outlinelevel1 Linux\par\pard Use apt.\par}")
    loaded = load_rtf(path, "d", "guide.rtf")
    assert loaded.document.title == "Field Guide"
    assert [(s.heading, s.text) for s in loaded.sections] == [("Install", "Run the installer."),
                                                              ("Install > Linux", "Use apt.")]


def test_an_xls_is_a_table_group_per_sheet_with_row_numbers():
    loaded = load_xls(DOCS / "textract-raw_text.xls", "d", "f.xls")
    assert {s.heading for s in loaded.sections} == {"Sheet1", "Sheet2"}
    assert all(s.kind is SectionKind.TABLE for s in loaded.sections)
    first = loaded.sections[0]
    assert (first.heading, first.line_start) == ("Sheet1", 2)
    assert first.text.startswith("Category: Logical | Function: IFERROR | Description: Returns")
    columnar = load_xls(DOCS / "tika-test-columnar.xls", "d", "c.xls").sections[0]
    row = columnar.text.splitlines()[3]  # the sheet's row 5: a number, text and a date
    assert "Record Number: 3 |" in row and "Description of the Row: This is row" in row
    assert "date: 1960-" in row
    chunk = Chunk("c", "d", 0, "", "c.xls", "c", Kind("xls"), 1, line_start=5, line_end=5)
    assert chunk.location == "row 5-5"


def test_an_excel_4_worksheet_outside_ole_is_read():
    loaded = load_xls(DOCS / "tika-testEXCEL_4.xls", "d", "t.xls")
    assert "thousands of dollars" in "\n".join(s.text for s in loaded.sections)


def test_a_ppt_is_a_section_per_slide_with_titles_and_notes():
    loaded = load_ppt(DOCS / "tika-testPPT_skipBadCompressedObject.ppt", "d", "p.ppt")
    assert sorted({s.page for s in loaded.sections}) == list(range(1, 15))
    slide = {s.page: s for s in loaded.sections}
    assert slide[2].heading == "Background" and "Free Flight proposes" in slide[2].text
    assert "8 General Aviation Pilots" in slide[6].text
    assert slide[8].text.startswith("Notes: There is a need for aiding")
    chunk = Chunk("c", "d", 0, "", "p.ppt", "p", Kind("ppt"), 1, page=6)
    assert chunk.location == "slide 6"
    sample = load_ppt(DOCS / "tika-testPPT.ppt", "d", "s.ppt")
    assert sample.document.title == "Sample Powerpoint Slide"
    assert sample.sections[0].text == "Created with Microsoft\nPowerpoint X for Mac\nService Release 1"


def test_formats_are_found_by_content_whatever_the_name(tmp_path):
    for source, name, kind in [("tika-testWORD.doc", "notes.txt", "doc"),
                               ("tika-testEXCEL.xls", "sheet.doc", "xls"),
                               ("tika-testPPT.ppt", "deck.docx", "ppt"),
                               ("tika-testWORD.doc", "memo.docx", "doc"),
                               ("textract-raw_text.rtf", "letter.doc", "rtf")]:
        path = tmp_path / name
        path.write_bytes((DOCS / source).read_bytes())
        assert kind_of(path) == kind, name
    wrong = tmp_path / "sheet.doc"
    loaded = BY_KIND[Kind("xls")].read(wrong, "d", "sheet.doc", None, None)
    assert loaded.document.kind == "xls" and loaded.sections[0].heading == "Feuil1"
    # called on it directly, the .docx loader says what the file is
    assert refusal(tmp_path / "memo.docx", load_docx).startswith("an old binary Office file (a .doc)")


def test_a_doc_or_xls_that_is_a_web_page_csv_or_excel_xml_is_read_as_what_it_is(tmp_path):
    page = tmp_path / "report.doc"
    page.write_bytes(b'<html xmlns:o="urn:schemas-microsoft-com:office:office"><head><title>Q3</title>'
                     b"</head><body><h1>Quarter</h1><p>Revenue rose 12 percent in the third quarter.</p>"
                     b"</body></html>")
    csv = tmp_path / "export.xls"
    csv.write_bytes(b"city\tcountry\nTallinn\tEstonia\nLima\tPeru\n")
    xml = tmp_path / "book.xls"
    xml.write_bytes(b'<?xml version="1.0"?><Workbook xmlns="urn:schemas-microsoft-com:office:spreadsheet" '
                    b'xmlns:ss="urn:schemas-microsoft-com:office:spreadsheet"><Worksheet ss:Name="Cities">'
                    b'<Table><Row><Cell><Data ss:Type="String">city</Data></Cell><Cell>'
                    b'<Data ss:Type="String">people</Data></Cell></Row><Row ss:Index="3"><Cell>'
                    b'<Data ss:Type="String">Tallinn</Data></Cell><Cell><Data ss:Type="Number">450000</Data>'
                    b"</Cell></Row></Table></Worksheet></Workbook>")
    for path in (page, csv, xml):
        assert kind_of(path) == path.suffix[1:]
    loaded = load_doc(page, "d", "report.doc")
    assert loaded.document.kind == "doc" and "Revenue rose 12 percent" in loaded.sections[0].text
    rows = load_xls(csv, "d", "export.xls")
    assert rows.document.kind == "xls" and "city: Tallinn | country: Estonia" in rows.sections[0].text
    sheet = load_xls(xml, "d", "book.xls").sections[0]
    assert (sheet.heading, sheet.line_start, sheet.text) == ("Cities", 3, "city: Tallinn | people: 450000")


def test_each_bad_file_is_one_line(tmp_path):
    real_doc = (DOCS / "tika-testWORD.doc").read_bytes()
    cases = {
        "cut.doc": (real_doc[: len(real_doc) // 3], load_doc, "corrupt or truncated Word 97-2003 document"),
        "junk.xls": (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x07" * 5000, load_xls, "corrupt or truncated"),
        "cut.ppt": ((DOCS / "tika-testPPT.ppt").read_bytes()[:9000], load_ppt,
                    ("corrupt or truncated", "not a readable PowerPoint")),
        "wordperfect.doc": (b"\xffWPC" + b"\x01\x00" * 400, load_doc, "not a Word 97-2003 document"),
    }
    for name, (content, load, expected) in cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        assert refusal(path, load).startswith(expected), name
    for name, load in [("tika-testWORD_protected_passtika.doc", load_doc),
                       ("tika-testEXCEL_protected_passtika.xls", load_xls),
                       ("tika-testPPT_protected_passtika.ppt", load_ppt)]:
        if load is load_doc and shutil.which("antiword") is None:
            continue
        assert refusal(PROTECTED / name, load).startswith("password-protected"), name


def test_rtf_that_would_blow_up_is_read_in_bounded_time(tmp_path):
    nested = tmp_path / "nested.rtf"
    nested.write_bytes(b"{\\rtf1 " + b"{" * 100_000 + b"deep text" + b"}" * 100_000 + b"}")
    fields = tmp_path / "fields.rtf"  # one line of fields: striprtf's hyperlink pattern is cubic on it
    fields.write_bytes(b"{\\rtf1 " + b'{\\field{\\*\\fldinst{ HYPERLINK "x" ' * 3000 + b"}")
    start = time.monotonic()
    assert load_rtf(nested, "d", "nested.rtf").sections[0].text == "deep text"
    with pytest.raises(IngestError):
        load_rtf(fields, "d", "fields.rtf")  # nothing but field instructions: "empty file", quickly
    assert time.monotonic() - start < 10


def test_a_huge_doc_is_refused_by_size_before_anything_reads_it(tmp_path):
    huge = tmp_path / "huge.doc"
    huge.write_bytes((DOCS / "tika-testWORD.doc").read_bytes())
    with huge.open("r+b") as file:
        file.truncate(2**30)  # sparse: 1 GB on the name, nothing on the disk
    found = discover([tmp_path], FileLimits())
    assert not found.files and [p.reason.split(";")[0] for p in found.problems] == ["too large (1073.7 MB > "
                                                                                   "100.0 MB limit"]


def test_without_antiword_a_doc_is_one_line_naming_the_install(tmp_path, monkeypatch):
    docs = tmp_path / "docs"
    docs.mkdir()
    shutil.copy(DOCS / "tika-testWORD.doc", docs / "memo.doc")
    (docs / "notes.txt").write_text("The anvil ships on Mondays.\n")
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    reason = refusal(docs / "memo.doc", load_doc)
    assert "antiword, which is not installed" in reason and "apt-get install" in reason
    assert "make legacy" in reason
    report = ingest(docs, tmp_path)
    assert report.added == 1 and [Path(p.path).name for p in report.problems] == ["memo.doc"]


@needs_antiword
def test_a_folder_of_real_and_broken_legacy_files_is_ingested_with_one_line_per_bad_one(tmp_path):
    docs = tmp_path / "docs"
    shutil.copytree(DOCS, docs)
    for name in ("tika-testWORD_protected_passtika.doc", "tika-testPPT_protected_passtika.ppt"):
        shutil.copy(PROTECTED / name, docs / name)
    (docs / "cut.xls").write_bytes((DOCS / "textract-raw_text.xls").read_bytes()[:20_000])
    report = ingest(docs, tmp_path)
    assert report.added == len(list(DOCS.iterdir()))
    reasons = {Path(p.path).name: p.reason for p in report.problems}
    assert sorted(reasons) == ["cut.xls", "tika-testPPT_protected_passtika.ppt",
                               "tika-testWORD_protected_passtika.doc"]
    assert all("\n" not in reason for reason in reasons.values())


def test_an_ole_file_is_listed_once_however_many_rows_ask(monkeypatch):
    # .doc, .xls, .ppt and .hwp each recognise an OLE file by its streams: its directory is read once.
    import olefile

    opened = []
    real = olefile.OleFileIO
    monkeypatch.setattr(olefile, "OleFileIO", lambda *a, **k: opened.append(a) or real(*a, **k))
    for path in sorted((Path(__file__).resolve().parents[1] / "bench" / "data" / "legacy" / "docs").glob("*.xls")):
        opened.clear()
        found = find(path, path.read_bytes()[:8192], path)
        if path.read_bytes().startswith(b"\xd0\xcf\x11\xe0"):
            assert found is not None and found[0].kind.value == "xls"
            assert len(opened) == 1, path.name
