"""Limits (issue 34): requests per minute and upload bytes per day per key (429 + Retry-After, recovering when
the window ends), the defaults and the single api_key, refused keys per client address (brute force), and
the counts shared by two servers on one PostgreSQL. Windows are shortened by `[serve] limit_window_s` or
moved by a FakeClock; nothing sleeps a minute. Client addresses are varied with X-Forwarded-For, which
uvicorn (the server `funnel serve` runs) honours from 127.0.0.1 only, the proxy it trusts by default."""

from __future__ import annotations

import logging
import sqlite3
import threading
import time

import httpx
import pytest
from api_support import upload
from helpers import FakeClock, serving
from test_keys import funnel

from funnel.apps.api import create_app
from funnel.apps.api.access import Principal
from funnel.apps.api.errors import RateLimited
from funnel.apps.api.limits import UPLOAD_ROUTE, AuthGuard, KeyLimits
from funnel.apps.settings import Settings
from funnel.apps.state.db import Database
from funnel.apps.state.keys import Role, new_key, open_keys
from funnel.apps.state.limits import MemoryCounters, PostgresCounters, Window

LEGACY = "legacy-admin-key-0123"


def _settings(data, **serve) -> Settings:
    return Settings(embedder="hashing", reranker="none", data_dir=data, serve=serve)


def _key(store, role="admin", collections=None, **limits) -> str:
    made = new_key(role, collections, **limits)
    store.add(made.record)
    return made.token


def _as(token: str, address: str | None = None) -> dict:
    return {"X-API-Key": token, **({"X-Forwarded-For": address} if address else {})}


# --- the counting, on a clock moved by hand -----------------------------------------------------------------


def test_a_key_over_its_rate_waits_for_the_window_and_recovers():
    clock = FakeClock(1_200_000.0 + 15)  # 15 s into a minute
    limits = KeyLimits(MemoryCounters(clock), clock=clock)
    key = Principal("k1", Role.READER, rpm=3)
    for _ in range(3):
        limits(key, "GET /v1/collections", {})
    with pytest.raises(RateLimited) as over:
        limits(key, "GET /v1/collections", {})
    assert over.value.retry_after_s == 45 and "3 requests per minute" in str(over.value)
    limits(Principal("k2", Role.READER, rpm=3), "GET /v1/collections", {})  # another key: its own count
    clock.now += 45
    limits(key, "GET /v1/collections", {})  # a new minute


def test_defaults_the_api_key_and_unlimited():
    clock = FakeClock(1_000_000.0)
    limits = KeyLimits(MemoryCounters(clock), defaults=(2, None), clock=clock)
    assert limits.limits_of(Principal("k", Role.READER)) == (2, None)  # no limit of its own: the default
    assert limits.limits_of(Principal("k", Role.READER, rpm=0)) == (None, None)  # 0: unlimited
    assert limits.limits_of(Principal("k", Role.READER, rpm=9, upload_mb_per_day=1)) == (9, 2**20)
    assert limits.limits_of(Principal("api_key", Role.ADMIN)) == (None, None)  # unlimited unless set
    legacy = KeyLimits(MemoryCounters(clock), defaults=(2, 1), legacy=(5, 2), clock=clock)
    assert legacy.limits_of(Principal("api_key", Role.ADMIN)) == (5, 2 * 2**20)
    for _ in range(100):
        limits(None, "GET /v1/collections", {})  # an open service counts nothing


def test_upload_bytes_per_day_are_charged_and_a_refused_upload_is_not():
    clock = FakeClock(10 * 86400 + 3600.0)  # 01:00 UTC
    counters = MemoryCounters(clock)
    limits = KeyLimits(counters, clock=clock)
    key = Principal("w", Role.WRITER, upload_mb_per_day=1)

    def sending(n):
        return {"headers": [(b"content-length", str(n).encode())]}

    limits(key, UPLOAD_ROUTE, sending(600_000))
    with pytest.raises(RateLimited) as over:
        limits(key, UPLOAD_ROUTE, sending(600_000))
    assert over.value.retry_after_s == 23 * 3600  # midnight UTC
    assert counters.get("upload:w", 10 * 86400) == 600_000
    limits(key, UPLOAD_ROUTE, sending(400_000))  # what is left still fits
    limits(key, "POST /v1/collections/{name}/search", sending(10**9))  # only uploads are charged
    clock.now += 23 * 3600
    limits(key, UPLOAD_ROUTE, sending(1_000_000))


