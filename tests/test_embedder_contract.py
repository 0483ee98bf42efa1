"""The Embedder contract (issue 14). Every embedder's test class inherits EmbedderContract and provides
`embedder`, as every store inherits StoreContract."""

from __future__ import annotations

import numpy as np
import pytest

from funnel.embed import load_embedder
from funnel.embed.base import Embedder

TEXTS = [
    "Iris Kallas is the chief executive of Zentara Robotics.",
    "Dogs bark at the postman every morning.",
    "Ünïcödé — 数据 ✓ text",
    "",
]


class EmbedderContract:
    @pytest.fixture
    def embedder(self) -> Embedder:
        raise NotImplementedError

    def test_it_is_an_embedder(self, embedder):
        assert isinstance(embedder, Embedder)
        assert embedder.name.strip() and embedder.dim > 0 and embedder.max_tokens > 0

    def test_vectors_are_float32_unit_length_one_per_text(self, embedder):
        vectors = embedder.embed(TEXTS[:3])
        assert vectors.shape == (3, embedder.dim) and vectors.dtype == np.float32
        np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-3)

    def test_no_texts_is_no_vectors(self, embedder):
        assert embedder.embed([]).shape == (0, embedder.dim)

    def test_an_empty_text_does_not_break_a_batch(self, embedder):
        vectors = embedder.embed(TEXTS)
        assert vectors.shape == (4, embedder.dim) and np.isfinite(vectors).all()

    def test_a_text_embeds_the_same_alone_or_in_a_batch(self, embedder):
        together = embedder.embed(TEXTS[:3])
        for i, text in enumerate(TEXTS[:3]):
            np.testing.assert_allclose(embedder.embed([text])[0], together[i], atol=1e-4)

    def test_similar_texts_are_nearer_than_unrelated_ones(self, embedder):
        query, related, unrelated = embedder.embed(
            ["who is the chief executive of Zentara Robotics", TEXTS[0], TEXTS[1]]
        )
        assert query @ related > query @ unrelated

    def test_tokens_are_counted_and_located_in_the_text(self, embedder):
        text = "Iris Kallas leads Zentara Robotics."
        offsets = embedder.token_offsets(text)
        assert embedder.count_tokens(text) == len(offsets) > 0
        assert all(0 <= start <= end <= len(text) for start, end in offsets)
        assert [start for start, _ in offsets] == sorted(start for start, _ in offsets)
        assert embedder.count_tokens("") == 0
        assert embedder.count_tokens(text + " " + text) > embedder.count_tokens(text)


class TestHashing(EmbedderContract):
    @pytest.fixture
    def embedder(self):
        return load_embedder("hashing")


@pytest.mark.model
class TestMiniLM(EmbedderContract):
    """The packaged MiniLM, int8 and (slow) fp32: the same model, so the same checks."""

    @pytest.fixture(scope="class", params=["minilm", pytest.param("minilm-fp32", marks=pytest.mark.slow)])
    def embedder(self, request):
        return load_embedder(request.param)


@pytest.mark.model
class TestE5Small(EmbedderContract):
    @pytest.fixture(scope="class")
    def embedder(self, e5_models):  # built once a session (tests/e5_support.py)
        return load_embedder("e5-small", models=e5_models)
