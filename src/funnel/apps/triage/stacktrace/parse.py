"""A stack trace as an application printed it -> one `ParsedError`: clean it, detect its format, parse it."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace

from funnel.apps.triage.stacktrace import dotnet, go, java, javascript, python
from funnel.apps.triage.stacktrace.common import (
    KEEP_HEAD_CHARS,
    KEEP_TAIL_CHARS,
    MAX_CAUSES,
    MAX_FRAMES,
    MAX_LINE_CHARS,
    MAX_MESSAGE_CHARS,
    MAX_TRACE_CHARS,
    MAX_UNKNOWN_MESSAGE_CHARS,
    UNKNOWN_FORMAT,
    ParsedError,
)


def parse_trace(text: str, message: str = "") -> ParsedError:
    """Parse `text`; `message` (the application's own error message) is used when the trace has none."""
    text, notes = _clean(text or "")
    message = _clean(message or "")[0].strip()
    lines = text.split("\n")
    if any(len(line) > MAX_LINE_CHARS for line in lines):
        lines = [line[:MAX_LINE_CHARS] for line in lines]
        notes.append(f"lines cut to {MAX_LINE_CHARS} characters")
    language = _detect(lines)
    parsed = _PARSERS[language](lines) if language else None
    if parsed is None:
        first = message or next((line.strip() for line in lines if line.strip()), "")
        return ParsedError(None, None, first[:MAX_UNKNOWN_MESSAGE_CHARS], (), notes=(*notes, UNKNOWN_FORMAT))
    text_message = parsed.message.strip() or message
    if len(text_message) > MAX_MESSAGE_CHARS:
        text_message = text_message[:MAX_MESSAGE_CHARS]
        notes.append(f"message cut to {MAX_MESSAGE_CHARS} characters")
    frames, causes = parsed.frames, parsed.causes
    if len(frames) > MAX_FRAMES:
        notes.append(f"{len(frames) - MAX_FRAMES} outer frames left out")
        frames = frames[:MAX_FRAMES]
    if len(causes) > MAX_CAUSES:
        notes.append(f"{len(causes) - MAX_CAUSES} more causes not listed")
        causes = causes[:MAX_CAUSES]
    return replace(
        parsed, language=language, message=text_message, frames=frames, causes=causes, notes=tuple(notes)
    )


_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def _clean(text: str) -> tuple[str, list[str]]:
    notes = []
    if len(text) > MAX_TRACE_CHARS:
        text = text[:KEEP_HEAD_CHARS] + "\n" + text[-KEEP_TAIL_CHARS:]
        notes.append(
            f"trace cut to {MAX_TRACE_CHARS} characters (kept the first {KEEP_HEAD_CHARS} "
            f"and the last {KEEP_TAIL_CHARS})"
        )
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return _CONTROL.sub("", _ANSI.sub("", text)), notes


_PARSERS: dict[str, Callable[[list[str]], ParsedError | None]] = {
    "python": python.parse,
    "java": java.parse,
    "javascript": javascript.parse,
    "go": go.parse,
    "dotnet": dotnet.parse,
}


def _vote(line: str) -> tuple[str, int] | None:
    """The format one line is evidence of, and how strong: a header outweighs a frame."""
    bare = line.lstrip(" \t|+")
    if bare.startswith(("Traceback (most recent", "Exception Group Traceback")) and python.HEADER.match(bare):
        return "python", 5
    if bare.startswith('File "') and python.FILE.match(bare):
        return "python", 1
    if line.startswith("goroutine ") and go.GOROUTINE.match(line):
        return "go", 5
    if line.startswith(("panic: ", "fatal error: ")):
        return "go", 2
    if bare.startswith("at "):  # before Go: "\tat Foo.bar(Foo.java:42)" also looks like "\tpath:line"
        for language, module in (("java", java), ("dotnet", dotnet), ("javascript", javascript)):
            if module.read_frame(line):
                return language, 1
    if line.startswith("\t") and go.LOCATION.match(line):
        return "go", 1
    if bare.startswith(("---> ", "--- End of inner exception")):
        return "dotnet", 1
    return None


def _detect(lines: list[str]) -> str | None:
    scores = dict.fromkeys(_PARSERS, 0)
    for line in lines:
        vote = _vote(line)
        if vote:
            scores[vote[0]] += vote[1]
    best = max(scores, key=scores.__getitem__)
    return best if scores[best] else None
