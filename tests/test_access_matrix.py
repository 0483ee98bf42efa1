"""Who may call what (issue 34): every route of the app's OpenAPI schema × {no key, wrong key, reader of
another collection, reader, writer, admin}, each cell a real request to a real server, with the status it
must get. A route the schema has and `ROUTES` lacks fails `test_every_route_is_in_the_matrix`, as the fuzz
suite's route list does. Then leak attempts across collections: search results, citations, conversation
ids, file downloads, chunks, SSE streams, /health and the collection list.

`ROUTES` is written here, apart from `funnel.apps.api.access.POLICY`, so the test checks the code against
the table the README documents rather than against itself.
"""

from __future__ import annotations

import itertools
import json
import logging
import time

import httpx
import pytest
from api_support import sse_events, upload, wait_done
from helpers import serving

from funnel.apps.api import create_app
from funnel.apps.settings import Settings
from funnel.apps.state.keys import CACHE_TTL_S, new_key, open_keys

LEGACY = "legacy-admin-key-0123"
ACTORS = ("none", "wrong", "other", "reader", "writer", "admin")
A_TEXT = b"Zentara Robotics is led by Iris Kallas. The alpha collection talks about anvils and lighthouses.\n"
B_TEXT = b"The secret of collection bravo: the quokka protocol is run by Tomas Vex in Reykjavik.\n"
B_WORDS = ("Tomas Vex", "Reykjavik", "b.txt")  # in b only, and never in a question sent

# route -> (who may: "open" | role, about one collection?, the status a permitted request gets)
ROUTES = {
    "GET /health": ("open", False, 200),
    "GET /metrics": ("admin", False, 200),
    "POST /v1/rerank": ("reader", False, 200),
    "POST /api/rerank": ("reader", False, 200),
    "POST /v1/embeddings": ("reader", False, 200),
    "GET /v1/collections": ("reader", False, 200),
    "POST /v1/collections": ("admin", False, 201),
    "DELETE /v1/collections/{name}": ("admin", True, 204),
    "POST /v1/collections/{name}/documents": ("writer", True, 202),
    "GET /v1/collections/{name}/documents": ("reader", True, 200),
    "GET /v1/collections/{name}/documents/{doc_id}": ("reader", True, 200),
    "GET /v1/collections/{name}/documents/{doc_id}/file": ("reader", True, 200),
    "DELETE /v1/collections/{name}/documents/{doc_id}": ("writer", True, 204),
    "GET /v1/collections/{name}/chunks/{chunk_id}": ("reader", True, 200),
    "POST /v1/collections/{name}/search": ("reader", True, 200),
    "POST /v1/collections/{name}/ask": ("reader", True, 200),
    "GET /v1/collections/{name}/calibration": ("reader", True, 200),
    "POST /v1/collections/{name}/calibrate": ("admin", True, 202),
    "GET /v1/collections/{name}/conversations": ("reader", True, 200),
    "GET /v1/collections/{name}/conversations/{conversation_id}": ("reader", True, 200),
    "PATCH /v1/collections/{name}/conversations/{conversation_id}": ("writer", True, 200),
    "DELETE /v1/collections/{name}/conversations/{conversation_id}": ("writer", True, 204),
    "POST /v1/errors": ("writer", False, 200),
    "GET /v1/incidents": ("admin", False, 200),
    "GET /v1/incidents/{incident_id}": ("admin", False, 404),  # permitted: no incident 999999
    "POST /v1/keys": ("admin", False, 201),
    "GET /v1/keys": ("admin", False, 200),
    "DELETE /v1/keys/{key_id}": ("admin", False, 204),
    "GET /v1/keys/me": ("reader", False, 200),  # every key, its own id, role and collections
    "GET /v1/audit": ("admin", False, 200),
}
NOBODY = "0123456789abcdef"  # an id no document or conversation has
RANK = {"reader": 0, "writer": 1, "admin": 2}


def expected(route: str, actor: str) -> int:
    need, scoped, ok = ROUTES[route]
    if need == "open":  # open to all, but a key sent is checked, refused and counted (issue 40)
        return 401 if actor == "wrong" else ok
    if actor in ("none", "wrong"):
        return 401
    if actor == "other":  # a reader of collection b, asking about collection a
        if scoped:
            return 404
        return ok if need == "reader" else 403
    role = actor
    return ok if RANK[role] >= RANK[need] else 403


