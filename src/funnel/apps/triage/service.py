"""One error report, end to end: parse -> locate files -> analyse -> store the incident -> notify Slack.

The steps are separate calls because they run at two speeds: ranking the files takes a moment, the analysis
(an LLM agent) and Slack can take minutes. `funnel triage` and MCP run them all in one call (`triage`);
`POST /v1/errors` ranks, records and answers, and a queue worker does the rest (`funnel.apps.triage.queue`).
Every later step is optional (no LLM, no Slack, no incident store) and none of them can make the earlier
ones fail: a report always gets its ranked files.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from funnel.apps.state.incident_rows import IncidentChange
from funnel.apps.state.incident_schema import (AnalysisStatus, ErrorReport, Step, StepState, TriageResult,
                                               TriageSteps)
from funnel.apps.state.redact import redact
from funnel.apps.triage.agent import AgentLimits, RepoTools, analyse
from funnel.apps.triage.frames import fingerprint
from funnel.apps.triage.locate import FileLocator, LocateConfig
from funnel.apps.triage.stacktrace import parse_trace
from funnel.errors import StoreError
from funnel.generate.chat import ChatModel
from funnel.pipeline import Pipeline

if TYPE_CHECKING:  # optional parts: the service runs without them
    from funnel.apps.state.alerts import Delivery
    from funnel.apps.state.incidents import Incidents
    from funnel.apps.triage.slack import SlackNotifier

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TriageOutcome:
    result: TriageResult
    incident_id: int | None = None
    delivery: Delivery | None = None
    tool_calls: list[str] = field(default_factory=list)
    steps: TriageSteps | None = None  # where the analysis and the Slack message stand


@dataclass(frozen=True)
class Analysed:
    result: TriageResult  # the ranked result with the analysis, or the reason there is none
    step: Step  # done; failed (the model could not be asked: a later try may succeed); skipped (no LLM)
    tool_calls: list[str] = field(default_factory=list)


class TriageService:
    def __init__(
        self,
        pipeline: Pipeline,
        repo_root: Path | None = None,
        chat: ChatModel | None = None,
        notifier: SlackNotifier | None = None,
        incidents: Incidents | None = None,
        locate_config: LocateConfig | None = None,
        limits: AgentLimits | None = None,
    ):
        self.pipeline = pipeline
        self.repo_root = repo_root
        self.chat = chat
        self.notifier = notifier
        self.incidents = incidents
        self.locate_config = locate_config or LocateConfig()
        self.limits = limits or AgentLimits()
        self._lock = threading.Lock()
        self._locator: tuple[int, FileLocator] | None = None

    def locator(self) -> FileLocator:
        """The file locator of the index's current version (its symbol table is rebuilt after an ingest)."""
        info = self.pipeline.store.info()
        if info is None:
            raise StoreError("the repository is not indexed: run `funnel ingest REPO --index DIR` first")
        with self._lock:
            if self._locator is None or self._locator[0] != info.version:
                self._locator = (info.version, FileLocator(self.pipeline, self.locate_config, self.repo_root))
            return self._locator[1]

    def triage(self, report: ErrorReport) -> TriageOutcome:
        """Every step in this call (`funnel triage`, MCP): the outcome carries the analysis."""
        return self.finish(report, self.rank(report))

    def rank(self, report: ErrorReport) -> TriageResult:
        """The repository's files ranked for the report, with what parsing and ranking noticed; the analysis
        is still to come (`analysis_status` queued)."""
        parsed = parse_trace(report.stack_trace, report.message)
        found = self.locator().locate(parsed, report.message or parsed.message)
        notes = list(parsed.notes) + found.notes
        if found.rerank_status.value == "fallback":
            notes.append(f"reranker fell back to first-stage order: {found.rerank_reason}")
        return TriageResult(
            service=report.service,
            exception_type=parsed.exception_type,
            message=redact(parsed.message or report.message)[:2000],
            fingerprint=fingerprint(parsed),
            files=found.files,
            analysis_status=AnalysisStatus.QUEUED,
            notes=notes,
        )

    def analyse(self, report: ErrorReport, ranked: TriageResult, stop: threading.Event | None = None) -> Analysed:
        """The agent's analysis of the ranked files; never raises for model trouble (the step says it)."""
        if self.chat is None:
            unanalysed = ranked.model_copy(update={"analysis_status": AnalysisStatus.LLM_UNAVAILABLE,
                                                   "analysis_reason": "no LLM configured"})
            return Analysed(unanalysed, Step(status=StepState.SKIPPED, detail="no LLM configured"))
        error_text = "\n".join(p for p in (report.message, report.stack_trace) if p)
        tools = RepoTools(self.locator(), self.repo_root)
        run = analyse(self.chat, tools, error_text, ranked.files, self.limits, stop)
        result = ranked.model_copy(update={"analysis": run.analysis, "analysis_status": run.status,
                                           "analysis_reason": run.reason})
        if run.failed:
            step = Step(status=StepState.FAILED, detail=run.reason)
        elif run.analysis is None and run.status is AnalysisStatus.LLM_UNAVAILABLE:  # a model without tools
            step = Step(status=StepState.SKIPPED, detail=run.reason)
        else:
            step = Step(status=StepState.DONE)
        return Analysed(result, step, run.tool_calls)

    def finish(self, report: ErrorReport, ranked: TriageResult, incident_id: int | None = None) -> TriageOutcome:
        """The slow steps in this call: analyse, record the incident (or update `incident_id`'s), notify."""
        analysed = self.analyse(report, ranked)
        slack = Step(status=StepState.QUEUED if self.notifier else StepState.SKIPPED)
        steps = TriageSteps(analysis=analysed.step, slack=slack)
        if incident_id is None:
            incident_id, result = self.record(report, analysed.result, steps)
        else:
            result = analysed.result
            change = IncidentChange(result=result, analysis_step=analysed.step.status,
                                    analysis_error=analysed.step.detail, slack_status=slack.status)
            self.quietly(lambda: self.incidents.update(incident_id, change), incident_id, "analysis")
        delivery = self.notify(incident_id, result)
        if delivery is not None:
            slack = Step(status=delivery.status, detail=delivery.detail)
        steps = TriageSteps(analysis=analysed.step, slack=slack)
        return TriageOutcome(result, incident_id, delivery, analysed.tool_calls, steps)

    def record(
        self, report: ErrorReport, result: TriageResult, steps: TriageSteps
    ) -> tuple[int | None, TriageResult]:
        """The new incident's id, or None (no store, or it failed: a note on the result, not an error)."""
        if self.incidents is None:
            return None, result
        try:
            return self.incidents.record(report, result, steps), result
        except StoreError as e:  # the report still gets its files and its Slack message
            log.warning("incident not stored: %s", e)
            return None, result.model_copy(update={"notes": [*result.notes, f"incident not stored: {e}"]})

    def notify(self, incident_id: int | None, result: TriageResult) -> Delivery | None:
        """Posts to Slack when a webhook is configured, and records on the incident what became of it."""
        if self.notifier is None:
            return None
        delivery = self.notifier.notify(result)
        if incident_id is not None:
            self.quietly(lambda: self.incidents.set_delivery(incident_id, delivery), incident_id,
                         "delivery status")
        return delivery

    def quietly(self, write: Callable[[], None], incident_id: int, what: str) -> None:
        """A write to the incident whose failure is logged, not raised: the step's work is done already."""
        try:
            write()
        except StoreError as e:
            log.warning("incident %s: %s not stored: %s", incident_id, what, e)
