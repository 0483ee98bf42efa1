"""Triage state in the service database (issue 13): the incident store and the Slack de-duplication and
rate limit pass the same contracts as the embedded ones, and several processes (here: several `Database`
instances on one database, each with its own pool) act as one service."""

from __future__ import annotations

import threading

import pytest
from test_triage_incidents import IncidentsContract, report, result, steps
from test_triage_slack import (  # noqa: F401 (alert_state, clock, make, receiver, sleeps: fixtures)
    AlertStateContract,
    alert_state,
    clock,
    make,
    receiver,
    reply,
    sleeps,
)
from test_triage_slack import result as triaged
from upstream_support import closed_port, fake  # noqa: F401 (fake: a fixture)

from funnel.apps.state import db as db_module
from funnel.apps.state.alerts import Delivery, DeliveryStatus, EmbeddedAlertState, PostgresAlertState, open_alert_state
from funnel.apps.state.db import Database, DatabaseUnavailable
from funnel.apps.state.incident_rows import incident_row
from funnel.apps.state.incidents import STEPS, EmbeddedIncidents, PostgresIncidents, open_incidents
from funnel.errors import StoreError

pytest.importorskip("psycopg_pool")


@pytest.fixture
def databases(pg_dsn):
    """`databases()`: one more process's connection pool to the test's database; all closed at the end."""
    opened: list[Database] = []

    def open_one() -> Database:
        opened.append(Database(pg_dsn))
        return opened[-1]

    yield open_one
    for each in opened:
        each.close()


