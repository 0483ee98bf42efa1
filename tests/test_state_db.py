"""The service database's plumbing (`funnel.apps.state.db`) against a real PostgreSQL."""

from __future__ import annotations

import socket
import threading

import pytest

from funnel.apps.state.db import Database, DatabaseUnavailable
from funnel.errors import StoreError

pytest.importorskip("psycopg_pool")


def test_migrations_run_once_in_order_even_when_processes_start_together(pg_dsn):
    steps = ["CREATE TABLE t_a (x int)", "INSERT INTO t_a VALUES (1)", "ALTER TABLE t_a ADD COLUMN y int"]
    databases = [Database(pg_dsn) for _ in range(4)]
    errors: list[Exception] = []

    def start(db: Database) -> None:
        try:
            db.migrate("demo", steps)
        except Exception as e:  # noqa: BLE001 (recorded and asserted below)
            errors.append(e)

    threads = [threading.Thread(target=start, args=(db,)) for db in databases]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    db = databases[0]
    with db.connection() as conn:
        assert conn.execute("SELECT count(*), min(x) FROM t_a").fetchone() == (1, 1)  # the insert ran once
        assert conn.execute("SELECT version FROM funnel_schema WHERE component = 'demo'").fetchone() == (3,)
    db.migrate("demo", [*steps, "INSERT INTO t_a VALUES (2)"])  # a newer funnel appends a step
    with db.connection() as conn:
        assert conn.execute("SELECT count(*) FROM t_a").fetchone() == (2,)
    with pytest.raises(StoreError, match="newer than this funnel's 1"):
        db.migrate("demo", steps[:1])  # an older funnel against a newer schema: refused, nothing run
    for each in databases:
        each.close()


def test_a_failed_migration_step_leaves_the_schema_as_it_was(pg_dsn):
    db = Database(pg_dsn)
    with pytest.raises(Exception, match="no_such_table"):
        db.migrate("broken", ["CREATE TABLE t_b (x int)", "INSERT INTO no_such_table VALUES (1)"])
    with db.connection() as conn:
        assert conn.execute("SELECT to_regclass('t_b')").fetchone() == (None,)
    db.close()


def test_a_database_that_is_down_is_one_line_without_the_password():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    db = Database(f"postgresql://funnel:s3cret-pw@127.0.0.1:{port}/funnel")
    with pytest.raises(DatabaseUnavailable) as caught:
        with db.connection():
            pass
    message = str(caught.value)
    assert "s3cret-pw" not in message and "\n" not in message
    assert message.startswith(f"the database at postgresql://127.0.0.1:{port}/funnel is unavailable")
    assert caught.value.retry_after_s > 0
    db.close()
