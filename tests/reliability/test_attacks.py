"""Attacks on `funnel serve` (issue 40): what an outsider and a reader key tried, each with the refusal it
must get, against a real server on embedded and on PostgreSQL state. Floods are sent concurrently. Every
attack adds a row to the `security` suite of the reliability tally (RELIABILITY.md "Security"); `failed`
counts the attempts that got through.

What the probe of main b6019c2 found, and the test that shows it closed:
1. a reader of one collection wiped every other collection's conversations (a global bound):
   `test_a_conversation_flood_forgets_only_the_flooders_own`, `test_a_reader_continues_only_its_own_conversations`;
2. /health was an unthrottled key oracle: `test_health_counts_and_throttles_wrong_keys`;
3. X-Forwarded-For from 127.0.0.1 was believed: `test_forged_forwarded_addresses_are_not_believed` (and
   tests/test_limits.py, with trusted proxies);
4. an offset past SQLite's integers was a 500: `test_huge_numbers_and_oversized_compute_calls_are_one_line_refusals`
   (and tests/test_bounded_params.py, over the whole schema);
5. refused keys were not logged by default: `test_refusals_are_logged_at_the_default_level`;
6. keys named collections, not their identities: `test_a_key_does_not_outlive_its_collection`;
7. rerank and embeddings had no caps and no rate, answers no security headers: the huge-numbers test,
   `test_every_answer_carries_the_security_headers` (and tests/test_security_headers.py, with a browser).
What held then and must hold still (cross-collection reads, roles): tests/test_access_matrix.py, and here
`test_what_held_still_holds`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from helpers import serving
from tally import scale

from funnel.apps.api import create_app
from funnel.apps.settings import Settings
from funnel.apps.state.db import Database
from funnel.apps.state.keys import new_key, open_keys

LEGACY = "legacy-admin-key-0123"
FUNNEL = [sys.executable, "-c", "from funnel.apps.cli import run; run()"]
A_TEXT = b"Zentara Robotics is led by Iris Kallas. The alpha collection talks about anvils.\n"
B_TEXT = b"The quokka protocol is run by Tomas Vex in Reykjavik.\n"
PER_COLLECTION, PER_KEY = scale(40, 1000), scale(15, 200)  # conversations kept: the short run's, the defaults


class Target:
    """A server with collections a and b (a document each), an admin key and per-collection keys."""

    def __init__(self, url: str, store, backend: str):
        self.url, self.store, self.backend = url, store, backend
        self.admin = self.client(LEGACY)

    def client(self, token: str | None, **headers) -> httpx.Client:
        sent = {"X-API-Key": token} if token else {}
        return httpx.Client(base_url=self.url, headers={**sent, **headers}, timeout=60)

    def key(self, role: str, names: list[str] | None) -> tuple[str, str]:
        made = new_key(role, names)
        self.store.add(made.record)
        return made.record.id, made.token


@pytest.fixture(params=["embedded", "postgres"])
def target(request, tmp_path):
    """A server on embedded state or on PostgreSQL; in a short run, with conversation bounds small enough
    for the flood test to pass both (`make soak`: the defaults, and 5,000 new conversations)."""
    serve = {"conversations_per_collection": PER_COLLECTION, "conversations_per_key": PER_KEY,
             "auth_failures_per_minute": 20,
             "limit_window_s": 3600}  # an hour's window: no test here straddles its end
    db = None
    if request.param == "embedded":
        settings = Settings(embedder="hashing", reranker="lexical", data_dir=tmp_path / "data", api_key=LEGACY,
                            serve=serve)
        store = open_keys(None, tmp_path / "data")
    else:
        dsn = request.getfixturevalue("pg_dsn")
        settings = Settings(embedder="hashing", reranker="lexical", database=dsn, data_dir=tmp_path / "unused",
                            api_key=LEGACY, serve=serve)
        db = Database(dsn)
        store = open_keys(db)
    with serving(create_app(settings)) as url:
        t = Target(url, store, request.param)
        for name, text in (("a", A_TEXT), ("b", B_TEXT)):
            assert t.admin.post("/v1/collections", json={"name": name}).status_code == 201
            files = [("file", (f"{name}.txt", text))]
            assert t.admin.post(f"/v1/collections/{name}/documents", files=files).status_code == 202
        _wait_ready(t.admin, "a", "b")
        yield t
    if db is not None:
        db.close()


def _wait_ready(client: httpx.Client, *names: str) -> None:
    deadline = time.monotonic() + 60
    for name in names:
        while any(d["status"] not in ("ready", "failed") for d in client.get(f"/v1/collections/{name}/documents").json()):
            assert time.monotonic() < deadline
            time.sleep(0.05)


def _ask(client: httpx.Client, collection: str, conversation_id: str | None, question: str = "Who leads it?"):
    body = {"question": question} | ({"conversation_id": conversation_id} if conversation_id else {})
    return client.post(f"/v1/collections/{collection}/ask", json=body)


def test_a_conversation_flood_forgets_only_the_flooders_own(target, tally):
    """Finding 1: 1,010 asks with fresh conversation ids through a's reader key emptied b's conversations.
    Now the flood forgets the flooder's own first, then a's least recently used, never b's."""
    admin = target.admin
    b_chats = [f"b-chat-{n}" for n in range(3)]
    for cid in b_chats:
        assert _ask(admin, "b", cid, "Who runs the quokka protocol?").status_code == 200
    _, other_token = target.key("reader", ["a"])
    kept = "a-colleague-chat"
    assert _ask(target.client(other_token), "a", kept).status_code == 200
    reader_id, reader_token = target.key("reader", ["a"])
    flood = scale(120, 5000)
    flooder = target.client(reader_token)

    def one(n: int) -> int:
        return _ask(flooder, "a", f"flood-{n}").status_code

    with ThreadPoolExecutor(4) as pool:
        statuses = list(pool.map(one, range(flood)))
    assert statuses.count(200) == flood, {s: statuses.count(s) for s in set(statuses)}
    lost_b = [cid for cid in b_chats if admin.get(f"/v1/collections/b/conversations/{cid}").status_code != 200]
    listed_b = {c["id"] for c in admin.get("/v1/collections/b/conversations").json()}
    colleague = admin.get(f"/v1/collections/a/conversations/{kept}").status_code
    a_chats = [c for offset in range(0, PER_COLLECTION + 200, 200) for c in
               admin.get("/v1/collections/a/conversations", params={"limit": 200, "offset": offset}).json()]
    own = [c for c in a_chats if c["id"].startswith("flood-")]
    audited = [r for r in admin.get("/v1/audit", params={"limit": 10_000}).json()
               if r["who"] == reader_id and r["action"] == "collection.ask"]
    tally.add("security", f"reader floods new conversations ({target.backend})", tried=flood,
              failed=len(lost_b) + (colleague != 200), b_conversations_kept=len(b_chats) - len(lost_b),
              flooders_kept=len(own), asks_audited=len(audited))
    assert not lost_b and listed_b == set(b_chats)
    assert colleague == 200, "the flooder forgets its own conversations before a colleague's"
    assert 0 < len(own) <= PER_KEY + 3 and len(a_chats) <= PER_COLLECTION  # + 3: adds racing the last forgetting
    assert len(audited) == flood, "a flood leaves a trace: each ask is a row (who, collection, when)"
    assert all(r["target"] is None for r in audited), "the question is not kept unless audit_queries is on"