def run_together(*workers) -> list:
    """Runs the workers in threads released at once; returns what they returned (an exception raised)."""
    barrier = threading.Barrier(len(workers))
    results: list = [None] * len(workers)

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = workers[i]()
        except Exception as e:  # noqa: BLE001 (the test asserts on it)
            results[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(workers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


# --- incidents ---------------------------------------------------------------------------------------------


class TestPostgresIncidents(IncidentsContract):
    @pytest.fixture
    def open_store(self, databases, clock):
        return lambda: PostgresIncidents(databases(), clock=clock)

    def stored_bytes(self, store) -> bytes:
        with store._tables.db.connection() as conn:
            return conn.execute("SELECT string_agg(t::text, ' ') FROM funnel_incidents t").fetchone()[0].encode()


def test_two_processes_record_into_one_history(databases, clock):
    first, second = PostgresIncidents(databases(), clock=clock), PostgresIncidents(databases(), clock=clock)

    def recorder(store: PostgresIncidents):
        return lambda: [store.record(report(), result(fingerprint="fp-shared")) for _ in range(10)]

    ids = run_together(*[recorder(store) for store in (first, second) for _ in range(3)])
    flat = [i for batch in ids for i in batch]
    assert len(flat) == 60 and len(set(flat)) == 60  # ids from one identity: unique across processes
    assert first.count_since("fp-shared", 60) == second.count_since("fp-shared", 60) == 60
    assert [i.id for i in second.list(limit=1000)] == sorted(flat, reverse=True)
    second.set_delivery(flat[0], Delivery(DeliveryStatus.SENT, 1, "delivered", 1))
    assert first.get(flat[0]).slack_status == "sent"


def test_incidents_of_the_version_before_steps_are_migrated(databases):
    """A database of the funnel before the queue: the steps are a migration step appended to the others."""
    db = databases()
    db.migrate("incidents", STEPS[:3])
    v1_columns = ("created_at, created_ts, service, exception_type, message, fingerprint, analysis_status, "
                  "report_json, result_json")
    with db.connection() as conn:
        conn.execute(f"INSERT INTO funnel_incidents ({v1_columns}) VALUES ({', '.join(['%s'] * 9)})",
                     list(incident_row(report(), result(), 1_700_000_000.0)[:9]))
    store = PostgresIncidents(db)
    [old] = store.list()
    assert old.steps() == steps("done", None) and old.result() == result()
    assert store.get(store.record(report(), result(), steps("queued", "queued"))).steps() == steps("queued", "queued")
    with db.connection() as conn:
        version = conn.execute("SELECT version FROM funnel_schema WHERE component = 'incidents'").fetchone()[0]
    assert version == len(STEPS) == 4


def test_open_incidents_chooses_the_database_or_the_file(databases, tmp_path):
    embedded = open_incidents(None, tmp_path / "incidents.sqlite")
    assert isinstance(embedded, EmbeddedIncidents) and embedded.path == tmp_path / "incidents.sqlite"
    shared = open_incidents(databases(), tmp_path / "unused.sqlite")
    assert isinstance(shared, PostgresIncidents)
    assert shared.get(shared.record(report(), result())).fingerprint == "fp-1"
    assert not (tmp_path / "unused.sqlite").exists()


def test_a_database_that_is_down_is_one_line_without_the_password(monkeypatch):
    monkeypatch.setattr(db_module, "POOL_TIMEOUT_S", 0.3)
    db = Database(f"postgresql://funnel:s3cret-pw@127.0.0.1:{closed_port()}/funnel")
    store = PostgresIncidents(db)  # building it connects to nothing
    for call in (lambda: store.record(report(), result()), lambda: store.list()):
        with pytest.raises(DatabaseUnavailable) as caught:
            call()
        assert "s3cret-pw" not in str(caught.value) and "\n" not in str(caught.value)
        assert isinstance(caught.value, StoreError)  # TriageService: a note, the report still answered
    db.close()


def test_a_missing_table_is_one_line_store_error(databases):
    store = PostgresIncidents(databases())
    store.record(report(), result())
    with store._tables.db.connection() as conn:
        conn.execute("DROP TABLE funnel_incidents")
    with pytest.raises(StoreError, match=r'^incidents in postgresql://127\.0\.0\.1:\d+/t\w+: relation "funnel_incidents"'):
        store.list()


# --- Slack de-duplication and rate limit --------------------------------------------------------------------


class TestPostgresAlertState(AlertStateContract):
    @pytest.fixture
    def alert_state(self, databases):
        return PostgresAlertState(databases())


def test_one_alert_racing_in_two_processes_is_posted_once(make, receiver, databases):
    notifiers = [make(state=PostgresAlertState(databases())) for _ in range(2)]
    deliveries = run_together(*[lambda n=n: n.notify(triaged("fp-race")) for n in notifiers for _ in range(8)])
    statuses = [d.status for d in deliveries]
    assert statuses.count("sent") == 1 and statuses.count("deduplicated") == 15
    assert sorted(d.count for d in deliveries if d.status == "deduplicated") == list(range(2, 17))
    assert len(receiver.bodies) == 1


def test_the_rate_limit_is_service_wide(make, receiver, databases, clock):
    first, second = (make(rate_per_minute=2, state=PostgresAlertState(databases())) for _ in range(2))
    assert [first.notify(triaged("fp-1")).status, second.notify(triaged("fp-2")).status] == ["sent", "sent"]
    assert first.notify(triaged("fp-3")).status == "rate_limited"
    assert second.notify(triaged("fp-4")).status == "rate_limited"
    clock.now += 61
    assert second.notify(triaged("fp-3")).count == 2  # first's dropped occurrence, reported by second
    assert len(receiver.bodies) == 3


def test_a_failed_post_in_one_process_is_retried_by_the_next(make, receiver, databases):
    receiver.answer(reply(400, "invalid_payload"))
    first, second = (make(state=PostgresAlertState(databases())) for _ in range(2))
    assert first.notify(triaged()).status == "failed"
    delivery = second.notify(triaged())
    assert (delivery.status, delivery.count) == ("sent", 2)


def test_with_the_database_down_alerts_go_out_deduplicated_in_the_process(make, receiver, monkeypatch):
    monkeypatch.setattr(db_module, "POOL_TIMEOUT_S", 0.3)
    db = Database(f"postgresql://funnel:s3cret-pw@127.0.0.1:{closed_port()}/funnel")
    notifier = make(state=PostgresAlertState(db))
    first, second = notifier.notify(triaged()), notifier.notify(triaged())
    assert (first.status, second.status) == ("sent", "deduplicated")
    assert "de-duplicated in this process only (the database at postgresql://127.0.0.1:" in first.detail
    assert "s3cret-pw" not in first.detail + second.detail
    assert len(receiver.bodies) == 1
    db.close()


def test_finished_windows_are_pruned(databases):
    state = PostgresAlertState(databases())
    for i in range(5):
        state.settle(state.admit(f"done-{i}", 1000.0, 60, 100), sent=True)
    state.admit("pending", 1000.0, 60, 0)  # rate limited: one occurrence unreported
    later = 1000.0 + 60 + 601 + 600  # windows over, past the stale margin and the prune interval
    state.admit("new", later, 60, 100)
    with state._tables.db.connection() as conn:
        keys = {k for (k,) in conn.execute("SELECT key FROM funnel_alert_seen")}
    assert keys == {"pending", "new"}


def test_open_alert_state_chooses_the_database_or_memory(databases):
    assert isinstance(open_alert_state(None), EmbeddedAlertState)
    state = open_alert_state(databases())
    assert isinstance(state, PostgresAlertState) and state.clock() > 1_600_000_000  # wall clock, not monotonic
