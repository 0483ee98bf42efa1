"""POST /v1/errors and the incidents API over real loopback HTTP; the Slack webhook is upstream_support's
fake upstream on 127.0.0.1."""

from __future__ import annotations

import json

import httpx
import pytest
from helpers import serving
from test_triage import SAMPLE_REPO, raised_in_sample_app
from upstream_support import Reply, fake_upstream

from funnel.apps.api import create_app
from funnel.apps.settings import Settings
from funnel.apps.triage.incidents import IncidentStore
from funnel.apps.triage.service import TriageService
from funnel.apps.triage.slack import SlackNotifier
from funnel.embed import HashingEmbedder
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
def api(tmp_path_factory, slack):
    tmp = tmp_path_factory.mktemp("triage-api")
    pipeline = Pipeline(LanceStore(tmp / "index"), HashingEmbedder())
    pipeline.ingest([SAMPLE_REPO])
    service = TriageService(
        pipeline,
        repo_root=SAMPLE_REPO,
        notifier=SlackNotifier(f"{slack.url}/services/T000/B000/XXXX"),
        incidents=IncidentStore(tmp / "incidents.sqlite"),
    )
    with (
        serving(create_app(Settings(), triage=service)) as url,
        httpx.Client(base_url=url, timeout=60) as client,
    ):
        yield client, slack


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
    assert body["result"]["analysis_status"] == "llm_unavailable"
    assert body["slack"] == "sent" and body["incident_id"]
    second = client.post("/v1/errors", json=report)
    assert second.json()["slack"] == "deduplicated"  # same fingerprint within the window: no second message
    assert len(slack.requests) == 1
    posted = json.dumps(slack.requests[0].body)
    assert "app/inventory.py" in posted and "KeyError" in posted
    assert SECRET not in posted and TOKEN not in posted and SECRET not in json.dumps(body)

    listed = client.get("/v1/incidents", params={"service": "shop"}).json()
    assert len(listed) == 2 and listed[0]["fingerprint"] == listed[1]["fingerprint"]
    detail = client.get(f"/v1/incidents/{body['incident_id']}").json()
    assert detail["slack_status"] == "sent" and detail["result"]["files"][0]["path"] == "app/inventory.py"
    assert SECRET not in json.dumps(detail)


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
    assert response.status_code == 503 and "FUNNEL_REPO" in response.json()["detail"]
