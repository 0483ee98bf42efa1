"""Zip-based documents (Excel, OpenDocument, EPUB, Word, PowerPoint) opened with their size checked first.

A zip's central directory declares each entry's unpacked size, and `zipfile` holds every entry to it (reading
stops there, and a CRC mismatch is an error), so checking the declared sizes before a parser unpacks anything
bounds the memory and time a zip bomb named `.xlsx` can cost.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

from funnel.errors import IngestError

MAX_UNPACKED_BYTES = 512 * 2**20  # all entries together; a real workbook or book is far smaller
MAX_RATIO = 200  # unpacked/packed per entry: XML packs 10-30:1, a bomb packs 1000:1
_RATIO_FROM_BYTES = 2**20  # a small entry may pack at any ratio; it cannot hurt


def zip_is_safe(archive: zipfile.ZipFile) -> str | None:
    """Why unpacking the archive is not safe (its declared sizes), or None when it is."""
    total = 0
    for info in archive.infolist():
        total += info.file_size
        if info.file_size > _RATIO_FROM_BYTES and info.file_size > MAX_RATIO * max(info.compress_size, 1):
            return f"a zip bomb ({info.filename} unpacks {info.file_size // max(info.compress_size, 1)}:1)"
    if total > MAX_UNPACKED_BYTES:
        return f"a zip bomb (unpacks to {total / 2**20:,.0f} MB, over {MAX_UNPACKED_BYTES // 2**20} MB)"
    return None


def open_zip(path: Path, display_path: str, label: str) -> zipfile.ZipFile:
    """The file as a zip whose sizes were checked; `IngestError` naming the file when it is not a readable
    zip (corrupt, truncated) or would unpack too far."""
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as e:
        raise IngestError(display_path, f"not a readable {label} (corrupt or truncated zip: {e})") from e
    reason = zip_is_safe(archive)
    if reason is not None:
        archive.close()
        raise IngestError(display_path, f"refused: {reason}")
    return archive
