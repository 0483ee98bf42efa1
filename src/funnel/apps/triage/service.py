"""One error report, end to end: parse -> locate files -> analyse -> store the incident -> notify Slack.

Shared by `POST /v1/errors` and `funnel triage`. Every later step is optional (no LLM, no Slack, no
incident store) and none of them can make the earlier ones fail: a report always gets its ranked files.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from funnel.apps.triage.agent import AgentLimits, RepoTools, analyse
from funnel.apps.triage.frames import fingerprint
from funnel.apps.triage.locate import FileLocator, LocateConfig
from funnel.apps.triage.redact import redact
from funnel.apps.triage.schema import AnalysisStatus, ErrorReport, TriageResult
from funnel.apps.triage.stacktrace import parse_trace
from funnel.errors import StoreError
from funnel.generate.chat import ChatModel
from funnel.pipeline import Pipeline

if TYPE_CHECKING:  # optional parts: the service runs without them
    from funnel.apps.triage.incidents import Incidents
    from funnel.apps.triage.slack import Delivery, SlackNotifier

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TriageOutcome:
    result: TriageResult
    incident_id: int | None = None
    delivery: Delivery | None = None
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
        parsed = parse_trace(report.stack_trace, report.message)
        locator = self.locator()
        found = locator.locate(parsed, report.message or parsed.message)
        notes = list(parsed.notes) + found.notes
        if found.rerank_status.value == "fallback":
            notes.append(f"reranker fell back to first-stage order: {found.rerank_reason}")
        analysis, status, reason, tool_calls = None, AnalysisStatus.LLM_UNAVAILABLE, "no LLM configured", []
        if self.chat is not None:
            error_text = "\n".join(p for p in (report.message, report.stack_trace) if p)
            run = analyse(self.chat, RepoTools(locator, self.repo_root), error_text, found.files, self.limits)
            analysis, status, reason, tool_calls = run.analysis, run.status, run.reason, run.tool_calls
        result = TriageResult(
            service=report.service,
            exception_type=parsed.exception_type,
            message=redact(parsed.message or report.message)[:2000],
            fingerprint=fingerprint(parsed),
            files=found.files,
            analysis=analysis,
            analysis_status=status,
            analysis_reason=reason,
            notes=notes,
        )
        incident_id = None
        if self.incidents is not None:
            try:
                incident_id = self.incidents.record(report, result)
            except StoreError as e:  # the report still gets its files and its Slack message
                log.warning("incident not stored: %s", e)
                result = result.model_copy(update={"notes": [*result.notes, f"incident not stored: {e}"]})
        delivery = None
        if self.notifier is not None:
            delivery = self.notifier.notify(result)
            if self.incidents is not None and incident_id is not None:
                try:
                    self.incidents.set_delivery(incident_id, delivery)
                except StoreError as e:
                    log.warning("incident %s: delivery status not stored: %s", incident_id, e)
        return TriageOutcome(result, incident_id, delivery, tool_calls)
