"""Discovery: turn the paths a user named into the source files funnel can load.

Folders are walked the way a developer expects a repository tool to behave: `.gitignore` files are
honoured, dependency and build folders are skipped, binaries and huge files are left out. Everything
that is skipped for a reason the user may care about comes back as an `IngestError`, never an exception.
A folder walk stays inside the folder the user named: a symlink to a folder or file elsewhere is not
followed (naming the target itself ingests it). What is ignored by name (`.gitignore`, dependency and build
folders) is `ignore.py`'s to say.
"""

from __future__ import annotations

import errno
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pathspec

from funnel.errors import IngestError
from funnel.ingest.ignore import SKIP_DIRS, Ignores, ignored, inherited_ignores, load_gitignore
from funnel.ingest.loaders import (
    LOADERS, SNIFF_BYTES, Loader, SizeLimit, by_name, classify, find, looks_binary, one_of,
)
from funnel.types import Kind

__all__ = ["BINARY_EXTENSIONS", "DiscoveryResult", "FileLimits", "SourceFile", "classify", "discover"]

# Binary by convention: a change to one matters only when a loader takes its name (a Word loader: .docx).
BINARY_EXTENSIONS = frozenset(
    {
        ".png", ".jpg", ".jpeg", ".gif", ".bmp", ".ico", ".webp", ".tif", ".tiff", ".svgz",
        ".zip", ".gz", ".tgz", ".bz2", ".xz", ".7z", ".rar", ".tar", ".jar", ".war", ".whl",
        ".egg", ".class", ".so", ".dylib", ".dll", ".exe", ".bin", ".o", ".a", ".lib", ".pyc",
        ".pyo", ".mp3", ".mp4", ".wav", ".avi", ".mov", ".mkv", ".flac", ".ogg", ".woff",
        ".woff2", ".ttf", ".otf", ".eot", ".sqlite", ".db", ".parquet", ".npy", ".npz", ".pkl",
        ".pickle", ".onnx", ".pt", ".pth", ".safetensors", ".h5", ".docx", ".xlsx", ".pptx",
    }
)

NOTHING_FOUND = (f"nothing to ingest in this folder: no {one_of(loader.label for loader in LOADERS)} file "
                 "that is not ignored (.gitignore, dependency and build folders)")


@dataclass(frozen=True)
class SourceFile:
    path: Path  # resolved, absolute
    kind: Kind
    language: str | None = None


@dataclass(frozen=True)
class DiscoveryResult:
    files: list[SourceFile]
    problems: list[IngestError]
    roots: list[Path]  # resolved folders the files were found under (a named file's parent folder)
    # Only the folders the user named, resolved: a stored document under one that was not found this
    # run has left the disk. A named file's parent is not one, or naming one file would drop its siblings.
    removal_roots: list[Path] = field(default_factory=list)
    # Folders and files under a named folder that could not be listed or stat'ed (resolved where the
    # file system allows): what was stored under them may still be there, so it must not be removed.
    unlisted: list[Path] = field(default_factory=list)
    # Files in a walked folder that no loader takes, by extension (".zip": 3; "" for none): not problems,
    # but said in the summary so nothing leaves silently. Ignored and hidden files are not counted.
    unsupported: Counter[str] = field(default_factory=Counter)

    def display_path(self, source: SourceFile) -> str:
        """The file's path relative to the innermost root holding it, in POSIX form; absolute otherwise."""
        best: Path | None = None
        for root in self.roots:
            if source.path.is_relative_to(root) and (best is None or len(root.parts) > len(best.parts)):
                best = root
        if best is None:
            return source.path.as_posix()
        return source.path.relative_to(best).as_posix()


@dataclass(frozen=True)
class FileLimits:
    """The largest file ingested, per limit class a loader names (settings max_file_mb and max_pdf_mb).

    Documents (PDFs) get their own, larger limit: a scanned-free annual report of a few MB is normal, a 5 MB
    source file is generated data."""

    max_bytes: int = 2_000_000  # SizeLimit.TEXT
    max_pdf_bytes: int = 100_000_000  # SizeLimit.DOCUMENT

    @classmethod
    def from_mb(cls, file_mb: float, pdf_mb: float) -> FileLimits:
        return cls(int(file_mb * 1_000_000), int(pdf_mb * 1_000_000))

    def of(self, limit: SizeLimit) -> tuple[int, str]:
        """(bytes, the setting that raises it) for a limit class."""
        if limit is SizeLimit.DOCUMENT:
            return self.max_pdf_bytes, "max_pdf_mb"
        return self.max_bytes, "max_file_mb"


