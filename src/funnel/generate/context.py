"""What an answer is built from: the search's documents, with a lead-in's list brought along.

A chunk may end on a lead-in ("npm gets its config settings from the following sources, sorted by
priority:") while the list it announces starts the next chunk. Neither the extractive answer nor an LLM
can give the list from the lead-in alone, so the next chunk of that document joins the context, right
after the lead-in's chunk. When what follows is a run of sub-sections (npm's config.md: "#### Command
Line Flags", "#### Environment Variables", ...), the list *is* their headings: the context gets them, in
order, as a list. Both generators get the same context (`Pipeline.ask` and `funnel eval`).
"""

from __future__ import annotations

from dataclasses import replace

from funnel.index.base import Store
from funnel.types import Chunk, Hit, SearchResult


def ends_on_lead_in(chunk: Chunk) -> bool:
    lines = [line.strip() for line in chunk.text.splitlines() if line.strip()]
    return bool(lines) and lines[-1].endswith(":")


def with_continuations(result: SearchResult, store: Store) -> SearchResult:
    """`result` with each lead-in's list: a hit whose chunk ends on a lead-in is followed by the next chunk
    of its document (when the result does not hold it already), or, when the list is a run of
    sub-sections, carries their headings itself."""
    if not any(ends_on_lead_in(h.chunk) for d in result.documents for h in d.hits):
        return result
    documents = []
    for document in result.documents:
        held = {h.chunk.ordinal for h in document.hits}
        hits: list[Hit] = []
        chunks: list[Chunk] | None = None
        for hit in document.hits:
            if not ends_on_lead_in(hit.chunk):
                hits.append(hit)
                continue
            if chunks is None:
                chunks = store.get_chunks(document.doc_id)
            following, outline = _continuation(hit.chunk, chunks)
            if outline:
                lead_in = replace(hit.chunk, text=f"{hit.chunk.text}\n{outline}")
                hits.append(replace(hit, candidate=replace(hit.candidate, chunk=lead_in)))
                continue
            hits.append(hit)
            if following is not None and following.ordinal not in held:
                held.add(following.ordinal)
                hits.append(replace(hit, candidate=replace(hit.candidate, chunk=following), guaranteed=False))
        documents.append(replace(document, hits=tuple(hits)))
    return replace(result, documents=tuple(documents))


def _continuation(chunk: Chunk, chunks: list[Chunk]) -> tuple[Chunk | None, str]:
    """What carries the list `chunk`'s lead-in announces: the next chunk, or, when the next chunks are
    sub-sections of its section, their headings as a list ("- Command Line Flags\n- ...")."""
    after = sorted((c for c in chunks if c.ordinal > chunk.ordinal), key=lambda c: c.ordinal)
    if not after or after[0].ordinal != chunk.ordinal + 1:
        return None, ""
    prefix = f"{chunk.heading} > " if chunk.heading else None
    if prefix is None or not (after[0].heading or "").startswith(prefix):
        return after[0], ""
    names: list[str] = []
    for c in after:
        if not (c.heading or "").startswith(prefix):
            break
        name = c.heading[len(prefix):].split(" > ")[0]
        if name not in names:
            names.append(name)
    return None, "\n".join(f"- {name}" for name in names)