class World:
    """A server with collections a and b (one document each, a conversation each), and the keys."""

    def __init__(self, url: str, keys: dict[str, str]):
        self.url, self.keys = url, keys
        self.admin = self.client("admin")
        self.seq = itertools.count()

    def client(self, actor: str) -> httpx.Client:
        headers = {"X-API-Key": self.keys[actor]} if actor in self.keys else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=60)

    def fresh_document(self) -> str:
        r = upload(self.admin, "a", [(f"tmp{next(self.seq)}.txt", b"a throwaway note about anvils\n")])
        wait_done(self.admin, "a")
        return r.json()[0]["id"]

    def fresh_conversation(self) -> str:
        cid = f"tmp-chat-{next(self.seq)}"
        assert self.admin.post("/v1/collections/a/ask", json={"question": "anvils?", "conversation_id": cid}
                               ).status_code == 200
        return cid


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("access")
    repo = root / "repo"
    repo.mkdir()
    (repo / "app.py").write_text("def handler(x):\n    return x['user']\n")
    data = root / "data"
    store = open_keys(None, data)
    keys = {"wrong": f"fk_{'0' * 12}_{'x' * 43}"}
    def make(actor: str, role: str, names: list[str] | None) -> None:
        made = new_key(role, names)
        store.add(made.record)
        keys[actor] = made.token

    make("admin", "admin", None)
    # Every "wrong" cell is a refused key from 127.0.0.1: the brute-force limit (tests/test_limits.py) is
    # raised so the matrix sees the 401s it checks rather than that limit's 429s.
    settings = Settings(embedder="hashing", reranker="lexical", data_dir=data, api_key=LEGACY, repo=repo,
                        incidents=root / "incidents.sqlite", serve={"auth_failures_per_minute": 10_000})
    with serving(create_app(settings)) as url:
        w = World(url, keys)
        for name, text in (("a", A_TEXT), ("b", B_TEXT)):
            assert w.admin.post("/v1/collections", json={"name": name}).status_code == 201
            assert upload(w.admin, name, [(f"{name}.txt", text)]).status_code == 202
            w.docs = getattr(w, "docs", {})
            w.docs[name] = wait_done(w.admin, name)[0]["id"]
        # Once a and b exist: a new collection takes its name off every key made before it (issue 40).
        for actor, role, names in [("other", "reader", ["b"]), ("reader", "reader", ["a"]),
                                   ("writer", "writer", ["a"])]:
            make(actor, role, names)
        w.chats = {}
        for name in ("a", "b"):
            body = {"question": "Who runs it?", "conversation_id": f"chat-{name}"}
            assert w.admin.post(f"/v1/collections/{name}/ask", json=body).status_code == 200
            w.chats[name] = f"chat-{name}"
        hits = w.admin.post("/v1/collections/a/search", json={"query": "anvils"}).json()["results"][0]["hits"]
        w.chunk = hits[0]["chunk_id"]
        yield w


def request_for(world: World, route: str, actor: str) -> tuple[str, str, dict]:
    """The request a cell sends: about collection a; where a permitted request would destroy something
    the matrix needs, it destroys a throwaway made for it."""
    method, template = route.split(" ", 1)
    permitted = expected(route, actor) not in (401, 403, 404) or route == "GET /v1/incidents/{incident_id}"
    params = {"name": "a", "doc_id": world.docs["a"], "chunk_id": world.chunk.replace("#", "%23"),
              "conversation_id": world.chats["a"], "incident_id": "999999", "key_id": "0" * 12}
    if permitted and route == "DELETE /v1/collections/{name}":
        params["name"] = f"tmp-{next(world.seq)}"
        world.admin.post("/v1/collections", json={"name": params["name"]})
    if permitted and route == "DELETE /v1/collections/{name}/documents/{doc_id}":
        params["doc_id"] = world.fresh_document()
    if permitted and route == "DELETE /v1/collections/{name}/conversations/{conversation_id}":
        params["conversation_id"] = world.fresh_conversation()
    if permitted and route == "DELETE /v1/keys/{key_id}":
        params["key_id"] = world.admin.post("/v1/keys", json={"role": "reader"}).json()["id"]
    path = template.format(**params)
    bodies = {
        "POST /v1/rerank": {"query": "anvils", "documents": ["anvils", "lighthouses"]},
        "POST /api/rerank": {"model": "x", "query": "anvils", "documents": ["anvils", "lighthouses"]},
        "POST /v1/embeddings": {"input": "anvils"},
        "POST /v1/collections": {"name": f"new-{next(world.seq)}"},
        "POST /v1/collections/{name}/search": {"query": "anvils"},
        "POST /v1/collections/{name}/ask": {"question": "Who leads Zentara Robotics?"},
        "PATCH /v1/collections/{name}/conversations/{conversation_id}": {"title": "renamed"},
        "POST /v1/errors": {"service": "shop", "message": "KeyError: 'user'",
                            "stack_trace": 'Traceback (most recent call last):\n  File "app.py", line 2, in handler\n'
                                           "KeyError: 'user'"},
        "POST /v1/keys": {"role": "reader", "collections": ["a"]},
    }
    kwargs: dict = {}
    if route == "POST /v1/collections/{name}/documents":
        kwargs["files"] = [("file", (f"up{next(world.seq)}.txt", b"an upload about anvils\n"))]
    elif route in bodies:
        kwargs["json"] = bodies[route]
    return method, path, kwargs


