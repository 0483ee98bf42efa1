"""Limits (issue 34): requests per minute and upload bytes per day per key (429 + Retry-After, recovering when
the window ends), the defaults and the single api_key, refused keys per client address (brute force), and
the counts shared by two servers on one PostgreSQL. Windows are shortened by `[serve] limit_window_s` or
moved by a FakeClock; nothing sleeps a minute. Client addresses are varied with X-Forwarded-For from a server
that trusts 127.0.0.1 as its proxy (`[serve] trusted_proxies`); without that setting the header is not
believed (issue 40: forged addresses). A key's rerank and embeddings calls count apart (`compute_rpm`)."""

from __future__ import annotations

import logging
import sqlite3
import threading
import time

import httpx
import pytest
from api_support import upload, wait_done
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
    plain = _key(store, "reader")
    with serving(create_app(_settings(tmp_path, key_rpm=5, api_key=LEGACY))) as url:
        assert httpx.post(url + "/v1/collections", json={"name": "docs"}, headers=_as(admin)).status_code == 201
        writer = _key(store, "writer", ["docs"], upload_mb_per_day=0.002)  # 2097 bytes a day
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
    settings = _settings(tmp_path, auth_failures_per_minute=3, limit_window_s=4,
                         trusted_proxies=["127.0.0.1"])
    with serving(create_app(settings)) as url:
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
        assert httpx.get(url + "/health", headers={"X-Forwarded-For": "10.0.0.1"}).status_code == 200, (
            "open paths stay open to requests without a key")
        assert httpx.get(url + "/health", headers=_as(wrong, "10.0.0.1")).status_code == 429, (
            "a key sent to /health is checked like anywhere else (issue 40)")
        time.sleep(int(throttled.headers["retry-after"]) + 0.05)
        assert httpx.get(url + "/v1/collections", headers=_as(right, "10.0.0.1")).status_code == 200
    assert caplog.text.count("refused an API key from 10.0.0.1 (key id aaaaaaaaaaaa)") == 3
    assert "3 refused keys from 10.0.0.1" in caplog.text and "z" * 43 not in caplog.text


# --- forwarded addresses (issue 40) ---------------------------------------------------------------------


def _from(address: str) -> httpx.Client:
    """A client whose connection comes from `address` (any of 127.0.0.0/8 is this machine)."""
    return httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=30)


def _audited_clients(app, action: str = "auth.failed") -> set[str]:
    deadline = time.monotonic() + 5  # a row is written as its response ends
    while True:
        clients = {row.client for row in app.state.audit.store.read(1000) if row.action == action}
        if clients or time.monotonic() > deadline:
            return clients
        time.sleep(0.05)


def _one_window(length: int) -> None:
    if length - time.time() % length < 30:  # all of a test in one window
        time.sleep(length - time.time() % length)


def test_a_forged_forwarded_address_is_not_believed(tmp_path):
    """Without trusted proxies, a process on the server's host that forges a new X-Forwarded-For per guess is
    still one address: blocked after auth_failures_per_minute (20), logged as itself, and nobody else is."""
    store = open_keys(None, tmp_path)
    right = _key(store, "reader")
    wrong = f"fk_{'c' * 12}_{'w' * 43}"
    app = create_app(_settings(tmp_path, limit_window_s=3600))
    _one_window(3600)
    with serving(app) as url, _from("127.0.0.1") as attacker, _from("127.0.0.2") as other:
        forged = [f"10.0.0.{i}" for i in range(1, 26)]
        statuses = [attacker.get(url + "/v1/collections", headers=_as(wrong, a)).status_code for a in forged]
        assert statuses == [401] * 20 + [429] * 5
        assert _audited_clients(app) == {"127.0.0.1"}
        assert other.get(url + "/v1/collections", headers=_as(right, "10.0.0.1")).status_code == 200
        assert attacker.get(url + "/v1/collections", headers=_as(right, "10.0.0.99")).status_code == 429


