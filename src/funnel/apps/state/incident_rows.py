"""An incident as both incident stores keep it (`funnel.apps.state.incidents`: an SQLite file, or the
service database): its table, its columns, the row a report and its result become, and the queries both
run, so that both store the same redacted, bounded incident.

What is written is redacted first (`redact_obj`): no secret of a report or an analysis reaches the disk.
Sizes are bounded: a stack trace over `MAX_TRACE_CHARS` keeps its top and bottom around a marker, the
message is cut to `MAX_MESSAGE_CHARS`, ranked-file excerpts to a few thousand characters.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from datetime import UTC, datetime

from funnel.apps.state.alerts import Delivery
from funnel.apps.state.incident_schema import (
    MAX_MESSAGE_CHARS,
    MAX_TRACE_CHARS,
    UNFINISHED,
    ErrorReport,
    Step,
    StepState,
    TriageResult,
    TriageSteps,
)
from funnel.apps.state.redact import redact, redact_obj

MAX_LIST = 1000
_DETAIL_CHARS = 1000
_EXCERPT_CHARS = 4000
_MAX_FILES = 50
_MAX_NOTES = 50

# Version 2, in both stores: where the analysis stands (the Slack message's in slack_status), and the job.
STEP_COLUMNS = (
    ("analysis_step", "text NOT NULL DEFAULT 'done'"),  # a StepState; rows from before were analysed at once
    ("analysis_error", "text"),  # why the analysis failed, or the failed tries before it succeeded
    ("job_id", "bigint"),  # the queue's job doing the steps (funnel.apps.triage.queue)
)


def schema_v1(table: str, id_column: str, seconds_type: str) -> tuple[str, ...]:
    """The statements that made version 1 of the incidents `table` (the step columns came with version 2),
    with the dialect's `id_column` and type of Unix seconds."""
    return (
        f"""CREATE TABLE {table} (
        {id_column},
        created_at text NOT NULL,               -- UTC, ISO 8601
        created_ts {seconds_type} NOT NULL,     -- the same instant in Unix seconds, for count_since
        service text NOT NULL,
        exception_type text,
        message text NOT NULL,
        fingerprint text NOT NULL,
        analysis_status text NOT NULL,
        report_json text NOT NULL,              -- the redacted ErrorReport
        result_json text NOT NULL,              -- the redacted TriageResult
        slack_status text,                      -- NULL until set_delivery
        slack_detail text
    )""",
        f"CREATE INDEX {table}_by_fingerprint ON {table} (fingerprint, created_ts)",
        f"CREATE INDEX {table}_by_service ON {table} (service, id)",
    )


COLUMNS = (  # in the order of Incident's fields
    "id, created_at, service, exception_type, message, fingerprint, analysis_status, result_json, "
    "slack_status, slack_detail, report_json, analysis_step, analysis_error, job_id"
)
INSERT_COLUMNS = (  # in the order of incident_row's values
    "created_at, created_ts, service, exception_type, message, fingerprint, analysis_status, report_json, "
    "result_json, analysis_step, analysis_error, slack_status, slack_detail"
)


@dataclass(frozen=True)
class Incident:
    """One stored incident (already redacted). `slack_status` is None when no message was asked for, else
    the Slack step's status (queued, running, then what became of the message)."""

    id: int
    created_at: str
    service: str
    exception_type: str | None
    message: str
    fingerprint: str
    analysis_status: str
    result_json: str
    slack_status: str | None
    slack_detail: str | None
    report_json: str = ""
    analysis_step: str = StepState.DONE.value
    analysis_error: str | None = None
    job_id: int | None = None

    @property
    def unfinished(self) -> bool:
        return self.analysis_step in UNFINISHED or self.slack_status in UNFINISHED

    def steps(self) -> TriageSteps:
        return TriageSteps(
            analysis=Step(status=self.analysis_step, detail=self.analysis_error or ""),
            slack=Step(status=self.slack_status or StepState.SKIPPED.value, detail=self.slack_detail or ""),
        )

    def result(self) -> TriageResult:
        return TriageResult.model_validate_json(self.result_json)

    def report(self) -> ErrorReport:
        return ErrorReport.model_validate_json(self.report_json)


@dataclass(frozen=True)
class IncidentChange:
    """What a step writes on an incident; a field left None is left as it is ("" clears an error)."""

    result: TriageResult | None = None  # the analysed result (its analysis_status too)
    analysis_step: str | None = None
    analysis_error: str | None = None
    slack_status: str | None = None
    slack_detail: str | None = None
    job_id: int | None = None


