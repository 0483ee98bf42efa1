"""The service's collections (each one a `Collection`: funnel.apps.api.collection) in its `Home`: folders
under `data_dir`, or the service database (`funnel.apps.state.home`), and the workers that run their jobs.

Deleting a collection removes it from the catalog at once (every process answers 404 from then on), cancels
its jobs, and removes its data in the background once its running job has stopped.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

from funnel.apps.api.calibration import calibration_summary
from funnel.apps.api.collection import (
    CALIBRATE, CHANGES, DROP, DROP_WAIT_S, INGEST, SYNC, Collection, Services, one_line,
)
from funnel.apps.api.watched import WatchedCollection
from funnel.apps.state.home import NAME, Home, check_name, open_home
from funnel.apps.state.jobs import LEASE_S, EmbeddedJobs, Job, Jobs
from funnel.apps.state.jobs_workers import Lease, Permanent, Queue, Workers
from funnel.apps.state.jobs_pg import open_jobs
from funnel.embed.base import Embedder
from funnel.errors import ConfigError, Conflict, NotFound

__all__ = [
    "Collection", "LazyEmbedder", "Library", "Services", "calibration_summary", "check_name", "one_line",
]

DEFAULT_COLLECTION = "default"
KINDS = (INGEST, DROP, CALIBRATE, SYNC)
log = logging.getLogger("funnel.api")


class LazyEmbedder:
    """The server's embedder, loaded on first use: building the packaged model can take a while, and the
    server should answer /health (and uploads) before anyone needs a vector."""

    def __init__(self, load: Callable[[], Embedder]):
        self._load = load
        self._embedder: Embedder | None = None
        self._lock = threading.Lock()

    def __getattr__(self, name: str):
        if self._embedder is None:
            with self._lock:
                if self._embedder is None:
                    self._embedder = self._load()
        return getattr(self._embedder, name)


class Library:
    """Every collection in `home`. Nothing is written until a collection is used. `workers` threads run the
    collections' jobs (0: another process's `funnel worker` does)."""

    def __init__(self, home: Home, services: Services, jobs: Jobs | None = None, workers: int = 2,
                 lease_s: float = LEASE_S):
        self.home = home
        self.services = services
        self.jobs = jobs if jobs is not None else EmbeddedJobs()
        self.workers = Workers(self.jobs, dict.fromkeys(KINDS, self._run),
                               f"{socket.gethostname()}-{os.getpid()}", threads=workers, lease_s=lease_s)
        self.queue = Queue(self.jobs, self.workers.wake, self.workers.stop_running)
        self._open: dict[str, Collection] = {}
        self._deleting: dict[str, threading.Thread] = {}  # collections whose data is being removed
        self._lock = threading.Lock()
        if workers:
            self.workers.start()

    def handle(self, kind: str, handler) -> None:
        """Also run jobs of `kind` on this process's workers (`handler(job, lease)`), e.g. triage's."""
        self.workers.handlers[kind] = handler

    def names(self) -> list[str]:
        return sorted({n for n in self.home.names() if NAME.match(n)} | {DEFAULT_COLLECTION})

    def get(self, name: str) -> Collection:
        """The named collection; `default` is created on first use, any other must exist."""
        check_name(name)
        if name == DEFAULT_COLLECTION:
            self._settled(name)  # it is created again: not in the data being removed (others 404 meanwhile)
        with self._lock:
            if name in self._open and (not self.home.shared or self.home.marker(name) is not None):
                return self._open[name]
            self._open.pop(name, None)  # deleted by another process
            marker = self.home.marker(name)
            if marker is None:
                if name != DEFAULT_COLLECTION:
                    raise NotFound(f"no collection {name!r}")
                self.home.write_marker(name)
                marker = {}
            collection = self._open[name] = self._opened(name, marker)
            return collection

    def watch(self, name: str, folder: Path) -> Collection:
        """The collection that mirrors `folder` (`funnel serve --watch`), made on first use."""
        self.check_watch(name, folder)
        with self._lock:
            if name in self._open:
                return self._open[name]
            marker = self.home.marker(name)
            if marker is None or marker.get("watch") is None:
                self.home.write_marker(name, watch=folder)  # new, or an empty collection taken over
            collection = self._open[name] = self._opened(name, self.home.marker(name) or {})
            return collection

    def check_watch(self, name: str, folder: Path) -> None:
        """ConfigError when `name` is taken by uploads or by another folder's collection: the two would mix
        in one index. Reads only (the server checks before it starts)."""
        marker = self.home.marker(check_name(name))
        if marker is None:
            return
        watched = marker.get("watch")
        if watched is None and self.home.place(name).registry.list():
            raise ConfigError(f"collection {name!r} holds uploaded documents; watch {folder} as "
                              "another collection (--watch-collection NAME)")
        if watched is not None and Path(watched) != folder:
            raise ConfigError(f"collection {name!r} mirrors {watched}; watch {folder} as another "
                              "collection (--watch-collection NAME), or delete that one first")

    def _opened(self, name: str, marker: dict) -> Collection:
        folder = marker.get("watch")
        if folder is None:
            return Collection(name, self.home.place(name), self.services, self.queue)
        return WatchedCollection(name, self.home.place(name), self.services, self.queue, Path(folder))

    def _run(self, job: Job, lease: Lease) -> None:
        """A worker's job, on the collection it names (opened here if this process has not yet)."""
        try:
            collection = self.get(job.lane)
        except NotFound:
            raise Permanent(f"collection {job.lane!r} is gone") from None
        collection.run(job, lease)

    def calibrations(self) -> dict[str, dict]:
        """Each existing collection's second-stage choice (`calibration_summary`). Opens nothing and
        creates nothing: /health must not write to the data directory."""
        return {
            name: calibration_summary(self.home.index_only(name), self.services.reranker)
            for name in self.names() if self.home.marker(name) is not None
        }

    def create(self, name: str, before: Callable[[str], None] | None = None) -> Collection:
        """A new, empty collection. `before(name)` runs once the name is known to be free and before the
        collection exists: the API takes the name off old keys there (`KeyVerifier.unbind`); if it fails,
        nothing is made."""
        check_name(name)
        self._settled(name)
        with self._lock:
            if self.home.marker(name) is not None:
                raise Conflict(f"collection {name!r} already exists")
            if before is not None:
                before(name)
            self.home.write_marker(name)
            collection = self._open[name] = Collection(name, self.home.place(name), self.services, self.queue)
            return collection

    def delete(self, name: str) -> None:
        """Gone at once for every request; its jobs are cancelled and its data removed in the background
        once its running job has stopped (within a page or an embedded slice)."""
        collection = self.get(name)  # NotFound for an unknown one
        collection.check_deletable()
        with self._lock:
            if self._open.get(name) is not collection:
                raise NotFound(f"no collection {name!r}")  # deleted by a request racing this one
            del self._open[name]
            prefix = getattr(self.home, "prefix_of", lambda _: None)(name)
            self.home.remove_marker(name)
            collection.close()
            cancelled = self.jobs.cancel_lane(name)
            self.workers.stop_running(lane=name)
            remover = threading.Thread(target=self._remove, args=(name, prefix), name=f"funnel-delete-{name}")
            self._deleting[name] = remover
            remover.start()
        remover.join(DROP_WAIT_S if cancelled else DROP_WAIT_S * 5)

    def _remove(self, name: str, prefix: str | None) -> None:
        try:
            deadline = time.monotonic() + 60
            while self.jobs.busy(name) and time.monotonic() < deadline:  # the cancelled job rolls back
                time.sleep(0.05)
            if prefix is None:
                self.home.destroy(name)
            else:
                self.home.destroy(name, prefix)
        except Exception:
            log.warning("removing collection %s's data failed", name, exc_info=True)
        finally:
            with self._lock:
                self._deleting.pop(name, None)

    def _settled(self, name: str) -> None:
        """Wait for a deletion of `name` still removing its data, so a new one never shares it."""
        while True:
            with self._lock:
                remover = self._deleting.get(name)
            if remover is None:
                return
            remover.join()

    def pending(self) -> int:
        with self._lock:
            names = list(self._open)
        return sum(self.jobs.busy(name, CHANGES) for name in names)

    def close(self) -> None:
        """Stop the workers (a running job is cancelled and queued again) and close every collection."""
        self.workers.close()
        with self._lock:
            collections, self._open = list(self._open.values()), {}
            removers = list(self._deleting.values())
        for collection in collections:
            collection.close()
        for remover in removers:
            remover.join()
        self.home.close()


def open_library(settings, services: Services, workers: int | None = None, db=None) -> Library:
    """The service's collections where `settings` keep them: the service database (`db`, built from
    `[database] url` when not given), shared by every process, or folders under `[serve] data_dir`.
    `workers`: job threads (default: the setting)."""
    threads = settings.serve.job_threads if workers is None else workers
    if settings.database.url is None and settings.database.search_url is not None:
        raise ConfigError("search_database is a read replica of the service database: set database "
                          "(--database or FUNNEL_DATABASE__URL) too")
    if settings.database.url is None:
        db = None
        threads = max(threads, 1)  # an in-process queue has no other worker: job_threads 0 would stall it
    else:
        db = db if db is not None else open_database(settings)
    replica = settings.section("database").search_url
    home = open_home(db, settings.serve.data_dir, replica)
    return Library(home, services, open_jobs(db), workers=threads, lease_s=settings.serve.job_lease_s)


def open_database(settings):
    """The service database `settings.database.url` names (a pool that connects on first use), or None."""
    if settings.database.url is None:
        return None
    from funnel.apps.state.db import Database

    return Database(settings.database.url.get_secret_value())
