"""The service around the routes: auth, CORS, metrics, health, the web page, errors, `funnel serve`."""

from __future__ import annotations

import httpx
import pytest
from api_support import CEO_QUESTION, samples, upload, wait_done
from helpers import serving

from funnel.apps.api import create_app
from funnel.apps.state.metrics import percentile
from funnel.apps.cli import exposure_warning
from funnel.apps.settings import Settings
from funnel.errors import ConfigError

KEY = "s3cret-key-for-tests"


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    data = tmp_path_factory.mktemp("secured") / "data"
    settings = Settings(embedder="hashing", data_dir=data, api_key=KEY, cors_origins=["http://app.example"])
    with serving(create_app(settings)) as url:
        yield url


@pytest.mark.parametrize("path", ["/v1/collections", "/metrics", "/v1/incidents"])
def test_protected_routes_need_the_key(secured, path):
    response = httpx.get(f"{secured}{path}", timeout=5)
    assert response.status_code == 401 and response.json()["error"] == "Unauthorized"
    assert response.headers["www-authenticate"] == "Bearer"
    assert httpx.get(f"{secured}{path}", headers={"X-API-Key": "wrong"}, timeout=5).status_code == 401
    assert httpx.get(f"{secured}{path}", headers={"Authorization": f"Basic {KEY}"}, timeout=5).status_code == 401
    assert httpx.get(f"{secured}{path}", headers={"X-API-Key": KEY}, timeout=5).status_code != 401
    assert httpx.get(f"{secured}{path}", headers={"Authorization": f"Bearer {KEY}"}, timeout=5).status_code != 401


def test_rerank_api_needs_the_key_too(secured):
    body = {"query": "q", "documents": ["a"]}
    assert httpx.post(f"{secured}/api/rerank", json=body, timeout=5).status_code == 401
    assert httpx.post(f"{secured}/v1/rerank", json=body, timeout=5).status_code == 401


@pytest.mark.parametrize("path", ["/health", "/", "/static/index.html", "/openapi.json"])
def test_health_and_the_web_page_stay_open(secured, path):
    response = httpx.get(f"{secured}{path}", timeout=5)
    assert response.status_code == 200
    if path == "/health":
        assert response.json()["auth"] is True and KEY not in response.text


def test_cors_headers_and_preflight(secured):
    origin = {"Origin": "http://app.example"}
    response = httpx.get(f"{secured}/health", headers=origin, timeout=5)
    assert response.headers["access-control-allow-origin"] == "http://app.example"
    # A 401 still carries CORS headers, so the browser shows the page the real reason.
    assert httpx.get(f"{secured}/v1/collections", headers=origin, timeout=5).headers[
        "access-control-allow-origin"] == "http://app.example"
    preflight = httpx.options(
        f"{secured}/v1/collections/default/ask",
        headers={**origin, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "x-api-key"},
        timeout=5,
    )
    assert preflight.status_code == 200 and "POST" in preflight.headers["access-control-allow-methods"]
    other = httpx.get(f"{secured}/health", headers={"Origin": "http://evil.example"}, timeout=5)
    assert "access-control-allow-origin" not in other.headers


def test_no_cors_headers_without_origins(tmp_path):
    with serving(create_app(Settings(embedder="hashing", data_dir=tmp_path))) as url:
        response = httpx.get(f"{url}/health", headers={"Origin": "http://app.example"}, timeout=5)
        assert "access-control-allow-origin" not in response.headers
        assert httpx.get(f"{url}/v1/collections", timeout=5).status_code == 200  # no key set: no auth


def test_a_short_api_key_is_refused():
    with pytest.raises(ConfigError, match="at least 8 characters"):
        create_app(Settings(api_key="  "))


