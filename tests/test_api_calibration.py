"""A collection's calibration as the service runs it: after any batch that changed the index (whatever its last
file did), on `POST .../calibrate` (the page's button), and told in words a web user can act on (never "run
`funnel calibrate`"). Over real loopback HTTP with the hashing embedder and the lexical reranker."""

from __future__ import annotations

import time

import httpx
import pytest
from api_support import upload, wait_done
from helpers import serving

from funnel.apps.api import create_app
from funnel.apps.api.calibration import for_the_service
from funnel.apps.settings import Settings

CLI_WORDS = "funnel calibrate"


def wait_state(client: httpx.Client, collection: str, state: str, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        status = client.get(f"/v1/collections/{collection}/calibration").json()
        if status["state"] == state:
            return status
        assert time.monotonic() < deadline, f"not {state}: {status}"
        time.sleep(0.05)


@pytest.fixture
def client(tmp_path):
    app = create_app(Settings(embedder="hashing", reranker="lexical", data_dir=tmp_path / "data"))
    with serving(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        yield client


def test_a_batch_whose_last_file_fails_is_calibrated(client):
    empty = client.get("/v1/collections/default/calibration").json()
    assert empty["state"] == "empty" and empty["message"] == "calibrates after the first upload"
    refused = client.post("/v1/collections/default/calibrate")
    assert refused.status_code == 409 and "upload documents first" in refused.json()["detail"]

    files = [("a.txt", b"The anvil ships on Mondays by train."), ("b.txt", b"The bell rings at noon."),
             ("z.pdf", b"%PDF-1.4 this is no PDF")]  # ingested in this order: the last one fails
    assert upload(client, "default", files).status_code == 202
    assert [d["status"] for d in sorted(wait_done(client, "default"), key=lambda d: d["filename"])] == [
        "ready", "ready", "failed"]
    status = wait_state(client, "default", "calibrated")
    assert status["message"].startswith("calibrated: ") and status["created"]
    health = client.get("/health").json()["calibration"]["default"]
    assert health["reason"] != "not calibrated yet"


def test_the_calibrate_route_queues_one_and_reports_it(client):
    assert upload(client, "default", [("a.txt", b"The anvil ships on Mondays by train.")]).status_code == 202
    wait_done(client, "default")
    wait_state(client, "default", "calibrated")
    queued = client.post("/v1/collections/default/calibrate")
    assert queued.status_code == 202
    assert queued.json()["state"] == "calibrating" and queued.json()["message"] == "calibrating…"
    again = wait_state(client, "default", "calibrated")
    assert again["error"] is None
    assert client.post("/v1/collections/nope/calibrate").status_code == 404


def test_a_damaged_calibration_is_explained_without_cli_advice_and_calibrated_again(client, tmp_path):
    assert upload(client, "default", [("a.txt", b"The anvil ships on Mondays by train.")]).status_code == 202
    wait_done(client, "default")
    wait_state(client, "default", "calibrated")
    (stored,) = (tmp_path / "data").rglob("funnel_calibration.json")
    stored.write_text("{not json")
    search = client.post("/v1/collections/default/search", json={"query": "anvil"}).json()
    assert "unreadable calibration" in search["rerank_reason"] and CLI_WORDS not in search["rerank_reason"]
    assert "calibrates after the next upload, or on Calibrate" in search["rerank_reason"]
    status = client.get("/v1/collections/default/calibration").json()
    assert status["state"] == "not_calibrated" and CLI_WORDS not in str(status)
    assert CLI_WORDS not in str(client.get("/health").json())
    assert client.post("/v1/collections/default/calibrate").status_code == 202
    wait_state(client, "default", "calibrated")
    search = client.post("/v1/collections/default/search", json={"query": "anvil"}).json()
    assert search["rerank_reason"] == "" or search["rerank_reason"].startswith("calibration: ")


def test_the_shell_advice_becomes_what_the_service_does():
    reason = "the index is not calibrated; run `funnel calibrate`"
    assert for_the_service(reason, calibrating=True) == "the index is not calibrated; calibrating now"
    assert for_the_service(reason, calibrating=False) == (
        "the index is not calibrated; it calibrates after the next upload, or on Calibrate")
    assert for_the_service("calibration: first stage wins", False) == "calibration: first stage wins"
    judged = ("only 3 of 30 judged queries name a document in this index: check their ids, or calibrate with "
              "queries made from the documents (`funnel calibrate --generated`)")
    assert for_the_service(judged, False) == judged.removesuffix(" (`funnel calibrate --generated`)")


def test_health_says_which_features_are_on(tmp_path):
    with serving(create_app(Settings(embedder="hashing", data_dir=tmp_path))) as url:
        assert httpx.get(f"{url}/health", timeout=5).json()["features"] == {"triage": False, "watch": False}
