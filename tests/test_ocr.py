"""OCR: scanned PDF pages and images (PNG, JPEG, TIFF) are read by Tesseract and cited at their page; a
decompression bomb, a missing or failing engine cost one line and that file, never the rest of a folder."""

from __future__ import annotations

import shutil
import struct
import zlib
from pathlib import Path

import pytest

from funnel.embed import HashingEmbedder
from funnel.errors import IngestError
from funnel.index.lance import LanceStore
from funnel.ingest.image import load_image
from funnel.ingest.loaders import classify
from funnel.ingest.ocr import OcrFailed, TesseractOcr, paragraphs
from funnel.ingest.pdf import load_pdf
from funnel.pipeline import Pipeline

HAS_TESSERACT = shutil.which("tesseract") is not None
needs_tesseract = pytest.mark.skipif(not HAS_TESSERACT, reason="no tesseract on PATH (`make ocr`)")

AUDIT = "The auditors will start the annual audit on thirteen January and sign the accounts in March."
KEYS = "Every visitor badge must be returned to the front desk before six in the evening."
DPI = 300


def halves(text: str) -> tuple[str, str]:
    """A sentence as two lines, split at the space nearest its middle."""
    cut = text.index(" ", len(text) // 2)
    return text[:cut], text[cut + 1 :]


def flat(text: str) -> str:
    return " ".join(text.split())


def page_image(*lines: str, width_in: float = 8.5, height_in: float = 3.0):
    """Black text on white at 300 dpi, 12 point: what a scanner gives."""
    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("L", (int(width_in * DPI), int(height_in * DPI)), 255)
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=50)
    for i, line in enumerate(lines):
        draw.text((150, 150 + i * 62), line, font=font, fill=0)
    return image


def scanned_pdf(path: Path, *pages) -> Path:
    """A PDF of images only (no text layer), one page per image."""
    first, *rest = pages
    first.save(path, "PDF", resolution=DPI, save_all=True, append_images=rest)
    return path


def text_pdf(path: Path, text: str) -> Path:
    canvas = pytest.importorskip("reportlab.pdfgen.canvas")
    c = canvas.Canvas(str(path))
    c.drawString(72, 720, text)
    c.showPage()
    c.save()
    return path


def pipeline(tmp_path: Path) -> Pipeline:
    return Pipeline.build(store=LanceStore(tmp_path / "index"), embedder=HashingEmbedder(), reranker=None)


def no_tesseract(monkeypatch, tmp_path: Path) -> None:
    """PATH without tesseract (python, the test's own, stays reachable through sys.executable)."""
    empty = tmp_path / "empty-bin"
    empty.mkdir(exist_ok=True)
    monkeypatch.setenv("PATH", str(empty))


