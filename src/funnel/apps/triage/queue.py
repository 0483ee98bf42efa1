"""Triage's slow steps on the job queue: `POST /v1/errors` ranks the files, records the incident with its
steps queued, queues one job and answers; a worker (a thread of `funnel serve`, or `funnel worker`) then
runs the analysis and posts to Slack, writing each step's progress on the incident.

One job per incident, in a lane of its own (`triage:ID`), so incidents are analysed side by side while
each incident's steps run once at a time. The job does what its incident still lists as queued or running,
so a job taken again (its worker died, its lease ran out) picks up where the last try stopped: an analysis
done is not asked for again, only the Slack message is still to go.

A model that cannot be reached fails the try (the queue tries again after a pause) until the last try,
which records the analysis as failed with its error and still posts the ranked files to Slack: an on-call
engineer would rather get the alert without the analysis than none.

The embedded server's queue (`EmbeddedJobs`) dies with its process: `start` marks what such a process left
queued or running as interrupted. The database's queue (`PostgresJobs`) outlives it: another process's worker
takes the job. A job that ended without finishing its steps (its worker died on the last try) shows its
error in `steps`.
"""

from __future__ import annotations

import logging
import threading

from funnel.apps.state.incident_rows import Incident, IncidentChange
from funnel.apps.state.incident_schema import (UNFINISHED, ErrorReport, Step, StepState, TriageResult,
                                               TriageSteps)
from funnel.apps.state.jobs import Job, JobState
from funnel.apps.state.jobs_workers import Lease, Permanent, Queue
from funnel.apps.triage.service import TriageOutcome, TriageService
from funnel.errors import StoreError

TRIAGE = "triage"  # the job kind
INTERRUPTED = "the server stopped before this step finished (its queue was in memory); post the error again"
log = logging.getLogger(__name__)


class AnalysisFailed(Exception):
    """This try's model call failed; the queue tries again after a pause."""


