"""The `documents` of a search or ask request: which of a collection's documents to search, each named by
its id or its file name as `GET /v1/collections/{name}/documents` lists them (`id`, `filename`; a watched
folder's documents: the absolute path, or the path inside the folder).

No names, or an empty list: the whole collection. A name the collection does not hold: 404 naming it (never
an empty answer). Documents not indexed yet (queued, ingesting) or failed are left out when others are
ready; when none of the chosen documents is ready: 409 saying why.
"""

from __future__ import annotations

from collections.abc import Sequence

from funnel.apps.state.documents import DocumentRecord, DocumentStatus
from funnel.errors import Conflict, NotFound
from funnel.index.base import Filter
from funnel.index.scope import unknown_documents


def document_scope(
    records: Sequence[DocumentRecord], names: Sequence[str] | None, collection: str
) -> Filter | None:
    wanted = [n for n in dict.fromkeys(n.strip() for n in names or ()) if n]
    if not wanted:
        return None
    by_id = {r.id: r for r in records}
    by_filename = {r.filename: r for r in records}
    chosen = [by_id.get(n) or by_filename.get(n) for n in wanted]
    missing = [n for n, r in zip(wanted, chosen, strict=True) if r is None]
    if missing:
        raise NotFound(unknown_documents(missing, f"collection {collection!r}") + " (see its documents list)")
    ready = [r for r in chosen if r.status is DocumentStatus.READY]
    if not ready:
        first = chosen[0]
        why = f"failed: {first.error}" if first.status is DocumentStatus.FAILED else first.status.value
        raise Conflict(f"document {first.filename!r} is not searchable yet ({why})" if len(chosen) == 1 else
                       f"none of the {len(chosen)} documents chosen is searchable yet ({first.filename!r}: {why})")
    return Filter(doc_ids=tuple(dict.fromkeys(r.id for r in ready)))
