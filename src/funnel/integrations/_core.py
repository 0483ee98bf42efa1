"""What the LangChain and LlamaIndex adapters share, so each of them is a thin layer over it.

- `open_pipeline`: a `Pipeline` from the names of `funnel.toml` (`apps.settings.Settings`), built by
  `apps.factory.build_pipeline` exactly as the CLI builds it (the embedder defaults to the index's).
- `SecondStage`: funnel's second stage (a reranker under a policy, `rerank.policies.second_stage`) over any
  framework's texts, in the order another retriever gave them; on any failure that order comes back.
- `document_metadata` / `rerank_metadata`: a result's evidence at every stage as a flat metadata dict.

Errors: a framework's users catch ValueError for bad input, so a `FunnelError` leaves an adapter as a
ValueError carrying funnel's one-line message, the FunnelError as its cause (`framework_errors`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, PrivateAttr

from funnel.apps.factory import build_pipeline, reranker_from_settings
from funnel.apps.settings import Settings, load_settings
from funnel.errors import ConfigError, FunnelError, StoreError
from funnel.index import location_label
from funnel.pipeline import Pipeline
from funnel.rerank.base import Reranker
from funnel.rerank.policies import Policy, RerankPolicy, second_stage
from funnel.types import Candidate, Chunk, DocumentHit, Hit, SearchResult

# The policy a reranker over another retriever's documents runs under unless told otherwise: `auto` reads
# an index's calibration, and there is no index behind another retriever's documents.
DEFAULT_RERANK_POLICY = RerankPolicy.GUARANTEED_SLOTS


@contextmanager
def framework_errors(error_type: type[Exception] = ValueError) -> Iterator[None]:
    """A FunnelError raised inside becomes `error_type` with its one-line message (ValueError is what
    LangChain and LlamaIndex users catch); the FunnelError is its cause."""
    try:
        yield
    except FunnelError as e:
        raise error_type(str(e)) from e


def _settings(reranker: str | Reranker | None, names: dict[str, Any]) -> tuple[Settings, Reranker | None]:
    """Settings from keyword names (> FUNNEL_* environment > funnel.toml > defaults), and the reranker
    object when one was given instead of a spec (any funnel `Reranker`)."""
    given = reranker if reranker is not None and not isinstance(reranker, str) else None
    if given is not None:
        if not isinstance(given, Reranker):
            raise ConfigError(f"reranker must be a spec like 'builtin' or a funnel Reranker, not {given!r}")
        names = {**names, "reranker": "none"}
    elif reranker is not None:
        names = {**names, "reranker": reranker}
    return load_settings(**names), given


@framework_errors()
def open_pipeline(
    pipeline: Pipeline | None = None, reranker: str | Reranker | None = None, **names: Any
) -> Pipeline:
    """The pipeline an adapter searches: `pipeline` as it is, else one built from settings names over an
    index that must exist. Raises ValueError."""
    if pipeline is not None:
        if names or reranker is not None:
            raise ConfigError("give either a pipeline or settings names, not both")
        return pipeline
    settings, given = _settings(reranker, names)
    pipeline = build_pipeline(settings, **({"reranker": given} if given is not None else {}))
    if pipeline.store.info() is None:
        label = location_label(settings.index)
        raise StoreError(f"no index at {label}: run `funnel ingest PATH --index {label}` first")
    return pipeline


@dataclass(frozen=True)
class Reranked:
    """One incoming item after the second stage: where it came from (`position`, 0-based) and its evidence."""

    position: int
    metadata: dict[str, Any]


@dataclass(frozen=True)
class SecondStage:
    """A reranker under a policy, run over texts in another retriever's order."""

    reranker: Reranker | None
    policy: Policy
    timeout_s: float | None
    depth: int | None  # the incoming texts' top the reranker scores; the rest keep their order below (None: all)

    @classmethod
    def from_names(cls, reranker: str | Reranker | None = "builtin", policy: str | RerankPolicy | None = None,
                   **names) -> SecondStage:
        """From settings names (`reranker`, `policy`, `guaranteed`, `rerank_timeout_s`, `rerank_weight`,
        `rerank_rrf_k`, `rerank_depth`, `rerank_model`, `rerank_api_key`). Raises FunnelError."""
        policy = DEFAULT_RERANK_POLICY if policy is None else RerankPolicy.parse(policy)
        if policy is RerankPolicy.AUTO:
            raise ConfigError("policy auto reads an index's calibration; over another retriever's documents "
                              "use none, replace, guaranteed_slots or rrf")
        settings, given = _settings(reranker, {**names, "policy": policy})
        built = given if given is not None else reranker_from_settings(settings)
        rerank = settings.engine().rerank
        return cls(built, rerank.policy_of(policy), rerank.timeout_s, rerank.depth)

    def rerank(self, query: str, texts: Sequence[str], keys: Sequence[str] | None = None) -> list[Reranked]:
        """Every text, in the final order. `keys[i]` names the document text i belongs to (a guaranteed slot
        keeps a whole document); without keys each text is its own document. Raises FunnelError for an
        empty query; a failing reranker is never raised: the incoming order comes back, status fallback."""
        query = " ".join(query.split())
        if not query:
            raise ConfigError("the query is empty")
        candidates = [_candidate(i, text, keys[i] if keys else None) for i, text in enumerate(texts)]
        result = second_stage(query, candidates, self.reranker, self.policy, self.timeout_s, self.depth)
        status = {"rerank_status": result.status.value, "rerank_reason": result.reason,
                  "policy": self.policy.kind.value}
        return [Reranked(h.candidate.fused_rank - 1, {**rerank_metadata(h), **status}) for h in result.hits]


