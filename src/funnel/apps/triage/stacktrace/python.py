"""CPython tracebacks, chained exceptions and exception groups."""

from __future__ import annotations

import re

from funnel.apps.triage.stacktrace.common import Block, Frame, ParsedError, describe, exception_line

HEADER = re.compile(r"\s*(?:Exception Group )?Traceback \(most recent call last\):\s*$")
_PY_CHAIN = re.compile(r"\s*(?:During handling of the above exception|The above exception was the direct)")
FILE = re.compile(r'\s*File "(?P<file>[^"]*)", line (?P<line>\d+)(?:, in (?P<func>.+))?$')
_PY_EXCEPTION = exception_line(r"[A-Za-z_][\w.]*")
_PY_GROUP_LINE = re.compile(r"[ \t]*(?:\| ?|\+ (?=Exception Group))")
_PY_GROUP_RULE = re.compile(r"[ \t]*\+-")
_PY_LIBRARY = re.compile(
    r"[\\/](?:site|dist)-packages[\\/]|^<frozen |[\\/]lib[\\/]python\d[\d.]*[\\/]|[\\/]Python\d*[\\/]Lib[\\/]"
)


def _python_frame(match: re.Match) -> Frame:
    qualname = (match["func"] or "").strip()
    qualifier, _, function = qualname.rpartition(".")
    return Frame(
        file=match["file"],
        line=int(match["line"]),
        function=function or None,
        owner=qualifier if qualifier and "<" not in qualifier else None,  # 3.11+ qualnames only
        language="python",
        library=bool(_PY_LIBRARY.search(match["file"])),
    )


def parse(lines: list[str]) -> ParsedError | None:
    grouped = any(line.lstrip(" \t+|").startswith("Exception Group Traceback") for line in lines)
    chain: list[Block] = []
    current = Block()
    state, after_separator, indent = "idle", False, 0
    for raw in lines:
        line = raw
        if grouped:
            if _PY_GROUP_RULE.match(raw):
                state, after_separator = "idle", True
                continue
            prefix = _PY_GROUP_LINE.match(raw)
            line = raw[prefix.end() :] if prefix else raw
        if HEADER.match(line):
            if not after_separator:
                chain = []  # an unrelated earlier traceback in the same log
            current = Block(frames=[], message=[])
            chain.append(current)
            state, after_separator = "frames", False
            indent = len(line) - len(line.lstrip())  # a trace quoted in an indented log keeps its shape
        elif _PY_CHAIN.match(line):
            state, after_separator = "idle", True
        elif state == "frames":
            frame = FILE.match(line)
            if frame:
                current.frames.append(_python_frame(frame))
            elif line.strip() and len(line) - len(line.lstrip()) <= indent:
                line = line.strip()
                exception = _PY_EXCEPTION.match(line)
                current.exception_type = exception["type"] if exception else None
                current.message.append((exception["msg"] or "") if exception else line)
                state = "message"
        elif state == "message":
            if line.strip():
                current.message.append(line[indent:] if line[:indent].isspace() else line)
            else:
                state = "idle"
        elif after_separator and _PY_EXCEPTION.match(line.strip()):
            exception = _PY_EXCEPTION.match(line.strip())  # a chained exception never raised: no traceback
            current = Block(exception["type"], [exception["msg"] or ""], [])
            chain.append(current)
            state, after_separator = "message", False
    if not chain:
        return None
    groups = [b for b in chain if re.search(r"\(\d+ sub-exceptions?\)\s*$", (b.message or [""])[0])]
    main = groups[0] if grouped and groups else chain[-1]
    with_frames = [b for b in chain if b.frames]
    frames = main.frames or (with_frames[-1].frames if with_frames else [])
    causes = tuple(describe(b.exception_type, "\n".join(b.message)) for b in chain if b is not main)
    return ParsedError(
        "python", main.exception_type, "\n".join(main.message), tuple(reversed(frames)), causes
    )
