"""The web page at `/`, driven in headless Chromium against funnel's real app on 127.0.0.1.

Needs Debian's chromium-headless-shell (or chromium) and the Python `playwright` package (`make browser`
installs both; `make test BROWSER=skip` does not, and these tests skip). Playwright's own browser download
is never used, since it cannot run on machines without internet.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
from helpers import serving

# The headless build first (what `make browser` installs), else the desktop browser if one is there.
CHROMIUM = next((Path(p) for p in ("/usr/bin/chromium-headless-shell", "/usr/bin/chromium") if Path(p).is_file()),
                Path("/usr/bin/chromium-headless-shell"))
SAMPLE_PDF = Path(__file__).parent.parent / "samples" / "docs" / "portfolio_companies.pdf"
# Without the background-networking flags Chromium keeps dialling Google's hosts, which this closed
# network refuses; --headless comes from Playwright (headless=True), and it gives each launch an empty
# profile of its own, so no --user-data-dir is passed.
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 60_000  # generous: the CI machine may be busy with other tests
# Where the page's screenshots go besides each test's tmp_path: bench/page_screens.py sets it to keep them.
SCREENSHOTS_ENV = "FUNNEL_SCREENSHOTS"

pytestmark = pytest.mark.slow

try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:
    pytest.skip("the web page tests need the playwright package: make browser (BROWSER=skip leaves it out)",
                allow_module_level=True)
if not CHROMIUM.is_file() or shutil.which(str(CHROMIUM)) is None:
    pytest.skip(f"the web page tests need Debian's chromium-headless-shell at {CHROMIUM}: make browser (as root)",
                allow_module_level=True)


@pytest.fixture(scope="module")
def browser():
    yield from launch_browser()


def launch_browser():
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_FLAGS
        )
        yield browser
        browser.close()


def settings(tmp_path, **overrides):
    from funnel.apps.settings import Settings

    return Settings(
        embedder="hashing",
        data_dir=tmp_path / "data",
        index=tmp_path / "index",
        incidents=tmp_path / "incidents.sqlite",
        **overrides,
    )


@pytest.fixture
def base_url(tmp_path):
    from funnel.apps.api import create_app

    with serving(create_app(settings(tmp_path))) as url:
        yield url


@pytest.fixture
def page(browser):
    yield from fresh_page(browser)


def fresh_page(browser):
    """A fresh page; a test fails if the page threw, or fetched anything from anywhere but the server."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    elsewhere: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on(
        "request",
        lambda request: None
        if re.match(r"(http://127\.0\.0\.1:\d+/|blob:|data:|about:)", request.url)
        else elsewhere.append(request.url),
    )
    yield page
    context.close()
    assert not errors, f"the page threw: {errors}"
    assert not elsewhere, f"the page fetched from outside the server (no CDN, no fonts): {elsewhere}"


def failed_responses(page) -> list[str]:
    """Every response of the page that answers 400 or more, as "STATUS METHOD URL", from now on."""
    failed: list[str] = []
    page.on("response", lambda r: failed.append(f"{r.status} {r.request.method} {r.url}") if r.status >= 400 else None)
    return failed


def screenshot(page, tmp_path: Path, name: str) -> Path:
    """The whole page as NAME.png in tmp_path (and in $FUNNEL_SCREENSHOTS when set), checked to be a real
    picture of the page: the viewport's width, and more than a blank background."""
    from PIL import Image

    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    with Image.open(path) as image:
        assert image.width == page.viewport_size["width"] and image.height >= 300, image.size
        colours = image.convert("L").resize((64, 64)).getcolors(64 * 64)
        assert colours is not None and len(colours) > 8, f"{name}.png is blank"
    if os.environ.get(SCREENSHOTS_ENV):
        keep = Path(os.environ[SCREENSHOTS_ENV])
        keep.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, keep / path.name)
    return path