def test_a_reader_continues_only_its_own_conversations(target, tally):
    _, first = target.key("reader", ["a"])
    _, second = target.key("reader", ["a"])
    _, writer = target.key("writer", ["a"])
    assert _ask(target.client(first), "a", "mine").status_code == 200
    refused = _ask(target.client(second), "a", "mine", "And then?")
    shown = target.client(second).get("/v1/collections/a/conversations/mine")
    tries = [
        refused.status_code == 403 and "started by another key" in refused.json()["detail"],
        shown.status_code == 200 and shown.json()["history"][-1]["question"] == "Who leads it?",  # reading is shared
        _ask(target.client(first), "a", "mine", "And then?").status_code == 200,
        _ask(target.client(writer), "a", "mine", "And after?").status_code == 200,  # a writer may
    ]
    tally.add("security", f"reader appends to another key's conversation ({target.backend})", tried=len(tries),
              failed=tries.count(False))
    assert all(tries), tries


def test_health_counts_and_throttles_wrong_keys(target, tally):
    """Finding 2: 150 wrong keys on /health got 150 × 200, no 429, no audit row. A wrong key there is now
    a 401 counted like anywhere else; past the limit the address gets 429, its right keys included."""
    wrong = [f"fk_{n:012x}_{'x' * 43}" for n in range(30)]

    def probe(token: str) -> int:
        return target.client(token).get("/health").status_code

    with ThreadPoolExecutor(4) as pool:
        statuses = list(pool.map(probe, wrong))
    open_view = target.client(None).get("/health")
    throttled = target.client(LEGACY).get("/health").status_code
    tally.add("security", f"/health as a key oracle ({target.backend})", tried=len(wrong),
              failed=statuses.count(200), refused=statuses.count(401), throttled=statuses.count(429))
    # 4 at a time: a few may pass the check while the 20th is being counted.
    assert statuses.count(200) == 0 and 20 <= statuses.count(401) <= 23 and statuses.count(429) >= 7, statuses
    assert open_view.status_code == 200 and open_view.json()["collections"] == 0, "no key: the open view"
    assert throttled == 429, "the address is blocked for the rest of the minute, whatever key it sends"


