"""JVM (Java/Kotlin) traces: "Caused by", "Suppressed" and "... N more"."""

from __future__ import annotations

import re

from funnel.apps.triage.stacktrace.common import (
    MAX_FRAMES,
    Block,
    Frame,
    ParsedError,
    continuation,
    describe,
    exception_line,
    first_frame,
)

_JAVA_FRAME = re.compile(r"\s+at (?P<qual>[^\s()]+)\((?P<loc>[^()]*)\)")
_JAVA_LOCATION = re.compile(
    r"(?:(?P<file>[\w$.\-]+\.[A-Za-z]+)|Unknown Source|Native Method|SourceFile|<generated>)"
    r"(?::(?P<line>\d+))?$"
)
_JAVA_MODULE = re.compile(r"(?:[\w.\-]*(?:@[\w.\-]+)?/){1,2}")  # "java.base/", "app//", "java.base@17/"
_JAVA_EXCEPTION = exception_line(
    r"(?:[A-Za-z_$][\w$]*\.)*[A-Z][\w$]*", prefix='Exception in thread "[^"]*" '
)
_JAVA_MORE = re.compile(r"\s+\.\.\. (?P<n>\d+) (?:more|common frames omitted)")
_JDK = ("java.", "javax.", "jdk.", "sun.", "com.sun.", "kotlin.", "kotlinx.", "scala.")


def read_frame(line: str) -> Frame | None:
    match = _JAVA_FRAME.match(line)
    location = _JAVA_LOCATION.match(match["loc"]) if match else None
    if not location:
        return None
    qual = _JAVA_MODULE.sub("", match["qual"], count=1)
    module = match["qual"][: len(match["qual"]) - len(qual)]
    owner, _, function = qual.rpartition(".")
    owner = re.sub(r"/0x[0-9a-fA-F]+$", "", owner)  # hidden lambda classes: "Foo$$Lambda$14/0x0800"
    return Frame(
        file=location["file"],
        line=int(location["line"]) if location["line"] else None,
        function=function,
        owner=owner or None,
        language="java",
        library=module.startswith(("java.", "jdk.")) or owner.startswith(_JDK),
    )


def _java_header(line: str) -> re.Match | None:
    match = _JAVA_EXCEPTION.match(line)
    if match and ("." in match["type"] or match["type"].endswith(("Exception", "Error", "Throwable"))):
        return match
    return None


def parse(lines: list[str]) -> ParsedError | None:
    found = first_frame(lines, read_frame, _java_header)
    if found is None:
        return None
    first, top, header = found
    current = Block(header["type"] if header else None, [], [])
    if header:
        current.message = [header["msg"] or "", *lines[top + 1 : first]]
    sections, suppressed = [current], False
    for line in lines[first:]:
        frame = read_frame(line)
        caused = line.lstrip().startswith("Caused by: ") and not (suppressed and line[:1] in " \t")
        if caused:
            exception = _java_header(line.lstrip()[len("Caused by: ") :])
            current = Block(exception["type"] if exception else None, [], [])
            current.message.append((exception["msg"] or "") if exception else line.strip())
            sections.append(current)
            suppressed = False
        elif line.lstrip().startswith("Suppressed: ") or suppressed:
            suppressed = True  # a suppressed exception's own trace, until the next top-level "Caused by"
        elif frame:
            current.frames.append(frame)
        elif _JAVA_MORE.match(line):
            current.more = int(_JAVA_MORE.match(line)["n"])
        elif current.frames:
            break  # the trace is over; the log goes on
        else:
            current.message.append(line)  # a multi-line "Caused by" message
    full: list[list[Frame]] = []
    for section in sections:
        inherited = full[-1][max(0, len(full[-1]) - section.more) :] if full and section.more else []
        full.append((section.frames + inherited)[:MAX_FRAMES])
    root = sections[-1]
    frames = next((f for f in reversed(full) if f), [])
    causes = tuple(describe(s.exception_type, continuation(s.message)) for s in sections[:-1])
    return ParsedError("java", root.exception_type, continuation(root.message), tuple(frames), causes)
