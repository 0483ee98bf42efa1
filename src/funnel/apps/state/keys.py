"""API keys: who may read, write or administer which collections (`funnel keys`, `/v1/keys`).

A key is `fk_<id>_<secret>`: the id (12 hex characters) is public and names the key in lists, logs and
`funnel keys revoke`; the secret (256 random bits) is shown once, when the key is made, and never stored.
A key has a role (reader < writer < admin), a set of collections or all of them, a creation time, an
optional expiry, and a revocation time once revoked.

Hashing: the store keeps a per-key random salt and `scrypt(secret, salt)` (hashlib, i.e. OpenSSL). The
secret has 256 bits of entropy, so no cost factor is what protects it from guessing; scrypt is there so a
copied table cannot be checked against guesses at hash speed, and its cost is kept low (N=2^12, r=8: 4 MiB,
about 10 ms) because every wrong key a client sends pays it once. No pepper: the processes of a shared
service would all need the same one, one more secret to distribute and get wrong. Hashes are compared
with `hmac.compare_digest`, and a key id the store does not know is hashed against a dummy, so a wrong
secret and an unknown id take the same time and get the same answer.

Revocation bound: each process caches what it read about a key id for `CACHE_TTL_S` (5 s), so a key revoked
anywhere (CLI, another process, the API) is refused by every process within 5 s. The same bound holds for
whether the store has any key at all (`KeyVerifier.active`): a service with no key and no `api_key` is
open, as before keys existed; its first key closes it within 5 s. Revoked keys stay listed, so revoking the
last key never reopens the service.

Where: `EmbeddedKeys` in `DATA_DIR/keys.sqlite` (`funnel.apps.state.sqlite`); `PostgresKeys` in the
service's PostgreSQL, shared by every process; both run the same SQL (`SqlKeys`). `open_keys` chooses. A
store that cannot be read is a StoreError (503): requests are refused, never let through (fail closed).
Rows are only added and revoked, never deleted. What a key is (its record, how one is made and hashed):
`funnel.apps.state.key_records`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

from funnel.apps.state.db import Database
from funnel.apps.state.key_records import (
    CACHE_TTL_S,
    DUMMY_DIGEST,
    DUMMY_SALT,
    FILE_NAME,
    PREFIX,
    KeyRecord,
    KeyRejected,
    NewKey,
    Role,
    hash_secret,
    new_key,
    parse_token,
)
from funnel.apps.state.sqlite import InFile, SqliteFile, in_data_dir
from funnel.apps.state.tables import InDatabase
from funnel.errors import NotFound

__all__ = ["CACHE_TTL_S", "EmbeddedKeys", "KeyRecord", "KeyRejected", "KeyStore", "KeyVerifier", "NewKey",
           "PostgresKeys", "Role", "check_collections", "hash_secret", "new_key", "open_keys", "parse_token"]

COLUMNS = "id, role, collections, created_ts, expires_ts, revoked_ts, salt, digest, rpm, upload_mb_per_day"
SQLITE_STEPS = (
    ("""CREATE TABLE funnel_keys (
        id TEXT PRIMARY KEY, role TEXT NOT NULL, collections TEXT, created_ts REAL NOT NULL, expires_ts REAL,
        revoked_ts REAL, salt BLOB NOT NULL, digest BLOB NOT NULL)""",),
    ("ALTER TABLE funnel_keys ADD COLUMN rpm INTEGER",  # limits per key (NULL: the service's default)
     "ALTER TABLE funnel_keys ADD COLUMN upload_mb_per_day REAL"),
)
PG_MIGRATIONS = ("""CREATE TABLE funnel_keys (
    id text PRIMARY KEY, role text NOT NULL, collections text, created_ts double precision NOT NULL,
    expires_ts double precision, revoked_ts double precision, salt bytea NOT NULL, digest bytea NOT NULL)""",
                 "ALTER TABLE funnel_keys ADD COLUMN rpm integer, ADD COLUMN upload_mb_per_day double precision")


class KeyStore(Protocol):
    """Where keys are kept (`open_keys` chooses). Every verb may raise StoreError (the store is down)."""

    def add(self, record: KeyRecord) -> None: ...

    def get(self, key_id: str) -> KeyRecord | None: ...

    def list(self) -> list[KeyRecord]:
        """Every key ever made, revoked ones included, oldest first."""

    def revoke(self, key_id: str, now: float) -> KeyRecord | None:
        """Marks the key revoked (once: a second revoke keeps the first time); None for an unknown id."""

    def any(self) -> bool:
        """Whether a key was ever made (reads only; an embedded store that has no file yet has none)."""

    def unbind(self, collection: str) -> list[str]:
        """Takes `collection` off every key that names it; returns their ids. See `KeyVerifier.unbind`."""


class KeyVerifier:
    """Checks presented keys against a store, caching what it read for `ttl` seconds (the revocation bound).

    `verify(token)` returns the key's record or raises KeyRejected (one line) or StoreError. A key that
    verified is remembered, for at most `ttl`, by an HMAC of the token under a per-process random key, so a
    request with a good key does not pay scrypt every time and no secret is kept in memory."""

    def __init__(self, store: KeyStore, ttl: float = CACHE_TTL_S, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time):
        self.store, self.ttl, self.clock, self.wall = store, ttl, clock, wall
        self._records: dict[str, tuple[float, KeyRecord | None]] = {}
        self._good: dict[bytes, tuple[float, str]] = {}
        self._active: tuple[float, bool] | None = None
        self._memo = secrets.token_bytes(32)
        self._lock = threading.Lock()

    def active(self) -> bool:
        """Whether the store holds any key (then every guarded request needs one)."""
        now = self.clock()
        cached = self._active
        if cached is not None and now - cached[0] < self.ttl:
            return cached[1]
        found = self.store.any()
        self._active = (now, found)
        return found

    def verify(self, token: str) -> KeyRecord:
        parsed = parse_token(token)
        if parsed is None:
            raise KeyRejected(f"malformed API key: funnel keys look like {PREFIX}<12 hex>_<43 characters>")
        key_id, secret = parsed
        record = self._record(key_id)
        memo = hmac.new(self._memo, token.encode(), hashlib.sha256).digest()
        with self._lock:
            remembered = self._good.get(memo)
        now = self.clock()
        if remembered is None or now - remembered[0] >= self.ttl or record is None:
            # The same work whether or not the id exists: the answer and its time tell nothing about it.
            digest = hash_secret(secret, record.salt if record is not None else DUMMY_SALT)
            right = hmac.compare_digest(digest, record.digest if record is not None else DUMMY_DIGEST)
            if record is None or not right:
                raise KeyRejected("wrong API key")
            with self._lock:
                if len(self._good) > 10_000:
                    self._good.clear()
                self._good[memo] = (now, key_id)
        state = record.state(self.wall())
        if state != "active":
            raise KeyRejected(f"API key {key_id} is {state}")
        return record

    def unbind(self, collection: str) -> None:
        """A collection is made (or deleted): no key made before names it (issue 40). Keys name collections,
        so without this a key made for a collection that was deleted, or for a name before anyone made it,
        would read whatever later holds the name. Keys for collections that do not exist are refused
        (`check_collections`), and a new collection starts with no key naming it: only keys on every
        collection, and keys made for it afterwards, reach it. Other processes see it within `ttl`."""
        for key_id in self.store.unbind(collection):
            self.forget(key_id)

    def forget(self, key_id: str) -> None:
        """This process's own revocation is seen at once (others within `ttl`)."""
        with self._lock:
            self._records.pop(key_id, None)

    def _record(self, key_id: str) -> KeyRecord | None:
        now = self.clock()
        with self._lock:
            cached = self._records.get(key_id)
        if cached is not None and now - cached[0] < self.ttl:
            return cached[1]
        record = self.store.get(key_id)
        with self._lock:
            if len(self._records) > 10_000:
                self._records.clear()
            self._records[key_id] = (now, record)
        return record