def bomb_png(path: Path, width: int = 20_000, height: int = 20_000) -> Path:
    """A PNG whose header claims width × height pixels, with almost no data behind it."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    data = zlib.compress(b"\x00" * (width + 1))  # one row; the rest is missing
    chunks = chunk(b"IHDR", header) + chunk(b"IDAT", data) + chunk(b"IEND", b"")
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunks)
    return path


def test_images_are_recognised_by_their_first_bytes_whatever_their_name(tmp_path):
    for head, name in [(b"\x89PNG\r\n\x1a\n....", "scan.txt"), (b"\xff\xd8\xff\xe0", "photo"),
                       (b"II*\x00\x08\x00", "fax.dat"), (b"MM\x00*\x00\x00", "x.tif")]:
        assert classify(tmp_path / name, head) == ("image", None)
    assert classify(tmp_path / "notes.png", b"just text, named .png") is None


def test_ocr_text_comes_back_as_paragraphs_of_lines():
    text = "First  line\nsecond line\n\n\nNext paragraph\n\f"
    assert paragraphs(text) == [["First line", "second line"], ["Next paragraph"]]


def test_a_decompression_bomb_is_refused_from_its_header(tmp_path):
    engine_calls = []

    class Engine:
        name = "never"

        def read(self, image):
            engine_calls.append(image)
            return "text"

    bomb = bomb_png(tmp_path / "bomb.png")
    with pytest.raises(IngestError) as raised:
        load_image(bomb, "bomb.png", "bomb.png", engine=Engine())
    assert "too large" in str(raised.value) and "bomb" in str(raised.value) and "\n" not in str(raised.value)
    medium = bomb_png(tmp_path / "medium.png", 10_000, 6_000)  # under PIL's limit, over funnel's
    with pytest.raises(IngestError, match=r"10,000 × 6,000 pixels, 60 megapixels"):
        load_image(medium, "medium.png", "medium.png", engine=Engine())
    assert engine_calls == []


def test_a_missing_engine_is_one_line_with_the_fix(monkeypatch, tmp_path):
    no_tesseract(monkeypatch, tmp_path)
    with pytest.raises(OcrFailed, match="not installed .*apt-get install --no-install-recommends tesseract"):
        TesseractOcr().read(page_image("anything"))


def test_a_failing_or_slow_engine_is_one_line(tmp_path):
    failing = tmp_path / "failing"
    langs = '#!/bin/sh\n[ "$1" = --list-langs ] && { echo eng; exit 0; }\n'
    failing.write_text(langs + "echo 'Error: bad image' >&2\nexit 3\n")
    slow = tmp_path / "slow"
    slow.write_text(langs + "exec sleep 30\n")
    for program in (failing, slow):
        program.chmod(0o755)
    with pytest.raises(OcrFailed, match=r"Tesseract failed \(exit 3: Error: bad image\)"):
        TesseractOcr(program=str(failing)).read(page_image("x"))
    with pytest.raises(OcrFailed, match="took over 0.5 s"):
        TesseractOcr(program=str(slow), page_seconds=0.5).read(page_image("x"))


@pytest.mark.slow
@needs_tesseract
def test_a_scanned_pdf_is_read_and_cited_at_its_page(tmp_path):
    pdf = scanned_pdf(tmp_path / "scan.pdf", page_image("Cover page of the letter."),
                      page_image(*halves(AUDIT)))
    heard = []
    loaded = load_pdf(pdf, "scan.pdf", "scan.pdf", pages=lambda _, read, total: heard.append((read, total)))
    assert [s.page for s in loaded.sections] == [1, 2]
    assert AUDIT in flat(loaded.sections[1].text)
    assert (0, 2) in heard and (1, 2) in heard and heard[-1] == (2, 2)  # shown while OCR runs

    p = pipeline(tmp_path)
    assert p.ingest([pdf]).problems == []
    best = p.search("when does the annual audit start", k=1).documents[0].best.chunk
    assert best.doc_id.endswith("scan.pdf") and best.location == "p.2"
    assert "thirteen January" in flat(best.text)


@pytest.mark.slow
@needs_tesseract
def test_a_mixed_pdf_ocrs_only_its_image_page(tmp_path):
    pypdf = pytest.importorskip("pypdf")

    text_page = text_pdf(tmp_path / "text.pdf", "This page has a text layer about quarterly meetings.")
    scan_page = scanned_pdf(tmp_path / "scan.pdf", page_image(*halves(KEYS)))
    writer = pypdf.PdfWriter()
    for part in (text_page, scan_page):
        writer.append(pypdf.PdfReader(part))
    mixed = tmp_path / "mixed.pdf"
    writer.write(mixed)

    read = []

    class Counting(TesseractOcr):
        def read(self, image):
            read.append(image.size)
            return super().read(image)

    loaded = load_pdf(mixed, "mixed.pdf", "mixed.pdf", engine=Counting())
    assert len(read) == 1  # the text page was not OCR'd
    assert [s.page for s in loaded.sections] == [1, 2]
    assert "text layer about quarterly" in loaded.sections[0].text and KEYS in flat(loaded.sections[1].text)


@pytest.mark.slow
@needs_tesseract
def test_a_png_and_a_multi_page_tiff_are_read_page_per_frame(tmp_path):
    png = tmp_path / "badge.png"
    page_image(*halves(KEYS)).convert("RGBA").save(png)
    tiff = tmp_path / "fax.tif"
    first, second = page_image("Fax cover sheet, two pages."), page_image(*halves(AUDIT))
    first.save(tiff, save_all=True, append_images=[second], compression="tiff_deflate")

    assert [s.page for s in load_image(tiff, "fax.tif", "fax.tif").sections] == [1, 2]
    p = pipeline(tmp_path)
    report = p.ingest([png, tiff])
    assert (report.added, report.problems) == (2, [])
    badge = p.search("visitor badge front desk", k=1).documents[0].best.chunk
    assert badge.doc_id.endswith("badge.png") and badge.location == "p.1" and KEYS in flat(badge.text)
    audit = p.search("annual audit thirteen January", k=1).documents[0].best.chunk
    assert audit.doc_id.endswith("fax.tif") and audit.location == "p.2"


@pytest.mark.slow
def test_a_folder_with_a_bomb_and_no_engine_keeps_the_rest(monkeypatch, tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "notes.txt").write_text("The boiler is serviced every October by the caretaker.\n")
    text_pdf(folder / "text.pdf", "A text page about the spring planting schedule.")
    bomb_png(folder / "bomb.png")
    page_image(KEYS).save(folder / "scan.png")
    scanned_pdf(folder / "scan.pdf", page_image(*halves(AUDIT)))
    no_tesseract(monkeypatch, tmp_path)

    p = pipeline(tmp_path)
    report = p.ingest([folder])
    problems = {Path(problem.path).name: problem.reason for problem in report.problems}
    assert set(problems) == {"bomb.png", "scan.png", "scan.pdf"} and report.added == 2
    assert "too large" in problems["bomb.png"]
    assert "Tesseract, which is not installed" in problems["scan.png"]
    assert problems["scan.pdf"].startswith("no extractable text: no text layer (a scanned PDF?), and OCR")
    assert all("\n" not in reason for reason in problems.values())
    assert p.search("boiler serviced October", k=1).documents[0].path.endswith("notes.txt")


def test_scanned_pages_ocr_failed_on_are_named_as_warnings(monkeypatch, tmp_path):
    # A mixed PDF (a text page, two scans) on a machine without Tesseract: the text page is indexed, and the
    # two scans are not dropped without a word: the loaded document, the ingest report and its JSON say so.
    from funnel.apps.state.documents import DocumentRecord

    mixed = mixed_pdf_of_two_scans(tmp_path)
    folder = mixed.parent
    no_tesseract(monkeypatch, tmp_path)

    loaded = load_pdf(mixed, "mixed.pdf", "mixed.pdf")
    assert [s.page for s in loaded.sections] == [1]
    (warning,) = loaded.warnings
    assert warning.startswith("2 scanned pages not read (p. 2, 3): OCR failed: ") and "\n" not in warning
    assert "tesseract" in warning.lower()

    report = pipeline(tmp_path).ingest([folder])
    assert (report.added, report.problems) == (1, [])
    assert [w for _, w in report.warnings] == [warning]
    assert report.to_json()["warnings"] == [{"path": report.warnings[0][0], "warning": warning}]
    record = DocumentRecord(id="d", filename="mixed.pdf", kind="pdf", bytes=1, sha256="x", uploaded_at="",
                            warnings=loaded.warnings)
    assert DocumentRecord.from_json(record.to_json()) == record  # kept in the collection's document list


def mixed_pdf_of_two_scans(tmp_path: Path) -> Path:
    """docs/mixed.pdf: a page with a text layer, then two scanned pages."""
    pypdf = pytest.importorskip("pypdf")
    text_page = text_pdf(tmp_path / "text.pdf", "This page has a text layer about quarterly meetings.")
    scans = scanned_pdf(tmp_path / "scan.pdf", page_image("first scan"), page_image("second scan"))
    writer = pypdf.PdfWriter()
    for part in (text_page, scans):
        writer.append(pypdf.PdfReader(part))
    folder = tmp_path / "docs"
    folder.mkdir()
    writer.write(folder / "mixed.pdf")
    return folder / "mixed.pdf"


@pytest.mark.slow
def test_an_uploaded_pdf_lists_its_unread_scanned_pages(monkeypatch, tmp_path):
    import httpx
    from api_support import upload, wait_done
    from helpers import serving

    from funnel.apps.api import create_app
    from funnel.apps.settings import Settings

    mixed = mixed_pdf_of_two_scans(tmp_path)
    no_tesseract(monkeypatch, tmp_path)
    app = create_app(Settings(embedder="hashing", data_dir=tmp_path / "data"))
    with serving(app) as url, httpx.Client(base_url=url, timeout=60) as client:
        assert upload(client, "default", [("mixed.pdf", mixed.read_bytes())]).status_code == 202
        (doc,) = wait_done(client, "default")
    assert doc["status"] == "ready" and doc["chunks"] >= 1
    (warning,) = doc["warnings"]
    assert warning.startswith("2 scanned pages not read (p. 2, 3): OCR failed: ")
