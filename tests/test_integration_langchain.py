"""funnel in LangChain (the real langchain-core, langchain-classic, langchain-community): FunnelRetriever over
a real index of samples/docs, FunnelReranker as the second stage of seed 001's own shape (an EnsembleRetriever
over BM25Retriever and a vector store), both inside LCEL chains; faults and bad input."""

from __future__ import annotations

import re

import numpy as np
import pytest
from helpers import FailingReranker
from integration_support import (
    CEO, COMMITTEE, MEETING, NoNetwork, SlowReranker, build_sample_index, check_bad_input,
)

pytest.importorskip("langchain_core")
from langchain_classic.retrievers import ContextualCompressionRetriever, EnsembleRetriever  # noqa: E402
from langchain_community.retrievers import BM25Retriever  # noqa: E402
from langchain_core.documents import Document  # noqa: E402
from langchain_core.embeddings import Embeddings  # noqa: E402
from langchain_core.runnables import RunnableLambda, RunnablePassthrough  # noqa: E402
from langchain_core.vectorstores import InMemoryVectorStore  # noqa: E402

from funnel.embed.base import embed_queries  # noqa: E402
from funnel.integrations.langchain import FunnelReranker, FunnelRetriever  # noqa: E402
from funnel.rerank.policies import RERANK_DEPTH, GuaranteedSlots  # noqa: E402

pytestmark = pytest.mark.model

STAGE_KEYS = {"bm25_rank", "dense_rank", "fused_rank", "rerank_score", "final_rank", "guaranteed",
              "rerank_status", "rerank_reason", "policy"}


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    return str(build_sample_index(tmp_path_factory.mktemp("langchain") / "index"))


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    guard = NoNetwork(monkeypatch)
    yield
    assert guard.attempts == []


def _answer(inputs: dict) -> dict:
    """The LCEL chain's last step: the best document's first passage, with where it came from."""
    best = inputs["docs"][0]
    return {"question": inputs["question"], "source": best.metadata.get("path") or best.metadata["source"],
            "passage": best.page_content}


def _name(path: str) -> str:
    return path.rsplit("/", 1)[-1]


# ---- FunnelRetriever ----------------------------------------------------------------------------------


def test_retriever_in_an_lcel_chain_finds_the_answering_document(index):
    retriever = FunnelRetriever(index=index, k=3, policy="guaranteed_slots")
    chain = {"docs": retriever, "question": RunnablePassthrough()} | RunnableLambda(_answer)
    for question, source in (COMMITTEE, MEETING):
        out = chain.invoke(question)
        assert _name(out["source"]) == source
    assert "five members" in chain.invoke(COMMITTEE[0])["passage"]


def test_retriever_metadata_carries_every_stage(index):
    docs = FunnelRetriever(index=index, k=3, policy="guaranteed_slots").invoke(CEO)
    assert len(docs) == 3 and len({d.metadata["path"] for d in docs}) == 3  # documents, not chunks
    for rank, doc in enumerate(docs, start=1):
        meta = doc.metadata
        assert STAGE_KEYS <= set(meta) and meta["rank"] == rank
        assert meta["rerank_status"] == "ok" and meta["policy"] == "guaranteed_slots"
        assert isinstance(meta["rerank_score"], float) and meta["fused_rank"] >= 1
        assert meta["bm25_rank"] is not None or meta["dense_rank"] is not None
    assert [d.metadata["guaranteed"] for d in docs[:2]] == [True, True]  # funnel's default guaranteed = 2
    pdf = next(d for d in docs if d.metadata["path"].endswith("portfolio_companies.pdf"))
    assert pdf.metadata["page"] == 2 and pdf.metadata["location"] == "p.2"
    assert "Iris Kallas" in pdf.page_content
    text = next(d for d in docs if d.metadata["path"].endswith(".md"))
    assert text.metadata["line_start"] >= 1 and text.metadata["location"].startswith("L")


def test_retriever_takes_funnel_settings_names(index):
    replace = FunnelRetriever(index=index, k=2, policy="replace", reranker="builtin").invoke(CEO)
    assert len(replace) == 2 and replace[0].metadata["path"].endswith("portfolio_companies.pdf")
    assert replace[0].metadata["rerank_rank"] == 1 and replace[0].metadata["policy"] == "replace"
    first_stage = FunnelRetriever(index=index, k=2, reranker="none").invoke(CEO)
    assert first_stage[0].metadata["rerank_status"] == "skipped"
    assert first_stage[0].metadata["rerank_score"] is None
    # the default policy, auto, reads the index's calibration; this index has none, so it says so
    assert "not calibrated" in FunnelRetriever(index=index).invoke(CEO)[0].metadata["rerank_reason"]


def test_a_failing_reranker_returns_the_first_stage_order(index):
    first_stage = FunnelRetriever(index=index, k=4, policy="none").invoke(MEETING[0])
    failing = FunnelRetriever(index=index, k=4, policy="rrf", reranker=FailingReranker(RuntimeError("boom")))
    docs = failing.invoke(MEETING[0])
    assert [d.metadata["path"] for d in docs] == [d.metadata["path"] for d in first_stage]
    assert [d.page_content for d in docs] == [d.page_content for d in first_stage]
    assert {d.metadata["rerank_status"] for d in docs} == {"fallback"}
    assert "failing failed: RuntimeError: boom" in docs[0].metadata["rerank_reason"]


def test_retriever_bad_input_is_a_value_error_with_funnels_message(index, tmp_path):
    check_bad_input(FunnelRetriever, lambda retriever, query: retriever.invoke(query), index, tmp_path / "no")


# ---- FunnelReranker -----------------------------------------------------------------------------------


