"""A stack trace as an application printed it -> one `ParsedError`, innermost frame first.

Five formats are read: CPython tracebacks, JVM (Java/Kotlin) traces, V8/Node stacks, Go panics (and
github.com/pkg/errors "%+v" stacks) and .NET exception strings. Anything else comes back with
`language=None` and a note; nothing here raises on bad input.

A trace is whatever a client posted, so it is cut to `MAX_TRACE_CHARS` before any work, every line to
`MAX_LINE_CHARS`, and every pattern is anchored to one line and runs in linear time.

The package has one module per language (python, java, javascript, go, dotnet), each with its `parse`;
`parse` detects the format and dispatches; `common` holds the result types and limits.
"""

from funnel.apps.triage.stacktrace.common import (
    MAX_TRACE_CHARS,
    UNKNOWN_FORMAT,
    Frame,
    ParsedError,
    owner_names,
)
from funnel.apps.triage.stacktrace.parse import parse_trace

__all__ = ["MAX_TRACE_CHARS", "UNKNOWN_FORMAT", "Frame", "ParsedError", "owner_names", "parse_trace"]