def test_every_route_is_in_the_matrix(world):
    schema = httpx.get(world.url + "/openapi.json").json()
    routes = {f"{m.upper()} {p}" for p, ops in schema["paths"].items() for m in ops}
    assert routes == set(ROUTES), (
        f"routes missing from the access matrix: {sorted(routes - set(ROUTES))}; gone: {sorted(set(ROUTES) - routes)}")


def test_the_matrix(world):
    wrong = []
    cells = 0
    for route, actor in itertools.product(ROUTES, ACTORS):
        method, path, kwargs = request_for(world, route, actor)
        with world.client(actor) as client:
            response = client.request(method, path, **kwargs)
        cells += 1
        want = expected(route, actor)
        if response.status_code != want:
            wrong.append(f"{route} as {actor}: {response.status_code} (want {want}) {response.text[:120]}")
        if response.status_code in (401, 403, 404):
            detail = response.json()["detail"]
            assert isinstance(detail, str) and "\n" not in detail
    print(f"\naccess matrix: {len(ROUTES)} routes x {len(ACTORS)} callers = {cells} cells, {len(wrong)} wrong")
    assert not wrong, "\n".join(wrong)


def test_the_legacy_key_is_an_admin_on_everything(world):
    with httpx.Client(base_url=world.url, headers={"Authorization": f"Bearer {LEGACY}"}, timeout=60) as c:
        assert {x["name"] for x in c.get("/v1/collections").json()} >= {"a", "b"}
        assert c.get("/v1/keys").status_code == 200 and c.get("/metrics").status_code == 200


def test_a_key_reads_its_own_role_and_collections(world):
    """GET /v1/keys/me, what the web page shows and hides by: the key's id, role and collections, no secret."""
    me = world.client("reader").get("/v1/keys/me").json()
    assert me["role"] == "reader" and me["collections"] == ["a"] and set(me) == {"id", "role", "collections"}
    assert world.keys["reader"].split("_")[1] == me["id"]
    assert world.client("admin").get("/v1/keys/me").json()["collections"] == "all"
    with httpx.Client(base_url=world.url, headers={"X-API-Key": LEGACY}, timeout=30) as legacy:
        assert legacy.get("/v1/keys/me").json() == {"id": "api_key", "role": "admin", "collections": "all"}


def _leaks(text: str) -> list[str]:
    return [w for w in B_WORDS if w.lower() in text.lower()]


