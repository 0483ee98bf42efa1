"""The web page's main states in headless Chromium against funnel's real app on 127.0.0.1, each one
screenshotted (tmp_path, and $FUNNEL_SCREENSHOTS for bench/page_screens.py) and checked: a page load with no
failed request, the calibration and its button, an abstention, asking only the ticked documents.

The browser, the page fixture and the screenshot check are test_web_page's (it skips without Chromium)."""

from __future__ import annotations

import re

import pytest
from helpers import serving
from test_web_page import TIMEOUT_MS, failed_responses, fresh_page, launch_browser, screenshot, settings
from upstream_support import fake  # noqa: F401 (a fixture)

pytestmark = pytest.mark.slow
expect = pytest.importorskip("playwright.sync_api").expect
expect.set_options(timeout=TIMEOUT_MS)  # the machine may be busy: an ingest or a calibration takes a while

CLI_WORDS = "funnel calibrate"


@pytest.fixture(scope="module")
def browser():
    yield from launch_browser()


@pytest.fixture
def page(browser):
    yield from fresh_page(browser)


def serve(tmp_path, **overrides):
    from funnel.apps.api import create_app

    return serving(create_app(settings(tmp_path, **overrides)))


def upload_and_wait(page, tmp_path, files: dict[str, str]) -> None:
    paths = []
    for name, text in files.items():
        (tmp_path / name).write_text(text)
        paths.append(str(tmp_path / name))
    page.set_input_files("#file", paths)
    for name in files:
        row = page.locator("#documents tbody tr", has_text=name)
        expect(row.locator(".status")).to_have_text("ready", timeout=TIMEOUT_MS)


def wait_calibrated(page) -> None:
    status = page.locator("#calibration-status")
    expect(status).to_have_attribute("data-state", "calibrated", timeout=TIMEOUT_MS)
    expect(status).to_contain_text("calibrated")


def test_load_and_calibration_make_no_failed_request_and_no_cli_advice(tmp_path, page):
    """A fresh server: the page loads without one request answering 400 or more (no incidents without
    triage, no calibration of a collection that is empty), a batch whose last file fails still calibrates,
    the Calibrate button queues one more, and nothing tells a web user to run a command."""
    failed = failed_responses(page)
    with serve(tmp_path, reranker="lexical") as url:
        page.goto(url + "/")
        expect(page.locator("#documents-empty")).to_be_visible()
        expect(page.locator("#calibration-status")).to_have_text("calibrates after the first upload")
        expect(page.locator("#calibrate")).to_be_disabled()
        page.wait_for_load_state("networkidle")
        screenshot(page, tmp_path, "empty-load")
        assert failed == [], "a request of the page's load failed"

        # The batch's last file fails (a PDF that is not one): the index changed all the same.
        (tmp_path / "z-broken.pdf").write_bytes(b"%PDF-1.4 not really a pdf")
        (tmp_path / "anvils.txt").write_text("The anvil ships on Mondays by train from Tallinn.")
        page.set_input_files("#file", [str(tmp_path / "anvils.txt"), str(tmp_path / "z-broken.pdf")])
        expect(page.locator("#documents tbody tr", has_text="anvils").locator(".status")).to_have_text("ready")
        expect(page.locator("#documents tbody tr", has_text="z-broken").locator(".status")).to_have_text("failed")
        wait_calibrated(page)

        with page.expect_response(re.compile(r"/calibrate$")) as queued:
            page.click("#calibrate")
        assert queued.value.status == 202
        wait_calibrated(page)
        expect(page.locator("#calibrate")).to_be_enabled()
        screenshot(page, tmp_path, "calibrated")

        page.fill("#question", "When does the anvil ship?")
        page.press("#question", "Enter")
        expect(page.locator(".turn .info").last).to_contain_text("answered by", timeout=TIMEOUT_MS)
        assert CLI_WORDS not in page.locator("body").inner_text()
        page.locator(".turn .answer button.cite").first.click()  # the cited passage and its whole chunk
        expect(page.locator("#passage")).to_contain_text("anvil")
        page.keyboard.press("Escape")

        page.once("dialog", lambda dialog: dialog.accept("second"))  # a new, empty collection
        page.click("#collection-new")
        expect(page.locator("#docs-collection")).to_have_text("second")
        expect(page.locator("#calibration-status")).to_have_text("calibrates after the first upload")
        page.select_option("#collection", "default")
        wait_calibrated(page)
        page.wait_for_load_state("networkidle")
        # The broken PDF's upload is accepted (202) and fails in the list, not as a request.
        assert failed == [], "a request the page made in normal use failed"


def test_the_calibrate_button_says_calibrating_while_it_runs(tmp_path, page):
    with serve(tmp_path, reranker="lexical") as url:
        page.goto(url + "/")
        upload_and_wait(page, tmp_path, {"office.txt": "The Tallinn office opens at nine."})
        wait_calibrated(page)
        held = []  # the status answer is held back, so the page shows the state it had before it
        page.route(re.compile(r"/calibration$"), lambda route: held.append(route))
        page.click("#calibrate")
        expect(page.locator("#calibration-status")).to_have_text("calibrating…")
        expect(page.locator("#calibrate")).to_be_disabled()
        screenshot(page, tmp_path, "calibrating")
        page.unroute(re.compile(r"/calibration$"))
        for route in held:
            route.continue_()
        wait_calibrated(page)


