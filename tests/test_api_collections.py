"""Collections, uploads, documents, chunks and search over real loopback HTTP (HashingEmbedder: fast)."""

from __future__ import annotations

import json
import threading

import httpx
import pytest
from api_support import CEO_QUESTION, SAMPLES, samples, upload, wait_calibrated, wait_done
from helpers import serving

from funnel.apps.api import create_app
from funnel.apps.state.documents import DocumentRecord, DocumentStatus, EmbeddedDocuments
from funnel.apps.api.uploads import safe_filename
from funnel.apps.settings import Settings
from funnel.rerank.policies import RERANK_DEPTH


def settings(tmp_path, **kw) -> Settings:
    return Settings(embedder="hashing", data_dir=tmp_path / "data", **kw)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("api") / "data"


@pytest.fixture(scope="module")
def api(data_dir):
    """A server with the samples ingested into `default`; yields (client, documents by filename)."""
    app = create_app(Settings(embedder="hashing", data_dir=data_dir, max_upload_mb=1))
    with serving(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        response = upload(client, "default", samples())
        assert response.status_code == 202
        assert {d["status"] for d in response.json()} == {"queued"}
        docs = wait_done(client, "default")
        wait_calibrated(client, "default")
        yield client, {d["filename"]: d for d in docs}


# --- collections -------------------------------------------------------------------------------------------


def test_samples_are_ingested_with_their_counts(api):
    client, docs = api
    assert sorted(docs) == sorted(p.name for p in SAMPLES.iterdir())
    assert all(d["status"] == "ready" and d["error"] is None and d["chunks"] > 0 for d in docs.values())
    pdf = docs["portfolio_companies.pdf"]
    assert pdf["kind"] == "pdf" and pdf["bytes"] == (SAMPLES / "portfolio_companies.pdf").stat().st_size
    assert pdf["uploaded_at"].endswith("+00:00")
    (default,) = [c for c in client.get("/v1/collections").json() if c["name"] == "default"]
    assert default == {
        "name": "default", "documents": len(docs), "chunks": sum(d["chunks"] for d in docs.values()), "pending": 0,
    }
    assert client.get(f"/v1/collections/default/documents/{pdf['id']}").json() == pdf


def test_create_list_delete_collection(api):
    client, _ = api
    created = client.post("/v1/collections", json={"name": "notes_2024"})
    assert created.status_code == 201
    assert created.json() == {"name": "notes_2024", "documents": 0, "chunks": 0, "pending": 0}
    assert client.post("/v1/collections", json={"name": "notes_2024"}).status_code == 409
    assert "notes_2024" in [c["name"] for c in client.get("/v1/collections").json()]
    assert client.delete("/v1/collections/notes_2024").status_code == 204
    assert "notes_2024" not in [c["name"] for c in client.get("/v1/collections").json()]
    missing = client.get("/v1/collections/notes_2024/documents")
    assert missing.status_code == 404 and missing.json()["detail"] == "no collection 'notes_2024'"
    assert client.delete("/v1/collections/notes_2024").status_code == 404


@pytest.mark.parametrize("name", ["Upper", "-dash", "_under", "a" * 65, "sp ace", "dot.name", "é"])
def test_invalid_collection_names_are_400(api, name):
    client, _ = api
    response = client.post("/v1/collections", json={"name": name})
    assert response.status_code == 400 and "invalid collection name" in response.json()["detail"]
    assert client.get(f"/v1/collections/{name}/documents").status_code == 400


def test_search_an_empty_collection_is_409(api):
    client, _ = api
    client.post("/v1/collections", json={"name": "empty"})
    response = client.post("/v1/collections/empty/search", json={"query": "anything"})
    assert response.status_code == 409 and "no indexed documents yet" in response.json()["detail"]
    client.delete("/v1/collections/empty")


# --- search, chunks, files ---------------------------------------------------------------------------------


def test_search_explains_every_stage(api):
    client, docs = api
    response = client.post("/v1/collections/default/search", json={"query": CEO_QUESTION, "k": 3, "explain": True})
    assert response.status_code == 200
    body = response.json()
    chosen = wait_calibrated(client, "default")["option"]  # what `auto` runs on this collection
    assert body["policy"] == f"auto: {chosen}"
    if chosen == "first_stage":
        assert body["rerank_status"] == "skipped" and body["rerank_reason"].startswith("calibration: ")
    else:
        scored = [h["rerank_score"] is not None for h in body["candidates"]]
        assert body["rerank_status"] == "ok" and scored == [i < RERANK_DEPTH for i in range(len(scored))]
    assert set(body["timings_ms"]) == {"first_stage", "rerank", "group"}
    assert len(body["results"]) == 3
    top = body["results"][0]
    assert top["document_id"] == docs["portfolio_companies.pdf"]["id"] and top["rank"] == 1
    best = top["hits"][0]
    assert "CEO: Iris Kallas" in best["text"] and best["page"] == 2 and best["location"] == "p.2"
    assert best["bm25_rank"] is not None and best["fused_rank"] >= 1 and best["final_rank"] == 1
    assert {"dense_rank", "rerank_score", "guaranteed"} <= set(best)
    assert body["candidates"] and all(c["text"] is None for c in body["candidates"])
    assert [c["final_rank"] for c in body["candidates"]] == sorted(c["final_rank"] for c in body["candidates"])


def test_search_validation_does_not_echo_the_input(api):
    client, _ = api
    response = client.post("/v1/collections/default/search", json={"query": "x" * 9000})
    assert response.status_code == 422 and len(response.content) < 1000
    bad_policy = client.post("/v1/collections/default/search", json={"query": "q", "policy": "magic"})
    assert bad_policy.status_code == 400 and "valid" in bad_policy.json()["detail"]


def test_chunk_route_returns_the_cited_passage(api):
    client, docs = api
    hit = client.post("/v1/collections/default/search", json={"query": CEO_QUESTION}).json()["results"][0]["hits"][0]
    chunk = client.get(f"/v1/collections/default/chunks/{hit['chunk_id'].replace('#', '%23')}")
    assert chunk.status_code == 200
    assert chunk.json()["text"] == hit["text"] and chunk.json()["page"] == 2
    assert chunk.json()["document_id"] == docs["portfolio_companies.pdf"]["id"]
    assert client.get("/v1/collections/default/chunks/nope%2399").status_code == 404
    assert client.get("/v1/collections/default/chunks/no-hash").status_code == 404


def test_original_file_with_its_content_type(api):
    client, docs = api
    for name, media in [("portfolio_companies.pdf", "application/pdf"), ("investment_policy.md", "text/markdown"),
                        ("glossary.txt", "text/plain")]:
        response = client.get(f"/v1/collections/default/documents/{docs[name]['id']}/file")
        assert response.status_code == 200
        assert response.headers["content-type"].startswith(media)
        assert response.headers["content-disposition"].startswith("inline")
        assert response.content == (SAMPLES / name).read_bytes()
    assert client.get("/v1/collections/default/documents/unknown/file").status_code == 404


# --- uploads that are refused ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, content, status, message",
    [
        ("tool.exe", b"MZ\x90\x00", 415, "unsupported file type ('.exe')"),
        ("slides.key", b"PK\x03\x04", 415, "unsupported file type ('.key')"),  # a zip no loader takes
        ("noextension", b"hello", 415, "unsupported file type (no extension)"),
        ("fake.pdf", b"this is not a pdf at all", 415, "fake.pdf is not a PDF"),
        ("sneaky.txt", b"%PDF-1.4\n%...", 415, "is a PDF named as text"),
        ("binary.txt", b"\x00\x01\x02\x03" * 100, 422, "not a text file (binary content)"),
        ("empty.md", b"", 422, "empty file"),
    ],
)
def test_uploads_of_the_wrong_kind_are_refused(api, name, content, status, message):
    client, _ = api
    before = client.get("/v1/collections/default/documents").json()
    response = upload(client, "default", [(name, content)])
    assert response.status_code == status, response.text
    assert message in response.json()["detail"]
    assert client.get("/v1/collections/default/documents").json() == before


