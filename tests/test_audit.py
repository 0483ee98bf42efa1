"""The audit log (issue 34, step 3): every write, and every request refused for its key, is one row with who,
what, when, from where and the status, on SQLite and on a real PostgreSQL; admins read it through
`GET /v1/audit` (its place in the access matrix: tests/test_access_matrix.py) and `funnel audit`; the store
only ever adds rows; a log that is down refuses a write before it is done; no secret reaches a row or the
server's log."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

import funnel.apps.state.audit as audit_module
from funnel.apps.settings import Settings
from funnel.apps.state.audit import AuditEvent, open_audit, parse_since
from funnel.apps.state.db import Database
from funnel.errors import ConfigError, StoreError

LEGACY = "legacy-admin-key-0123"


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