def test_upload_ask_and_open_a_citation(base_url, page, tmp_path):
    failed = failed_responses(page)
    page.goto(base_url + "/")
    expect(page.locator("#health")).to_contain_text("funnel")

    page.set_input_files("#file", str(SAMPLE_PDF))
    row = page.locator("#documents tbody tr", has_text="portfolio_companies")
    expect(row.locator(".status")).to_have_text("ready", timeout=TIMEOUT_MS)

    page.fill("#question", "Who is the CEO of Zentara Robotics?")
    with page.expect_response(re.compile(r"/ask$")) as first:
        page.press("#question", "Enter")
    answer = page.locator(".turn .answer").last
    expect(answer).to_contain_text("Iris Kallas", timeout=TIMEOUT_MS)
    turn = page.locator(".turn").last
    expect(turn.locator(".info .generator")).not_to_be_empty()  # which generator answered is shown

    citation = answer.locator("button.cite", has_text="[1]").first
    citation.click()
    passage = page.locator("#passage")
    expect(passage).to_be_visible()
    expect(passage).to_contain_text("Zentara")
    expect(page.locator("#passage-where")).to_have_text(re.compile(r"p\.\d+"))
    link = page.locator("#passage-links a")
    expect(link).to_have_attribute("href", re.compile(r"/documents/[^/]+/file#page=\d+$"))
    expect(page.locator("#passage-heading")).to_be_focused()  # keyboard users land in the panel

    screenshot(page, tmp_path, "answer-with-citations")

    page.keyboard.press("Escape")  # closes the panel and returns focus to the citation
    expect(passage).to_be_hidden()
    expect(citation).to_be_focused()

    # A follow-up continues the conversation; "New conversation" starts afresh.
    first_id = re.search(r'"conversation_id": "([^"]+)"', first.value.text()).group(1)
    page.fill("#question", "When was it founded?")
    with page.expect_request(re.compile(r"/ask$")) as follow_up:
        page.press("#question", "Enter")
    assert follow_up.value.post_data_json["conversation_id"] == first_id
    expect(page.locator(".turn")).to_have_count(2)
    expect(page.locator(".turn .info").last).to_contain_text("answered by", timeout=TIMEOUT_MS)
    page.click("#conversation-new")
    expect(page.locator(".turn")).to_have_count(0)
    page.fill("#question", "Who is the CEO of Zentara Robotics?")
    with page.expect_request(re.compile(r"/ask$")) as fresh:
        page.press("#question", "Enter")
    assert "conversation_id" not in fresh.value.post_data_json
    expect(page.locator(".turn .answer").last).to_contain_text("Iris Kallas", timeout=TIMEOUT_MS)
    assert failed == [], "a request the page made in normal use failed"


def test_a_server_error_reads_as_a_message_and_server_text_stays_text(base_url, page, tmp_path):
    page.goto(base_url + "/")
    expect(page.locator("#documents-empty")).to_be_visible()

    question = "<img src=x onerror=window.__injected=1> anything?"
    page.fill("#question", question)
    page.click("#ask")  # the default collection is empty: the server refuses or answers with an error

    turn = page.locator(".turn").last
    expect(turn.locator(".question")).to_contain_text(question)  # shown as text, not parsed as HTML
    error = turn.locator(".error")
    expect(error).to_be_visible(timeout=TIMEOUT_MS)
    expect(error).to_have_text(re.compile(r"\w{3,}.*\w{3,}"))  # words, not a blank line
    assert page.locator(".turn img").count() == 0
    assert page.evaluate("window.__injected") is None
    expect(page.locator("#ask")).to_be_enabled()  # the page is usable again
    screenshot(page, tmp_path, "error")


def test_incidents_panel_lists_incidents_as_text(tmp_path, page):
    from funnel.apps.api import create_app
    from funnel.apps.state.incidents import Incident

    incident = Incident(
        id=7, created_at="2026-11-01T12:00:00+00:00", service="billing", exception_type="KeyError",
        message="<script>window.__injected=1</script> 'customer_id'", fingerprint="f" * 16,
        analysis_status="llm_unavailable", result_json="{}", slack_status="sent", slack_detail=None,
    )

    class Incidents:
        def list(self, limit=50, service=None, fingerprint=None):
            return [incident]

        def interrupt(self, detail):  # at start-up: nothing was left unfinished
            return 0

    class Triage:  # only what the start-up and GET /v1/incidents read
        incidents = Incidents()

    with serving(create_app(settings(tmp_path), triage=Triage())) as url:
        page.goto(url + "/")
        panel = page.locator("#incidents-section")
        expect(panel).to_be_visible()
        row = panel.locator("tbody tr")
        expect(row).to_have_count(1)
        expect(row).to_contain_text("billing")
        expect(row).to_contain_text("KeyError: <script>window.__injected=1</script> 'customer_id'")
        expect(row).to_contain_text("llm_unavailable")
        assert page.evaluate("window.__injected") is None


