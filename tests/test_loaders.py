"""The loaders' table is the one place a file type is declared: discovery, uploads and the web page agree."""

from __future__ import annotations

from pathlib import Path

import pytest

from funnel.apps.api.uploads import KINDS, MEDIA_TYPES
from funnel.ingest import load
from funnel.ingest.loaders import BY_KIND, LOADERS, UPLOADABLE, classify, sniff, upload_accept
from funnel.ingest.walk import SourceFile
from funnel.types import Chunk, Document, Kind


def test_every_kind_but_a_dataset_record_has_one_loader():
    assert [loader.kind for loader in LOADERS] == [Kind.PDF, Kind.MARKDOWN, Kind.TEXT, Kind.CODE]
    assert set(BY_KIND) == set(Kind) - {Kind.RECORD}


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
        ("photo.png", b"\x89PNG", None),
    ],
)
def test_classify_reads_the_table(name, head, expected):
    assert classify(Path(name), head) == expected


def test_an_upload_named_pdf_may_carry_junk_before_its_header():
    assert sniff(b"junk before the header %PDF-1.4") is Kind.PDF  # within the first KB, as PDF readers allow
    assert sniff(b" " * 2000 + b"%PDF-1.4") is None
    assert sniff(b"plain text") is None


def test_uploads_and_the_web_page_take_what_the_uploadable_loaders_declare():
    assert set(KINDS) == {suffix for loader in UPLOADABLE for suffix in loader.extensions}
    assert set(MEDIA_TYPES) == {Kind.PDF, Kind.MARKDOWN, Kind.TEXT}
    accept = upload_accept().split(",")
    assert ".pdf" in accept and ".md" in accept and "text/plain" in accept and ".py" not in accept


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


def test_an_unknown_kind_is_a_config_error(tmp_path):
    from funnel.errors import ConfigError

    with pytest.raises(ConfigError, match="expected pdf, markdown, text or code"):
        load(SourceFile(path=tmp_path / "x", kind="record"), "x", "x")