def test_trusted_proxies_are_the_only_ones_believed(tmp_path):
    store = open_keys(None, tmp_path)
    right = _key(store, "reader")
    wrong = f"fk_{'d' * 12}_{'w' * 43}"
    app = create_app(_settings(tmp_path, auth_failures_per_minute=3, limit_window_s=3600,
                               trusted_proxies=["127.0.0.1"]))
    _one_window(3600)
    with serving(app) as url, _from("127.0.0.1") as proxy, _from("127.0.0.2") as stranger:
        for _ in range(3):  # through the proxy: the forwarded address is the client
            assert proxy.get(url + "/v1/collections", headers=_as(wrong, "10.9.9.9")).status_code == 401
        assert proxy.get(url + "/v1/collections", headers=_as(right, "10.9.9.9")).status_code == 429
        assert proxy.get(url + "/v1/collections", headers=_as(right, "10.9.9.8")).status_code == 200
        assert _audited_clients(app) == {"10.9.9.9"}
        for _ in range(3):  # from a peer that is no proxy: its own address, whatever it forwards
            assert stranger.get(url + "/v1/collections", headers=_as(wrong, "10.7.7.7")).status_code == 401
        assert proxy.get(url + "/v1/collections", headers=_as(right, "10.7.7.7")).status_code == 200
        assert stranger.get(url + "/v1/collections", headers=_as(right)).status_code == 429
    assert _audited_clients(app) == {"10.9.9.9", "127.0.0.2"}


# --- compute: rerank and embeddings per key (issue 40) --------------------------------------------------


def test_compute_calls_count_apart_from_the_rpm():
    clock = FakeClock(1_200_000.0)
    limits = KeyLimits(MemoryCounters(clock), defaults=(10, None), compute_rpm=2, clock=clock)
    key = Principal("k", Role.READER)
    limits(key, "POST /v1/rerank", {})
    limits(key, "POST /v1/embeddings", {})
    with pytest.raises(RateLimited) as over:
        limits(key, "POST /api/rerank", {})
    assert over.value.retry_after_s == 60 and "2 rerank and embedding requests per minute" in str(over.value)
    limits(key, "POST /v1/collections/{name}/search", {})  # other routes: the rpm alone (4 of 10)
    limits(Principal("k2", Role.READER), "POST /v1/rerank", {})  # another key: its own bucket
    for _ in range(20):
        limits(Principal("api_key", Role.ADMIN), "POST /v1/rerank", {})  # the api_key is exempt
        limits(None, "POST /v1/rerank", {})  # an open service counts nothing
    clock.now += 60
    limits(key, "POST /v1/rerank", {})  # a new minute
    unlimited = KeyLimits(MemoryCounters(clock), compute_rpm=0, clock=clock)
    for _ in range(100):
        unlimited(key, "POST /v1/rerank", {})


def test_a_server_limits_a_keys_compute_but_not_its_search(tmp_path):
    store = open_keys(None, tmp_path)
    reader, other = _key(store, "reader"), _key(store, "reader")
    settings = Settings(embedder="hashing", reranker="lexical", data_dir=tmp_path, api_key=LEGACY,
                        serve={"compute_rpm": 3, "limit_window_s": 3600})
    _one_window(3600)
    with serving(create_app(settings)) as url:
        c = httpx.Client(base_url=url, headers=_as(reader), timeout=30)
        admin = httpx.Client(base_url=url, headers=_as(LEGACY), timeout=30)
        assert admin.post("/v1/collections", json={"name": "docs"}).status_code == 201
        assert upload(admin, "docs", [("a.txt", b"anvils and lighthouses\n")]).status_code == 202
        wait_done(admin, "docs")
        body = {"query": "anvils", "documents": ["anvils", "lighthouses"]}
        assert c.post("/v1/rerank", json=body).status_code == 200
        assert c.post("/api/rerank", json=body).status_code == 200
        assert c.post("/v1/embeddings", json={"input": "anvils"}).status_code == 200
        over = c.post("/v1/rerank", json=body)
        assert over.status_code == 429 and 1 <= int(over.headers["retry-after"]) <= 3600
        assert "3 rerank and embedding requests per 3600 s" in over.json()["detail"]
        assert c.post("/v1/embeddings", json={"input": "anvils"}).status_code == 429
        assert c.post("/v1/collections/docs/search", json={"query": "anvils"}).status_code == 200
        assert httpx.post(url + "/v1/rerank", json=body, headers=_as(other)).status_code == 200
        assert all(admin.post("/v1/rerank", json=body).status_code == 200 for _ in range(5))
        c.close()
        admin.close()


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
                        serve={"auth_failures_per_minute": 4, "limit_window_s": 3600,
                               "trusted_proxies": ["127.0.0.1"]})
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
