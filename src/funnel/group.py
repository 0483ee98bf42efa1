"""Chunk hits -> documents (seed 000's chunk -> file de-duplication).

A document ranks where its best chunk ranks in the final order; the final k counts documents.
"""

from __future__ import annotations

from funnel.types import DocumentHit, Hit


def group(hits: list[Hit], k: int, chunks_per_document: int = 3) -> list[DocumentHit]:
    """The top-k documents, each with up to `chunks_per_document` of its hits, best first."""
    order: list[str] = []
    members: dict[str, list[Hit]] = {}
    for hit in sorted(hits, key=lambda h: h.final_rank):
        doc_id = hit.chunk.doc_id
        if doc_id not in members:
            order.append(doc_id)
            members[doc_id] = []
        members[doc_id].append(hit)
    documents = []
    for rank, doc_id in enumerate(order[:k], start=1):
        doc_hits = members[doc_id][:chunks_per_document]
        best = doc_hits[0]
        documents.append(
            DocumentHit(
                doc_id=doc_id,
                path=best.chunk.path,
                title=best.chunk.title,
                rank=rank,
                score=best.final_score,
                hits=tuple(doc_hits),
            )
        )
    return documents

