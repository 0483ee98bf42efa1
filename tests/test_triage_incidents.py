"""The incident store contract (round trips, filters, redaction in storage, bounds, threads), which every
store's test class inherits (the PostgreSQL one in test_state_triage.py), and the SQLite store's own file
handling: schema versioning, bad files."""

from __future__ import annotations

import sqlite3
import threading
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path

import pytest
from helpers import FakeClock

from funnel.apps.state.alerts import Delivery, DeliveryStatus
from funnel.apps.state.incident_rows import incident_row
from funnel.apps.state.incident_schema import (
    MAX_TRACE_CHARS,
    Analysis,
    AnalysisStatus,
    ErrorReport,
    RankedFile,
    Step,
    TriageResult,
    TriageSteps,
)
from funnel.apps.state.incidents import SQLITE_STEPS, EmbeddedIncidents, Incident, IncidentChange
from funnel.apps.state.redact import REDACTED
from funnel.errors import StoreError

AWS_KEY_ID = "AKIAIOSFODNN7EXAMPLE"


def report(service: str = "billing", trace: str = "Traceback...\nValueError: x", **kw) -> ErrorReport:
    return ErrorReport(service=service, message=kw.pop("message", "boom"), stack_trace=trace, **kw)


def result(
    service: str = "billing", fingerprint: str = "fp-1", *, analysis: bool = True, **kw
) -> TriageResult:
    return TriageResult(
        service=service,
        exception_type="ValueError",
        message=kw.pop("message", "boom"),
        fingerprint=fingerprint,
        files=[RankedFile(path="src/a.py", rank=1, score=0.9, signals=["frame"], excerpt="def f(): ...")],
        analysis=Analysis(summary="s", root_cause="r", confidence=0.7) if analysis else None,
        analysis_status=AnalysisStatus.OK if analysis else AnalysisStatus.LLM_UNAVAILABLE,
        **kw,
    )


def steps(analysis: str, slack: str | None, detail: str = "") -> TriageSteps:
    return TriageSteps(analysis=Step(status=analysis, detail=detail), slack=Step(status=slack or "skipped"))


