"""`POST /v1/embeddings` (issue 15): funnel's embedder behind OpenAI's API, called with the official `openai`
client, against the real `funnel serve` app on 127.0.0.1."""

from __future__ import annotations

import base64

import httpx
import numpy as np
import openai
import pytest
from helpers import serving

from funnel.apps.api import create_app
from funnel.apps.settings import Settings
from funnel.embed import load_embedder

KEY = "s3cret-key-for-embeddings"

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    settings = Settings(data_dir=tmp_path_factory.mktemp("data"), api_key=KEY, reranker="none")
    with serving(create_app(settings)) as url:
        yield url


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server}/v1", api_key=KEY, max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def minilm():
    return load_embedder("minilm")


TEXTS = [
    "Iris Kallas is the chief executive of Zentara Robotics.",
    "The P3 arm must be recalibrated after every firmware update.",
    "Quarterly board minutes: the investment committee approved the budget.",
]


def test_the_official_client_gets_funnels_own_vectors(client, minilm):
    # The client asks for base64 by default and decodes it; the vectors must be exactly the embedder's.
    response = client.embeddings.create(model="sentence-transformers/all-MiniLM-L6-v2", input=TEXTS)
    assert [d.index for d in response.data] == [0, 1, 2]
    assert response.model == minilm.name
    got = np.array([d.embedding for d in response.data], dtype=np.float32)
    np.testing.assert_allclose(got, minilm.embed(TEXTS), atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-4)
    assert response.usage.prompt_tokens == sum(minilm.count_tokens(t) for t in TEXTS) > 0
    query = client.embeddings.create(model="minilm", input="who runs Zentara?").data[0].embedding
    similarity = got @ np.array(query, dtype=np.float32)
    assert int(np.argmax(similarity)) == 0  # the vectors mean something: the CEO sentence is nearest


def test_float_and_base64_carry_the_same_vector(server):
    headers = {"Authorization": f"Bearer {KEY}"}
    body = {"input": TEXTS[1]}
    as_float = httpx.post(f"{server}/v1/embeddings", json=body, headers=headers, timeout=60).json()
    as_b64 = httpx.post(f"{server}/v1/embeddings", json=body | {"encoding_format": "base64"}, headers=headers,
                        timeout=60).json()
    assert as_float["object"] == "list" and as_float["data"][0]["object"] == "embedding"
    decoded = np.frombuffer(base64.b64decode(as_b64["data"][0]["embedding"]), dtype="<f4")
    np.testing.assert_allclose(decoded, as_float["data"][0]["embedding"], atol=1e-7)
    assert len(decoded) == 384


def test_a_large_batch_keeps_its_order(client, minilm):
    texts = [f"note number {i} about topic {i % 7}" for i in range(150)]  # more than one model slice
    response = client.embeddings.create(model="minilm", input=texts, encoding_format="float")
    assert [d.index for d in response.data] == list(range(150))
    np.testing.assert_allclose(np.array([d.embedding for d in response.data]), minilm.embed(texts), atol=1e-6)


def test_another_model_is_refused_by_name(client):
    with pytest.raises(openai.NotFoundError) as caught:
        client.embeddings.create(model="text-embedding-3-small", input="hello")
    assert "all-MiniLM-L6-v2-int8" in str(caught.value) and "text-embedding-3-small" in str(caught.value)


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"input": "word " * 600}, 400, "reads at most"),  # nothing is cut silently
        ({"input": [[101, 2054, 102]]}, 422, "token-id input"),
        ({"input": []}, 422, "input is empty"),
        ({"input": ["fine", "  "]}, 422, "input[1] is empty"),
        ({"input": "x", "dimensions": 128}, 400, "dimensions must be 384"),
        ({"input": ["x"] * 257}, 422, "the limit is 256"),
        ({"input": "x", "encoding_format": "int8"}, 422, ""),
    ],
)
def test_bad_requests_get_one_line(server, body, status, words):
    response = httpx.post(f"{server}/v1/embeddings", json=body, headers={"X-API-Key": KEY}, timeout=60)
    assert response.status_code == status, response.text
    body = response.json()
    assert body["detail"] == body["error"]["message"]  # funnel's one line, where OpenAI clients look for it
    assert words in body["detail"] and "\n" not in body["detail"]


def test_the_api_key_guards_it(server):
    assert httpx.post(f"{server}/v1/embeddings", json={"input": "x"}, timeout=10).status_code == 401