def test_the_address_guard_counts_refusals_per_address():
    clock = FakeClock(1_200_000.0 + 50)
    guard = AuthGuard(MemoryCounters(clock), per_window=3, window_s=60, clock=clock)
    for _ in range(3):
        guard.check("10.0.0.1")
        guard.refused("10.0.0.1", "abc", "wrong API key")
    with pytest.raises(RateLimited) as throttled:
        guard.check("10.0.0.1")
    assert throttled.value.retry_after_s == 10
    guard.check("10.0.0.2")
    clock.now += 10
    guard.check("10.0.0.1")
    assert Window(60).retry_after(120.5) == 60 and Window(60).retry_after(179.9) == 1


# --- real servers ---------------------------------------------------------------------------------------------


def test_a_server_answers_429_with_retry_after_then_recovers(tmp_path):
    store = open_keys(None, tmp_path)
    limited, free = _key(store, "reader", rpm=3), _key(store, "reader")
    with serving(create_app(_settings(tmp_path, limit_window_s=2))) as url:
        assert httpx.get(url + "/v1/collections", headers=_as(free)).status_code == 200  # warm: no slow first
        answers = []
        while not answers or answers[-1].status_code != 429:  # a window may end on the way: the one that
            answers.append(httpx.get(url + "/v1/collections", headers=_as(limited)))  # refuses holds three 200s
            assert len(answers) <= 8, [a.status_code for a in answers]
        assert [a.status_code for a in answers[-4:]] == [200, 200, 200, 429]
        over = answers[-1]
        assert 1 <= int(over.headers["retry-after"]) <= 2
        assert "\n" not in over.json()["detail"] and "requests per 2 s" in over.json()["detail"]
        assert httpx.get(url + "/v1/collections", headers=_as(free)).status_code == 200
        time.sleep(int(over.headers["retry-after"]) + 0.05)
        assert httpx.get(url + "/v1/collections", headers=_as(limited)).status_code == 200


def test_a_server_limits_upload_bytes_per_day_and_keeps_defaults(tmp_path):
    store = open_keys(None, tmp_path)
    admin = _key(store, "admin", rpm=0)  # unlimited, though the default below is 5
    writer = _key(store, "writer", ["docs"], upload_mb_per_day=0.002)  # 2097 bytes a day
    plain = _key(store, "reader")
    with serving(create_app(_settings(tmp_path, key_rpm=5, api_key=LEGACY))) as url:
        assert httpx.post(url + "/v1/collections", json={"name": "docs"}, headers=_as(admin)).status_code == 201
        client = httpx.Client(base_url=url, headers=_as(writer), timeout=30)
        assert upload(client, "docs", [("a.txt", b"anvils " * 100)]).status_code == 202
        refused = upload(client, "docs", [("b.txt", b"lighthouses " * 100)])
        assert refused.status_code == 429 and "MiB of uploads per day" in refused.json()["detail"]
        assert 0 < int(refused.headers["retry-after"]) <= 86400
        assert upload(client, "docs", [("c.txt", b"x")]).status_code == 202, "the refused one was not charged"
        statuses = [httpx.get(url + "/v1/collections", headers=_as(plain)).status_code for _ in range(6)]
        assert statuses.count(429) >= 1 and statuses[0] == 200, "key_rpm is the default of a key without one"
        for _ in range(8):  # the admin key (rpm 0) and the api_key are unlimited
            assert httpx.get(url + "/v1/collections", headers=_as(admin)).status_code == 200
            assert httpx.get(url + "/v1/collections", headers=_as(LEGACY)).status_code == 200


def test_brute_force_throttles_one_address_and_not_another(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="funnel.api.access")
    store = open_keys(None, tmp_path)
    right = _key(store, "reader")
    wrong = f"fk_{'a' * 12}_{'z' * 43}"
    with serving(create_app(_settings(tmp_path, auth_failures_per_minute=3, limit_window_s=4))) as url:
        assert httpx.get(url + "/v1/collections", headers=_as(right, "10.0.0.3")).status_code == 200  # warm
        time.sleep(4 - time.time() % 4)  # the whole story below fits in one 4 s window
        for _ in range(3):
            assert httpx.get(url + "/v1/collections", headers=_as(wrong, "10.0.0.1")).status_code == 401
        for _ in range(4):  # a missing key is no guess: it is not counted
            assert httpx.get(url + "/v1/collections", headers={"X-Forwarded-For": "10.0.0.2"}).status_code == 401
        throttled = httpx.get(url + "/v1/collections", headers=_as(right, "10.0.0.1"))
        assert throttled.status_code == 429, "even the right key, from that address"
        assert 1 <= int(throttled.headers["retry-after"]) <= 4 and "\n" not in throttled.json()["detail"]
        assert httpx.get(url + "/v1/collections", headers=_as(right, "10.0.0.2")).status_code == 200
        assert httpx.get(url + "/v1/collections", headers=_as(wrong, "10.0.0.2")).status_code == 401
        assert httpx.get(url + "/health", headers=_as(wrong, "10.0.0.1")).status_code == 200, "open paths stay open"
        time.sleep(int(throttled.headers["retry-after"]) + 0.05)
        assert httpx.get(url + "/v1/collections", headers=_as(right, "10.0.0.1")).status_code == 200
    assert caplog.text.count("refused an API key from 10.0.0.1 (key id aaaaaaaaaaaa)") == 3
    assert "3 refused keys from 10.0.0.1" in caplog.text and "z" * 43 not in caplog.text


