"""The audit log (issue 34, step 3): every write, and every request refused for its key, is one row with who,
what, when, from where and the status, on SQLite and on a real PostgreSQL; admins read it through
`GET /v1/audit` (its place in the access matrix: tests/test_access_matrix.py) and `funnel audit`; the store
only ever adds rows; a log that is down refuses a write before it is done; no secret reaches a row or the
server's log."""

from __future__ import annotations

import json
import logging
import os
import re
import sqlite3
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import httpx
import pytest
from api_support import upload, wait_done
from helpers import serving

import funnel.apps.state.audit as audit_module
from funnel.apps.api import audit as api_audit
from funnel.apps.api import create_app
from funnel.apps.cli import audit as cli_audit
from funnel.apps.settings import Settings
from funnel.apps.state.audit import AuditEvent, iso_utc, open_audit, parse_since
from funnel.apps.state.db import Database
from funnel.apps.state.home import EmbeddedHome
from funnel.apps.state.keys import new_key, open_keys
from funnel.errors import ConfigError, StoreError

LEGACY = "legacy-admin-key-0123"
FUNNEL = [sys.executable, "-c", "from funnel.apps.cli import run; run()"]


def event(n: int, ts: float, **kw) -> AuditEvent:
    fields = {"who": f"k{n}", "action": "document.delete", "route": "DELETE /x", "client": "127.0.0.1",
              "status": 204, "collection": "a", "target": f"doc{n}"}
    return AuditEvent(ts=ts, **{**fields, **kw})


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request, tmp_path):
    """("sqlite" | "postgres", Settings for a server on it, the audit store it writes)."""
    if request.param == "sqlite":
        settings = Settings(embedder="hashing", reranker="none", data_dir=tmp_path / "data", api_key=LEGACY)
        yield request.param, settings, open_audit(None, tmp_path / "data")
        return
    dsn = request.getfixturevalue("pg_dsn")
    db = Database(dsn)
    settings = Settings(embedder="hashing", reranker="none", database=dsn, data_dir=tmp_path / "unused",
                        api_key=LEGACY)
    yield request.param, settings, open_audit(db)
    db.close()


# --- the store ----------------------------------------------------------------------------------------------


def test_the_store_module_never_changes_or_removes_a_row():
    source = Path(audit_module.__file__).read_text(encoding="utf-8")
    found = re.findall(r"\b(update|delete|truncate|drop|upsert)\b|or\s+replace|on\s+conflict", source, re.I)
    assert not found, f"the audit store must only insert and read: {found}"
    assert "INSERT INTO funnel_audit" in source  # the grep reads the module that holds the SQL
    for module in (api_audit, cli_audit):
        assert "execute(" not in Path(module.__file__).read_text(encoding="utf-8"), "SQL stays in the store"
    verbs = {name for cls in (audit_module.EmbeddedAudit, audit_module.PostgresAudit) for name in dir(cls)
             if not name.startswith("_")}
    assert verbs == {"append", "read", "check"}


def test_append_read_limit_since(backend):
    _, _, store = backend
    assert store.read() == []
    store.check()
    for n in range(5):
        store.append(event(n, 1000.0 + n))
    rows = store.read()
    assert [r.target for r in rows] == [f"doc{n}" for n in range(5)] and all(r.id is not None for r in rows)
    assert [r.target for r in store.read(limit=2)] == ["doc3", "doc4"], "the newest, oldest first"
    assert [r.target for r in store.read(limit=2, since=1001.0)] == ["doc1", "doc2"], "from since on"
    assert store.read(since=2000.0) == []
    row = rows[0].public()
    assert row == {"id": rows[0].id, "time": "1970-01-01T00:16:40.000Z", "who": "k0", "action": "document.delete",
                   "route": "DELETE /x", "client": "127.0.0.1", "status": 204, "collection": "a", "target": "doc0"}
    store.append(event(9, 3000.0, target="x" * 10_000, collection=None))
    assert len(store.read(limit=1)[0].target) == audit_module.MAX_FIELD_CHARS


