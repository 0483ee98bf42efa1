"""API keys (issue 34): the store on SQLite and on a real PostgreSQL, hashing, expiry, revocation and its
bound, and `funnel keys create|list|revoke` as a user runs it."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time

import pytest
from helpers import FakeClock

from funnel.apps.state.db import Database
from funnel.apps.state.home import EmbeddedHome
from funnel.apps.state.keys import (
    CACHE_TTL_S,
    KeyRejected,
    KeyVerifier,
    Role,
    hash_secret,
    new_key,
    open_keys,
    parse_token,
)
from funnel.errors import ConfigError, StoreError

FUNNEL = [sys.executable, "-c", "from funnel.apps.cli import run; run()"]


@pytest.fixture(params=["sqlite", "postgres"])
def store(request, tmp_path):
    if request.param == "sqlite":
        yield open_keys(None, tmp_path / "data")
        return
    db = Database(request.getfixturevalue("pg_dsn"))
    yield open_keys(db)
    db.close()


def test_a_key_is_stored_hashed_and_verified(store):
    assert not store.any()
    made = new_key("writer", ["b", "a", "a"], expires_days=2, now=1000.0)
    store.add(made.record)
    assert store.any()
    key_id, secret = parse_token(made.token)
    got = store.get(key_id)
    assert got == made.record and got.collections == ("a", "b") and got.role is Role.WRITER
    assert got.expires == 1000.0 + 2 * 86400
    # Only a salted hash is kept: the secret is nowhere in the record, and the hash is scrypt's.
    assert secret.encode() not in got.salt + got.digest and got.digest == hash_secret(secret, got.salt)
    assert "secret" not in json.dumps(got.public(0)) and secret not in repr(got) + repr(made)
    assert [k.id for k in store.list()] == [key_id]


def test_verify_refuses_every_bad_key_with_one_line(store):
    made = new_key("reader", None)
    store.add(made.record)
    verifier = KeyVerifier(store)
    assert verifier.verify(made.token).id == made.record.id
    _, secret = parse_token(made.token)
    other = "A" if secret[-1] != "A" else "B"
    for token, said in [
        (made.token[:-1] + other, "wrong API key"),  # right id, wrong secret
        (f"fk_{'0' * 12}_{secret}", "wrong API key"),  # an id nobody has: the same answer
        ("fk_short", "malformed"), ("", "malformed"), (made.token + "x", "malformed"),
    ]:
        with pytest.raises(KeyRejected, match=said) as caught:
            verifier.verify(token)
        assert "\n" not in str(caught.value)


def test_an_unknown_id_costs_what_a_known_one_does(tmp_path):
    store = open_keys(None, tmp_path)
    made = new_key("reader", None)
    store.add(made.record)
    _, secret = parse_token(made.token)
    verifier = KeyVerifier(store, ttl=0)  # no cache: every try reads and hashes

    def cost(token: str) -> float:
        times = []
        for _ in range(15):
            started = time.perf_counter()
            with pytest.raises(KeyRejected):
                verifier.verify(token)
            times.append(time.perf_counter() - started)
        return sorted(times)[len(times) // 2]

    known, unknown = cost(made.token[:-2] + "xx"), cost(f"fk_{'0' * 12}_{secret}")
    # Both pay one scrypt (milliseconds); without the dummy hash the unknown id would be ~100x faster.
    assert unknown > 0.5 * known and known > 0.5 * unknown, (known, unknown)


def test_expiry_and_revocation_within_the_bound(store):
    clock, wall = FakeClock(0.0), FakeClock(time.time())
    made = new_key("admin", None, expires_days=1, now=wall.now)
    store.add(made.record)
    verifier = KeyVerifier(store, clock=clock, wall=wall)
    verifier.verify(made.token)
    wall.now += 86400
    with pytest.raises(KeyRejected, match="expired"):
        verifier.verify(made.token)
    wall.now -= 86400
    # Revoked elsewhere (another process): this verifier still has it cached, for at most the bound.
    revoked = store.revoke(made.record.id, wall.now)
    assert revoked.state(wall.now) == "revoked" and store.revoke(made.record.id, wall.now + 9).revoked == wall.now
    verifier.verify(made.token)
    clock.now += CACHE_TTL_S
    with pytest.raises(KeyRejected, match="revoked"):
        verifier.verify(made.token)
    assert store.revoke("000000000000", wall.now) is None
    assert store.any(), "a revoked key keeps the service closed"


def test_the_first_key_closes_an_open_service_within_the_bound(tmp_path):
    clock = FakeClock(0.0)
    store = open_keys(None, tmp_path)
    verifier = KeyVerifier(store, clock=clock)
    assert not verifier.active() and not (tmp_path / "keys.sqlite").exists(), "reading creates nothing"
    store.add(new_key("reader", ["a"]).record)
    clock.now += CACHE_TTL_S
    assert verifier.active()


def test_bad_input_and_a_broken_store_are_one_line(tmp_path):
    with pytest.raises(ConfigError, match="unknown role"):
        new_key("owner", None)
    with pytest.raises(ConfigError, match="not a collection"):
        new_key("reader", ["../x"])
    with pytest.raises(ConfigError, match="expiry"):
        new_key("reader", None, expires_days=-1)
    (tmp_path / "keys.sqlite").write_bytes(b"not a database at all" * 100)
    with pytest.raises(StoreError) as caught:
        KeyVerifier(open_keys(None, tmp_path)).active()
    assert "\n" not in str(caught.value)
    other = tmp_path / "other"
    other.mkdir()
    with sqlite3.connect(other / "keys.sqlite") as con:
        con.execute("CREATE TABLE notes (x)")
    with pytest.raises(StoreError, match="something else"):
        open_keys(None, other).add(new_key("reader", None).record)


def test_a_database_that_is_down_is_a_store_error():
    db = Database("postgresql://funnel@127.0.0.1:1/none?connect_timeout=1")
    try:
        with pytest.raises(StoreError, match="unavailable"):
            KeyVerifier(open_keys(db)).active()
    finally:
        db.close()


# --- the CLI ------------------------------------------------------------------------------------------------


def funnel(*args, cwd):
    env = {**os.environ, "FUNNEL_EMBEDDER": "hashing"}
    result = subprocess.run([*FUNNEL, *args], check=False, cwd=cwd, capture_output=True, text=True, env=env, timeout=120)
    assert "Traceback" not in result.stdout + result.stderr
    return result


def test_cli_create_list_revoke(tmp_path):
    data = ["--data-dir", str(tmp_path / "data")]
    EmbeddedHome(tmp_path / "data").write_marker("docs")  # a key is for a collection that exists
    made = funnel("keys", "create", "--role", "reader", "--collection", "docs", "--expires", "30", *data,
                  cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip().splitlines()[-1]
    assert parse_token(token), "the key alone on the last line"
    key_id = parse_token(token)[0]
    admin = funnel("keys", "create", "--role", "admin", *data, cwd=tmp_path)
    admin_token = admin.stdout.strip().splitlines()[-1]
    listed = funnel("keys", "list", *data, cwd=tmp_path)
    assert listed.returncode == 0 and token not in listed.stdout and admin_token not in listed.stdout
    lines = listed.stdout.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith(f"{key_id}  reader  active   collections=docs")
    assert "collections=all" in lines[1] and "expires=never" in lines[1]
    rows = json.loads(funnel("keys", "list", "--json", *data, cwd=tmp_path).stdout)
    assert {r["id"] for r in rows} == {key_id, parse_token(admin_token)[0]}
    assert not any("digest" in r or "salt" in r for r in rows)
    revoked = funnel("keys", "revoke", key_id, *data, cwd=tmp_path)
    assert revoked.returncode == 0 and revoked.stdout.strip().splitlines()[-1] == key_id
    assert "revoked" in funnel("keys", "list", *data, cwd=tmp_path).stdout.splitlines()[0]
    for args, said in [(("revoke", "nope"), "no key 'nope'"), (("create", "--role", "root"), "unknown role"),
                       (("create", "--role", "reader", "--collection", "A B"), "not a collection"),
                       (("create", "--role", "reader", "--collection", "nope"), "no collection 'nope'")]:
        bad = funnel("keys", *args, *data, cwd=tmp_path)
        assert bad.returncode != 0 and said in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_cli_against_postgres(tmp_path, pg_dsn):
    made = funnel("keys", "create", "--role", "writer", "--database", pg_dsn, cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip().splitlines()[-1]
    db = Database(pg_dsn)
    try:
        assert KeyVerifier(open_keys(db)).verify(token).role is Role.WRITER
    finally:
        db.close()
    assert parse_token(token)[0] in funnel("keys", "list", "--database", pg_dsn, cwd=tmp_path).stdout
