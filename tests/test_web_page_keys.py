"""The web page on a service with keys (issue 34), in headless Chromium against funnel's real app: it asks
for a key when the server answers 401, keeps it for the tab (sessionStorage), sends it on every request (the
SSE ask stream too), and shows only what the key's role may do (GET /v1/keys/me).

Needs what tests/test_web_page.py needs (playwright and Debian's chromium-headless-shell); skips without them.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx
import pytest
from api_support import upload, wait_done
from helpers import serving
from test_web_page import (  # noqa: F401 (fixtures)
    TIMEOUT_MS,
    browser,
    expect,
    failed_responses,
    page,
    screenshot,
    settings,
)

A_TEXT = b"Zentara Robotics is led by Iris Kallas. Its office in Tallinn opens at nine.\n"
B_TEXT = b"The quokka protocol is run by Tomas Vex in Reykjavik.\n"
WRONG = f"fk_{'0' * 12}_{'x' * 43}"


@dataclass
class Team:
    url: str
    admin: str
    reader: str  # a reader of collection a alone
    docs: dict[str, str]


@pytest.fixture
def team(tmp_path):
    """A service with an admin key and a reader key on collection a; collections a and b, a document each."""
    from funnel.apps.api import create_app
    from funnel.apps.state.keys import new_key, open_keys

    store = open_keys(None, tmp_path / "data")
    admin, reader = new_key("admin", None), new_key("reader", ["a"])
    store.add(admin.record)
    with serving(create_app(settings(tmp_path, reranker="lexical"))) as url:
        docs = {}
        with httpx.Client(base_url=url, headers={"X-API-Key": admin.token}, timeout=60) as client:
            for name, text in (("a", A_TEXT), ("b", B_TEXT)):
                assert client.post("/v1/collections", json={"name": name}).status_code == 201
                assert upload(client, name, [(f"{name}.txt", text)]).status_code == 202
                docs[name] = wait_done(client, name)[0]["id"]
        store.add(reader.record)  # once a exists: a new collection takes its name off older keys
        yield Team(url, admin.token, reader.token, docs)


def use_key(page, key: str) -> None:
    page.fill("#api-key", key)
    page.press("#api-key", "Enter")


def one_line(locator) -> str:
    text = locator.inner_text().strip()
    assert text and "\n" not in text and "{" not in text, f"not one readable line: {text!r}"
    return text


def test_a_reader_is_asked_for_a_key_and_sees_only_its_collection(team, page, tmp_path):
    failed = failed_responses(page)
    keys_sent: list[str | None] = []
    page.on("request", lambda r: keys_sent.append(r.headers.get("x-api-key")) if "/v1/" in r.url else None)
    page.goto(team.url + "/")
    expect(page.locator("#key-status")).to_have_text("This server needs an API key.")
    expect(page.locator("#api-key")).to_be_visible()
    expect(page.locator("#question")).to_be_hidden()  # nothing is asked for before the key
    page.wait_for_load_state("networkidle")
    assert failed == [f"401 GET {team.url}/v1/keys/me"]
    screenshot(page, tmp_path, "keys-prompt")

    use_key(page, team.reader)
    expect(page.locator("#key-who")).to_have_text("reader · a")
    expect(page.locator("#collection option")).to_have_text(["a (1 document)"])  # b is not there at all
    expect(page.locator("#documents tbody tr", has_text="a.txt")).to_be_visible()
    for control in ("#dropzone", "#calibrate", "#collection-new"):
        expect(page.locator(control)).to_be_hidden()
    expect(page.locator("#documents .delete")).to_be_hidden()
    expect(page.locator("#calibration-status")).not_to_be_empty()  # the reader may read where it stands

    page.fill("#question", "Who leads Zentara Robotics?")
    page.press("#question", "Enter")
    answer = page.locator(".turn .answer").last
    expect(answer).to_contain_text("Iris Kallas", timeout=TIMEOUT_MS)
    answer.locator("button.cite").first.click()
    expect(page.locator("#passage")).to_contain_text("Zentara")
    page.keyboard.press("Escape")
    chat = page.locator("#chats-list .chat").first
    expect(chat).to_contain_text("Zentara")
    expect(chat.locator(".chat-rename")).to_be_hidden()
    expect(chat.locator(".chat-delete")).to_be_hidden()
    page.wait_for_load_state("networkidle")
    screenshot(page, tmp_path, "keys-reader")

    assert failed == [f"401 GET {team.url}/v1/keys/me"], "a request of normal use failed"
    assert keys_sent[0] is None and set(keys_sent[1:]) == {team.reader}, "a request went without the key"
    assert len(keys_sent) >= 7  # me, collections, documents, calibration, chats, ask (SSE), chunk
    assert page.evaluate("sessionStorage.getItem('funnel.apiKey')") == team.reader
    assert page.evaluate("localStorage.length") == 0

    # A refused action is one line, never a JSON body: a 403 (a control shown by a stale page), a 404 (a
    # document deleted meanwhile).
    page.evaluate("document.body.classList.add('may-calibrate')")
    page.click("#calibrate")
    expect(page.locator("#calibration-status")).to_contain_text("HTTP 403")
    assert "reader" in one_line(page.locator("#calibration-status"))
    with httpx.Client(base_url=team.url, headers={"X-API-Key": team.admin}) as admin:
        assert admin.delete(f"/v1/collections/a/documents/{team.docs['a']}").status_code == 204
    page.locator("#documents tbody tr a.open-file").first.click()
    expect(page.locator("#notice")).to_contain_text("HTTP 404")
    assert one_line(page.locator("#notice")).startswith("Cannot open the file:")
    expect(page.locator("#key-status")).to_be_hidden()  # a 403 or 404 does not ask for another key


def test_an_admin_sees_everything_and_a_new_tab_asks_again(team, page, tmp_path):
    failed = failed_responses(page)
    page.goto(team.url + "/")
    use_key(page, team.admin)
    expect(page.locator("#key-who")).to_have_text("admin · every collection")
    options = page.locator("#collection option")
    expect(options.filter(has_text="b (1 document)")).to_have_count(1)
    expect(options.filter(has_text="a (1 document)")).to_have_count(1)
    page.select_option("#collection", "b")
    expect(page.locator("#documents tbody tr", has_text="b.txt")).to_be_visible()
    for control in ("#dropzone", "#calibrate", "#collection-new", "#documents .delete"):
        expect(page.locator(control)).to_be_visible()
    page.wait_for_load_state("networkidle")
    screenshot(page, tmp_path, "keys-admin")
    assert failed == [f"401 GET {team.url}/v1/keys/me"]

    page.reload()  # the key is kept for the tab
    expect(page.locator("#key-who")).to_have_text("admin · every collection")
    other_tab = page.context.new_page()  # ...and for no other: sessionStorage, not localStorage
    other_tab.goto(team.url + "/")
    expect(other_tab.locator("#key-status")).to_have_text("This server needs an API key.")
    other_tab.close()

    page.click("#settings summary")  # the key's line in the header opens to change or forget it
    page.click("#key-clear")
    expect(page.locator("#key-status")).to_have_text("This server needs an API key.")
    expect(page.locator("#documents")).to_be_hidden()
    assert page.evaluate("sessionStorage.getItem('funnel.apiKey')") is None


def test_a_wrong_key_asks_again_with_one_line(team, page):
    page.goto(team.url + "/")
    expect(page.locator("#key-status")).to_have_text("This server needs an API key.")
    use_key(page, WRONG)
    status = page.locator("#key-status")
    expect(status).to_contain_text("That key was refused")
    assert one_line(status).endswith("Enter another.")
    expect(page.locator("#question")).to_be_hidden()
    expect(page.locator("#api-key")).to_be_focused()

    use_key(page, team.reader)  # the right one then works
    expect(page.locator("#key-who")).to_have_text("reader · a")
    expect(status).to_be_hidden()
    expect(page.locator("#question")).to_be_visible()


def test_an_old_key_in_local_storage_moves_to_the_tab(team, page):
    """A key an older page kept in localStorage is used once, then lives in sessionStorage alone."""
    page.goto(team.url + "/static/style.css")  # same origin, without the page's script
    page.evaluate(f"localStorage.setItem('funnel.apiKey', {team.reader!r})")
    page.goto(team.url + "/")
    expect(page.locator("#key-who")).to_have_text("reader · a")
    assert page.evaluate("localStorage.getItem('funnel.apiKey')") is None
