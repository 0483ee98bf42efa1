"""A collection's original uploads (`Files`, part of its `Place` in `funnel.apps.state.home`):

- `EmbeddedFiles`: a folder (`DATA_DIR/collections/NAME/uploads/`); a name is claimed with O_EXCL, so two
  requests can never write the same file.
- `PostgresFiles`: rows of the service database (bytea), each with its content's SHA-256; ingest reads one
  back into a temporary file, since the loaders read paths.

A file is stored under the name asked for, or `name (2)`, `name (3)`, ... when that is taken (by a record or
a stored file); past `MAX_NAMES` of one name it is a `Conflict`. What an upload must be before it gets here
(its type, size and safe name) is the HTTP API's to check (`funnel.apps.api.uploads`).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

from funnel.apps.state.tables import ComponentTables
from funnel.errors import Conflict, NotFound

MAX_NAMES = 10_000  # a stored file is named `name`, `name (2)`, ... up to this


@dataclass(frozen=True)
class Upload:
    """One file of a request, as the web framework spooled it."""

    filename: str
    file: BinaryIO
    size: int


class Files(Protocol):
    """A collection's original uploads."""

    def save(self, upload: Upload, name: str, taken: set[str]) -> tuple[str, str]:
        """Store the upload as `name` or `name (2)`, ... (never one in `taken`); (name used, SHA-256)."""

    def local(self, filename: str):
        """A context manager yielding a local path of the file while it lasts (NotFound when gone)."""

    def content(self, filename: str) -> Path | bytes:
        """The file to send back: a path where it is one, else its bytes (NotFound when gone)."""

    def delete(self, filename: str) -> None: ...


def free_names(name: str, taken: set[str]) -> Iterator[str]:
    """`name`, `name (2)`, `name (3)`, ... leaving out those in `taken`; a Conflict when they run out."""
    stem, suffix = os.path.splitext(name)
    for n in range(1, MAX_NAMES):
        candidate = name if n == 1 else f"{stem} ({n}){suffix}"
        if candidate not in taken:
            yield candidate
    raise Conflict(f"too many files named like {name}; rename it")


class EmbeddedFiles:
    def __init__(self, folder: Path):
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)

    def save(self, upload: Upload, name: str, taken: set[str]) -> tuple[str, str]:
        """Copies the upload in under the first free name that no file on disk has either."""
        for candidate in free_names(name, taken):
            try:
                fd = os.open(self.folder / candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                continue
            digest = hashlib.sha256()
            try:
                with os.fdopen(fd, "wb") as out:
                    upload.file.seek(0)
                    while block := upload.file.read(1 << 20):
                        digest.update(block)
                        out.write(block)
            except BaseException:
                (self.folder / candidate).unlink(missing_ok=True)
                raise
            return candidate, digest.hexdigest()

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


class PostgresFiles:
    """`Files` as rows of `funnel_files` (the collections component's tables): an upload is read once (it is
    within the upload limit) and stored with its hash."""

    def __init__(self, tables: ComponentTables, collection: str):
        self.tables, self.collection = tables, collection

    def save(self, upload: Upload, name: str, taken: set[str]) -> tuple[str, str]:
        upload.file.seek(0)
        content = upload.file.read()
        digest = hashlib.sha256(content).hexdigest()
        for candidate in free_names(name, taken):
            with self.tables.connection() as conn:
                stored = conn.execute(
                    "INSERT INTO funnel_files (collection, filename, content, sha256) "
                    "VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
                    [self.collection, candidate, content, digest]).rowcount
            if stored:
                return candidate, digest

    def content(self, filename: str) -> bytes:
        with self.tables.connection() as conn:
            row = conn.execute("SELECT content FROM funnel_files WHERE collection = %s AND filename = %s",
                               [self.collection, filename]).fetchone()
        if row is None:
            raise NotFound(f"the file {filename} is gone")
        return bytes(row[0])

    @contextmanager
    def local(self, filename: str) -> Iterator[Path]:
        content = self.content(filename)
        with tempfile.TemporaryDirectory(prefix="funnel-upload-") as folder:
            path = Path(folder) / filename
            path.write_bytes(content)
            yield path

    def delete(self, filename: str) -> None:
        with self.tables.connection() as conn:
            conn.execute("DELETE FROM funnel_files WHERE collection = %s AND filename = %s",
                         [self.collection, filename])
