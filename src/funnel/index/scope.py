"""Asking one document, or a chosen set: the names a user gives ("docs/manual.pdf", a document id) turned
into the store's `Filter(doc_ids=...)`, or a `NotFound` that names every one the index does not hold.

A name is taken as, in this order: a document id as stored; a file's path, resolved (the CLI's documents
are stored under their absolute paths); the path a search result shows (the chunks' `path`: relative to
the folder ingested, or an upload's file name).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from funnel.errors import NotFound
from funnel.index.base import Filter, Store

MAX_DOCUMENTS = 1000


def document_filter(store: Store, names: Sequence[str], where: str = "the index") -> Filter | None:
    """The filter to the documents `names` name, None for no names (the whole index)."""
    wanted = [n for n in dict.fromkeys(n.strip() for n in names) if n]
    if not wanted:
        return None
    if len(wanted) > MAX_DOCUMENTS:
        raise NotFound(f"at most {MAX_DOCUMENTS} documents can be chosen, not {len(wanted)}")
    ids = set(store.document_hashes()) if store.info() is not None else set()
    by_path: dict[str, set[str]] | None = None
    found: list[str] = []
    missing: list[str] = []
    for name in wanted:
        resolved = _resolved(name)
        if name in ids:
            found.append(name)
        elif resolved in ids:
            found.append(resolved)
        else:
            if by_path is None:  # read once, and only when a name is neither an id nor a file
                by_path = {}
                for entry in store.outline():
                    by_path.setdefault(entry.path, set()).add(entry.doc_id)
            if name in by_path:
                found.extend(sorted(by_path[name]))
            else:
                missing.append(name)
    if missing:
        raise NotFound(unknown_documents(missing, where))
    return Filter(doc_ids=tuple(dict.fromkeys(found)))


def unknown_documents(missing: Sequence[str], where: str) -> str:
    shown = ", ".join(repr(m[:200]) for m in missing[:5])
    more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
    return f"no document {shown}{more} in {where}"


def _resolved(name: str) -> str | None:
    try:
        return Path(name).expanduser().resolve().as_posix()
    except (OSError, RuntimeError, ValueError):  # a name no file system would take: not a path then
        return None
