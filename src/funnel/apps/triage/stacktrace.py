"""A stack trace as an application printed it -> one `ParsedError`, innermost frame first.

Five formats are read: CPython tracebacks, JVM (Java/Kotlin) traces, V8/Node stacks, Go panics (and
github.com/pkg/errors "%+v" stacks) and .NET exception strings. Anything else comes back with
`language=None` and a note; nothing here raises on bad input.

A trace is whatever a client posted, so it is cut to `MAX_TRACE_CHARS` before any work, every line to
`MAX_LINE_CHARS`, and every pattern is anchored to one line and runs in linear time.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace

MAX_TRACE_CHARS = 200_000  # the report limit of triage.schema; kept here so parsing needs the stdlib only
KEEP_HEAD_CHARS = 150_000  # a longer trace keeps its head (the outer error) and tail (the root cause)
KEEP_TAIL_CHARS = 50_000
MAX_LINE_CHARS = 4_000
MAX_MESSAGE_CHARS = 10_000
MAX_UNKNOWN_MESSAGE_CHARS = 500
MAX_CAUSES = 20
MAX_FRAMES = 1_024  # the JVM's default depth; a longer stack is a recursion, its innermost part tells
HEADER_LOOKBACK = 50  # lines searched above the first frame for the exception line
UNKNOWN_FORMAT = "unknown trace format"


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


_CLASS_NAME = re.compile(r"[A-Za-z_][\w]*")
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


def _describe(exception_type: str | None, message: str) -> str:
    message = message.strip()
    return f"{exception_type}: {message}" if exception_type and message else exception_type or message


def _nearest(lines: list[str], before: int, accept: Callable[[str], object]) -> int | None:
    """Index of the nearest line above `before` that `accept` matches (the exception line of a trace)."""
    for i in range(before - 1, max(-1, before - 1 - HEADER_LOOKBACK), -1):
        if accept(lines[i]):
            return i
    return None


def _continuation(lines: list[str]) -> str:
    return "\n".join(line.strip() for line in lines if line.strip())


# --- Python ------------------------------------------------------------------------------------------

_PY_HEADER = re.compile(r"\s*(?:Exception Group )?Traceback \(most recent call last\):\s*$")
_PY_CHAIN = re.compile(r"\s*(?:During handling of the above exception|The above exception was the direct)")
_PY_FILE = re.compile(r'\s*File "(?P<file>[^"]*)", line (?P<line>\d+)(?:, in (?P<func>.+))?$')
_PY_EXCEPTION = re.compile(r"(?P<type>[A-Za-z_][\w.]*)(?::[ \t]?(?P<msg>.*))?$")
_PY_GROUP_LINE = re.compile(r"[ \t]*(?:\| ?|\+ (?=Exception Group))")
_PY_GROUP_RULE = re.compile(r"[ \t]*\+-")
_PY_LIBRARY = re.compile(
    r"[\\/](?:site|dist)-packages[\\/]|^<frozen |[\\/]lib[\\/]python\d[\d.]*[\\/]|[\\/]Python\d*[\\/]Lib[\\/]"
)


@dataclass
class _Block:
    """One exception of a chain while it is being read."""

    exception_type: str | None = None
    message: list[str] | None = None
    frames: list[Frame] | None = None
    more: int = 0  # Java "... N more": the last N frames equal those of the enclosing trace


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


def _parse_python(lines: list[str]) -> ParsedError | None:
    grouped = any(line.lstrip(" \t+|").startswith("Exception Group Traceback") for line in lines)
    chain: list[_Block] = []
    current = _Block()
    state, after_separator, indent = "idle", False, 0
    for raw in lines:
        line = raw
        if grouped:
            if _PY_GROUP_RULE.match(raw):
                state, after_separator = "idle", True
                continue
            prefix = _PY_GROUP_LINE.match(raw)
            line = raw[prefix.end() :] if prefix else raw
        if _PY_HEADER.match(line):
            if not after_separator:
                chain = []  # an unrelated earlier traceback in the same log
            current = _Block(frames=[], message=[])
            chain.append(current)
            state, after_separator = "frames", False
            indent = len(line) - len(line.lstrip())  # a trace quoted in an indented log keeps its shape
        elif _PY_CHAIN.match(line):
            state, after_separator = "idle", True
        elif state == "frames":
            frame = _PY_FILE.match(line)
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
            current = _Block(exception["type"], [exception["msg"] or ""], [])
            chain.append(current)
            state, after_separator = "message", False
    if not chain:
        return None
    groups = [b for b in chain if re.search(r"\(\d+ sub-exceptions?\)\s*$", (b.message or [""])[0])]
    main = groups[0] if grouped and groups else chain[-1]
    with_frames = [b for b in chain if b.frames]
    frames = main.frames or (with_frames[-1].frames if with_frames else [])
    causes = tuple(_describe(b.exception_type, "\n".join(b.message)) for b in chain if b is not main)
    return ParsedError(
        "python", main.exception_type, "\n".join(main.message), tuple(reversed(frames)), causes
    )


# --- Java / Kotlin -----------------------------------------------------------------------------------

_JAVA_FRAME = re.compile(r"\s+at (?P<qual>[^\s()]+)\((?P<loc>[^()]*)\)")
_JAVA_LOCATION = re.compile(
    r"(?:(?P<file>[\w$.\-]+\.[A-Za-z]+)|Unknown Source|Native Method|SourceFile|<generated>)"
    r"(?::(?P<line>\d+))?$"
)
_JAVA_MODULE = re.compile(r"(?:[\w.\-]*(?:@[\w.\-]+)?/){1,2}")  # "java.base/", "app//", "java.base@17/"
_JAVA_EXCEPTION = re.compile(
    r'\s*(?:Exception in thread "[^"]*" )?(?P<type>(?:[A-Za-z_$][\w$]*\.)*[A-Z][\w$]*)'
    r"(?::[ \t]?(?P<msg>.*))?$"
)
_JAVA_MORE = re.compile(r"\s+\.\.\. (?P<n>\d+) (?:more|common frames omitted)")
_JDK = ("java.", "javax.", "jdk.", "sun.", "com.sun.", "kotlin.", "kotlinx.", "scala.")


def _java_frame(line: str) -> Frame | None:
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


def _parse_java(lines: list[str]) -> ParsedError | None:
    first = next((i for i, line in enumerate(lines) if _java_frame(line)), None)
    if first is None:
        return None
    top = _nearest(lines, first, _java_header)
    header = _java_header(lines[top]) if top is not None else None
    current = _Block(header["type"] if header else None, [], [])
    if header:
        current.message = [header["msg"] or "", *lines[top + 1 : first]]
    sections, suppressed = [current], False
    for line in lines[first:]:
        frame = _java_frame(line)
        caused = line.lstrip().startswith("Caused by: ") and not (suppressed and line[:1] in " \t")
        if caused:
            exception = _java_header(line.lstrip()[len("Caused by: ") :])
            current = _Block(exception["type"] if exception else None, [], [])
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
    causes = tuple(_describe(s.exception_type, _continuation(s.message)) for s in sections[:-1])
    return ParsedError("java", root.exception_type, _continuation(root.message), tuple(frames), causes)


# --- JavaScript / Node -------------------------------------------------------------------------------

_JS_LOCATION = re.compile(r"(?P<file>.+):(?P<line>\d+):(?P<col>\d+)$")
_JS_BUILTIN_LOCATION = re.compile(r"native|<anonymous>|index \d+|eval at .*")
_JS_EXCEPTION = re.compile(
    r"\s*(?:Uncaught )?(?P<type>[A-Za-z_$][\w$.]*)(?: \[[\w.\-]+\])?(?::[ \t]?(?P<msg>.*))?$"
)
_JS_CAUSE = re.compile(r"\s*\[cause\]: (?P<text>.*)$")


def _js_frame(line: str) -> Frame | None:
    body = line.strip()
    if not body.startswith("at ") or line[:1] not in " \t":
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


def _parse_javascript(lines: list[str]) -> ParsedError | None:
    first = next((i for i, line in enumerate(lines) if _js_frame(line)), None)
    if first is None:
        return None
    top = _nearest(lines, first, _js_header)
    header = _js_header(lines[top]) if top is not None else None
    message = _continuation([header["msg"] or "", *lines[top + 1 : first]]) if header else ""
    frames = []
    for line in lines[first:]:
        frame = _js_frame(line)
        if not frame:
            break
        frames.append(frame)
    causes = tuple(m["text"].strip() for m in map(_JS_CAUSE.match, lines[first + len(frames) :]) if m)
    return ParsedError("javascript", header["type"] if header else None, message, tuple(frames), causes)


# --- Go ----------------------------------------------------------------------------------------------

_GO_PANIC = re.compile(r"\s*(?P<kind>panic|fatal error): (?P<msg>.*?)(?: \[recovered\])?$")
_GO_GOROUTINE = re.compile(r"goroutine \d+ \[[^\]]*\]:")
_GO_LOCATION = re.compile(r"\t(?P<file>[^\s:][^:]*(?::[\\/][^:]*)?):(?P<line>\d+)(?: \+0x[0-9a-fA-F]+)?")
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


def _parse_go(lines: list[str]) -> ParsedError | None:
    goroutine = next((i for i, line in enumerate(lines) if _GO_GOROUTINE.match(line)), None)
    panics: list[_Block] = []
    for line in lines[: goroutine if goroutine is not None else len(lines)]:
        panic = _GO_PANIC.match(line)
        if panic:
            panics.append(_Block(panic["kind"], [panic["msg"]]))
        elif panics and line.strip() and not line.startswith("[signal ") and len(panics[-1].message) < 50:
            panics[-1].message.append(line)  # a multi-line panic value
    start = goroutine + 1 if goroutine is not None else 0
    frames: list[Frame] = []
    first_call = None
    i = start
    while i + 1 < len(lines):
        call, location = lines[i], _GO_LOCATION.match(lines[i + 1])
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
        kind, message = main.exception_type, _continuation(main.message)
        causes = tuple(_describe(p.exception_type, _continuation(p.message)) for p in panics[:-1])
    else:  # github.com/pkg/errors "%+v": the error string, then its stack
        above = _nearest(lines, first_call, str.strip)
        kind, message, causes = None, lines[above].strip() if above is not None else "", ()
    return ParsedError("go", kind, message, tuple(frames), causes)


# --- .NET --------------------------------------------------------------------------------------------

_DOTNET_SIGNATURE = re.compile(r"(?P<name>[^\s(]+)\([^()]*\)")
_DOTNET_LOCATION = re.compile(r" in (?P<file>.+):line (?P<line>\d+)\s*$")
_DOTNET_EXCEPTION = re.compile(
    r"\s*(?:Unhandled [Ee]xception\.\s*)?(?P<type>(?:[A-Za-z_][\w`]*\.)+[A-Za-z_][\w`]*(?:\+[\w`]+)*)"
    r"(?::[ \t]?(?P<msg>.*))?$"
)
_DOTNET_STATE_MACHINE = re.compile(r"(?P<owner>.+)[.+]<(?P<name>\w+)>d__\d+")


def _dotnet_frame(line: str) -> Frame | None:
    body = line.strip()
    if not body.startswith("at ") or line[:1] not in " \t":
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


def _parse_dotnet(lines: list[str]) -> ParsedError | None:
    first = next((i for i, line in enumerate(lines) if _dotnet_frame(line)), None)
    if first is None:
        return None
    top = _nearest(lines, first, _dotnet_header)
    exceptions = []
    if top is not None:  # "Outer: msg\n ---> Inner: msg" (on one line before .NET Core)
        for segment in "\n".join(lines[top:first]).split("---> "):
            head, _, rest = segment.strip().partition("\n")
            match = _DOTNET_EXCEPTION.match(head)
            if match:
                exceptions.append((match["type"], _continuation([match["msg"] or "", *rest.split("\n")])))
            else:
                exceptions.append((None, _continuation(segment.split("\n"))))
    groups: list[list[Frame]] = [[]]
    for line in lines[first:]:
        frame = _dotnet_frame(line)
        marker = line.strip()
        if frame:
            groups[-1].append(frame)
        elif marker.startswith("--- End of inner exception stack trace"):
            groups.append([])  # the next frames belong to the enclosing exception
        elif not marker.startswith("--- End of stack trace from previous location"):
            break
    main_type, message = exceptions[-1] if exceptions else (None, "")
    causes = tuple(_describe(t, m) for t, m in exceptions[:-1])
    return ParsedError("dotnet", main_type, message, tuple(f for g in groups for f in g), causes)


# --- format detection --------------------------------------------------------------------------------

_PARSERS: dict[str, Callable[[list[str]], ParsedError | None]] = {
    "python": _parse_python,
    "java": _parse_java,
    "javascript": _parse_javascript,
    "go": _parse_go,
    "dotnet": _parse_dotnet,
}


def _vote(line: str) -> tuple[str, int] | None:
    """The format one line is evidence of, and how strong: a header outweighs a frame."""
    bare = line.lstrip(" \t|+")
    if bare.startswith(("Traceback (most recent", "Exception Group Traceback")) and _PY_HEADER.match(bare):
        return "python", 5
    if bare.startswith('File "') and _PY_FILE.match(bare):
        return "python", 1
    if line.startswith("goroutine ") and _GO_GOROUTINE.match(line):
        return "go", 5
    if line.startswith(("panic: ", "fatal error: ")):
        return "go", 2
    if bare.startswith("at "):  # before Go: "\tat Foo.bar(Foo.java:42)" also looks like "\tpath:line"
        for language, parse in (("java", _java_frame), ("dotnet", _dotnet_frame), ("javascript", _js_frame)):
            if parse(line):
                return language, 1
    if line.startswith("\t") and _GO_LOCATION.match(line):
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
