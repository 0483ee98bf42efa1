"""Ask over real loopback HTTP: JSON and server-sent events, citations back to documents and chunks,
conversations, LLM failures (down, dying mid-stream), clients that hang up, and concurrent askers."""

from __future__ import annotations

import threading

import httpx
import pytest
from api_support import (CEO_QUESTION, FakeOpenAI, expected_rerank_status, ingested_samples, samples,
                         sse_events, upload, wait_done)
from helpers import serving
from upstream_support import closed_port, fake  # noqa: F401 (fake: a fixture)

from funnel.apps.api import create_app
from funnel.apps.api.rewrite import heuristic_rewrite
from funnel.apps.state.conversations import EmbeddedConversations, Turn
from funnel.apps.settings import Settings
from funnel.apps.state.conversations import open_conversations
from funnel.apps.state.db import Database, DatabaseUnavailable

FOLLOW_UP = "How many employees does it have?"


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """One data dir with the samples ingested, shared by servers with different LLM settings."""
    return ingested_samples(tmp_path_factory.mktemp("ask") / "data")


@pytest.fixture(scope="module")
def api(data_dir):
    app = create_app(Settings(embedder="hashing", data_dir=data_dir))
    with serving(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        yield client


@pytest.fixture
def fake_llm(fake):
    return FakeOpenAI(fake)


@pytest.fixture
def llm_api(data_dir, fake_llm):
    settings = Settings(embedder="hashing", data_dir=data_dir, llm=f"openai:{fake_llm.url}", llm_timeout_s=5)
    with serving(create_app(settings)) as url, httpx.Client(base_url=url, timeout=30) as client:
        yield client


def ask(client, question=CEO_QUESTION, **kw) -> httpx.Response:
    return client.post("/v1/collections/default/ask", json={"question": question, **kw})


def ask_stream(client, question=CEO_QUESTION, **kw) -> list[tuple[str, dict]]:
    with client.stream("POST", "/v1/collections/default/ask", json={"question": question, "stream": True, **kw}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        return sse_events(r)


# --- without an LLM: the extractive answer --------------------------------------------------------------


def test_json_answer_cites_documents_pages_and_chunks(api):
    response = ask(api)
    assert response.status_code == 200
    body = response.json()
    assert "Iris Kallas" in body["answer"] and body["generator"] == "extractive"
    assert body["fallback_reason"] == "" and body["flags"] == [] and body["conversation_id"]
    assert body["search_query"] == CEO_QUESTION and body["rewritten_by"] == "none"
    assert body["rerank_status"] == expected_rerank_status(api, "default")
    assert set(body["timings_ms"]) >= {"first_stage", "generate"}
    docs = {d["id"]: d for d in api.get("/v1/collections/default/documents").json()}
    (citation,) = [c for c in body["citations"] if "Iris Kallas" in c["text"]]
    assert f"[{citation['number']}]" in body["answer"]
    assert docs[citation["document_id"]]["filename"] == "portfolio_companies.pdf" == citation["path"]
    assert citation["page"] == 2 and citation["location"] == "p.2"
    chunk = api.get(f"/v1/collections/default/chunks/{citation['chunk_id'].replace('#', '%23')}").json()
    assert citation["text"] in chunk["text"] and chunk["document_id"] == citation["document_id"]
    assert body["sources"][0]["document_id"] == citation["document_id"]


def test_sse_stream_is_meta_deltas_then_the_whole_answer(api):
    events = ask_stream(api)
    names = [name for name, _ in events]
    assert names[0] == "meta" and names[-1] == "done" and set(names[1:-1]) == {"delta"}
    meta, done = events[0][1], events[-1][1]
    assert meta["conversation_id"] == done["conversation_id"] and meta["search_query"] == CEO_QUESTION
    assert meta["sources"][0]["path"] == "portfolio_companies.pdf"
    assert meta["rerank_status"] == expected_rerank_status(api, "default")
    assert "".join(data["text"] for name, data in events if name == "delta") == done["answer"]
    assert "Iris Kallas" in done["answer"] and done["citations"][0]["page"] == 2


def test_accept_header_asks_for_a_stream(api):
    headers = {"Accept": "text/event-stream"}
    with api.stream("POST", "/v1/collections/default/ask", json={"question": CEO_QUESTION}, headers=headers) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        events = sse_events(r)
    assert events[0][0] == "meta" and events[-1][0] == "done"
    assert ask(api, stream=False).headers["content-type"].startswith("application/json")


def test_follow_up_is_rewritten_with_the_conversation(api):
    first = ask(api).json()
    second = ask(api, FOLLOW_UP, conversation_id=first["conversation_id"]).json()
    assert second["conversation_id"] == first["conversation_id"]
    assert second["rewritten_by"] == "heuristic" and "Zentara" in second["search_query"]
    assert "287" in second["answer"]
    alone = ask(api, FOLLOW_UP).json()  # no conversation: searched as asked
    assert alone["search_query"] == FOLLOW_UP and alone["conversation_id"] != first["conversation_id"]


def test_streamed_follow_up_is_rewritten_too(api):
    meta = ask_stream(api)[0][1]
    events = ask_stream(api, FOLLOW_UP, conversation_id=meta["conversation_id"])
    assert "Zentara" in events[0][1]["search_query"] and "Zentara" in events[-1][1]["search_query"]


def test_an_unknown_conversation_id_starts_a_new_conversation(api):
    body = ask(api, FOLLOW_UP, conversation_id="client-chosen_id-1").json()
    assert body["conversation_id"] == "client-chosen_id-1" and body["rewritten_by"] == "none"
    assert ask(api, conversation_id="bad id!").status_code == 422


def test_ask_errors_are_json_even_when_streaming(api):
    api.post("/v1/collections", json={"name": "nothing"})
    for body in ({"question": "q"}, {"question": "q", "stream": True}):
        response = api.post("/v1/collections/nothing/ask", json=body)
        assert response.status_code == 409 and response.headers["content-type"] == "application/json"
        assert "no indexed documents yet" in response.json()["detail"]
    assert api.post("/v1/collections/missing/ask", json={"question": "q"}).status_code == 404
    response = api.post("/v1/collections/default/ask", json={"question": "  "})
    assert response.status_code == 422 and "must not be empty" in response.text
    api.delete("/v1/collections/nothing")


# --- with an LLM ----------------------------------------------------------------------------------------


def test_llm_answers_and_rewrites_the_follow_up(llm_api, fake_llm, fake):
    first = ask(llm_api).json()
    assert first["generator"] == "openai:default" and first["answer"] == fake_llm.content
    assert first["citations"][0]["number"] == 1 and first["flags"] == []
    second = ask(llm_api, FOLLOW_UP, conversation_id=first["conversation_id"]).json()
    assert second["rewritten_by"] == "llm" and second["search_query"] == fake_llm.rewrite
    rewrite_request = fake.requests[1].body
    assert rewrite_request["messages"][0]["content"].startswith("Rewrite")
    assert CEO_QUESTION in rewrite_request["messages"][1]["content"]


def test_llm_streams_its_deltas(llm_api, fake_llm):
    events = ask_stream(llm_api)
    assert [data["text"] for name, data in events if name == "delta"] == fake_llm.deltas
    assert events[-1][0] == "done" and events[-1][1]["answer"] == "".join(fake_llm.deltas)


def test_a_readers_stream_sends_the_pickers_sentences_first_then_its_checked_answer(data_dir, fake_llm):
    """`[llm] mode = "reader"`: the page gets the picker's sentence (a `quote` event) before the model's first
    word, then the reader's own answer, with the quote kept beside it in `done` and in the JSON answer."""
    settings = Settings(embedder="hashing", data_dir=data_dir, llm=f"openai:{fake_llm.url}", llm_mode="reader",
                        llm_timeout_s=5)
    question = "How many members does the investment committee have?"
    fake_llm.deltas = ["The committee has ", "five members [1]."]
    with serving(create_app(settings)) as url, httpx.Client(base_url=url, timeout=30) as client:
        events = ask_stream(client, question)
        names = [name for name, _ in events]
        assert names[:2] == ["meta", "quote"] and names[-1] == "done" and set(names[2:-1]) == {"delta"}
        quote, done = events[1][1]["citations"], events[-1][1]
        assert "five members" in quote[0]["text"] and quote[0]["path"] == "investment_policy.md"
        assert done["answer"] == "The committee has five members [1]." and "read" in done["flags"]
        assert done["quote"] == quote and done["generator"].startswith("reader")
        body = ask(client, question).json()  # the JSON answer carries it too
        assert body["quote"] == quote and body["answer"] == done["answer"]
        # When the model refuses, the picker's sentence is the answer itself: no quote beside it.
        fake_llm.deltas = ["Your documents do not answer this question."]
        done = ask_stream(client, question)[-1][1]
        assert "five members" in done["answer"] and "picker" in done["flags"] and done["quote"] == []
        # A table's cell found by its row and column is the answer at once: nothing to quote first.
        events = ask_stream(client)
        assert [name for name, _ in events][1] == "delta" and "Iris Kallas" in events[-1][1]["answer"]


def test_llm_down_falls_back_to_the_extractive_answer(data_dir):
    settings = Settings(embedder="hashing", data_dir=data_dir, llm=f"openai:http://127.0.0.1:{closed_port()}/v1")
    with serving(create_app(settings)) as url, httpx.Client(base_url=url, timeout=30) as client:
        body = ask(client).json()
        assert body["generator"] == "extractive" and "Iris Kallas" in body["answer"]
        assert "cannot reach" in body["fallback_reason"] and "openai:default failed" in body["fallback_reason"]
        done = ask_stream(client)[-1]
        assert done[0] == "done" and "cannot reach" in done[1]["fallback_reason"]
        # The follow-up's rewrite falls back to the heuristic as well.
        follow = ask(client, FOLLOW_UP, conversation_id=body["conversation_id"]).json()
        assert follow["rewritten_by"] == "heuristic" and "Zentara" in follow["search_query"]
        assert client.get("/health").json()["llm"] == "openai:default"


def test_llm_dying_mid_stream_ends_with_the_interrupted_marker(llm_api, fake_llm):
    fake_llm.deltas = ["Iris ", "Kallas ", "never arrives"]
    fake_llm.die_after = 2
    events = ask_stream(llm_api)
    deltas = [data["text"] for name, data in events if name == "delta"]
    assert deltas[:2] == ["Iris ", "Kallas "] and "[answer interrupted:" in deltas[2]
    name, done = events[-1]
    assert name == "done" and "interrupted" in done["flags"]
    assert done["answer"].startswith("Iris Kallas") and "[answer interrupted:" in done["answer"]
    assert llm_api.get("/health").status_code == 200


def test_a_client_that_hangs_up_stops_generation(llm_api, fake_llm, fake):
    fake_llm.deltas = [f"word{i} " for i in range(100)]
    fake_llm.delay = 0.1
    with llm_api.stream("POST", "/v1/collections/default/ask", json={"question": CEO_QUESTION, "stream": True}) as r:
        lines = r.iter_lines()
        while "delta" not in next(lines):
            pass
    # The server notices, stops reading the model and closes its connection: the model server sees it.
    assert fake.hung_up.wait(10), "generation went on after the client left"
    assert fake.streamed < 60
    assert llm_api.get("/health").status_code == 200
    assert ask(llm_api, stream=False).status_code == 200


# --- load ------------------------------------------------------------------------------------------------


def test_twenty_concurrent_askers_while_an_ingest_runs(tmp_path):
    settings = Settings(embedder="hashing", data_dir=tmp_path / "data")
    with serving(create_app(settings)) as url, httpx.Client(base_url=url, timeout=60) as client:
        upload(client, "default", samples())
        wait_done(client, "default")
        extra = [(f"note_{i:02d}.md", f"# Note {i}\n\nWarehouse {i} ships {i * 7} pallets a day.\n".encode() * 40)
                 for i in range(30)]
        assert upload(client, "default", extra).status_code == 202
        assert client.get("/metrics").json()["ingest_queue"] > 0
        statuses: list[int] = []
        answers: list[str] = []

        def asker(n: int) -> None:
            with httpx.Client(base_url=url, timeout=60) as own:
                response = own.post("/v1/collections/default/ask", json={"question": CEO_QUESTION, "stream": n % 2 == 0})
                statuses.append(response.status_code)
                answers.append(response.text)

        threads = [threading.Thread(target=asker, args=(n,)) for n in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert statuses == [200] * 20
        assert all("Iris Kallas" in a for a in answers)
        docs = wait_done(client, "default")
        assert len(docs) == len(samples()) + 30 and {d["status"] for d in docs} == {"ready"}
        (summary,) = client.get("/v1/collections").json()
        assert summary["documents"] == len(docs) and summary["chunks"] == sum(d["chunks"] for d in docs)
        hits = client.post("/v1/collections/default/search", json={"query": "Warehouse 17 pallets", "k": 1}).json()
        assert hits["results"][0]["path"] == "note_17.md"


# --- conversations, in-process ---------------------------------------------------------------------------


def test_a_conversation_continues_on_another_server_sharing_the_database(data_dir, pg_dsn):
    dbs = [Database(pg_dsn) for _ in range(2)]
    apps = [create_app(Settings(embedder="hashing", data_dir=data_dir)) for _ in dbs]
    for app, db in zip(apps, dbs):  # two `funnel serve --database` processes
        app.state.conversations = open_conversations(db)
    with serving(apps[0]) as one, serving(apps[1]) as other:
        with httpx.Client(base_url=one, timeout=30) as client:
            first = ask(client).json()
        with httpx.Client(base_url=other, timeout=30) as client:
            events = dict(ask_stream(client, FOLLOW_UP, conversation_id=first["conversation_id"]))
    assert events["meta"]["rewritten_by"] == "heuristic" and "Zentara" in events["meta"]["search_query"]
    assert [t.question for t in apps[0].state.conversations.history("default", first["conversation_id"])] == [
        CEO_QUESTION, FOLLOW_UP]
    for db in dbs:
        db.close()


class ForgetfulConversations(EmbeddedConversations):
    """Reads work; remembering a turn finds the service's database gone (it went down mid-answer)."""

    def add(self, collection: str, conversation_id: str, turn: Turn, owner: str = "open") -> None:
        raise DatabaseUnavailable("the database at postgresql://127.0.0.1:1/funnel is unavailable: gone")


def test_an_answer_that_cannot_be_remembered_still_comes_back_with_a_note(data_dir, tmp_path):
    app = create_app(Settings(embedder="hashing", data_dir=data_dir))
    app.state.conversations = ForgetfulConversations(tmp_path / "conversations.sqlite")
    with serving(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        response = ask(client)
        events = ask_stream(client)
    assert response.status_code == 200 and "Iris Kallas" in response.json()["answer"]
    body = response.json()
    assert "no_memory" in body["flags"] and "not remembered" in body["memory_note"]
    assert "unavailable: gone" in body["memory_note"]
    name, done = events[-1]
    assert name == "done" and "no_memory" in done["flags"] and "Iris Kallas" in done["answer"]


def test_a_store_that_is_down_answers_as_asked_without_memory(data_dir, tmp_path):
    """The SQLite file cannot be written (its folder is a file): the follow-up is answered as asked, says so,
    and the conversation routes answer 503."""
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the data dir's conversations would go")
    app = create_app(Settings(embedder="hashing", data_dir=data_dir))
    app.state.conversations = EmbeddedConversations(blocked / "conversations.sqlite")
    with serving(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        first = ask(client).json()
        follow = ask(client, FOLLOW_UP, conversation_id=first["conversation_id"]).json()
        events = ask_stream(client, FOLLOW_UP, conversation_id=first["conversation_id"])
        listed = client.get("/v1/collections/default/conversations")
    for body in (first, follow, events[-1][1]):
        assert "no_memory" in body["flags"] and "without earlier turns" in body["memory_note"]
    assert "Iris Kallas" in first["answer"]
    assert follow["rewritten_by"] == "none" and follow["search_query"] == FOLLOW_UP
    assert "without earlier turns" in events[0][1]["memory_note"]
    assert listed.status_code == 503 and "cannot create" in listed.json()["detail"]


def test_postgres_down_answers_without_memory_and_the_routes_say_503(data_dir, monkeypatch):
    from funnel.apps.state import db as state_db

    monkeypatch.setattr(state_db, "POOL_TIMEOUT_S", 0.5)
    db = Database(f"postgresql://funnel:s3cret-pw@127.0.0.1:{closed_port()}/funnel")
    app = create_app(Settings(embedder="hashing", data_dir=data_dir))
    app.state.conversations = open_conversations(db)
    with serving(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        body = ask(client, conversation_id="pg-down-1").json()
        listed = client.get("/v1/collections/default/conversations")
    db.close()
    assert "Iris Kallas" in body["answer"] and "no_memory" in body["flags"]
    assert "unavailable" in body["memory_note"] and "s3cret-pw" not in body["memory_note"]
    assert listed.status_code == 503 and listed.headers["retry-after"] and "s3cret-pw" not in listed.text


@pytest.mark.parametrize(
    "follow_up, expected",
    [
        ("How many employees does it have?", "How many employees does it have? CEO Zentara Robotics"),
        ("And founded?", "And founded? CEO Zentara Robotics"),
        ("Where is Zentara Robotics headquartered?", "Where is Zentara Robotics headquartered?"),
        ("What does the investment policy say about leverage limits?",
         "What does the investment policy say about leverage limits?"),
    ],
)
def test_heuristic_rewrite(follow_up, expected):
    history = (Turn(CEO_QUESTION, CEO_QUESTION, "Iris Kallas [1]"),)
    assert heuristic_rewrite(follow_up, history) == expected
