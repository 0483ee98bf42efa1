"""HTTP rerank backends and `funnel serve`.

Protocol edge cases go through `httpx.MockTransport` (the transport is faked, never the reranker); the
round trips go over real loopback HTTP to funnel's own server, to a port nobody listens on, to the fake
upstream (one that answers too late) and to a plain web server. Every failure must end in the first-stage
order with a reason.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import subprocess
import sys
import time

import httpx
import pytest
from helpers import candidates as first_stage
from helpers import chunk, serving
from upstream_support import Reply, closed_port, fake, plain_web_server  # noqa: F401 (fake: a fixture)

from funnel.apps.api import create_app
from funnel.apps.factory import build_reranker, reranker_from_settings
from funnel.apps.settings import Settings
from funnel.errors import ConfigError, UpstreamError, UpstreamTimeout
from funnel.rerank.http import HttpReranker, RerankApi
from funnel.rerank.lexical import LexicalReranker
from funnel.rerank.policies import RerankPolicy, second_stage
from funnel.types import Candidate, RerankStatus

QUERY = "who makes anvils"
TEXTS = [
    "Acme is a company in the desert.",
    "Acme makes anvils and rockets; the anvils are heavy.",
    "Roadrunners are fast birds.",
    "Who makes anvils? Acme makes anvils.",
]


def passages(texts: list[str] = TEXTS) -> list[Candidate]:
    return [
        Candidate(chunk(f"d{i}", 0, text), fused_rank=i + 1, fused_score=1.0 / (61 + i))
        for i, text in enumerate(texts)
    ]


def mocked(api: str, handler, **kw) -> HttpReranker:
    client = httpx.Client(transport=httpx.MockTransport(handler))
    return HttpReranker(api, kw.pop("base_url", "http://reranker.test"), client=client, **kw)


def answering(body=None, status: int = 200, content: bytes | None = None):
    def handler(request: httpx.Request) -> httpx.Response:
        if content is not None:
            return httpx.Response(status, content=content)
        return httpx.Response(status, json=body)

    return handler


def ranked(pairs: list[tuple[int, float]], key: str = "relevance_score") -> list[dict]:
    return [{"index": i, key: s} for i, s in pairs]


# --- each wire shape --------------------------------------------------------------------------------------

OUT_OF_ORDER = [(2, 0.9), (0, 0.7), (1, 0.3)]


@pytest.mark.parametrize(
    "api, path, body, sent",
    [
        ("ollama", "/api/rerank", {"results": ranked(OUT_OF_ORDER)}, {"model", "query", "documents"}),
        ("cohere", "/v1/rerank", {"results": ranked(OUT_OF_ORDER)}, {"model", "query", "documents", "top_n"}),
        ("tei", "/rerank", ranked(OUT_OF_ORDER, "score"), {"query", "texts", "raw_scores", "truncate"}),
        ("infinity", "/rerank", {"data": ranked(OUT_OF_ORDER)}, {"model", "query", "documents", "top_n"}),
        ("infinity", "/rerank", {"results": ranked(OUT_OF_ORDER)}, {"model", "query", "documents", "top_n"}),
    ],
)
def test_each_api_shape(api, path, body, sent):
    seen = []

    def handler(request):
        seen.append(request)
        return httpx.Response(200, json=body)

    cands = passages(TEXTS[:3])
    result = mocked(api, handler, model="m").rerank(QUERY, cands)
    assert result.scores == (0.7, 0.3, 0.9)  # input order, whatever order the API answered in
    assert result.raw_scores == (0.7, 0.3, 0.9)
    (request,) = seen
    assert request.method == "POST" and request.url.path == path
    payload = json.loads(request.content)
    assert set(payload) == sent
    assert payload.get("documents", payload.get("texts")) == TEXTS[:3]
    assert payload["query"] == QUERY
    if "top_n" in payload:
        assert payload["top_n"] == 3
    if api == "tei":
        assert payload["raw_scores"] is False


def test_logits_are_mapped_through_a_sigmoid_and_kept_raw():
    reranker = mocked("ollama", answering({"results": ranked([(0, 2.0), (1, -3.0), (2, 0.5)])}))
    result = reranker.rerank(QUERY, passages(TEXTS[:3]))
    assert result.raw_scores == (2.0, -3.0, 0.5)
    assert result.scores == pytest.approx([1 / (1 + math.exp(-x)) for x in (2.0, -3.0, 0.5)])


def test_bearer_key_is_sent_and_never_echoed():
    def handler(request):
        assert request.headers["authorization"] == "Bearer sk-secret-123"
        return httpx.Response(401, text=f"bad token {request.headers['authorization']}")

    reranker = mocked("cohere", handler, api_key="sk-secret-123", base_url="https://user:pw@api.test")
    with pytest.raises(UpstreamError) as raised:
        reranker.rerank(QUERY, passages())
    message = str(raised.value)
    assert "HTTP 401" in message and "***" in message
    assert "sk-secret" not in message and "pw@" not in message
    assert "sk-secret" not in repr(reranker) and "pw@" not in reranker.name


def test_base_url_may_already_name_the_endpoint_and_long_lists_are_batched():
    calls = []

    def handler(request):
        calls.append(request.url.path)
        docs = json.loads(request.content)["documents"]
        return httpx.Response(200, json={"results": ranked([(i, len(d) / 100) for i, d in enumerate(docs)])})

    reranker = mocked("cohere", handler, base_url="http://h.test/v1/rerank/", max_documents=3)
    result = reranker.rerank(QUERY, passages())
    assert calls == ["/v1/rerank", "/v1/rerank"]
    assert result.scores == tuple(len(t) / 100 for t in TEXTS)


def test_no_candidates_makes_no_request():
    assert mocked("tei", lambda request: pytest.fail("no request expected")).rerank(QUERY, []).scores == ()


# --- every failure: the right funnel error, and the first-stage order with a reason -------------------------


def _raise(error_type):
    def handler(request):
        raise error_type("boom", request=request)

    return handler


FAILURES = [
    ("timeout", "cohere", _raise(httpx.ReadTimeout), UpstreamTimeout, "timed out"),
    ("refused", "cohere", _raise(httpx.ConnectError), UpstreamError, "cannot reach"),
    ("500", "cohere", answering(status=500, content=b"model crashed\n\n  badly"), UpstreamError, "HTTP 500: model crashed badly"),
    ("429", "ollama", answering({"error": "rate limited"}, status=429), UpstreamError, "HTTP 429"),
    ("html", "ollama", answering(content=b"<html>gateway</html>"), UpstreamError, "malformed JSON"),
    ("not utf-8", "tei", answering(content=b"\xff\xfe\x00"), UpstreamError, "malformed JSON"),
    ("no results key", "cohere", answering({"scores": [1, 2]}), UpstreamError, "no 'results'"),
    ("infinity neither key", "infinity", answering({}), UpstreamError, "no 'results' or 'data'"),
    ("results not a list", "cohere", answering({"results": {"0": 1}}), UpstreamError, "not a list"),
    ("tei object", "tei", answering({"results": []}), UpstreamError, "expected a JSON array"),
    ("item not object", "tei", answering([1, 2, 3, 4]), UpstreamError, "not an object"),
    ("missing index", "ollama", answering({"results": [{"relevance_score": 0.5}] * 4}), UpstreamError, "has no index"),
    ("string index", "ollama", answering({"results": ranked([("0", 0.5)])}), UpstreamError, "non-integer index"),
    ("duplicate", "cohere", answering({"results": ranked([(0, 0.1), (1, 0.2), (1, 0.3), (3, 0.4)])}), UpstreamError, "index 1 appears twice"),
    ("out of range", "cohere", answering({"results": ranked([(0, 0.1), (1, 0.2), (2, 0.3), (4, 0.4)])}), UpstreamError, "out of range"),
    ("negative", "cohere", answering({"results": ranked([(-1, 0.1)])}), UpstreamError, "out of range"),
    ("NaN", "ollama", answering(content=b'{"results": [{"index": 0, "relevance_score": NaN}]}'), UpstreamError, "non-finite"),
    ("string score", "ollama", answering({"results": ranked([(0, "high")])}), UpstreamError, "non-numeric"),
    ("no score", "tei", answering([{"index": 0}]), UpstreamError, "has no score"),
    ("fewer", "cohere", answering({"results": ranked([(2, 0.9), (0, 0.1)])}), UpstreamError, "2 results for 4 documents; missing index 1, 3"),
]


@pytest.mark.parametrize("api, handler, error, fragment", [f[1:] for f in FAILURES], ids=[f[0] for f in FAILURES])
def test_failure_is_a_funnel_error_and_a_fallback(api, handler, error, fragment):
    reranker = mocked(api, handler)
    cands = passages()
    with pytest.raises(error) as raised:
        reranker.rerank(QUERY, cands)
    assert fragment in str(raised.value)
    assert str(raised.value).startswith("rerank: ")

    result = second_stage(QUERY, cands, reranker, RerankPolicy.REPLACE, timeout_s=5)
    assert result.status is RerankStatus.FALLBACK
    assert [h.candidate for h in result.hits] == cands
    assert fragment in result.reason and reranker.name in result.reason


# --- the lexical reranker -----------------------------------------------------------------------------------


def test_lexical_scores_match_bm25_closed_form():
    result = LexicalReranker().rerank("cat", passages(["cat", "dog"]))
    # N=2, df=1: idf = ln(1 + 1.5/1.5) = ln 2; tf=1 and |d|=avgdl: tf*(k1+1)/(tf+k1) = 1.
    assert result.raw_scores == pytest.approx((math.log(2), 0.0))
    assert result.scores == pytest.approx((math.log(2) / (1 + math.log(2)), 0.0))


# --- funnel's own server over loopback ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def funnel_server():
    with serving(create_app(Settings(reranker="lexical"))) as url:
        yield url


@pytest.mark.parametrize("api", ["cohere", "ollama"])
def test_http_reranker_against_funnel_serve(funnel_server, api):
    cands = passages()
    local = LexicalReranker().rerank(QUERY, cands)
    with httpx.Client() as client:
        remote = HttpReranker(api, funnel_server, timeout_s=5, client=client).rerank(QUERY, cands)
    assert remote.scores == local.scores  # exact: JSON floats round-trip
    assert len(set(local.scores)) > 2  # the comparison means something

    via_http = second_stage(QUERY, cands, HttpReranker(api, funnel_server, timeout_s=5), RerankPolicy.REPLACE)
    via_local = second_stage(QUERY, cands, LexicalReranker(), RerankPolicy.REPLACE)
    assert via_http.status is RerankStatus.OK
    assert [h.chunk.chunk_id for h in via_http.hits] == [h.chunk.chunk_id for h in via_local.hits]


def test_seed_client_code_works_against_funnel(funnel_server):
    """Seed 000's `_rerank`, request for request: AsyncClient, POST /api/rerank, indices by relevance_score."""

    async def _rerank(query: str, documents: list[str]) -> list[int]:
        async with httpx.AsyncClient(timeout=30) as client:
            resp = await client.post(
                f"{funnel_server}/api/rerank",
                json={"model": "bge-reranker", "query": query, "documents": documents},
            )
            resp.raise_for_status()
            results = resp.json().get("results", [])
            return [r["index"] for r in sorted(results, key=lambda x: x["relevance_score"], reverse=True)]

    scores = LexicalReranker().rerank(QUERY, passages()).scores
    assert asyncio.run(_rerank(QUERY, TEXTS)) == sorted(range(len(TEXTS)), key=lambda i: (-scores[i], i))