def discover(
    paths: list[Path], limits: FileLimits | None = None, max_bytes: int | None = None
) -> DiscoveryResult:
    """Expand `paths` into loadable source files, in sorted order, with the reasons for what was skipped.
    `max_bytes` overrides the limit for the text class (every file type but documents such as PDFs)."""
    limits = limits or FileLimits()
    if max_bytes is not None:
        limits = FileLimits(max_bytes, limits.max_pdf_bytes)
    walker = _Walker(limits)
    roots: list[Path] = []
    removal_roots: list[Path] = []
    for given in paths:
        path = Path(given).expanduser()
        try:
            if not path.exists():
                walker.problems.append(IngestError(str(given), "does not exist"))
                continue
            resolved = _resolve(path)
            is_dir = resolved.is_dir()
            is_file = not is_dir and resolved.is_file()
        except OSError as e:  # a name too long, a parent folder the user may not enter, ...
            walker.problems.append(IngestError(str(given), f"cannot access ({_os_reason(e)})"))
            continue
        if is_dir:
            _add_root(roots, resolved)
            _add_root(removal_roots, resolved)
            found, reported = len(walker.files), len(walker.problems)
            walker.walk_root(resolved)
            if (len(walker.files), len(walker.problems)) == (found, reported):  # never a silent empty index
                walker.problems.append(IngestError(str(given), NOTHING_FOUND))
        elif is_file:
            _add_root(roots, resolved.parent)
            walker.add_named_file(resolved, str(given))
        else:
            walker.problems.append(IngestError(str(given), "not a regular file or folder"))
    files = sorted(walker.files.values(), key=lambda f: f.path.as_posix())
    problems = sorted(walker.problems, key=lambda p: p.path)
    unlisted = sorted(set(walker.unlisted), key=lambda p: p.as_posix())
    return DiscoveryResult(files=files, problems=problems, roots=roots, removal_roots=removal_roots,
                           unlisted=unlisted, unsupported=walker.unsupported)


def _add_root(roots: list[Path], root: Path) -> None:
    if root not in roots:
        roots.append(root)


def _read_head(path: Path) -> bytes:
    with path.open("rb") as fh:
        return fh.read(SNIFF_BYTES)


def _resolve(path: Path) -> Path:
    """`Path.resolve`, with a symlink loop raised as the OSError it is (Python < 3.13 raises RuntimeError)."""
    try:
        return path.resolve()
    except RuntimeError as e:
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(path)) from e


def _best_resolved(path: Path) -> Path:
    try:
        return _resolve(path)
    except OSError:
        return Path(os.path.abspath(path))


def _os_reason(error: OSError) -> str:
    return error.strerror or str(error)


def _size_text(n: int) -> str:
    return f"{n / 1_000_000:.1f} MB"


def _unsupported(path: Path, head: bytes, named: tuple[Loader, str | None] | None) -> str:
    """Why no loader takes a file: named as a format its content is not, binary, or an unknown type."""
    if named is not None and named[0].mark:
        return f"not a {named[0].label}: its content lacks {named[0].mark}"
    if looks_binary(head):
        return "binary file"
    return f"unsupported file type '{path.suffix.lower() or path.name}'"