def test_incidents_panel_is_hidden_without_triage(base_url, page):
    """Without a triage repository the page never asks for incidents (it would get a 503 on every load)."""
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "/v1/incidents" in r.url else None)
    page.goto(base_url + "/")
    expect(page.locator("#documents-empty")).to_be_visible()
    page.wait_for_load_state("networkidle")
    expect(page.locator("#incidents-section")).to_be_hidden()
    assert asked == []


def test_api_key_is_asked_for_and_kept(tmp_path, page):
    from funnel.apps.api import create_app

    key = "web-page-test-key"
    with serving(create_app(settings(tmp_path, api_key=key))) as url:
        page.goto(url + "/")
        expect(page.locator("#key-status")).to_contain_text("API key")
        expect(page.locator("#api-key")).to_be_visible()  # the settings open by themselves
        page.fill("#api-key", key)
        page.press("#api-key", "Enter")
        expect(page.locator("#key-status")).to_be_hidden()
        expect(page.locator("#documents-empty")).to_be_visible()
        expect(page.locator("#collection")).to_contain_text("default")

        page.reload()  # kept for the tab (sessionStorage; tests/test_web_page_keys.py has the rest)
        expect(page.locator("#collection")).to_contain_text("default (0 documents)")
        expect(page.locator("#notice")).to_be_hidden()


def test_drop_a_file_then_delete_it(base_url, page):
    page.goto(base_url + "/")
    expect(page.locator("#documents-empty")).to_be_visible()
    drop = page.evaluate_handle(
        """() => {
            const data = new DataTransfer();
            data.items.add(new File(["The Tallinn office opens at nine."], "office hours.txt", {type: "text/plain"}));
            return data;
        }"""
    )
    page.dispatch_event("#dropzone", "drop", {"dataTransfer": drop})
    row = page.locator("#documents tbody tr", has_text="office")
    expect(row.locator(".status")).to_have_text("ready", timeout=TIMEOUT_MS)
    expect(page.locator("#collection")).to_contain_text("default (1 document)")

    page.once("dialog", lambda dialog: dialog.accept())  # "Delete office hours.txt from default?"
    row.get_by_role("button", name=re.compile("^Delete")).click()
    expect(page.locator("#documents-empty")).to_be_visible()
    expect(page.locator("#upload-status")).to_contain_text("Deleted")


def test_each_citation_shows_where_it_is_in_its_file(base_url, page, tmp_path):
    """A CSV's citation reads "row 12-14" (its loader's unit), a Markdown one its heading trail too: in the
    sources under the answer and in the passage panel."""
    towns = "".join(f"Town {i},Country {i}\n" for i in range(1, 40))
    rows = "city,country\n" + towns + "Zanzibar City,Tanzania\n"
    (tmp_path / "cities.csv").write_text(rows)
    (tmp_path / "guide.md").write_text("# Shipping\n\n## Anvils\n\nThe anvil ships on Mondays by train.")
    page.goto(base_url + "/")
    page.set_input_files("#file", [str(tmp_path / "cities.csv"), str(tmp_path / "guide.md")])
    for name in ("cities", "guide"):
        row = page.locator("#documents tbody tr", has_text=name)
        expect(row.locator(".status")).to_have_text("ready")

    page.fill("#question", "Which country is Zanzibar City in?")
    page.press("#question", "Enter")
    sources = page.locator(".turn .sources").last
    expect(sources.locator("li").first).to_contain_text(re.compile(r"cities\.csv — row \d+-\d+"))
    page.locator(".turn .answer").last.locator("button.cite").first.click()
    expect(page.locator("#passage-where")).to_have_text(re.compile(r"row \d+-\d+"))
    page.keyboard.press("Escape")

    page.fill("#question", "Which day does the anvil ship by train?")
    page.press("#question", "Enter")
    expect(page.locator(".turn")).to_have_count(2)
    expect(page.locator(".turn .sources").last.locator("li").first).to_contain_text(
        re.compile(r"guide\.md — L\d+-\d+ · Shipping > Anvils"))