def test_cohere_shape_top_n_and_documents(funnel_server):
    body = {"query": QUERY, "documents": [TEXTS[0], {"text": TEXTS[3]}], "top_n": 1, "return_documents": True}
    answer = httpx.post(f"{funnel_server}/v1/rerank", json=body, timeout=5).json()
    assert answer["id"] and answer["results"] == [
        {"index": 1, "relevance_score": pytest.approx(answer["results"][0]["relevance_score"]), "document": {"text": TEXTS[3]}}
    ]


@pytest.mark.parametrize(
    "body, message",
    [
        ({"query": "  ", "documents": ["a"]}, "query is empty"),
        ({"query": "q", "documents": ["a"] * 257}, "at most 256"),
        ({"query": "q", "documents": ["a", "b" * 32_001]}, "documents[1] has 32001 characters"),
        ({"query": "q"}, "Field required"),
    ],
)
def test_bad_requests_are_422_with_the_reason(funnel_server, body, message):
    response = httpx.post(f"{funnel_server}/api/rerank", json=body, timeout=5)
    assert response.status_code == 422
    assert message in json.dumps(response.json())
    assert len(response.content) < 2000  # the offending input is not echoed back


def test_no_reranker_configured_is_503_and_a_client_fallback():
    with serving(create_app(Settings(reranker="none"))) as url:
        response = httpx.post(f"{url}/v1/rerank", json={"query": "q", "documents": ["a"]}, timeout=5)
        assert response.status_code == 503 and "no reranker configured" in response.json()["detail"]
        result = second_stage(QUERY, passages(), HttpReranker("cohere", url, timeout_s=5), RerankPolicy.REPLACE)
    assert result.status is RerankStatus.FALLBACK and "HTTP 503" in result.reason


