"""Request and response bodies of the collections, search and ask endpoints, and the conversion of the
core's frozen dataclasses into them (the only place where the wire shape is decided)."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, Field

from funnel.apps.state.documents import DocumentRecord
from funnel.config import request_bounds
from funnel.engine_config import GroupingConfig
from funnel.rerank.policies import PolicyChoice
from funnel.retrieve.first_stage import Retrieval
from funnel.types import Answer, Chunk, Citation, DocumentHit, Hit, SearchResult

MAX_QUESTION_CHARS = 8000  # the pipeline cuts the query at 4000 and says so in `notes`
# A request's k: GroupingConfig.k's range, with the lower ceiling a request over the network gets.
K_BOUNDS = request_bounds(GroupingConfig, "k")


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    return value


Text = Annotated[str, Field(min_length=1, max_length=MAX_QUESTION_CHARS), AfterValidator(_not_blank)]


# --- collections and documents ---------------------------------------------------------------------------


class CollectionCreate(BaseModel):
    name: str = Field(max_length=200, description="1-64 of a-z 0-9 _ -, starting with a letter or digit")


class CollectionOut(BaseModel):
    name: str
    documents: int
    chunks: int
    pending: int = Field(description="ingest and delete jobs queued or running")
    watch: dict | None = Field(
        None, description="only on a watched folder's collection (`funnel serve --watch`): folder, watching, "
        "syncs, last_sync, last_error, last_change; uploads and deletes are refused (409)",
    )


class DocumentOut(BaseModel):
    id: str
    filename: str
    kind: str
    status: str = Field(description="queued | ingesting | ready | failed")
    error: str | None
    chunks: int
    bytes: int
    uploaded_at: str
    progress: str | None = Field(
        None, description="where it stands: 'position 3 of 12 in the queue'; while ingesting, "
        "'page 120 of 2415' (a PDF being read), then 'chunks 512 of 2048' (embedded)",
    )
    progress_done: int | None = Field(None, description="the numbers in `progress`: place, pages or chunks")
    progress_total: int | None = Field(None, description="of this many")
    warnings: list[str] = Field(
        [], description="what was left unread of a ready document, a line each: '2 scanned pages not read "
        "(p. 3, 7): OCR failed: …'",
    )

    @classmethod
    def of(cls, record: DocumentRecord) -> DocumentOut:
        return cls(
            id=record.id, filename=record.filename, kind=record.kind, status=record.status.value,
            error=record.error, chunks=record.chunks, bytes=record.bytes, uploaded_at=record.uploaded_at,
            progress=record.progress, progress_done=record.progress_done,
            progress_total=record.progress_total, warnings=list(record.warnings),
        )


class ChunkPlace(BaseModel):
    """Which chunk, and where it is: the fields a chunk and a search hit share."""

    chunk_id: str
    document_id: str
    path: str
    title: str
    heading: str | None
    page: int | None
    line_start: int | None
    line_end: int | None
    location: str

    @staticmethod
    def fields_of(chunk: Chunk) -> dict:
        return dict(
            chunk_id=chunk.chunk_id, document_id=chunk.doc_id, path=chunk.path, title=chunk.title,
            heading=chunk.heading, page=chunk.page, line_start=chunk.line_start, line_end=chunk.line_end,
            location=chunk.location,
        )


class ChunkOut(ChunkPlace):
    ordinal: int
    text: str

    @classmethod
    def of(cls, chunk: Chunk) -> ChunkOut:
        return cls(**ChunkPlace.fields_of(chunk), ordinal=chunk.ordinal, text=chunk.text)


# --- search ------------------------------------------------------------------------------------------------


class SearchRequest(BaseModel):
    query: Text
    k: int | None = Field(None, **K_BOUNDS, description="documents returned (default: the server's k)")
    policy: str | None = Field(None, description=PolicyChoice.forms())
    explain: bool = Field(False, description="also list every candidate with its rank at every stage")
    documents: list[str] | None = Field(
        None, max_length=1000,
        description="search only these documents: ids or file names as the documents route lists them "
        "(omitted or empty: the whole collection; an unknown one: 404)",
    )


class HitOut(ChunkPlace):
    """One chunk and its evidence from every stage (ranks are 1-based; null = not returned by that stage)."""

    text: str | None = None
    bm25_rank: int | None
    dense_rank: int | None
    fused_rank: int
    rerank_score: float | None
    final_rank: int
    guaranteed: bool

    @classmethod
    def of(cls, hit: Hit, with_text: bool = True) -> HitOut:
        c, chunk = hit.candidate, hit.chunk
        return cls(
            **ChunkPlace.fields_of(chunk), text=chunk.text if with_text else None, bm25_rank=c.bm25_rank,
            dense_rank=c.dense_rank, fused_rank=c.fused_rank, rerank_score=hit.rerank_score,
            final_rank=hit.final_rank, guaranteed=hit.guaranteed,
        )


class DocumentHitOut(BaseModel):
    rank: int
    document_id: str
    path: str
    title: str
    score: float
    page: int | None = Field(None, description="set when the result is one page of its document "
                             "(the search found fewer documents than k)")
    hits: list[HitOut]

    @classmethod
    def of(cls, doc: DocumentHit) -> DocumentHitOut:
        return cls(
            rank=doc.rank, document_id=doc.doc_id, path=doc.path, title=doc.title, score=doc.score,
            page=doc.page, hits=[HitOut.of(h) for h in doc.hits],
        )


class SearchResponse(BaseModel):
    query: str
    results: list[DocumentHitOut]
    candidates: list[HitOut] | None = Field(None, description="with explain: every candidate, final order")
    rerank_status: str = Field(description="ok | skipped | fallback")
    rerank_reason: str
    policy: str
    first_stage: str = Field(description=f"{Retrieval.help()}; `auto: X` when the index's calibration chose X")
    timings_ms: dict[str, float]
    notes: list[str]

    @classmethod
    def of(cls, result: SearchResult, explain: bool = False) -> SearchResponse:
        return cls(
            query=result.query,
            results=[DocumentHitOut.of(d) for d in result.documents],
            candidates=[HitOut.of(h, with_text=False) for h in result.hits] if explain else None,
            rerank_status=result.rerank_status.value,
            rerank_reason=result.rerank_reason,
            policy=result.policy,
            first_stage=result.first_stage,
            timings_ms={k: round(v, 3) for k, v in result.timings_ms.items()},
            notes=list(result.notes),
        )


# --- ask -------------------------------------------------------------------------------------------------


class AskRequest(BaseModel):
    question: Text
    k: int | None = Field(None, **K_BOUNDS)
    policy: str | None = Field(None, description=PolicyChoice.forms())
    conversation_id: str | None = Field(
        None, pattern=r"^[A-Za-z0-9_-]{1,64}$",
        description="continue this conversation (an unknown id starts a new one under that id)",
    )
    stream: bool | None = Field(None, description="server-sent events (default: when Accept asks for them)")
    documents: list[str] | None = Field(
        None, max_length=1000,
        description="search only these documents: ids or file names as the documents route lists them "
        "(omitted or empty: the whole collection; an unknown one: 404)",
    )


class CitationOut(BaseModel):
    number: int
    chunk_id: str
    document_id: str
    path: str
    title: str
    location: str = Field(description="where in the file: p.3, slide 3, row 12-14, L12-14")
    heading: str | None = Field(None, description="the section's heading trail, or the code symbol")
    page: int | None
    line_start: int | None
    line_end: int | None
    text: str

    @classmethod
    def of(cls, c: Citation) -> CitationOut:
        return cls(
            number=c.number, chunk_id=c.chunk_id, document_id=c.doc_id, path=c.path, title=c.title,
            location=c.location, heading=c.heading, page=c.page, line_start=c.line_start,
            line_end=c.line_end, text=c.text,
        )


class SourceOut(BaseModel):
    """A document retrieval found for the question (the answer may cite some of them)."""

    rank: int
    document_id: str
    path: str
    title: str
    page: int | None = None
    location: str | None = Field(None, description="where its best passage is: p.3, slide 3, row 12-14")
    heading: str | None = Field(None, description="its best passage's heading trail, or code symbol")

    @classmethod
    def of(cls, doc: DocumentHit) -> SourceOut:
        best = doc.best.chunk
        return cls(rank=doc.rank, document_id=doc.doc_id, path=doc.path, title=doc.title, page=doc.page,
                   location=best.location, heading=best.heading)


class AskResponse(BaseModel):
    question: str
    search_query: str = Field(description="what was searched: the question, rewritten when it follows up")
    rewritten_by: str = Field(description="none | llm | heuristic")
    answer: str
    citations: list[CitationOut]
    generator: str = Field(description="which backend answered")
    fallback_reason: str = Field(description="why the LLM did not answer, when the fallback did")
    flags: list[str] = Field(description="uncited | unknown_citation | no_context | interrupted | abstained | no_memory")
    abstained: bool = Field(False, description="the documents do not support an answer: `answer` says so and "
                                               "`citations` are the closest passages, not an answer")
    evidence: float | None = Field(None, description="the evidence measured for an answer (0-1), held to the "
                                                     "index's abstention threshold; null when abstention is off")
    quote: list[CitationOut] = Field(default_factory=list, description=(
        "beside a reader model's answer: the sentences the extractive picker chose, verbatim, each where it "
        "stands (shown as 'From the page'; the SSE stream sends them first, as `quote`)"))
    conversation_id: str
    memory_note: str = Field("", description="with no_memory: why the conversation's memory was not used")
    rerank_status: str
    rerank_reason: str
    sources: list[SourceOut]
    timings_ms: dict[str, float]

    @classmethod
    def of(
        cls, question: str, answer: Answer, result: SearchResult, conversation_id: str, rewritten_by: str,
        timings_ms: dict[str, float],
    ) -> AskResponse:
        return cls(
            question=question,
            search_query=result.query,
            rewritten_by=rewritten_by,
            answer=answer.text,
            citations=[CitationOut.of(c) for c in answer.citations],
            generator=answer.generator,
            fallback_reason=answer.fallback_reason,
            flags=list(answer.flags),
            abstained=answer.abstained,
            evidence=None if answer.evidence is None else round(answer.evidence, 4),
            quote=[CitationOut.of(c) for c in answer.quote],
            conversation_id=conversation_id,
            rerank_status=result.rerank_status.value,
            rerank_reason=result.rerank_reason,
            sources=[SourceOut.of(d) for d in result.documents],
            timings_ms={k: round(v, 3) for k, v in timings_ms.items()},
        )
