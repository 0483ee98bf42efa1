"""Collections under the data root (each one a `Collection`: funnel.apps.api.collection).

    DATA_DIR/collections/NAME/collection.json   marker (name, created_at)
                             /documents.json    the registry: every upload and its status
                             /uploads/          the original files
                             /index/            the LanceStore

Deleting a collection cancels its jobs (as deleting a document does) and removes its folder once the worker
has stopped.
"""

from __future__ import annotations

import json
import re
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

from funnel import index
from funnel.apps.api.collection import DROP_WAIT_S, Collection, Services, calibration_summary, one_line
from funnel.apps.api.errors import Conflict
from funnel.apps.api.registry import DocumentRegistry, utc_now
from funnel.embed.base import Embedder
from funnel.errors import ConfigError, NotFound, StoreError

__all__ = ["Collection", "LazyEmbedder", "Library", "Services", "calibration_summary", "check_name", "one_line"]

NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
DEFAULT_COLLECTION = "default"
MARKER = "collection.json"


def check_name(name: str) -> str:
    if not NAME.match(name):
        raise ConfigError(
            f"invalid collection name {name[:80]!r}: use 1-64 lower-case letters, digits, '_' or '-', "
            "starting with a letter or digit"
        )
    return name



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
    """Every collection under `data_dir`. Nothing touches the disk until a collection is used."""

    def __init__(self, data_dir: Path, services: Services):
        self.root = Path(data_dir) / "collections"
        self.services = services
        self._open: dict[str, Collection] = {}
        self._deleting: dict[str, threading.Thread] = {}  # collections whose folder is being removed
        self._lock = threading.Lock()

    def names(self) -> list[str]:
        try:
            found = {p.name for p in self.root.iterdir() if NAME.match(p.name) and (p / MARKER).is_file()}
        except FileNotFoundError:
            found = set()
        return sorted(found | {DEFAULT_COLLECTION})

    def get(self, name: str) -> Collection:
        """The named collection; `default` is created on first use, any other must exist."""
        check_name(name)
        if name == DEFAULT_COLLECTION:
            self._settled(name)  # it is created again: not in the folder being removed (others 404 meanwhile)
        with self._lock:
            if name in self._open:
                return self._open[name]
            root = self.root / name
            if not (root / MARKER).is_file():
                if name != DEFAULT_COLLECTION:
                    raise NotFound(f"no collection {name!r}")
                self._write_marker(root, name)
            collection = self._open[name] = self._opened(name, root)
            return collection

    def watch(self, name: str, folder: Path) -> Collection:
        """The collection that mirrors `folder` (`funnel serve --watch`), made on first use."""
        self.check_watch(name, folder)
        with self._lock:
            root = self.root / name
            if name in self._open:
                return self._open[name]
            if not (root / MARKER).is_file() or self._marker(root).get("watch") is None:
                self._write_marker(root, name, watch=folder)  # new, or an empty collection taken over
            collection = self._open[name] = self._opened(name, root)
            return collection

    def check_watch(self, name: str, folder: Path) -> None:
        """ConfigError when `name` is taken by uploads or by another folder's collection: the two would mix
        in one index. Reads only (the server checks before it starts)."""
        root = self.root / check_name(name)
        if not (root / MARKER).is_file():
            return
        watched = self._marker(root).get("watch")
        if watched is None and DocumentRegistry(root / "documents.json").list():
            raise ConfigError(f"collection {name!r} holds uploaded documents; watch {folder} as "
                              "another collection (--watch-collection NAME)")
        if watched is not None and Path(watched) != folder:
            raise ConfigError(f"collection {name!r} mirrors {watched}; watch {folder} as another "
                              "collection (--watch-collection NAME), or delete that one first")

    def _opened(self, name: str, root: Path) -> Collection:
        folder = self._marker(root).get("watch")
        if folder is None:
            return Collection(name, root, self.services)
        from funnel.apps.api.watched import WatchedCollection  # a subclass: imported here, not in a cycle

        return WatchedCollection(name, root, self.services, Path(folder))

    @staticmethod
    def _marker(root: Path) -> dict:
        try:
            return json.loads((root / MARKER).read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise StoreError(f"{root / MARKER} is unreadable ({e})") from e

    def calibrations(self) -> dict[str, dict]:
        """Each existing collection's second-stage choice (`calibration_summary`). Opens nothing and
        creates nothing: /health must not write to the data directory."""
        return {
            name: calibration_summary(index.open(self.root / name / "index"), self.services.reranker)
            for name in self.names() if (self.root / name / MARKER).is_file()
        }

    def create(self, name: str) -> Collection:
        check_name(name)
        self._settled(name)
        with self._lock:
            root = self.root / name
            if name in self._open or (root / MARKER).is_file():
                raise Conflict(f"collection {name!r} already exists")
            self._write_marker(root, name)
            collection = self._open[name] = Collection(name, root, self.services)
            return collection

    def delete(self, name: str) -> None:
        """Gone at once for every request; its running ingest is cancelled and its folder removed in the
        background once the worker has stopped (within a page or an embedded slice)."""
        collection = self.get(name)  # NotFound for an unknown one
        collection.check_deletable()
        with self._lock:
            if self._open.get(name) is not collection:
                raise NotFound(f"no collection {name!r}")  # deleted by a request racing this one
            del self._open[name]
            (collection.root / MARKER).unlink(missing_ok=True)
            collection.close(wait=False)
            remover = threading.Thread(
                target=self._remove, args=(name, collection), name=f"funnel-delete-{name}"
            )
            self._deleting[name] = remover
            remover.start()
        remover.join(DROP_WAIT_S)  # an idle worker stops at once: then the folder is gone when this returns

    def _remove(self, name: str, collection: Collection) -> None:
        try:
            collection.close()  # waits for the cancelled job to roll back
            shutil.rmtree(collection.root, ignore_errors=True)
        finally:
            with self._lock:
                self._deleting.pop(name, None)

    def _settled(self, name: str) -> None:
        """Wait for a deletion of `name` still removing its folder, so a new one never shares it."""
        while True:
            with self._lock:
                remover = self._deleting.get(name)
            if remover is None:
                return
            remover.join()

    def pending(self) -> int:
        with self._lock:
            collections = list(self._open.values())
        return sum(c.pending for c in collections)

    def close(self) -> None:
        with self._lock:
            collections, self._open = list(self._open.values()), {}
            removers = list(self._deleting.values())
        for collection in collections:
            collection.close()
        for remover in removers:
            remover.join()

    @staticmethod
    def _write_marker(root: Path, name: str, watch: Path | None = None) -> None:
        root.mkdir(parents=True, exist_ok=True)
        marker = {"name": name, "created_at": utc_now()} | ({"watch": str(watch)} if watch else {})
        tmp = root / (MARKER + ".tmp")
        tmp.write_text(json.dumps(marker), encoding="utf-8")
        tmp.replace(root / MARKER)
