"""Fuzzing every loader (issue 32): the cases are generated from `LOADERS`, so a row added later is fuzzed
without editing this file.

For each row: random bytes under each of its extensions, its real samples truncated and damaged, and every
other row's sample under its extension (a lying name). The promise is the one of test_reliability_fuzz.py:
a clean load (then chunking), or an `IngestError` (a missing optional dependency's `BackendUnavailable`) in
one line, never another exception, within the time limit. Each input goes both ways funnel takes a file: the
walk (`discover`, whose recognisers see the content first, then the loader it picks) and the row's own
reader (as an upload named so, or a walk trusting the name, would reach it); a text row is not handed NUL
bytes directly, since the walk and uploads refuse those before any loader.

A row's samples are the files under samples/, tests/data/ and bench/data/*/docs/ that it takes, else one
made here for its extension (Office files, a page, a mail, an image), else, for a text row, a few lines of
text. A binary row with none is fuzzed with random and lying content only, and says so in the tally.
"""

from __future__ import annotations

import io
import tempfile
import zipfile
from functools import cache
from pathlib import Path

import pytest
from hypothesis import strategies as st
from damage import damaged
from test_reliability_fuzz import expect_funnel_error, fuzz, one_line

from funnel.analyze.detect import with_language
from funnel.embed import HashingEmbedder
from funnel.errors import BackendUnavailable, IngestError
from funnel.ingest import chunk_document, discover, load
from funnel.ingest.loaders import LOADERS, SNIFF_BYTES, Loader, find, looks_binary
from funnel.ingest.walk import SourceFile

REPO = Path(__file__).resolve().parents[2]
# Every set of real files a benchmark keeps (bench/data/*/docs: formats, hwp, legacy, ...) is a source of
# samples, so a format set added later feeds its loader's row here without an edit.
SAMPLE_DIRS = [REPO / "samples", REPO / "tests" / "data", *sorted((REPO / "bench" / "data").glob("*/docs"))]
MAX_SAMPLE_BYTES = 300_000  # a bigger sample makes every example slow
SAMPLES_PER_ROW = 2
EMBEDDER = HashingEmbedder()


def row_id(row: Loader) -> str:
    return str(row.kind.value)


# --- samples -----------------------------------------------------------------------------------------------


def _docx() -> bytes:
    from docx import Document

    doc = Document()
    doc.add_heading("Travel", 1)
    doc.add_paragraph("The per diem in Tallinn is 45 EUR.")
    table = doc.add_table(rows=2, cols=2)
    table.cell(0, 0).text, table.cell(1, 1).text = "City", "45"
    out = io.BytesIO()
    doc.save(out)
    return out.getvalue()


def _pptx() -> bytes:
    from pptx import Presentation

    deck = Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[1])
    slide.shapes.title.text = "Roadmap"
    slide.placeholders[1].text = "Ship the anvil in May"
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


def _xlsx() -> bytes:
    from openpyxl import Workbook

    book = Workbook()
    sheet = book.active
    sheet.append(["city", "country"])
    sheet.append(["Zanzibar City", "Tanzania"])
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def _epub() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as book:
        book.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        book.writestr("META-INF/container.xml", '<?xml version="1.0"?><container version="1.0" xmlns='
                      '"urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles><rootfile full-path='
                      '"c.opf" media-type="application/oebps-package+xml"/></rootfiles></container>')
        book.writestr("c.opf", '<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version='
                      '"3.0"><metadata/><manifest><item id="a" href="a.xhtml" media-type='
                      '"application/xhtml+xml"/></manifest><spine><itemref idref="a"/></spine></package>')
        book.writestr("a.xhtml", "<html><body><h1>One</h1><p>Chapter one text.</p></body></html>")
    return out.getvalue()


def _png() -> bytes:
    from PIL import Image, ImageDraw

    image = Image.new("L", (240, 60), 255)
    ImageDraw.Draw(image).text((10, 20), "Invoice 1234 paid", fill=0)
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


HTML = b"<html><head><title>T</title></head><body><h1>Shipping</h1><p>The anvil ships.</p></body></html>"
EML = (b"From: a@example.com\r\nTo: b@example.com\r\nSubject: Anvils\r\nContent-Type: text/plain\r\n\r\n"
       b"The anvil ships on Mondays.\r\n")
# Made for an extension when the repository holds no sample a row takes; a maker whose library is missing
# makes nothing.
MAKERS = {".docx": _docx, ".pptx": _pptx, ".xlsx": _xlsx, ".epub": _epub, ".png": _png, ".html": lambda: HTML,
          ".htm": lambda: HTML, ".eml": lambda: EML, ".mbox": lambda: b"From a@b\n" + EML}
TEXT = "Shipping\n\nThe anvil ships on Mondays, city: Tallinn, 45 EUR.\nSecond line; 3, 4, 5\n".encode()


def _owner(path: Path) -> Loader | None:
    try:
        with path.open("rb") as fh:
            head = fh.read(SNIFF_BYTES)
    except OSError:
        return None
    found = find(path, head, path)
    return found[0] if found else None