def test_one_bad_file_refuses_the_whole_request(api, data_dir):
    client, _ = api
    before = sorted(p.name for p in (data_dir / "collections" / "default" / "uploads").iterdir())
    response = upload(client, "default", [("fine.txt", b"fine text here"), ("bad.exe", b"MZ")])
    assert response.status_code == 415
    assert sorted(p.name for p in (data_dir / "collections" / "default" / "uploads").iterdir()) == before


def test_oversized_upload_is_413(api):
    client, _ = api
    response = upload(client, "default", [("big.txt", b"words " * 300_000)])  # 1.7 MiB > 1 MiB
    assert response.status_code == 413 and "1 MiB" in response.json()["detail"]


def test_oversized_chunked_upload_is_413(api):
    """No Content-Length: the body is counted as it arrives."""
    client, _ = api
    boundary = "funnel-test-boundary"

    def body():
        yield (f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.txt"\r\n'
               "Content-Type: text/plain\r\n\r\n").encode()
        for _ in range(40):
            yield b"a" * 65536
        yield f"\r\n--{boundary}--\r\n".encode()

    response = client.post(
        "/v1/collections/default/documents", content=body(),
        headers={"content-type": f"multipart/form-data; boundary={boundary}"},
    )
    assert response.status_code == 413 and response.json()["error"] == "TooLarge"