class TriageQueue:
    """`service`'s slow steps as jobs on `queue` (whose workers run `run` for the kind TRIAGE)."""

    def __init__(self, service: TriageService, queue: Queue):
        self.service = service
        self.queue = queue

    @property
    def _max_tries(self) -> int:
        return self.queue.jobs.max_attempts

    def start(self) -> None:
        """At a server's start: steps its process's predecessor left behind in a queue that died with it are
        marked interrupted, so that none says queued for ever."""
        if self.queue.jobs.durable or self.service.incidents is None:
            return
        try:
            if count := self.service.incidents.interrupt(INTERRUPTED):
                log.warning("%d incident(s) left unfinished by the last run are marked interrupted", count)
        except StoreError as e:
            log.warning("could not mark unfinished incidents as interrupted: %s", e)

    # --- the request's side -----------------------------------------------------------------------------

    def submit(self, report: ErrorReport) -> TriageOutcome:
        """The ranked files and the new incident, its analysis and Slack message queued. Without an incident
        to hang them on (no store, or it failed), the steps run here, as `funnel triage` runs them."""
        service = self.service
        ranked = service.rank(report)
        if service.incidents is None:
            return service.finish(report, ranked)
        steps = TriageSteps(analysis=Step(status=StepState.QUEUED),
                            slack=Step(status=StepState.QUEUED if service.notifier else StepState.SKIPPED))
        incident_id, result = service.record(report, ranked, steps)
        if incident_id is None:
            return service.finish(report, result)
        lane = f"{TRIAGE}:{incident_id}"
        try:
            job_id = self.queue.put(TRIAGE, lane, lane, {"incident_id": incident_id})
        except StoreError as e:  # the queue's database is down: do the steps here rather than never
            log.warning("incident %d: could not queue its analysis (%s); running it in the request",
                        incident_id, e)
            return service.finish(report, result, incident_id)
        service.quietly(lambda: service.incidents.update(incident_id, IncidentChange(job_id=job_id)),
                        incident_id, "job id")
        return TriageOutcome(result, incident_id, steps=steps)

    def steps(self, incident: Incident) -> TriageSteps:
        """The incident's steps as its job left them: unfinished steps whose job ended (failed, cancelled,
        or long gone) say failed, with the job's error, rather than queued for ever."""
        if not incident.unfinished or incident.job_id is None:
            return incident.steps()
        job = self.queue.jobs.get(incident.job_id)
        if job is not None and job.state in (JobState.QUEUED, JobState.RUNNING):
            return incident.steps()
        latest = self.service.incidents.get(incident.id) or incident  # the job may have just finished them
        steps = latest.steps()
        if not latest.unfinished:
            return steps
        ended = Step(status=StepState.FAILED, detail="its job ended without finishing it: "
                                                     f"{job.error if job and job.error else 'no error recorded'}")
        return TriageSteps(analysis=ended if steps.analysis.status in UNFINISHED else steps.analysis,
                           slack=ended if steps.slack.status in UNFINISHED else steps.slack)

    # --- the worker's side ------------------------------------------------------------------------------

    def run(self, job: Job, lease: Lease) -> None:
        """A worker's triage job: the steps its incident still lists as queued or running."""
        incidents = self.service.incidents
        try:
            incident = incidents.get(int(job.payload["incident_id"])) if incidents is not None else None
        except (KeyError, TypeError, ValueError):
            raise Permanent(f"a triage job without an incident id: {dict(job.payload)}") from None
        if incident is None:
            raise Permanent(f"incident {job.payload['incident_id']} is not in this worker's incident store")
        result = incident.result()
        if incident.analysis_step in UNFINISHED:
            result = self._analyse(incident, job.attempts, lease.cancelled)
            if result is None:  # cut short: stopping (the job goes back to the queue), or the lease was lost
                if lease.stopping:
                    self._write(incident.id, IncidentChange(analysis_step=StepState.QUEUED,
                                                            analysis_error="its worker stopped; queued again"))
                return
        if lease.cancelled.is_set():  # the analysis is kept; the Slack message is the next try's
            return
        if incident.slack_status in UNFINISHED:
            self._notify(incident.id, result)

    def _analyse(self, incident: Incident, try_number: int, stop: threading.Event) -> TriageResult | None:
        """The analysis step; None when `stop` cut it short. A failed try raises (the queue tries again)
        unless it was the last, which records the failure and lets the Slack message go out with the ranked
        files."""
        self._write(incident.id, IncidentChange(analysis_step=StepState.RUNNING))
        analysed = self.service.analyse(incident.report(), incident.result(), stop)
        if analysed.step.status == StepState.FAILED and stop.is_set():
            return None
        tries = f"try {try_number} of {self._max_tries}"
        if analysed.step.status == StepState.FAILED:
            if try_number < self._max_tries:
                self._write(incident.id, IncidentChange(analysis_step=StepState.QUEUED,
                                                        analysis_error=f"{tries} failed: {analysed.step.detail}"))
                raise AnalysisFailed(analysed.step.detail)
            detail = f"failed on every try ({self._max_tries}); the last: {analysed.step.detail}"
        else:
            detail = analysed.step.detail or (f"done on {tries}" if try_number > 1 else "")
        self._write(incident.id, IncidentChange(result=analysed.result, analysis_step=analysed.step.status,
                                                analysis_error=detail))
        return analysed.result

    def _notify(self, incident_id: int, result: TriageResult) -> None:
        if self.service.notifier is None:  # this process has no webhook (the one that queued it had)
            self._write(incident_id, IncidentChange(slack_status=StepState.SKIPPED,
                                                    slack_detail="no Slack webhook configured where the job ran"))
            return
        self._write(incident_id, IncidentChange(slack_status=StepState.RUNNING))
        self.service.notify(incident_id, result)

    def _write(self, incident_id: int, change: IncidentChange) -> None:
        """A step's progress; a store that fails fails the try (the queue tries again)."""
        self.service.incidents.update(incident_id, change)
