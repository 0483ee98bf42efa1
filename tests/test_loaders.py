"""The loaders' table is the one place a file type is declared: discovery, uploads and the web page agree."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest

from funnel.apps.api.errors import UnsupportedType
from funnel.apps.api.uploads import KINDS, MEDIA_TYPES, Upload, check
from funnel.apps.watch import ChangeFilter
from funnel.ingest import load
from funnel.ingest.loaders import (
    BY_KIND, LOADERS, UPLOADABLE, Probe, by_name, classify, find, upload_accept,
    upload_extensions, zip_holding, zip_mimetype,
)
from funnel.ingest.walk import NOTHING_FOUND, FileLimits, SourceFile, discover
from funnel.types import Chunk, Document, Kind

WORD = zip_holding("[Content_Types].xml", "word/document.xml")
EPUB = zip_mimetype("application/epub+zip")


def zip_bytes(*entries: tuple[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name, data in entries:
            archive.writestr(name, data, compress_type=zipfile.ZIP_STORED)
    return out.getvalue()


PLAIN_ZIP = zip_bytes(("notes.txt", b"hello"), ("more/readme.md", b"# hi"))
WORD_ZIP = zip_bytes(("[Content_Types].xml", b"<Types/>"), ("word/document.xml", b"<w:document/>"))
EPUB_ZIP = zip_bytes(("mimetype", b"application/epub+zip"), ("META-INF/container.xml", b"<container/>"))


def test_every_kind_but_a_dataset_record_has_one_loader():
    assert [loader.kind for loader in LOADERS][:4] == [Kind.PDF, Kind.MARKDOWN, Kind.TEXT, Kind.CODE]
    assert set(Kind) - {Kind.RECORD} <= set(BY_KIND) and len(BY_KIND) == len(LOADERS)
    assert all(f"{loader.kind}" == loader.kind.value for loader in LOADERS)


@pytest.mark.parametrize(
    ("name", "head", "expected"),
    [
        ("a.pdf", b"", (Kind.PDF, None)),
        ("notes.TXT", b"hello", (Kind.TEXT, None)),
        ("guide.mkd", b"# hi", (Kind.MARKDOWN, None)),
        ("svc.py", b"x = 1", (Kind.CODE, "python")),
        ("Dockerfile", b"FROM x", (Kind.CODE, "dockerfile")),
        ("scan.txt", b"%PDF-1.7\n", (Kind.PDF, None)),  # the content wins over the name
        ("pdf-notes.md", b"# PDF headers\nEvery file starts with %PDF-1.7", (Kind.MARKDOWN, None)),  # a mention
        ("framed.pdf", b"junk before the header %PDF-1.4", (Kind.PDF, None)),  # within the first KB
        ("late.pdf", b" " * 2000 + b"%PDF-1.4", None),  # named a PDF, and it is none
        ("photo.png", b"\x89PNG", None),
    ],
)
def test_classify_reads_the_table(name, head, expected):
    assert classify(Path(name), head) == expected


def test_a_plain_zip_named_docx_is_recognised_as_nothing(tmp_path):
    path = tmp_path / "report.docx"
    path.write_bytes(PLAIN_ZIP)
    assert find(path, PLAIN_ZIP[:8192], path) is None
    reasons = [p.reason for p in discover([path]).problems]
    assert reasons == [f"not a Word document: its content lacks {WORD_MARK}"]


def test_zip_recognisers_look_inside_the_zip(tmp_path):
    for data, word, epub in [(PLAIN_ZIP, False, False), (WORD_ZIP, True, False), (EPUB_ZIP, False, True)]:
        path = tmp_path / "x.zip"
        path.write_bytes(data)
        by_path, by_file = Probe(data[:8192], path, path), Probe(data[:8192], path, io.BytesIO(data))
        assert (WORD(by_path), WORD(by_file), EPUB(by_path)) == (word, word, epub)
    assert not WORD(Probe(WORD_ZIP[:8192], Path("x.docx")))  # the name alone says nothing
    assert not WORD(Probe(b"PK\x03\x04 truncated", Path("x.docx"), io.BytesIO(b"PK\x03\x04 truncated")))


def test_a_zip_is_listed_once_however_many_rows_ask(tmp_path, monkeypatch):
    import funnel.ingest.loaders as loaders

    opened = []
    real = zipfile.ZipFile
    monkeypatch.setattr(loaders.zipfile, "ZipFile", lambda *a, **k: opened.append(a) or real(*a, **k))
    for data, kind in [(PLAIN_ZIP, None), (WORD_ZIP, Kind("docx"))]:
        opened.clear()
        path = tmp_path / "x.zip"
        path.write_bytes(data)
        found = find(path, data[:8192], path)
        assert (found[0].kind if found else None) == kind
        assert len(opened) == 1  # Word, PowerPoint and Excel each look for their parts in one listing


WORD_MARK = BY_KIND[Kind("docx")].mark  # the Word loader's row (issue 32), binary and zip-based


def test_a_zip_format_row_takes_its_zips_and_no_other(tmp_path):
    (tmp_path / "real.docx").write_bytes(WORD_ZIP + b"\x00" * 10)  # NUL bytes: binary, and that is fine
    (tmp_path / "plain.docx").write_bytes(PLAIN_ZIP)
    (tmp_path / "misnamed.zip").write_bytes(WORD_ZIP)
    result = discover([tmp_path])
    assert [(f.path.name, f.kind) for f in result.files] == [("real.docx", "docx")]
    reasons = {Path(p.path).name: p.reason for p in result.problems}
    assert reasons == {"plain.docx": f"not a Word document: its content lacks {WORD_MARK}"}
    named = discover([tmp_path / "misnamed.zip"])  # the content wins over the name
    assert [(f.path.name, f.kind) for f in named.files] == [("misnamed.zip", "docx")]


def test_a_binary_loader_is_not_refused_by_the_nul_check_and_takes_its_size_class(tmp_path):
    (tmp_path / "big.docx").write_bytes(WORD_ZIP + b"\x00" * 5000)
    (tmp_path / "big.txt").write_bytes(b"words " * 1000)
    result = discover([tmp_path], limits=FileLimits(max_bytes=1000, max_pdf_bytes=100_000))
    assert [f.path.name for f in result.files] == ["big.docx"]  # the document limit, not max_file_mb
    assert [Path(p.path).name for p in result.problems] == ["big.txt"]
    (tmp_path / "nul.txt").write_bytes(b"words\x00\x00 and more")  # a text loader still refuses NULs
    assert [p.reason for p in discover([tmp_path / "nul.txt"]).problems] == [
        "binary file (NUL bytes in the first 8 KB)"]


def test_walk_reports_unknown_types_as_before(tmp_path):
    (tmp_path / "data.xyz").write_text("hello\n")
    (tmp_path / "photo.webp").write_bytes(b"RIFF\x00\x00\x00\x00WEBPVP8 ")  # PNG, JPEG, TIFF are read (OCR)
    (tmp_path / "fake.pdf").write_bytes(b"not a pdf at all")
    named = discover([tmp_path / "data.xyz", tmp_path / "photo.webp", tmp_path / "fake.pdf"])
    assert {Path(p.path).name: p.reason for p in named.problems} == {
        "data.xyz": "unsupported file type '.xyz'", "photo.webp": "binary file",
        "fake.pdf": "not a PDF: its content lacks a %PDF- header in its first 1024 bytes"}
    walked = discover([tmp_path])  # in a folder an unknown type is expected; a false PDF is still said
    assert walked.files == [] and [Path(p.path).name for p in walked.problems] == ["fake.pdf"]
    assert all(loader.label in NOTHING_FOUND for loader in LOADERS)


def test_the_watcher_follows_every_type_a_loader_takes(tmp_path):
    watch = ChangeFilter([tmp_path])
    for name in ("a.md", "b.pdf", "c.docx"):
        (tmp_path / name).write_bytes(b"x")
        assert watch.relevant([str(tmp_path / name)]) == (by_name(Path(name)) is not None), name
    (tmp_path / "d.gif").write_bytes(b"x")
    assert not watch.relevant([str(tmp_path / "d.gif")])


def upload_of(name: str, data: bytes) -> Upload:
    return Upload(name, io.BytesIO(data), len(data))


def test_uploads_check_by_name_and_content():
    assert check(upload_of("a.pdf", b"junk %PDF-1.4 ..."), 10_000) == ("a.pdf", Kind.PDF)
    assert check(upload_of("pdf-notes.md", b"# x\nEvery PDF starts with %PDF-1.7"), 10_000)[1] is Kind.MARKDOWN
    with pytest.raises(UnsupportedType, match="fake.pdf is not a PDF: its content lacks a %PDF- header"):
        check(upload_of("fake.pdf", b"not a pdf"), 10_000)
    with pytest.raises(UnsupportedType, match="is a PDF named as text; upload it with a .pdf name"):
        check(upload_of("scan.txt", b"%PDF-1.4\n"), 10_000)


def test_the_415_message_lists_every_uploadable_extension():
    with pytest.raises(UnsupportedType) as refused:
        check(upload_of("report.key", PLAIN_ZIP), 10_000)
    message = str(refused.value)
    assert message.startswith("report.key: unsupported file type ('.key'); upload PDF (.pdf), ")
    assert all(suffix in message for suffix in upload_extensions()) and ".rst" in message


def test_uploads_and_the_web_page_take_what_the_uploadable_loaders_declare():
    assert set(KINDS) == set(upload_extensions()) == {s for loader in UPLOADABLE for s in loader.extensions}
    assert set(MEDIA_TYPES) == {loader.kind for loader in UPLOADABLE} >= {Kind.PDF, Kind.MARKDOWN, Kind.TEXT}
    accept = upload_accept().split(",")
    assert ".pdf" in accept and ".md" in accept and "text/plain" in accept and ".py" not in accept
    assert set(upload_extensions()) <= set(accept)


def test_the_served_web_page_carries_the_accept_list(tmp_path):
    from fastapi.testclient import TestClient

    from funnel.apps.api import create_app
    from funnel.apps.settings import Settings

    settings = Settings(embedder="hashing", data_dir=tmp_path / "data", index=tmp_path / "index",
                        incidents=tmp_path / "incidents.sqlite")
    with TestClient(create_app(settings)) as client:
        page = client.get("/").text
    assert f'accept="{upload_accept()}"' in page and "{upload_accept}" not in page


def test_kind_is_a_string_in_rows_and_json():
    chunk = Chunk(chunk_id="d#0", doc_id="d", ordinal=0, text="t", path="p", title="p", kind="code",
                  n_tokens=1)
    assert chunk.kind is Kind.CODE and chunk.kind == "code" and f"{chunk.kind}" == "code"
    assert Document(doc_id="d", path="p", title="p", kind="pdf", content_hash="").kind is Kind.PDF


def test_a_loader_name_is_a_kind_without_a_member():
    made = Document(doc_id="d", path="p", title="p", kind="worddoc", content_hash="").kind
    assert made is Kind("worddoc") and made == "worddoc" and f"{made}" == "worddoc" and made not in list(Kind)
    with pytest.raises(ValueError):
        Kind("Not a name")


def test_an_unknown_kind_is_a_config_error(tmp_path):
    from funnel.errors import ConfigError

    expected = ", ".join(loader.kind.value for loader in LOADERS[:-1]) + f" or {LOADERS[-1].kind}"
    with pytest.raises(ConfigError, match=f"expected {expected}"):
        load(SourceFile(path=tmp_path / "x", kind="record"), "x", "x")


# --- a format added as a module and one row: CSV/TSV (funnel/ingest/table.py) ---------------------------------

CITIES = "city,country,founded\n" + "".join(f"Town {i},Country {i},{1800 + i}\n" for i in range(1, 200)) + (
    "Zanzibar City,Tanzania,1830\n")


def test_a_csv_is_ingested_and_a_search_finds_its_row_with_the_header(tmp_path):
    import funnel

    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "cities.csv").write_text(CITIES)
    pipeline = funnel.open(tmp_path / "index", embedder="hashing", reranker="none")
    report = pipeline.ingest([tmp_path / "docs"])
    assert report.added == 1 and not report.problems
    best = pipeline.search("Zanzibar").documents[0].best.chunk
    assert best.kind == "csv" and best.title == "cities.csv"
    assert "city: Zanzibar City | country: Tanzania | founded: 1830" in best.text
    assert best.line_end == 201  # its line on disk: the header is line 1, Town 1 line 2


@pytest.mark.slow  # a server on loopback, as the other HTTP tests
def test_a_csv_upload_over_http_is_accepted_searched_and_served_back(tmp_path):
    import httpx
    from api_support import upload, wait_done
    from helpers import serving

    from funnel.apps.api import create_app
    from funnel.apps.settings import Settings

    app = create_app(Settings(embedder="hashing", data_dir=tmp_path / "data", reranker="none"))
    with serving(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        response = upload(client, "default", [("cities.csv", CITIES.encode("utf-8-sig"))])
        assert response.status_code == 202, response.text
        (doc,) = wait_done(client, "default")
        assert doc["status"] == "ready" and doc["kind"] == "csv" and doc["chunks"] > 0, doc
        hits = client.post("/v1/collections/default/search", json={"query": "Zanzibar"}).json()["results"]
        assert hits[0]["path"] == "cities.csv"
        served = client.get(f"/v1/collections/default/documents/{doc['id']}/file")
        assert served.headers["content-type"].startswith("text/csv")
        refused = upload(client, "default", [("cities.numbers", b"PK\x03\x04")])  # Apple Numbers: not read
        assert refused.status_code == 415
        assert "CSV (.csv, .tsv)" in refused.json()["detail"]
        assert all(suffix in refused.json()["detail"] for suffix in upload_extensions())