@framework_errors()
def second_stage_from_names(
    reranker: str | Reranker, policy: str | None, top_n: int | None, **names: Any
) -> SecondStage:
    """A reranker adapter's second stage, checking its `top_n` too. Raises ValueError."""
    if top_n is not None and top_n < 1:
        raise ValueError(f"top_n must be at least 1 (or None for all), got {top_n}")
    return SecondStage.from_names(reranker, policy, **names)


def rerank_items(
    stage: SecondStage, query: str, texts: Sequence[str], metadatas: Sequence[dict[str, Any]],
    document_key: str | None, top_n: int | None,
) -> list[Reranked]:
    """The first `top_n` of a framework's items (text + metadata) after the second stage; items whose
    `document_key` metadata is equal are one document. Raises ValueError for bad input."""
    if not texts:
        return []
    keys = [str(m.get(document_key, f"#{i}")) for i, m in enumerate(metadatas)] if document_key else None
    with framework_errors():
        return stage.rerank(query, texts, keys)[:top_n]


class RerankerAdapter(BaseModel):
    """What both reranker adapters are besides their framework's base (each framework's is a pydantic model):
    `top_n`, `document_key`, the constructor taking settings names, and the second stage run over items."""

    top_n: int | None = 3
    document_key: str | None = None
    _stage: SecondStage = PrivateAttr()

    def __init__(self, *, reranker: str | Reranker = "builtin", policy: str | None = None,
                 top_n: int | None = 3, document_key: str | None = None, **names: Any):
        super().__init__(top_n=top_n, document_key=document_key)
        self._stage = second_stage_from_names(reranker, policy, top_n, **names)

    @property
    def second_stage(self) -> SecondStage:
        return self._stage

    def rerank_items(
        self, query: str, texts: Sequence[str], metadatas: Sequence[dict[str, Any]]
    ) -> list[Reranked]:
        return rerank_items(self._stage, query, texts, metadatas, self.document_key, self.top_n)


def _candidate(position: int, text: str, key: str | None) -> Candidate:
    """A text from another retriever as a first-stage candidate: its rank there is its only evidence."""
    doc_id = key if key is not None else f"#{position}"
    chunk = Chunk(chunk_id=f"#{position}", doc_id=doc_id, ordinal=position, text=text, path=doc_id,
                  title=doc_id, kind="text", n_tokens=0)
    return Candidate(chunk, fused_rank=position + 1, fused_score=0.0)


def rerank_metadata(hit: Hit) -> dict[str, Any]:
    """The second stage's evidence for one hit."""
    return {
        "input_rank": hit.candidate.fused_rank,
        "rerank_score": hit.rerank_score,
        "rerank_rank": hit.rerank_rank,
        "final_rank": hit.final_rank,
        "guaranteed": hit.guaranteed,
    }


def document_metadata(document: DocumentHit, result: SearchResult) -> dict[str, Any]:
    """A document of a funnel search: where it is, and its best chunk's rank and score at every stage."""
    hit = document.best
    chunk, candidate = hit.chunk, hit.candidate
    return {
        "doc_id": document.doc_id,
        "chunk_id": chunk.chunk_id,
        "path": document.path,
        "title": document.title,
        "location": chunk.location,
        "heading": chunk.heading,
        "page": document.page if document.page is not None else chunk.page,
        "line_start": chunk.line_start,
        "line_end": chunk.line_end,
        "rank": document.rank,
        "score": document.score,
        "bm25_rank": candidate.bm25_rank,
        "bm25_score": candidate.bm25_score,
        "dense_rank": candidate.dense_rank,
        "dense_score": candidate.dense_score,
        "fused_rank": candidate.fused_rank,
        "fused_score": candidate.fused_score,
        "rerank_score": hit.rerank_score,
        "rerank_rank": hit.rerank_rank,
        "final_rank": hit.final_rank,
        "final_score": hit.final_score,
        "guaranteed": hit.guaranteed,
        "rerank_status": result.rerank_status.value,
        "rerank_reason": result.rerank_reason,
        "policy": result.policy,
    }


def document_text(document: DocumentHit) -> str:
    """A document's passages (its best chunks, best first), as the text a framework hands to an LLM."""
    return "\n\n".join(hit.chunk.text for hit in document.hits)


def search(pipeline: Pipeline, query: str) -> list[tuple[str, dict[str, Any]]]:
    """(text, metadata) of each document a search returns, best first. Raises ValueError for bad input."""
    with framework_errors():
        result = pipeline.search(query)
    return [(document_text(d), document_metadata(d, result)) for d in result.documents]