def test_health_with_a_right_key_and_the_refusals_are_audited(target):
    _, reader = target.key("reader", ["a"])
    seen = target.client(reader).get("/health")
    assert seen.status_code == 200 and seen.json()["collections"] == 1
    assert target.client("fk_0123456789ab_" + "y" * 43).get("/health").status_code == 401
    rows = [r for r in target.admin.get("/v1/audit").json() if r["action"] == "auth.failed"]
    assert [(r["who"], r["route"], r["client"]) for r in rows] == [("0123456789ab", "GET /health", "127.0.0.1")]


def test_a_key_does_not_outlive_its_collection(target, tally):
    """Finding 6: a key made for `zzz` before it existed, or for a collection deleted and made again, read
    whatever later held the name. Keys for collections that do not exist are refused, and a collection
    starts with no key naming it."""
    admin = target.admin
    early = admin.post("/v1/keys", json={"role": "reader", "collections": ["zzz"]})
    stale_id, stale = target.key("reader", ["zzz"])  # one made straight in the store (or by an older funnel)
    assert admin.post("/v1/collections", json={"name": "zzz"}).status_code == 201
    made = admin.post("/v1/keys", json={"role": "reader", "collections": ["zzz"]}).json()
    before = target.client(made["key"]).get("/v1/collections/zzz/documents").status_code
    assert admin.delete("/v1/collections/zzz").status_code == 204
    assert admin.post("/v1/collections", json={"name": "zzz"}).status_code == 201
    after = target.client(made["key"]).get("/v1/collections/zzz/documents").status_code
    stale_after = target.client(stale).get("/v1/collections/zzz/documents").status_code
    listed = {k["id"]: k["collections"] for k in admin.get("/v1/keys").json()}
    tries = [early.status_code == 404 and "no collection 'zzz'" in early.json()["detail"], before == 200,
             after == 404, stale_after == 404, listed[made["id"]] == [] and listed[stale_id] == []]
    tally.add("security", f"a key outliving its collection ({target.backend})", tried=len(tries),
              failed=tries.count(False))
    assert all(tries), (early.status_code, before, after, stale_after, listed)