def check_collections(names, existing) -> None:
    """NotFound (one line) for a key asked for collections that do not exist (see `KeyVerifier.unbind`)."""
    missing = sorted(set(names or ()) - set(existing))
    if missing:
        shown = ", ".join(repr(n) for n in missing[:5])
        raise NotFound(f"no collection {shown}: make the collection first; a key is for collections that exist")


# --- the stores ---------------------------------------------------------------------------------------------


def _row(row) -> KeyRecord:
    key_id, role, collections, created, expires, revoked, salt, digest, rpm, upload = row
    names = tuple(json.loads(collections)) if collections is not None else None
    return KeyRecord(key_id, Role(role), names, created, expires, revoked, bytes(salt), bytes(digest), rpm, upload)


class SqlKeys:
    """The verbs, over `_connection()` (autocommit) with `_mark` as the parameter placeholder."""

    _mark = "?"

    def _connection(self) -> AbstractContextManager:
        raise NotImplementedError

    def add(self, record: KeyRecord) -> None:
        m = self._mark
        names = json.dumps(list(record.collections)) if record.collections is not None else None
        with self._connection() as conn:
            conn.execute(f"INSERT INTO funnel_keys ({COLUMNS}) VALUES ({', '.join([m] * 10)})",
                         [record.id, record.role.value, names, record.created, record.expires, record.revoked,
                          record.salt, record.digest, record.rpm, record.upload_mb_per_day])

    def get(self, key_id: str) -> KeyRecord | None:
        with self._connection() as conn:
            row = conn.execute(f"SELECT {COLUMNS} FROM funnel_keys WHERE id = {self._mark}", [key_id]).fetchone()
        return _row(row) if row else None

    def list(self) -> list[KeyRecord]:
        with self._connection() as conn:
            rows = conn.execute(f"SELECT {COLUMNS} FROM funnel_keys ORDER BY created_ts, id").fetchall()
        return [_row(r) for r in rows]

    def revoke(self, key_id: str, now: float) -> KeyRecord | None:
        m = self._mark
        with self._connection() as conn:
            conn.execute(f"UPDATE funnel_keys SET revoked_ts = {m} WHERE id = {m} AND revoked_ts IS NULL",
                         [now, key_id])
        return self.get(key_id)

    def any(self) -> bool:
        with self._connection() as conn:
            return conn.execute("SELECT 1 FROM funnel_keys LIMIT 1").fetchone() is not None

    def unbind(self, collection: str) -> list[str]:
        m = self._mark
        changed = []
        with self._connection() as conn:
            rows = conn.execute("SELECT id, collections FROM funnel_keys WHERE collections IS NOT NULL").fetchall()
            for key_id, names in rows:
                names = json.loads(names)
                if collection in names:
                    kept = json.dumps([n for n in names if n != collection])
                    conn.execute(f"UPDATE funnel_keys SET collections = {m} WHERE id = {m}", [kept, key_id])
                    changed.append(key_id)
        return changed


