"""Chunk hits -> documents (seed 000's chunk -> file de-duplication).

A document ranks where its best chunk ranks in the final order; the final k counts documents, and a
document's passages are its best chunks within the first stage's per-document cap. When the
window holds fewer than k documents (one or a few long PDFs), a result is a page instead: a manual's
best pages, each with its own chunks, rather than one result holding three chunks of the whole book.
Measured on the real-PDF question set (BENCHMARKS.md, issue 16): pages answered 24 of 49 questions,
documents 23, single passages 23.
"""

from __future__ import annotations

from funnel.engine_config import GroupingConfig
from funnel.types import DocumentHit, Hit


def group(
    hits: list[Hit], k: int, chunks_per_document: int | None = GroupingConfig.chunks_per_document
) -> list[DocumentHit]:
    """The top-k documents (or pages, when fewer than k documents are in the window), each with up to
    `chunks_per_document` of its hits, best first."""
    ordered = sorted(hits, key=lambda h: h.final_rank)
    # With k documents or more, a document's passages are its best chunks within the first stage's cap,
    # as before the window filled past it: a reranker that buries a table row under the same document's
    # prose cannot push the row out of the answer's context (seed 001).
    by_document = _units([h for h in ordered if not h.candidate.past_cap], lambda h: (h.chunk.doc_id, None))
    if len(by_document) >= k:
        units = by_document
    else:
        units = _units(ordered, lambda h: (h.chunk.doc_id, h.chunk.page))
    documents = []
    for rank, ((doc_id, page), unit_hits) in enumerate(list(units.items())[:k], start=1):
        best = unit_hits[0]
        documents.append(
            DocumentHit(
                doc_id=doc_id,
                path=best.chunk.path,
                title=best.chunk.title,
                rank=rank,
                score=best.final_score,
                hits=tuple(unit_hits[:chunks_per_document]),
                page=page,
            )
        )
    return documents


def _units(ordered: list[Hit], key) -> dict[tuple[str, int | None], list[Hit]]:
    units: dict[tuple[str, int | None], list[Hit]] = {}
    for hit in ordered:
        units.setdefault(key(hit), []).append(hit)
    return units