def test_reranker_defaults_to_the_int8_builtin_on_plain_documents():
    reranker = FunnelReranker()
    assert re.fullmatch(r"funnel-reranker-minilm\.[0-9a-f]{8}-int8@192", reranker.second_stage.reranker.name)
    assert reranker.second_stage.policy == GuaranteedSlots(g=2)
    texts = ["The weather is mild in spring.", "Bananas are yellow.", "Paris is the capital of France.",
             "Iris Kallas is the CEO of Zentara Robotics.", "Tea is brewed with hot water."]
    docs = [Document(page_content=t, metadata={"n": i}) for i, t in enumerate(texts)]
    out = FunnelReranker(top_n=None).compress_documents(docs, CEO)
    # the two guaranteed slots keep the incoming top 2; the reranker lifts the answer above the rest
    assert [d.metadata["n"] for d in out[:3]] == [0, 1, 3]
    assert out[2].metadata["rerank_rank"] == 1 and out[2].metadata["input_rank"] == 4
    assert sorted(d.metadata["n"] for d in out) == list(range(5)) and docs[0].metadata == {"n": 0}
    assert FunnelReranker(guaranteed=0, top_n=1).compress_documents(docs, CEO)[0].page_content == texts[3]
    assert len(FunnelReranker().compress_documents(docs, CEO)) == 3  # CrossEncoderReranker's top_n


def test_reranker_falls_back_to_the_incoming_order_on_failure_and_timeout():
    docs = [Document(page_content=f"passage {i}", metadata={"n": i}, id=f"d{i}") for i in range(6)]
    for reranker, reason in ((FailingReranker(MemoryError("out of memory")), "MemoryError: out of memory"),
                             (SlowReranker(2.0), "slow timed out after 0.2s")):
        compressor = FunnelReranker(reranker=reranker, rerank_timeout_s=0.2, top_n=None)
        out = compressor.compress_documents(docs, "q")
        assert [d.id for d in out] == [d.id for d in docs]
        assert [d.page_content for d in out] == [d.page_content for d in docs]
        assert {d.metadata["rerank_status"] for d in out} == {"fallback"}
        assert reason in out[0].metadata["rerank_reason"]
    cut = FunnelReranker(reranker=FailingReranker(RuntimeError("x")), top_n=2).compress_documents(docs, "q")
    assert [d.metadata["n"] for d in cut] == [0, 1]


def test_reranker_bad_input_is_a_value_error():
    docs = [Document(page_content="text")]
    with pytest.raises(ValueError, match=r"^the query is empty$"):
        FunnelReranker().compress_documents(docs, " ")
    with pytest.raises(ValueError, match=r"^policy auto reads an index's calibration"):
        FunnelReranker(policy="auto")
    with pytest.raises(ValueError, match=r"^unknown rerank policy"):
        FunnelReranker(policy="best")
    with pytest.raises(ValueError, match=r"top_n must be at least 1"):
        FunnelReranker(top_n=0)
    assert FunnelReranker().compress_documents([], CEO) == []


class FunnelEmbeddings(Embeddings):
    """LangChain Embeddings over funnel's embedder (the packaged all-MiniLM-L6-v2)."""

    def __init__(self, embedder):
        self.embedder = embedder

    def embed_documents(self, texts):
        return np.asarray(self.embedder.embed(list(texts))).tolist()

    def embed_query(self, text):
        return embed_queries(self.embedder, [text])[0].tolist()


@pytest.fixture(scope="module")
def ensemble(index):
    """Seed 001's first stage: BM25 + a vector store over the same chunks, fused by an EnsembleRetriever."""
    pipeline = FunnelRetriever(index=index).pipeline
    chunks = [c for doc_id in pipeline.store.document_hashes() for c in pipeline.store.get_chunks(doc_id)]
    docs = [Document(page_content=c.text, metadata={"source": c.path, "page": c.page}) for c in chunks]
    vectors = InMemoryVectorStore.from_documents(docs, FunnelEmbeddings(pipeline.embedder))
    bm25 = BM25Retriever.from_documents(docs, k=10)
    dense = vectors.as_retriever(search_kwargs={"k": 10})
    return EnsembleRetriever(retrievers=[bm25, dense], weights=[0.5, 0.5])


def test_reranker_as_the_second_stage_of_seed_001s_ensemble(ensemble):
    incoming = ensemble.invoke(CEO)
    assert len(incoming) > RERANK_DEPTH  # the reranker is given the whole ensemble below (default: its top 15)
    funnel_stage = ContextualCompressionRetriever(
        base_compressor=FunnelReranker(top_n=4, rerank_depth=len(incoming)), base_retriever=ensemble
    )
    chain = {"docs": funnel_stage, "question": RunnablePassthrough()} | RunnableLambda(_answer)
    out = funnel_stage.invoke(CEO)
    assert len(out) == 4 and {d.metadata["rerank_status"] for d in out} == {"ok"}
    # guaranteed slots: the ensemble's top 2 keep their places; the reranker chose the rest
    assert [d.page_content for d in out[:2]] == [d.page_content for d in incoming[:2]]
    assert [d.metadata["guaranteed"] for d in out] == [True, True, False, False]
    assert out[2].metadata["rerank_rank"] < out[3].metadata["rerank_rank"]
    assert any("Iris Kallas" in d.page_content for d in out)
    replace = ContextualCompressionRetriever(
        base_compressor=FunnelReranker(policy="replace", top_n=1, rerank_depth=len(incoming)),
        base_retriever=ensemble
    )
    best = ({"docs": replace, "question": RunnablePassthrough()} | RunnableLambda(_answer)).invoke(CEO)
    assert _name(best["source"]) == "portfolio_companies.pdf" and "Iris Kallas" in best["passage"]
    assert _name(chain.invoke(COMMITTEE[0])["source"]) == COMMITTEE[1]