def test_what_held_still_holds(target, tally):
    """The attempts that held on b6019c2, in short: a reader of a reaching b, a reader writing, odd paths."""
    _, reader = target.key("reader", ["a"])
    as_reader = target.client(reader)
    b_doc = target.admin.get("/v1/collections/b/documents").json()[0]["id"]
    attempts = [
        ("GET", "/v1/collections/b/documents", None, 404), ("GET", f"/v1/collections/b/documents/{b_doc}", None, 404),
        ("GET", f"/v1/collections/b/documents/{b_doc}/file", None, 404),
        ("GET", f"/v1/collections/a/documents/{b_doc}/file", None, 404),
        ("POST", "/v1/collections/b/search", {"query": "quokka"}, 404),
        ("POST", "/v1/collections/b/ask", {"question": "Who runs the quokka protocol?"}, 404),
        ("GET", "/v1/collections/b/conversations", None, 404),
        ("GET", "/v1/collections/a/..%2fb/documents", None, (403, 404)),
        ("GET", "/v1/collections/%62/documents", None, 404),
        ("DELETE", f"/v1/collections/a/documents/{b_doc}", None, 403), ("DELETE", "/v1/collections/a", None, 403),
        ("POST", "/v1/keys", {"role": "admin"}, 403), ("GET", "/v1/audit", None, 403), ("GET", "/metrics", None, 403),
    ]
    wrong = []
    for method, path, body, status in attempts:
        response = as_reader.request(method, path, json=body)
        if response.status_code not in (status if isinstance(status, tuple) else (status,)) or "Tomas Vex" in response.text or "Reykjavik" in response.text:
            wrong.append(f"{method} {path}: {response.status_code} {response.text[:120]}")
    tally.add("security", f"reader of a reaching b, writing, odd paths ({target.backend})", tried=len(attempts),
              failed=len(wrong))
    assert not wrong, wrong


def test_refusals_are_logged_at_the_default_level(tmp_path, tally):
    """Finding 5: `funnel serve` logs at ERROR unless -v, so the warnings for refused keys never printed."""
    sock_port = _free_port()
    env = {**os.environ, "FUNNEL_EMBEDDER": "hashing", "FUNNEL_RERANK__BACKEND": "none",
           "FUNNEL_SERVE__API_KEY": LEGACY, "FUNNEL_SERVE__AUTH_FAILURES_PER_MINUTE": "2"}
    process = subprocess.Popen([*FUNNEL, "serve", "--port", str(sock_port)], cwd=tmp_path, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        base = f"http://127.0.0.1:{sock_port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(base + "/health", timeout=1)
                break
            except httpx.TransportError:
                assert process.poll() is None and time.monotonic() < deadline, process.communicate()[1][-2000:]
                time.sleep(0.1)
        statuses = [httpx.get(base + "/v1/collections", headers={"X-API-Key": f"wrong-key-{n}"}).status_code
                    for n in range(3)]
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=20)
    logged = stderr.count("refused an API key from 127.0.0.1")
    blocked = "refused keys from 127.0.0.1" in stderr
    tally.add("security", "refusals logged by `funnel serve` without -v", tried=2, failed=(logged != 2) + (not blocked))
    assert statuses == [401, 401, 429], statuses
    assert logged == 2 and blocked, stderr[-2000:]
    assert "wrong-key-" not in stderr, "a refused key's secret is never logged"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_question_is_audited_only_when_asked_for(tmp_path):
    settings = Settings(embedder="hashing", reranker="none", data_dir=tmp_path / "data", api_key=LEGACY,
                        serve={"audit_queries": True})
    with serving(create_app(settings)) as url:
        admin = httpx.Client(base_url=url, headers={"X-API-Key": LEGACY}, timeout=60)
        assert admin.post("/v1/collections", json={"name": "a"}).status_code == 201
        assert admin.post("/v1/collections/a/documents", files=[("file", ("a.txt", A_TEXT))]).status_code == 202
        _wait_ready(admin, "a")
        assert _ask(admin, "a", None, "Who leads Zentara?").status_code == 200
        assert admin.post("/v1/collections/a/search", json={"query": "anvils"}).status_code == 200
        rows = [(r["action"], r["target"]) for r in admin.get("/v1/audit").json() if r["action"].startswith("collection.")]
    assert rows[-2:] == [("collection.ask", "Who leads Zentara?"), ("collection.search", "anvils")]
    assert json.dumps(rows)  # plain rows, nothing else kept