def test_path_tricks_stay_in_the_uploads_folder(api, data_dir):
    client, _ = api
    client.post("/v1/collections", json={"name": "tricks"})
    names = ["../../etc/passwd.txt", "..\\..\\windows\\win.txt", ".hidden.txt", "../../etc/passwd.txt", "we|rd*name?.md"]
    response = upload(client, "tricks", [(n, b"plain text about nothing " + n.encode("unicode_escape")) for n in names])
    assert response.status_code == 202, response.text
    stored = [d["filename"] for d in response.json()]
    assert stored == ["passwd.txt", "win.txt", "hidden.txt", "passwd (2).txt", "we_rd_name.md"]
    uploads = data_dir / "collections" / "tricks" / "uploads"
    assert sorted(p.name for p in uploads.iterdir()) == sorted(stored)
    assert not (data_dir / "etc").exists() and not (data_dir.parent / "etc").exists()
    wait_done(client, "tricks")
    client.delete("/v1/collections/tricks")
    assert not (data_dir / "collections" / "tricks").exists()


def test_safe_filename():
    assert safe_filename("../../etc/passwd") == "passwd"
    assert safe_filename("C:\\Users\\me\\Report.PDF") == "Report.pdf"
    assert safe_filename("..") == "upload"
    assert safe_filename("...pdf") == "upload.pdf"
    assert safe_filename("x" * 500 + ".md") == "x" * 117 + ".md"
    assert safe_filename("na\u0308me ünïcode.txt") == "näme ünïcode.txt"  # kept, composed (issue 31)


# --- ingest outcomes, deletion ------------------------------------------------------------------------------


def test_a_corrupt_pdf_fails_alone_and_loses_nothing(api):
    client, _ = api
    client.post("/v1/collections", json={"name": "corrupt"})
    assert upload(client, "corrupt", [("good.txt", b"Kallas founded the choir in 2011.")]).status_code == 202
    wait_done(client, "corrupt")
    before = client.get("/v1/collections").json()
    response = upload(client, "corrupt", [("broken.pdf", b"%PDF-1.7\n" + b"\x8f garbage " * 200)])
    assert response.status_code == 202
    (broken,) = [d for d in wait_done(client, "corrupt") if d["filename"] == "broken.pdf"]
    assert broken["status"] == "failed" and "\n" not in broken["error"] and "PDF" in broken["error"]
    assert broken["chunks"] == 0
    after = client.get("/v1/collections").json()
    chunks = {c["name"]: c["chunks"] for c in after}
    assert chunks["corrupt"] == {c["name"]: c["chunks"] for c in before}["corrupt"] > 0
    hits = client.post("/v1/collections/corrupt/search", json={"query": "choir Kallas"}).json()["results"]
    assert [h["path"] for h in hits] == ["good.txt"]
    client.delete("/v1/collections/corrupt")


