"""Folders that stay indexed (`funnel ingest --watch`, `funnel serve --watch`).

A `FolderWatcher` waits for file system events (watchfiles) under the named files and folders. After a burst
of events settles it runs one sync: the caller's ordinary incremental ingest of the same paths, so every
change lands in one store transaction (unchanged files skipped by hash, removed files deleted) and a reader
or a Ctrl-C never sees half of one. There is no second write path.

- Bursts: events are collected until QUIET_MS pass without one, or for DEBOUNCE_MS at most; 10,000 events
  in a burst are one sync (a burst that lasts longer is a few).
- Editors: a save by write-temp-then-rename (vim, VS Code, JetBrains) is seen as the target's change; the
  temp file's own events are dropped, as are those of files the walk would skip anyway (.gitignore'd,
  dependency and build folders, binaries) and of the index itself when it lies inside a watched folder, so
  an ingest's own writes never start another.
- A watched folder that disappears keeps its documents (an unmounted disk is not a deletion); it is
  waited for, and synced when it comes back. A file that cannot be read keeps its last indexed version.
- A failed sync (the store busy, a backend down) is reported and tried again after RETRY_S; the index
  keeps the last sync that completed.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from funnel.errors import FunnelError
from funnel.indexer import IngestReport
from funnel.ingest.loaders import by_name
from funnel.ingest.ignore import IgnoreRules
from funnel.ingest.walk import BINARY_EXTENSIONS

log = logging.getLogger("funnel.watch")

DEBOUNCE_MS = 1600  # a burst is synced after at most this long
QUIET_MS = 150  # ... or once this long passed without an event
CHECK_MS = 1000  # how often the watched folders are checked for having been removed or replaced
RETRY_S = 5.0  # a failed sync is tried again after this long, changes or not

# Names editors and downloaders give the files they write before renaming them into place.
EDITOR_TEMP = re.compile(
    r"(^\.#|^#.*#$|~$|\.sw[a-p]$|\.sw[a-p]x$|^4913$|\.tmp$|\.temp$|\.bak$|\.orig$|\.crdownload$|\.part$"
    r"|\.kate-swp$|___jb_(tmp|old)___$|^\.~lock\.)"
)


@dataclass
class WatchStatus:
    """Where a watched folder stands, for /health and the collections list."""

    folder: str
    watching: bool = False
    syncs: int = 0
    last_sync: str | None = None  # ISO 8601, UTC: when the last sync completed
    last_error: str | None = None  # the last sync's failure; None once one succeeds again
    last_change: str | None = None  # "2 added, 1 updated, 0 removed" of the last sync that changed anything

    def to_json(self) -> dict:
        return dict(self.__dict__)


def describe(report: IngestReport) -> str:
    """A sync in a line, with the files no loader takes by extension (`IngestReport.not_documents`)."""
    counts = (f"{report.added} added, {report.updated} updated, {report.removed} removed, "
              f"{report.unchanged} unchanged, {len(report.problems)} skipped")
    return f"{counts}; {report.not_documents()}" if report.unsupported else counts


class ChangeFilter:
    """Which changed paths can change the index: under a watched folder (or a named file itself), not an
    editor's temp file, not in the index, not something the walk skips."""

    def __init__(self, paths: Iterable[Path], ignore: Iterable[Path] = ()):
        self.folders = [p for p in paths if p.is_dir()]
        self.files = {p for p in paths if not p.is_dir()}
        self.ignore = list(ignore)

    def relevant(self, changed: Iterable[str]) -> bool:
        rules: dict[Path, IgnoreRules] = {}  # per batch: a .gitignore may have changed since
        return any(self._relevant(Path(c), rules) for c in changed)

    def _relevant(self, path: Path, rules: dict[Path, IgnoreRules]) -> bool:
        if any(path.is_relative_to(i) for i in self.ignore) or EDITOR_TEMP.search(path.name):
            return False
        if path in self.files:
            return True
        root = next((f for f in self.folders if path.is_relative_to(f)), None)
        named = by_name(path)  # the loaders' table; the content is not read for an event
        if root is None or (named is None and path.suffix.lower() in BINARY_EXTENSIONS):
            return False
        if path.suffix and path.name != ".gitignore" and named is None and path.is_file():
            return False  # a lock file, a .log: never indexed (a gone path may have been a folder: kept)
        if root not in rules:
            rules[root] = IgnoreRules(root)
        try:
            return not rules[root].ignored(path)
        except OSError:
            return True  # cannot tell: a sync costs little when nothing changed


class FolderWatcher:
    """Runs `sync` once when started and again after every relevant burst of changes, until `stop` is set
    (or a KeyboardInterrupt: in the main thread, a Ctrl-C stops the wait at once). `sync` does the ingest
    and raises to report a failure; `told` hears each failure."""

    def __init__(
        self, paths: list[Path], sync: Callable[[], None], ignore: Iterable[Path] = (),
        stop: threading.Event | None = None, told: Callable[[Exception], None] | None = None,
        debounce_ms: int = DEBOUNCE_MS, quiet_ms: int = QUIET_MS,
    ):
        self.paths = [Path(os.path.abspath(p)) for p in paths]
        self.sync = sync
        self.filter = ChangeFilter(self.paths, [Path(os.path.abspath(i)) for i in ignore])
        self.stop = stop or threading.Event()
        self.told = told or (lambda e: log.warning("sync failed: %s", e))
        self.debounce_ms, self.quiet_ms = debounce_ms, quiet_ms

    def targets(self) -> tuple[tuple[str, int, int], ...]:
        """The folders to watch (named folders, and a named file's folder: an editor replaces the file, and
        a watch on the file itself would end with it) that exist, with their identity: a folder removed
        and made again is another inode, and its watch must start again."""
        folders = sorted({p if p in self.filter.folders else p.parent for p in self.paths})
        found = []
        for folder in folders:
            try:
                st = folder.stat()
            except OSError:
                continue
            found.append((str(folder), st.st_dev, st.st_ino))
        return tuple(found)

    def run(self) -> None:
        import watchfiles  # here: `funnel ingest` without --watch need not load it

        while not self.stop.is_set():
            targets = self.targets()
            if not targets:  # every watched folder is gone: wait for one to come back
                self.stop.wait(CHECK_MS / 1000)
                continue
            # The first batch (at most CHECK_MS away) syncs: it catches what changed while no watch ran.
            due = time.monotonic()
            for changes in watchfiles.watch(
                *[t[0] for t in targets], watch_filter=None, debounce=self.debounce_ms, step=self.quiet_ms,
                stop_event=self.stop, rust_timeout=CHECK_MS, yield_on_timeout=True,
                ignore_permission_denied=True,
            ):
                if self.targets() != targets:  # removed or replaced: sync what is left, then watch again
                    self._sync()
                    break
                if not due and self.filter.relevant(path for _, path in changes):
                    due = time.monotonic()  # while a failed sync waits for its retry, the retry comes first
                if due and time.monotonic() >= due:
                    due = 0.0 if self._sync() else time.monotonic() + RETRY_S
            else:
                return  # stop was set

    def _sync(self) -> bool:
        try:
            self.sync()
        except (FunnelError, OSError) as e:
            self.told(e)
            return False
        return True


def folder_name(folder: Path) -> str:
    """A collection name for a folder: its name in lower case, other characters as '-'."""
    name = re.sub(r"[^a-z0-9_-]+", "-", folder.name.lower()).strip("-_")[:64]
    return name or "watched"