class IncidentsContract:
    """Every incident store's test class inherits this and provides `open_store`: opens the store over the
    same storage at each call (a restart, or another process), all with the `clock` fixture."""

    @pytest.fixture
    def clock(self) -> FakeClock:
        return FakeClock(1_700_000_000.0)

    @pytest.fixture
    def open_store(self, clock):
        raise NotImplementedError

    @pytest.fixture
    def store(self, open_store):
        return open_store()

    def stored_bytes(self, store) -> bytes:
        """Everything the store has written, as it lies in storage."""
        raise NotImplementedError

    def test_record_and_get_round_trip(self, store):
        r = result()
        incident_id = store.record(report(), r)
        got = store.get(incident_id)
        assert isinstance(got, Incident)
        assert (got.id, got.service, got.exception_type, got.message, got.fingerprint) == (
            incident_id,
            "billing",
            "ValueError",
            "boom",
            "fp-1",
        )
        assert got.analysis_status == "ok"
        assert (got.slack_status, got.slack_detail) == (None, None)
        assert got.result() == r
        assert got.report() == report()
        created = datetime.fromisoformat(got.created_at)
        assert created.utcoffset().total_seconds() == 0
        assert created == datetime.fromtimestamp(1_700_000_000, UTC)
        assert store.get(incident_id + 100) is None

    def test_set_delivery(self, store):
        incident_id = store.record(report(), result())
        failed = Delivery(DeliveryStatus.FAILED, 3, "Slack answered HTTP 500: oops", 1)
        store.set_delivery(incident_id, failed)
        got = store.get(incident_id)
        assert (got.slack_status, got.slack_detail) == ("failed", "Slack answered HTTP 500: oops")
        with pytest.raises(StoreError, match="no incident 999"):
            store.set_delivery(999, Delivery(DeliveryStatus.SENT, 1, "delivered", 1))

    def test_steps_are_recorded_then_advanced(self, store):
        queued = steps("queued", "queued")
        incident_id = store.record(report(), result(analysis=False), queued)
        got = store.get(incident_id)
        assert got.unfinished and got.steps() == queued and got.job_id is None
        store.update(incident_id, IncidentChange(job_id=7))
        store.update(incident_id, IncidentChange(analysis_step="running"))
        assert store.get(incident_id).steps() == steps("running", "queued")
        error = f"try 1 of 3 failed: HTTP 503 (key {AWS_KEY_ID})"
        store.update(incident_id, IncidentChange(result=result(), analysis_step="done", analysis_error=error))
        store.set_delivery(incident_id, Delivery(DeliveryStatus.SENT, 1, "delivered", 1))
        got = store.get(incident_id)
        assert (got.analysis_step, got.analysis_status, got.slack_status, got.job_id) == ("done", "ok", "sent", 7)
        assert got.result() == result() and not got.unfinished
        assert got.analysis_error.startswith("try 1 of 3 failed: HTTP 503") and AWS_KEY_ID not in got.analysis_error
        store.update(incident_id, IncidentChange(analysis_error=""))
        assert store.get(incident_id).steps().analysis == Step(status="done")
        with pytest.raises(StoreError, match="no incident 999"):
            store.update(999, IncidentChange(analysis_step="done"))
        with pytest.raises(StoreError, match="no incident 999"):
            store.update(999, IncidentChange())

    def test_interrupt_ends_only_unfinished_steps(self, store):
        cases = [("queued", "queued"), ("done", "running"), ("failed", "sent"), ("running", None)]
        ids = [store.record(report(), result(), steps(*case)) for case in cases]
        assert store.interrupt("the server stopped") == 3
        got = [store.get(i).steps() for i in ids]
        assert [(g.analysis.status, g.slack.status) for g in got] == [
            ("interrupted", "interrupted"), ("done", "interrupted"), ("failed", "sent"), ("interrupted", "skipped")]
        assert got[0].analysis.detail == got[0].slack.detail == got[3].analysis.detail == "the server stopped"
        assert got[1].analysis.detail == got[2].slack.detail == ""
        assert store.interrupt("again") == 0

    def test_list_newest_first_with_filters_and_limit(self, store, clock):
        ids = []
        for i in range(6):
            clock.now += 1
            service = "billing" if i % 2 == 0 else "search"
            ids.append(store.record(report(service), result(service, f"fp-{i % 3}")))
        assert [i.id for i in store.list()] == ids[::-1]
        assert [i.id for i in store.list(limit=2)] == ids[::-1][:2]
        assert [i.id for i in store.list(service="search")] == [ids[5], ids[3], ids[1]]
        assert [i.id for i in store.list(fingerprint="fp-0")] == [ids[3], ids[0]]
        assert [i.id for i in store.list(service="billing", fingerprint="fp-0")] == [ids[0]]
        assert store.list(service="nobody") == []
        assert store.list(limit=0) == []

    def test_count_since(self, store, clock):
        for _ in range(3):
            store.record(report(), result(fingerprint="fp-a"))
            clock.now += 600
        store.record(report(), result(fingerprint="fp-b"))
        # fp-a at t0, t0+10 min, t0+20 min; now is t0+30 min
        assert store.count_since("fp-a", 3600) == 3
        assert store.count_since("fp-a", 15 * 60) == 1
        assert store.count_since("fp-b", 60) == 1
        assert store.count_since("fp-c", 3600) == 0

    def test_secrets_never_reach_the_disk(self, store):
        secrets = ("hunter2", AWS_KEY_ID, "s3cr3t-ctx", "swordfish", "xoxb-1234567890-abcdefghij")
        incident_id = store.record(
            report(
                trace=f"File x.py\n  conn = connect('postgres://app:hunter2@db/x')\nKeyError: {AWS_KEY_ID}",
                message="token=xoxb-1234567890-abcdefghij",
                context={"db_password": "s3cr3t-ctx", "region": "eu"},
            ),
            result(message="password=swordfish"),
        )
        failed = Delivery(DeliveryStatus.FAILED, 1, "HTTP 400 for password=swordfish", 1)
        store.set_delivery(incident_id, failed)
        got = store.get(incident_id)
        assert got.report().context == {"db_password": REDACTED, "region": "eu"}
        assert "postgres://app:***@db/x" in got.report().stack_trace
        on_disk = self.stored_bytes(store)
        assert b"billing" in on_disk  # the data is there (for SQLite: in the file or the WAL) ...
        for secret in secrets:  # ... the secrets are not
            assert secret.encode() not in on_disk

    def test_long_traces_keep_top_and_bottom(self, store):
        trace = "TOP\n" + "x" * (MAX_TRACE_CHARS * 2) + "\nBOTTOM"
        got = store.get(store.record(report(trace=trace), result())).report().stack_trace
        assert len(got) == MAX_TRACE_CHARS
        assert got.startswith("TOP\n") and got.endswith("\nBOTTOM")
        assert "the middle is cut" in got

    def test_long_results_are_bounded(self, store):
        r = result(message="m" * 50_000)
        r.files = [
            RankedFile(path=f"f{i}.py", rank=i + 1, score=0.1, excerpt="e" * 10_000) for i in range(60)
        ]
        stored = store.get(store.record(report(), r)).result()
        assert len(stored.message) <= 10_000
        assert len(stored.files) == 50
        assert max(len(f.excerpt) for f in stored.files) <= 4000

    def test_threads_share_one_store(self, store):
        ids: list[int] = []
        errors: list[BaseException] = []
        lock = threading.Lock()

        def worker(n: int) -> None:
            try:
                for i in range(15):
                    incident_id = store.record(report(), result(fingerprint=f"fp-{n}"))
                    store.set_delivery(incident_id, Delivery(DeliveryStatus.SENT, 1, "delivered", 1))
                    store.list(limit=5)
                    with lock:
                        ids.append(incident_id)
            except BaseException as e:  # noqa: BLE001 (reported below)
                errors.append(e)

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert errors == []
        assert len(set(ids)) == 8 * 15
        assert all(i.slack_status == "sent" for i in store.list(limit=1000))
        assert store.count_since("fp-3", 60) == 15

    def test_reopening_keeps_the_data(self, store, open_store):
        incident_id = store.record(report(), result())
        assert open_store().get(incident_id).fingerprint == "fp-1"

    def test_a_nul_character_costs_no_incident(self, store):
        incident_id = store.record(report(message="before\x00after"), result(message="x\x00y"))
        got = store.get(incident_id)
        assert got.report().message == "before\x00after" and got.result().message == "x\x00y"
        assert got.message in ("before\x00after", "before\ufffdafter")  # PostgreSQL text holds no NUL


