"""A collection's conversations over real loopback HTTP: listed newest first, read with their turns,
renamed, deleted; scoped to their collection (another collection's id is the same 404 as a missing one, and
asking with it reads nothing of the other's); kept across a restart of the server; on SQLite and on
PostgreSQL."""

from __future__ import annotations

import httpx
import pytest
from api_support import CEO_QUESTION, ingested_samples, upload, wait_done
from helpers import serving

from funnel.apps.api import create_app
from funnel.apps.settings import Settings
from funnel.apps.state.conversations import open_conversations
from funnel.apps.state.db import Database

FOLLOW_UP = "How many employees does it have?"
NOTE = b"# Travel policy\n\nThe per diem for Berlin is 28 EUR. Claims are filed within 30 days.\n"


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """The samples in "default", a travel note in "other"."""
    data = ingested_samples(tmp_path_factory.mktemp("conversations") / "data")
    with serving(create_app(Settings(embedder="hashing", data_dir=data))) as url, \
            httpx.Client(base_url=url, timeout=30) as client:
        assert client.post("/v1/collections", json={"name": "other"}).status_code == 201
        assert upload(client, "other", [("travel.md", NOTE)]).status_code == 202
        assert {d["status"] for d in wait_done(client, "other")} == {"ready"}
    return data


@pytest.fixture(params=["sqlite", "postgres"])
def api(request, data_dir):
    app = create_app(Settings(embedder="hashing", data_dir=data_dir))
    db = None
    if request.param == "postgres":  # what `funnel serve --database` keeps them in
        db = Database(request.getfixturevalue("pg_dsn"))
        app.state.conversations = open_conversations(db)
    with serving(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        yield client
    if db is not None:
        db.close()


def ask(client, question=CEO_QUESTION, collection="default", **kw) -> dict:
    response = client.post(f"/v1/collections/{collection}/ask", json={"question": question, **kw})
    assert response.status_code == 200, response.text
    return response.json()


def url(conversation_id: str = "", collection: str = "default") -> str:
    return f"/v1/collections/{collection}/conversations" + (f"/{conversation_id}" if conversation_id else "")


def test_list_read_rename_and_delete(api):
    first = ask(api)
    cid = first["conversation_id"]
    assert len(cid) >= 16  # secrets.token_urlsafe: not guessable
    ask(api, FOLLOW_UP, conversation_id=cid)
    later = ask(api, "What is the leverage limit?")["conversation_id"]

    listed = api.get(url()).json()
    ids = [c["id"] for c in listed]
    assert ids.index(later) < ids.index(cid)  # the most recently updated first
    (mine,) = [c for c in listed if c["id"] == cid]
    assert mine["title"] == CEO_QUESTION and mine["turns"] == 2
    assert mine["created_at"] <= mine["updated_at"] and mine["created_at"].endswith("+00:00")
    assert [c["id"] for c in api.get(url(), params={"limit": 1}).json()] == [ids[0]]
    assert [c["id"] for c in api.get(url(), params={"limit": 1, "offset": 1}).json()] == [ids[1]]

    got = api.get(url(cid)).json()
    assert [t["question"] for t in got["history"]] == [CEO_QUESTION, FOLLOW_UP]
    assert "Iris Kallas" in got["history"][0]["answer"] and got["history"][0]["answer"] == first["answer"]
    (cited,) = [c for c in got["history"][0]["citations"] if "Iris Kallas" in c["text"]]
    assert cited["path"] == "portfolio_companies.pdf" and cited["page"] == 2
    assert "Zentara" in got["history"][1]["search_query"]

    renamed = api.patch(url(cid), json={"title": "Zentara people"})
    assert renamed.status_code == 200 and renamed.json()["title"] == "Zentara people"
    assert api.get(url(cid)).json()["title"] == "Zentara people"
    assert api.patch(url(cid), json={"title": "   "}).status_code == 422
    assert api.patch(url(cid), json={"title": "x" * 201}).status_code == 422

    assert api.delete(url(cid)).status_code == 204
    assert api.get(url(cid)).status_code == 404 and api.delete(url(cid)).status_code == 404
    assert cid not in [c["id"] for c in api.get(url()).json()]
    # Asking with a deleted id starts afresh under it.
    again = ask(api, FOLLOW_UP, conversation_id=cid)
    assert again["rewritten_by"] == "none" and again["conversation_id"] == cid


def test_another_collections_conversation_is_a_404_like_a_missing_one_and_is_never_read(api):
    cid = ask(api)["conversation_id"]

    def missing(conversation_id: str) -> dict:
        return {"detail": f"no conversation {conversation_id!r} in collection 'other'", "error": "NotFound"}

    for response in (api.get(url(cid, "other")), api.patch(url(cid, "other"), json={"title": "mine now"}),
                     api.delete(url(cid, "other"))):
        assert response.status_code == 404 and response.json() == missing(cid)
    never = "never-was-here"
    assert api.get(url(never, "other")).json() == missing(never)  # the same body: nothing tells them apart
    assert api.get(url("bad id!", "other")).status_code == 404
    assert cid not in [c["id"] for c in api.get(url(collection="other")).json()]

    # Asking in "other" with default's id reads nothing of it and starts a conversation of "other"'s own.
    follow = ask(api, FOLLOW_UP, collection="other", conversation_id=cid)
    assert follow["rewritten_by"] == "none" and follow["search_query"] == FOLLOW_UP
    assert [t["question"] for t in api.get(url(cid, "other")).json()["history"]] == [FOLLOW_UP]
    kept = api.get(url(cid)).json()  # default's is untouched
    assert kept["title"] == CEO_QUESTION and [t["question"] for t in kept["history"]] == [CEO_QUESTION]
    assert api.get(url(cid, "nope")).status_code == 404  # no such collection


def test_paging_is_checked(api):
    for params in ({"limit": 0}, {"limit": 201}, {"offset": -1}, {"limit": "x"}):
        assert api.get(url(), params=params).status_code == 422


def test_conversations_outlive_a_restart_and_go_with_their_collection(tmp_path):
    data = tmp_path / "data"
    settings = Settings(embedder="hashing", data_dir=data)
    with serving(create_app(settings)) as one, httpx.Client(base_url=one, timeout=30) as client:
        assert client.post("/v1/collections", json={"name": "notes"}).status_code == 201
        assert upload(client, "notes", [("travel.md", NOTE)]).status_code == 202
        wait_done(client, "notes")
        cid = ask(client, "What is the per diem for Berlin?", collection="notes")["conversation_id"]
    with serving(create_app(settings)) as two, httpx.Client(base_url=two, timeout=30) as client:  # restarted
        (listed,) = client.get(url(collection="notes")).json()
        assert listed["id"] == cid and listed["title"] == "What is the per diem for Berlin?"
        follow = ask(client, "And the deadline?", collection="notes", conversation_id=cid)
        assert follow["rewritten_by"] == "heuristic" and "Berlin" in follow["search_query"]
        assert client.delete("/v1/collections/notes").status_code == 204
        assert client.post("/v1/collections", json={"name": "notes"}).status_code == 201
        assert client.get(url(collection="notes")).json() == []  # a new "notes" starts without them
    assert (data / "conversations.sqlite").is_file()
