"""funnel in LangChain (`pip install 'funnel[langchain]'`, langchain-core 1.x).

    from funnel.integrations.langchain import FunnelRetriever, FunnelReranker

    retriever = FunnelRetriever(index=".funnel", k=5)          # funnel's whole pipeline over an index
    docs = retriever.invoke("Who is the CEO of Zentara Robotics?")

    # funnel's second stage behind any retriever, in place of CrossEncoderReranker
    from langchain_classic.retrievers import ContextualCompressionRetriever
    compressed = ContextualCompressionRetriever(base_compressor=FunnelReranker(top_n=5),
                                                base_retriever=ensemble)

Both take the names of `funnel.toml` (index, embedder, k, reranker, policy, guaranteed, rerank_timeout_s,
...): keyword arguments > FUNNEL_* environment > funnel.toml > defaults. Bad input (no index there, the wrong
embedder, an empty query) raises ValueError with funnel's one-line message.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from funnel.errors import missing_dependency
from funnel.integrations._core import RerankerAdapter, open_pipeline, search
from funnel.pipeline import Pipeline
from funnel.rerank.base import Reranker

try:
    from langchain_core.callbacks import CallbackManagerForRetrieverRun, Callbacks
    from langchain_core.documents import BaseDocumentCompressor, Document
    from langchain_core.retrievers import BaseRetriever
    from pydantic import ConfigDict, PrivateAttr  # langchain-core's models are pydantic 2 models
except ImportError as e:  # pragma: no cover - the extra is installed wherever this is tested
    raise missing_dependency("the LangChain integration", "langchain-core", "langchain") from e

__all__ = ["FunnelReranker", "FunnelRetriever"]


class FunnelRetriever(BaseRetriever):
    """A LangChain retriever over a funnel index: hybrid first stage, reranker under a policy, chunks grouped
    into documents. One `Document` per funnel document (its best passages), best first; its metadata says
    where it is (path, page or lines) and its rank and score at every stage (`bm25_rank`, `dense_rank`,
    `fused_rank`, `rerank_score`, `final_rank`, `guaranteed`), with the search's `rerank_status`,
    `rerank_reason` and `policy`.

    `FunnelRetriever(index=PATH_OR_URL, k=5, reranker="builtin", policy="auto", ...)` builds the pipeline as
    the CLI does; `FunnelRetriever(pipeline=funnel.open(...))` takes one that is built. A funnel `Reranker`
    object may stand in for a reranker spec.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)
    _pipeline: Pipeline = PrivateAttr()

    def __init__(
        self, *, pipeline: Pipeline | None = None, reranker: str | Reranker | None = None, **names: Any
    ):
        own = {name: names.pop(name) for name in list(names) if name in BaseRetriever.model_fields}
        super().__init__(**own)
        self._pipeline = open_pipeline(pipeline, reranker, **names)

    @property
    def pipeline(self) -> Pipeline:
        return self._pipeline

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        return [Document(page_content=text, metadata=meta) for text, meta in search(self._pipeline, query)]


class FunnelReranker(RerankerAdapter, BaseDocumentCompressor):
    """funnel's second stage over any retriever's documents: a drop-in for `CrossEncoderReranker` inside a
    `ContextualCompressionRetriever`.

    The reranker (`reranker="builtin"`: funnel's int8 cross-encoder) orders the documents under `policy`
    (default `guaranteed_slots`: the first `guaranteed` incoming documents keep their places), and the first
    `top_n` come back (None: all). On any reranker failure or timeout the incoming order comes back. Each
    returned document is a copy whose metadata adds `input_rank`, `rerank_score`, `rerank_rank`,
    `final_rank`, `guaranteed`, `rerank_status` (ok | skipped | fallback), `rerank_reason` and `policy`.
    `document_key` names a metadata key (e.g. "source") whose equal values make one document for the
    guaranteed slots; by default each incoming document is its own.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    def compress_documents(self, documents: Sequence[Document], query: str,
                           callbacks: Callbacks | None = None) -> Sequence[Document]:
        texts, metadatas = [d.page_content for d in documents], [d.metadata for d in documents]
        return [
            Document(page_content=texts[r.position], id=documents[r.position].id,
                     metadata={**metadatas[r.position], **r.metadata})
            for r in self.rerank_items(query, texts, metadatas)
        ]
