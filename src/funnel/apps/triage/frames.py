"""What the frames of a parsed trace point at: repository files, code symbols, and a stable fingerprint."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from funnel.apps.triage.stacktrace import Frame, ParsedError, owner_names


@dataclass(frozen=True)
class FrameMatch:
    frame: Frame
    path: str  # repository-relative, "/"-separated, without "." or empty parts
    # One path is a component suffix of the other ("/app/svc/user.py" ~ "svc/user.py"; a Java class's
    # package path). False for a guess: only the trailing components matched ("/app/svc/user.py" ~
    # "src/svc/user.py") or only the basename, or a .NET class without a printed file.
    exact: bool


def match_frames(frames: Sequence[Frame], repo_paths: Iterable[str]) -> list[FrameMatch]:
    """The repository file of each frame that has one, in frame order (frames without a match are left out).

    Paths are compared by components from the end, after `\\` -> `/` and dropping empty and "." parts, so
    whatever a container, CI runner or URL put in front (`/app/`, `C:\\src\\MyApp\\`, `file:///`,
    `webpack:///./`) never has to be known: the deepest-matching repository path wins. When one frame
    component matches ("user.py" only), that is a guess, taken only when a single repository file has the
    best score. Equal best scores are ambiguous and the frame is skipped: a wrong file costs triage more
    than a missing one. Among equal scores, a candidate whose whole path matched beats one that did not.

    Library frames are matched only through an installed-package marker (site-packages, dist-packages,
    node_modules): when the repository is that package, `.../site-packages/requests/models.py` finds
    `requests/models.py` or `src/requests/models.py`; all of `requests/models.py` must match. Java frames
    print a basename, so the class's package gives the path (`com/x/UserService.java`, inner classes in
    the outer's file); a .NET frame printed without a file is guessed from its namespace and class.
    """
    index = _RepoIndex(repo_paths)
    found: dict[tuple, tuple[str, bool] | None] = {}
    matches = []
    for frame in frames:
        key = (frame.file, frame.owner, frame.language, frame.library)
        if key not in found:
            found[key] = _match(frame, index)
        if found[key]:
            matches.append(FrameMatch(frame, *found[key]))
    return matches


def trace_symbols(parsed: ParsedError) -> list[str]:
    """Names to look for in the code, innermost first: "UserService", "UserService.getUser", "getUser".

    Library frames, module-level code, anonymous functions, lambdas, closures and `main` are left out.
    """
    symbols: dict[str, None] = {}
    for frame in parsed.frames:
        if frame.library:
            continue
        function = frame.function if _is_named(frame.function) else None
        if frame.language == "javascript" and not function:
            owners = []  # `this` of an anonymous callback: "HTMLButtonElement.<anonymous>"
        else:
            owners = [name for name in owner_names(frame.owner) if name not in _GENERIC_OWNERS]
        symbols.update(dict.fromkeys(owners))
        if owners and function:
            symbols[f"{owners[-1]}.{function}"] = None
        if function:
            symbols[function] = None
    return list(symbols)


def fingerprint(parsed: ParsedError, top: int = 3) -> str:
    """A stable id for "the same error": the exception type and where it was raised, never lines or ids.

    The top `top` application frames count as (file basename or class, function), so a redeploy that
    moves lines or a different container prefix keeps the fingerprint; a different raising function
    changes it. With no frames, the message counts, its numbers, hex and UUIDs masked.
    """
    frames = [f for f in parsed.frames if not f.library] or list(parsed.frames)
    parts = [parsed.language or "", parsed.exception_type or ""]
    if frames:
        parts += [
            f"{_basename(f.file) if f.file else f.owner or ''}|{f.function or ''}" for f in frames[:top]
        ]
    else:
        parts.append(mask_variables(parsed.message))
    return hashlib.sha256("\n".join(parts).encode("utf-8", "replace")).hexdigest()[:16]


def mask_variables(message: str) -> str:
    """`message` with the parts that differ between occurrences of one error replaced: ids, addresses."""
    message = _UUID.sub("<uuid>", message)
    message = _HEX.sub("<hex>", message)
    return _NUMBER.sub("<n>", message)


_UUID = re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")
_HEX = re.compile(r"\b0[xX][0-9a-fA-F]+\b|\b(?=[0-9a-fA-F]*\d)[0-9a-fA-F]{8,}\b")
_NUMBER = re.compile(r"\d+")
_GENERIC_OWNERS = frozenset({"Object", "Module", "exports", "module", "global", "globalThis"})
_SKIPPED_FUNCTIONS = frozenset({"main", "anonymous", "Main"})
_IDENTIFIER = re.compile(r"[A-Za-z_$][\w$]*")
_SYNTHETIC = re.compile(r"(?:lambda|access)\$|func\d+$|gowrap\d+$|deferwrap\d+$")
_VENDOR = re.compile(r"(?:^|/)(?:site-packages|dist-packages|node_modules)/")
_JVM_EXTENSIONS = (".java", ".kt", ".scala", ".groovy")


def _is_named(function: str | None) -> bool:
    return bool(
        function
        and _IDENTIFIER.fullmatch(function)
        and not _SYNTHETIC.match(function)
        and function not in _SKIPPED_FUNCTIONS
    )


def _basename(path: str) -> str:
    return re.split(r"[\\/]", path)[-1]


def _components(path: str) -> tuple[str, ...]:
    """A path's parts: "C:\\src\\x.cs" -> ("C:", "src", "x.cs"); "webpack:///./x.js?v=1" -> (.., "x.js")."""
    parts: list[str] = []
    for part in re.split(r"[\\/]", re.sub(r"[?#].*$", "", path)):
        if part == "..":
            if parts:
                parts.pop()
        elif part and part != ".":
            parts.append(part)
    return tuple(parts)