@pytest.mark.slow
def test_metrics_count_routes_and_time_stages(tmp_path):
    app = create_app(Settings(embedder="hashing", data_dir=tmp_path))
    with serving(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        upload(client, "default", samples())
        wait_done(client, "default")
        for _ in range(3):
            client.post("/v1/collections/default/search", json={"query": CEO_QUESTION})
        client.post("/v1/collections/default/ask", json={"question": CEO_QUESTION})
        client.post("/v1/collections/nope/search", json={"query": "q"})
        client.get("/no/such/path")
        metrics = client.get("/metrics").json()
    counts = {(r["method"], r["route"], r["status"]): r["count"] for r in metrics["requests"]}
    assert counts[("POST", "/v1/collections/{name}/search", 200)] == 3
    assert counts[("POST", "/v1/collections/{name}/search", 404)] == 1
    assert counts[("POST", "/v1/collections/{name}/ask", 200)] == 1
    assert counts[("POST", "/v1/collections/{name}/documents", 202)] == 1
    assert counts[("GET", "unmatched", 404)] == 1
    latency = metrics["latency_ms"]
    assert latency["first_stage"]["count"] == 4 and latency["generate"]["count"] == 1
    assert 0 <= latency["first_stage"]["p50_ms"] <= latency["first_stage"]["p95_ms"]
    assert latency["rerank"]["count"] == 4 and latency["group"]["count"] == 4
    assert metrics["ingest_queue"] == 0


def test_percentile_is_nearest_rank():
    values = sorted(float(v) for v in range(1, 101))
    assert percentile(values, 50) == 50.0 and percentile(values, 95) == 95.0 and percentile([7.0], 95) == 7.0


def test_health_reports_the_configuration(tmp_path):
    settings = Settings(embedder="hashing", data_dir=tmp_path, reranker="lexical", llm="ollama:http://127.0.0.1:9")
    with serving(create_app(settings)) as url:
        health = httpx.get(f"{url}/health", timeout=5).json()
    assert health == {
        "status": "ok", "version": health["version"], "reranker": "lexical", "llm": "ollama:llama3.2",
        "generator": "ollama:llama3.2 (fallback: extractive)", "embedder": "hashing", "collections": 1,
        "auth": False, "calibration": {}, "watched": {},  # no --watch folders
        "features": {"triage": False, "watch": False},
        "database": None, "search_database": None,  # embedded state
    }


def test_unknown_paths_and_methods_are_json(tmp_path):
    with serving(create_app(Settings(embedder="hashing", data_dir=tmp_path))) as url:
        missing = httpx.get(f"{url}/v1/nothing", timeout=5)
        assert missing.status_code == 404 and missing.json()["detail"] == "Not Found"
        wrong = httpx.put(f"{url}/v1/collections", timeout=5)
        assert wrong.status_code == 405 and "detail" in wrong.json()


def test_an_unexpected_error_is_a_500_without_traceback(tmp_path, monkeypatch):
    app = create_app(Settings(embedder="hashing", data_dir=tmp_path))

    def explode(self):
        raise RuntimeError("secret internals /etc/shadow")

    monkeypatch.setattr(type(app.state.library), "names", explode)
    with serving(app) as url:
        response = httpx.get(f"{url}/v1/collections", timeout=5)
        assert response.status_code == 500
        assert response.json() == {"detail": "internal error", "error": "InternalError"}
        assert httpx.get(f"{url}/health", timeout=5).status_code == 500  # it uses names() too
        monkeypatch.undo()
        assert httpx.get(f"{url}/health", timeout=5).status_code == 200


@pytest.mark.parametrize(
    "host, key, warns",
    [("127.0.0.1", False, False), ("localhost", False, False), ("::1", False, False), ("[::1]", False, False),
     ("127.0.0.2", False, False), ("0.0.0.0", False, True), ("192.168.1.5", False, True),
     ("my-laptop.local", False, True), ("0.0.0.0", True, False)],
)
def test_serve_warns_when_exposed_without_a_key(host, key, warns):
    warning = exposure_warning(host, key)
    assert (warning is not None) == warns
    if warns:
        assert "FUNNEL_SERVE__API_KEY" in warning


def test_a_root_path_prefix_does_not_open_guarded_routes(tmp_path):
    """Behind a proxy (`--root-path /x`) the path still carries the prefix; the key is still needed."""
    import asyncio

    app = create_app(Settings(embedder="hashing", data_dir=tmp_path / "data", api_key=KEY))

    async def status(path: str, **headers) -> int:
        transport = httpx.ASGITransport(app=app, root_path="/x")
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return (await client.get(path, headers=headers)).status_code

    assert asyncio.run(status("/x/v1/collections")) == 401
    assert asyncio.run(status("/x/metrics")) == 401
    assert asyncio.run(status("/x/v1/collections", **{"X-API-Key": KEY})) == 200
    assert asyncio.run(status("/x/health")) == 200
