"""The symbol table of a code index, and the names an error report mentions.

The table is the index's outline (`Store.outline`): every code chunk is one definition, named by its heading
("UserService.get_user", "UserService"). It answers "which file defines X" for the names a stack trace or
an error message carries, so triage can fetch a file the searches would not rank (seed 000: an error raised
in UserService retrieved UserDto and UserController).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from funnel.index.base import OutlineEntry

# A name defined in more files than this says little about where an error comes from ("get", "__init__").
MAX_FILES_PER_NAME = 3
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
# CamelCase words (UserService), snake_case with an underscore (get_user) and dotted names (a.b.c) are
# code-like; plain words are left to BM25.
_CODE_LIKE = re.compile(r"^(?:[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+|[a-z0-9]+(?:_[a-z0-9]+)+|_\w+|\w+(?:\.\w+)+)$")
_BACKTICKED = re.compile(r"`([^`\n]{2,120})`")
_PATHLIKE = re.compile(r"[\w.-]+(?:/[\w.-]+)*\.[A-Za-z]{1,5}\b")
_SKIP = frozenset({"self", "cls", "None", "True", "False", "main", "__init__", "__call__", "<module>"})


@dataclass(frozen=True)
class Definition:
    symbol: str
    path: str
    chunk_id: str
    line_start: int | None
    line_end: int | None


class SymbolTable:
    """Which files define which names, with the chunk that holds each definition."""

    def __init__(self, outline: Iterable[OutlineEntry]):
        self.paths: set[str] = set()
        self._by_name: dict[str, list[Definition]] = defaultdict(list)
        self._modules: dict[str, str] = {}  # "pkg.mod" -> "src/pkg/mod.py"
        for entry in outline:
            self.paths.add(entry.path)
            if entry.kind != "code" or not entry.heading:
                continue
            definition = Definition(entry.heading, entry.path, entry.chunk_id, entry.line_start, entry.line_end)
            parts = entry.heading.split(".")
            # "UserService.get_user" is found as itself, as "get_user" and as its class "UserService".
            for key in {entry.heading, parts[-1], parts[0]}:
                self._by_name[key].append(definition)
        self._by_basename: dict[str, list[str]] = defaultdict(list)
        for path in sorted(self.paths):
            self._by_basename[path.rsplit("/", 1)[-1]].append(path)
            if path.endswith(".py"):
                module = path[:-3].removesuffix("/__init__").replace("/", ".")
                for start in range(module.count(".") + 1):  # "src.pkg.mod", "pkg.mod", "mod"
                    self._modules.setdefault(module.split(".", start)[-1], path)

    def files_defining(self, name: str) -> list[Definition]:
        """Definitions of `name` (qualified or not), one per file, exact symbol matches first; [] when the
        name is defined in too many files to point anywhere."""
        found = self._by_name.get(name, [])
        if not found and "." in name:  # "pkg.mod.Class.method" -> try shorter qualified tails
            parts = name.split(".")
            for start in range(1, len(parts) - 1):
                found = self._by_name.get(".".join(parts[start:]), [])
                if found:
                    break
        per_file: dict[str, Definition] = {}
        for d in sorted(found, key=lambda d: (d.symbol != name, d.line_start or 0)):
            per_file.setdefault(d.path, d)
        return list(per_file.values()) if len(per_file) <= MAX_FILES_PER_NAME else []

    def mentioned_files(self, text: str, limit: int = 10) -> list[str]:
        """Repository files the text names by path ("lib/x/scales.py", "scales.py" when only one file has
        that name), in order of mention. A longer mention wins; an ambiguous basename names nothing."""
        found: dict[str, None] = {}
        mentions = (m for token in text[:20_000].split() if len(token) <= 300 for m in _PATHLIKE.findall(token))
        for mention in mentions:  # token by token: one 10 kB blob must not make the regex quadratic
            parts = [p for p in mention.split("/") if p not in ("", ".")]
            if not parts:
                continue
            candidates = self._by_basename.get(parts[-1], [])
            best = [c for c in candidates if c.split("/")[-len(parts):] == parts]
            if len(best) > 1:  # prefer the candidates whose path ends with the whole mention... still many
                best = [c for c in best if len(c.split("/")) == len(parts)] or best
            if len(best) == 1:
                found.setdefault(best[0], None)
            if len(found) >= limit:
                break
        return list(found)

    def module_file(self, dotted: str) -> str | None:
        """The file of a dotted module name ("astropy.modeling.separable"), or of its longest module prefix
        ("astropy.modeling.separable.separability_matrix")."""
        parts = dotted.split(".")
        for end in range(len(parts), 1, -1):
            path = self._modules.get(".".join(parts[:end]))
            if path:
                return path
        return None


def mentioned_names(text: str, limit: int = 40) -> list[str]:
    """Code-like names in free text, in order of first mention: backticked spans first, then CamelCase,
    snake_case and dotted identifiers."""
    names: list[str] = []
    for span in _BACKTICKED.findall(text):
        names.extend(m.group() for m in _IDENTIFIER.finditer(span) if m.group() not in _SKIP)
    names.extend(m.group() for m in _IDENTIFIER.finditer(text) if _CODE_LIKE.match(m.group()))
    seen: dict[str, None] = {}
    for name in names:
        name = name.strip(".")
        if name and name not in _SKIP and len(name) > 2:
            seen.setdefault(name, None)
    return list(seen)[:limit]