class _RepoIndex:
    """Repository paths by basename, each with its components."""

    def __init__(self, repo_paths: Iterable[str]):
        self.by_basename: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
        self.paths: set[str] = set()
        for raw in repo_paths:
            parts = _components(raw)
            if parts:
                self.by_basename.setdefault(parts[-1], []).append(("/".join(parts), parts))
                self.paths.add("/".join(parts))

    def best(self, parts: tuple[str, ...], whole: bool = False) -> tuple[str, int, bool] | None:
        """The single best repository path for `parts`: (path, components matched, every component matched).

        `whole`: all of `parts` must match, and the shortest such repository path wins.
        """
        scored = []
        for path, repo in self.by_basename.get(parts[-1], ()) if parts else ():
            score = _common_suffix(parts, repo)
            full = score == min(len(parts), len(repo))
            if whole and score < len(parts):
                continue
            scored.append(((-len(repo),) if whole else (score, full), path, score, full))
        if not scored:
            return None
        top = max(key for key, *_ in scored)
        winners = [rest for key, *rest in scored if key == top]
        return tuple(winners[0]) if len(winners) == 1 else None


def _common_suffix(a: tuple[str, ...], b: tuple[str, ...]) -> int:
    n = 0
    while n < len(a) and n < len(b) and a[-1 - n] == b[-1 - n]:
        n += 1
    return n


def _match(frame: Frame, index: _RepoIndex) -> tuple[str, bool] | None:
    if frame.file:
        normalised = "/".join(_components(frame.file))
        vendored = list(_VENDOR.finditer(normalised))
        if vendored:  # an installed package: only the repository of that package has it
            marker = vendored[-1]
            return _match_installed(
                _components(normalised[marker.end() :]), "node_modules" in marker[0], index
            )
    if frame.library:
        return None
    if frame.language == "java" and frame.owner:
        return _match_by_class(frame, index, _JVM_EXTENSIONS, "$")
    if frame.file:
        parts = _components(frame.file)
        best = index.best(parts)
        if not best:
            return None
        path, score, full = best
        return path, full and (score > 1 or len(path.split("/")) == 1)
    if frame.language == "dotnet" and frame.owner:
        found = _match_by_class(frame, index, (".cs",), "+")
        return (found[0], False) if found else None  # C# does not tie files to namespaces
    return None


def _match_installed(parts: tuple[str, ...], node: bool, index: _RepoIndex) -> tuple[str, bool] | None:
    """A file of an installed package, in the repository of that package.

    Python installs the package directory ("requests/models.py": found at any depth, the shallowest
    wins); npm installs the package root ("node_modules/express/lib/router.js" is the repository's
    "lib/router.js", or ".../express/lib/router.js" in a monorepo). A single remaining component matches
    only a top-level Python module ("six.py"), never an npm package's "index.js": every application has
    one of those.
    """
    if len(parts) >= 2:
        best = index.best(parts, whole=True)
        if best:
            return best[0], True
    inside = parts[2:] if node and parts[:1] and parts[0].startswith("@") else parts[1:] if node else parts
    path = "/".join(inside)
    return (path, True) if path in index.paths and (len(inside) >= 2 or not node) else None


def _match_by_class(frame: Frame, index: _RepoIndex, extensions: tuple[str, ...], nested: str):
    """A JVM or .NET frame by its class: "com.x.Outer$Inner" -> ".../com/x/Outer.java"."""
    package, _, outer = frame.owner.split(nested)[0].rpartition(".")
    names = [_basename(frame.file)] if frame.file else [outer + ext for ext in extensions]
    for name in names:
        parts = (*package.split("."), name) if package else (name,)
        best = index.best(parts)
        if best:
            path, score, _ = best
            return path, score == len(parts)
    return None
