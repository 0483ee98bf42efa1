"""Deleting while uploads ingest (issue 17, defect 2), over real loopback HTTP.

A delete never waits for an ingest: a queued document leaves the queue, an ingesting one is cancelled and
nothing of it is written, a deleted collection's worker is stopped. A document's status says how far its
ingest is (chunks embedded of all) or where it waits (its place in the queue).

The embedder is the hashing one at a model's pace (`SlowHashingEmbedder`), so a 2 MB text file ingests for
several seconds, as it does with a real model (there: 87 s), and a delete that waits for it shows.
"""

from __future__ import annotations

import random
import time

import httpx
import pytest
from api_support import ingest_recording_progress, upload, wait_done
from helpers import serving

import funnel.apps.api as api_module
from funnel.apps.api import create_app
from funnel.apps.settings import Settings
from funnel.embed.hashing import HashingEmbedder
from funnel.indexer import BATCH

SECONDS_PER_CHUNK = 0.003  # ~2,600 chunks in BIG: ~8 s of embedding, one batch ~0.8 s
PROMPT_S = 2.0  # a delete answers within this (it waited for the whole ingest before)


class SlowHashingEmbedder(HashingEmbedder):
    """The hashing embedder, taking `seconds_per_chunk` per text like a model on a CPU."""

    def __init__(self, seconds_per_chunk: float):
        super().__init__()
        self.seconds_per_chunk = seconds_per_chunk

    def embed(self, texts):
        time.sleep(len(texts) * self.seconds_per_chunk)
        return super().embed(texts)


def big_text(megabytes: float = 2.0) -> bytes:
    rng = random.Random(17)
    words = [f"w{rng.randrange(50_000)}" for _ in range(5000)]
    paragraphs, size = [], 0
    while size < megabytes * 2**20:
        paragraph = " ".join(rng.choice(words) for _ in range(120)) + ".\n\n"
        paragraphs.append(paragraph)
        size += len(paragraph)
    return "".join(paragraphs).encode()


BIG = big_text()


@pytest.fixture
def server(tmp_path, monkeypatch):
    """(client, library, collections folder) of a server whose embedder is slow."""
    slow = SlowHashingEmbedder(SECONDS_PER_CHUNK)
    monkeypatch.setattr(api_module, "load_embedder", lambda spec, threads=None, models=None: slow)
    app = create_app(Settings(embedder="hashing", data_dir=tmp_path / "data", max_upload_mb=8))
    with serving(app) as url, httpx.Client(base_url=url, timeout=60) as client:
        yield client, app.state.library, tmp_path / "data" / "collections"


