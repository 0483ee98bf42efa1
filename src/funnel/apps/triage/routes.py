"""Triage over HTTP: `POST /v1/errors` (an application reports an error), `GET /v1/incidents[/{id}]`.

Routes are plain `def`: FastAPI runs them in its threadpool, and the service's stages are synchronous.
"""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel

from funnel.apps.triage.schema import ErrorReport, TriageResult
from funnel.apps.triage.service import TriageService
from funnel.errors import BackendUnavailable, ConfigError, NotFound


class ErrorResponse(BaseModel):
    incident_id: int | None
    slack: str | None  # sent | deduplicated | rate_limited | failed | None (no webhook)
    result: TriageResult


class IncidentSummary(BaseModel):
    id: int
    created_at: str
    service: str
    exception_type: str | None
    message: str
    fingerprint: str
    analysis_status: str
    slack_status: str | None


class IncidentDetail(IncidentSummary):
    slack_detail: str | None
    result: dict


def configured_triage(request: Request) -> TriageService:
    service = getattr(request.app.state, "triage", None)
    if service is None:
        raise BackendUnavailable("triage is not configured: start funnel serve with FUNNEL_REPO (or repo in "
                                 "funnel.toml) naming the repository to triage")
    return service


TriageDep = Annotated[TriageService, Depends(configured_triage)]
router = APIRouter(tags=["triage"])


@router.post("/v1/errors", response_model=ErrorResponse)
def report_error(report: ErrorReport, triage: TriageDep) -> ErrorResponse:
    """Rank the repository's files for this error, analyse them (LLM, if configured), record the incident
    and notify Slack (if configured). Without an LLM the files come back with `analysis_status`
    "llm_unavailable"."""
    if not report.message.strip() and not report.stack_trace.strip():
        raise ConfigError("the report has neither a message nor a stack_trace")
    outcome = triage.triage(report)
    return ErrorResponse(
        incident_id=outcome.incident_id,
        slack=outcome.delivery.status if outcome.delivery else None,
        result=outcome.result,
    )


def _summary(incident) -> dict:
    return {name: getattr(incident, name) for name in IncidentSummary.model_fields}


@router.get("/v1/incidents", response_model=list[IncidentSummary])
def list_incidents(
    triage: TriageDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    service: str | None = None,
    fingerprint: str | None = None,
) -> list[IncidentSummary]:
    store = triage.incidents
    if store is None:
        return []
    return [IncidentSummary(**_summary(i)) for i in store.list(limit=limit, service=service, fingerprint=fingerprint)]


@router.get("/v1/incidents/{incident_id}", response_model=IncidentDetail)
def get_incident(incident_id: int, triage: TriageDep) -> IncidentDetail:
    incident = triage.incidents.get(incident_id) if triage.incidents else None
    if incident is None:
        raise NotFound(f"no incident {incident_id}")
    return IncidentDetail(**_summary(incident), slack_detail=incident.slack_detail,
                          result=json.loads(incident.result_json))
