"""Every file of an ingested folder is accounted for (issue 32): ingested, skipped with its reason, or counted
as not a document type, by extension. Ignored and hidden files stay out of the count, as code trees expect."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from funnel.apps.watch import describe
from funnel.indexer import IngestReport, by_extension
from funnel.ingest import loaders
from funnel.ingest.loaders import LOADERS, Loader, SizeLimit, zip_holding
from funnel.ingest.walk import discover
from funnel.types import Kind

FUNNEL = [sys.executable, "-c", "from funnel.apps.cli import run; run()"]


def write(path: Path, content: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    return path


@pytest.fixture
def folder(tmp_path) -> Path:
    """A folder a person keeps: notes, recordings, an archive; and what a code tree holds, nobody reads."""
    docs = tmp_path / "docs"
    write(docs / "guide.md", "# Guide\n\nThe anvil ships on Mondays.\n")
    for name in ("a.mp3", "b.MP3", "music/c.mp3"):  # no loader will take sound (an image is OCR'd now)
        write(docs / name, b"ID3\x03\x00\x00\x00")
    write(docs / "old.zip", b"PK\x05\x06" + b"\x00" * 18)
    write(docs / ".DS_Store", b"\x00\x00\x00\x01Bud1")  # hidden: nobody expects it indexed
    write(docs / "node_modules" / "lib" / "beep.mp3", b"ID3")  # a dependency folder: ignored
    write(docs / "build" / "out.o", b"\x7fELF")  # a build folder: ignored
    write(docs / ".gitignore", "*.bin\nscratch/\n")
    write(docs / "weights.bin", b"\x00" * 16)  # .gitignore'd
    write(docs / "scratch" / "take.wav", b"RIFF")  # under a .gitignore'd folder
    return docs


def test_a_walk_counts_the_files_no_loader_takes_by_extension(folder):
    result = discover([folder])
    assert [f.path.name for f in result.files] == ["guide.md"]
    assert result.problems == []  # a picture in a folder is no problem ...
    assert dict(result.unsupported) == {".mp3": 3, ".zip": 1}  # ... but it is not dropped without a word


def test_a_named_file_is_a_problem_not_a_count(folder):
    result = discover([folder / "a.mp3"])
    assert [p.reason for p in result.problems] == ["binary file"] and not result.unsupported


def test_a_docx_is_listed_until_a_loader_row_takes_it(tmp_path, monkeypatch):
    """The list comes from the loaders' table: a new row removes its extensions from it, no other edit."""
    entries = (("[Content_Types].xml", b"<Types/>"), ("word/document.xml", b"<w:document/>"))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name, data in entries:
            archive.writestr(name, data)
    write(tmp_path / "memo.docx", out.getvalue())
    write(tmp_path / "notes.txt", "some notes\n")
    without = tuple(row for row in LOADERS if ".docx" not in row.extensions)
    monkeypatch.setattr(loaders, "LOADERS", without)
    result = discover([tmp_path])
    assert dict(result.unsupported) == {".docx": 1} and [f.path.name for f in result.files] == ["notes.txt"]

    word = Loader(Kind("worddoc"), "Word document", {".docx": None}, "application/octet-stream",
                  lambda *args: None, binary=True, limit=SizeLimit.DOCUMENT,
                  recognise=zip_holding("[Content_Types].xml", "word/document.xml"), mark="a Word document")
    monkeypatch.setattr(loaders, "LOADERS", (*without, word))
    result = discover([tmp_path])
    assert not result.unsupported
    assert [(f.path.name, f.kind) for f in result.files] == [("memo.docx", "worddoc"), ("notes.txt", "text")]


def test_the_summary_lists_extensions_most_common_first():
    report = IngestReport(unsupported={".zip": 1, ".png": 3, "": 1})
    listed = "(.png ×3, (no extension) ×1, .zip ×1)"
    assert report.not_documents() == f"not a document type 5, by extension {listed}"
    assert IngestReport().not_documents() == ""
    many = {f".x{i}": 1 for i in range(12)}
    assert by_extension(many).endswith(", 4 more types")
    assert describe(report).endswith("0 skipped; not a document type 5, by extension (.png ×3, "
                                     "(no extension) ×1, .zip ×1)")
    assert describe(IngestReport()).endswith("0 skipped")  # the watcher's line, as before without any
    data = report.to_json()
    assert data["not_a_document_type"] == {"files": 5, "by_extension": {".zip": 1, ".png": 3, "": 1}}


def test_the_ingest_report_carries_the_count(folder, tmp_path):
    import funnel

    pipeline = funnel.open(tmp_path / "index", embedder="hashing", reranker="none")
    report = pipeline.ingest([folder])
    assert report.added == 1 and report.problems == []
    assert report.unsupported == {".mp3": 3, ".zip": 1}


def funnel_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "FUNNEL_EMBEDDER": "hashing", "FUNNEL_RERANK__BACKEND": "none"}
    return subprocess.run([*FUNNEL, *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=120)


def test_funnel_ingest_ends_with_the_summary_and_json_has_it(folder, tmp_path):
    write(folder / "broken.pdf", b"not a pdf")  # skipped, with its reason
    result = funnel_cli("ingest", str(folder), "--no-calibrate", cwd=tmp_path)
    assert result.returncode == 1, result.stderr  # a skipped file still fails the command; a picture does not
    assert "broken.pdf: not a PDF" in result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[0].startswith("1 added, 0 updated, 0 unchanged, 0 removed, 1 skipped;")
    assert lines[1] == "not a document type 4, by extension (.mp3 ×3, .zip ×1)"
    for quiet in ("node_modules", "out.o", "weights.bin", "take.wav", ".DS_Store", ".o ", ".bin", ".wav"):
        assert quiet not in result.stdout + result.stderr

    (folder / "broken.pdf").unlink()
    as_json = funnel_cli("ingest", str(folder), "--no-calibrate", "--json", cwd=tmp_path)
    assert as_json.returncode == 0, as_json.stderr
    data = json.loads(as_json.stdout)
    assert data["unchanged"] == 1 and data["skipped"] == []
    assert data["not_a_document_type"] == {"files": 4, "by_extension": {".mp3": 3, ".zip": 1}}
    refused = funnel_cli("ingest", str(folder), "--json", "--watch", cwd=tmp_path)
    assert refused.returncode == 2 and "--watch" in refused.stderr


def test_an_icon_in_a_folder_is_counted_not_read(tmp_path):
    from PIL import Image

    from funnel.ingest.walk import discover

    folder = tmp_path / "repo"
    folder.mkdir()
    Image.new("RGB", (32, 32), "white").save(folder / "favicon.png")  # an icon: no page of text
    Image.new("L", (1200, 1600), 255).save(folder / "page.png")  # a page-sized image: read (OCR)
    found = discover([folder])
    assert [f.path.name for f in found.files] == ["page.png"]
    assert found.problems == [] and dict(found.unsupported) == {".png": 1}
    named = discover([folder / "favicon.png"])  # named on its own, it is read
    assert [f.path.name for f in named.files] == ["favicon.png"]
