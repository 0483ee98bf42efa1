"""CSV and TSV files: each row one line of a TABLE section, "Column: value | Column: value".

The header row's names are carried to every row, the form in which a single row can win retrieval on its
own (as Markdown and PDF tables have it); an empty cell is left out, and cells past the header's width are
named "Column N". The dialect (delimiter and quoting) is sniffed from the start of the file among , ; tab
and | (a .tsv: tab); when that fails a .csv is read with commas. The first non-blank row is the header.
Bytes are decoded as text files are (`text.decode_text`: UTF-8 with or without a BOM, UTF-16 with a BOM,
else cp1252, else latin-1), so an undecodable or binary file is an `IngestError`, as is one of more than
MAX_ROWS rows.

Where a row is: the document model's line numbers, as for every text file (a PDF's rows have `page`).
A chunk's `line_start`/`line_end` are the lines on disk of its first and last row, so a citation says
"L12-14": rows 12 to 14 as a spreadsheet numbers them (the header is row 1) whenever no cell holds a line
break. The chunker counts a TABLE section's lines from its first, one row per line, so a file is one
section, cut only where that count would go wrong: after a blank line, and around a row whose cells hold
line breaks (its own section, cited at its first line).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from funnel.errors import IngestError
from funnel.ingest.text import file_document, name_headers, read_source, table_row_line
from funnel.types import Kind, LoadedDocument, Section, SectionKind

KIND = Kind("csv")  # the loader's name in LOADERS, stored with every chunk
MAX_ROWS = 100_000  # past this, a table is data for a database, not a document to cite rows of
_SNIFF_CHARS = 32_768
_DELIMITERS = {".tsv": "\t"}  # what the sniffer may choose from, by suffix; else:
_ANY_DELIMITER = ",;\t|"


def load_table(
    path: Path, doc_id: str, display_path: str, language: str | None = None, pages: object = None
) -> LoadedDocument:
    """A CSV or TSV file as TABLE sections (the signature of a `LOADERS` row's `read`)."""
    raw, text = read_source(path, display_path)
    dialect = sniff_dialect(text, path.suffix.lower())
    sections = table_sections(text, dialect, display_path)
    return LoadedDocument(document=file_document(doc_id, display_path, KIND, raw), sections=tuple(sections))


def sniff_dialect(text: str, suffix: str) -> type[csv.Dialect]:
    """The dialect the start of `text` shows; commas (a .tsv: tabs) when it shows none."""
    sample = text[:_SNIFF_CHARS]
    if len(text) > _SNIFF_CHARS and "\n" in sample:
        sample = sample[: sample.rindex("\n")]  # whole rows only: a cut quote misleads the sniffer
    try:
        dialect = csv.Sniffer().sniff(sample, delimiters=_DELIMITERS.get(suffix, _ANY_DELIMITER))
    except csv.Error:
        return csv.excel_tab if suffix == ".tsv" else csv.excel
    # The sniffer often misses doubled quotes ("" in a quoted cell); RFC 4180 and spreadsheets write them.
    dialect.doublequote = True
    return dialect


def table_sections(text: str, dialect: type[csv.Dialect], display_path: str) -> list[Section]:
    """The TABLE sections of a table's text: runs of rows on consecutive lines, one line each."""
    reader = csv.reader(io.StringIO(text), dialect)
    header: list[str] | None = None
    runs = Runs()
    read_to = rows = 0
    try:
        for cells in reader:
            first, last = read_to + 1, reader.line_num  # the record's lines on disk
            read_to = last
            if not any(cell.strip() for cell in cells):
                continue  # a blank line: the next row starts a new section
            if header is None:
                header = name_headers(cells)
                continue
            row = table_row_line(header, cells)
            if not row:
                continue  # every cell empty: no row, and the next one starts a new section
            rows += 1
            if rows > MAX_ROWS:
                raise IngestError(display_path, f"more than {MAX_ROWS:,} rows; split it into smaller files")
            runs.add(row, first, last)
    except csv.Error as e:
        raise IngestError(display_path, f"not a readable table (line {reader.line_num}: {e})") from e
    if not rows:
        raise IngestError(display_path, "no rows under the header")
    return runs.done()


class Runs:
    """Rows into sections; a section's rows lie on consecutive lines, one each, so the chunker's line count
    from the section's first line is the row's line on disk."""

    def __init__(self) -> None:
        self.sections: list[Section] = []
        self.rows: list[str] = []
        self.first = self.last = 0

    def add(self, row: str, first: int, last: int) -> None:
        if self.rows and (first != self.last + 1 or last != first):
            self._flush()
        if not self.rows:
            self.first = first
        self.rows.append(row)
        self.last = last
        if last != first:  # cells with line breaks: a section of its own
            self._flush()

    def done(self) -> list[Section]:
        self._flush()
        return self.sections

    def _flush(self) -> None:
        if self.rows:
            section = Section(text="\n".join(self.rows), kind=SectionKind.TABLE, line_start=self.first,
                              line_end=self.last)
            self.sections.append(section)
        self.rows = []