@pytest.mark.model
def test_the_rerank_routes_answer_without_configuration(tmp_path):
    """The built-in reranker is the default: a fresh `funnel serve` answers both rerank shapes."""
    with serving(create_app(Settings(embedder="hashing", data_dir=tmp_path))) as url:
        docs = ["Berlin is the capital of Germany.", "Paris is the capital and largest city of France."]
        cohere = httpx.post(f"{url}/v1/rerank", json={"query": "capital of France", "documents": docs}, timeout=30)
        ollama = httpx.post(f"{url}/api/rerank", json={"query": "capital of France", "documents": docs}, timeout=30)
    assert cohere.status_code == 200 and ollama.status_code == 200
    assert cohere.json()["results"][0]["index"] == 1


def test_upstream_errors_map_to_gateway_status_codes():
    broken = HttpReranker("tei", "http://127.0.0.1:9", client=httpx.Client(transport=httpx.MockTransport(answering([]))))
    with serving(create_app(Settings(), reranker=broken)) as url:
        response = httpx.post(f"{url}/api/rerank", json={"query": "q", "documents": ["a"]}, timeout=5)
    assert response.status_code == 502 and response.json()["error"] == "UpstreamError"


# --- a server that is down, and one that is too slow -----------------------------------------------------


def test_server_down_falls_back_with_reason():
    reranker = HttpReranker("ollama", f"http://127.0.0.1:{closed_port()}", timeout_s=2)
    cands = passages()
    result = second_stage(QUERY, cands, reranker, RerankPolicy.GUARANTEED_SLOTS)
    assert result.status is RerankStatus.FALLBACK
    assert [h.candidate for h in result.hits] == cands
    assert "cannot reach" in result.reason and "ConnectError" in result.reason


