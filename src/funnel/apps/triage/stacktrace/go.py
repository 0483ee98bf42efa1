"""Go panics and github.com/pkg/errors "%+v" stacks."""

from __future__ import annotations

import re

from funnel.apps.triage.stacktrace.common import Block, Frame, ParsedError, continuation, describe, nearest

_GO_PANIC = re.compile(r"\s*(?P<kind>panic|fatal error): (?P<msg>.*?)(?: \[recovered\])?$")
GOROUTINE = re.compile(r"goroutine \d+ \[[^\]]*\]:")
LOCATION = re.compile(r"\t(?P<file>[^\s:][^:]*(?::[\\/][^:]*)?):(?P<line>\d+)(?: \+0x[0-9a-fA-F]+)?")
_GO_CLOSURE = re.compile(r"func\d+|\d+|gowrap\d+|deferwrap\d+")
_GO_LIBRARY_PATH = re.compile(
    r"/usr/local/go/src/|/usr/lib/go[^/]*/src/|/libexec/src/|/pkg/mod/|[\\/]Go[\\/]src[\\/]"
)
_GO_STDLIB_PACKAGES = """archive bufio bytes cmp compress container context crypto database debug embed
encoding errors expvar flag fmt go hash html image internal io iter log maps math mime net os path plugin
reflect regexp runtime slices sort strconv strings sync syscall testing text time unicode unique unsafe
vendor"""
_GO_STDLIB = frozenset(_GO_STDLIB_PACKAGES.split())


def _go_frame(call: str, location: re.Match) -> Frame:
    name = re.sub(r" in goroutine \d+$", "", call.strip().removeprefix("created by "))
    if name.endswith(")"):
        name = name[: name.rfind("(")]  # the arguments: "(0x0, {0x1, 0x2}, ...)"
    name = re.sub(r"\[[^\]]*\]", "", name)  # type parameters: "Map[...]"
    slash = name.rfind("/")
    dot = name.find(".", slash + 1)
    package, rest = (name[:dot], name[dot + 1 :]) if dot >= 0 else ("", name)
    parts = [p for p in rest.split(".") if not _GO_CLOSURE.fullmatch(p)] or [rest]
    file = location["file"]
    top = package.split("/")[0]
    return Frame(
        file=file,
        line=int(location["line"]),
        function=parts[-1],
        owner=parts[0].strip("(*)") if len(parts) > 1 else None,
        language="go",
        library=not package or top in _GO_STDLIB or bool(_GO_LIBRARY_PATH.search(file)),
    )


def parse(lines: list[str]) -> ParsedError | None:
    goroutine = next((i for i, line in enumerate(lines) if GOROUTINE.match(line)), None)
    panics: list[Block] = []
    for line in lines[: goroutine if goroutine is not None else len(lines)]:
        panic = _GO_PANIC.match(line)
        if panic:
            panics.append(Block(panic["kind"], [panic["msg"]]))
        elif panics and line.strip() and not line.startswith("[signal ") and len(panics[-1].message) < 50:
            panics[-1].message.append(line)  # a multi-line panic value
    start = goroutine + 1 if goroutine is not None else 0
    frames: list[Frame] = []
    first_call = None
    i = start
    while i + 1 < len(lines):
        call, location = lines[i], LOCATION.match(lines[i + 1])
        if location and call.strip() and call[0] not in " \t":
            first_call = i if first_call is None else first_call
            frames.append(_go_frame(call, location))
            i += 2
            continue
        if frames:
            break
        i += 1
    if not panics and not frames:
        return None
    if panics:
        main = panics[-1]
        kind, message = main.exception_type, continuation(main.message)
        causes = tuple(describe(p.exception_type, continuation(p.message)) for p in panics[:-1])
    else:  # github.com/pkg/errors "%+v": the error string, then its stack
        above = nearest(lines, first_call, str.strip)
        kind, message, causes = None, lines[above].strip() if above is not None else "", ()
    return ParsedError("go", kind, message, tuple(frames), causes)
