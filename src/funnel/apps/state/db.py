"""The service's PostgreSQL (`funnel serve --database URL`): one connection pool per process, schema
migrations that run once under a lock, and one line for every failure.

Every piece of service state that several `funnel serve` processes must share (collections, documents and
their files, conversations, metrics, incidents, alert dedupe, the job queue) keeps its tables here, each
component migrating its own tables by name (`migrate`). The password never leaves this module: errors and
labels carry the URL without it.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from funnel.errors import ConfigError, StoreError, missing_dependency

log = logging.getLogger(__name__)

# How long a request waits for a pooled connection, and for a new connection to the server, before it is
# told the database is unavailable (503 with Retry-After) rather than hanging.
POOL_TIMEOUT_S = 5.0
CONNECT_TIMEOUT_S = 5
RETRY_AFTER_S = 5


class DatabaseUnavailable(StoreError):
    """The service's database cannot be reached or answered with a connection error (HTTP 503)."""

    exit_code = 3
    retry_after_s = RETRY_AFTER_S


def _psycopg():
    try:
        import psycopg
        import psycopg_pool
    except ImportError:
        raise missing_dependency("the service database", "psycopg[pool]", "postgres") from None
    return psycopg, psycopg_pool


def is_database_url(text: str | None) -> bool:
    return bool(text) and text.split("://", 1)[0] in ("postgresql", "postgres")


def url_params(url: str, what: str = "the database") -> dict:
    """A connection string's parameters; ConfigError naming `what` (never the string, which may hold a
    password) when it does not parse."""
    psycopg, _ = _psycopg()
    try:
        return psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        raise ConfigError(f"{what} is not a PostgreSQL connection string (a % in a password is "
                          "written %25)") from None


def _label(params: dict) -> str:
    return f"postgresql://{params.get('host') or 'localhost'}:{params.get('port') or 5432}/{params.get('dbname') or ''}"


def url_label(url: str) -> str:
    """postgresql://host:port/dbname: where a URL points, without its user or password."""
    try:
        return _label(url_params(url))
    except ConfigError:
        return "postgresql://(a connection string that does not parse)"


class Database:
    """A pool of connections (autocommit; a `transaction()` opens one explicitly) to the database at `url`.

    Cheap to build: nothing connects until the first use, so a server starts (and answers /health with the
    reason) while the database is down, and recovers without a restart once it is back."""

    def __init__(self, url: str, max_size: int = 8):
        _, pool = _psycopg()
        params = url_params(url)
        self._password = params.get("password") or None
        self.label = _label(params)
        self.url = url
        kwargs = {"autocommit": True, "connect_timeout": CONNECT_TIMEOUT_S, "keepalives": 1,
                  "keepalives_idle": 30, "keepalives_interval": 10, "keepalives_count": 3}
        self._pool = pool.ConnectionPool(
            url, min_size=0, max_size=max_size, kwargs={k: v for k, v in kwargs.items() if k not in url},
            open=False, timeout=POOL_TIMEOUT_S, check=pool.ConnectionPool.check_connection,
            name="funnel-state",
        )
        self._opened = False

    def __str__(self) -> str:
        return self.label

    def redact(self, text: str) -> str:
        return text.replace(self._password, "***") if self._password else text

    def _unavailable(self, error: Exception) -> DatabaseUnavailable:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        reason = self.redact(first.removeprefix("connection failed: "))
        return DatabaseUnavailable(f"the database at {self.label} is unavailable: {reason}")

    @contextmanager
    def connection(self) -> Iterator:
        """A pooled connection (autocommit). A connection failure becomes DatabaseUnavailable; a broken
        connection goes back to the pool, which checks it before the next use."""
        psycopg, pool = _psycopg()
        if not self._opened:
            self._pool.open(wait=False)
            self._opened = True
        try:
            with self._pool.connection() as conn:
                yield conn
        except (pool.PoolTimeout, psycopg.OperationalError) as e:
            raise self._unavailable(e) from None

    @contextmanager
    def transaction(self) -> Iterator:
        """A connection inside one transaction: committed when the block ends, rolled back on any error."""
        with self.connection() as conn, conn.transaction():
            yield conn

    def migrate(self, component: str, steps: Sequence[str]) -> None:
        """Bring `component`'s tables to `len(steps)`: run each step it has not run yet, in one transaction
        under an advisory lock, so two processes starting together migrate once (the second waits, then
        finds nothing left to do). A step is SQL; steps are only ever appended."""
        key = zlib.crc32(f"funnel-migrate:{component}".encode())
        with self.transaction() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", [key])
            conn.execute("CREATE TABLE IF NOT EXISTS funnel_schema (component text PRIMARY KEY, version int NOT NULL)")
            row = conn.execute("SELECT version FROM funnel_schema WHERE component = %s", [component]).fetchone()
            done = row[0] if row else 0
            if done > len(steps):
                raise StoreError(f"the database at {self.label} holds {component} schema version {done}, newer "
                                 f"than this funnel's {len(steps)}; upgrade funnel")
            for step in steps[done:]:
                conn.execute(step)
            if done < len(steps):
                conn.execute("INSERT INTO funnel_schema VALUES (%s, %s) ON CONFLICT (component) DO UPDATE "
                             "SET version = EXCLUDED.version", [component, len(steps)])
                log.info("migrated %s in %s from version %d to %d", component, self.label, done, len(steps))

    def close(self) -> None:
        if self._opened:
            self._pool.close()
            self._opened = False