@pytest.fixture
def slow_server(fake):
    fake.answer(Reply(body={"results": []}, delay_s=5))  # past any timeout the tests use
    return fake.url


def test_slow_server_times_out_and_falls_back(slow_server):
    cands = first_stage(["a", "b", "a", "c"])
    reranker = HttpReranker("cohere", slow_server, timeout_s=0.3)
    started = time.monotonic()
    with pytest.raises(UpstreamTimeout, match="after 0.3s"):
        reranker.rerank(QUERY, cands)
    result = second_stage(QUERY, cands, reranker, RerankPolicy.RRF, timeout_s=10)
    assert time.monotonic() - started < 3
    assert result.status is RerankStatus.FALLBACK and "timed out" in result.reason
    assert [h.candidate for h in result.hits] == cands

    patient = HttpReranker("cohere", slow_server, timeout_s=10)  # the second stage's own limit applies
    result = second_stage(QUERY, cands, patient, RerankPolicy.REPLACE, timeout_s=0.3)
    assert result.status is RerankStatus.FALLBACK and "timed out after 0.3s" in result.reason


# --- settings and specs -----------------------------------------------------------------------------------


def test_reranker_specs():
    assert build_reranker("none") is None
    assert isinstance(build_reranker("lexical"), LexicalReranker)
    tei = build_reranker("tei:http://localhost:8080/", timeout_s=3)
    assert isinstance(tei, HttpReranker) and tei.api is RerankApi.TEI and tei.url == "http://localhost:8080/rerank"
    with pytest.raises(ConfigError, match="valid: none, builtin, onnx:DIR, st:MODEL, lexical, ollama:URL, cohere:URL"):
        build_reranker("cohere-ish")
    with pytest.raises(ConfigError, match="http:// or https://"):
        build_reranker("cohere:localhost:8080")