class EmbeddedKeys(InFile, SqlKeys):
    """Keys in the SQLite file at `path`, made on the first key and readable by its owner alone (hashes only,
    but nobody else's business). Reading a store whose file does not exist finds no keys and creates nothing."""

    def __init__(self, path: Path | str):
        self._in_file(SqliteFile(path, SQLITE_STEPS, "key store", mode=0o600))

    def any(self) -> bool:
        return super().any() if self.path.exists() else False

    def get(self, key_id: str) -> KeyRecord | None:
        return super().get(key_id) if self.path.exists() else None

    def list(self) -> list[KeyRecord]:
        return super().list() if self.path.exists() else []

    def unbind(self, collection: str) -> list[str]:
        return super().unbind(collection) if self.path.exists() else []


class PostgresKeys(InDatabase, SqlKeys):
    """Keys in the service's database (`funnel_keys`), migrated on first use."""

    def __init__(self, db: Database):
        self._on_database(db, "keys", PG_MIGRATIONS)


def open_keys(db: Database | None, data_dir: Path | str | None = None) -> KeyStore:
    """The service's keys: in the service database `db` when there is one, else `keys.sqlite` under
    `data_dir`. Nothing is opened here."""
    if db is None:
        return EmbeddedKeys(in_data_dir(data_dir, FILE_NAME, "embedded keys"))
    return PostgresKeys(db)
