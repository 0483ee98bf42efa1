"""Frozen dataclasses that travel between the stages of the pipeline.

Every stage takes and returns these; no dicts with magic keys cross a stage boundary.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum


class SectionKind(str, Enum):
    """What a loaded span of text is, so the chunker knows what it may split."""

    PROSE = "prose"
    TABLE = "table"  # one "Header: value | Header: value" row per line; rows are never split
    CODE = "code"


class Kind(str, Enum):
    """What a document is, named after the loader that read it; stored and sent as the plain string.

    The members are the kinds the core names. Any other loader's name (a row of
    `funnel.ingest.loaders.LOADERS`: "csv") is a Kind too, made on first use, so a new file type needs no
    member here."""

    PDF = "pdf"
    MARKDOWN = "markdown"
    TEXT = "text"
    CODE = "code"
    RECORD = "record"  # a dataset record (an eval corpus), not a file

    def __str__(self) -> str:  # "pdf", as the stores and the JSON have it, not "Kind.PDF"
        return self.value

    @classmethod
    def _missing_(cls, value: object) -> Kind | None:
        if not isinstance(value, str) or not _KIND_NAME.fullmatch(value):
            return None  # ValueError, as for any enum
        member = str.__new__(cls, value)
        member._name_, member._value_ = value.upper(), value
        return cls._value2member_map_.setdefault(value, member)  # one member per name: `is` holds


_KIND_NAME = re.compile(r"[a-z][a-z0-9_]*")


@dataclass(frozen=True)
class Section:
    """A span of a source document as a loader found it, with its location."""

    text: str
    kind: SectionKind = SectionKind.PROSE
    page: int | None = None  # 1-based, PDFs only
    line_start: int | None = None  # 1-based, inclusive
    line_end: int | None = None
    heading: str | None = None  # Markdown heading path, or the code symbol defined here


@dataclass(frozen=True)
class Document:
    """A source file (or dataset record) identified by a stable id."""

    doc_id: str
    path: str
    title: str
    kind: Kind
    content_hash: str
    language: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", Kind(self.kind))  # a plain "pdf" from a caller or a store row


@dataclass(frozen=True)
class LoadedDocument:
    document: Document
    sections: tuple[Section, ...]
    # What the loader could not read of a document it still loaded, a line each ("2 scanned pages not read
    # (p. 3, 7): OCR failed: …"): shown by ingest, its --json, the API and the page, so no page goes silently.
    warnings: tuple[str, ...] = ()


# How a kind of document names the places of its chunks: (page unit, line unit), e.g. ("slide ", "L") for a
# presentation or ("p.", "row ") for a spreadsheet. Filled from the loaders' table (`funnel.ingest.loaders`,
# a row's `page_unit`/`line_unit`); a kind not in it uses the defaults, "p." and "L".
LOCATION_UNITS: dict[str, tuple[str, str]] = {}


@dataclass(frozen=True)
class Chunk:
    """The unit that is embedded, indexed and retrieved."""

    chunk_id: str
    doc_id: str
    ordinal: int
    text: str
    path: str
    title: str
    kind: Kind
    n_tokens: int
    language: str | None = None
    heading: str | None = None
    page: int | None = None
    line_start: int | None = None
    line_end: int | None = None
    section_kind: SectionKind = SectionKind.PROSE
    content_hash: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", Kind(self.kind))

    @property
    def context_line(self) -> str:
        """The first line the chunker puts before the content (see `funnel.ingest.chunk.context_line`)."""
        name = self.path if self.kind == "code" else self.title
        return f"{name} > {self.heading}" if self.heading else name

    @property
    def location(self) -> str:
        """Human-readable place of this chunk inside its document: `p.3`, `slide 3`, `L12-14`, `row 12-14`
        (the units its kind's loader names, `LOCATION_UNITS`)."""
        page_unit, line_unit = LOCATION_UNITS.get(self.kind.value, ("p.", "L"))
        if self.page is not None:
            return f"{page_unit}{self.page}"
        if self.line_start is not None:
            return f"{line_unit}{self.line_start}-{self.line_end}"
        return f"#{self.ordinal}"


@dataclass(frozen=True)
class Candidate:
    """A chunk as the first stage ranked it. Ranks are 1-based; None = not returned by that retriever."""

    chunk: Chunk
    fused_rank: int
    fused_score: float
    bm25_rank: int | None = None
    bm25_score: float | None = None
    dense_rank: int | None = None
    dense_score: float | None = None
    # Past its document's cap of chunks, taken to fill a window the cap would have left short.
    past_cap: bool = False


class RerankStatus(str, Enum):
    OK = "ok"
    SKIPPED = "skipped"  # policy "none" or no reranker configured
    FALLBACK = "fallback"  # the reranker failed; first-stage order returned unchanged


@dataclass(frozen=True)
class RerankResult:
    """What a reranker returns: one score per candidate, in the order the candidates were given."""

    scores: tuple[float, ...]
    raw_scores: tuple[float, ...] | None = None
    truncated: tuple[int, ...] = ()  # indices of candidates whose text was cut to fit the model


@dataclass(frozen=True)
class Hit:
    """A candidate after the second stage: its final rank and every stage's evidence."""

    candidate: Candidate
    final_rank: int
    final_score: float
    rerank_score: float | None = None
    rerank_rank: int | None = None
    guaranteed: bool = False  # kept by a guaranteed slot, whatever the reranker said

    @property
    def chunk(self) -> Chunk:
        return self.candidate.chunk


@dataclass(frozen=True)
class DocumentHit:
    """A document (file) after grouping: the final top-k counts these."""

    doc_id: str
    path: str
    title: str
    rank: int
    score: float
    hits: tuple[Hit, ...]  # this document's chunks, best first
    page: int | None = None  # set when the result is one page of its document (fewer documents than k)

    @property
    def best(self) -> Hit:
        return self.hits[0]


@dataclass(frozen=True)
class SearchResult:
    query: str
    documents: tuple[DocumentHit, ...]
    hits: tuple[Hit, ...]  # every candidate in final order, for --explain
    rerank_status: RerankStatus
    rerank_reason: str = ""
    policy: str = "none"
    timings_ms: dict[str, float] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # what the pipeline changed about the request, e.g. a truncated query
    first_stage: str = "hybrid"  # the first stage that ran: hybrid, bm25, dense, or "auto: ..." (calibrated)


@dataclass(frozen=True)
class Citation:
    number: int
    chunk_id: str
    doc_id: str
    path: str
    title: str
    location: str
    text: str  # the cited passage (sentence or row)
    page: int | None = None
    line_start: int | None = None
    line_end: int | None = None
    heading: str | None = None  # the section's heading trail (Markdown, Word, HTML) or the code symbol

    @classmethod
    def of(cls, number: int, chunk: Chunk, text: str) -> Citation:
        """Citation `number`, of `text` (a sentence of `chunk`, or the passage shown to a model), where
        `chunk` stands."""
        return cls(
            number=number, chunk_id=chunk.chunk_id, doc_id=chunk.doc_id, path=chunk.path, title=chunk.title,
            location=chunk.location, text=text, page=chunk.page, line_start=chunk.line_start,
            line_end=chunk.line_end, heading=chunk.heading,
        )


@dataclass(frozen=True)
class Answer:
    question: str
    text: str
    citations: tuple[Citation, ...]
    generator: str  # which backend answered, e.g. "extractive"
    search: SearchResult | None = None
    # What a reader should know about this answer: "uncited" (an LLM answer citing no passage),
    # "unknown_citation" (it cited a number no passage has), "no_context", "interrupted" (a stream broke),
    # "abstained" (the documents do not answer it).
    flags: tuple[str, ...] = ()
    fallback_reason: str = ""  # set when the primary generator failed and a fallback answered instead
    # The documents do not support an answer (`funnel.generate.abstain`): the text says so and the citations
    # are the closest passages, not an answer.
    abstained: bool = False
    evidence: float | None = None  # the evidence score the abstention gate measured (None: not measured)
    # Beside a reader's own answer: the sentences the picker chose, verbatim with where they stand
    # (`funnel.generate.reader`). Shown under the answer as "From the page", never merged into its text.
    quote: tuple[Citation, ...] = ()
