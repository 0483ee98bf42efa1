"""Counts for the reliability suite (see conftest.py): what was tried, and how many of those went wrong."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field


SOAK = os.environ.get("FUNNEL_SOAK") == "1"


def scale(short: int, soak: int) -> int:
    """How many times to try something: `short` inside `make test`, `soak` under `make soak`."""
    return soak if SOAK else short


@dataclass
class Row:
    suite: str  # "crash", "fuzz", "upstream", "soak"
    target: str  # what was hit: "ingest (lancedb) kill -9", "stacktrace parser", "reranker: hang", ...
    tried: int = 0  # kills, inputs, faults or requests
    failed: int = 0  # how many of those broke a promise (a test fails when this is not 0)
    detail: dict = field(default_factory=dict)  # extra figures: seconds, rss_start_mb, ...


class Tally:
    def __init__(self) -> None:
        self._rows: dict[tuple[str, str], Row] = {}
        self._lock = threading.Lock()

    def add(self, suite: str, target: str, tried: int = 1, failed: int = 0, **detail) -> Row:
        """Count `tried` attempts at `target` (and `failed` of them that went wrong); returns the row."""
        with self._lock:
            row = self._rows.setdefault((suite, target), Row(suite, target))
            row.tried += tried
            row.failed += failed
            row.detail.update(detail)
            return row

    def rows(self) -> list[Row]:
        return list(self._rows.values())


_TALLY = Tally()
