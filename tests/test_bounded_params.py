"""Every number a request carries is bounded (issue 40): each integer or number query and path parameter of
the app's OpenAPI schema has a minimum and a maximum (an offset past SQLite's integers was a 500), and the
rerank and embeddings calls are capped in documents and characters, each cap refused one past it and
taken at it, with one line saying which."""

from __future__ import annotations

import httpx
import pytest
from helpers import serving

from funnel.apps.api import create_app, embeddings, rerank
from funnel.apps.settings import Settings

HUGE = "99999999999999999999999"


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    root = tmp_path_factory.mktemp("bounded")
    return create_app(Settings(embedder="hashing", reranker="lexical", data_dir=root / "data", repo=root,
                               incidents=root / "incidents.sqlite"))


@pytest.fixture(scope="module")
def url(app):
    with serving(app) as url:
        assert httpx.post(url + "/v1/collections", json={"name": "a"}).status_code == 201
        yield url


def _numeric(schema: dict) -> bool:
    kinds = [schema.get("type")] + [s.get("type") for s in schema.get("anyOf", [])]
    return any(k in ("integer", "number") for k in kinds)


def _bounds(schema: dict) -> tuple[bool, bool]:
    parts = [schema, *schema.get("anyOf", [])]
    low = any("minimum" in p or "exclusiveMinimum" in p for p in parts)
    high = any("maximum" in p or "exclusiveMaximum" in p for p in parts)
    return low, high


def test_every_numeric_parameter_has_bounds(app):
    unbounded, checked = [], 0
    for path, operations in app.openapi()["paths"].items():
        for method, operation in operations.items():
            for param in operation.get("parameters", []):
                if param["in"] in ("query", "path") and _numeric(param["schema"]):
                    checked += 1
                    low, high = _bounds(param["schema"])
                    if not (low and high):
                        unbounded.append(f"{method.upper()} {path} {param['in']} {param['name']}")
    assert checked >= 5, "the walk found the numeric parameters (limits, offset, the incident id)"
    assert not unbounded, f"numeric parameters without a minimum and a maximum: {unbounded}"


def _one_line(response: httpx.Response) -> str:
    detail = response.json()["detail"]
    text = detail if isinstance(detail, str) else "; ".join(d["msg"] for d in detail)
    assert "\n" not in text and HUGE not in text
    return text


def test_a_huge_offset_is_a_422_and_the_connection_goes_on(url):
    with httpx.Client(base_url=url, timeout=30) as client:
        refused = client.get("/v1/collections/a/conversations", params={"offset": HUGE})
        assert refused.status_code == 422 and "1000000" in _one_line(refused)
        after = client.get("/v1/collections/a/conversations")
        assert after.status_code == 200 and after.json() == []
        assert client.get("/v1/collections/a/conversations", params={"offset": "-" + HUGE}).status_code == 422
        assert client.get("/v1/collections/a/conversations", params={"offset": 1_000_000}).status_code == 200
        ports = {r.extensions["network_stream"].get_extra_info("client_addr")[1] for r in (refused, after)}
        assert len(ports) == 1, "one connection: the 422 did not close it"


@pytest.mark.parametrize("incident_id", [HUGE, "-" + HUGE, "0"])
def test_an_incident_id_past_the_database_integers_is_a_422(url, incident_id):
    response = httpx.get(f"{url}/v1/incidents/{incident_id}", timeout=30)
    assert response.status_code == 422
    _one_line(response)
    assert httpx.get(f"{url}/v1/incidents/999999", timeout=30).status_code == 404


# --- rerank and embeddings caps ---------------------------------------------------------------------------


def _full(n: int, chars: int) -> list[str]:
    """`n` documents of `chars` characters, few words each (so the hashing embedder's window takes them)."""
    return [("anvil " + "x" * chars)[:chars] for _ in range(n)]


def _summing_to(total: int, each: int) -> list[str]:
    """Documents of `each` characters, the last shorter, `total` characters in all."""
    return _full(total // each, each) + _full(1, total % each)


RERANK_CASES = {
    "documents": (["a"] * rerank.MAX_DOCUMENTS, ["a"] * (rerank.MAX_DOCUMENTS + 1),
                  f"at most {rerank.MAX_DOCUMENTS}"),
    "characters": (_full(2, rerank.MAX_DOCUMENT_CHARS), ["a", "b" * (rerank.MAX_DOCUMENT_CHARS + 1)],
                   f"documents[1] has {rerank.MAX_DOCUMENT_CHARS + 1} characters; the limit is "
                   f"{rerank.MAX_DOCUMENT_CHARS}"),
    "in all": (_summing_to(rerank.MAX_TOTAL_CHARS, rerank.MAX_DOCUMENT_CHARS),
               _summing_to(rerank.MAX_TOTAL_CHARS + 1, rerank.MAX_DOCUMENT_CHARS),
               f"pass {rerank.MAX_TOTAL_CHARS} characters in all"),
}


EMBEDDING_CASES = {
    "inputs": (["anvil"] * embeddings.MAX_INPUTS, ["anvil"] * (embeddings.MAX_INPUTS + 1),
               f"input has {embeddings.MAX_INPUTS + 1} texts; the limit is {embeddings.MAX_INPUTS}"),
    "characters": (_full(1, embeddings.MAX_INPUT_CHARS), _full(1, embeddings.MAX_INPUT_CHARS + 1),
                   f"input[0] has {embeddings.MAX_INPUT_CHARS + 1} characters; the limit is "
                   f"{embeddings.MAX_INPUT_CHARS}"),
    "in all": (_summing_to(embeddings.MAX_TOTAL_CHARS, embeddings.MAX_INPUT_CHARS),
               _summing_to(embeddings.MAX_TOTAL_CHARS + 1, embeddings.MAX_INPUT_CHARS),
               f"input passes {embeddings.MAX_TOTAL_CHARS} characters in all"),
}


# (route, the body's field of texts, the answer's list of results) -> its cases
CAPS = {("/v1/rerank", "documents", "results"): RERANK_CASES, ("/api/rerank", "documents", "results"): RERANK_CASES,
        ("/v1/embeddings", "input", "data"): EMBEDDING_CASES}


@pytest.mark.parametrize(("route", "cap"), [(route, cap) for route, cases in CAPS.items() for cap in cases],
                         ids=lambda v: v[0] if isinstance(v, tuple) else v)
def test_compute_caps(url, route, cap):
    """Each cap taken at it and refused one past it, in one line that says which, the texts not echoed."""
    (path, field, listed), (at_cap, past, words) = route, CAPS[route][cap]
    extra = {"query": "anvil"} if field == "documents" else {}
    taken = httpx.post(url + path, json={**extra, field: at_cap}, timeout=60)
    assert taken.status_code == 200, taken.text[:200]
    assert len(taken.json()[listed]) == len(at_cap)
    refused = httpx.post(url + path, json={**extra, field: past}, timeout=60)
    assert refused.status_code == 422 and words in _one_line(refused)
    assert len(refused.content) < 2000  # the texts are not echoed back
    if path == "/v1/embeddings":  # OpenAI's error shape too
        assert refused.json()["error"]["message"] == refused.json()["detail"]