@cache
def samples() -> dict[str, list[bytes]]:
    """Each row's samples (by its kind), smallest first."""
    found: dict[str, list[Path]] = {row_id(row): [] for row in LOADERS}
    for folder in SAMPLE_DIRS:
        for path in sorted(folder.rglob("*")) if folder.is_dir() else ():
            if path.is_file() and 0 < path.stat().st_size <= MAX_SAMPLE_BYTES and (row := _owner(path)):
                found[row_id(row)].append(path)
    made: dict[str, list[bytes]] = {}
    for row in LOADERS:
        paths = sorted(found[row_id(row)], key=lambda p: p.stat().st_size)[:SAMPLES_PER_ROW]
        raw = [p.read_bytes() for p in paths]
        for suffix in row.extensions if not raw else ():
            try:
                raw += [MAKERS[suffix]()] if suffix in MAKERS else []
            except ImportError:
                pass
        if not raw and not row.binary:
            raw = [TEXT]
        made[row_id(row)] = raw[:SAMPLES_PER_ROW]
    return made


# --- content ------------------------------------------------------------------------------------------------


class Case:
    """One input: the file's extension, how its content was made, and the content (shown short when a case
    fails: a sample's whole bytes would fill the screen)."""

    def __init__(self, suffix: str, how: str, raw: bytes):
        self.suffix, self.how, self.raw = suffix, how, raw

    def __repr__(self) -> str:
        return f"Case({self.suffix!r}, {self.how!r}, {len(self.raw)} bytes: {self.raw[:48]!r}...)"


def cases(row: Loader):
    """Random cases for `row`: any of its extensions, with random bytes, one of its samples damaged, its first
    bytes (a format's signature) then random ones, or any other row's sample."""
    own = samples()[row_id(row)]
    others = [raw for other in LOADERS if other is not row for raw in samples()[row_id(other)]]
    suffixes = st.sampled_from(sorted(row.extensions) or [""])
    made = [st.binary(max_size=3000).map(lambda b: ("random", b))]
    made += [st.sampled_from(own).flatmap(damaged).map(lambda b: ("damaged sample", b)),
             st.tuples(st.sampled_from(own), st.binary(max_size=2000)).map(  # past the recognisers
                 lambda t: ("signature, then random", t[0][:8] + t[1]))] if own else []
    made += [st.sampled_from(others).map(lambda b: ("lying name", b))] if others else []
    return st.builds(lambda suffix, made: Case(suffix, *made), suffixes, st.one_of(made))


def examples(row: Loader) -> list[Case]:
    """Run every time, whatever the randomness: the row's samples whole, nothing, and each other row's
    first sample under its first extension."""
    suffix = next(iter(row.extensions), "")
    own = [Case(suffix, "sample", raw) for raw in samples()[row_id(row)]]
    lying = [Case(suffix, f"lying name ({row_id(other)})", samples()[row_id(other)][0])
             for other in LOADERS if other is not row and samples()[row_id(other)]]
    return [*own, Case(suffix, "empty", b""), *lying]


# --- the check ----------------------------------------------------------------------------------------------


def loaded_or_one_line(source: SourceFile, name: str) -> str:
    """Load and chunk `source` as the indexer does; a FunnelError must be one line and of the kind a loader
    may raise (a file it cannot read, or a missing optional dependency)."""
    try:
        document = with_language(load(source, "doc", name))
        chunk_document(document, EMBEDDER, EMBEDDER.max_tokens)
    except BaseException as e:  # noqa: BLE001
        expect_funnel_error(e)
        assert isinstance(e, (IngestError, BackendUnavailable)), f"{type(e).__name__}: {e}"
        return type(e).__name__
    return "ok"


def check_for(row: Loader):
    def check(case: Case) -> str:
        suffix, how, raw = case.suffix, case.how, case.raw
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / f"file{suffix}"
            path.write_bytes(raw)
            walked = discover([path])  # the recognisers first: the loader the content calls for
            for problem in walked.problems:
                one_line(str(problem))
            for source in walked.files:
                loaded_or_one_line(source, path.name)
            if not row.binary and looks_binary(raw[:SNIFF_BYTES]):
                return f"{how}: refused as binary"  # as the walk and uploads refuse it
            language = row.extensions.get(suffix) if suffix else next(iter(row.file_names.values()), None)
            return f"{how}: {loaded_or_one_line(SourceFile(path, row.kind, language), path.name)}"

    return check


@pytest.mark.parametrize("row", LOADERS, ids=row_id)
def test_every_loader_row(tally, row: Loader):
    made = samples()[row_id(row)]
    target = f"loader {row_id(row)} (random, damaged samples, lying names)" + (
        "" if made else " — no sample: random and lying only")
    fuzz(tally, target, cases(row), check_for(row), short=20, soak=400, examples=examples(row))


def test_every_row_is_fuzzed_from_the_table():
    """The cases come from LOADERS alone; each text row and each known binary format has a sample."""
    assert {row_id(row) for row in LOADERS} <= set(samples())
    for row in LOADERS:
        known = any(suffix in MAKERS for suffix in row.extensions)
        assert samples()[row_id(row)] or (row.binary and not known), f"{row_id(row)} has no sample"
