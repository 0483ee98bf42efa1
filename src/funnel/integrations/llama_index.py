"""funnel in LlamaIndex (`pip install 'funnel[llamaindex]'`, llama-index-core 0.14).

    from funnel.integrations.llama_index import FunnelPostprocessor, FunnelRetriever
    from llama_index.core.query_engine import RetrieverQueryEngine

    engine = RetrieverQueryEngine.from_args(FunnelRetriever(index=".funnel", k=5), llm=my_llm)
    # or funnel's second stage behind any retriever:
    engine = index.as_query_engine(node_postprocessors=[FunnelPostprocessor(top_n=5)])

Both take the names of `funnel.toml` (index, embedder, k, reranker, policy, guaranteed, rerank_timeout_s,
...): keyword arguments > FUNNEL_* environment > funnel.toml > defaults. Bad input (no index there, the wrong
embedder, an empty query) raises ValueError with funnel's one-line message. funnel's evidence (ranks, scores,
rerank_status) is metadata that LlamaIndex leaves out of what it sends to an LLM or an embedder.
"""

from __future__ import annotations

from typing import Any

from funnel.errors import missing_dependency
from funnel.integrations._core import RerankerAdapter, open_pipeline, search
from funnel.pipeline import Pipeline
from funnel.rerank.base import Reranker

try:
    from llama_index.core.postprocessor.types import BaseNodePostprocessor
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import BaseNode, MetadataMode, NodeWithScore, QueryBundle, TextNode
except ImportError as e:  # pragma: no cover - the extra is installed wherever this is tested
    raise missing_dependency("the LlamaIndex integration", "llama-index-core", "llamaindex") from e

__all__ = ["FunnelPostprocessor", "FunnelRetriever"]

# Metadata an LLM prompt or an embedding should see; funnel's other keys are evidence, for people and logs.
CONTENT_KEYS = frozenset({"path", "title", "location"})


def _with_evidence(node: BaseNode, evidence: dict[str, Any]) -> BaseNode:
    """A copy of `node` whose metadata adds funnel's evidence, kept out of prompts and embeddings."""
    copy = node.model_copy()
    copy.metadata = {**node.metadata, **evidence}
    hidden = [key for key in evidence if key not in CONTENT_KEYS]
    copy.excluded_llm_metadata_keys = [*node.excluded_llm_metadata_keys, *hidden]
    copy.excluded_embed_metadata_keys = [*node.excluded_embed_metadata_keys, *hidden]
    return copy


class FunnelRetriever(BaseRetriever):
    """A LlamaIndex retriever over a funnel index: hybrid first stage, reranker under a policy, chunks grouped
    into documents. One `NodeWithScore` per funnel document (its best passages; the score is the document's
    final score), best first, with the same metadata as the LangChain retriever: path, page or lines, every
    stage's rank and score, `rerank_status`, `rerank_reason`, `policy`.

    `FunnelRetriever(index=PATH_OR_URL, k=5, reranker="builtin", policy="auto", ...)` builds the pipeline as
    the CLI does; `FunnelRetriever(pipeline=funnel.open(...))` takes one that is built.
    """

    def __init__(
        self, *, pipeline: Pipeline | None = None, reranker: str | Reranker | None = None,
        callback_manager=None, verbose: bool = False, **names: Any,
    ):
        self.pipeline = open_pipeline(pipeline, reranker, **names)
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        found = search(self.pipeline, query_bundle.query_str)
        nodes = [_with_evidence(TextNode(text=text, id_=meta["chunk_id"]), meta) for text, meta in found]
        return [NodeWithScore(node=node, score=node.metadata["score"]) for node in nodes]


class FunnelPostprocessor(RerankerAdapter, BaseNodePostprocessor):
    """funnel's second stage over any retriever's nodes, in the order they came.

    The reranker (`reranker="builtin"`: funnel's int8 cross-encoder) orders the nodes under `policy` (default
    `guaranteed_slots`: the first `guaranteed` incoming nodes keep their places), and the first `top_n`
    come back (None: all). On any reranker failure or timeout the incoming order comes back. Each node is a
    copy whose metadata adds `input_rank`, `rerank_score`, `rerank_rank`, `final_rank`, `guaranteed`,
    `rerank_status`, `rerank_reason` and `policy`; its score is the reranker's (the incoming score on a
    fallback). `document_key` names a metadata key (e.g. "file_name") whose equal values make one document
    for the guaranteed slots; by default each node is its own.
    """

    @classmethod
    def class_name(cls) -> str:
        return "FunnelPostprocessor"

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        if query_bundle is None:
            raise ValueError("FunnelPostprocessor needs the query (a query_bundle or query_str)")
        texts = [n.node.get_content(metadata_mode=MetadataMode.NONE) for n in nodes]
        metadatas = [n.node.metadata for n in nodes]
        out = []
        for r in self.rerank_items(query_bundle.query_str, texts, metadatas):
            incoming = nodes[r.position]
            score = r.metadata["rerank_score"] if r.metadata["rerank_score"] is not None else incoming.score
            out.append(NodeWithScore(node=_with_evidence(incoming.node, r.metadata), score=score))
        return out
