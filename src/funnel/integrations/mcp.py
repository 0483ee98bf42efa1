"""`funnel mcp`: funnel as a Model Context Protocol server, so a desktop agent (Claude Desktop, an IDE) can
search your documents, ask them questions and triage an error, with citations it can show.

Built on the official SDK (`mcp` 2.x, `MCPServer`); stdio by default, streamable HTTP with `--http`. Tools:
`search`, `ask`, `get_document`, `list_collections`, `triage`; `search` and `ask` take `documents` (doc_ids
or paths as results show them) to keep to those. Every result is structured (a JSON schema per tool). A
`FunnelError` becomes a tool error (`isError`) carrying funnel's one-line message; anything else becomes the
SDK's generic tool error. Neither ends the server.

Collections: `default` is the configured index (`--index` / FUNNEL_INDEX); the collections `funnel serve`
keeps under `data_dir` are listed as `serve/NAME`. Their pipelines are built (and models loaded) on first
use, so the server starts at once and `tools/list` costs nothing. A serve collection is read from its index:
a document deleted in `funnel serve` may still be found until the server's worker has dropped its chunks.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import BaseModel, Field

import funnel
from funnel.apps.factory import build_pipeline
from funnel.apps.settings import Settings
from funnel.apps.state.incident_schema import ErrorReport, TriageResult
from funnel.config import request_bounds
from funnel.engine_config import GroupingConfig
from funnel.errors import ConfigError, FunnelError, NotFound
from funnel.index import location_label, open_store
from funnel.index.scope import document_filter
from funnel.rerank.policies import PolicyChoice
from funnel.integrations._core import document_metadata
from funnel.pipeline import Pipeline
from funnel.types import Chunk, DocumentHit, SearchResult

DEFAULT_COLLECTION = "default"
SERVE_PREFIX = "serve/"
SNIPPET_CHARS = 500
INSTRUCTIONS = (
    "funnel searches the user's own documents (hybrid dense + BM25 retrieval, then a cross-encoder "
    "reranker under a policy that never makes results worse). Use `search` to find documents, `ask` for an "
    "answer with numbered citations, `get_document` to read a cited document, `triage` for a stack trace "
    "from the configured code repository. Cite the path and location (page or lines) of what you use."
)

CollectionArg = Annotated[
    str | None, Field(description="a name from list_collections; omit for the configured index ('default')")
]
KArg = Annotated[  # the range the HTTP API's k has too: GroupingConfig.k's, with a request's ceiling
    int | None, Field(**request_bounds(GroupingConfig, "k"), description="documents to return (default: the "
                      "configured k)")
]
PolicyArg = Annotated[
    str | None, Field(description=f"{PolicyChoice.forms()} (default: as configured)")
]
DocumentsArg = Annotated[
    list[str] | None, Field(max_length=1000, description="only these documents: a doc_id, or a path as search "
                            "results show it (omit: the whole collection; an unknown one is an error)")
]


# --- what the tools return (each one's JSON schema is the tool's output schema) ----------------------------


class Location(BaseModel):
    """Where a passage sits in its document: `location` is "p.3" for a PDF page, "slide 3", "row 12-14" for
    a table's rows, "L10-24" for lines; `heading` is its section's heading trail (or code symbol), if any."""

    location: str
    heading: str | None = None
    page: int | None = None
    line_start: int | None = None
    line_end: int | None = None


class SearchHit(Location):
    """A document, located by its best passage, with that passage's rank and score at every stage."""

    rank: int
    path: str
    doc_id: str = Field(description="pass it to get_document to read the whole document")
    title: str
    score: float = Field(description="the final score of the document's best passage")
    chunk_id: str
    snippet: str
    bm25_rank: int | None = None
    dense_rank: int | None = None
    fused_rank: int
    rerank_score: float | None = Field(None, description="the reranker's score; null if it did not score it")
    rerank_rank: int | None = None
    guaranteed: bool = Field(False, description="kept by a guaranteed first-stage slot")


class RerankInfo(BaseModel):
    rerank_status: str = Field(description="ok | skipped | fallback (the reranker failed: first-stage order)")
    rerank_reason: str = ""
    policy: str = Field(description="the second-stage policy that ran, and why when calibration chose it")


class SearchOut(RerankInfo):
    collection: str
    query: str
    documents: list[SearchHit]
    notes: list[str] = Field(default_factory=list)


class CitationOut(Location):
    number: int = Field(description="the [n] the answer text uses")
    path: str
    doc_id: str
    chunk_id: str
    text: str = Field(description="the cited passage")


class AskOut(RerankInfo):
    collection: str
    question: str
    answer: str
    citations: list[CitationOut]
    answered_by: str = Field(description="the generator: extractive (no LLM), or the LLM's name")
    flags: list[str] = Field(default_factory=list)
    fallback_reason: str = ""
    abstained: bool = Field(False, description="true: the documents do not answer the question; the citations "
                                               "are the closest passages, not an answer")
    quote: list[CitationOut] = Field(default_factory=list, description=(
        "beside a reader model's answer: the sentences the extractive picker chose, verbatim"))


