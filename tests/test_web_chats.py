"""The web page's past chats, in headless Chromium against funnel's real app on 127.0.0.1 (the browser and
the page fixture are test_web_page's: it skips the same way without Debian's chromium or playwright)."""

from __future__ import annotations

import re

import httpx
import pytest
from api_support import upload, wait_done
from helpers import serving
from test_web_page import TIMEOUT_MS, browser, page, settings  # noqa: F401 (fixtures)

pytestmark = pytest.mark.slow

NOTE = (b"# Zentara Robotics\n\nIris Kallas is the CEO of Zentara Robotics. Zentara Robotics was founded in 2014 "
        b"and has 287 employees.\n\n# Travel\n\nThe per diem for Berlin is 28 EUR.\n")


def ask(tab, question: str) -> None:
    """Asks on the page `tab` and waits for the whole answer."""
    from playwright.sync_api import expect

    tab.fill("#question", question)
    tab.press("#question", "Enter")
    expect(tab.locator(".turn .info").last).to_contain_text("answered by", timeout=TIMEOUT_MS)


def test_past_chats_are_listed_reopened_renamed_and_deleted(tmp_path, page):  # noqa: F811
    from playwright.sync_api import expect

    from funnel.apps.api import create_app

    with serving(create_app(settings(tmp_path))) as url:
        with httpx.Client(base_url=url, timeout=30) as client:
            assert upload(client, "default", [("zentara.md", NOTE)]).status_code == 202
            wait_done(client, "default")
        page.goto(url + "/")
        chats = page.locator("#chats-list li")
        expect(page.locator("#chats-status")).to_have_text("No past chats yet.")

        ask(page, "Who is the CEO of Zentara Robotics?")
        ask(page, "How many employees does it have?")
        expect(chats).to_have_count(1)
        expect(chats.first).to_contain_text("Who is the CEO of Zentara Robotics?")
        expect(chats.first).to_contain_text("2 questions")
        page.click("#conversation-new")
        ask(page, "What is the per diem for Berlin?")
        expect(chats).to_have_count(2)
        expect(chats.first).to_contain_text("per diem")  # the most recent first

        # Reopen the first chat: its turns come back, with their citations, and a question continues it.
        chats.filter(has_text="CEO").locator(".chat-open").click()
        turns = page.locator("#conversation .turn")
        expect(turns).to_have_count(2)
        expect(turns.first.locator(".question")).to_contain_text("Who is the CEO of Zentara Robotics?")
        expect(turns.first.locator(".answer")).to_contain_text("Iris Kallas")
        expect(turns.first.locator("button.cite").first).to_be_visible()
        turns.first.locator("button.cite").first.click()
        expect(page.locator("#passage")).to_contain_text("Iris Kallas")
        page.keyboard.press("Escape")
        with page.expect_request(re.compile(r"/ask$")) as follow_up:
            ask(page, "When was it founded?")
        chat_id = chats.filter(has_text="CEO").get_attribute("data-id")
        assert follow_up.value.post_data_json["conversation_id"] == chat_id
        expect(page.locator("#conversation .turn").last.locator(".info")).to_contain_text("Zentara")  # rewritten
        expect(chats.first).to_contain_text("3 questions")  # updated: first again
        page.screenshot(path=str(tmp_path / "past-chats.png"), full_page=True)

        page.once("dialog", lambda dialog: dialog.accept("Zentara people"))
        chats.first.locator(".chat-rename").click()
        expect(chats.first.locator(".chat-open")).to_have_text("Zentara people")
        expect(page.locator("#chats-status")).to_contain_text("Renamed")

        page.once("dialog", lambda dialog: dialog.accept())  # "Delete the chat …?"
        chats.first.locator(".chat-delete").click()
        expect(chats).to_have_count(1)
        expect(page.locator("#conversation .turn")).to_have_count(0)  # the chat on screen was the one deleted
        with httpx.Client(base_url=url, timeout=30) as client:
            assert client.get(f"/v1/collections/default/conversations/{chat_id}").status_code == 404

        page.reload()  # the list comes from the server
        expect(chats).to_have_count(1)
        expect(chats.first).to_contain_text("per diem")
