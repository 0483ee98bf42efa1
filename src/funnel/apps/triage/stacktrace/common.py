"""What every language's parser shares: the limits, the result types and the small helpers."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

MAX_TRACE_CHARS = 200_000  # the report limit of state.incident_schema; kept here so parsing needs the stdlib only
KEEP_HEAD_CHARS = 150_000  # a longer trace keeps its head (the outer error) and tail (the root cause)
KEEP_TAIL_CHARS = 50_000
MAX_LINE_CHARS = 4_000
MAX_MESSAGE_CHARS = 10_000
MAX_UNKNOWN_MESSAGE_CHARS = 500
MAX_CAUSES = 20
MAX_FRAMES = 1_024  # the JVM's default depth; a longer stack is a recursion, its innermost part tells
HEADER_LOOKBACK = 50  # lines searched above the first frame for the exception line
UNKNOWN_FORMAT = "unknown trace format"

T = TypeVar("T")


@dataclass(frozen=True)
class Frame:
    """One stack frame. `file` is the path as printed (Java prints a basename, or nothing)."""

    file: str | None
    line: int | None
    function: str | None
    owner: str | None  # class, receiver or qualifier: "com.x.UserService", "UserService"
    language: str  # "python" | "java" | "javascript" | "go" | "dotnet"
    library: bool = False  # runtime, standard library or installed dependency, not the application

    @property
    def symbol(self) -> str | None:
        """The class and function ("UserService.get_user"), or the one of them that is known."""
        names = owner_names(self.owner)
        if names and self.function:
            return f"{names[-1]}.{self.function}"
        return self.function or (names[-1] if names else None)


@dataclass(frozen=True)
class ParsedError:
    language: str | None  # None: the format was not recognised
    exception_type: str | None
    message: str
    frames: tuple[Frame, ...]  # innermost (where it was raised) first, whatever order the language prints
    causes: tuple[str, ...] = ()  # the other exceptions of the chain, "Type: message", in printed order
    notes: tuple[str, ...] = ()


def owner_names(owner: str | None) -> tuple[str, ...]:
    """The class names in an owner, outer first: "com.x.Outer$Inner" -> ("Outer", "Inner").

    Synthetic parts are dropped: anonymous "$1", lambdas, Kotlin's "Repo$load$2" (a lambda in `load`:
    nested classes are capitalised, functions are not), .NET "<>c" closures. When the last dotted part
    has none left, the one before it is tried ("MyApp.Program.<>c" -> ("Program",)).
    """
    if not owner:
        return ()
    for component in reversed(owner.split(".")):
        parts = [re.sub(r"`\d+$", "", p) for p in re.split(r"[$+]", component)]
        names = tuple(
            p
            for i, p in enumerate(parts)
            if _CLASS_NAME.fullmatch(p) and not p.lower().startswith("lambda") and (i == 0 or p[0].isupper())
        )
        if names:
            return names
    return ()


_CLASS_NAME = re.compile(r"[A-Za-z_][\w]*")


def describe(exception_type: str | None, message: str) -> str:
    message = message.strip()
    return f"{exception_type}: {message}" if exception_type and message else exception_type or message


def nearest(lines: list[str], before: int, accept: Callable[[str], object]) -> int | None:
    """Index of the nearest line above `before` that `accept` matches (the exception line of a trace)."""
    for i in range(before - 1, max(-1, before - 1 - HEADER_LOOKBACK), -1):
        if accept(lines[i]):
            return i
    return None


def continuation(lines: list[str]) -> str:
    return "\n".join(line.strip() for line in lines if line.strip())


@dataclass
class Block:
    """One exception of a chain while it is being read."""

    exception_type: str | None = None
    message: list[str] | None = None
    frames: list[Frame] | None = None
    more: int = 0  # Java "... N more": the last N frames equal those of the enclosing trace


def exception_line(type_pattern: str, prefix: str = "", after_type: str = "") -> re.Pattern:
    """The line "Type: message" that names an exception (the message may be empty or absent). `prefix` is
    what may stand before it ("Uncaught "), `after_type` what may follow the type before the colon."""
    start = rf"\s*(?:{prefix})?" if prefix else ""
    return re.compile(rf"{start}(?P<type>{type_pattern}){after_type}(?::[ \t]?(?P<msg>.*))?$")


def first_frame(
    lines: list[str], read_frame: Callable[[str], object], header: Callable[[str], T]
) -> tuple[int, int | None, T | None] | None:
    """(index of the first frame line, index of the exception line above it, what `header` made of that
    line), the last two None when there is none; None when no line is a frame."""
    first = next((i for i, line in enumerate(lines) if read_frame(line)), None)
    if first is None:
        return None
    top = nearest(lines, first, header)
    return first, top, header(lines[top]) if top is not None else None


def at_body(line: str) -> str | None:
    """An indented "at ..." frame line (V8 and .NET print them so), stripped; None for any other line."""
    body = line.strip()
    if not body.startswith("at ") or line[:1] not in " \t":
        return None
    return body