def test_forged_forwarded_addresses_are_not_believed(target, tally):
    """Finding 3: 60 wrong keys, each "from" a new X-Forwarded-For, got 0 × 429, and 20 wrong keys "from"
    10.9.9.9 blocked that address's right key. No proxy is trusted by default: the connection is the client."""
    wrong = [f"fk_{n:012x}_{'z' * 43}" for n in range(25)]

    def probe(n: int) -> int:
        headers = {"X-API-Key": wrong[n], "X-Forwarded-For": f"10.9.{n}.{n}"}
        return httpx.get(target.url + "/v1/collections", headers=headers, timeout=60).status_code

    with ThreadPoolExecutor(4) as pool:
        statuses = list(pool.map(probe, range(len(wrong))))
    tally.add("security", f"wrong keys from forged X-Forwarded-For addresses ({target.backend})", tried=len(wrong),
              failed=max(0, statuses.count(401) - 23), refused=statuses.count(401), throttled=statuses.count(429))
    assert 20 <= statuses.count(401) <= 23 and statuses.count(429) >= 2, statuses


def test_huge_numbers_and_oversized_compute_calls_are_one_line_refusals(target, tally):
    """Findings 4 and 7: an offset past SQLite's integers was a 500 that reset the connection; one rerank
    of 1,000 documents held the CPU 36 s; compute calls had no rate per key."""
    _, reader = target.key("reader", ["a"])
    as_reader = target.client(reader)
    huge = "99999999999999999999999"
    calls = [
        as_reader.get("/v1/collections/a/conversations", params={"offset": huge}),
        as_reader.get("/v1/collections/a/conversations", params={"limit": huge}),
        target.admin.get("/v1/audit", params={"limit": huge}),
        as_reader.post("/v1/rerank", json={"query": "anvils", "documents": ["anvils"] * 1000}),
        as_reader.post("/v1/rerank", json={"query": "anvils", "documents": ["x" * 40_000]}),
        as_reader.post("/v1/embeddings", json={"input": ["anvils"] * 2048}),
    ]
    refused = [c for c in calls if c.status_code == 422 and isinstance(c.json()["detail"], (str, list))]
    after = as_reader.get("/v1/collections/a/conversations")  # the same connection still answers
    rates = [as_reader.post("/v1/rerank", json={"query": "anvils", "documents": ["anvils", "lighthouses"]}).status_code
             for _ in range(32)]
    tally.add("security", f"huge numbers, oversized and flooded compute calls ({target.backend})",
              tried=len(calls) + len(rates), failed=len(calls) - len(refused) + (429 not in rates),
              compute_calls_before_429=rates.index(429) if 429 in rates else None)
    assert len(refused) == len(calls), [(c.status_code, c.text[:120]) for c in calls]
    assert after.status_code == 200 and "Traceback" not in "".join(c.text for c in calls)
    # compute_rpm (30) a minute per key: the 3 oversized calls above counted too.
    assert rates[:27] == [200] * 27 and rates[27:] == [429] * 5, rates


def test_every_answer_carries_the_security_headers(target, tally):
    """Finding 7: no nosniff, CSP or frame header on the page or file downloads."""
    doc = target.admin.get("/v1/collections/a/documents").json()[0]["id"]
    responses = [target.client(None).get("/"), target.admin.get(f"/v1/collections/a/documents/{doc}/file"),
                 target.admin.get("/v1/collections"), target.client(None).get("/v1/collections")]
    missing = [r.url.path for r in responses if r.headers.get("x-content-type-options") != "nosniff"
               or "frame-ancestors 'none'" not in r.headers.get("content-security-policy", "")
               and "sandbox" not in r.headers.get("content-security-policy", "")]
    tally.add("security", f"answers without security headers ({target.backend})", tried=len(responses),
              failed=len(missing))
    assert not missing
    assert "sandbox" in responses[1].headers["content-security-policy"], "an uploaded file runs nothing"
