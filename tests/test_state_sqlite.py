"""The embedded stores' SQLite files (issue 41): `SqliteFile`, the one helper all four use (steps, refusals,
one transaction, permissions), and the files an earlier funnel wrote, opened by today's stores.

`tests/data/state-b6019c2/` holds small files written by the stores of commit b6019c2 (tests/data/SOURCE.md):
an audit log of 2 rows, 2 keys (their tokens below: only salted hashes are in the file), a conversation of
2 turns and an incident. Today's stores must read each back as it was written, a key must still verify,
and what they write next must land in the same file.
"""

from __future__ import annotations

import shutil
import sqlite3
import threading
from contextlib import closing
from pathlib import Path

import pytest

from funnel.apps.state.alerts import DeliveryStatus
from funnel.apps.state.audit import AuditEvent, open_audit
from funnel.apps.state.conversations import CitedPassage, Turn, open_conversations
from funnel.apps.state.incident_schema import AnalysisStatus
from funnel.apps.state.incidents import open_incidents
from funnel.apps.state.keys import KeyRejected, KeyVerifier, Role, open_keys, parse_token
from funnel.apps.state.sqlite import SqliteFile
from funnel.errors import StoreError

OLD = Path(__file__).parent / "data" / "state-b6019c2"
T0 = 1767225600.0  # 2026-01-01T00:00:00Z, the clock the files were written with
ADMIN_TOKEN = "fk_fc6799309a02_x7J1LCHxbFbTKu3J2fRHMt86H1r55iU4I30sQbwqeyQ"
READER_TOKEN = "fk_1be0ac709644_Gtq2AMl-fDJ8EfBI0eXGJ4nEyC7asH8M5AhM3q47Xl4"
STEPS = (
    ("CREATE TABLE t (id INTEGER PRIMARY KEY, a TEXT)",),
    ("ALTER TABLE t ADD COLUMN b TEXT", "CREATE INDEX t_b ON t (b)"),
)


def version(path: Path) -> int:
    with closing(sqlite3.connect(path)) as con:
        return con.execute("PRAGMA user_version").fetchone()[0]


@pytest.fixture
def old(tmp_path) -> Path:
    """A copy of the old files: opening one migrates it in place."""
    return Path(shutil.copytree(OLD, tmp_path / "data"))


# --- SqliteFile -------------------------------------------------------------------------------------------


def test_a_new_file_is_made_on_first_use_with_every_step(tmp_path):
    file = SqliteFile(tmp_path / "deep" / "x.sqlite", STEPS, "test file", mode=0o600)
    assert not file.path.parent.exists(), "building one creates nothing"
    with file.connection() as con:
        con.execute("INSERT INTO t (a, b) VALUES ('1', '2')")
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert version(file.path) == 2 and file.path.stat().st_mode & 0o777 == 0o600


def test_an_older_file_takes_the_steps_it_lacks_and_a_column_it_has_is_passed_over(tmp_path):
    path = tmp_path / "x.sqlite"
    with closing(sqlite3.connect(path)) as con:
        con.execute(STEPS[0][0])
        con.execute("ALTER TABLE t ADD COLUMN b TEXT")  # half of step 2, added by hand
        con.execute("INSERT INTO t (a, b) VALUES ('kept', 'too')")
        con.execute("PRAGMA user_version = 1")
        con.commit()
    with SqliteFile(path, STEPS, "test file").connection() as con:
        assert con.execute("SELECT a, b FROM t").fetchall() == [("kept", "too")]
        assert con.execute("SELECT name FROM sqlite_master WHERE name = 't_b'").fetchone() == ("t_b",)
    assert version(path) == 2


def test_a_failed_step_leaves_the_file_as_it_was(tmp_path):
    path = tmp_path / "x.sqlite"
    SqliteFile(path, STEPS[:1], "test file").open()
    broken = (*STEPS, ("ALTER TABLE t ADD COLUMN c TEXT", "CREATE TABLE t (x)"))
    with pytest.raises(StoreError, match="test file in .*already exists") as caught:
        SqliteFile(path, broken, "test file").open()
    assert "\n" not in str(caught.value)
    with closing(sqlite3.connect(path)) as con:
        assert [r[1] for r in con.execute("PRAGMA table_info(t)")] == ["id", "a"], "all the steps or none"
    assert version(path) == 1


@pytest.mark.parametrize("content, refusal", [
    (None, "newer funnel .*reads up to 2"),
    (b"not a database at all" * 100, "is not a test file"),
    ("CREATE TABLE songs (title TEXT)", "an SQLite file of something else .*songs"),
])
def test_what_is_not_this_store_s_file_is_refused_in_one_line(tmp_path, content, refusal):
    path = tmp_path / "x.sqlite"
    if content is None:
        with closing(sqlite3.connect(path)) as con:
            con.execute("PRAGMA user_version = 3")
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        with closing(sqlite3.connect(path)) as con:
            con.execute(content)
    before = path.read_bytes()
    with pytest.raises(StoreError, match=refusal) as caught:
        SqliteFile(path, STEPS, "test file").open()
    assert "\n" not in str(caught.value) and path.read_bytes() == before


