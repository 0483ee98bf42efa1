"""Ingest: discovery, loaders and the token-aware chunker. Offline; HashingEmbedder is the tokenizer."""

from __future__ import annotations

import errno
import os
import random
import re
import shutil
import sys
from pathlib import Path

import pytest

from funnel.embed import HashingEmbedder
from funnel.errors import BackendUnavailable, IngestError
from funnel.ingest import chunk_document, context_line, discover, load
from funnel.ingest.code import load_code
from funnel.ingest.pdf import load_pdf
from funnel.ingest.text import load_markdown, load_text
from funnel.ingest.walk import NOTHING_FOUND, SourceFile
from funnel.types import Document, LoadedDocument, Section, SectionKind

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "samples"
SAMPLE_PDF = SAMPLES / "docs" / "portfolio_companies.pdf"
_WORD = re.compile(r"\w+")


def write(path: Path, content: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def names(result) -> list[str]:
    return [result.display_path(f) for f in result.files]


def reasons(result) -> dict[str, str]:
    return {Path(p.path).name: p.reason for p in result.problems}


def doc_of(text: str, kind: SectionKind = SectionKind.PROSE, **section) -> LoadedDocument:
    document = Document(doc_id="d", path="dir/file.txt", title="file.txt", kind="text", content_hash="h")
    return LoadedDocument(document=document, sections=(Section(text=text, kind=kind, **section),))


def assert_within_budget(chunks, tokenizer, budget: int) -> None:
    assert chunks
    for chunk in chunks:
        assert chunk.n_tokens == tokenizer.count_tokens(chunk.text)
        assert chunk.n_tokens <= budget, chunk.text


def words(text: str) -> set[str]:
    return set(_WORD.findall(text))


# -- discovery ---------------------------------------------------------------------------------------


def test_gitignore_root_nested_and_negation(tmp_path):
    write(tmp_path / ".gitignore", "*.log\nsecret*\nbuild_out/\n")
    write(tmp_path / "app.py", "x = 1\n")
    write(tmp_path / "debug.log", "noise\n")
    write(tmp_path / "secret_keys.py", "KEY = 1\n")
    write(tmp_path / "build_out" / "gen.py", "y = 2\n")
    write(tmp_path / "pkg" / ".gitignore", "local.py\n!keep.log\n")
    write(tmp_path / "pkg" / "local.py", "z = 3\n")
    write(tmp_path / "pkg" / "mod.py", "w = 4\n")
    write(tmp_path / "pkg" / "keep.log", "kept\n")
    write(tmp_path / "other" / "local.py", "not ignored here\n")

    result = discover([tmp_path])

    assert names(result) == ["app.py", "other/local.py", "pkg/mod.py"]
    assert result.problems == []  # ignored files are skipped silently
    # keep.log is re-included by the nested "!keep.log" but .log is not a loadable type: still absent.


def test_gitignore_of_the_repository_applies_to_a_subfolder(tmp_path):
    (tmp_path / ".git").mkdir()
    write(tmp_path / ".gitignore", "generated_*.py\n")
    write(tmp_path / "src" / "generated_api.py", "x = 1\n")
    write(tmp_path / "src" / "real.py", "y = 2\n")

    assert names(discover([tmp_path / "src"])) == ["real.py"]


def test_a_named_folder_is_never_ignored_by_the_rules_above_it(tmp_path):
    # A dotfiles repository ignoring `.*` and a user naming `~/.local/share/docs` (issue 17, defect 6): the
    # folder the user gave is ingested; hidden names below it are still the repository's business.
    (tmp_path / ".git").mkdir()
    write(tmp_path / ".gitignore", ".*\n!.gitignore\n*.log.md\n")
    docs = tmp_path / ".local" / "share" / "docs"
    write(docs / "guide.md", "# Guide\n\nZebras graze.\n")
    write(docs / ".drafts" / "draft.md", "# Draft\n")
    write(docs / "run.log.md", "# Log\n")
    write(tmp_path / "src" / ".hidden.py", "x = 1\n")
    write(tmp_path / "src" / "real.py", "y = 2\n")

    result = discover([docs])
    # Rules that hide the named folder are overruled by naming it, all of that .gitignore's rules with them.
    assert result.problems == [] and names(result) == [".drafts/draft.md", "guide.md", "run.log.md"]
    assert names(discover([tmp_path / "src"])) == ["real.py"]  # rules that do not hide the folder still apply


def test_a_named_folder_with_nothing_to_ingest_says_so(tmp_path):
    write(tmp_path / "pics" / "a.gif", "not text")
    write(tmp_path / "pics" / "node_modules" / "x.md", "# dependency\n")

    result = discover([tmp_path / "pics"])

    assert result.files == []
    assert [(p.path, p.reason) for p in result.problems] == [(str(tmp_path / "pics"), NOTHING_FOUND)]
    # The types named come from the loaders' table.
    assert NOTHING_FOUND.startswith("nothing to ingest in this folder: no PDF, Markdown, text")
    assert NOTHING_FOUND.endswith(" file that is not ignored (.gitignore, dependency and build folders)")


def test_dependency_and_cache_folders_are_skipped(tmp_path):
    for folder in ("node_modules/lib", ".git", ".venv/lib", "__pycache__", "dist", "build", "vendor/x"):
        write(tmp_path / folder / "skip.py", "x = 1\n")
    write(tmp_path / "src" / "keep.py", "x = 1\n")

    assert names(discover([tmp_path])) == ["src/keep.py"]


def test_binary_files_are_skipped_and_reported(tmp_path):
    write(tmp_path / "logo.gif", b"GIF89a\x01\x00\x01\x00\x00\x00")  # PNG, JPEG and TIFF are read (OCR)
    write(tmp_path / "blob.py", b"print(1)\x00\x01\x02binary")
    write(tmp_path / "ok.py", "print(1)\n")

    result = discover([tmp_path])

    assert names(result) == ["ok.py"]
    assert "binary" in reasons(result)["blob.py"]
    assert "logo.gif" not in reasons(result)  # an image in a tree is expected, not a problem


def test_huge_files_are_skipped_and_reported(tmp_path):
    write(tmp_path / "big.txt", "word " * 1000)
    write(tmp_path / "small.txt", "word\n")

    result = discover([tmp_path], max_bytes=1000)

    assert names(result) == ["small.txt"]
    assert reasons(result)["big.txt"].startswith("too large")
    assert "raise the setting max_file_mb" in reasons(result)["big.txt"]


def test_the_file_size_limit_is_a_setting(tmp_path, monkeypatch):
    from funnel.apps.factory import build_pipeline
    from funnel.apps.settings import Settings

    write(tmp_path / "docs" / "big.txt", "word " * 1000)  # 5 KB
    monkeypatch.setenv("FUNNEL_INGEST__MAX_FILE_MB", "0.001")
    pipeline = build_pipeline(Settings(index=str(tmp_path / "idx"), embedder="hashing", reranker="none"))
    report = pipeline.ingest([tmp_path / "docs"])
    assert report.added == 0 and "max_file_mb" in str(report.problems[0])
    monkeypatch.setenv("FUNNEL_INGEST__MAX_FILE_MB", "0.01")
    pipeline = build_pipeline(Settings(index=str(tmp_path / "idx"), embedder="hashing", reranker="none"))
    assert pipeline.ingest([tmp_path / "docs"]).added == 1


@pytest.mark.skipif(sys.platform == "win32", reason="symlinks need privileges on Windows")
def test_symlink_loop_terminates(tmp_path):
    write(tmp_path / "a" / "one.py", "x = 1\n")
    os.symlink(tmp_path, tmp_path / "a" / "loop_to_root")
    os.symlink(tmp_path / "a", tmp_path / "a" / "self")

    result = discover([tmp_path])

    assert [f.path for f in result.files] == [(tmp_path / "a" / "one.py").resolve()]


def test_nonexistent_path_is_reported(tmp_path):
    write(tmp_path / "a.txt", "here\n")
    result = discover([tmp_path / "nope", tmp_path])
    assert [(p.path, p.reason) for p in result.problems] == [(str(tmp_path / "nope"), "does not exist")]


def test_named_files_report_every_skip(tmp_path):
    data = write(tmp_path / "data.xyz", "hello\n")
    image = write(tmp_path / "photo.gif", b"GIF89a\x01\x00\x01\x00\x00\x00")
    result = discover([data, image])
    assert result.files == []
    assert "unsupported file type" in reasons(result)["data.xyz"]
    assert "binary" in reasons(result)["photo.gif"]


def test_empty_package_markers_are_skipped_but_empty_documents_reach_their_loader(tmp_path):
    write(tmp_path / "pkg" / "__init__.py", "")
    write(tmp_path / "empty.txt", "")
    result = discover([tmp_path])
    assert names(result) == ["empty.txt"]  # load() then raises IngestError("empty file") for it
    with pytest.raises(IngestError, match="empty file"):
        load(result.files[0], "e", "empty.txt")


def test_kinds_languages_and_sorted_order(tmp_path):
    for name in ("z.ts", "b.go", "a.md", "c.txt", "Makefile", "d.rs"):
        write(tmp_path / name, "content\n")
    write(tmp_path / "report.txt", SAMPLE_PDF.read_bytes())  # a PDF with the wrong extension

    result = discover([tmp_path])

    by_name = {f.path.name: (f.kind, f.language) for f in result.files}
    assert by_name == {
        "Makefile": ("code", "make"),
        "a.md": ("markdown", None),
        "b.go": ("code", "go"),
        "c.txt": ("text", None),
        "d.rs": ("code", "rust"),
        "report.txt": ("pdf", None),
        "z.ts": ("code", "typescript"),
    }
    assert [f.path for f in result.files] == sorted(f.path for f in result.files)
    assert all(f.path.is_absolute() for f in result.files)
    disguised = next(f for f in result.files if f.path.name == "report.txt")
    assert any("Zentara" in s.text for s in load(disguised, "r", "report.txt").sections)


def test_a_named_file_is_no_removal_root(tmp_path):
    docs = tmp_path / "docs"
    write(docs / "one.txt", "one\n")
    write(docs / "two.txt", "two\n")
    write(tmp_path / "other" / "three.txt", "three\n")

    one_file = discover([docs / "one.txt"])
    assert [f.path.name for f in one_file.files] == ["one.txt"]
    assert one_file.roots == [docs.resolve()]  # still used to display the file as "one.txt"
    assert one_file.removal_roots == [] and one_file.unlisted == []

    mixed = discover([docs / "one.txt", tmp_path / "other", tmp_path / "other"])
    assert mixed.removal_roots == [(tmp_path / "other").resolve()]

    folder = discover([docs])
    assert folder.removal_roots == [docs.resolve()] and folder.unlisted == []


def test_a_folder_that_cannot_be_listed_is_a_problem_and_unlisted(tmp_path, monkeypatch):
    write(tmp_path / "open" / "a.txt", "a\n")
    locked = tmp_path / "locked"
    write(locked / "b.txt", "b\n")
    real_scandir = os.scandir

    def scandir(path):
        # Root ignores permission bits, so EACCES is raised here rather than with chmod.
        if Path(path) == locked:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_scandir(path)

    with monkeypatch.context() as patch:
        patch.setattr(os, "scandir", scandir)
        result = discover([tmp_path])

    assert names(result) == ["open/a.txt"]
    problems = [(p.path, p.reason) for p in result.problems]
    assert problems == [(str(locked), "cannot list folder (Permission denied)")]
    assert result.unlisted == [locked.resolve()]
    assert result.removal_roots == [tmp_path.resolve()]


@pytest.mark.skipif(sys.platform == "win32" or os.geteuid() == 0, reason="needs POSIX permissions, not root")
def test_unreadable_folder_and_file_with_real_permissions(tmp_path):
    write(tmp_path / "ok.txt", "ok\n")
    locked = tmp_path / "locked"
    write(locked / "b.txt", "b\n")
    secret = write(tmp_path / "secret.txt", "s\n")
    locked.chmod(0)
    secret.chmod(0)
    try:
        result = discover([tmp_path])
    finally:
        locked.chmod(0o755)
        secret.chmod(0o644)

    assert names(result) == ["ok.txt"]
    assert set(result.unlisted) == {locked.resolve(), secret.resolve()}
    assert all("Permission denied" in p.reason for p in result.problems) and len(result.problems) == 2


@pytest.mark.skipif(sys.platform == "win32", reason="symlinks need privileges on Windows")
def test_a_broken_symlink_loop_in_a_folder_is_a_problem_not_an_exception(tmp_path):
    write(tmp_path / "ok.py", "x = 1\n")
    os.symlink(tmp_path / "loop.py", tmp_path / "loop.py")

    result = discover([tmp_path])

    assert names(result) == ["ok.py"]
    assert "Too many levels of symbolic links" in reasons(result)["loop.py"]
    assert result.unlisted == [Path(os.path.abspath(tmp_path / "loop.py"))]


def test_names_too_long_are_problems_not_exceptions(tmp_path):
    too_long = tmp_path / ("a" * 300)
    result = discover([too_long, too_long / "file.txt", tmp_path])
    assert result.files == []
    assert {p.path: p.reason for p in result.problems} == {
        str(too_long): "cannot access (File name too long)",
        str(too_long / "file.txt"): "cannot access (File name too long)",
        str(tmp_path): NOTHING_FOUND,  # an empty folder was named
    }
    assert result.removal_roots == [tmp_path.resolve()]


@pytest.mark.skipif(sys.platform != "linux", reason="builds a path longer than Linux's PATH_MAX with dir_fd")
def test_a_tree_deeper_than_path_max_is_a_problem_not_an_exception(tmp_path):
    write(tmp_path / "top.txt", "top\n")
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        for level in range(24):  # 24 x 202 characters > 4096: only relative to an open folder can it be made
            name = f"{level:02d}" + "d" * 199
            os.mkdir(name, dir_fd=fd)
            inner = os.open(name, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
        leaf = os.open("leaf.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(leaf, b"deep\n")
        os.close(leaf)
    finally:
        os.close(fd)

    try:
        result = discover([tmp_path])
    finally:
        shutil.rmtree(tmp_path / ("00" + "d" * 199))

    assert names(result) == ["top.txt"]
    assert result.problems and all("File name too long" in p.reason for p in result.problems)
    assert result.unlisted and all(p.is_relative_to(tmp_path.resolve()) for p in result.unlisted)


@pytest.mark.skipif(sys.platform == "win32", reason="symlinks need privileges on Windows")
def test_folder_symlinks_out_of_the_named_folder_are_not_followed(tmp_path):
    docs = tmp_path / "docs"
    write(docs / "a.txt", "a\n")
    write(docs / "sub" / "b.txt", "b\n")
    write(tmp_path / "outside" / "secret.txt", "s\n")
    write(tmp_path / "parent.txt", "p\n")
    os.symlink(docs / "sub", docs / "inner")  # inside the root: followed (and de-duplicated)
    os.symlink("..", docs / "up")  # the parent tree
    os.symlink(tmp_path / "outside", docs / "ext")
    os.symlink(tmp_path / "outside" / "secret.txt", docs / "linked.txt")  # nor a file link (issue 17, defect 3)
    os.symlink(docs / "a.txt", docs / "alias.txt")  # a file link inside the root: the same file, once

    result = discover([docs])

    assert sorted(f.path.name for f in result.files) == ["a.txt", "b.txt"]
    assert set(reasons(result)) == {"up", "ext", "linked.txt"}
    assert all("not followed" in r for r in reasons(result).values())
    assert result.unlisted == []

    named = discover([docs / "ext"])  # a symlink the user names is followed
    assert [f.path.name for f in named.files] == ["secret.txt"]
    assert named.removal_roots == [(tmp_path / "outside").resolve()]


def test_sample_repo_honours_its_gitignore():
    result = discover([SAMPLES / "repo"])
    found = names(result)
    assert "app/user_service.py" in found
    # Both are on disk in a full checkout (committed with `git add -f`) and ignored by samples/repo/.gitignore.
    assert "local_settings.py" not in found and "secrets.local" not in found


# -- text and Markdown ------------------------------------------------------------------------------


def test_non_utf8_text_loads(tmp_path):
    path = write(tmp_path / "legacy.txt", "Caf\u00e9 prices rose \u20ac3 in 2024.\n".encode("cp1252"))
    loaded = load_text(path, "d", "legacy.txt")
    assert loaded.sections[0].text == "Caf\u00e9 prices rose \u20ac3 in 2024."


def test_utf8_with_a_bad_byte_is_still_utf8(tmp_path):
    prose = "Gr\u00fc\u00dfe aus M\u00fcnchen \u2014 na\u00efve caf\u00e9 prices.\n" * 20
    raw = prose.encode("utf-8")
    path = write(tmp_path / "mostly.txt", raw[:100] + b"\xff" + raw[100:])
    text = load_text(path, "d", "mostly.txt").sections[0].text
    assert text.count("\ufffd") == 1 and "\u00c3" not in text  # one replacement, no mojibake
    assert text.replace("\ufffd", "") == prose.strip()

    cjk = ("\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3067\u3059\u3002" * 40).encode("utf-8")
    path = write(tmp_path / "cjk.txt", cjk[:60] + b"\x80" + cjk[60:])
    text = load_text(path, "d", "cjk.txt").sections[0].text  # was rejected as binary
    assert text.count("\ufffd") == 1 and text.count("\u65e5\u672c\u8a9e") == 40


def test_ascii_with_a_cp1252_quote_reads_as_cp1252(tmp_path):
    path = write(tmp_path / "quote.txt", b"It" + b"\x92" + b"s plain ASCII otherwise.\n")
    assert load_text(path, "d", "quote.txt").sections[0].text == "It\u2019s plain ASCII otherwise."


def test_utf8_with_many_bad_bytes_falls_back_to_cp1252(tmp_path):
    # One valid UTF-8 sequence cannot outvote a dozen cp1252 accents.
    raw = "\u00e9".encode("utf-8") + " d\u00e9j\u00e0 vu, caf\u00e9.".encode("cp1252") * 6
    text = load_text(write(tmp_path / "legacy.txt", raw), "d", "legacy.txt").sections[0].text
    assert "\ufffd" not in text and text.endswith("d\u00e9j\u00e0 vu, caf\u00e9.")


def test_utf8_bom_and_crlf(tmp_path):
    path = write(tmp_path / "bom.txt", b"\xef\xbb\xbfFirst line\r\nSecond line\r\n")
    section = load_text(path, "d", "bom.txt").sections[0]
    assert section.text == "First line\nSecond line"
    assert (section.line_start, section.line_end) == (1, 2)


def test_binary_with_text_extension_errors_cleanly(tmp_path):
    path = write(tmp_path / "fake.txt", bytes(range(256)) * 20)
    with pytest.raises(IngestError, match=r"not a text file \(binary content\)"):
        load_text(path, "d", "fake.txt")
    no_nul = write(tmp_path / "noisy.txt", bytes(b for b in range(1, 256)) * 20)
    with pytest.raises(IngestError, match="binary content"):
        load_text(no_nul, "d", "noisy.txt")


@pytest.mark.parametrize("content", ["", "   \n\n\t  \n"])
def test_empty_file_errors(tmp_path, content):
    path = write(tmp_path / "empty.md", content)
    with pytest.raises(IngestError, match="empty file"):
        load_markdown(path, "d", "empty.md")
    with pytest.raises(IngestError, match="empty file"):
        load_text(path, "d", "empty.md")


def test_markdown_of_headings_alone_indexes_the_headings(tmp_path):
    source = "# Roadmap\n\n## Phase one: warehouse pilots\n\n### Cold storage\n"
    loaded = load_markdown(write(tmp_path / "outline.md", source), "d", "outline.md")
    assert [(s.kind, s.line_start, s.line_end) for s in loaded.sections] == [(SectionKind.PROSE, 1, 5)]
    assert loaded.sections[0].text == source.strip()
    chunks = chunk_document(loaded, HashingEmbedder())
    assert "Phase one: warehouse pilots" in chunks[0].text and "Cold storage" in chunks[0].text

    setext = load_markdown(write(tmp_path / "setext.md", "Title\n=====\n"), "d", "setext.md")
    assert setext.sections[0].text == "Title\n====="


MARKDOWN = """\
# Guide

Intro paragraph.

## Install

Run the installer.

```bash
# not a heading, a comment inside a fence
pip install thing

echo done
```

### Windows

Use the MSI.

## Models

| Name | Size | |
|------|-----:|---|
| small | 80 MB | fast |
| large | 1.2 GB | |

Setext Heading
--------------

Closing words.
"""


def test_markdown_heading_paths_fences_and_tables(tmp_path):
    path = write(tmp_path / "guide.md", MARKDOWN)
    loaded = load_markdown(path, "g", "docs/guide.md")
    sections = [(s.heading, s.kind, s.line_start, s.line_end) for s in loaded.sections]

    assert sections == [
        ("Guide", SectionKind.PROSE, 3, 3),
        ("Guide > Install", SectionKind.PROSE, 7, 14),
        ("Guide > Install > Windows", SectionKind.PROSE, 18, 18),
        ("Guide > Models", SectionKind.TABLE, 24, 25),
        ("Guide > Setext Heading", SectionKind.PROSE, 30, 30),
    ]
    install = loaded.sections[1].text
    assert "# not a heading" in install and install.endswith("```")
    assert loaded.sections[3].text == "Name: small | Size: 80 MB | Column 3: fast\nName: large | Size: 1.2 GB"
    assert loaded.document.kind == "markdown" and loaded.document.title == "guide.md"
    assert len(loaded.document.content_hash) == 64


def test_markdown_chunks_keep_sections_apart_and_lines_exact(tmp_path):
    path = write(tmp_path / "guide.md", MARKDOWN)
    loaded = load_markdown(path, "g", "guide.md")
    tok = HashingEmbedder()
    chunks = chunk_document(loaded, tok)
    lines = MARKDOWN.split("\n")

    assert [c.heading for c in chunks] == [s.heading for s in loaded.sections]
    install = chunks[1]
    assert install.text.startswith("guide.md > Guide > Install\n")
    assert "pip install thing" in install.text and "echo done" in install.text  # the fence stays whole
    table = chunks[3]
    assert table.section_kind == SectionKind.TABLE
    assert lines[table.line_start - 1].startswith("| small")
    assert lines[table.line_end - 1].startswith("| large")


# -- PDF --------------------------------------------------------------------------------------------


def test_sample_pdf_tables_become_rows_with_headers():
    loaded = load_pdf(SAMPLE_PDF, "p", "portfolio_companies.pdf")
    tables = [s for s in loaded.sections if s.kind == SectionKind.TABLE]

    assert tables and all(s.page is not None for s in loaded.sections)
    rows = [line for s in tables for line in s.text.split("\n")]
    zentara = [line for line in rows if "Company: Zentara Robotics" in line]
    assert len(zentara) == 1 and "CEO: Iris Kallas" in zentara[0]
    assert "Employees: 287" in zentara[0] and "Founded: 2018" in zentara[0]
    assert len(rows) >= 6 and all(line.startswith("Company: ") for line in rows)
    # Table text is not repeated in the prose, and the prose never states a CEO.
    prose = " ".join(s.text for s in loaded.sections if s.kind == SectionKind.PROSE)
    assert "Iris Kallas" not in prose and "Zentara Robotics" in prose
    assert {s.page for s in loaded.sections} == {1, 2, 3}


def test_sample_pdf_chunks_never_span_pages():
    tok = HashingEmbedder(max_tokens=48)
    loaded = load_pdf(SAMPLE_PDF, "p", "portfolio_companies.pdf")
    chunks = chunk_document(loaded, tok)

    assert_within_budget(chunks, tok, 48)
    assert all(c.page is not None and c.line_start is None for c in chunks)
    row = next(c for c in chunks if "CEO: Iris Kallas" in c.text)
    assert row.section_kind == SectionKind.TABLE and row.page == 2
    assert "Company: Zentara Robotics | CEO: Iris Kallas" in row.text
    context = "portfolio_companies.pdf > Annual Portfolio Review 2024 > Portfolio companies"
    assert row.text.startswith(context + "\n")


def build_parts_pdf(path: Path, repeat_header: bool, then: list | None = None) -> Path:
    """Three pages of one ruled table of parts; the header row repeats on each page only if asked."""
    pytest.importorskip("reportlab")
    from reportlab.lib import colors
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import Paragraph, SimpleDocTemplate, Table, TableStyle

    styles = getSampleStyleSheet()
    parts = [(f"P-{i:03d}", f"Supplier {i}", f"{i}.00") for i in range(1, 81)]
    rows = [("Part", "Supplier", "Price"), *parts]
    table = Table(rows, repeatRows=1 if repeat_header else 0)
    table.setStyle(TableStyle([("GRID", (0, 0), (-1, -1), 0.5, colors.grey)]))
    story = [Paragraph("Parts list", styles["Heading2"]), table]
    for item in then or []:
        story.append(Paragraph(item, styles["Heading2"]) if isinstance(item, str) else item)
    SimpleDocTemplate(str(path), pagesize=A4, invariant=1).build(story)
    return path


@pytest.mark.parametrize("repeat_header", [False, True])
def test_pdf_table_continued_over_pages_keeps_its_header(tmp_path, repeat_header):
    path = build_parts_pdf(tmp_path / "parts.pdf", repeat_header)
    loaded = load_pdf(path, "d", "parts.pdf")
    tables = [s for s in loaded.sections if s.kind == SectionKind.TABLE]
    rows = [line for s in tables for line in s.text.split("\n")]

    assert {s.page for s in tables} == {1, 2, 3}  # the table really does run over two page breaks
    assert rows == [f"Part: P-{i:03d} | Supplier: Supplier {i} | Price: {i}.00" for i in range(1, 81)]


def test_pdf_new_table_after_a_heading_on_the_next_page_keeps_its_own_header(tmp_path):
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import PageBreak, Paragraph, Table

    other = Table([("Item", "Vendor", "Cost")] + [(f"I-{i}", f"Vendor {i}", f"{i}") for i in range(3)])
    other.setStyle([("GRID", (0, 0), (-1, -1), 0.5, "grey")])
    # Body text, so the headings stand out from it as headings.
    body = getSampleStyleSheet()["BodyText"]
    note = Paragraph("Consumables are ordered monthly from the approved vendors. " * 3, body)
    path = build_parts_pdf(tmp_path / "two.pdf", False, then=[PageBreak(), "Consumables", other, note])
    loaded = load_pdf(path, "d", "two.pdf")
    last = [s for s in loaded.sections if s.kind == SectionKind.TABLE][-1]
    assert last.heading == "Consumables"
    assert last.text.split("\n")[0] == "Item: I-0 | Vendor: Vendor 0 | Cost: 0"


def test_corrupt_pdf_errors_cleanly(tmp_path):
    path = write(tmp_path / "broken.pdf", os.urandom(4096))
    with pytest.raises(IngestError, match="not a readable PDF"):
        load_pdf(path, "d", "broken.pdf")
    truncated = write(tmp_path / "truncated.pdf", SAMPLE_PDF.read_bytes()[:600])
    with pytest.raises(IngestError):
        load_pdf(truncated, "d", "truncated.pdf")


def test_encrypted_pdf_errors(tmp_path):
    pdfencrypt = pytest.importorskip("reportlab.lib.pdfencrypt")
    from reportlab.pdfgen import canvas

    path = tmp_path / "locked.pdf"
    pdf = canvas.Canvas(str(path), encrypt=pdfencrypt.StandardEncryption("user-pw", ownerPassword="owner-pw"))
    pdf.drawString(100, 700, "confidential numbers")
    pdf.save()

    with pytest.raises(IngestError, match="encrypted PDF"):
        load_pdf(path, "d", "locked.pdf")


def test_pdf_without_text_errors(tmp_path):
    pytest.importorskip("reportlab")
    from reportlab.pdfgen import canvas

    path = tmp_path / "scan.pdf"
    pdf = canvas.Canvas(str(path))
    pdf.rect(100, 100, 300, 300, fill=1)  # what a scanned page looks like to a text extractor
    pdf.save()

    with pytest.raises(IngestError, match="no extractable text"):
        load_pdf(path, "d", "scan.pdf")


def test_missing_pdfplumber_names_the_fix(monkeypatch):
    monkeypatch.setitem(sys.modules, "pdfplumber", None)
    with pytest.raises(BackendUnavailable, match=r"pip install pdfplumber"):
        load_pdf(SAMPLE_PDF, "p", "portfolio_companies.pdf")


# -- code -------------------------------------------------------------------------------------------

PYTHON = '''\
"""Module docstring."""

import os

LIMIT = 3


# The service everyone calls.
class UserService:
    """Users."""

    def __init__(self, repo):
        self.repo = repo

    @property
    def size(self):
        return len(self.repo)
''' + "".join(
    f"""
    def method_{i}(self, user_id):
        value = self.repo.get(user_id)
        return value
"""
    for i in range(5)
) + '''

@decorator
def helper(x):
    return x * 2


if __name__ == "__main__":
    helper(LIMIT)
'''


def test_python_definitions_with_line_spans(tmp_path):
    path = write(tmp_path / "svc.py", PYTHON)
    loaded = load_code(path, "c", "src/svc.py")
    lines = PYTHON.split("\n")
    spans = {s.heading: (s.line_start, s.line_end) for s in loaded.sections}

    assert loaded.document.language == "python"
    assert [s.heading for s in loaded.sections] == [
        None,
        "UserService",
        "UserService.__init__",
        "UserService.size",
        *[f"UserService.method_{i}" for i in range(5)],
        "helper",
        None,
    ]
    assert spans["UserService"][0] == lines.index("# The service everyone calls.") + 1
    assert lines[spans["UserService.size"][0] - 1].strip() == "@property"
    start, end = spans["UserService.method_2"]
    assert lines[start - 1].strip().startswith("def method_2") and lines[end - 1].strip() == "return value"
    start, end = spans["helper"]
    assert (lines[start - 1], lines[end - 1]) == ("@decorator", "    return x * 2")
    for section in loaded.sections:
        assert section.text == "\n".join(lines[section.line_start - 1 : section.line_end])


def test_python_syntax_error_falls_back_to_heuristic(tmp_path):
    source = "def ok():\n    return 1\n\n\ndef broken(:\n    pass\n\nclass Later:\n    x = 1\n"
    loaded = load_code(write(tmp_path / "bad.py", source), "c", "bad.py")
    assert [(s.heading, s.line_start, s.line_end) for s in loaded.sections] == [
        ("ok", 1, 2),
        ("broken", 5, 6),
        ("Later", 8, 9),
    ]


def test_python_too_deep_for_ast_falls_back_to_heuristic(tmp_path):
    source = "x = 1" + " + 1" * 200_000 + "\n\ndef after():\n    return x\n"
    loaded = load_code(write(tmp_path / "generated.py", source), "c", "generated.py")  # RecursionError before
    assert [(s.heading, s.line_start, s.line_end) for s in loaded.sections] == [(None, 1, 1), ("after", 3, 4)]


def test_heuristic_for_other_languages(tmp_path):
    source = """import { db } from "./db";

export class UserService {
  // Finds a user or throws.
  async getUser(id) {
    return db.find(id);
  }
}

export function formatUser(user) {
  return user.name;
}

const toDto = (user) => ({ id: user.id });
"""
    loaded = load_code(write(tmp_path / "user.js", source), "c", "user.js")
    assert loaded.document.language == "javascript"
    headings = [(s.heading, s.line_start) for s in loaded.sections]
    assert headings[0] == (None, 1)
    assert ("UserService", 3) in headings
    assert ("formatUser", 10) in headings and ("toDto", 14) in headings

    go = "package main\n\nfunc (s *UserService) GetUser(id int) (*User, error) {\n\treturn nil, nil\n}\n"
    loaded = load_code(write(tmp_path / "user.go", go), "c", "user.go")
    assert [s.heading for s in loaded.sections] == [None, "UserService.GetUser"]


def test_code_chunks_name_the_symbol_and_path(tmp_path):
    path = write(tmp_path / "svc.py", PYTHON)
    loaded = load_code(path, "c", "src/app/svc.py")
    chunks = chunk_document(loaded, HashingEmbedder())
    method = next(c for c in chunks if c.heading == "UserService.method_1")
    assert method.text.startswith("src/app/svc.py > UserService.method_1\n")
    assert method.language == "python" and method.kind == "code"
    assert method.location == f"L{method.line_start}-{method.line_end}"


# -- chunking ---------------------------------------------------------------------------------------


def test_chunk_metadata_and_context_line():
    tok = HashingEmbedder()
    loaded = doc_of("First sentence here. Second one.", heading="Intro", line_start=4, line_end=4)
    (chunk,) = chunk_document(loaded, tok)
    assert chunk.text == "file.txt > Intro\nFirst sentence here. Second one."
    assert (chunk.chunk_id, chunk.doc_id, chunk.ordinal) == ("d#0", "d", 0)
    assert (chunk.path, chunk.title, chunk.kind) == ("dir/file.txt", "file.txt", "text")
    assert chunk.content_hash == "h"
    assert (chunk.line_start, chunk.line_end, chunk.heading) == (4, 4, "Intro")


def test_long_prose_respects_budget_keeps_everything_and_overlaps():
    sentences = [f"Sentence number {i} talks about topic {i} in some detail." for i in range(60)]
    paragraphs = "\n\n".join(" ".join(sentences[i : i + 6]) for i in range(0, 60, 6))
    tok = HashingEmbedder(max_tokens=40)
    chunks = chunk_document(doc_of(paragraphs, line_start=1, line_end=paragraphs.count("\n") + 1), tok)

    assert_within_budget(chunks, tok, 40)
    assert [c.ordinal for c in chunks] == list(range(len(chunks)))
    assert words(" ".join(c.text for c in chunks)) >= words(paragraphs)
    assert all(c.text.startswith("file.txt\n") for c in chunks)
    # Mid-paragraph cuts repeat the previous sentence; at least one such overlap exists.
    bodies = [c.text.split("\n", 1)[1] for c in chunks]
    assert any(a.split(". ")[-1].rstrip(".") in b.split(". ")[0] for a, b in zip(bodies, bodies[1:]))


def test_one_huge_sentence_is_split_at_token_boundaries():
    text = " ".join(f"word{i}" for i in range(500))
    tok = HashingEmbedder(max_tokens=32)
    chunks = chunk_document(doc_of(text), tok)

    assert_within_budget(chunks, tok, 32)
    found = [w for c in chunks for w in c.text.split("\n", 1)[1].split()]
    assert found == text.split()  # nothing lost, nothing cut inside a word, nothing repeated


def test_table_rows_are_packed_and_a_huge_row_splits_at_cells():
    rows = [f"Company: Co{i} | CEO: Person {i} | Employees: {i * 10}" for i in range(12)]
    huge = " | ".join(f"Metric {i}: value {i}" for i in range(60))
    text = "\n".join(rows[:6] + [huge] + rows[6:])
    tok = HashingEmbedder(max_tokens=30)
    chunks = chunk_document(doc_of(text, kind=SectionKind.TABLE, line_start=10, line_end=22), tok)

    assert_within_budget(chunks, tok, 30)
    bodies = [c.text.split("\n", 1)[1] for c in chunks]
    for row in rows:  # every ordinary row lands whole in exactly one chunk
        assert sum(row in b.split("\n") for b in bodies) == 1
    pieces = [b for b in bodies if "Metric" in b]
    assert len(pieces) > 1
    cells = [cell for piece in pieces for cell in piece.split(" | ")]
    assert cells == huge.split(" | ")  # split only between cells, nothing repeated
    huge_line = 10 + 6
    assert all(c.line_start == huge_line == c.line_end for c in chunks if "Metric" in c.text)


def test_large_code_function_is_split_at_lines(tmp_path):
    body = "".join(f"    total_{i} = compute(value_{i}, factor={i})\n" for i in range(120))
    source = f"def giant(value):\n{body}    return total_0\n"
    loaded = load_code(write(tmp_path / "giant.py", source), "c", "giant.py")
    tok = HashingEmbedder(max_tokens=50)
    chunks = chunk_document(loaded, tok)
    lines = source.split("\n")

    assert_within_budget(chunks, tok, 50)
    assert len(chunks) > 1 and all(c.heading == "giant" for c in chunks)
    for chunk in chunks:
        chunk_body = chunk.text.split("\n", 1)[1]
        assert chunk_body == "\n".join(lines[chunk.line_start - 1 : chunk.line_end])
    assert chunks[0].line_start == 1 and chunks[-1].line_end == 122


class ChunkyTokenizer:
    """A sub-word tokenizer stand-in: 3-character pieces, and every newline and '|' is a token too.

    A chunk's final text counts more than the sum of its parts here; only the re-count keeps it in budget.
    """

    max_tokens = 24
    _TOKEN = re.compile(r"\w{1,3}|[^\w\s]|\n")

    def token_offsets(self, text: str) -> list[tuple[int, int]]:
        return [m.span() for m in self._TOKEN.finditer(text)]

    def count_tokens(self, text: str) -> int:
        return len(self.token_offsets(text))


@pytest.mark.parametrize("budget", [3, 5, 8, 24])
def test_budget_holds_for_a_subword_tokenizer_and_tiny_budgets(budget):
    tok = ChunkyTokenizer()
    text = "Alpha beta gamma.\nDelta epsilon | zeta eta.\n\nTheta iota kappa lambda mu nu xi omicron pi rho."
    for kind in SectionKind:
        loaded = doc_of(text, kind=kind, heading="A rather long heading path")
        chunks = chunk_document(loaded, tok, max_tokens=budget)
        assert_within_budget(chunks, tok, budget)


def test_random_texts_keep_budget_and_lose_nothing():
    """Property check over random texts, kinds, budgets and both tokenizers (fixed seed)."""
    rng = random.Random(7)
    vocab = ["alpha", "Beta", "deltaepsilonzeta", "x", "1.5", "e.g.", "Dr.", "|", "```", "-", "::", "\u00fc"]
    separators = [" ", " ", ". ", "\n", "\n\n", " | ", ", "]
    for _ in range(400):
        text = "".join(rng.choice(vocab) + rng.choice(separators) for _ in range(rng.randint(1, 120))).strip()
        tok = rng.choice([HashingEmbedder(), ChunkyTokenizer()])
        budget = rng.randint(1, 50)
        loaded = doc_of(text, kind=rng.choice(list(SectionKind)), heading=rng.choice([None, "A > B"]))
        chunks = chunk_document(loaded, tok, max_tokens=budget, overlap_sentences=0)
        assert_within_budget(chunks, tok, budget)
        # The context line may be cut short to fit a tiny budget: drop whatever part of it leads a chunk.
        prefix = context_line(loaded.document, loaded.sections[0])
        bodies = []
        for chunk in chunks:
            first, _, rest = chunk.text.partition("\n")
            bodies.append(rest if first and prefix.startswith(first) else chunk.text)
        squeeze = lambda s: re.sub(r"[\s|]", "", s)  # noqa: E731 - separators may fall between chunks
        assert squeeze("".join(bodies)) == squeeze(text)


def test_default_budget_is_the_tokenizers():
    tok = HashingEmbedder(max_tokens=16)
    chunks = chunk_document(doc_of("word " * 100), tok)
    assert_within_budget(chunks, tok, 16)


def test_every_sample_loads_and_chunks_within_budget():
    result = discover([SAMPLES / "docs", SAMPLES / "repo"])
    assert result.problems == []
    kinds = {f.kind for f in result.files}
    assert kinds == {"pdf", "markdown", "text", "code", "docx"}
    tok = HashingEmbedder(max_tokens=64)
    for source in result.files:
        display = result.display_path(source)
        chunks = chunk_document(load(source, display, display), tok)
        assert_within_budget(chunks, tok, 64)
        assert [c.chunk_id for c in chunks] == [f"{display}#{i}" for i in range(len(chunks))]


def test_load_dispatches_on_kind(tmp_path):
    path = write(tmp_path / "notes.txt", "Some notes.\n")
    loaded = load(SourceFile(path=path, kind="text"), "n", "notes.txt")
    assert loaded.document.kind == "text"
    module = write(tmp_path / "m.py", "x = 1\n")
    code = load(SourceFile(path=module, kind="code", language="python"), "m", "m.py")
    assert code.document.language == "python"