def test_an_abstention_reads_not_in_your_documents_with_the_closest_passages(tmp_path, page):
    failed = failed_responses(page)
    with serve(tmp_path) as url:  # the real gate: nothing in the one document is about Project Heron
        page.goto(url + "/")
        upload_and_wait(page, tmp_path, {"office.txt": "The Tallinn office opens at nine on weekdays."})
        page.fill("#question", "Who leads Project Heron and what is its budget?")
        with page.expect_response(re.compile(r"/ask$")) as asked:
            page.press("#question", "Enter")
        turn = page.locator(".turn").last
        expect(turn.locator(".abstain-title")).to_have_text("Not in your documents", timeout=TIMEOUT_MS)
        assert '"abstained": true' in asked.value.text()  # the SSE stream's final event carries the flag
        expect(turn.locator(".abstain-text")).to_have_text(re.compile(r"\w{3,}.*\w{3,}"))  # the server's sentence
        expect(turn.locator(".closest")).to_have_text("Closest, not an answer")
        expect(turn.locator(".sources li").first).to_contain_text("office.txt")
        expect(turn).to_have_class(re.compile(r"\babstained\b"))
        # Drawn apart from an answer: a dashed border, not the answer's solid one.
        assert turn.evaluate("t => getComputedStyle(t).borderLeftStyle") == "dashed"
        assert turn.locator("button.cite").count() == 0  # nothing in it is cited as support
        screenshot(page, tmp_path, "abstention")
        assert failed == []


def test_ask_only_the_ticked_documents(tmp_path, page):
    with serve(tmp_path) as url:
        page.goto(url + "/")
        upload_and_wait(page, tmp_path, {
            "tallinn.txt": "The Tallinn office opens at nine. Its manager is Mari Tamm.",
            "riga.txt": "The Riga office opens at ten. Its manager is Janis Ozols.",
        })
        riga = page.locator("#documents tbody tr", has_text="riga.txt")
        riga_id = riga.get_attribute("data-id")
        riga.locator("input.pick-doc").check()
        expect(page.locator("#scope")).to_contain_text("Asking only riga.txt")
        page.fill("#question", "When does the office open?")
        with page.expect_request(re.compile(r"/ask$")) as asked:
            page.press("#question", "Enter")
        assert asked.value.post_data_json["documents"] == [riga_id]
        sources = page.locator(".turn .sources").last
        expect(sources.locator("li").first).to_be_visible(timeout=TIMEOUT_MS)
        expect(sources).not_to_contain_text("tallinn.txt")
        screenshot(page, tmp_path, "ask-only-these")

        page.click("#scope-clear")  # back to every document
        expect(page.locator("#scope")).to_be_hidden()
        expect(riga.locator("input.pick-doc")).not_to_be_checked()
        page.fill("#question", "Who manages the Tallinn office?")
        with page.expect_request(re.compile(r"/ask$")) as everything:
            page.press("#question", "Enter")
        assert "documents" not in everything.value.post_data_json


def test_a_readers_quote_shows_before_the_model_writes_and_stays_beside_its_answer(tmp_path, page, fake):
    """With a reader model (an OpenAI-compatible server on loopback, slowed to a delta a second), the
    picker's sentence shows under "From the page" while the answer is still empty; the model's answer then
    streams above it, and the sentence opens its passage."""
    from api_support import FakeOpenAI

    llm = FakeOpenAI(fake)
    llm.deltas, llm.delay = ["The office opens ", "at nine [1]."], 1.0
    with serve(tmp_path, llm=f"openai:{llm.url}", llm_mode="reader", llm_timeout_s=30) as url:
        page.goto(url + "/")
        upload_and_wait(page, tmp_path, {"office.txt": "The Tallinn office opens at nine on weekdays."})
        page.fill("#question", "When does the Tallinn office open?")
        page.press("#question", "Enter")
        turn = page.locator(".turn").last
        expect(turn.locator(".quotes")).to_contain_text("From the page")
        expect(turn.locator(".quote")).to_contain_text("The Tallinn office opens at nine on weekdays.")
        assert "at nine" not in turn.locator(".answer").inner_text()  # the model has not written it yet
        screenshot(page, tmp_path, "reader-quote-first")
        expect(turn.locator(".info")).to_contain_text("answered by", timeout=TIMEOUT_MS)
        expect(turn.locator(".answer")).to_have_text("The office opens at nine [1].")
        expect(turn.locator(".quote")).to_contain_text("The Tallinn office opens at nine")
        turn.locator(".quote button").click()
        expect(page.locator("#passage-heading")).to_have_text("Quoted passage")  # not the answer's own [n]
        expect(page.locator("#passage")).to_contain_text("Tallinn office")
        screenshot(page, tmp_path, "reader-answer-and-quote")
