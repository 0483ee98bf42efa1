""".NET exception strings, inner exceptions ("--->") included."""

from __future__ import annotations

import re

from funnel.apps.triage.stacktrace.common import (
    Frame,
    ParsedError,
    at_body,
    continuation,
    describe,
    exception_line,
    first_frame,
)

_DOTNET_EXCEPTION = exception_line(
    r"(?:[A-Za-z_][\w`]*\.)+[A-Za-z_][\w`]*(?:\+[\w`]+)*", prefix=r"Unhandled [Ee]xception\.\s*"
)
_DOTNET_SIGNATURE = re.compile(r"(?P<name>[^\s(]+)\([^()]*\)")
_DOTNET_LOCATION = re.compile(r" in (?P<file>.+):line (?P<line>\d+)\s*$")
_DOTNET_STATE_MACHINE = re.compile(r"(?P<owner>.+)[.+]<(?P<name>\w+)>d__\d+")


def read_frame(line: str) -> Frame | None:
    body = at_body(line)
    if body is None:
        return None
    signature = _DOTNET_SIGNATURE.match(body, 3)
    if not signature:
        return None
    rest = body[signature.end() :]
    location = _DOTNET_LOCATION.match(rest)
    if rest.strip() and not location:
        return None
    name = re.sub(r"\[[^\]]*\]$", "", signature["name"])  # generic method arguments: "Map[T]"
    if "..ctor" in name or "..cctor" in name:
        owner, _, function = name.partition("..")
        function = "." + function
    else:
        owner, _, function = name.rpartition(".")
    state_machine = _DOTNET_STATE_MACHINE.fullmatch(owner)
    if function == "MoveNext" and state_machine:  # async method before .NET Core 2.1
        owner, function = state_machine["owner"], state_machine["name"]
    return Frame(
        file=location["file"] if location else None,
        line=int(location["line"]) if location else None,
        function=function,
        owner=owner or None,
        language="dotnet",
        library=owner.startswith(("System.", "Microsoft.")) or name.startswith("lambda_method"),
    )


def _dotnet_header(line: str) -> re.Match | None:
    return None if line.lstrip().startswith("--->") else _DOTNET_EXCEPTION.match(line)


def parse(lines: list[str]) -> ParsedError | None:
    found = first_frame(lines, read_frame, _dotnet_header)
    if found is None:
        return None
    first, top, _ = found
    exceptions = []
    if top is not None:  # "Outer: msg\n ---> Inner: msg" (on one line before .NET Core)
        for segment in "\n".join(lines[top:first]).split("---> "):
            head, _, rest = segment.strip().partition("\n")
            match = _DOTNET_EXCEPTION.match(head)
            if match:
                exceptions.append((match["type"], continuation([match["msg"] or "", *rest.split("\n")])))
            else:
                exceptions.append((None, continuation(segment.split("\n"))))
    groups: list[list[Frame]] = [[]]
    for line in lines[first:]:
        frame = read_frame(line)
        marker = line.strip()
        if frame:
            groups[-1].append(frame)
        elif marker.startswith("--- End of inner exception stack trace"):
            groups.append([])  # the next frames belong to the enclosing exception
        elif not marker.startswith("--- End of stack trace from previous location"):
            break
    main_type, message = exceptions[-1] if exceptions else (None, "")
    causes = tuple(describe(t, m) for t, m in exceptions[:-1])
    return ParsedError("dotnet", main_type, message, tuple(f for g in groups for f in g), causes)