def test_nothing_of_b_reaches_a_reader_of_a(world):
    """Each attempt is a request a reader of a makes to reach b's data; a leak is any of b's words or ids
    in an answer, or a status other than the one a stranger gets."""
    reader, other = world.client("reader"), world.client("other")
    b_doc, b_chat = world.docs["b"], world.chats["b"]
    attempts, leaks = 0, []

    def check(what: str, response: httpx.Response, status: int, stranger: httpx.Response | None = None) -> None:
        """`stranger`: the same request with an id nobody has; b's id must get the very same answer."""
        nonlocal attempts
        attempts += 1
        body = response.text
        if stranger is not None:
            same = (body.replace(b_doc, "ID").replace(b_chat, "ID") ==
                    stranger.text.replace(NOBODY, "ID") and response.status_code == stranger.status_code)
            if not same:
                leaks.append(f"{what}: {body[:160]} differs from {stranger.text[:160]}")
            body = body.replace(b_doc, "ID")
        if response.status_code != status or _leaks(body) or b_doc in body:
            leaks.append(f"{what}: {response.status_code} {body[:160]}")

    a_ids = {d["id"] for d in world.admin.get("/v1/collections/a/documents").json()}
    for query in ("quokka protocol", "Who runs the quokka protocol", "secret of collection bravo"):
        check(f"search a for {query!r}", reader.post("/v1/collections/a/search", json={"query": query}), 200)
        check(f"ask a {query!r}", reader.post("/v1/collections/a/ask", json={"question": f"Who runs {query}?"}), 200)
        streamed = reader.post("/v1/collections/a/ask", json={"question": f"{query}?", "stream": True})
        assert streamed.headers["content-type"].startswith("text/event-stream")
        check(f"SSE ask a {query!r}", streamed, 200)
        events = sse_events(streamed)
        assert events[-1][0] == "done"
        for citation in events[-1][1]["citations"]:
            assert citation["document_id"] in a_ids
    for name in ("b", "default", "nope"):
        for path in ("documents", f"documents/{b_doc}", f"documents/{b_doc}/file", "conversations",
                     f"conversations/{b_chat}", "calibration"):
            check(f"GET {name}/{path}", reader.get(f"/v1/collections/{name}/{path}"), 404)
        check(f"search {name}", reader.post(f"/v1/collections/{name}/search", json={"query": "quokka"}), 404)
        sse = reader.post(f"/v1/collections/{name}/ask", json={"question": "quokka?", "stream": True})
        check(f"SSE ask {name}", sse, 404)
        assert "event:" not in sse.text
    # b's ids through a's own routes: the document, its file, a chunk of it, its conversation.
    for path in ("documents/{}", "documents/{}/file", "chunks/{}%230", "conversations/{}"):
        ids = (b_chat if path.startswith("conv") else b_doc), NOBODY
        theirs, nobodys = (reader.get("/v1/collections/a/" + path.format(i)) for i in ids)
        check(f"GET a/{path}", theirs, 404, nobodys)
    theirs, nobodys = (reader.post("/v1/collections/a/search", json={"query": "quokka", "documents": [i]})
                       for i in (b_doc, NOBODY))
    check("search a, documents=[b's]", theirs, 404, nobodys)
    # Asking in a under b's conversation id starts a new conversation there: b's memory is not read.
    answer = reader.post("/v1/collections/a/ask", json={"question": "And who runs it?", "conversation_id": b_chat})
    check("ask a with b's conversation id", answer, 200)
    assert reader.get(f"/v1/collections/a/conversations/{b_chat}").json()["turns"] == 1, "a new one, in a"
    check("GET /v1/collections", reader.get("/v1/collections"), 200)
    assert [c["name"] for c in reader.get("/v1/collections").json()] == ["a"]
    health = reader.get("/health").json()
    check("GET /health", reader.get("/health"), 200)
    assert set(health["calibration"]) == {"a"}
    assert set(world.client("none").get("/health").json()["calibration"]) == set()
    # The other way round: a reader of b gets a stranger's 404 for everything of a.
    for path in ("documents", f"documents/{world.docs['a']}/file", f"chunks/{world.chunk.replace('#', '%23')}",
                 f"conversations/{world.chats['a']}"):
        response = other.get(f"/v1/collections/a/{path}")
        check(f"other GET a/{path}", response, 404)
        assert response.json() == {"detail": "no collection 'a'", "error": "NotFound"}
    assert other.get("/v1/collections/nope/documents").json() == {"detail": "no collection 'nope'",
                                                                  "error": "NotFound"}
    print(f"\ncross-collection leak attempts: {attempts}, leaks: {len(leaks)}")
    assert not leaks, "\n".join(leaks)


def test_bad_keys_are_one_line_401s(world, caplog):
    caplog.set_level(logging.WARNING, logger="funnel.api.access")
    for headers in ({"X-API-Key": "fk_nothex_abc"}, {"X-API-Key": world.keys["wrong"]},
                    {"Authorization": "Bearer " + world.keys["reader"][:-1] + "Z"}, {"Authorization": "Basic x"}, {}):
        response = httpx.get(world.url + "/v1/collections", headers=headers, timeout=30)
        assert response.status_code == 401 and "\n" not in response.json()["detail"], response.text
        assert response.headers["www-authenticate"] == "Bearer"
    # Brute force leaves a trail: the address and what was wrong, never the secret.
    assert caplog.text.count("refused an API key from 127.0.0.1") >= 3
    assert world.keys["reader"][-43:-1] not in caplog.text


def test_revocation_and_expiry(world):
    made = world.admin.post("/v1/keys", json={"role": "reader", "collections": ["a"]}).json()
    client = httpx.Client(base_url=world.url, headers={"X-API-Key": made["key"]}, timeout=30)
    assert client.get("/v1/collections").status_code == 200
    listed = world.admin.get("/v1/keys").json()
    assert made["id"] in {k["id"] for k in listed} and not any("key" in k for k in listed)
    assert world.admin.delete(f"/v1/keys/{made['id']}").status_code == 204
    response = client.get("/v1/collections")
    assert response.status_code == 401 and response.json()["detail"] == f"API key {made['id']} is revoked"
    assert world.admin.delete("/v1/keys/nope").status_code == 404


