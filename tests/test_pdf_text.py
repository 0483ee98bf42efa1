"""PDF text as a reader sees it: words apart, running headers gone, columns in order (issue 16, part 2)."""

from pathlib import Path

import pytest

from funnel.ingest.pdf import load_pdf

canvas_module = pytest.importorskip("reportlab.pdfgen.canvas")
from reportlab.pdfbase.pdfmetrics import stringWidth  # noqa: E402


def _words(c, x: float, y: float, words: list[str], gap: float, size: float = 10) -> None:
    """Draw each word on its own, `gap` points apart: as many PDF producers place text."""
    for word in words:
        c.drawString(x, y, word)
        x += stringWidth(word, "Helvetica", size) + gap


def _pages_pdf(path: Path, n: int) -> Path:
    """A PDF of `n` pages, one line of body text each."""
    c = canvas_module.Canvas(str(path))
    for page in range(1, n + 1):
        c.drawString(72, 700, f"Page body number {page} with some words.")
        c.showPage()
    c.save()
    return path


def _text(path: Path) -> str:
    return "\n".join(s.text for s in load_pdf(path, "d", path.name).sections)


def test_words_set_with_narrow_gaps_stay_apart(tmp_path):
    # A 2-point gap at 10-point type: under pdfplumber's fixed 3-point tolerance this came out as
    # "Thedefaultweightvalueis50,andthemaximumis100" (the shared-mime-info spec, p.4).
    path = tmp_path / "spec.pdf"
    c = canvas_module.Canvas(str(path))
    c.setFont("Helvetica", 10)
    _words(c, 72, 700, "The default weight value is 50, and the maximum is 100.".split(), gap=2.0)
    c.save()
    assert "The default weight value is 50, and the maximum is 100." in _text(path)


def test_running_headers_footers_and_page_numbers_are_dropped(tmp_path):
    path = tmp_path / "manual.pdf"
    c = canvas_module.Canvas(str(path))  # A4-ish letter: 612 x 792
    for page in range(1, 6):
        c.setFont("Helvetica", 9)
        c.drawString(72, 770, "GNU Libtasn1 Reference Manual")
        c.drawString(300, 30, f"Page {page} of 5")
        c.setFont("Helvetica", 11)
        c.drawString(72, 600, f"Body text of page {page} explains function number {page}.")
        c.showPage()
    c.save()
    sections = load_pdf(path, "d", "manual.pdf").sections
    text = "\n".join(s.text for s in sections)
    assert "Reference Manual" not in text and "of 5" not in text
    assert all(f"Body text of page {p} explains function number {p}." in text for p in range(1, 6))
    assert sorted({s.page for s in sections}) == [1, 2, 3, 4, 5]


def test_a_two_column_page_is_read_column_by_column(tmp_path):
    path = tmp_path / "columns.pdf"
    c = canvas_module.Canvas(str(path))
    c.setFont("Helvetica", 10)
    left = [f"Left column line {i} tells the first story." for i in range(12)]
    right = [f"Right column line {i} tells another story." for i in range(12)]
    for i, (a, b) in enumerate(zip(left, right)):
        c.drawString(50, 700 - 14 * i, a)
        c.drawString(330, 700 - 14 * i, b)
    c.save()
    text = _text(path)
    assert " ".join(left) in text and " ".join(right) in text  # each column whole, not line by line mixed


def test_a_page_without_columns_is_not_split(tmp_path):
    path = tmp_path / "plain.pdf"
    c = canvas_module.Canvas(str(path))
    c.setFont("Helvetica", 10)
    for i in range(12):
        c.drawString(50, 700 - 14 * i, f"A full line {i} that runs from the left margin far across the page to the right.")
    c.save()
    assert "A full line 0 that runs from the left margin far across the page to the right." in _text(path)


def test_a_long_pdf_reports_its_pages_as_it_reads_them(tmp_path):
    path = _pages_pdf(tmp_path / "long.pdf", 7)
    heard = []
    load_pdf(path, "d", "long.pdf", lambda name, read, total: heard.append((name, read, total)))
    assert heard == [("long.pdf", n, 7) for n in range(1, 8)]


def test_a_rotated_page_is_read(tmp_path):
    path = tmp_path / "rotated.pdf"
    c = canvas_module.Canvas(str(path))
    c.drawString(72, 700, "An upright page about flanges.")
    c.showPage()
    c.setPageRotation(90)
    c.drawString(72, 700, "A rotated page about gaskets and seals.")
    c.showPage()
    c.save()
    sections = load_pdf(path, "d", "rotated.pdf").sections
    assert [(s.page, s.text) for s in sections] == [
        (1, "An upright page about flanges."), (2, "A rotated page about gaskets and seals.")
    ]


@pytest.mark.slow
def test_damaged_pdfs_load_or_fail_with_one_line(tmp_path):
    # Bytes flipped inside a real PDF (fonts, content streams, the xref): each either loads or is one
    # IngestError line; never another exception, never a traceback.
    import random

    from funnel.errors import IngestError

    original = (Path(__file__).resolve().parents[1] / "samples" / "docs" / "portfolio_companies.pdf").read_bytes()
    rng = random.Random(16)
    outcomes = {"loaded": 0, "refused": 0}
    for n in range(40):
        data = bytearray(original)
        for _ in range(rng.choice([1, 8, 64])):
            data[rng.randrange(16, len(data))] = rng.randrange(256)
        path = tmp_path / f"damaged{n}.pdf"
        path.write_bytes(bytes(data))
        try:
            load_pdf(path, "d", path.name)
            outcomes["loaded"] += 1
        except IngestError as e:
            assert "\n" not in str(e) and str(e).startswith(path.name)
            outcomes["refused"] += 1
    assert outcomes["loaded"] + outcomes["refused"] == 40


