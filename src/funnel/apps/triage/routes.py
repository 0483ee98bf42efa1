"""Triage over HTTP: `POST /v1/errors` (an application reports an error), `GET /v1/incidents[/{id}]`.

`POST /v1/errors` answers once the files are ranked and the incident recorded; the analysis and the Slack
message follow on the job queue's workers (`funnel.apps.triage.queue`), and the incident's `steps` say where
each stands. Routes are plain `def`: FastAPI runs them in its threadpool, and the service's stages are
synchronous.
"""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request
from pydantic import BaseModel

from funnel.apps.state.incident_schema import ErrorReport, StepState, TriageResult, TriageSteps
from funnel.apps.triage.queue import TriageQueue
from funnel.errors import BackendUnavailable, ConfigError, NotFound


class ErrorResponse(BaseModel):
    incident_id: int | None
    slack: str | None  # queued, or once sent: sent | deduplicated | rate_limited | failed; None: no webhook
    steps: TriageSteps | None  # the analysis's and the Slack message's: queued until a worker takes them
    result: TriageResult  # the ranked files; analysis_status "queued" until the analysis step is done


class IncidentSummary(BaseModel):
    id: int
    created_at: str
    service: str
    exception_type: str | None
    message: str
    fingerprint: str
    analysis_status: str
    slack_status: str | None
    steps: TriageSteps


class IncidentDetail(IncidentSummary):
    slack_detail: str | None
    result: dict


def configured_triage(request: Request) -> TriageQueue:
    queue = getattr(request.app.state, "triage_queue", None)
    if queue is None:
        raise BackendUnavailable("triage is not configured: start funnel serve with FUNNEL_TRIAGE__REPO (or repo in "
                                 "funnel.toml) naming the repository to triage")
    return queue


TriageDep = Annotated[TriageQueue, Depends(configured_triage)]
MAX_ID = 2**63 - 1  # incident ids are 64-bit in SQLite and PostgreSQL; a larger one was a 500 (issue 40)
router = APIRouter(tags=["triage"])


@router.post("/v1/errors", response_model=ErrorResponse)
def report_error(report: ErrorReport, triage: TriageDep) -> ErrorResponse:
    """Rank the repository's files for this error and record the incident; answer with both at once. The
    analysis (LLM, if configured) and the Slack message (if configured) are queued: `GET
    /v1/incidents/{incident_id}` shows their steps, and the analysis once it is done."""
    if not report.message.strip() and not report.stack_trace.strip():
        raise ConfigError("the report has neither a message nor a stack_trace")
    outcome = triage.submit(report)
    slack = outcome.steps.slack.status if outcome.steps else None
    return ErrorResponse(
        incident_id=outcome.incident_id,
        slack=None if slack == StepState.SKIPPED else slack,
        steps=outcome.steps,
        result=outcome.result,
    )


def _summary(incident, triage: TriageQueue) -> dict:
    fields = {name: getattr(incident, name) for name in IncidentSummary.model_fields if name != "steps"}
    return {**fields, "steps": triage.steps(incident)}


@router.get("/v1/incidents", response_model=list[IncidentSummary])
def list_incidents(
    triage: TriageDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    service: str | None = None,
    fingerprint: str | None = None,
) -> list[IncidentSummary]:
    store = triage.service.incidents
    if store is None:
        return []
    listed = store.list(limit=limit, service=service, fingerprint=fingerprint)
    return [IncidentSummary(**_summary(i, triage)) for i in listed]


@router.get("/v1/incidents/{incident_id}", response_model=IncidentDetail)
def get_incident(incident_id: Annotated[int, Path(ge=1, le=MAX_ID)], triage: TriageDep) -> IncidentDetail:
    store = triage.service.incidents
    incident = store.get(incident_id) if store else None
    if incident is None:
        raise NotFound(f"no incident {incident_id}")
    return IncidentDetail(**_summary(incident, triage), slack_detail=incident.slack_detail,
                          result=json.loads(incident.result_json))