# --- PostgreSQL: every process counts into one row ---------------------------------------------------------------


def test_postgres_counters_are_atomic(pg_dsn):
    db = Database(pg_dsn)
    try:
        counters = PostgresCounters(db)
        threads = [threading.Thread(target=lambda: [counters.add("rpm:x", 60, 1) for _ in range(25)])
                   for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert counters.get("rpm:x", 60) == 200 and counters.get("rpm:x", 120) == 0
        assert counters.add("rpm:x", 60, -50) == 150
    finally:
        db.close()


def test_two_servers_on_one_postgres_share_the_counts(tmp_path, pg_dsn):
    db = Database(pg_dsn)
    try:
        store = open_keys(db)
        limited, right = _key(store, "reader", rpm=4), _key(store, "reader")
    finally:
        db.close()
    settings = Settings(embedder="hashing", reranker="none", database=pg_dsn, data_dir=tmp_path / "unused",
                        serve={"auth_failures_per_minute": 4, "limit_window_s": 3600})
    wrong = f"fk_{'b' * 12}_{'q' * 43}"
    if 3600 - time.time() % 3600 < 30:  # all of it in one window
        time.sleep(3600 - time.time() % 3600)
    with serving(create_app(settings)) as one, serving(create_app(settings)) as two:
        statuses = [httpx.get(u + "/v1/collections", headers=_as(limited)).status_code for u in (one, two) * 2]
        assert statuses == [200] * 4
        for u in (one, two):
            over = httpx.get(u + "/v1/collections", headers=_as(limited))
            assert over.status_code == 429 and int(over.headers["retry-after"]) > 0
        for u in (one, two, one, two):  # four refused keys from one address, two through each server
            assert httpx.get(u + "/v1/collections", headers=_as(wrong, "10.9.9.9")).status_code == 401
        time.sleep(1.1)  # the bound: a process trusts "not throttled" for 1 s before asking again
        for u in (one, two):
            assert httpx.get(u + "/v1/collections", headers=_as(right, "10.9.9.9")).status_code == 429
            assert httpx.get(u + "/v1/collections", headers=_as(right, "10.9.9.8")).status_code == 200


# --- keys carry their limits ------------------------------------------------------------------------------------


def test_cli_and_api_set_limits_and_an_old_key_file_is_upgraded(tmp_path):
    data = ["--data-dir", str(tmp_path / "data")]
    made = funnel("keys", "create", "--role", "reader", "--rpm", "30", "--upload-mb-per-day", "5", *data,
                  cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    listed = funnel("keys", "list", *data, cwd=tmp_path).stdout
    assert "rpm=30  upload_mb_per_day=5" in listed
    bad = funnel("keys", "create", "--role", "reader", "--rpm", "-1", *data, cwd=tmp_path)
    assert bad.returncode != 0 and "rpm must be between" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    old = tmp_path / "old" / "keys.sqlite"  # a keys.sqlite written before limits (schema 1)
    old.parent.mkdir()
    with sqlite3.connect(old) as con:
        con.execute("CREATE TABLE funnel_keys (id TEXT PRIMARY KEY, role TEXT NOT NULL, collections TEXT, "
                    "created_ts REAL NOT NULL, expires_ts REAL, revoked_ts REAL, salt BLOB NOT NULL, "
                    "digest BLOB NOT NULL)")
        con.execute("INSERT INTO funnel_keys VALUES ('0123456789ab', 'admin', NULL, 1, NULL, NULL, x'00', x'00')")
        con.execute("PRAGMA user_version = 1")
    con.close()
    kept = open_keys(None, old.parent).get("0123456789ab")
    assert kept is not None and kept.rpm is None and kept.role is Role.ADMIN
    admin = _key(open_keys(None, tmp_path / "api"), "admin")
    with serving(create_app(_settings(tmp_path / "api"))) as url:
        body = {"role": "writer", "rpm": 7, "upload_mb_per_day": 0}
        made = httpx.post(url + "/v1/keys", json=body, headers=_as(admin)).json()
        assert made["rpm"] == 7 and made["upload_mb_per_day"] == 0
        assert httpx.post(url + "/v1/keys", json={"role": "reader", "rpm": -2}, headers=_as(admin)).status_code == 422