def test_a_page_pdfminer_reads_as_letters_apart_is_read_again_with_pdfium():
    import pdfplumber

    from funnel.ingest.pdf import _read_page
    from funnel.ingest.pdf_layout import garbled

    path = Path(__file__).resolve().parent / "data" / "type3_letters_apart.pdf"
    with pdfplumber.open(path) as pdf:
        assert garbled(_read_page(pdf.pages[0])[1])  # what pdfminer alone gives: "C", "h a p t e r"
    text = _text(path)
    assert "Chapter 1. Introduction lefty is an editor designed to handle technical pictures." in text


def test_ligatures_are_expanded(tmp_path):
    # "ﬁ" and "ﬂ" are single glyphs in many PDFs; a search for "file" must still find "ﬁle".
    from reportlab.pdfbase import pdfmetrics
    from reportlab.pdfbase.ttfonts import TTFont

    pdfmetrics.registerFont(TTFont("Vera", "Vera.ttf"))  # shipped with reportlab; has the ligature glyphs
    path = tmp_path / "ligatures.pdf"
    c = canvas_module.Canvas(str(path))
    c.setFont("Vera", 11)
    c.drawString(72, 700, "The conﬁguration ﬁle sets the ﬂow of work.")
    c.save()
    assert "The configuration file sets the flow of work." in _text(path)


def test_a_long_pdf_upload_shows_its_page_while_it_is_read(tmp_path):
    from api_support import ingest_recording_progress

    path = _pages_pdf(tmp_path / "manual.pdf", 25)
    seen, record = ingest_recording_progress(tmp_path, path, seconds=60)
    assert seen == ["page 10 of 25", "page 20 of 25", "chunks 0 of 25", "chunks 25 of 25", None]  # then embedded
    assert record.progress is None


def _lines_pdf(path: Path, lines: list[str], size: float = 10) -> Path:
    """One paragraph: each of `lines` set on its own line, 1.2 x `size` apart, as a typesetter wraps it."""
    c = canvas_module.Canvas(str(path))
    c.setFont("Helvetica", size)
    for i, line in enumerate(lines):
        c.drawString(72, 700 - 1.2 * size * i, line)
    c.save()
    return path


def test_an_identifier_broken_after_an_underscore_at_a_line_end_is_joined(tmp_path):
    # Texinfo breaks @code after "_": libtasn1's "ASN1_" + "SYNTAX_ERROR", libidn2's "IDN2_" +
    # "NONTRANSITIONAL".
    path = _lines_pdf(tmp_path / "broken.pdf", [
        "The parser returns ASN1_SUCCESS, or ASN1_",
        "SYNTAX_ERROR if the syntax is not correct. Call __init__",
        "methods first.",
    ])
    text = _text(path)
    assert "or ASN1_SYNTAX_ERROR if the syntax" in text
    assert "Call __init__ methods first." in text  # a name ending in two underscores is whole


def test_a_space_after_an_underscore_inside_a_line_stays(tmp_path):
    lines = ["Name the archive pkg_ version.tar.gz, where word_ and", "word stay apart."]
    path = _lines_pdf(tmp_path / "spaced.pdf", lines)
    text = _text(path)
    assert "pkg_ version.tar.gz, where word_ and word stay apart." in text


def test_a_superscript_footnote_mark_is_set_apart_from_its_word(tmp_path):
    path = tmp_path / "footnote.pdf"
    c = canvas_module.Canvas(str(path))

    def run(x: float, y: float, pieces: list[tuple[str, float, float]]) -> None:
        """Text pieces set one after the other without a gap: (text, size, rise)."""
        for text, size, rise in pieces:
            c.setFont("Helvetica", size)
            c.drawString(x, y + rise, text)
            x += stringWidth(text, "Helvetica", size)

    run(72, 700, [("It needs curl 7.28.0 or later", 10, 0), ("11", 7, 3.5), (", and MySQL", 10, 0),
                  ("2", 7, 3.5), (".", 10, 0)])
    run(72, 686, [("Exponents stay: R", 10, 0), ("2", 7, 3.5), (" and 2", 10, 0), ("24", 7, 3.5),
                  (" and the small print as it is.", 10, 0)])
    run(72, 100, [("11", 6, 3), ("Earlier releases lack the option.", 8, 0)])
    c.save()
    text = _text(path)
    assert "It needs curl 7.28.0 or later 11, and MySQL 2." in text
    assert "Exponents stay: R2 and 224 and the small print as it is." in text
    assert "11 Earlier releases lack the option." in text


def test_a_word_hyphenated_at_a_line_end_is_rejoined_as_before(tmp_path):
    path = _lines_pdf(tmp_path / "hyphens.pdf", [
        "The loader reads the configu-",
        "ration file and the well-",
        "Known names, then x-",
        "1 stays as it is.",
    ])
    expected = "The loader reads the configuration file and the well- Known names, then x- 1 stays as it is."
    assert expected in _text(path)


def test_line_repairs_on_their_own():
    from funnel.ingest.pdf_text import join_lines

    assert join_lines(["IDN2_", "NONTRANSITIONAL to enable"]) == "IDN2_NONTRANSITIONAL to enable"
    assert join_lines(["asn1_der_", "decoding() fills"]) == "asn1_der_decoding() fills"
    assert join_lines(["a blank ___", "to fill"]) == "a blank ___ to fill"  # no identifier before the break
    assert join_lines(["the __GNUC__", "macro"]) == "the __GNUC__ macro"
    assert join_lines(["infor-", "mation"]) == "information"
    assert join_lines(["FOO_ BAR", "baz"]) == "FOO_ BAR baz"
