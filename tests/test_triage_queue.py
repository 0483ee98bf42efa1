"""The triage queue in process, without a server: what a job does with its incident's steps when a worker
stops, when its job ended without finishing them, and when there is no incident to queue them on.
(The HTTP side, with real workers and a slow model: test_triage_api.py; on PostgreSQL: test_api_database.py.)"""

from __future__ import annotations

import json
import threading
from types import SimpleNamespace

import pytest
from test_triage import SAMPLE_REPO, pipeline, raised_in_sample_app  # noqa: F401 (pipeline: a fixture)
from test_triage_llm import ANALYSIS
from upstream_support import ScriptedChat

from funnel.apps.state.jobs import EmbeddedJobs, Job
from funnel.apps.state.jobs_workers import Permanent, Queue
from funnel.apps.state.incident_schema import ErrorReport
from funnel.apps.state.incidents import EmbeddedIncidents
from funnel.apps.triage.queue import TRIAGE, TriageQueue
from funnel.apps.triage.service import TriageService
from funnel.generate.chat import ChatReply, ToolCall


def report() -> ErrorReport:
    return ErrorReport(service="shop", message="checkout failed", stack_trace=raised_in_sample_app("unknown_sku"))


def triage_queue(pipeline, tmp_path, chat=None, max_attempts: int = 3) -> TriageQueue:  # noqa: F811
    store = EmbeddedIncidents(tmp_path / "incidents.sqlite")
    service = TriageService(pipeline, repo_root=SAMPLE_REPO, chat=chat, incidents=store)
    return TriageQueue(service, Queue(EmbeddedJobs(max_attempts=max_attempts)))


def claimed(queue: TriageQueue) -> Job:
    job = queue.queue.jobs.claim([TRIAGE], "test-worker")
    assert job is not None
    return job


def lease_of_nobody():
    """A running job's lease, as a worker's handler sees it (`funnel.apps.state.jobs_workers.Lease`)."""
    return SimpleNamespace(cancelled=threading.Event(), stopping=False)


def test_a_worker_that_stops_mid_analysis_puts_the_step_back_in_the_queue(pipeline, tmp_path):  # noqa: F811
    lease = lease_of_nobody()

    class StoppedWhileAsked(ScriptedChat):
        def chat(self, messages, tools=(), **kw):
            lease.stopping = True  # the server shuts down while the model answers
            lease.cancelled.set()
            return super().chat(messages, tools, **kw)

    call = ToolCall(id="c1", name="read_file", arguments={"path": "app/inventory.py"})
    queue = triage_queue(pipeline, tmp_path, StoppedWhileAsked([ChatReply("", tool_calls=[call])]))
    outcome = queue.submit(report())
    queue.run(claimed(queue), lease)
    steps = queue.service.incidents.get(outcome.incident_id).steps()
    assert (steps.analysis.status, steps.analysis.detail) == ("queued", "its worker stopped; queued again")
    assert steps.slack.status == "skipped"  # no webhook: nothing was to be sent
    resumed = triage_queue(pipeline, tmp_path, ScriptedChat(json.dumps(ANALYSIS)))  # the next try, elsewhere
    resumed.run(Job(2, TRIAGE, "x", "x", {"incident_id": outcome.incident_id}, attempts=2), lease_of_nobody())
    assert resumed.service.incidents.get(outcome.incident_id).steps().analysis.detail == "done on try 2 of 3"


def test_a_job_that_ended_without_finishing_shows_its_error(pipeline, tmp_path):  # noqa: F811
    """Its worker died on the last try: nobody is left to write the steps; reading them says so."""
    queue = triage_queue(pipeline, tmp_path, max_attempts=1)
    incident_id = queue.submit(report()).incident_id
    incident = queue.service.incidents.get(incident_id)
    assert queue.steps(incident).analysis.status == "queued"  # its job is waiting
    queue.queue.jobs.claim([TRIAGE], "dies", lease_s=0.0)
    queue.queue.jobs.claim([TRIAGE], "another")  # looks for work: the lapsed lease fails the job
    steps = queue.steps(incident)
    assert (steps.analysis.status, steps.slack.status) == ("failed", "skipped")  # no webhook: nothing to send
    assert steps.analysis.detail == "its job ended without finishing it: its worker stopped without finishing it"


def test_without_a_working_incident_store_the_steps_run_in_the_request(pipeline, tmp_path):  # noqa: F811
    queue = triage_queue(pipeline, tmp_path, ScriptedChat(json.dumps(ANALYSIS)))
    queue.service.incidents.path.write_bytes(b"not an SQLite database" * 100)  # broken after start-up
    outcome = queue.submit(report())
    assert outcome.incident_id is None and any(n.startswith("incident not stored") for n in outcome.result.notes)
    assert outcome.steps.analysis.status == "done" and outcome.result.analysis.summary == ANALYSIS["summary"]
    assert queue.queue.jobs.claim([TRIAGE], "w") is None  # nothing was queued


def test_a_job_for_an_incident_that_is_not_there_is_not_retried(pipeline, tmp_path):  # noqa: F811
    queue = triage_queue(pipeline, tmp_path)
    with pytest.raises(Permanent, match="incident 99 is not in this worker's incident store"):
        queue.run(Job(1, TRIAGE, "triage:99", "triage:99", {"incident_id": 99}), lease_of_nobody())
    with pytest.raises(Permanent, match="without an incident id"):
        queue.run(Job(2, TRIAGE, "triage:x", "triage:x", {}), lease_of_nobody())