def wait_for(check, timeout: float = 30, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def document(client: httpx.Client, collection: str, doc_id: str) -> dict:
    return client.get(f"/v1/collections/{collection}/documents/{doc_id}").json()


def embedding(client: httpx.Client, collection: str, doc_id: str, at_least: int = 0) -> dict:
    """The document once its status reports at least `at_least` chunks embedded."""
    def check():
        doc = document(client, collection, doc_id)
        done = doc.get("progress_done")
        return doc if (doc["progress"] or "").startswith("chunks ") and done >= at_least else None

    return wait_for(check, what=f"{at_least} chunks embedded")


def summary(client: httpx.Client, collection: str) -> dict:
    return next(c for c in client.get("/v1/collections").json() if c["name"] == collection)


def timed_delete(client: httpx.Client, path: str) -> float:
    started = time.perf_counter()
    response = client.delete(path)
    elapsed = time.perf_counter() - started
    assert response.status_code == 204, response.text
    return elapsed


def test_deleting_an_ingesting_document_cancels_it_at_once(server):
    client, library, root = server
    (big,) = upload(client, "default", [("big.txt", BIG)]).json()
    doc = embedding(client, "default", big["id"], at_least=BATCH)
    done, total = doc["progress_done"], doc["progress_total"]
    assert doc["status"] == "ingesting" and doc["progress"] == f"chunks {done} of {total}"
    assert BATCH <= done < total and total > 8 * BATCH  # the whole ingest takes many batches

    elapsed = timed_delete(client, f"/v1/collections/default/documents/{big['id']}")
    print(f"DELETE of an ingesting {len(BIG) / 2**20:.1f} MB document: {elapsed:.3f} s")
    assert elapsed < PROMPT_S
    assert client.get(f"/v1/collections/default/documents/{big['id']}").status_code == 404
    assert not (root / "default" / "uploads" / "big.txt").exists()

    # The worker stops within about a batch, and writes nothing of the document.
    started = time.perf_counter()
    wait_for(lambda: summary(client, "default")["pending"] == 0, timeout=10, what="the worker to stop")
    print(f"the cancelled ingest stopped {time.perf_counter() - started:.3f} s after the DELETE returned")
    assert time.perf_counter() - started < 4 * BATCH * SECONDS_PER_CHUNK + 1
    collection = library.get("default")
    assert collection.store.get_chunks(big["id"]) == [] and summary(client, "default")["chunks"] == 0
    assert client.get("/v1/collections/default/documents").json() == []

    # The name is free again, and the worker goes on.
    (again,) = upload(client, "default", [("big.txt", b"The lighthouse keeper logs the weather.")]).json()
    assert again["filename"] == "big.txt"
    assert [d["status"] for d in wait_done(client, "default")] == ["ready"]
    hits = client.post("/v1/collections/default/search", json={"query": "lighthouse keeper"}).json()["results"]
    assert [h["document_id"] for h in hits] == [again["id"]]


def test_queued_uploads_show_their_place_and_leave_the_queue_at_once(server):
    client, library, _ = server
    smalls = [(f"note{n:02d}.txt", f"Note {n}: the zeppelin number {n} docks at dawn.".encode()) for n in range(12)]
    big, *queued = upload(client, "default", [("big.txt", BIG), *smalls]).json()
    embedding(client, "default", big["id"])
    listed = {d["id"]: d for d in client.get("/v1/collections/default/documents").json()}
    assert [(listed[d["id"]]["status"], listed[d["id"]]["progress"], listed[d["id"]]["progress_done"])
            for d in queued] == [("queued", f"position {n} of 12 in the queue", n) for n in range(1, 13)]
    assert document(client, "default", queued[4]["id"])["progress"] == "position 5 of 12 in the queue"

    elapsed = timed_delete(client, f"/v1/collections/default/documents/{queued[4]['id']}")
    print(f"DELETE of a queued document behind a {len(BIG) / 2**20:.1f} MB ingest: {elapsed:.3f} s")
    assert elapsed < PROMPT_S
    waiting = [d for d in client.get("/v1/collections/default/documents").json() if d["status"] == "queued"]
    assert [d["progress"] for d in waiting] == [f"position {n} of 11 in the queue" for n in range(1, 12)]

    assert timed_delete(client, f"/v1/collections/default/documents/{big['id']}") < PROMPT_S
    docs = wait_done(client, "default")
    kept = [d["id"] for d in queued if d is not queued[4]]
    assert [d["id"] for d in docs] == kept
    assert all(d["status"] == "ready" and d["progress"] is None and d["progress_done"] is None for d in docs)
    assert set(library.get("default").store.document_hashes()) == set(kept)  # the deleted two never written


def test_deleting_a_ready_document_behind_an_ingest_returns_at_once_and_hides_it(server):
    client, library, _ = server
    (ready,) = upload(client, "default", [("airships.txt", b"The zeppelin hangar holds three airships.")]).json()
    wait_done(client, "default")
    (big,) = upload(client, "default", [("big.txt", BIG)]).json()
    embedding(client, "default", big["id"])

    elapsed = timed_delete(client, f"/v1/collections/default/documents/{ready['id']}")
    print(f"DELETE of a ready document behind a {len(BIG) / 2**20:.1f} MB ingest: {elapsed:.3f} s")
    assert elapsed < PROMPT_S
    store = library.get("default").store
    assert store.get_chunks(ready["id"])  # still in the index: the ingest holds the writer
    hits = client.post("/v1/collections/default/search", json={"query": "zeppelin hangar airships"}).json()
    assert hits["results"] == []  # but never found

    assert timed_delete(client, f"/v1/collections/default/documents/{big['id']}") < PROMPT_S
    wait_for(lambda: summary(client, "default")["pending"] == 0, what="the worker to finish")
    assert store.get_chunks(ready["id"]) == [] and store.info().chunks == 0


def test_deleting_a_collection_while_it_ingests_returns_at_once(server):
    client, _, root = server
    assert client.post("/v1/collections", json={"name": "doomed"}).status_code == 201
    (big,) = upload(client, "doomed", [("big.txt", BIG)]).json()
    wait_for(lambda: document(client, "doomed", big["id"])["status"] == "ingesting", what="the ingest to start")

    elapsed = timed_delete(client, "/v1/collections/doomed")
    print(f"DELETE of a collection ingesting a {len(BIG) / 2**20:.1f} MB document: {elapsed:.3f} s")
    assert elapsed < PROMPT_S
    assert client.get("/v1/collections/doomed/documents").status_code == 404
    assert "doomed" not in [c["name"] for c in client.get("/v1/collections").json()]
    wait_for(lambda: not (root / "doomed").exists(), timeout=10, what="the folder to go")

    # The same name starts afresh.
    assert client.post("/v1/collections", json={"name": "doomed"}).status_code == 201
    assert client.get("/v1/collections/doomed/documents").json() == []
    upload(client, "doomed", [("small.txt", b"Aurora borealis over Tromso.")])
    assert [d["status"] for d in wait_done(client, "doomed")] == ["ready"]
    assert summary(client, "doomed")["documents"] == 1


def test_racing_deletes_leave_no_half_written_document_or_stale_record(server):
    """Deletes land at every moment of small ingests (queued, loading, embedding, just written): what is
    left is exactly the documents kept, each ready, its chunks in the index and its file in place."""
    client, library, root = server
    rng = random.Random(5)
    kept, deleted = [], []
    for n in range(30):
        body = " ".join(f"Record {n} of the ferry timetable, sailing {k}." for k in range(rng.randrange(5, 400)))
        (doc,) = upload(client, "default", [(f"r{n}.txt", body.encode())]).json()
        if n % 3 == 0:
            kept.append(doc["id"])
            continue
        time.sleep(rng.uniform(0, 0.15))
        assert client.delete(f"/v1/collections/default/documents/{doc['id']}").status_code == 204
        deleted.append(doc["id"])
    docs = wait_done(client, "default")
    wait_for(lambda: summary(client, "default")["pending"] == 0, what="the worker to finish")
    assert sorted(d["id"] for d in docs) == sorted(kept)
    assert all(d["status"] == "ready" for d in docs)
    store = library.get("default").store
    assert set(store.document_hashes()) == set(kept)
    assert summary(client, "default")["chunks"] == sum(d["chunks"] for d in docs) == store.info().chunks
    assert sorted(p.name for p in (root / "default" / "uploads").iterdir()) == sorted(d["filename"] for d in docs)


# --- the cancellation points under the API ----------------------------------------------------------------


def test_a_cancel_from_chunk_progress_rolls_the_ingest_back(tmp_path):
    from funnel.errors import Cancelled
    from funnel.index.lance import LanceStore
    from funnel.indexer import EMBED_SLICE, Indexer
    from funnel.ingest import SourceFile, load

    store = LanceStore(tmp_path / "index")
    indexer = Indexer(store, HashingEmbedder())
    first = tmp_path / "first.txt"
    first.write_text("The ferry leaves at nine.")
    indexer.ingest_documents([load(SourceFile(first, "text"), "first", "first.txt")])
    before = store.info()
    big = tmp_path / "big.txt"
    big.write_bytes(big_text(0.2))
    heard = []

    def stop_after_two_slices(done: int, total: int) -> None:
        heard.append((done, total))
        if done >= 2 * EMBED_SLICE:
            raise Cancelled("big")

    with pytest.raises(Cancelled):
        indexer.ingest_documents([load(SourceFile(big, "text"), "big", "big.txt")], chunks=stop_after_two_slices)
    while_chunking = [h for h in heard if h[1] == 0]  # heard while the document is cut into chunks
    embedding = heard[len(while_chunking):]
    assert while_chunking and set(while_chunking) == {(0, 0)}
    total = embedding[0][1]
    assert total > 4 * EMBED_SLICE
    assert embedding == [(0, total), (EMBED_SLICE, total), (EMBED_SLICE, total), (2 * EMBED_SLICE, total)]
    assert store.info() == before and store.get_chunks("big") == []


def test_a_cancel_is_heard_while_a_big_document_is_chunked(tmp_path):
    # Chunking 10 MB with the real tokenizer takes about a minute; a delete must not wait for it to end.
    from funnel.errors import Cancelled
    from funnel.index.lance import LanceStore
    from funnel.indexer import Indexer
    from funnel.ingest import SourceFile, load

    store = LanceStore(tmp_path / "index")
    indexer = Indexer(store, HashingEmbedder())
    big = tmp_path / "big.txt"
    big.write_bytes(big_text(0.5))
    heard = []

    def stop_at_once(done: int, total: int) -> None:
        heard.append((done, total))
        raise Cancelled("big")

    with pytest.raises(Cancelled):
        indexer.ingest_documents([load(SourceFile(big, "text"), "big", "big.txt")], chunks=stop_at_once)
    assert heard == [(0, 0)]  # before a single chunk was found: in the middle of the chunker
    assert store.info() is None


def test_a_cancel_between_pdf_pages_is_not_taken_for_a_broken_pdf(tmp_path):
    canvas = pytest.importorskip("reportlab.pdfgen.canvas")
    from funnel.errors import Cancelled
    from funnel.ingest.pdf import load_pdf

    path = tmp_path / "long.pdf"
    c = canvas.Canvas(str(path))
    for page in range(1, 8):
        c.drawString(72, 700, f"Page body number {page} with some words.")
        c.showPage()
    c.save()
    read = []

    def pages(name: str, done: int, total: int) -> None:
        read.append(done)
        if done == 3:
            raise Cancelled(name)

    with pytest.raises(Cancelled):  # not an IngestError: the document is not failed, it is stopped
        load_pdf(path, "d", "long.pdf", pages)
    assert read == [1, 2, 3]


def test_a_ctrl_c_stops_the_writer_after_its_slice_not_its_batch(tmp_path):
    # The first Ctrl-C waited for the writer thread to embed its whole batch (15-20 s with the real model
    # under load) only to roll it back.
    from funnel.index.lance import LanceStore
    from funnel.indexer import EMBED_SLICE, Indexer
    from funnel.ingest import SourceFile, load

    class Counting(SlowHashingEmbedder):
        embedded = 0

        def embed(self, texts):
            vectors = super().embed(texts)
            Counting.embedded += len(texts)
            return vectors

    store = LanceStore(tmp_path / "index")
    indexer = Indexer(store, Counting(0.004))
    docs = []
    for i in range(BATCH + 40):
        path = tmp_path / f"d{i}.txt"
        path.write_text(f"Document {i} is about the ferry number {i}.")
        docs.append(load(SourceFile(path, "text"), f"d{i}", path.name))
    at_interrupt = []

    def interrupt(done: int, total: int) -> None:
        if done == BATCH + 20:  # the first batch is with the writer
            at_interrupt.append(Counting.embedded)
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        indexer.ingest_documents(docs, progress=interrupt)
    assert at_interrupt[0] < BATCH  # it was still embedding the batch ...
    assert Counting.embedded - at_interrupt[0] <= EMBED_SLICE  # ... and finished one slice at most
    assert store.info() is None


def test_chunking_a_big_upload_says_nothing_new_and_rewrites_no_registry(tmp_path):
    # While a document is chunked the ingest asks "cancelled?" every 200 token counts; the status must not
    # read "chunks 0 of 0" then, nor the registry be rewritten each time (once per new figure only).
    from funnel.indexer import EMBED_SLICE

    path = tmp_path / "big.txt"
    path.write_bytes(big_text(0.3))
    seen, record = ingest_recording_progress(tmp_path, path)
    chunks = record.chunks
    assert "chunks 0 of 0" not in seen and seen[-1] is None
    assert len(seen) <= chunks // EMBED_SLICE + 3  # one per embedded slice, the first, and the end
