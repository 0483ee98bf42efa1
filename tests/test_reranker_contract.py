"""The Reranker contract (issue 14). Every backend's test class inherits RerankerContract and provides
`reranker`, as every store inherits StoreContract: a new backend passes the same promises or fails here.

The HTTP backends are tested against a real server: `funnel serve` itself, whose `/v1/rerank` (Cohere/Jina
shape) and `/api/rerank` (seed 000's Ollama shape) answer with the lexical reranker."""

from __future__ import annotations

import math
import tempfile

import pytest
from helpers import serving

from funnel.apps.api import create_app
from funnel.apps.settings import Settings
from funnel.rerank import load_reranker
from funnel.rerank.base import Reranker
from funnel.rerank.cache import CachedReranker
from funnel.types import Candidate, Chunk

QUERY = "Who is the chief executive of Zentara Robotics?"
RELEVANT = "Zentara Robotics is led by its chief executive, Iris Kallas, since 2018."
TEXTS = [
    "Dogs bark at the postman every morning.",
    RELEVANT,
    "The P3 arm must be recalibrated after every firmware update.",
    "",  # an empty passage (a table cell, a heading alone) must not break a backend
    "Ünïcödé — 数据 ✓ passage",
]


def candidates(texts: list[str]) -> list[Candidate]:
    return [
        Candidate(Chunk(chunk_id=f"c{i}#0", doc_id=f"c{i}", ordinal=0, text=t, path=f"c{i}.md", title="",
                        kind="text", n_tokens=len(t.split())), fused_rank=i + 1, fused_score=1 / (i + 1))
        for i, t in enumerate(texts)
    ]


class RerankerContract:
    @pytest.fixture
    def reranker(self) -> Reranker:
        raise NotImplementedError

    def test_it_is_a_reranker_with_a_safe_name(self, reranker):
        assert isinstance(reranker, Reranker)
        assert isinstance(reranker.name, str) and reranker.name.strip()
        assert "s3cret" not in reranker.name  # never credentials from a URL

    def test_one_finite_score_per_candidate_in_order(self, reranker):
        result = reranker.rerank(QUERY, candidates(TEXTS))
        assert len(result.scores) == len(TEXTS)
        assert all(isinstance(s, float) and math.isfinite(s) for s in result.scores)
        assert all(0 <= i < len(TEXTS) for i in result.truncated)

    def test_the_relevant_passage_scores_highest(self, reranker):
        scores = reranker.rerank(QUERY, candidates(TEXTS)).scores
        assert max(range(len(scores)), key=scores.__getitem__) == 1

    def test_a_pair_scores_the_same_whatever_the_order(self, reranker):
        forward = reranker.rerank(QUERY, candidates(TEXTS[:3])).scores
        backward = reranker.rerank(QUERY, candidates(TEXTS[:3][::-1])).scores
        assert forward == pytest.approx(backward[::-1], rel=1e-4, abs=1e-4)

    def test_no_candidates_is_no_scores(self, reranker):
        assert tuple(reranker.rerank(QUERY, []).scores) == ()

    def test_a_long_passage_is_scored_not_refused(self, reranker):
        result = reranker.rerank(QUERY, candidates([RELEVANT + " filler" * 3000]))
        assert len(result.scores) == 1 and math.isfinite(result.scores[0])


class TestLexical(RerankerContract):
    @pytest.fixture
    def reranker(self):
        return load_reranker("lexical")


class TestCachedLexical(RerankerContract):
    @pytest.fixture
    def reranker(self):
        return CachedReranker(load_reranker("lexical"))


@pytest.mark.model
class TestBuiltin(RerankerContract):
    @pytest.fixture(scope="class")
    def reranker(self):
        return load_reranker("builtin")


@pytest.fixture(scope="module")
def rerank_server():
    """`funnel serve` with the lexical reranker: the real upstream for the HTTP backends."""
    with tempfile.TemporaryDirectory() as data:
        settings = Settings(embedder="hashing", data_dir=data, reranker="lexical")
        with serving(create_app(settings)) as url:
            yield url


@pytest.mark.parametrize("api", ["cohere", "ollama"])  # /v1/rerank and /api/rerank
class TestOverHttp(RerankerContract):
    @pytest.fixture
    def reranker(self, rerank_server, api):
        # Credentials in the URL: the name the backend shows must not carry them.
        reranker = load_reranker(f"{api}:{rerank_server.replace('http://', 'http://user:s3cret@')}", timeout_s=10)
        yield reranker
        reranker.close()