def test_model_and_key_from_settings_and_environment(monkeypatch):
    monkeypatch.setenv("FUNNEL_RERANK__API_KEY", "sk-from-env")
    settings = Settings(reranker="cohere:https://api.example.test", rerank_model="rerank-v3.5")
    assert "sk-from-env" not in repr(settings)
    cached = reranker_from_settings(settings)
    reranker = cached.inner  # behind the score cache
    assert isinstance(reranker, HttpReranker) and reranker.model == "rerank-v3.5" and cached.name == reranker.name
    assert reranker.timeout_s == settings.rerank.timeout_s
    assert "sk-from-env" not in repr(reranker) + reranker.name


# --- the command --------------------------------------------------------------------------------------------

FUNNEL = [sys.executable, "-c", "from funnel.apps.cli import run; run()"]


def test_funnel_serve_starts_and_answers(tmp_path):
    port = closed_port()
    env = {**os.environ, "FUNNEL_RERANK__BACKEND": "lexical"}
    process = subprocess.Popen(
        [*FUNNEL, "serve", "--port", str(port)], cwd=tmp_path, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except httpx.TransportError:
                assert process.poll() is None, process.communicate()[1]
                assert time.monotonic() < deadline, "funnel serve did not answer /health"
                time.sleep(0.1)
        assert health.json()["status"] == "ok" and health.json()["reranker"] == "lexical"
        answer = httpx.post(f"http://127.0.0.1:{port}/api/rerank", json={"query": QUERY, "documents": TEXTS}, timeout=5)
        assert answer.json()["results"][0]["index"] == 3
    finally:
        process.terminate()
        process.communicate(timeout=10)


def test_funnel_serve_with_a_bad_spec_is_one_line(tmp_path):
    result = subprocess.run(
        [*FUNNEL, "serve", "--reranker", "magic"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and "unknown reranker 'magic'" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_plain_web_servers_error_page_is_cut_to_its_text(tmp_path):
    # A URL that points at a plain web server (python -m http.server) answers POST with an HTML 501 page;
    # the fallback reason used to quote its markup (issue 17, defect 5).
    with plain_web_server(tmp_path) as url:
        result = second_stage(QUERY, passages(), HttpReranker("cohere", url, timeout_s=5), RerankPolicy.REPLACE)
    assert result.status is RerankStatus.FALLBACK
    assert "HTTP 501: Error response Error code: 501 Message: Unsupported method ('POST')" in result.reason
    assert "<" not in result.reason and "\n" not in result.reason and len(result.reason) < 400


def test_the_spec_table_names_every_http_api():
    from funnel.rerank import HTTP_APIS, RERANKER_SPECS

    assert HTTP_APIS == tuple(api.value for api in RerankApi)
    assert {f"{api.value}:URL" for api in RerankApi} <= set(RERANKER_SPECS)