def test_a_shown_time_read_back_is_never_after_its_row():
    for ts in (1796463000.4769996, 1796463000.9996, 0.0005, 1796463000.0):
        assert parse_since(iso_utc(ts)) <= ts < parse_since(iso_utc(ts)) + 0.001
    assert iso_utc(1796463000.9996) == "2026-12-05T09:30:00.999Z"


def test_parse_since():
    assert parse_since("2026-12-05T09:30:00Z") == parse_since("2026-12-05T10:30:00+01:00") == 1796463000.0
    assert parse_since("2026-12-05T09:30:00") == 1796463000.0, "UTC unless it says"
    assert parse_since("2026-12-05") == 1796428800.0 and parse_since(" 12.5 ") == 12.5
    for bad in ("yesterday", "", "2026-13-01"):
        with pytest.raises(ConfigError, match="ISO 8601"):
            parse_since(bad)


def test_a_broken_embedded_log_is_one_line(tmp_path):
    assert open_audit(None, tmp_path).read() == [] and not (tmp_path / "audit.sqlite").exists(), "reads create nothing"
    (tmp_path / "audit.sqlite").write_bytes(b"not a database at all" * 100)
    for verb in (lambda s: s.check(), lambda s: s.append(event(1, 1.0)), lambda s: s.read()):
        with pytest.raises(StoreError) as caught:
            verb(open_audit(None, tmp_path))
        assert "\n" not in str(caught.value) and "audit log" in str(caught.value)
    other = tmp_path / "other"
    other.mkdir()
    with sqlite3.connect(other / "audit.sqlite") as con:
        con.execute("CREATE TABLE notes (x)")
    with pytest.raises(StoreError, match="something else"):
        open_audit(None, other).check()


# --- the service --------------------------------------------------------------------------------------------


def test_every_route_that_is_not_a_get_is_classified(tmp_path):
    schema = create_app(Settings(embedder="hashing", reranker="none", data_dir=tmp_path)).openapi()
    writes = {f"{m.upper()} {p}" for p, ops in schema["paths"].items() for m in ops if m != "get"}
    recorded = set(api_audit.ACTIONS) | set(api_audit.READS)
    assert recorded | api_audit.UNRECORDED == writes, (
        f"recorded or not? {sorted(writes - recorded - api_audit.UNRECORDED)}")
    assert not recorded & api_audit.UNRECORDED


