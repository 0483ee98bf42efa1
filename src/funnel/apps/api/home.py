"""Where the service's collections live: their catalog, and each one's index, document registry and files.

- `EmbeddedHome`: folders under `data_dir` (one process):

      DATA_DIR/collections/NAME/collection.json   marker (name, created_at, watch)
                               /documents.json    the registry: every upload and its status
                               /uploads/          the original files
                               /index/            the LanceStore

- `PgHome` (`funnel.apps.api.pg_home`): the same in the service database, for many processes.

A collection's parts are the same three objects in both homes (`Place`), so `Collection` has one code path.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from funnel import index
from funnel.apps.api.registry import DocumentRecord, DocumentRegistry, utc_now
from funnel.apps.api.uploads import Upload, save
from funnel.errors import NotFound, StoreError
from funnel.index.base import Store

MARKER = "collection.json"


class Registry(Protocol):
    """A collection's documents and where each stands (`DocumentRegistry` is the embedded one)."""

    def list(self) -> list[DocumentRecord]: ...

    def get(self, doc_id: str) -> DocumentRecord | None: ...

    def filenames(self) -> set[str]: ...

    def add(self, records: list[DocumentRecord]) -> None: ...

    def update(self, doc_id: str, **changes) -> DocumentRecord | None: ...

    def remove(self, doc_id: str) -> DocumentRecord | None: ...


class Files(Protocol):
    """A collection's original uploads."""

    def save(self, upload: Upload, name: str, taken: set[str]) -> tuple[str, str]:
        """Store the upload as `name` or `name (2)`, ... (never one in `taken`); (name used, SHA-256)."""

    def local(self, filename: str):
        """A context manager yielding a local path of the file while it lasts (NotFound when gone)."""

    def content(self, filename: str) -> Path | bytes:
        """The file to send back: a path where it is one, else its bytes (NotFound when gone)."""

    def delete(self, filename: str) -> None: ...


@dataclass(frozen=True)
class Place:
    store: Store
    registry: Registry
    files: Files
    reader: Store | None = None  # the index on a read replica, for searches (`search_database`)


class Home(Protocol):
    shared: bool  # other processes see the same collections (check the catalog on every use)

    def names(self) -> set[str]: ...

    def marker(self, name: str) -> dict | None:
        """The collection's record (name, created_at, watch), or None when there is no such collection."""

    def write_marker(self, name: str, watch: Path | None = None) -> None: ...

    def remove_marker(self, name: str) -> None:
        """The collection is gone for every request from here on; its data goes with `destroy`."""

    def place(self, name: str) -> Place: ...

    def index_only(self, name: str) -> Store:
        """The collection's index, opened without creating anything (for /health)."""

    def destroy(self, name: str) -> None: ...

    def ignore(self) -> list[Path]:
        """Local folders a watched folder must not react to (the home's own writes)."""

    def close(self) -> None: ...


class LocalFiles:
    def __init__(self, folder: Path):
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)

    def save(self, upload: Upload, name: str, taken: set[str]) -> tuple[str, str]:
        return save(upload, self.folder, name, taken)

    def _path(self, filename: str) -> Path:
        path = self.folder / filename
        if not path.is_file():
            raise NotFound(f"the file {filename} is gone")
        return path

    @contextmanager
    def local(self, filename: str) -> Iterator[Path]:
        yield self._path(filename)

    def content(self, filename: str) -> Path:
        return self._path(filename)

    def delete(self, filename: str) -> None:
        (self.folder / filename).unlink(missing_ok=True)


class EmbeddedHome:
    shared = False

    def __init__(self, data_dir: Path):
        self.root = Path(data_dir) / "collections"

    def names(self) -> set[str]:
        try:
            return {p.name for p in self.root.iterdir() if (p / MARKER).is_file()}
        except FileNotFoundError:
            return set()

    def marker(self, name: str) -> dict | None:
        path = self.root / name / MARKER
        if not path.is_file():
            return None
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise StoreError(f"{path} is unreadable ({e})") from e

    def write_marker(self, name: str, watch: Path | None = None) -> None:
        root = self.root / name
        root.mkdir(parents=True, exist_ok=True)
        marker = {"name": name, "created_at": utc_now()} | ({"watch": str(watch)} if watch else {})
        tmp = root / (MARKER + ".tmp")
        tmp.write_text(json.dumps(marker), encoding="utf-8")
        tmp.replace(root / MARKER)

    def remove_marker(self, name: str) -> None:
        (self.root / name / MARKER).unlink(missing_ok=True)

    def place(self, name: str) -> Place:
        root = self.root / name
        return Place(index.open(root / "index"), DocumentRegistry(root / "documents.json"), LocalFiles(root / "uploads"))

    def index_only(self, name: str) -> Store:
        return index.open(self.root / name / "index")

    def destroy(self, name: str) -> None:
        shutil.rmtree(self.root / name, ignore_errors=True)

    def ignore(self) -> list[Path]:
        return [self.root.parent]

    def close(self) -> None:
        pass
