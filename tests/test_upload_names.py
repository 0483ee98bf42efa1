"""Upload names keep their characters in any script (issue 31), and stay safe to store: unit checks of
`safe_filename`, then uploads over real loopback HTTP (HashingEmbedder: fast)."""

from __future__ import annotations

import unicodedata
from urllib.parse import unquote

import httpx
import pytest
from api_support import upload, wait_done
from helpers import serving

from funnel.apps.api import create_app
from funnel.apps.api.uploads import MAX_NAME_BYTES, MAX_NAME_CHARS, safe_filename
from funnel.apps.settings import Settings


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("회의 메모.md", "회의 메모.md"),
        ("Übersicht Straße 2026.txt", "Übersicht Straße 2026.txt"),
        ("会議メモ（第2回）.md", "会議メモ（第2回）.md"),
        ("отчёт за май.TXT", "отчёт за май.txt"),
        ("تقرير الميزانية.md", "تقرير الميزانية.md"),
        ("บันทึกการประชุม.md", "บันทึกการประชุม.md"),
        ("résumé, v2 (final) #3 & more.md", "résumé, v2 (final) #3 & more.md"),
        ("\U0001f469\u200d\U0001f4bb notes.md", "\U0001f469\u200d\U0001f4bb notes.md"),
    ],
)
def test_names_keep_their_characters(given, stored):
    assert safe_filename(given) == stored


def test_a_decomposed_name_is_stored_composed():
    # A Mac sends "회의 메모.md" as jamo and "Übersicht" with a combining diaeresis; both are shown as typed.
    assert safe_filename(unicodedata.normalize("NFD", "회의 메모.md")) == "회의 메모.md"
    assert safe_filename("U\u0308bersicht.txt") == "\u00dcbersicht.txt"
    assert safe_filename("na\u0308me.txt") == "n\u00e4me.txt"


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("../../etc/비밀.txt", "비밀.txt"),
        ("C:\\Users\\me\\회의 메모.MD", "회의 메모.md"),
        ("/abs/path/report.md", "report.md"),
        ("..", "upload"),
        (".숨김.txt", "숨김.txt"),
        ("a\x00b\x1fc\x7f.txt", "a_b_c.txt"),
        ("line\u2028break.txt", "line_break.txt"),
        ("invoice\u202eexe.txt", "invoice_exe.txt"),  # a bidi override would show the name reversed
        ('we|rd*na:me?<>".md', "we_rd_na_me.md"),
        ("CON.md", "_CON.md"),
        ("nul.tar.md", "_nul.tar.md"),
        ("Lpt1 .txt", "_Lpt1.txt"),
        ("CONSOLE.md", "CONSOLE.md"),
        ("회의\ud800.md", "회의.md"),  # a lone surrogate cannot be written as UTF-8
    ],
)
def test_path_tricks_and_unsafe_characters_are_still_refused(given, stored):
    assert safe_filename(given) == stored


def test_long_names_fit_in_bytes_and_are_not_cut_inside_a_character():
    korean = safe_filename("가" * 200 + ".md")
    assert korean.endswith(".md") and len(korean.encode()) <= MAX_NAME_BYTES
    assert set(korean[:-3]) == {"가"} and len(korean) <= MAX_NAME_CHARS
    accents = safe_filename("q\u0301" * 100 + ".txt")  # no composed form: two code points a character
    assert len(accents.encode()) <= MAX_NAME_BYTES and len(accents) <= MAX_NAME_CHARS
    assert accents == "q\u0301" * ((len(accents) - 4) // 2) + ".txt"
    assert safe_filename("x" * 500 + ".md") == "x" * 117 + ".md"


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    app = create_app(Settings(embedder="hashing", data_dir=tmp_path_factory.mktemp("names") / "data"))
    with serving(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        yield client


def test_uploads_are_stored_and_shown_under_their_own_names(client):
    client.post("/v1/collections", json={"name": "names"})
    given = ["회의 메모.md", "Übersicht Straße 2026.txt", unicodedata.normalize("NFD", "회의 메모.md")]
    files = [(name, f"# 메모\n\n재무팀장의 별도 승인이 필요하다 {i}.".encode()) for i, name in enumerate(given)]
    response = upload(client, "names", files)
    assert response.status_code == 202, response.text
    # The third is the first's name as a Mac writes it: one name, so it is numbered.
    assert [d["filename"] for d in response.json()] == [
        "회의 메모.md", "Übersicht Straße 2026.txt", "회의 메모 (2).md"
    ]
    docs = {d["filename"]: d for d in wait_done(client, "names")}
    assert sorted(docs) == ["Übersicht Straße 2026.txt", "회의 메모 (2).md", "회의 메모.md"]
    assert {d["status"] for d in docs.values()} == {"ready"}

    first = client.get(f"/v1/collections/names/documents/{docs['회의 메모.md']['id']}/file")
    assert first.status_code == 200 and "재무팀장의 별도 승인이 필요하다 0." in first.text
    assert "회의 메모.md" in unquote(first.headers["content-disposition"])


def test_a_long_korean_name_is_stored(client):
    client.post("/v1/collections", json={"name": "long"})
    response = upload(client, "long", [("가나다라" * 60 + ".txt", "본문입니다.".encode())])
    assert response.status_code == 202, response.text
    (doc,) = response.json()
    assert doc["filename"].startswith("가나다라") and len(doc["filename"].encode()) <= MAX_NAME_BYTES
