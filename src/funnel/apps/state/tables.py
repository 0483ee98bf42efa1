"""One component's tables in the service database: migrated on first use, failures as one-line StoreErrors.

A component (incidents, alert dedupe, ...) migrates lazily rather than when it is built, so `funnel serve`
starts while the database is down and the first request after it is back creates what is missing. Every
error the component's SQL raises leaves as a `StoreError` with the database's label and no password: a
lost connection as `DatabaseUnavailable` (503, from `Database`), anything else (a dropped table, a
permission) as the server's first line.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from funnel.apps.state.backing import Backed
from funnel.apps.state.db import Database
from funnel.errors import StoreError


class ComponentTables:
    """`component`'s tables (created by `steps`, see `Database.migrate`) in `db`."""

    def __init__(self, db: Database, component: str, steps: Sequence[str]):
        self.db = db
        self.component = component
        self._steps = steps
        self._migrated = False
        self._lock = threading.Lock()

    def warm_up(self) -> None:
        """Creates or upgrades the tables now (once per instance; again after a failure)."""
        if self._migrated:
            return
        with self._lock:
            if not self._migrated:
                with self._converted():
                    self.db.migrate(self.component, self._steps)
                self._migrated = True

    @contextmanager
    def connection(self) -> Iterator:
        """A pooled autocommit connection to the migrated tables."""
        self.warm_up()
        with self._converted(), self.db.connection() as conn:
            yield conn

    @contextmanager
    def transaction(self) -> Iterator:
        """A connection inside one transaction: committed when the block ends, rolled back on any error."""
        self.warm_up()
        with self._converted(), self.db.transaction() as conn:
            yield conn

    @contextmanager
    def _converted(self) -> Iterator[None]:
        import psycopg  # installed: Database could not be built without it

        try:
            yield
        except psycopg.Error as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise StoreError(f"{self.component} in {self.db.label}: {self.db.redact(first)}") from None


class InDatabase(Backed):
    """A PostgreSQL store: its component's tables in `db`. A store calls `_on_database` from its `__init__`."""

    _mark = "%s"

    def _on_database(self, db: Database, component: str, steps: Sequence[str]) -> None:
        self.db = db
        self._backing = self._tables = ComponentTables(db, component, steps)

    def _where(self) -> str:
        return self.db.label
