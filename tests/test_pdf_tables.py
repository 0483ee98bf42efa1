"""PDF tables without ruled lines (issue 33, part 2): found by the alignment of their columns, read as rows
with their header like ruled tables, and pages that only look aligned (two columns of prose, a table of
contents, a code listing, a reference card) left as prose."""

from __future__ import annotations

import pytest

from funnel.embed import HashingEmbedder
from funnel.ingest import chunk_document
from funnel.ingest.pdf import load_pdf
from funnel.types import SectionKind

canvas_module = pytest.importorskip("reportlab.pdfgen.canvas")
from reportlab.lib.pagesizes import A4
from reportlab.lib.styles import getSampleStyleSheet
from reportlab.platypus import Paragraph, SimpleDocTemplate, Table
from test_table_answers import CITIES, HEADER, PROSE

LANGUAGES = [("Language", "Territory", "Character set"), ("English", "United Kingdom", "Unicode UTF-8"),
             ("French", "Canada", "ISO 8859-1"), ("German", "Switzerland", "ISO 646"),
             ("Japanese", "Japan", "Shift JIS")]


def story_pdf(path, *flowables):
    styles = getSampleStyleSheet()
    story = [Paragraph("Travel policy", styles["Heading1"]), Paragraph(PROSE, styles["BodyText"]),
             *flowables, Paragraph(PROSE, styles["BodyText"])]
    SimpleDocTemplate(str(path), pagesize=A4, invariant=1).build(story)
    return path


def tables_of(path):
    loaded = load_pdf(path, "d", path.name)
    return loaded, [s for s in loaded.sections if s.kind == SectionKind.TABLE]


def test_a_table_without_rules_becomes_rows_with_its_header(tmp_path):
    path = story_pdf(tmp_path / "plain.pdf", Table([HEADER, *CITIES]))
    loaded, (table,) = tables_of(path)
    assert table.text.split("\n") == [f"City: {c} | Per diem (EUR): {d} | Hotel cap (EUR): {h}"
                                      for c, d, h in CITIES]
    assert table.page == 1 and table.heading == "Travel policy"
    prose = [s.text for s in loaded.sections if s.kind == SectionKind.PROSE]
    assert prose == [PROSE, PROSE]  # the table's text is not in the prose too

    chunks = chunk_document(loaded, HashingEmbedder(dim=32), max_tokens=400)
    rows = [c for c in chunks if "City: Berlin" in c.text]
    assert rows and all(c.section_kind == SectionKind.TABLE for c in rows)
    assert "City: Berlin | Per diem (EUR): 28 | Hotel cap (EUR): 150" in rows[0].text


def test_a_header_ruled_underneath_or_in_bold_marks_a_table_of_words(tmp_path):
    # No column of numbers here: the header is told apart by a rule under it (booktabs) or by its font.
    ruled = Table(LANGUAGES, style=[("LINEBELOW", (0, 0), (-1, 0), 0.5, "black"),
                                    ("LINEABOVE", (0, 0), (-1, 0), 1, "black")])
    bold = Table(LANGUAGES, style=[("FONTNAME", (0, 0), (-1, 0), "Helvetica-Bold")])
    for name, table in (("ruled.pdf", ruled), ("bold.pdf", bold)):
        _, (found,) = tables_of(story_pdf(tmp_path / name, table))
        first = "Language: English | Territory: United Kingdom | Character set: Unicode UTF-8"
        assert found.text.split("\n")[0] == first
        assert len(found.text.split("\n")) == 4


def test_the_same_table_ruled_reads_the_same(tmp_path):
    grid = Table([HEADER, *CITIES], style=[("GRID", (0, 0), (-1, -1), 0.5, "grey")])
    plain = Table([HEADER, *CITIES])
    _, (ruled,) = tables_of(story_pdf(tmp_path / "grid.pdf", grid))
    _, (borderless,) = tables_of(story_pdf(tmp_path / "plain.pdf", plain))
    assert ruled.text == borderless.text


def canvas_pdf(path, lines, font="Helvetica", size=10):
    """One page of `lines`, each a list of (x, text) drawn at the same height."""
    pdf = canvas_module.Canvas(str(path), pagesize=A4)
    y = 780
    for line in lines:
        for x, text in line:
            pdf.setFont(font, size)
            pdf.drawString(x, y, text)
        y -= size * 1.4
    pdf.save()
    return path


def test_a_table_of_contents_stays_prose(tmp_path):
    entries = [("1", "Introduction", "3"), ("1.1", "Scope of this guide", "4"), ("1.2", "Conventions", "6"),
               ("2", "Installing the tools", "9"), ("2.1", "From packages", "10"),
               ("3", "Configuration", "15")]
    dotted = [[(72, f"{n} {title} " + "." * 60), (480, page)] for n, title, page in entries]
    aligned = [[(72, n), (110, title), (480, page)] for n, title, page in entries]
    for name, lines in (("dots.pdf", dotted), ("toc.pdf", aligned)):
        _, tables = tables_of(canvas_pdf(tmp_path / name, [[(72, "Contents")], *lines]))
        assert tables == [], name


def test_an_index_in_two_columns_stays_prose(tmp_path):
    entries = [("hsv, 39, 50", "line, 141, 155"), ("hypertext, 76", "linecolor, 50, 62"),
               ("ibeta, 38", "linespoints, 77, 201"), ("image, 74, 195", "lines, 77"),
               ("imag, 37", "load, 101")]
    pdf = canvas_module.Canvas(str(tmp_path / "index.pdf"), pagesize=A4)
    pdf.setFont("Helvetica-Bold", 10)
    pdf.drawString(72, 780, "INDEX")
    pdf.drawString(310, 780, "gnuplot 5.4")
    pdf.setFont("Helvetica", 10)
    for n, (left, right) in enumerate(entries, start=1):
        pdf.drawString(72, 780 - 14 * n, left)
        pdf.drawString(310, 780 - 14 * n, right)
    pdf.save()
    _, tables = tables_of(tmp_path / "index.pdf")
    assert tables == []


def test_two_columns_of_prose_stay_prose(tmp_path):
    text = ("the quick survey of every manual page shows that most options are read from the "
            "configuration file before the command line is parsed and applied")
    words = text.split(" ")
    left = [" ".join(words[i:i + 7]) for i in range(0, len(words) - 7, 2)]
    right = [" ".join(words[i + 1:i + 8]) for i in range(0, len(words) - 7, 2)]
    lines = [[(72, a), (310, b)] for a, b in zip(left, right)]
    loaded, tables = tables_of(canvas_pdf(tmp_path / "columns.pdf", lines))
    assert tables == []
    assert loaded.sections  # read as text all the same


def test_a_code_listing_aligned_with_spaces_stays_prose(tmp_path):
    code = [("x = compute(a, b)", "# the first pass"), ("y = refine(x)", "# the second pass"),
            ("z = y.total()", "# the sum"), ("print(z)", "# shown to the user")]
    lines = [[(72, "Name         Comment")]] + [[(72, c), (260, note)] for c, note in code]
    _, tables = tables_of(canvas_pdf(tmp_path / "code.pdf", lines, font="Courier"))
    assert tables == []


def test_a_reference_card_stays_prose(tmp_path):
    card = [("apt update", "refresh the package lists"), ("apt upgrade", "install the newer versions"),
            ("apt install pkg", "install a package"), ("apt remove pkg", "remove a package"),
            ("apt show pkg", "describe a package")]
    lines = [[(72, command), (220, what)] for command, what in card]
    _, tables = tables_of(canvas_pdf(tmp_path / "card.pdf", lines))
    assert tables == []

