"""POST /v1/errors and the incidents API over real loopback HTTP; the Slack webhook and the LLM are
upstream_support's fake upstreams on 127.0.0.1. The request answers with the ranked files; the analysis and
the Slack message follow on the app's job workers, and the tests wait for the incident's steps."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
from api_support import wait_triaged
from helpers import serving
from test_llm_backends import openai_completion
from test_triage import SAMPLE_REPO, raised_in_sample_app
from test_triage_incidents import result as stored_result
from test_triage_llm import ANALYSIS
from upstream_support import Reply, fake_upstream

from funnel.apps.api import create_app
from funnel.apps.settings import Settings
from funnel.apps.state import jobs
from funnel.apps.state.incident_schema import ErrorReport, Step, TriageSteps
from funnel.apps.state.incidents import EmbeddedIncidents
from funnel.apps.triage.service import TriageService
from funnel.apps.triage.slack import SlackNotifier
from funnel.embed import HashingEmbedder
from funnel.generate.openai_compat import OpenAIChat
from funnel.index.lance import LanceStore
from funnel.pipeline import Pipeline

SECRET = "hunter2-very-secret-pw"
TOKEN = "xoxb-123456789012-abcdefghijklmnop"


@pytest.fixture(scope="module")
def slack():
    """The Slack webhook, shared by the module's tests: answers "ok" and records every message."""
    with fake_upstream() as server:
        server.answer(Reply(raw=b"ok", content_type="text/plain"))
        yield server


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    pipeline = Pipeline.build(store=LanceStore(tmp_path_factory.mktemp("triage-api-index")), embedder=HashingEmbedder(), reranker=None)
    pipeline.ingest([SAMPLE_REPO])
    return pipeline


@contextmanager
def serve_triage(service: TriageService) -> Iterator[httpx.Client]:
    """The app over `service`, served, and a client of it."""
    with serving(create_app(Settings(), triage=service)) as url, httpx.Client(base_url=url, timeout=60) as client:
        yield client


@pytest.fixture(scope="module")
def api(tmp_path_factory, slack, pipeline):
    """No LLM: the analysis step is skipped, the Slack message still goes out."""
    service = TriageService(
        pipeline,
        repo_root=SAMPLE_REPO,
        notifier=SlackNotifier(f"{slack.url}/services/T000/B000/XXXX"),
        incidents=EmbeddedIncidents(tmp_path_factory.mktemp("triage-api") / "incidents.sqlite"),
    )
    with serve_triage(service) as client:
        yield client, slack


@pytest.fixture(scope="module")
def llm():
    """The LLM the agent asks (OpenAI's wire format); each test scripts its answers."""
    with fake_upstream() as server:
        yield server


@pytest.fixture(scope="module")
def agent_api(tmp_path_factory, slack, llm, pipeline):
    service = TriageService(
        pipeline,
        repo_root=SAMPLE_REPO,
        chat=OpenAIChat(llm.url + "/v1", model="m", timeout=90),
        notifier=SlackNotifier(f"{slack.url}/services/T000/B000/YYYY"),
        incidents=EmbeddedIncidents(tmp_path_factory.mktemp("triage-agent-api") / "incidents.sqlite"),
    )
    with serve_triage(service) as client:
        yield client


def shop_error(service: str) -> dict:
    return {"service": service, "message": "checkout failed", "stack_trace": raised_in_sample_app("unknown_sku")}


def slack_messages_of(slack, service: str) -> list[str]:
    return [json.dumps(r.body) for r in slack.requests if f"in {service}" in json.dumps(r.body)]