def test_processes_opening_one_new_file_together_make_it_once(tmp_path):
    path, errors = tmp_path / "x.sqlite", []

    def open_it():
        try:
            with SqliteFile(path, STEPS, "test file").transaction() as con:
                con.execute("INSERT INTO t (a) VALUES ('x')")
        except Exception as e:  # noqa: BLE001 (collected for the assertion)
            errors.append(e)

    threads = [threading.Thread(target=open_it) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and version(path) == 2
    with closing(sqlite3.connect(path)) as con:
        assert con.execute("SELECT count(*) FROM t").fetchone()[0] == 8


# --- the files of b6019c2 ---------------------------------------------------------------------------------


def test_an_old_audit_log_reads_back_and_takes_new_rows(old):
    log = open_audit(None, old)
    rows = [(e.ts, e.who, e.action, e.route, e.collection, e.target, e.client, e.status) for e in log.read()]
    assert rows == [
        (T0, "api_key", "collection.create", "/v1/collections", "docs", None, "127.0.0.1", 201),
        (T0 + 1.5, "3f2a1b4c5d6e", "document.upload", "/v1/collections/docs/documents", "docs", "d1 guide.md",
         "10.0.0.7", 202),
    ]
    log.check()
    log.append(AuditEvent(ts=T0 + 9, who="open", action="key.revoke", route="/v1/keys/x", client="::1", status=200))
    assert [e.id for e in log.read()] == [1, 2, 3] and version(old / "audit.sqlite") == 1


def test_old_keys_read_back_and_still_verify(old):
    store = open_keys(None, old)
    admin, reader = store.list()
    assert (admin.id, admin.role, admin.collections, admin.created, admin.expires) == (
        "fc6799309a02", Role.ADMIN, None, T0, None)
    assert (reader.id, reader.role, reader.collections, reader.created) == (
        "1be0ac709644", Role.READER, ("docs",), T0 + 60)
    assert reader.expires == T0 + 60 + 3650 * 86400 and admin.rpm is None and reader.revoked is None
    verifier = KeyVerifier(store, wall=lambda: T0 + 3600)
    assert verifier.active() and verifier.verify(READER_TOKEN) == reader
    assert verifier.verify(ADMIN_TOKEN) == admin
    key_id, secret = parse_token(READER_TOKEN)
    with pytest.raises(KeyRejected, match="wrong API key"):
        verifier.verify(f"fk_{key_id}_{secret[::-1]}")
    assert store.revoke(admin.id, T0 + 7200).revoked == T0 + 7200 and store.get(admin.id).state(T0) == "revoked"


def test_an_old_conversation_reads_back_and_goes_on(old):
    conversations = open_conversations(None, old)
    [summary] = conversations.list("docs")
    assert (summary.id, summary.title, summary.turns) == ("conv-1", "How do I install it?", 2)
    assert summary.created_at == summary.updated_at == "2026-01-01T00:02:00+00:00"
    cited = CitedPassage(1, "c1", "d1", "guide.md", "Guide", "§ Install", "Run make install.", None)
    assert conversations.get("docs", "conv-1").turns == (
        Turn("How do I install it?", "install", "Run make install [1].", (cited,)),
        Turn("And on Windows?", "install windows", "Use the installer.", ()),
    )
    assert conversations.owner("docs", "conv-1") == "", "kept from before owners were"
    conversations.add("docs", "conv-1", Turn("And on a Mac?", "install mac", "brew install."), owner="k1")
    assert len(conversations.history("docs", "conv-1")) == 3 and version(old / "conversations.sqlite") == 2


def test_an_old_incident_reads_back(old):
    incidents = open_incidents(None, old / "incidents.sqlite", clock=lambda: T0 + 400)
    [incident] = incidents.list()
    assert (incident.id, incident.service, incident.exception_type, incident.fingerprint) == (
        1, "billing", "KeyError", "fp-1")
    assert incident.created_at == "2026-01-01T00:05:00.000+00:00" and incident.message == "KeyError: 'user'"
    assert (incident.slack_status, incident.slack_detail) == (DeliveryStatus.SENT, "ok")
    assert incident.result().analysis_status is AnalysisStatus.LLM_UNAVAILABLE
    assert [f.path for f in incident.result().files] == ["app.py"]
    assert incident.report().context == {"password": "[REDACTED]"} and incident.steps().analysis.status == "done"
    assert incidents.count_since("fp-1", 200) == 1 and incidents.get(1) == incident
