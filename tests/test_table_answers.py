"""Table lookups (issue 33, part 2): the extractive answer gives the cell of the row and the column the
question names, in every format that has tables, read through the real loaders and the real pipeline."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import chunk, packaged_embedder

from funnel.embed import HashingEmbedder
from funnel.engine_config import EngineConfig
from funnel.generate.extractive import ExtractiveGenerator
from funnel.generate.table_cells import find_cell, parse_row
from funnel.group import group
from funnel.index.lance import LanceStore
from funnel.pipeline import Pipeline
from funnel.types import Candidate, Hit, RerankStatus, SearchResult, SectionKind

CITIES = [("Berlin", "28", "150"), ("Paris", "32", "180"), ("Madrid", "26", "120"), ("Oslo", "41", "200"),
          ("Vienna", "30", "140"), ("Lisbon", "24", "110")]
HEADER = ("City", "Per diem (EUR)", "Hotel cap (EUR)")
PROSE = ("Travel within the company is reimbursed according to the rules of this policy. Claims are "
         "submitted within thirty days of returning, with receipts for every expense above ten euros.")


def result_of(*chunks) -> SearchResult:
    hits = [Hit(Candidate(c, n, 1.0 / n), n, 1.0 / n) for n, c in enumerate(chunks, start=1)]
    return SearchResult("q", tuple(group(hits, k=len(hits))), tuple(hits), RerankStatus.SKIPPED)


def rows_text() -> str:
    return "\n".join(f"City: {c} | Per diem (EUR): {d} | Hotel cap (EUR): {h}" for c, d, h in CITIES)


# -- the lookup itself --------------------------------------------------------------------------------


def test_parse_row_reads_header_value_pairs_and_nothing_else():
    assert parse_row("City: Berlin | Per diem (EUR): 28") == [("City", "Berlin"), ("Per diem (EUR)", "28")]
    assert parse_row("The meeting is at noon: bring notes.") is None
    assert parse_row("City: Berlin") is None  # one cell is no lookup


def test_the_cell_of_the_named_row_and_column_is_the_answer():
    table = chunk("travel.csv", 0, text=rows_text(), kind="csv", section_kind=SectionKind.TABLE)
    prose = chunk("policy.txt", 0, text=PROSE, kind="text")
    answer = ExtractiveGenerator(HashingEmbedder(dim=64)).answer("What is the per diem for Berlin?",
                                                                 result_of(prose, table))
    assert answer.text.startswith("Per diem (EUR) for Berlin: 28 — City: Berlin | Per diem (EUR): 28")
    assert answer.text.endswith("[1]")
    (citation,) = answer.citations
    assert citation.chunk_id == table.chunk_id and citation.text.startswith("City: Berlin |")


def test_another_column_and_row_of_the_same_table():
    table = chunk("travel.csv", 0, text=rows_text(), kind="csv", section_kind=SectionKind.TABLE)
    answer = ExtractiveGenerator(HashingEmbedder(dim=64)).answer("What is the hotel cap in Oslo?",
                                                                 result_of(table))
    assert answer.text.startswith("Hotel cap (EUR) for Oslo: 200")


@pytest.mark.parametrize("question", [
    "Which cities are listed?",  # names no row
    "Tell me about Berlin.",  # names no column
    "What is the per diem?",  # names no row
])
def test_without_a_row_and_a_column_the_answer_is_chosen_as_before(question):
    table = chunk("travel.csv", 0, text=rows_text(), kind="csv", section_kind=SectionKind.TABLE)
    prose = chunk("policy.txt", 0, text=PROSE, kind="text")
    pool = [(line, table) for line in rows_text().splitlines()] + [(PROSE, prose)]
    assert find_cell(question, pool, np.ones(len(pool))) is None
    answer = ExtractiveGenerator(HashingEmbedder(dim=64)).answer(question, result_of(prose, table))
    assert " — " not in answer.text  # no "Column for Row: value — row" lookup


def test_prose_lines_that_look_like_pairs_are_not_table_rows():
    prose = chunk("notes.txt", 0, text="Note: Berlin | Per diem: see the table", kind="text")
    assert find_cell("What is the per diem for Berlin?", [(prose.text, prose)], np.ones(1)) is None


def test_a_header_named_by_its_initials_and_a_word_in_another_form():
    line = "codes: CH,DE,LI | coordinates: +4723+00832 | TZ: Europe/Zurich"
    table = chunk("zones.csv", 0, text=line + "\ncodes: AD | coordinates: +4230+00131 | TZ: Europe/Andorra",
                  kind="csv", section_kind=SectionKind.TABLE)
    pool = [(line, table)]
    cell = find_cell("Which country codes share the Europe/Zurich time zone?", pool, np.ones(1))
    assert cell is not None and (cell.column, cell.value) == ("codes", "CH,DE,LI")
    cell = find_cell("In which time zone is Andorra la Vella, code AD?",
                     [("codes: AD | coordinates: +4230+00131 | TZ: Europe/Andorra", table)], np.ones(1))
    assert cell is not None and cell.column == "TZ" and cell.value == "Europe/Andorra"


def test_a_value_listing_names_and_a_header_written_as_one_word():
    table = chunk("langs.csv", 0, text="x", kind="csv", section_kind=SectionKind.TABLE)
    pool = [("alpha_3: nav | alpha_2: nv | name: Navajo; Navaho | codename: Dine", table)]
    cell = find_cell("What is the code name of Navajo?", pool, np.ones(1))
    assert cell is not None and (cell.label, cell.value) == ("Navajo; Navaho", "Dine")


def test_every_value_the_question_names_labels_the_row_once():
    table = chunk("debian.csv", 0, text="x", kind="csv", section_kind=SectionKind.TABLE)
    line = "version: 12 | codename: Bookworm | series: bookworm | release: 2023-06-10"
    cell = find_cell("On what date was Debian 12 Bookworm released?", [(line, table)], np.ones(1))
    assert cell is not None and cell.text.startswith("release for 12, Bookworm: 2023-06-10 — version: 12")


def test_a_row_scored_far_below_the_best_passage_is_not_looked_up():
    table = chunk("travel.csv", 0, text=rows_text(), kind="csv", section_kind=SectionKind.TABLE)
    pool = [("City: Berlin | Per diem (EUR): 28", table), (PROSE, chunk("p.txt", 0, text=PROSE))]
    assert find_cell("What is the per diem for Berlin?", pool, np.array([0.2, 1.0])) is None


# -- every format with tables, through its loader and the pipeline -----------------------------------


def write_csv(folder):
    lines = [",".join(HEADER)] + [",".join(row) for row in CITIES]
    (folder / "travel.csv").write_text("\n".join(lines) + "\n")


def write_tsv(folder):
    lines = ["\t".join(HEADER)] + ["\t".join(row) for row in CITIES]
    (folder / "travel.tsv").write_text("\n".join(lines) + "\n")


def write_markdown(folder):
    lines = ["# Travel", "", PROSE, "", "| " + " | ".join(HEADER) + " |", "|---|---|---|"]
    lines += ["| " + " | ".join(row) + " |" for row in CITIES]
    (folder / "travel.md").write_text("\n".join(lines) + "\n")


def write_html(folder):
    cells = "".join(f"<tr><td>{c}</td><td>{d}</td><td>{h}</td></tr>" for c, d, h in CITIES)
    head = "".join(f"<th>{h}</th>" for h in HEADER)
    page = f"<html><body><h1>Travel</h1><p>{PROSE}</p><table><tr>{head}</tr>{cells}</table></body></html>"
    (folder / "travel.html").write_text(page)


def write_xlsx(folder):
    openpyxl = pytest.importorskip("openpyxl")
    book = openpyxl.Workbook()
    sheet = book.active
    sheet.title = "Rates"
    for row in [HEADER, *CITIES]:
        sheet.append(list(row))
    book.save(folder / "travel.xlsx")


def write_docx(folder):
    docx = pytest.importorskip("docx")
    document = docx.Document()
    document.add_heading("Travel", 1)
    document.add_paragraph(PROSE)
    table = document.add_table(rows=0, cols=3)
    for row in [HEADER, *CITIES]:
        cells = table.add_row().cells
        for cell, value in zip(cells, row):
            cell.text = value
    document.save(folder / "travel.docx")


def odf_rows(table, row_type, cell_type, paragraph):
    for values in [HEADER, *CITIES]:
        row = row_type()
        for value in values:
            cell = cell_type()
            cell.addElement(paragraph(text=value))
            row.addElement(cell)
        table.addElement(row)
    return table


def write_ods(folder):
    pytest.importorskip("odf")
    from odf.opendocument import OpenDocumentSpreadsheet
    from odf.table import Table, TableCell, TableRow
    from odf.text import P

    document = OpenDocumentSpreadsheet()
    document.spreadsheet.addElement(odf_rows(Table(name="Rates"), TableRow, TableCell, P))
    document.save(str(folder / "travel.ods"))


def write_odt(folder):
    pytest.importorskip("odf")
    from odf.opendocument import OpenDocumentText
    from odf.table import Table, TableCell, TableColumn, TableRow
    from odf.text import H, P

    document = OpenDocumentText()
    document.text.addElement(H(outlinelevel=1, text="Travel"))
    document.text.addElement(P(text=PROSE))
    table = Table(name="Rates")
    table.addElement(TableColumn(numbercolumnsrepeated=3))
    document.text.addElement(odf_rows(table, TableRow, TableCell, P))
    document.save(str(folder / "travel.odt"))


def build_pdf(path, grid: bool, rows=None):
    """A page of prose, a table (ruled or not) and prose again."""
    pytest.importorskip("reportlab")
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import Paragraph, SimpleDocTemplate, Table

    styles = getSampleStyleSheet()
    table = Table(rows or [HEADER, *CITIES])
    if grid:
        table.setStyle([("GRID", (0, 0), (-1, -1), 0.5, "grey")])
    story = [Paragraph("Travel policy", styles["Heading1"]), Paragraph(PROSE, styles["BodyText"]), table,
             Paragraph(PROSE, styles["BodyText"])]
    SimpleDocTemplate(str(path), pagesize=A4, invariant=1).build(story)
    return path


def write_pdf(folder):
    build_pdf(folder / "travel.pdf", grid=False)


def write_ruled_pdf(folder):
    build_pdf(folder / "travel.pdf", grid=True)


WRITERS = [write_csv, write_tsv, write_markdown, write_html, write_xlsx, write_ods, write_docx, write_odt,
           write_pdf, write_ruled_pdf]


@pytest.mark.slow
@pytest.mark.parametrize("write", WRITERS, ids=lambda w: w.__name__.removeprefix("write_"))
def test_cell_answers_in_every_format_with_tables(tmp_path, write):
    docs = tmp_path / "docs"
    docs.mkdir()
    write(docs)
    (docs / "other.txt").write_text("Gears transmit torque between shafts. Berlin has many museums.\n")
    pipeline = Pipeline.build(EngineConfig(), store=LanceStore(tmp_path / "index"),
                              embedder=HashingEmbedder(dim=64), reranker=None)
    assert pipeline.ingest([docs]).problems == []
    answer = pipeline.ask("What is the per diem for Berlin?")
    assert answer.text.startswith("Per diem (EUR) for Berlin: 28 — "), answer.text
    assert "City: Berlin" in answer.text and Path(answer.citations[0].path).name.startswith("travel.")
    answer = pipeline.ask("What is the hotel cap for Lisbon?")
    assert answer.text.startswith("Hotel cap (EUR) for Lisbon: 110 — "), answer.text


@pytest.mark.model
@pytest.mark.slow
def test_cell_answers_with_the_packaged_embedder(tmp_path):
    embedder = packaged_embedder()
    docs = tmp_path / "docs"
    docs.mkdir()
    write_pdf(docs)
    write_csv(docs)
    pipeline = Pipeline.build(EngineConfig(), store=LanceStore(tmp_path / "index"), embedder=embedder,
                              reranker=None)
    assert pipeline.ingest([docs]).problems == []
    answer = pipeline.ask("What is the per diem for Madrid?")
    assert answer.text.startswith("Per diem (EUR) for Madrid: 26 — City: Madrid"), answer.text
    assert pipeline.ask("Which cities are listed?").text.count(" — ") == 0
