"""The CSV/TSV loader: header-carrying rows, their lines on disk, dialects, encodings, limits."""

from __future__ import annotations

import pytest

from funnel.errors import IngestError
from funnel.ingest import table
from funnel.ingest.chunk import chunk_document
from funnel.ingest.table import load_table
from funnel.types import SectionKind


def rows(tmp_path, name: str, data: bytes) -> list[tuple[str, int, int]]:
    path = tmp_path / name
    path.write_bytes(data)
    loaded = load_table(path, "d", name)
    assert loaded.document.kind == "csv" and all(s.kind is SectionKind.TABLE for s in loaded.sections)
    return [(s.text, s.line_start, s.line_end) for s in loaded.sections]


def test_each_row_carries_the_header_and_its_line(tmp_path):
    data = b"name,city,age\nAlice,Seoul,30\nBob,,41\nCarol,Lima,29,extra\n"
    assert rows(tmp_path, "people.csv", data) == [
        ("name: Alice | city: Seoul | age: 30\nname: Bob | age: 41\n"
         "name: Carol | city: Lima | age: 29 | Column 4: extra", 2, 4)]


def test_a_blank_line_or_a_row_with_line_breaks_starts_a_section_at_its_own_line(tmp_path):
    data = b'name,note\na,one\n\nb,"two\nlines"\nc,three\nd,four\n'
    assert rows(tmp_path, "notes.csv", data) == [
        ("name: a | note: one", 2, 2),
        ("name: b | note: two lines", 4, 5),
        ("name: c | note: three\nname: d | note: four", 6, 7),
    ]


@pytest.mark.parametrize(
    ("name", "data", "expected"),
    [
        ("semi.csv", b"a;b\n1;2,5\n", "a: 1 | b: 2,5"),
        ("pipe.csv", b"a|b\n1|2\n", "a: 1 | b: 2"),
        ("tabs.tsv", b"a\tb\n1,5\tx y\n", "a: 1,5 | b: x y"),
        ("quoted.csv", b'id,name\n1,"Smith, John ""JJ"""\n', 'id: 1 | name: Smith, John "JJ"'),
        ("one.csv", b"word\nzebra\n", "word: zebra"),
        ("bom.csv", b"\xef\xbb\xbfname,city\nJos\xc3\xa9,S\xc3\xa3o\n", "name: José | city: São"),
        ("legacy.csv", b"name,city\nJos\xe9,Z\xfcrich\n", "name: José | city: Zürich"),
        ("crlf.csv", b"a,b\r\n1,2\r\n", "a: 1 | b: 2"),
    ],
)
def test_dialects_and_encodings(tmp_path, name, data, expected):
    assert rows(tmp_path, name, data) == [(expected, 2, 2)]


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty file"),
        (b"name,city\n", "no rows under the header"),
        (b"a,b\n1,2\n\x00\x01\x02", "not a text file"),
        (b'a,b\n1,"' + b"x" * 200_000 + b'"\n', "not a readable table (line 2: field larger than field"),
    ],
)
def test_unreadable_tables_are_ingest_errors(tmp_path, data, reason):
    path = tmp_path / "bad.csv"
    path.write_bytes(data)
    with pytest.raises(IngestError, match=reason.replace("(", r"\(")):
        load_table(path, "d", "bad.csv")


def test_a_table_over_the_row_limit_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(table, "MAX_ROWS", 3)
    path = tmp_path / "big.csv"
    path.write_text("n\n1\n2\n3\n")
    assert len(load_table(path, "d", "big.csv").sections) == 1
    path.write_text("n\n1\n2\n3\n4\n")
    with pytest.raises(IngestError, match="more than 3 rows; split it into smaller files"):
        load_table(path, "d", "big.csv")


def test_chunks_keep_the_lines_of_their_rows(tmp_path):
    from funnel.embed.hashing import HashingEmbedder

    path = tmp_path / "cities.csv"
    path.write_text("id,city\n" + "".join(f"{i},City number {i} of many\n" for i in range(1, 401)))
    chunks = chunk_document(load_table(path, "d", "cities.csv"), HashingEmbedder(), max_tokens=64)
    assert len(chunks) > 1 and all(c.kind == "csv" for c in chunks)
    for c in chunks:
        numbers = [int(line.split(" | ")[0].removeprefix("id: ")) for line in c.text.splitlines()[1:]]
        assert (c.line_start, c.line_end) == (numbers[0] + 1, numbers[-1] + 1)  # row id n is on line n + 1
