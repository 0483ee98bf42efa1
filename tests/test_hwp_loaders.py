"""HWP 5 and HWPX (issue 42): real files of bench/data/hwp read as sections, their recognisers, and every bad
file one line."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
from helpers import refusal as refused_for

from funnel.ingest.hwp import load_hwp
from funnel.ingest.hwpx import load_hwpx
from funnel.ingest.loaders import BY_KIND, find
from funnel.ingest.walk import discover
from funnel.types import Kind, SectionKind

olefile = pytest.importorskip("olefile")

DOCS = Path(__file__).resolve().parents[1] / "bench" / "data" / "hwp" / "docs"


def texts(loaded) -> str:
    return "\n".join(section.text for section in loaded.sections)


def refusal(tmp_path: Path, name: str, data: bytes, load=load_hwp) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return refused_for(path, load)


def with_header_flags(tmp_path: Path, flags: int) -> bytes:
    """A real .hwp whose FileHeader sets `flags` (same size, so olefile rewrites it in place)."""
    path = tmp_path / "flagged.hwp"
    path.write_bytes((DOCS / "samgang_oryun.hwp").read_bytes())
    with olefile.OleFileIO(str(path), write_mode=True) as ole:
        header = bytearray(ole.openstream("FileHeader").read())
        header[36] |= flags
        ole.write_stream("FileHeader", bytes(header))
    return path.read_bytes()


def zip_of(*entries: tuple[str, bytes], method: int = zipfile.ZIP_STORED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", method) as archive:
        for name, data in entries:
            archive.writestr(name, data)
    return buffer.getvalue()


def test_an_hwp_reads_its_text_in_order():
    loaded = load_hwp(DOCS / "samgang_oryun.hwp", "d", "samgang_oryun.hwp")
    text = texts(loaded)
    assert loaded.document.kind == "hwp"
    assert text.index("삼강오륜") < text.index("군위신강") < text.index("붕우유신: 친구 사이에는 믿음이 있어야 함")
    assert not any(ord(c) < 32 and c not in "\n\t" for c in text)  # no control character leaks through


def test_an_hwp_table_is_rows_carrying_their_header():
    loaded = load_hwp(DOCS / "chart_exercises.hwp", "d", "chart_exercises.hwp")
    tables = [s.text for s in loaded.sections if s.kind is SectionKind.TABLE]
    assert len(tables) == 4
    assert "구분: 2015년 | 10대: 11.2 | 20대: 24.7 | 30대: 16.3 | 40대 이상: 15.3 | 합계: 67.5" in tables[0]
    assert "구분: 중학교 | 2012년: 167,800 | 2013년: 161,700 | 2014년: 198,300" in tables[1]


def test_an_hwpx_table_is_rows_carrying_their_header():
    loaded = load_hwpx(DOCS / "mois_press_release.hwpx", "d", "mois_press_release.hwpx")
    tables = "\n".join(s.text for s in loaded.sections if s.kind is SectionKind.TABLE)
    assert "(044-205-2201)" in tables and "보도시점: 보도시점" not in tables
    assert "윤호중" in texts(loaded)


def test_hwpx_outline_paragraphs_are_headings():
    loaded = load_hwpx(DOCS / "outline_toc.hwpx", "d", "outline_toc.hwpx")
    by_heading = {s.heading: s.text for s in loaded.sections}
    assert by_heading["개요 네 번째"].startswith("개요 네 번째의 본문입니다")
    assert loaded.document.title == "개요 첫 번째"


def test_footnotes_are_kept_after_their_paragraph(tmp_path):
    section = (b'<hs:sec xmlns:hs="http://www.hancom.co.kr/hwpml/2011/section" '
               b'xmlns:hp="http://www.hancom.co.kr/hwpml/2011/paragraph"><hp:p><hp:run><hp:t>Body text</hp:t>'
               b'<hp:ctrl><hp:footNote><hp:subList><hp:p><hp:run><hp:t>the note</hp:t></hp:run></hp:p>'
               b'</hp:subList></hp:footNote></hp:ctrl></hp:run></hp:p></hs:sec>')
    data = zip_of(("mimetype", b"application/hwp+zip"), ("Contents/section0.xml", section))
    path = tmp_path / "note.hwpx"
    path.write_bytes(data)
    assert texts(load_hwpx(path, "d", "note.hwpx")) == "Body text\n\nFootnote: the note"


def test_the_recognisers_go_by_content(tmp_path):
    renamed = tmp_path / "report.txt"
    renamed.write_bytes((DOCS / "samgang_oryun.hwp").read_bytes())
    assert find(renamed, renamed.read_bytes()[:8192], renamed)[0].kind == Kind("hwp")
    zipped = tmp_path / "notice.zip"
    zipped.write_bytes((DOCS / "mpm_recruitment_notice.hwpx").read_bytes())
    assert find(zipped, zipped.read_bytes()[:8192], zipped)[0].kind == Kind("hwpx")
    # Another program's OLE file named .hwp (a Word 97 .doc holds WordDocument, no FileHeader) is no HWP.
    doc = (DOCS / "samgang_oryun.hwp").read_bytes().replace("FileHeader".encode("utf-16-le"),
                                                            "WordDocum".encode("utf-16-le") + b"\x00\x00", 1)
    named = tmp_path / "memo.hwp"
    named.write_bytes(doc)
    found = find(named, doc[:8192], named)
    assert found is None or found[0].kind != Kind("hwp")
    assert refusal(tmp_path, "memo2.hwp", doc).startswith("not an HWP document (an OLE file without a FileHeader")


def test_every_bad_file_is_one_line(tmp_path):
    good = (DOCS / "chart_exercises.hwp").read_bytes()
    broken = ("corrupt or truncated HWP document", "not a readable HWP document")
    assert refusal(tmp_path, "cut.hwp", good[: len(good) // 2]).startswith(broken)
    assert refusal(tmp_path, "junk.hwp", good[:512] + b"\x00" * 4000).startswith((*broken, "not an HWP"))
    assert refusal(tmp_path, "locked.hwp", with_header_flags(tmp_path, 2)).startswith("password-protected HWP")
    assert refusal(tmp_path, "shared.hwp", with_header_flags(tmp_path, 4)).startswith("a distribution-only")
    assert refusal(tmp_path, "old.hwp", b"HWP Document File V3.00 \x1a\x01\x02\x03\x04\x05").startswith(
        "an HWP 3 document")
    hwpx = (DOCS / "seoul_housing_report.hwpx").read_bytes()
    assert refusal(tmp_path, "cut.hwpx", hwpx[: len(hwpx) // 2], load_hwpx).startswith("corrupt or truncated")
    drm = zip_of(("mimetype", b"application/hwp+zip"),
                 ("META-INF/manifest.xml", b"<odf:manifest><odf:file-entry><odf:encryption-data/>"),
                 ("Contents/section0.xml", b"\x93\x01\x7f"))
    assert refusal(tmp_path, "drm.hwpx", drm, load_hwpx).startswith("password-protected or DRM-protected HWPX")
    bomb = zip_of(("mimetype", b"application/hwp+zip"), ("Contents/section0.xml", b" " * 20_000_000),
                  method=zipfile.ZIP_DEFLATED)
    assert len(bomb) < 100_000
    assert refusal(tmp_path, "bomb.hwpx", bomb, load_hwpx).startswith("refused: a zip bomb")


def test_an_ingest_lists_each_bad_hangul_file_and_reads_the_rest(tmp_path):
    import funnel

    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("samgang_oryun.hwp", "mpm_recruitment_notice.hwpx"):
        (docs / name).write_bytes((DOCS / name).read_bytes())
    good = (DOCS / "chart_exercises.hwp").read_bytes()
    (docs / "cut.hwp").write_bytes(good[: len(good) // 3])
    (docs / "locked.hwp").write_bytes(with_header_flags(tmp_path, 2))
    (docs / "bomb.hwpx").write_bytes(zip_of(("mimetype", b"application/hwp+zip"),
                                            ("Contents/section0.xml", b" " * 20_000_000),
                                            method=zipfile.ZIP_DEFLATED))
    (docs / "plain.hwp").write_text("not a document")
    report = funnel.open(tmp_path / "index", embedder="hashing", reranker="none").ingest([docs])
    assert report.added == 2
    reasons = {Path(p.path).name: p.reason for p in report.problems}
    assert sorted(reasons) == ["bomb.hwpx", "cut.hwp", "locked.hwp", "plain.hwp"]
    assert reasons["plain.hwp"] == f"not a HWP document: its content lacks {BY_KIND[Kind('hwp')].mark}"
    assert all("\n" not in str(p) for p in report.problems)
    assert discover([docs / "samgang_oryun.hwp"]).files
