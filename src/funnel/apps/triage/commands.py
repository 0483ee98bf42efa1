"""`funnel triage` and `funnel incidents`: the CLI side of triage (printing only; the work is the service's)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from funnel.apps.settings import Settings
from funnel.apps.state.incident_schema import MAX_TRACE_CHARS, ErrorReport
from funnel.apps.triage.build import build_triage
from funnel.apps.triage.service import TriageOutcome
from funnel.errors import ConfigError
from funnel.index import location_label

# Read at most this much of a trace file or stdin; parse_trace keeps its head and tail anyway.
MAX_READ_BYTES = 4 * MAX_TRACE_CHARS


def read_trace(source: str | None) -> str:
    """The trace text from a file, or stdin for "-" or no argument with piped input."""
    if source in (None, "-"):
        if source is None and sys.stdin.isatty():
            raise ConfigError("give a trace file, or pipe the trace on stdin (funnel triage --repo R < trace.txt)")
        data = sys.stdin.buffer.read(MAX_READ_BYTES)
    else:
        path = Path(source)
        if not path.is_file():
            raise ConfigError(f"{source} is not a file")
        try:
            with path.open("rb") as f:
                data = f.read(MAX_READ_BYTES)
        except OSError as e:
            raise ConfigError(f"cannot read {source}: {e.strerror}") from None
    return data.decode("utf-8", errors="replace")


def ingest_repo(settings: Settings, err: Console) -> None:
    """Bring the repository's index up to date (only changed files are re-embedded)."""
    from funnel.apps.factory import build_pipeline

    report = build_pipeline(settings).ingest([settings.triage.repo])
    err.print(f"index {location_label(settings.index)}: {report.added} added, {report.updated} updated, {report.unchanged} "
              f"unchanged, {report.removed} removed")
    for problem in report.problems[:5]:
        err.print(f"skipped {problem}")


def run_triage(settings: Settings, trace: str, message: str, service: str, slack: bool) -> TriageOutcome:
    report = ErrorReport(service=service, message=message[:10_000], stack_trace=trace)
    return build_triage(settings, slack=slack).triage(report)


def print_outcome(outcome: TriageOutcome, out: Console, err: Console, as_json: bool) -> None:
    result = outcome.result
    if as_json:
        data = result.model_dump(mode="json")
        data["incident_id"] = outcome.incident_id
        data["slack"] = outcome.delivery.status if outcome.delivery else None
        data["steps"] = outcome.steps.model_dump() if outcome.steps else None
        out.print_json(json.dumps(data))
        return
    title = f"{result.exception_type or 'error'}: {result.message}" if result.message else (result.exception_type or "error")
    out.print(f"{title[:300]}  (service {result.service}, fingerprint {result.fingerprint})")
    table = Table(title="files", title_justify="left")
    for column in ("rank", "file", "lines", "signals", "frames"):
        table.add_column(column, overflow="fold")
    for f in result.files:
        lines = f"{f.line_start}-{f.line_end}" if f.line_start else ""
        table.add_row(str(f.rank), f.path, lines, ",".join(f.signals), ", ".join(f.frames[:3]))
    out.print(table)
    if result.analysis is not None:
        a = result.analysis
        out.print(f"summary: {a.summary}")
        out.print(f"root cause: {a.root_cause}")
        for s in a.suspected_files:
            out.print(f"  - {s.path}:{s.line_start or ''}-{s.line_end or ''} {s.reason}")
        out.print(f"fix: {a.fix_suggestion}")
        out.print(f"confidence: {a.confidence:.2f}")
    reason = f" ({result.analysis_reason})" if result.analysis_reason else ""
    err.print(f"analysis: {result.analysis_status.value}{reason}")
    for note in result.notes:
        err.print(f"note: {note}")
    if outcome.delivery is not None:
        err.print(f"slack: {outcome.delivery.status} {outcome.delivery.detail}".rstrip())
    if outcome.incident_id is not None:
        err.print(f"incident #{outcome.incident_id}")


def print_incidents(settings: Settings, limit: int, service: str | None, out: Console, as_json: bool) -> None:
    """The incidents `funnel serve` recorded: in the service database when one is set, else the SQLite file."""
    from funnel.apps.state.db import Database
    from funnel.apps.state.incidents import open_incidents

    url = settings.database.url
    db = Database(url.get_secret_value()) if url is not None else None
    try:
        incidents = open_incidents(db, settings.triage.incidents).list(limit=limit, service=service)
    finally:
        if db is not None:
            db.close()
    where = db.label if db is not None else settings.triage.incidents
    if as_json:
        out.print_json(json.dumps([
            {"id": i.id, "created_at": i.created_at, "service": i.service, "exception_type": i.exception_type,
             "message": i.message, "fingerprint": i.fingerprint, "analysis_status": i.analysis_status,
             "slack_status": i.slack_status, "steps": i.steps().model_dump()}
            for i in incidents
        ]))
        return
    if not incidents:
        out.print(f"no incidents in {where}")
        return
    table = Table(title=f"incidents ({where})", title_justify="left")
    for column in ("id", "when", "service", "error", "fingerprint", "analysis", "slack"):
        table.add_column(column, overflow="fold")
    for i in incidents:
        error = f"{i.exception_type or ''}: {i.message}"[:120]
        analysis = i.analysis_status if i.analysis_step in ("done", "skipped") else i.analysis_step  # queued, failed
        table.add_row(str(i.id), i.created_at, i.service, error, i.fingerprint, analysis, i.slack_status or "")
    out.print(table)
