"""V8/Node stacks and their "[cause]" lines."""

from __future__ import annotations

import re

from funnel.apps.triage.stacktrace.common import (
    Frame,
    ParsedError,
    at_body,
    continuation,
    exception_line,
    first_frame,
)

_JS_LOCATION = re.compile(r"(?P<file>.+):(?P<line>\d+):(?P<col>\d+)$")
_JS_BUILTIN_LOCATION = re.compile(r"native|<anonymous>|index \d+|eval at .*")
_JS_EXCEPTION = exception_line(
    r"[A-Za-z_$][\w$.]*", prefix="Uncaught ", after_type=r"(?: \[[\w.\-]+\])?"
)
_JS_CAUSE = re.compile(r"\s*\[cause\]: (?P<text>.*)$")


def read_frame(line: str) -> Frame | None:
    body = at_body(line)
    if body is None:
        return None
    body = body[3:].removesuffix(" {").removeprefix("async ")
    function = None
    if body.endswith(")") and " (" in body:
        cut = body.index(" (")
        function, location = body[:cut], body[cut + 2 : -1]
    else:
        location = body
    match = _JS_LOCATION.match(location) if not location.startswith("eval at ") else None
    if not match and not (function and _JS_BUILTIN_LOCATION.fullmatch(location)):
        return None
    owner = None
    if function:
        function = re.sub(r"\s*\[as [^\]]*\]$", "", function).removeprefix("new ")
        owner, _, function = function.rpartition(".")
    file = match["file"] if match else None
    return Frame(
        file=file,
        line=int(match["line"]) if match else None,
        function=function or None,
        owner=owner or None,
        language="javascript",
        library=file is None or file.startswith(("node:", "internal/")) or "node_modules" in file,
    )


def _js_header(line: str) -> re.Match | None:
    match = _JS_EXCEPTION.match(line)
    return match if match and re.search(r"(?:Error|Exception|Rejection)$", match["type"]) else None


def parse(lines: list[str]) -> ParsedError | None:
    found = first_frame(lines, read_frame, _js_header)
    if found is None:
        return None
    first, top, header = found
    message = continuation([header["msg"] or "", *lines[top + 1 : first]]) if header else ""
    frames = []
    for line in lines[first:]:
        frame = read_frame(line)
        if not frame:
            break
        frames.append(frame)
    causes = tuple(m["text"].strip() for m in map(_JS_CAUSE.match, lines[first + len(frames) :]) if m)
    return ParsedError("javascript", header["type"] if header else None, message, tuple(frames), causes)