def _citation(c) -> CitationOut:
    return CitationOut(number=c.number, path=c.path, doc_id=c.doc_id, chunk_id=c.chunk_id, text=c.text,
                       location=c.location, heading=c.heading, page=c.page, line_start=c.line_start,
                       line_end=c.line_end)


class Passage(Location):
    ordinal: int
    chunk_id: str
    text: str


class DocumentOut(BaseModel):
    collection: str
    doc_id: str
    path: str
    title: str
    kind: str
    total_chunks: int
    chunks: list[Passage]
    next_offset: int | None = Field(description="offset of the next page of chunks; null at the end")


class CollectionInfo(BaseModel):
    name: str
    source: str = Field(description="index (the configured --index) or serve (a `funnel serve` collection)")
    location: str
    documents: int
    chunks: int
    embedder: str | None = None


class CollectionsOut(BaseModel):
    collections: list[CollectionInfo]


class TriageOut(TriageResult):
    incident_id: int | None = None


def _location(chunk: Chunk) -> dict:
    return {"location": chunk.location, "heading": chunk.heading, "page": chunk.page,
            "line_start": chunk.line_start, "line_end": chunk.line_end}


def _search_hit(doc: DocumentHit, result: SearchResult) -> SearchHit:
    text = " ".join(doc.best.chunk.text.split())
    snippet = text[:SNIPPET_CHARS] + ("…" if len(text) > SNIPPET_CHARS else "")
    return SearchHit.model_validate({**document_metadata(doc, result), "snippet": snippet})


@contextmanager
def _tool_errors() -> Iterator[None]:
    """funnel's own errors reach the agent as its one-line message (the SDK makes it an isError result)."""
    try:
        yield
    except FunnelError as e:
        raise ToolError(str(e)) from None


# --- collections and the tools ------------------------------------------------------------------------------