def test_deleting_a_document_removes_its_file_and_chunks(api, data_dir):
    client, _ = api
    client.post("/v1/collections", json={"name": "deletions"})
    docs = upload(client, "deletions", [("keep.md", b"# Keep\n\nThe lighthouse keeper logs the weather."),
                                        ("drop.txt", b"The zeppelin hangar holds three airships.")]).json()
    wait_done(client, "deletions")
    drop = next(d for d in docs if d["filename"] == "drop.txt")
    query = {"query": "zeppelin hangar airships"}
    assert "drop.txt" in [r["path"] for r in client.post("/v1/collections/deletions/search", json=query).json()["results"]]
    assert client.delete(f"/v1/collections/deletions/documents/{drop['id']}").status_code == 204
    assert client.get(f"/v1/collections/deletions/documents/{drop['id']}").status_code == 404
    assert client.delete(f"/v1/collections/deletions/documents/{drop['id']}").status_code == 404
    assert not (data_dir / "collections" / "deletions" / "uploads" / "drop.txt").exists()
    results = client.post("/v1/collections/deletions/search", json=query).json()["results"]
    assert [r["path"] for r in results] == ["keep.md"]
    (summary,) = [c for c in client.get("/v1/collections").json() if c["name"] == "deletions"]
    assert summary["documents"] == 1 and summary["chunks"] == next(d for d in wait_done(client, "deletions"))["chunks"]
    client.delete("/v1/collections/deletions")


# --- restarts ---------------------------------------------------------------------------------------------


def test_status_survives_a_restart_and_queued_uploads_resume(tmp_path):
    data = tmp_path / "data"
    with serving(create_app(settings(tmp_path))) as url, httpx.Client(base_url=url, timeout=30) as client:
        upload(client, "default", [("a.txt", b"Aurora borealis over Tromso."), ("b.pdf", b"%PDF-1.4 broken")])
        before = wait_done(client, "default")
    # A server stopped while an upload waited: its record says queued and its file is in place.
    root = data / "collections" / "default"
    (root / "uploads" / "late.md").write_bytes(b"# Late\n\nThe night train reaches Narvik at dawn.")
    EmbeddedDocuments(root / "documents.json").add(
        [DocumentRecord("feedfacecafebeef", "late.md", "markdown", 47, "", "2026-01-01T00:00:00+00:00")]
    )
    with serving(create_app(settings(tmp_path))) as url, httpx.Client(base_url=url, timeout=30) as client:
        after = wait_done(client, "default")
        assert after[:2] == before
        assert after[2]["id"] == "feedfacecafebeef" and after[2]["status"] == "ready"
        hits = client.post("/v1/collections/default/search", json={"query": "night train Narvik"}).json()["results"]
        assert hits[0]["document_id"] == "feedfacecafebeef"
    assert json.loads((root / "documents.json").read_text())["documents"][2]["status"] == DocumentStatus.READY.value


def test_nothing_is_written_until_a_collection_is_used(tmp_path):
    with serving(create_app(settings(tmp_path))) as url:
        assert httpx.get(f"{url}/health", timeout=5).json()["collections"] == 1
    assert not (tmp_path / "data").exists()


def test_concurrent_uploads_get_unique_names(tmp_path):
    with serving(create_app(settings(tmp_path))) as url:
        statuses = []

        def send():
            with httpx.Client(base_url=url, timeout=30) as client:
                statuses.append(upload(client, "default", [("same.txt", b"identical words")]).status_code)

        threads = [threading.Thread(target=send) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        with httpx.Client(base_url=url, timeout=30) as client:
            docs = wait_done(client, "default")
    assert statuses == [202] * 8
    assert sorted(d["filename"] for d in docs) == sorted(["same.txt"] + [f"same ({n}).txt" for n in range(2, 9)])
    assert {d["status"] for d in docs} == {"ready"}
