"""What the loaders of pre-2007 Office files share: telling an OLE compound file's format by its streams,
and running the programs that read them.

.doc, .xls and .ppt are OLE compound files (a FAT file system in a file, magic D0 CF 11 E0 A1 B1 1A E1),
told apart by the streams they hold: WordDocument, Workbook (Book in Excel 5/95), "PowerPoint Document".
Other OLE files are not theirs: Hangul's .hwp holds FileHeader, and a password-protected .docx/.xlsx/.pptx
is an EncryptedPackage stream in one (`office.read_package` refuses that in one line). olefile reads only
the header and the directory, so recognising a 1 GB file costs what a small one does.

The Word reader is a program, antiword (catdoc where it cannot read a file), run with a time limit and a
limit on what it may print; a program that is not installed is one line per file that says how to install
it, and the rest of the folder is read.
"""

from __future__ import annotations

import os
import selectors
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO

from funnel.errors import IngestError, missing_dependency
from funnel.ingest.text import error_detail

OLE_SIGNATURE = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
# A program reading one file may take this long and print this much; past either the file is refused.
TOOL_SECONDS = 60.0
MAX_TOOL_OUTPUT = 64 * 2**20
_STDERR_TAIL = 4096
INSTALL_HINT = ("install it: apt-get install --no-install-recommends antiword catdoc (or `make legacy`)")
WORD, EXCEL, POWERPOINT, ENCRYPTED, OTHER = "doc", "xls", "ppt", "encrypted", "other"
_STREAMS = (("worddocument", WORD), ("workbook", EXCEL), ("book", EXCEL), ("powerpoint document", POWERPOINT))


def ole_format(head: bytes, names: frozenset[str] | None) -> str | None:
    """WORD, EXCEL or POWERPOINT by the streams an OLE file holds (`names`, `top_level_streams`); ENCRYPTED
    for an encrypted OOXML package, OTHER for any other OLE file (Hangul's FileHeader among them) and "" for
    one olefile cannot read (truncated, corrupt) or when olefile is not installed; None when it is not an
    OLE file."""
    if not head.startswith(OLE_SIGNATURE):
        return None
    if names is None:
        return ""
    if "fileheader" in names:  # Hangul (.hwp): its own loader's
        return OTHER
    if "encryptedpackage" in names:
        return ENCRYPTED
    return next((kind for stream, kind in _STREAMS if stream in names), OTHER)


def top_level_streams(file: Path | BinaryIO | None) -> frozenset[str] | None:
    """The lower-case names at the root of an OLE file; None when it cannot be read."""
    if file is None:
        return None
    try:
        import olefile
    except ImportError:
        return None
    try:
        source: Any = str(file) if isinstance(file, Path) else file
        with olefile.OleFileIO(source) as ole:
            return frozenset(entry[0].lower() for entry in ole.listdir(streams=True, storages=True))
    except Exception:  # olefile raises OSError, ValueError, IndexError, struct.error... for a broken file
        return None
    finally:
        if not isinstance(file, Path) and file is not None:
            file.seek(0)


def recogniser(kind: str, suffixes: tuple[str, ...]):
    """A `LOADERS` row's recogniser: an OLE file of this kind whatever its name; under one of `suffixes`,
    also an OLE file olefile cannot read or an encrypted package, which the loader refuses in one line that
    says which (rather than "not a Word document")."""

    def recognised(probe: Any) -> bool:
        found = ole_format(probe.head, probe.ole_streams)  # its directory, read once for every row
        if found == kind:
            return True
        named = probe.path.suffix.lower() in suffixes
        return named and found in ("", ENCRYPTED)

    return recognised


def open_ole(path: Path, display_path: str, label: str, kind: str) -> Any:
    """The file as an open `olefile.OleFileIO`, once it is known to be one of this kind; `IngestError` with
    one line otherwise."""
    olefile = _olefile(display_path, label)
    try:
        ole = olefile.OleFileIO(str(path))
    except OSError as e:
        if isinstance(e, FileNotFoundError) or not path.is_file():
            raise IngestError(display_path, f"cannot read ({e.strerror or e})") from e
        raise IngestError(display_path, f"corrupt or truncated {label} ({error_detail(e)})") from e
    except Exception as e:
        raise IngestError(display_path, f"corrupt or truncated {label} ({error_detail(e)})") from e
    names = frozenset(entry[0].lower() for entry in ole.listdir(streams=True, storages=True))
    if "encryptedpackage" in names:
        ole.close()
        raise IngestError(display_path, "password-protected (an encrypted Office file); save it without a "
                                        "password")
    if not any(found == kind and stream in names for stream, found in _STREAMS):
        ole.close()
        raise IngestError(display_path, f"not a {label} (an OLE file without its streams)")
    return ole


def _olefile(display_path: str, label: str) -> Any:
    try:
        import olefile
    except ImportError as e:
        raise IngestError(display_path, str(missing_dependency(f"the {label} loader", "olefile", "formats"))
                          ) from e
    return olefile


def stream_bytes(ole: Any, name: str, display_path: str, label: str) -> bytes:
    try:
        with ole.openstream(name) as stream:
            return stream.read()
    except Exception as e:
        raise IngestError(display_path, f"corrupt or truncated {label} ({error_detail(e)})") from e


class ToolMissing(IngestError):
    """The program a loader runs is not installed: one line naming the install."""


def run_tool(
    command: Sequence[str], display_path: str, *, seconds: float = TOOL_SECONDS,
    max_bytes: int = MAX_TOOL_OUTPUT,
) -> tuple[int, bytes, bytes]:
    """(exit status, stdout, the end of stderr) of a program reading a file; `IngestError` when it
    runs past `seconds` or prints more than `max_bytes` (it is killed), `ToolMissing` when it is not on
    PATH. Standard input is closed; both pipes are drained together, so neither fills and blocks it."""
    program = shutil.which(command[0])
    if program is None:
        raise ToolMissing(display_path, f"reading it needs {command[0]}, which is not installed (no "
                                        f"`{command[0]}` on PATH); {INSTALL_HINT}")
    try:
        process = subprocess.Popen([program, *command[1:]], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE)
    except OSError as e:
        raise IngestError(display_path, f"{command[0]} could not be run ({e.strerror or e})") from e
    out, err = bytearray(), bytearray()
    deadline = time.monotonic() + seconds
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ, out)  # type: ignore[arg-type]
            selector.register(process.stderr, selectors.EVENT_READ, err)  # type: ignore[arg-type]
            while selector.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise IngestError(display_path, f"{command[0]} took over {seconds:g} s and was stopped")
                for key, _ in selector.select(left):
                    chunk = os.read(key.fd, 65536)
                    if not chunk:
                        selector.unregister(key.fileobj)
                        continue
                    key.data.extend(chunk)
                    if key.data is err:
                        del err[:-_STDERR_TAIL]
                    elif len(out) > max_bytes:
                        raise IngestError(display_path, f"{command[0]} printed over {max_bytes // 2**20} MB "
                                                        "of text and was stopped")
        try:
            status = process.wait(max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired as e:
            raise IngestError(display_path, f"{command[0]} took over {seconds:g} s and was stopped") from e
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdout.close()  # type: ignore[union-attr]
        process.stderr.close()  # type: ignore[union-attr]
    return status, bytes(out), bytes(err)


def last_line(stderr: bytes) -> str:
    lines = [line.strip() for line in stderr.decode("utf-8", errors="replace").splitlines() if line.strip()]
    return lines[-1][:160] if lines else "no message"


