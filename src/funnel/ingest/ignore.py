"""What a folder walk leaves out by name: dependency and build folders (`SKIP_DIRS`) and the rules of the
`.gitignore` files at and above the folder, as git reads them (the deepest file with an opinion wins).

`walk.py` applies them while it walks; `IgnoreRules` asks them about one path at a time (the folder watcher).
"""

from __future__ import annotations

import stat
from collections.abc import Callable
from pathlib import Path

import pathspec

# Folders that hold dependencies, caches or build output: never the user's own sources.
SKIP_DIRS = frozenset(
    {
        ".git", ".hg", ".svn", "node_modules", "bower_components", "vendor", ".venv", "venv",
        "__pycache__", "site-packages", "dist", "build", ".tox", ".nox", ".mypy_cache",
        ".pytest_cache", ".ruff_cache", ".cache", ".eggs", ".idea", ".vscode", "target",
        ".gradle", ".next", ".nuxt", "coverage", "htmlcov", ".terraform", ".ipynb_checkpoints",
    }
)

Ignores = list[tuple[Path, pathspec.GitIgnoreSpec]]  # (the folder of a .gitignore, its rules), outermost first
ReadGitignore = Callable[[Path], pathspec.GitIgnoreSpec | None]


def load_gitignore(folder: Path) -> pathspec.GitIgnoreSpec | None:
    """The folder's ignore rules; None without a `.gitignore`. OSError when it exists but cannot be read."""
    gitignore = folder / ".gitignore"
    try:
        if not stat.S_ISREG(gitignore.stat().st_mode):  # reading a FIFO would block
            return None
    except (FileNotFoundError, NotADirectoryError):
        return None
    text = gitignore.read_text(encoding="utf-8", errors="replace")
    return pathspec.GitIgnoreSpec.from_lines(text.splitlines())


def ignored(path: Path, ignores: Ignores, is_dir: bool) -> bool:
    # The deepest .gitignore with an opinion wins, so a nested "!keep.log" re-includes a file.
    for base, spec in reversed(ignores):
        rel = path.relative_to(base).as_posix() + ("/" if is_dir else "")
        verdict = spec.check_file(rel).include
        if verdict is not None:
            return verdict
    return False


def inherited_ignores(root: Path, read: ReadGitignore) -> Ignores:
    """The `.gitignore` files above `root` up to its repository's top, outermost first, each read by `read`
    (which says what it could not read).

    Ingesting `repo/src` should ignore what `repo/.gitignore` ignores, as git itself would. But a folder
    the user named is never ignored by what lies above it: when those rules ignore the folder itself or
    a folder on the way to it (`.*` in a dotfiles repository, and `~/.local/share/docs` is named), the
    user has overruled them, and only the `.gitignore` files at or below the folder count.
    """
    if _exists(root / ".git"):
        return []
    ancestors: list[Path] = []
    for parent in root.parents:
        ancestors.append(parent)
        if _exists(parent / ".git"):
            break
    else:
        return []  # not inside a repository: only ignore files at or below the root count
    specs = []
    for folder in reversed(ancestors):
        spec = read(folder)
        if spec is not None:
            specs.append((folder, spec))
    on_the_way = [root, *root.parents[: len(ancestors) - 1]]
    if any(ignored(d, [(f, s) for f, s in specs if d.is_relative_to(f) and d != f], is_dir=True)
           for d in on_the_way):
        return []
    return specs


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:
        return False


def _read_quietly(folder: Path) -> pathspec.GitIgnoreSpec | None:
    """The folder's rules, or None when its `.gitignore` cannot be read (the walk reports that; a watcher's
    question does not)."""
    try:
        return load_gitignore(folder)
    except OSError:
        return None


class IgnoreRules:
    """The walk's rules asked about one path at a time (the folder watcher filters changed paths with them):
    whether a walk of `root` leaves `path` out by its name alone, for a dependency or build folder on the way
    or a `.gitignore` rule (those above `root` too). The `.gitignore` files read are cached: make a new
    instance when they may have changed."""

    def __init__(self, root: Path):
        self.root = root
        self._inherited = inherited_ignores(root, _read_quietly)
        self._specs: dict[Path, pathspec.GitIgnoreSpec | None] = {}

    def ignored(self, path: Path) -> bool:
        parts = path.relative_to(self.root).parts
        ignores, folder = list(self._inherited), self.root
        for i, part in enumerate(parts):
            if folder not in self._specs:
                self._specs[folder] = _read_quietly(folder)
            if self._specs[folder] is not None:
                ignores.append((folder, self._specs[folder]))
            child = folder / part
            is_dir = i < len(parts) - 1 or child.is_dir()
            if (is_dir and part in SKIP_DIRS) or ignored(child, ignores, is_dir=is_dir):
                return True
            folder = child
        return False
