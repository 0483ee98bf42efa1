"""The reliability suite keeps count: every test adds what it tried (kills, fuzzed inputs, upstream faults,
requests) and how many of those went wrong, via the `tally` fixture.

Two sizes, one code path:
- `make test` runs the short version (a few minutes in all);
- `make soak` sets FUNNEL_SOAK=1 for the full one (200 kills per store, a 10-minute soak, ...).

With FUNNEL_RELIABILITY_OUT set to a file, the session writes the counts there as JSON;
`bench/reliability_report.py` prints RELIABILITY.md's table from that file.
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import pytest

from tally import _TALLY, SOAK, Tally


@pytest.fixture
def tally() -> Iterator[Tally]:
    yield _TALLY


def pytest_sessionfinish(session, exitstatus) -> None:
    out = os.environ.get("FUNNEL_RELIABILITY_OUT")
    if not out or not _TALLY.rows():
        return
    record = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.node()} · {platform.machine()} · {os.cpu_count()} cores · Python "
                   f"{platform.python_version()}",
        "mode": "soak" if SOAK else "short",
        "exit_status": int(exitstatus),
        "rows": [asdict(r) for r in _TALLY.rows()],
    }
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(record, indent=1) + "\n")