class Collections:
    """The indexes the tools read, each with a Pipeline built on first use (thread-safe: the SDK runs each
    tool call in a worker thread). Pipelines share one reranker, so its model loads once."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self._pipelines: dict[str, Pipeline] = {}
        self._lock = threading.Lock()

    def locations(self) -> dict[str, str]:
        from funnel.apps.state.home import NAME, EmbeddedHome  # here: only this tool reads serve's folders

        found = {DEFAULT_COLLECTION: self.settings.index}
        home = EmbeddedHome(Path(self.settings.serve.data_dir))  # funnel serve's folders (not its database)
        for name in sorted(n for n in home.names() if NAME.match(n)):
            found[SERVE_PREFIX + name] = str(home.root / name / "index")
        return found

    def resolve(self, name: str | None) -> tuple[str, str]:
        name = (name or "").strip() or DEFAULT_COLLECTION
        locations = self.locations()
        if name not in locations:
            raise NotFound(f"no collection {name[:80]!r}; known: {', '.join(locations)}")
        return name, locations[name]

    def pipeline(self, name: str | None) -> tuple[str, Pipeline]:
        name, location = self.resolve(name)
        with self._lock:
            if name not in self._pipelines:
                shared = {"reranker": next(iter(self._pipelines.values())).reranker} if self._pipelines else {}
                self._pipelines[name] = build_pipeline(self.settings.model_copy(update={"index": location}), **shared)
            return name, self._pipelines[name]


class FunnelTools:
    """The MCP tools over funnel. Plain methods, so each can be called (and tested) without the SDK."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.collections = Collections(settings)
        self._triage = None
        self._triage_lock = threading.Lock()

    def search(self, query: str, collection: CollectionArg = None, k: KArg = None,
               policy: PolicyArg = None, documents: DocumentsArg = None) -> SearchOut:
        """Find the documents that best match a query (hybrid first stage, then the reranker). Each result
        names its path, the location of its best passage (page or lines), its score, and the rerank status
        and policy of the whole search."""
        with _tool_errors():
            name, pipeline = self.collections.pipeline(collection)
            scope = document_filter(pipeline.store, documents or [], f"collection {name!r}")
            result = pipeline.search(query, k=k, policy=policy, filter=scope)
        return SearchOut(
            collection=name, query=result.query, documents=[_search_hit(d, result) for d in result.documents],
            rerank_status=result.rerank_status.value, rerank_reason=result.rerank_reason,
            policy=result.policy,
            notes=list(result.notes),
        )

    def ask(self, question: str, collection: CollectionArg = None, k: KArg = None,
            policy: PolicyArg = None, documents: DocumentsArg = None) -> AskOut:
        """Answer a question from the documents. The answer cites passages as [1], [2], ...; `citations`
        maps each number to its path, location (page, slide, rows or lines), heading and the cited text.
        When the documents do not answer it, `abstained` is true and the citations are the closest passages."""
        with _tool_errors():
            name, pipeline = self.collections.pipeline(collection)
            scope = document_filter(pipeline.store, documents or [], f"collection {name!r}")
            answer = pipeline.ask(question, k=k, policy=policy, filter=scope)
        search = answer.search
        return AskOut(
            collection=name, question=answer.question, answer=answer.text,
            citations=[_citation(c) for c in answer.citations], quote=[_citation(c) for c in answer.quote],
            answered_by=answer.generator, flags=list(answer.flags), fallback_reason=answer.fallback_reason,
            abstained=answer.abstained, rerank_status=search.rerank_status.value if search else "skipped",
            rerank_reason=search.rerank_reason if search else "", policy=search.policy if search else "none",
        )

    def get_document(self, doc_id: str, collection: CollectionArg = None,
                     offset: Annotated[int, Field(ge=0, description="first chunk to return")] = 0,
                     limit: Annotated[int, Field(ge=1, le=200, description="chunks to return")] = 40,
                     ) -> DocumentOut:
        """Read a document (a `doc_id` from search or ask) as its indexed passages, in order, each with its
        location; long documents come in pages of `limit` chunks (`next_offset`)."""
        with _tool_errors():
            name, location = self.collections.resolve(collection)
            chunks = sorted(open_store(location).get_chunks(doc_id), key=lambda c: c.ordinal)
            if not chunks:
                raise NotFound(f"no document {doc_id[:200]!r} in collection {name!r}; use a search's doc_id")
        page = chunks[offset: offset + limit]
        end = offset + len(page)
        first = chunks[0]
        return DocumentOut(
            collection=name, doc_id=doc_id, path=first.path, title=first.title, kind=first.kind,
            total_chunks=len(chunks), next_offset=end if end < len(chunks) else None,
            chunks=[Passage(**_location(c), ordinal=c.ordinal, chunk_id=c.chunk_id, text=c.text)
                    for c in page],
        )

    def list_collections(self) -> CollectionsOut:
        """The collections these tools can read: the configured index ('default') and the collections of
        `funnel serve` ('serve/NAME'), with their sizes. An index not built yet shows 0 chunks."""
        listed = []
        with _tool_errors():
            for name, location in self.collections.locations().items():
                info = open_store(location).info()
                listed.append(CollectionInfo(
                    name=name, source="index" if name == DEFAULT_COLLECTION else "serve",
                    location=location_label(location), documents=info.documents if info else 0,
                    chunks=info.chunks if info else 0, embedder=info.embedder if info else None,
                ))
        return CollectionsOut(collections=listed)

    def triage(self, stack_trace: str, message: str = "",
               service: Annotated[str, Field(max_length=200)] = "mcp",
               reindex: Annotated[bool, Field(description="re-index changed files first")] = False,
               ) -> TriageOut:
        """Rank the configured repository's files for an error (message and/or stack trace), with the
        frames found in each and, when an LLM is configured, an analysis. The incident is recorded; nothing
        is posted to Slack from here."""
        with _tool_errors():
            if not stack_trace.strip() and not message.strip():
                raise ConfigError("the trace is empty; give a stack_trace or a message")
            service_ = self._triage_service(reindex)
            report = ErrorReport(service=service, message=message[:10_000], stack_trace=stack_trace)
            outcome = service_.triage(report)
        return TriageOut(**outcome.result.model_dump(), incident_id=outcome.incident_id)

    def _triage_service(self, reindex: bool):
        """The triage service, built and its repository indexed (incrementally) on first use."""
        from funnel.apps.triage.build import build_triage, default_repo_index

        repo = self.settings.triage.repo
        if repo is None:
            raise ConfigError("triage needs a repository: start `funnel mcp --repo DIR` (or set FUNNEL_TRIAGE__REPO)")
        with self._triage_lock:
            fresh = self._triage is None
            if fresh:  # the repository's own index, never the documents' one
                settings = self.settings.model_copy(update={"index": str(default_repo_index(repo))})
                self._triage = build_triage(settings, slack=False)
            if fresh or reindex:
                self._triage.pipeline.ingest([repo])
            return self._triage


def build_server(settings: Settings) -> MCPServer:
    """The MCP server over `settings`. Cheap: nothing is loaded until a tool is called."""
    tools = FunnelTools(settings)
    server = MCPServer("funnel", version=funnel.__version__, instructions=INSTRUCTIONS, log_level="WARNING")
    read_only = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    for method in (tools.search, tools.ask, tools.get_document, tools.list_collections):
        server.add_tool(method, annotations=read_only)
    server.add_tool(tools.triage, annotations=ToolAnnotations(read_only_hint=False, open_world_hint=False))
    return server


def run(settings: Settings, http: bool = False, host: str = "127.0.0.1", port: int = 8765) -> None:
    """Serve over stdio (the SDK keeps stdout for the protocol and points stray writes at stderr), or
    over streamable HTTP at http://HOST:PORT/mcp."""
    server = build_server(settings)
    if http:
        server.run("streamable-http", host=host, port=port)
    else:
        server.run("stdio")