def test_each_write_is_one_row(backend, caplog):
    """Every kind of write through a real server, by each kind of caller, then the log read back: one row
    each, with who, what, when, from where and the status the caller got; reads leave no row; refused keys
    do; no secret anywhere."""
    kind, settings, store = backend
    caplog.set_level(logging.INFO)
    keys = open_keys(Database(settings.database.url.get_secret_value()) if kind == "postgres" else None,
                     settings.serve.data_dir)
    admin, writer, reader = new_key("admin", None), new_key("writer", ["a"]), new_key("reader", ["a"])
    keys.add(admin.record)
    started = time.time()
    want: list[tuple] = []  # (who, action, collection, target, status)
    with serving(create_app(settings)) as url:
        def client(token):
            return httpx.Client(base_url=url, headers={"X-API-Key": token} if token else {}, timeout=60)

        as_admin, as_writer, as_reader, as_legacy = (client(k) for k in (admin.token, writer.token, reader.token,
                                                                          LEGACY))
        a_id, w_id, r_id = admin.record.id, writer.record.id, reader.record.id
        assert as_admin.post("/v1/collections", json={"name": "a"}).status_code == 201
        want.append((a_id, "collection.create", "a", None, 201))
        for made in (writer, reader):  # made once "a" exists: a new collection takes its name off older keys
            keys.add(made.record)
        assert as_admin.post("/v1/collections", json={"name": "a"}).status_code == 409
        want.append((a_id, "collection.create", "a", None, 409))
        uploaded = upload(as_writer, "a", [("one.txt", b"anvils and lighthouses\n"), ("two.md", b"# quokkas\n")])
        assert uploaded.status_code == 202
        one, two = (d["id"] for d in uploaded.json())
        want.append((w_id, "document.upload", "a", f"{one} one.txt; {two} two.md", 202))
        wait_done(as_reader, "a")
        assert as_reader.get("/v1/collections/a/documents").status_code == 200  # a read: no row
        assert as_reader.delete(f"/v1/collections/a/documents/{one}").status_code == 403
        want.append((r_id, "document.delete", "a", one, 403))
        assert as_writer.delete(f"/v1/collections/a/documents/{one}").status_code == 204
        want.append((w_id, "document.delete", "a", one, 204))
        calibrated = as_admin.post("/v1/collections/a/calibrate")
        want.append((a_id, "calibration.request", "a", None, calibrated.status_code))
        ask = {"question": "What about anvils?", "conversation_id": "chat-1"}
        assert as_reader.post("/v1/collections/a/ask", json=ask).status_code == 200  # a read: who, not what
        want.append((r_id, "collection.ask", "a", None, 200))
        assert as_reader.post("/v1/collections/a/search", json={"query": "quokkas"}).status_code == 200
        want.append((r_id, "collection.search", "a", None, 200))
        assert as_writer.patch("/v1/collections/a/conversations/chat-1", json={"title": "T"}).status_code == 200
        want.append((w_id, "conversation.rename", "a", "chat-1", 200))
        assert as_writer.delete("/v1/collections/a/conversations/chat-1").status_code == 204
        want.append((w_id, "conversation.delete", "a", "chat-1", 204))
        made = as_legacy.post("/v1/keys", json={"role": "reader", "collections": ["a"]})
        assert made.status_code == 201
        new_id, new_token = made.json()["id"], made.json()["key"]
        want.append(("api_key", "key.create", None, f"{new_id} (reader on a)", 201))
        assert as_legacy.delete(f"/v1/keys/{new_id}").status_code == 204
        want.append(("api_key", "key.revoke", None, new_id, 204))
        wrong = reader.token[:-4] + ("AAAA" if not reader.token.endswith("AAAA") else "BBBB")
        for token, who in ((wrong, r_id), (None, "none"), ("not-a-key-at-all", "unparsed"), (new_token, new_id)):
            assert client(token).get("/v1/collections/a/documents").status_code == 401
            want.append((who, "auth.failed", "a", None, 401))
        assert as_admin.delete("/v1/collections/a").status_code == 204
        want.append((a_id, "collection.delete", "a", None, 204))
        rows = as_admin.get("/v1/audit", params={"limit": 100}).json()
        assert as_admin.get("/v1/audit", params={"limit": 2}).json() == rows[-2:]
        since = as_admin.get("/v1/audit", params={"since": rows[3]["time"], "limit": 2}).json()
        assert since[0]["id"] <= rows[3]["id"] and rows[3] in since
        for bad, status in (({"since": "soon"}, 400), ({"limit": 0}, 422), ({"limit": "x"}, 422)):
            refused = as_admin.get("/v1/audit", params=bad)
            assert refused.status_code == status and "Traceback" not in refused.text
        assert as_writer.get("/v1/audit").status_code == 403 and client(None).get("/v1/audit").status_code == 401
    got = [(r["who"], r["action"], r["collection"], r["target"], r["status"]) for r in rows]
    assert got == want
    for row in rows:
        assert row["client"] == "127.0.0.1" and row["route"].split(" ")[0] in ("GET", "POST", "PATCH", "DELETE")
        when = datetime.fromisoformat(row["time"].replace("Z", "+00:00"))
        assert row["time"].endswith("Z") and started - 1 <= when.timestamp() <= time.time() + 1
    stored_rows = [r.public() for r in store.read(limit=1000)]
    assert rows == stored_rows[:-1], "what the route shows is what is stored"
    assert (stored_rows[-1]["who"], stored_rows[-1]["route"]) == ("none", "GET /v1/audit"), "the last 401"
    secrets = [t[len("fk_0123456789ab_"):] for t in (admin.token, writer.token, reader.token, new_token, wrong)]
    secrets.append(LEGACY)
    stored = json.dumps(rows) + caplog.text
    if kind == "sqlite":
        stored += (settings.serve.data_dir / "audit.sqlite").read_bytes().decode("latin-1")
    for secret in secrets:
        assert secret not in stored and secret[:12] not in stored