class _Walker:
    """Collects files and problems across all named paths; de-duplicates by resolved path."""

    def __init__(self, limits: FileLimits):
        self.limits = limits
        self.files: dict[Path, SourceFile] = {}
        self.problems: list[IngestError] = []
        self.unlisted: list[Path] = []
        self.unsupported: Counter[str] = Counter()
        self._seen_dirs: set[Path] = set()

    def add_named_file(self, path: Path, given: str) -> None:
        # The user asked for this file by name, so every reason to skip it is worth telling them.
        self._consider(path, report_as=given, explicit=True)

    def walk_root(self, root: Path) -> None:
        self._walk(root, inherited_ignores(root, self._gitignore), root)

    def _cannot(self, path: Path, what: str, error: OSError) -> None:
        """Report what the walk could not look into; unless it is gone, what was stored there may live on."""
        self.problems.append(IngestError(str(path), f"{what} ({_os_reason(error)})"))
        if not isinstance(error, FileNotFoundError):
            self.unlisted.append(_best_resolved(path))

    def _walk(self, folder: Path, ignores: Ignores, root: Path) -> None:
        try:
            real = _resolve(folder)
            if real in self._seen_dirs:  # a symlink loop, or the same folder named twice
                return
            self._seen_dirs.add(real)
            with os.scandir(folder) as listing:
                entries = sorted(listing, key=lambda e: e.name)
        except OSError as e:
            self._cannot(folder, "cannot list folder", e)
            return
        spec = self._gitignore(folder)
        if spec is not None:
            ignores = [*ignores, (folder, spec)]
        for entry in entries:
            path = Path(entry.path)
            try:
                is_dir = entry.is_dir()  # follows symlinks; loops are caught by _seen_dirs
                is_file = not is_dir and entry.is_file()
                # Only a symlink needs resolving and the "inside root" check.
                target = _resolve(path) if entry.is_symlink() else None
            except OSError as e:
                self._cannot(path, "cannot read", e)
                continue
            if is_dir:
                if entry.name in SKIP_DIRS or ignored(path, ignores, is_dir=True):
                    continue
                if target is not None and not target.is_relative_to(root):
                    # `ln -s .. docs/up` would otherwise pull the whole parent tree into the index.
                    reason = f"symlink to a folder outside {root}, not followed (name it to ingest it)"
                    self.problems.append(IngestError(str(path), reason))
                    continue
                self._walk(path, ignores, root)
            elif is_file and not ignored(path, ignores, is_dir=False):
                if target is not None and not target.is_relative_to(root):
                    # Its text would enter the index (and a triage repository's) from outside the folder.
                    reason = f"symlink to a file outside {root}, not followed (name it to ingest it)"
                    self.problems.append(IngestError(str(path), reason))
                    continue
                self._consider(path, report_as=str(path), explicit=False)

    def _consider(self, path: Path, report_as: str, explicit: bool) -> None:
        try:
            resolved = _resolve(path)
        except OSError as e:
            self._cannot_read(path, report_as, explicit, e)
            return
        if resolved in self.files:
            return
        named = by_name(resolved)
        if not explicit and named is None:  # an archive in a tree is expected, not a problem: counted unread
            if not path.name.startswith("."):  # .DS_Store, .gitignore: no one expects those indexed
                self.unsupported[path.suffix.lower()] += 1
            return
        try:
            size = resolved.stat().st_size
            head = _read_head(resolved)
        except OSError as e:
            self._cannot_read(resolved, report_as, explicit, e)
            return
        found = find(resolved, head, resolved)
        if found is None:
            if explicit or named is not None:
                self.problems.append(IngestError(report_as, _unsupported(resolved, head, named)))
            return
        loader, language = found
        if not loader.binary and looks_binary(head):
            self.problems.append(IngestError(report_as, "binary file (NUL bytes in the first 8 KB)"))
            return
        if loader.quiet_when_empty and not explicit and size <= SNIFF_BYTES and not head.strip():
            return  # an empty __init__.py is normal in a tree; an empty document's loader reports it
        if not explicit and loader.is_icon is not None and loader.is_icon(resolved):
            self.unsupported[path.suffix.lower()] += 1  # an icon in a tree: accounted for, not read
            return
        limit, setting = self.limits.of(loader.limit)
        if size > limit:
            over = f"{_size_text(size)} > {_size_text(limit)} limit"
            reason = f"too large ({over}; raise the setting {setting})"
            self.problems.append(IngestError(report_as, reason))
            return
        self.files[resolved] = SourceFile(path=resolved, kind=loader.kind, language=language)

    def _cannot_read(self, path: Path, report_as: str, explicit: bool, error: OSError) -> None:
        self.problems.append(IngestError(report_as, f"cannot read ({_os_reason(error)})"))
        if not explicit and not isinstance(error, FileNotFoundError):
            self.unlisted.append(_best_resolved(path))

    def _gitignore(self, folder: Path) -> pathspec.GitIgnoreSpec | None:
        try:
            return load_gitignore(folder)
        except OSError as e:
            # Walking on without its rules may index what it hides; the user should know why.
            self.problems.append(IngestError(str(folder / ".gitignore"), f"cannot read ({_os_reason(e)})"))
            return None
