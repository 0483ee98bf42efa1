"""What an incident is made of, the wire shapes of triage: the error an application reports, the result
triage makes of it (its ranked files and the LLM's analysis), and where its slow steps stand.

Triage (`funnel.apps.triage`) makes them and the incident store (`funnel.apps.state.incidents`) keeps them,
so they live here, below both. Pydantic models, because both cross a boundary: the report arrives as JSON
over HTTP, and the analysis is JSON an LLM writes and funnel must validate before anything trusts it.
"""

from __future__ import annotations

from enum import Enum, StrEnum

from pydantic import BaseModel, ConfigDict, Field

MAX_TRACE_CHARS = 200_000  # a longer trace is cut (and says so); its top and bottom carry the signal
MAX_MESSAGE_CHARS = 10_000


class ErrorReport(BaseModel):
    """An error as an application reports it (`POST /v1/errors`, `funnel triage`)."""

    model_config = ConfigDict(extra="forbid")

    service: str = Field(default="unknown", max_length=200)
    message: str = Field(default="", max_length=MAX_MESSAGE_CHARS)
    stack_trace: str = ""
    context: dict[str, str] = Field(default_factory=dict)


class SuspectedFile(BaseModel):
    path: str
    line_start: int | None = None
    line_end: int | None = None
    reason: str = ""


class Analysis(BaseModel):
    """What the LLM must return (validated; anything else is rejected and retried or dropped)."""

    summary: str
    root_cause: str
    suspected_files: list[SuspectedFile] = Field(default_factory=list)
    fix_suggestion: str = ""
    confidence: float = Field(ge=0.0, le=1.0)


class AnalysisStatus(str, Enum):
    OK = "ok"
    LLM_UNAVAILABLE = "llm_unavailable"  # no LLM configured or reachable: ranked files only
    INVALID = "invalid"  # the LLM answered, but never with JSON that fits `Analysis`
    QUEUED = "queued"  # not analysed yet: a worker will (`POST /v1/errors` answers before the analysis)


class RankedFile(BaseModel):
    """A repository file as triage ranked it, with the evidence."""

    path: str
    rank: int
    score: float
    signals: list[str] = Field(default_factory=list)  # "frame", "symbol", "search"
    frames: list[str] = Field(default_factory=list)  # "UserService.get_user:42" of the trace frames in it
    excerpt: str = ""
    line_start: int | None = None
    line_end: int | None = None


class TriageResult(BaseModel):
    service: str
    exception_type: str | None
    message: str
    fingerprint: str
    files: list[RankedFile]
    analysis: Analysis | None = None
    analysis_status: AnalysisStatus
    analysis_reason: str = ""
    notes: list[str] = Field(default_factory=list)


class StepState(StrEnum):
    """Where one step of an incident stands: the analysis, or the Slack message (whose outcome, once it ran,
    is its `DeliveryStatus`: sent, deduplicated, rate_limited, failed)."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    INTERRUPTED = "interrupted"  # its process stopped, and its jobs with it (the embedded server's queue)
    SKIPPED = "skipped"  # nothing to do: no Slack webhook configured


UNFINISHED = (StepState.QUEUED.value, StepState.RUNNING.value)


class Step(BaseModel):
    status: str  # a StepState, or for Slack what became of the message
    detail: str = ""  # why it failed, what Slack said, or how many tries it took


class TriageSteps(BaseModel):
    """An incident's slow steps, which run after `POST /v1/errors` has answered."""

    analysis: Step
    slack: Step

    @property
    def finished(self) -> bool:
        return self.analysis.status not in UNFINISHED and self.slack.status not in UNFINISHED
