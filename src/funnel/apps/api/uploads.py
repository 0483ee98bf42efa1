"""What an upload must be before it is kept: a PDF, Markdown or text file by name AND by content, within
the size limit, under a name that cannot leave the uploads folder.

The checks run on every file of a request before any is saved, so a request is taken whole or not at all.
"""

from __future__ import annotations

import hashlib
import os
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from funnel.apps.api.errors import Conflict, TooLarge, UnsupportedType
from funnel.errors import IngestError
from funnel.ingest.loaders import PDF_MAGIC, SNIFF_BYTES, UPLOADABLE, looks_binary, sniff
from funnel.ingest.text import decode_text
from funnel.types import Kind

# The loaders' table decides what an upload may be; these are its views for the routes.
KINDS: dict[str, Kind] = {suffix: loader.kind for loader in UPLOADABLE for suffix in loader.extensions}
MEDIA_TYPES: dict[Kind, str] = {loader.kind: loader.media_type for loader in UPLOADABLE}
MAX_NAME_CHARS = 120
_UNSAFE = re.compile(r"[^A-Za-z0-9._ ()+-]+")


@dataclass(frozen=True)
class Upload:
    """One file of a request, as the web framework spooled it."""

    filename: str
    file: BinaryIO
    size: int


def safe_filename(name: str) -> str:
    """The last path part of `name`, in a small safe alphabet: no folders, no `..`, no hidden file, no
    control characters, at most MAX_NAME_CHARS, extension kept (and lower-cased)."""
    name = unicodedata.normalize("NFKC", name or "")
    name = re.split(r"[\\/]", name)[-1]  # a Windows path arrives with backslashes
    name = _UNSAFE.sub("_", name)
    stem, dot, suffix = name.rpartition(".")
    if not dot:
        stem, suffix = name, ""
    stem = stem.strip(" ._") or "upload"
    suffix = suffix.strip(" ._").lower()
    suffix = "." + suffix if suffix else ""
    return stem[: MAX_NAME_CHARS - len(suffix)] + suffix


def kind_of(filename: str) -> Kind:
    suffix = Path(filename).suffix.lower()
    if suffix not in KINDS:
        shown = f"'{suffix}'" if suffix else "no extension"
        *others, last = (f"{loader.label} ({next(iter(loader.extensions))})" for loader in UPLOADABLE)
        raise UnsupportedType(
            f"{filename}: unsupported file type ({shown}); upload {', '.join(others)} or {last}"
        )
    return KINDS[suffix]


def check(upload: Upload, max_bytes: int) -> tuple[str, Kind]:
    """(safe name, kind) of an upload funnel will take; TooLarge, UnsupportedType or IngestError otherwise."""
    name = safe_filename(upload.filename)
    kind = kind_of(name)
    if upload.size > max_bytes:
        raise TooLarge(f"{name}: {upload.size / 2**20:.1f} MiB is over the {max_bytes / 2**20:.0f} MiB limit")
    if upload.size == 0:
        raise IngestError(name, "empty file")
    upload.file.seek(0)
    head = upload.file.read(SNIFF_BYTES)
    upload.file.seek(0)
    is_pdf = sniff(head) is Kind.PDF
    if kind is Kind.PDF and not is_pdf:
        raise UnsupportedType(f"{name} is not a PDF: its content does not start with {PDF_MAGIC.decode()}")
    if kind is not Kind.PDF:
        if is_pdf:
            raise UnsupportedType(f"{name} is a PDF named as text; upload it with a .pdf name")
        if looks_binary(head):
            raise IngestError(name, "not a text file (binary content)")
        decode_text(head, name)  # IngestError when the bytes do not read as text in any encoding
    return name, kind


def save(upload: Upload, folder: Path, name: str, taken: set[str]) -> tuple[str, str]:
    """Copy the upload into `folder` under `name`, or `name (2)`, `name (3)`, ... when taken (by a record or
    a file on disk). Returns the name used and the content's SHA-256. The name is claimed with O_EXCL, so
    two requests can never write the same file."""
    stem, suffix = os.path.splitext(name)
    for n in range(1, 10_000):
        candidate = name if n == 1 else f"{stem} ({n}){suffix}"
        if candidate in taken:
            continue
        try:
            fd = os.open(folder / candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
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
            (folder / candidate).unlink(missing_ok=True)
            raise
        return candidate, digest.hexdigest()
    raise Conflict(f"too many files named like {name}; rename it")