def test_a_revocation_reaches_another_process_within_the_bound(tmp_path):
    """Two servers on one data dir (each its own cache, as two processes): revoked through one, refused by
    the other within CACHE_TTL_S."""
    store = open_keys(None, tmp_path)
    admin, reader = new_key("admin", None), new_key("reader", None)
    store.add(admin.record)
    store.add(reader.record)
    settings = Settings(embedder="hashing", reranker="none", data_dir=tmp_path)
    with serving(create_app(settings)) as one, serving(create_app(settings)) as two:
        assert httpx.get(two + "/v1/collections", headers={"X-API-Key": reader.token}).status_code == 200
        revoked = httpx.delete(f"{one}/v1/keys/{reader.record.id}", headers={"X-API-Key": admin.token})
        assert revoked.status_code == 204
        started = time.monotonic()
        while httpx.get(two + "/v1/collections", headers={"X-API-Key": reader.token}).status_code == 200:
            assert time.monotonic() - started < CACHE_TTL_S + 1, "still accepted after the bound"
            time.sleep(0.1)
        print(f"\nrevocation seen by the other server after {time.monotonic() - started:.1f} s")
        assert httpx.get(one + "/v1/collections", headers={"X-API-Key": reader.token}).status_code == 401


def test_open_without_keys_and_closed_by_the_first(tmp_path):
    settings = Settings(embedder="hashing", reranker="none", data_dir=tmp_path)
    with serving(create_app(settings)) as url:
        assert httpx.get(url + "/v1/collections").status_code == 200, "no key, no api_key: open, as before"
        assert httpx.get(url + "/v1/keys/me").json() == {"id": None, "role": "open", "collections": "all"}
        refused = httpx.post(url + "/v1/keys", json={"role": "admin"})
        assert refused.status_code == 403 and "funnel keys create" in refused.json()["detail"]
        assert not (tmp_path / "keys.sqlite").exists()
        open_keys(None, tmp_path).add(new_key("admin", None).record)
        started = time.monotonic()
        while httpx.get(url + "/v1/collections").status_code == 200:
            assert time.monotonic() - started < CACHE_TTL_S + 1
            time.sleep(0.1)


def test_a_key_store_that_cannot_be_read_fails_closed(tmp_path):
    (tmp_path / "keys.sqlite").write_bytes(b"garbage, not sqlite " * 200)
    settings = Settings(embedder="hashing", reranker="none", data_dir=tmp_path)
    with serving(create_app(settings)) as url:
        for headers in ({}, {"X-API-Key": f"fk_{'1' * 12}_{'y' * 43}"}):
            response = httpx.get(url + "/v1/collections", headers=headers)
            assert response.status_code == 503 and "\n" not in response.json()["detail"], response.text
        assert httpx.get(url + "/health").status_code == 200
        assert json.loads(httpx.get(url + "/health").text)["calibration"] == {}


def test_keys_in_postgres_bind_every_server_on_it(tmp_path, pg_dsn):
    """With --database the keys are in PostgreSQL: a key made on the command line's store works on both
    servers, its collection scope holds, and a revocation through one is refused by the other in the bound."""
    from funnel.apps.state.db import Database

    db = Database(pg_dsn)
    try:
        store = open_keys(db)
        admin = new_key("admin", None)
        store.add(admin.record)
    finally:
        db.close()
    settings = Settings(embedder="hashing", reranker="none", database=pg_dsn, data_dir=tmp_path / "unused")
    with serving(create_app(settings)) as one, serving(create_app(settings)) as two:
        as_admin = {"X-API-Key": admin.token}
        for name in ("a", "b"):
            assert httpx.post(one + "/v1/collections", json={"name": name}, headers=as_admin).status_code == 201
        made = httpx.post(one + "/v1/keys", json={"role": "reader", "collections": ["a"]}, headers=as_admin).json()
        reader_id, as_reader = made["id"], {"X-API-Key": made["key"]}
        assert [c["name"] for c in httpx.get(two + "/v1/collections", headers=as_reader).json()] == ["a"]
        assert httpx.get(two + "/v1/collections/b/documents", headers=as_reader).status_code == 404
        assert httpx.get(two + "/v1/collections", timeout=30).status_code == 401
        assert httpx.delete(f"{one}/v1/keys/{reader_id}", headers=as_admin).status_code == 204
        started = time.monotonic()
        while httpx.get(two + "/v1/collections", headers=as_reader).status_code == 200:
            assert time.monotonic() - started < CACHE_TTL_S + 1, "still accepted after the bound"
            time.sleep(0.1)