def test_an_open_service_records_open(tmp_path):
    with serving(create_app(Settings(embedder="hashing", reranker="none", data_dir=tmp_path))) as url:
        assert httpx.post(url + "/v1/collections", json={"name": "a"}).status_code == 201
        rows = httpx.get(url + "/v1/audit").json()
    assert [(r["who"], r["action"], r["collection"], r["status"]) for r in rows] == [
        ("open", "collection.create", "a", 201)]


def test_a_log_that_is_down_refuses_the_write_before_it_is_done(tmp_path):
    settings = Settings(embedder="hashing", reranker="none", data_dir=tmp_path, api_key=LEGACY)
    app = create_app(settings)
    headers = {"X-API-Key": LEGACY}
    with serving(app) as url:
        (tmp_path / "audit.sqlite").mkdir()  # what an unwritable log looks like to SQLite
        refused = httpx.post(url + "/v1/collections", json={"name": "a"}, headers=headers)
        assert refused.status_code == 503 and "audit log" in refused.json()["detail"]
        assert "\n" not in refused.json()["detail"]
        listed = httpx.get(url + "/v1/collections", headers=headers).json()
        assert "a" not in {c["name"] for c in listed}, "refused before it was done"
        assert httpx.get(url + "/health").status_code == 200, "reads go on"
        (tmp_path / "audit.sqlite").rmdir()
        assert httpx.post(url + "/v1/collections", json={"name": "a"}, headers=headers).status_code == 201
        rows = httpx.get(url + "/v1/audit", headers=headers).json()
    assert [(r["action"], r["status"]) for r in rows] == [("collection.create", 201)]


class FailsAfterTheCheck:
    """A log that passes the check and then cannot append (it failed between the two)."""

    def __init__(self, store):
        self.store = store

    def check(self) -> None:
        self.store.check()

    def append(self, event: AuditEvent) -> None:
        raise StoreError("audit log in test: disk I/O error")

    def read(self, limit=100, since=None):
        return self.store.read(limit, since)


def test_a_row_lost_after_the_write_is_logged_and_flagged(tmp_path, caplog):
    caplog.set_level(logging.ERROR, logger="funnel.api.audit")
    app = create_app(Settings(embedder="hashing", reranker="none", data_dir=tmp_path, api_key=LEGACY))
    app.state.audit.store = FailsAfterTheCheck(app.state.audit.store)
    headers = {"X-API-Key": LEGACY}
    with serving(app) as url:
        done = httpx.post(url + "/v1/collections", json={"name": "a"}, headers=headers)
        assert done.status_code == 201, "the write happened: its answer stands"
        assert "a" in {c["name"] for c in httpx.get(url + "/v1/collections", headers=headers).json()}
        flagged = httpx.get(url + "/metrics", headers=headers).json()["audit"]
    assert flagged == {"lost": 1, "last_loss": "audit log in test: disk I/O error"}
    line = next(r.getMessage() for r in caplog.records if "audit row not stored" in r.getMessage())
    lost = json.loads(line[line.index("{"):])
    assert lost["action"] == "collection.create" and lost["who"] == "api_key" and lost["status"] == 201
    assert LEGACY not in caplog.text


# --- funnel audit -------------------------------------------------------------------------------------------


def funnel(*args, cwd):
    env = {**os.environ, "FUNNEL_EMBEDDER": "hashing"}
    result = subprocess.run([*FUNNEL, *args], check=False, cwd=cwd, capture_output=True, text=True, env=env,
                            timeout=120)
    assert "Traceback" not in result.stdout + result.stderr
    return result


