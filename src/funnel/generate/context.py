"""What an answer is built from: the search's documents, with a lead-in's list brought along.

A chunk may end on a lead-in ("npm gets its config settings from the following sources, sorted by
priority:") while the list it announces starts the next chunk. Neither the extractive answer nor an LLM
can give the list from the lead-in alone, so the next chunk of that document joins the context, right
after the lead-in's chunk. Both generators get the same context (`Pipeline.ask` and `funnel eval`).
"""

from __future__ import annotations

from dataclasses import replace

from funnel.index.base import Store
from funnel.types import Chunk, Hit, SearchResult


def ends_on_lead_in(chunk: Chunk) -> bool:
    lines = [line.strip() for line in chunk.text.splitlines() if line.strip()]
    return bool(lines) and lines[-1].endswith(":")


def with_continuations(result: SearchResult, store: Store) -> SearchResult:
    """`result` with, after each hit whose chunk ends on a lead-in, the next chunk of its document (when
    the document has one and the result does not hold it already)."""
    if not any(ends_on_lead_in(h.chunk) for d in result.documents for h in d.hits):
        return result
    documents = []
    for document in result.documents:
        held = {h.chunk.ordinal for h in document.hits}
        hits: list[Hit] = []
        chunks: list[Chunk] | None = None
        for hit in document.hits:
            hits.append(hit)
            if not ends_on_lead_in(hit.chunk) or hit.chunk.ordinal + 1 in held:
                continue
            if chunks is None:
                chunks = store.get_chunks(document.doc_id)
            following = next((c for c in chunks if c.ordinal == hit.chunk.ordinal + 1), None)
            if following is not None:
                held.add(following.ordinal)
                hits.append(replace(hit, candidate=replace(hit.candidate, chunk=following), guaranteed=False))
        documents.append(replace(document, hits=tuple(hits)) if len(hits) > len(document.hits) else document)
    return replace(result, documents=tuple(documents))

