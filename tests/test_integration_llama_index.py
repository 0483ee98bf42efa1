"""funnel in LlamaIndex (the real llama-index-core): FunnelRetriever over a real index of samples/docs and
FunnelPostprocessor behind a VectorStoreIndex, both inside a RetrieverQueryEngine answering with MockLLM
(retrieval is what is under test); nothing may reach the network; faults and bad input."""

from __future__ import annotations

import re

import pytest
from helpers import FailingReranker
from integration_support import (
    CEO, COMMITTEE, MEETING, NoNetwork, SlowReranker, build_sample_index, check_bad_input,
)

pytest.importorskip("llama_index.core")
from llama_index.core import Settings, VectorStoreIndex  # noqa: E402
from llama_index.core.embeddings import BaseEmbedding  # noqa: E402
from llama_index.core.llms import MockLLM  # noqa: E402
from llama_index.core.query_engine import RetrieverQueryEngine  # noqa: E402
from llama_index.core.schema import MetadataMode, NodeWithScore, TextNode  # noqa: E402

from funnel.embed.base import embed_queries  # noqa: E402
from funnel.integrations.llama_index import FunnelPostprocessor, FunnelRetriever  # noqa: E402
from funnel.rerank.policies import GuaranteedSlots  # noqa: E402

pytestmark = pytest.mark.model

STAGE_KEYS = {"bm25_rank", "dense_rank", "fused_rank", "rerank_score", "final_rank", "guaranteed",
              "rerank_status", "rerank_reason", "policy"}


@pytest.fixture(scope="module", autouse=True)
def offline_settings():
    """LlamaIndex's global defaults are OpenAI's LLM and embeddings: named here, nothing resolves those."""
    saved = Settings._llm, Settings._embed_model
    Settings.llm = MockLLM()
    Settings.embed_model = None  # MockEmbedding; a test that needs embeddings passes funnel's
    yield
    Settings._llm, Settings._embed_model = saved


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    guard = NoNetwork(monkeypatch)
    yield
    assert guard.attempts == []


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    return str(build_sample_index(tmp_path_factory.mktemp("llama_index") / "index"))


