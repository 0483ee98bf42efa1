"""`documents` in the API's ask and search bodies: one document or a chosen set, each named by its id or
its file name as the documents route lists them (issue 33, part 4). Over real loopback HTTP."""

from __future__ import annotations

import httpx
import pytest
from api_support import sse_events, upload, wait_calibrated, wait_done
from helpers import FIRMS, serving

from funnel.apps.api import create_app
from funnel.apps.settings import Settings

QUESTION = "Who is the CEO?"


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    app = create_app(Settings(embedder="hashing", data_dir=tmp_path_factory.mktemp("scope") / "data"))
    # The broken file first: a batch whose last file fails is never calibrated (issue 33, another part).
    files = [("broken.pdf", b"%PDF-1.7\n garbage")] + [(name, text.encode()) for name, text in FIRMS.items()]
    with serving(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        assert client.post("/v1/collections", json={"name": "firms"}).status_code == 201
        assert upload(client, "firms", files).status_code == 202
        statuses = {d["filename"]: d["status"] for d in wait_done(client, "firms")}
        assert statuses == {"acme.txt": "ready", "brix.txt": "ready", "cole.txt": "ready", "broken.pdf": "failed"}
        wait_calibrated(client, "firms")
        yield client


def ids(client) -> dict[str, str]:
    return {d["filename"]: d["id"] for d in client.get("/v1/collections/firms/documents").json()}


def post(client, route, **body) -> httpx.Response:
    return client.post(f"/v1/collections/firms/{route}", json=body)


def test_ask_one_document_by_its_file_name_or_its_id(api):
    everything = post(api, "ask", question=QUESTION).json()
    assert len({c["path"] for c in everything["citations"]}) > 1  # every firm names its CEO
    for name in ("brix.txt", ids(api)["brix.txt"]):
        body = post(api, "ask", question=QUESTION, documents=[name]).json()
        assert "Tom Poe" in body["answer"] and {c["path"] for c in body["citations"]} == {"brix.txt"}
        assert [s["path"] for s in body["sources"]] == ["brix.txt"]


def test_search_a_chosen_set(api):
    body = post(api, "search", query="makes", documents=["acme.txt", ids(api)["cole.txt"]]).json()
    assert {r["path"] for r in body["results"]} == {"acme.txt", "cole.txt"}
    whole = post(api, "search", query="makes", documents=[]).json()  # empty: the whole collection
    assert {r["path"] for r in whole["results"]} == set(FIRMS)


def test_a_streamed_answer_keeps_to_the_documents(api):
    with api.stream("POST", "/v1/collections/firms/ask",
                    json={"question": QUESTION, "documents": ["cole.txt"], "stream": True}) as response:
        events = sse_events(response)
    assert [s["path"] for s in events[0][1]["sources"]] == ["cole.txt"]
    assert events[-1][0] == "done" and "Ann Lee" in events[-1][1]["answer"]


def test_a_follow_up_in_a_conversation_keeps_to_the_documents(api):
    first = post(api, "ask", question="Who is the CEO of Brix?", documents=["brix.txt"]).json()
    second = post(api, "ask", question="Where are the bricks made?", documents=["brix.txt"],
                  conversation_id=first["conversation_id"]).json()
    assert second["rewritten_by"] == "heuristic" and "Brix" in second["search_query"]
    assert {c["path"] for c in second["citations"]} == {"brix.txt"}


def test_an_unknown_document_is_a_404_naming_it(api):
    for route, body in (("ask", {"question": QUESTION}), ("search", {"query": QUESTION})):
        response = post(api, route, **body, documents=["brix.txt", "nope.txt", "missing-id"])
        assert response.status_code == 404
        detail = response.json()["detail"]
        assert "'nope.txt', 'missing-id'" in detail and "collection 'firms'" in detail and "brix" not in detail
    streamed = api.post("/v1/collections/firms/ask", json={"question": QUESTION, "documents": ["nope.txt"]},
                        headers={"Accept": "text/event-stream"})
    assert streamed.status_code == 404 and streamed.headers["content-type"].startswith("application/json")


def test_a_document_with_nothing_indexed_is_a_409_that_says_why(api):
    response = post(api, "ask", question=QUESTION, documents=["broken.pdf"])
    assert response.status_code == 409
    assert "'broken.pdf' is not searchable yet (failed:" in response.json()["detail"]
    # Beside a ready one, it is left out and the ready one answers.
    body = post(api, "ask", question=QUESTION, documents=["broken.pdf", "acme.txt"]).json()
    assert "Jane Roe" in body["answer"] and {c["path"] for c in body["citations"]} == {"acme.txt"}


def test_documents_must_be_a_list_of_strings(api):
    for bad in ("acme.txt", [{"id": "x"}], ["a"] * 1001):
        assert post(api, "ask", question=QUESTION, documents=bad).status_code == 422
