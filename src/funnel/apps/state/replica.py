"""Searches on a read replica (`search_database`): a collection's index is read from a streaming replica of
the service database, and everything else (the catalog, documents, jobs, conversations, metrics and every
write) stays on the primary.

A replica lags its primary by the replay delay, so a search there may miss what was committed a moment
ago: the result says so in a note when the replica's index version is behind the primary's. A replica that
cannot answer (down, no copy of the index yet, a query it refuses) is not an error for the user: the search
runs on the primary, with a note, and the replica is tried again after `RETRY_S`. A request's own error (an
empty query, another embedder's index) is raised as it is, and says nothing about the replica.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace

from funnel.errors import StoreError
from funnel.index.base import Store
from funnel.types import SearchResult

log = logging.getLogger("funnel.api")

# After a replica failed, searches go to the primary for this long before the replica is tried again (so a
# replica that hangs costs one connect timeout, not one per search).
RETRY_S = 30.0


class ReplicaReads:
    """One collection's index on the replica, and whether it is usable now."""

    def __init__(self, store: Store):
        self.store = store
        self._lock = threading.Lock()
        self._retry_at = 0.0

    def search(self, run, primary_version: int) -> tuple[SearchResult | None, str]:
        """`run(store)` on the replica's index: (its result with a lag note where due, "") or, when the
        replica cannot answer, (None, why) for the caller to search the primary."""
        with self._lock:
            if time.monotonic() < self._retry_at:
                return None, "the search replica failed recently"
        try:
            info = self.store.info()
            if info is None:
                return None, "the search replica has no copy of this index yet"
            result = run(self.store)
        except StoreError as e:  # the replica's failing; a request's own error (ConfigError) is the user's
            with self._lock:
                self._retry_at = time.monotonic() + RETRY_S
            log.warning("search replica %s failed, searching the primary for %g s: %s",
                        self.store, RETRY_S, e)
            return None, f"the search replica failed ({e})"
        behind = primary_version - info.version
        if behind > 0:
            note = (f"the search replica is {behind} index commit(s) behind the primary: documents made "
                    "searchable in the last moments may be missing")
            result = replace(result, notes=(*result.notes, note))
        return result, ""


def on_primary(result: SearchResult, why: str) -> SearchResult:
    """A primary's result, saying why the replica did not answer it."""
    return replace(result, notes=(*result.notes, f"{why}; answered from the primary"))