def test_an_error_report_is_triaged_recorded_and_posted_once(api):
    client, slack = api
    trace = raised_in_sample_app("unknown_sku")
    report = {
        "service": "shop",
        "message": f"checkout failed (db password={SECRET}, slack {TOKEN})",
        "stack_trace": trace,
        "context": {"env": "prod"},
    }
    first = client.post("/v1/errors", json=report)
    assert first.status_code == 200, first.text
    body = first.json()
    assert body["result"]["files"][0]["path"] == "app/inventory.py"
    assert body["result"]["analysis_status"] == "queued" and body["slack"] == "queued" and body["incident_id"]
    assert body["steps"] == {"analysis": {"status": "queued", "detail": ""},
                             "slack": {"status": "queued", "detail": ""}}
    detail = wait_triaged(client, body["incident_id"])
    assert detail["steps"]["analysis"] == {"status": "skipped", "detail": "no LLM configured"}
    assert detail["analysis_status"] == "llm_unavailable" and detail["result"]["analysis_status"] == "llm_unavailable"
    assert detail["slack_status"] == detail["steps"]["slack"]["status"] == "sent"
    assert detail["result"]["files"][0]["path"] == "app/inventory.py"
    second = client.post("/v1/errors", json=report).json()
    later = wait_triaged(client, second["incident_id"])
    assert later["steps"]["slack"]["status"] == "deduplicated"  # same fingerprint within the window: not sent
    assert len(slack.requests) == 1
    posted = json.dumps(slack.requests[0].body)
    assert "app/inventory.py" in posted and "KeyError" in posted
    assert SECRET not in posted and TOKEN not in posted and SECRET not in json.dumps(body)

    listed = client.get("/v1/incidents", params={"service": "shop"}).json()
    assert len(listed) == 2 and listed[0]["fingerprint"] == listed[1]["fingerprint"]
    assert [i["steps"]["slack"]["status"] for i in listed] == ["deduplicated", "sent"]
    assert SECRET not in json.dumps(detail)


def test_the_answer_comes_while_the_model_still_holds_the_analysis(agent_api, llm, slack):
    """The LLM holds its reply until the test has the answer to the POST: a request that waited for the
    analysis would time out (the client gives up after 30 s, the model holds for 60)."""
    arrived, release = threading.Event(), threading.Event()

    def held(path, body):
        arrived.set()
        release.wait(60)
        return Reply(openai_completion({"content": json.dumps(ANALYSIS)}))

    llm.answer(held)
    try:
        response = agent_api.post("/v1/errors", json=shop_error("held"), timeout=30)
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["result"]["files"][0]["path"] == "app/inventory.py" and body["result"]["analysis"] is None
        assert (body["steps"]["analysis"]["status"], body["slack"]) == ("queued", "queued")
        assert arrived.wait(30), "no worker asked the model"
        during = agent_api.get(f"/v1/incidents/{body['incident_id']}").json()
        assert (during["steps"]["analysis"]["status"], during["steps"]["slack"]["status"]) == ("running", "queued")
        assert not slack_messages_of(slack, "held")  # Slack waits for the analysis
    finally:
        release.set()
    done = wait_triaged(agent_api, body["incident_id"])
    assert done["steps"] == {"analysis": {"status": "done", "detail": ""},
                             "slack": {"status": "sent", "detail": "delivered"}}
    assert done["analysis_status"] == "ok" and done["result"]["analysis"]["summary"] == ANALYSIS["summary"]
    [message] = slack_messages_of(slack, "held")
    assert ANALYSIS["summary"] in message  # the message carries the analysis


def test_a_failing_model_is_tried_again_then_recorded_as_failed(agent_api, llm, slack, monkeypatch):
    monkeypatch.setattr(jobs, "RETRY_AFTER_S", 0.05)  # the pause between tries
    llm.answer(Reply({"error": {"message": "model overloaded"}}, status=503))
    before = len(llm.requests)
    incident_id = agent_api.post("/v1/errors", json=shop_error("failing")).json()["incident_id"]
    done = wait_triaged(agent_api, incident_id)
    assert len(llm.requests) - before == jobs.MAX_ATTEMPTS  # one model call a try, and no more tries
    analysis = done["steps"]["analysis"]
    assert analysis["status"] == "failed", analysis
    assert f"failed on every try ({jobs.MAX_ATTEMPTS})" in analysis["detail"] and "HTTP 503" in analysis["detail"]
    assert done["analysis_status"] == "llm_unavailable" and "HTTP 503" in done["result"]["analysis_reason"]
    assert done["steps"]["slack"]["status"] == "sent"  # the alert goes out with the ranked files
    [message] = slack_messages_of(slack, "failing")
    assert "app/inventory.py" in message