class TestEmbeddedIncidents(IncidentsContract):
    @pytest.fixture
    def open_store(self, tmp_path, clock):
        return lambda: EmbeddedIncidents(tmp_path / "deep" / "er" / "incidents.sqlite", clock=clock)

    def stored_bytes(self, store) -> bytes:
        return b"".join(p.read_bytes() for p in store.path.parent.iterdir() if p.is_file())

    def test_parent_folder_is_created_and_wal_is_on(self, store):
        assert store.path.exists()
        with sqlite3.connect(store.path) as con:
            assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            assert con.execute("PRAGMA user_version").fetchone()[0] == len(SQLITE_STEPS)


@pytest.mark.parametrize("half_migrated", [False, True])
def test_a_version_1_file_gains_the_step_columns(tmp_path, half_migrated):
    """A file of the funnel before the queue: its incidents were analysed and posted in the request."""
    path = tmp_path / "incidents.sqlite"
    v1_columns = ("created_at, created_ts, service, exception_type, message, fingerprint, analysis_status, "
                  "report_json, result_json, slack_status, slack_detail")
    with closing(sqlite3.connect(path)) as con:
        for statement in SQLITE_STEPS[0]:
            con.execute(statement)
        row = (*incident_row(report(), result(), 1_700_000_000.0)[:9], "sent", "delivered")
        con.execute(f"INSERT INTO incidents ({v1_columns}) VALUES ({', '.join('?' * 11)})", row)
        if half_migrated:  # a column someone added by hand: the migration adds only what is missing
            con.execute("ALTER TABLE incidents ADD COLUMN analysis_error text")
        con.execute("PRAGMA user_version = 1")
        con.commit()
    store = EmbeddedIncidents(path)
    [old] = store.list()
    assert old.steps() == TriageSteps(analysis=Step(status="done"), slack=Step(status="sent", detail="delivered"))
    assert old.result() == result() and old.job_id is None
    new = store.record(report(), result(), steps("queued", "queued"))
    assert EmbeddedIncidents(path).get(new).steps() == steps("queued", "queued")
    with closing(sqlite3.connect(path)) as con:
        assert con.execute("PRAGMA user_version").fetchone()[0] == len(SQLITE_STEPS) == 2


def test_a_newer_schema_is_refused(tmp_path):
    path = tmp_path / "incidents.sqlite"
    EmbeddedIncidents(path)
    with sqlite3.connect(path) as con:
        con.execute(f"PRAGMA user_version = {len(SQLITE_STEPS) + 1}")
    with pytest.raises(StoreError, match="newer funnel") as e:
        EmbeddedIncidents(path)
    assert "\n" not in str(e.value)


def test_a_file_that_is_not_sqlite_is_a_one_line_store_error(tmp_path):
    path = tmp_path / "incidents.sqlite"
    path.write_bytes(b"this is not a database, just some text that goes on\n" * 200)
    with pytest.raises(StoreError, match="not an incident database") as e:
        EmbeddedIncidents(path)
    assert "\n" not in str(e.value)


def test_an_sqlite_file_of_something_else_is_refused(tmp_path):
    path = tmp_path / "other.sqlite"
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE songs (title TEXT)")
    with pytest.raises(StoreError, match="something else"):
        EmbeddedIncidents(path)


def test_a_folder_in_the_way_is_a_store_error(tmp_path):
    (tmp_path / "incidents.sqlite").mkdir()
    with pytest.raises(StoreError):
        EmbeddedIncidents(tmp_path / "incidents.sqlite")
    (tmp_path / "file").write_text("x")
    with pytest.raises(StoreError, match="cannot create"):
        EmbeddedIncidents(tmp_path / "file" / "sub" / "incidents.sqlite")


def test_store_accepts_str_path(tmp_path: Path):
    s = EmbeddedIncidents(str(tmp_path / "x.sqlite"))
    assert s.path == tmp_path / "x.sqlite"