def incident_row(
    report: ErrorReport, result: TriageResult, ts: float, steps: TriageSteps | None = None
) -> tuple:
    """The values of INSERT_COLUMNS for one incident at Unix time `ts`: redacted first, then bounded. Without
    `steps`: analysed, and no Slack message asked for yet (`set_delivery` records one)."""
    report = _bounded_report(redact_obj(report))
    result = _bounded_result(redact_obj(result))
    created_at = datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")
    return (
        created_at,
        ts,
        result.service,
        result.exception_type,
        report.message or result.message,
        result.fingerprint,
        result.analysis_status.value,
        report.model_dump_json(),
        result.model_dump_json(),
        *(_step_values(steps) if steps else (StepState.DONE.value, None, None, None)),
    )


def _step_values(steps: TriageSteps) -> tuple:
    """(analysis_step, analysis_error, slack_status, slack_detail), the details redacted and cut."""
    return (steps.analysis.status, redact(steps.analysis.detail)[:_DETAIL_CHARS] or None,
            steps.slack.status, redact(steps.slack.detail)[:_DETAIL_CHARS] or None)


def delivery_change(delivery: Delivery) -> IncidentChange:
    """What became of the incident's Slack message, as its Slack step."""
    return IncidentChange(slack_status=str(delivery.status), slack_detail=delivery.detail)


def update_query(
    table: str, mark: str, incident_id: int, change: IncidentChange
) -> tuple[str, builtins.list]:
    """`update`'s UPDATE on `table` with the driver's parameter `mark`, and its arguments: what is written is
    redacted and bounded as `record` writes it."""
    values: dict[str, object] = {}
    if change.result is not None:
        result = _bounded_result(redact_obj(change.result))
        values.update(result_json=result.model_dump_json(), analysis_status=result.analysis_status.value)
    for name in ("analysis_step", "slack_status", "job_id"):
        if (value := getattr(change, name)) is not None:
            values[name] = value if name == "job_id" else str(value)
    for name in ("analysis_error", "slack_detail"):
        if (value := getattr(change, name)) is not None:
            values[name] = redact(value)[:_DETAIL_CHARS]
    if not values:
        return f"UPDATE {table} SET job_id = job_id WHERE id = {mark}", [incident_id]
    sets = ", ".join(f"{name} = {mark}" for name in values)
    return f"UPDATE {table} SET {sets} WHERE id = {mark}", [*values.values(), incident_id]


def interrupt_query(table: str, mark: str, detail: str) -> tuple[str, builtins.list]:
    """`interrupt`'s UPDATE (every SET reads the row as it was, in SQLite as in PostgreSQL)."""
    pending = f"IN ({', '.join(repr(state) for state in UNFINISHED)})"
    sql = (
        f"UPDATE {table} SET "
        f"analysis_error = CASE WHEN analysis_step {pending} THEN {mark} ELSE analysis_error END, "
        f"analysis_step = CASE WHEN analysis_step {pending} THEN 'interrupted' ELSE analysis_step END, "
        f"slack_detail = CASE WHEN slack_status {pending} THEN {mark} ELSE slack_detail END, "
        f"slack_status = CASE WHEN slack_status {pending} THEN 'interrupted' ELSE slack_status END "
        f"WHERE analysis_step {pending} OR slack_status {pending}"
    )
    detail = redact(detail)[:_DETAIL_CHARS]
    return sql, [detail, detail]


def list_query(
    table: str, mark: str, limit: int, service: str | None, fingerprint: str | None
) -> tuple[str, builtins.list]:
    """`list`'s SELECT on `table` with the driver's parameter `mark` ("?" or "%s"), and its arguments."""
    where, args = [], []
    if service is not None:
        where.append(f"service = {mark}")
        args.append(service)
    if fingerprint is not None:
        where.append(f"fingerprint = {mark}")
        args.append(fingerprint)
    sql = f"SELECT {COLUMNS} FROM {table}"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += f" ORDER BY id DESC LIMIT {mark}"
    args.append(max(0, min(int(limit), MAX_LIST)))
    return sql, args


def _bounded_report(report: ErrorReport) -> ErrorReport:
    return report.model_copy(
        update={
            "stack_trace": _bounded_trace(report.stack_trace),
            "message": report.message[:MAX_MESSAGE_CHARS],
        }
    )


def _bounded_trace(trace: str, limit: int = MAX_TRACE_CHARS) -> str:
    """A trace of at most `limit` characters: its top three quarters and its bottom, around a marker."""
    if len(trace) <= limit:
        return trace
    marker = f"\n… [{len(trace):,} characters; the middle is cut] …\n"
    head = limit * 3 // 4
    tail = limit - head - len(marker)
    return trace[:head] + marker + trace[len(trace) - tail :]


def _bounded_result(result: TriageResult) -> TriageResult:
    files = [f.model_copy(update={"excerpt": f.excerpt[:_EXCERPT_CHARS]}) for f in result.files[:_MAX_FILES]]
    return result.model_copy(
        update={
            "message": result.message[:MAX_MESSAGE_CHARS],
            "files": files,
            "notes": result.notes[:_MAX_NOTES],
            "analysis_reason": result.analysis_reason[:_DETAIL_CHARS],
        }
    )
