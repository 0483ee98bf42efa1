"""The small copy of the index that generated queries are measured on: what competes for them in the real
index (each query's BM25 and dense top-n, as the real first stage retrieves them), plus the chunks that answer
them with the query taken out (so neither retriever wins by matching it verbatim)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from funnel.calibrate.queries import PseudoQuery
from funnel.index.base import Store
from funnel.types import Chunk

if TYPE_CHECKING:
    from funnel.search import Searcher, SearchRequest


def small_copy(
    pipeline: Searcher, requests: list[SearchRequest], queries: list[PseudoQuery], sources: dict[str, Chunk],
    path: str,
) -> Store:
    """An embedded index at `path` of each request's BM25 and dense lists from `pipeline`'s index and the
    chunks that answer its query, edited. Stored vectors are reused; only the edited chunks are embedded."""
    from funnel.index.lance import LanceStore  # the copy is always embedded, whatever the index is

    store, embedder = pipeline.store, pipeline.embedder
    chunks: dict[str, Chunk] = {}
    for request, query in zip(requests, queries):
        lexical, dense = pipeline.retrieve(request)
        chunks.update((s.chunk.chunk_id, s.chunk) for s in lexical + dense)
        chunks.update((cid, sources[cid]) for cid in query.relevant if cid in sources)
    edits = {e.chunk_id: e for q in queries for e in q.edits}
    plain = [cid for cid in chunks if cid not in edits]
    vectors = [np.asarray(embedder.embed([e.text for e in edits.values()]))]
    if plain:
        vectors.insert(0, store.vectors(plain))
    copy = LanceStore(path)
    with copy.transaction(embedder.name, embedder.dim, store.info().analyzer) as tx:
        tx.add([chunks[cid] for cid in plain] + list(edits.values()), np.concatenate(vectors))
    return copy