def _name(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def test_retriever_in_a_query_engine_finds_the_answering_document(index):
    engine = RetrieverQueryEngine.from_args(FunnelRetriever(index=index, k=3, policy="guaranteed_slots"))
    for question, source in (COMMITTEE, MEETING):
        response = engine.query(question)
        assert _name(response.source_nodes[0].node.metadata["path"]) == source
    response = engine.query(COMMITTEE[0])
    assert "five members" in str(response)  # MockLLM echoes its prompt: the context reached the LLM
    assert "bm25_rank" not in str(response) and "investment_policy.md" in str(response)


def test_retriever_nodes_carry_every_stage(index):
    nodes = FunnelRetriever(index=index, k=3, policy="guaranteed_slots").retrieve(CEO)
    assert len(nodes) == 3 and len({n.node.metadata["path"] for n in nodes}) == 3
    scores = [n.score for n in nodes]
    for rank, found in enumerate(nodes, start=1):
        meta = found.node.metadata
        assert isinstance(found, NodeWithScore) and STAGE_KEYS <= set(meta) and meta["rank"] == rank
        assert meta["rerank_status"] == "ok" and meta["policy"] == "guaranteed_slots"
        assert found.score == meta["score"] and found.node.node_id == meta["chunk_id"]
        # the evidence stays out of what an LLM is sent; where the passage is from does not
        llm_text = found.node.get_content(metadata_mode=MetadataMode.LLM)
        assert "rerank_score" not in llm_text and f"path: {meta['path']}" in llm_text
    assert scores[2] <= max(scores[:2])
    pdf = next(n.node for n in nodes if n.node.metadata["path"].endswith("portfolio_companies.pdf"))
    assert pdf.metadata["location"] == "p.2" and "Iris Kallas" in pdf.get_content()


def test_a_failing_reranker_returns_the_first_stage_order(index):
    first_stage = FunnelRetriever(index=index, k=4, policy="none").retrieve(MEETING[0])
    boom = FailingReranker(RuntimeError("boom"))
    failing = FunnelRetriever(index=index, k=4, policy="replace", reranker=boom)
    nodes = failing.retrieve(MEETING[0])
    assert [n.node.get_content() for n in nodes] == [n.node.get_content() for n in first_stage]
    assert {n.node.metadata["rerank_status"] for n in nodes} == {"fallback"}
    assert "failing failed: RuntimeError: boom" in nodes[0].node.metadata["rerank_reason"]


def test_retriever_bad_input_is_a_value_error_with_funnels_message(index, tmp_path):
    check_bad_input(FunnelRetriever, lambda retriever, text: retriever.retrieve(text), index, tmp_path / "no")


class FunnelEmbedding(BaseEmbedding):
    """LlamaIndex embeddings over funnel's embedder (the packaged all-MiniLM-L6-v2)."""

    embedder: object

    def _get_text_embedding(self, text):
        return [float(x) for x in self.embedder.embed([text])[0]]

    def _get_query_embedding(self, query):
        return [float(x) for x in embed_queries(self.embedder, [query])[0]]

    async def _aget_query_embedding(self, query):
        return self._get_query_embedding(query)


@pytest.fixture(scope="module")
def vector_index(index):
    """Another retriever's first stage: LlamaIndex's own vector index over the same chunks."""
    pipeline = FunnelRetriever(index=index).pipeline
    chunks = [c for doc_id in pipeline.store.document_hashes() for c in pipeline.store.get_chunks(doc_id)]
    nodes = [TextNode(text=c.text, id_=c.chunk_id, metadata={"file_name": _name(c.path)}) for c in chunks]
    return VectorStoreIndex(nodes, embed_model=FunnelEmbedding(embedder=pipeline.embedder))


def test_postprocessor_reranks_another_retrievers_nodes_in_a_query_engine(vector_index):
    incoming = vector_index.as_retriever(similarity_top_k=20).retrieve(CEO)
    engine = vector_index.as_query_engine(
        similarity_top_k=20, node_postprocessors=[FunnelPostprocessor(top_n=4)]
    )
    response = engine.query(CEO)
    out = response.source_nodes
    assert len(out) == 4 and {n.node.metadata["rerank_status"] for n in out} == {"ok"}
    assert [n.node.node_id for n in out[:2]] == [n.node.node_id for n in incoming[:2]]  # guaranteed slots
    assert [n.node.metadata["guaranteed"] for n in out] == [True, True, False, False]
    assert out[2].score == out[2].node.metadata["rerank_score"] >= out[3].score
    assert incoming[0].node.metadata == {"file_name": incoming[0].node.metadata["file_name"]}  # not mutated
    replace = vector_index.as_query_engine(
        similarity_top_k=20, node_postprocessors=[FunnelPostprocessor(policy="replace", top_n=1)]
    )
    best = replace.query(CEO).source_nodes
    assert best[0].node.metadata["file_name"] == "portfolio_companies.pdf"
    assert "Iris Kallas" in best[0].node.get_content()


def test_postprocessor_defaults_and_fallback():
    post = FunnelPostprocessor()
    assert re.fullmatch(r"funnel-reranker-minilm\.[0-9a-f]{8}-int8@192", post.second_stage.reranker.name)
    assert post.second_stage.policy == GuaranteedSlots(g=2) and post.top_n == 3
    nodes = [NodeWithScore(node=TextNode(text=f"text {i}", id_=f"n{i}"), score=1 - i / 10) for i in range(5)]
    for reranker, reason in ((FailingReranker(ValueError("bad scores")), "ValueError: bad scores"),
                             (SlowReranker(2.0), "slow timed out after 0.2s")):
        processor = FunnelPostprocessor(reranker=reranker, rerank_timeout_s=0.2, top_n=None)
        out = processor.postprocess_nodes(nodes, query_str="which passage?")
        assert [n.node.node_id for n in out] == [n.node.node_id for n in nodes]
        assert [n.score for n in out] == [n.score for n in nodes]
        assert {n.node.metadata["rerank_status"] for n in out} == {"fallback"}
        assert reason in out[0].node.metadata["rerank_reason"]
    with pytest.raises(ValueError, match=r"^the query is empty$"):
        post.postprocess_nodes(nodes, query_str="")
    with pytest.raises(ValueError, match=r"^policy auto reads an index's calibration"):
        FunnelPostprocessor(policy="auto")
    assert post.postprocess_nodes([], query_str=CEO) == []