def test_cli_reads_the_log(tmp_path):
    data = ["--data-dir", str(tmp_path / "data")]
    empty = funnel("audit", *data, cwd=tmp_path)
    assert empty.returncode == 0 and empty.stdout.strip() == f"no audit rows in {tmp_path / 'data'}"
    store = open_audit(None, tmp_path / "data")
    store.append(event(1, 1796463000.0, who="api_key", action="collection.create", route="POST /v1/collections",
                       status=201, target=None))
    store.append(event(2, 1796463060.5, who="0123456789ab", status=204, target="d1"))
    store.append(event(3, 1796463120.0, who="none", action="auth.failed", status=401, collection=None, target=None))
    lines = funnel("audit", *data, cwd=tmp_path).stdout.strip().splitlines()
    assert lines == [
        "2026-12-05T09:30:00.000Z  api_key       collection.create    201  collection=a  target=-  client=127.0.0.1",
        "2026-12-05T09:31:00.500Z  0123456789ab  document.delete      204  collection=a  target=d1  client=127.0.0.1",
        "2026-12-05T09:32:00.000Z  none          auth.failed          401  collection=-  target=-  client=127.0.0.1",
    ]
    assert funnel("audit", "--limit", "1", *data, cwd=tmp_path).stdout.strip().splitlines() == lines[-1:]
    rows = json.loads(funnel("audit", "--json", "--since", "2026-12-05T09:31:00Z", *data, cwd=tmp_path).stdout)
    assert [(r["who"], r["status"], r["time"]) for r in rows] == [("0123456789ab", 204, "2026-12-05T09:31:00.500Z"),
                                                                   ("none", 401, "2026-12-05T09:32:00.000Z")]
    later = funnel("audit", "--since", "2030-01-01", *data, cwd=tmp_path)
    assert later.returncode == 0 and "from that time on" in later.stdout
    for args, said in ((("--since", "soon"), "ISO 8601"), (("--limit", "0"), "--limit")):
        bad = funnel("audit", *args, *data, cwd=tmp_path)
        assert bad.returncode == 2 and said in bad.stderr + bad.stdout
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "audit.sqlite").write_bytes(b"garbage " * 100)
    broken = funnel("audit", "--data-dir", str(tmp_path / "broken"), cwd=tmp_path)
    assert broken.returncode != 0 and len(broken.stderr.strip().splitlines()) == 1 and "audit log" in broken.stderr


def test_cli_against_postgres(tmp_path, pg_dsn):
    db = Database(pg_dsn)
    try:
        open_audit(db).append(event(1, 1796463000.0, who="api_key", action="key.revoke", collection=None,
                                    target="0123456789ab"))
    finally:
        db.close()
    result = funnel("audit", "--json", "--database", pg_dsn, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert [(r["who"], r["action"], r["target"]) for r in json.loads(result.stdout)] == [
        ("api_key", "key.revoke", "0123456789ab")]


def test_cli_key_changes_are_in_the_log(tmp_path):
    data = ["--data-dir", str(tmp_path / "data")]
    EmbeddedHome(tmp_path / "data").write_marker("docs")  # a key is for a collection that exists
    made = funnel("keys", "create", "--role", "writer", "--collection", "docs", *data, cwd=tmp_path)
    token = made.stdout.strip().splitlines()[-1]
    key_id = token[3:15]
    assert funnel("keys", "revoke", key_id, *data, cwd=tmp_path).returncode == 0
    assert funnel("keys", "revoke", "nope", *data, cwd=tmp_path).returncode != 0
    rows = json.loads(funnel("audit", "--json", *data, cwd=tmp_path).stdout)
    assert [(r["action"], r["target"], r["status"], r["client"]) for r in rows] == [
        ("key.create", f"{key_id} (writer on docs)", 201, "local"), ("key.revoke", key_id, 204, "local"),
        ("key.revoke", "nope", 404, "local")]
    assert all(r["who"].startswith("cli:") for r in rows) and token[16:] not in json.dumps(rows)
    (tmp_path / "data" / "audit.sqlite").unlink()
    (tmp_path / "data" / "audit.sqlite").mkdir()  # a log that cannot take a row
    refused = funnel("keys", "create", "--role", "admin", *data, cwd=tmp_path)
    assert refused.returncode != 0 and "audit log" in refused.stderr and len(refused.stderr.splitlines()) == 1
    listed = json.loads(funnel("keys", "list", "--json", *data, cwd=tmp_path).stdout)
    assert [k["id"] for k in listed] == [key_id], "refused before the key was made"