def test_a_model_that_fails_once_is_asked_again(agent_api, llm, monkeypatch):
    monkeypatch.setattr(jobs, "RETRY_AFTER_S", 0.05)
    llm.queue(Reply({"error": {"message": "model overloaded"}}, status=503))
    llm.answer(Reply(openai_completion({"content": json.dumps(ANALYSIS)})))
    incident_id = agent_api.post("/v1/errors", json=shop_error("flaky")).json()["incident_id"]
    done = wait_triaged(agent_api, incident_id)
    assert done["steps"]["analysis"] == {"status": "done", "detail": f"done on try 2 of {jobs.MAX_ATTEMPTS}"}
    assert done["analysis_status"] == "ok" and done["steps"]["slack"]["status"] == "sent"


def test_steps_left_behind_by_a_stopped_server_say_interrupted(tmp_path, pipeline):
    """The embedded server's queue is in memory: what it had not done when it stopped never will be."""
    store = EmbeddedIncidents(tmp_path / "incidents.sqlite")
    report = ErrorReport(service="billing", message="boom")
    queued = TriageSteps(analysis=Step(status="queued"), slack=Step(status="queued"))
    left = store.record(report, stored_result(analysis=False), queued)
    posting = TriageSteps(analysis=Step(status="done"), slack=Step(status="running"))
    analysed = store.record(report, stored_result(), posting)
    finished = store.record(report, stored_result())
    with serve_triage(TriageService(pipeline, repo_root=SAMPLE_REPO, incidents=store)) as client:
        steps = {i: client.get(f"/v1/incidents/{i}").json()["steps"] for i in (left, analysed, finished)}
    assert steps[left]["analysis"]["status"] == steps[left]["slack"]["status"] == "interrupted"
    assert "post the error again" in steps[left]["analysis"]["detail"]
    assert steps[analysed]["analysis"]["status"] == "done" and steps[analysed]["slack"]["status"] == "interrupted"
    assert steps[finished] == {"analysis": {"status": "done", "detail": ""},
                               "slack": {"status": "skipped", "detail": ""}}


@pytest.mark.parametrize(
    "payload, status",
    [
        (b"{not json", 422),
        (b'{"service": "x", "stack_trace": 42}', 422),
        (b'{"service": "x", "unknown_field": 1}', 422),
        (b'{"service": "x"}', 400),  # neither message nor trace
    ],
)
def test_bad_reports_get_a_clear_status(api, payload, status):
    client, _ = api
    response = client.post("/v1/errors", content=payload, headers={"content-type": "application/json"})
    assert response.status_code == status
    assert "detail" in response.json()


def test_huge_and_junk_traces_are_best_effort(api):
    client, _ = api
    huge = "Traceback (most recent call last):\n" + '  File "/srv/app/x.py", line 3, in f\n' * 250_000
    response = client.post(
        "/v1/errors", json={"service": "big", "message": "order total wrong", "stack_trace": huge}
    )
    assert response.status_code == 200
    assert any("cut" in note for note in response.json()["result"]["notes"])
    junk = client.post("/v1/errors", json={"service": "junk", "stack_trace": "\u0000\ufffd\u0007" * 5000})
    assert junk.status_code == 200


def test_unknown_incident_is_404(api):
    client, _ = api
    assert client.get("/v1/incidents/999999").status_code == 404


def test_triage_not_configured_is_503():
    with serving(create_app(Settings())) as url:
        response = httpx.post(f"{url}/v1/errors", json={"message": "boom"}, timeout=30)
    assert response.status_code == 503 and "FUNNEL_TRIAGE__REPO" in response.json()["detail"]
