"""Security headers (issue 40) on every response of a real server: nosniff, no framing, no referrer, and a
Content-Security-Policy by what the response is (`funnel.apps.api.middleware`): the page runs only its own
files, an uploaded file is sandboxed (a PDF excepted), JSON loads nothing, the docs pages are left to their
CDN. The page keeps working under its policy: no inline script, style or handler to block, every file it
loads served with a type nosniff accepts, and in Chromium (where installed) no violation."""

from __future__ import annotations

import re
import time
from pathlib import Path

import httpx
import pytest
from api_support import upload, wait_done
from helpers import serving
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from funnel.apps.api import STATIC_DIR, create_app
from funnel.apps.api.middleware import SecurityHeaders
from funnel.apps.settings import Settings

KEY = "legacy-admin-key-0123"
SAMPLE_PDF = Path(__file__).parent.parent / "samples" / "docs" / "portfolio_companies.pdf"
HTML = b"<html><body><p>release notes</p><script>fetch('/v1/keys')</script></body></html>\n"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("headers")
    settings = Settings(embedder="hashing", reranker="lexical", data_dir=root / "data", api_key=KEY)
    with serving(create_app(settings)) as url, httpx.Client(base_url=url, headers={"X-API-Key": KEY},
                                                           timeout=60) as admin:
        assert admin.post("/v1/collections", json={"name": "a"}).status_code == 201
        made = upload(admin, "a", [("notes.html", HTML), (SAMPLE_PDF.name, SAMPLE_PDF.read_bytes())]).json()
        wait_done(admin, "a")
        yield url, admin, {Path(d["filename"]).suffix: d["id"] for d in made}


def _policy(response: httpx.Response) -> dict[str, str]:
    """The response's CSP as {directive: sources}, after checking the headers every response carries."""
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["referrer-policy"] == "no-referrer"
    text = response.headers.get("content-security-policy")
    if text is None:
        return {}
    pairs = [d.strip().split(" ", 1) for d in text.split(";") if d.strip()]
    return {p[0]: (p[1] if len(p) > 1 else "") for p in pairs}


def test_the_page_runs_only_its_own_files(server):
    url, _, _ = server
    page = httpx.get(url + "/")
    policy = _policy(page)
    assert page.status_code == 200 and policy["default-src"] == "'self'"
    assert policy["frame-ancestors"] == "'none'"
    assert "unsafe" not in page.headers["content-security-policy"]
    assert policy["base-uri"] == "'none'"


def test_the_page_has_nothing_inline_for_its_policy_to_block(server):
    """What lets the page's policy go without hashes or 'unsafe-inline': were one added, the page would
    break in browsers, so it fails here first."""
    html = (STATIC_DIR / "index.html").read_text(encoding="utf-8")
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html), "an inline <script>"
    assert not re.search(r"<style\b|\sstyle=", html, re.I), "an inline style"
    assert not re.search(r"\son[a-z]+\s*=", html, re.I), "an event-handler attribute"
    assert not re.search(r"\b(src|href)=\"(https?:)?//", html), "a file from another origin"
    # Nor do the scripts parse strings as code or set style attributes (an `h(..., {style: ...})` included).
    unsafe = re.compile(r"\beval\(|new Function\(|\.innerHTML\s*=|insertAdjacentHTML|setAttribute\(\"style\"|"
                        r"\bstyle:|cssText")
    for script in STATIC_DIR.glob("*.js"):
        found = unsafe.search(script.read_text(encoding="utf-8"))
        assert found is None, f"{script.name}: {found and found.group()}"


def test_every_file_the_page_loads_has_a_type_nosniff_accepts(server):
    url, _, _ = server
    html = httpx.get(url + "/").text
    loaded = re.findall(r"(?:src|href)=\"(/static/[^\"]+)\"", html)
    loaded += [f"/static/{p.name}" for p in STATIC_DIR.glob("*.js")]  # the modules app.js imports
    assert "/static/app.js" in loaded and "/static/style.css" in loaded
    for path in loaded:
        response = httpx.get(url + path)
        assert response.status_code == 200, path
        kind = response.headers["content-type"]
        assert ("javascript" in kind) if path.endswith(".js") else kind.startswith("text/css"), (path, kind)
        _policy(response)


def test_an_uploaded_html_file_is_sandboxed(server):
    url, admin, ids = server
    response = admin.get(f"/v1/collections/a/documents/{ids['.html']}/file")
    assert response.status_code == 200 and response.content == HTML
    assert response.headers["content-type"].startswith("text/plain")
    policy = _policy(response)
    assert "sandbox" in policy and policy["sandbox"] == "" and policy["default-src"] == "'none'"


def test_a_pdf_is_not_sandboxed_so_browsers_show_it(server):
    url, admin, ids = server
    response = admin.get(f"/v1/collections/a/documents/{ids['.pdf']}/file")
    assert response.status_code == 200 and response.headers["content-type"] == "application/pdf"
    assert _policy(response) == {"frame-ancestors": "'none'"}


def test_json_errors_and_unknown_paths(server):
    url, admin, _ = server
    api = {"default-src": "'none'", "frame-ancestors": "'none'"}
    listed = admin.get("/v1/collections")
    assert listed.status_code == 200 and _policy(listed) == api
    refused = httpx.get(url + "/v1/collections")
    assert refused.status_code == 401 and _policy(refused) == api
    refused_file = httpx.get(url + "/v1/collections/a/documents/x/file")
    assert refused_file.status_code == 401 and "sandbox" in _policy(refused_file)
    unknown = admin.get("/no/such/path")
    assert unknown.status_code == 404 and _policy(unknown) == api
    no_file = admin.get("/v1/collections/a/documents/0123456789abcdef/file")
    assert no_file.status_code == 404 and "sandbox" in _policy(no_file)


def test_the_docs_pages_keep_their_cdn(server):
    url, _, _ = server
    for path in ("/docs", "/redoc"):
        response = httpx.get(url + path)
        assert response.status_code == 200 and _policy(response) == {}, path


def test_a_header_the_route_set_is_kept():
    async def framed(request):
        return PlainTextResponse("ok", headers={"X-Frame-Options": "SAMEORIGIN",
                                                "Content-Security-Policy": "x"})

    with serving(SecurityHeaders(Starlette(routes=[Route("/", framed)]))) as url:
        response = httpx.get(url + "/")
    assert response.headers["content-security-policy"] == "x"
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers.get_list("x-frame-options") == ["SAMEORIGIN"]


@pytest.mark.slow
def test_chromium_reports_no_violation_on_the_page(server):
    web = pytest.importorskip("test_web_page")  # skips as the page's tests do, without playwright or Chromium
    url, _, _ = server
    for browser in web.launch_browser():
        for page in web.fresh_page(browser):  # it also fails on a script error or a fetch from elsewhere
            violations: list[str] = []
            page.on("console", lambda m: violations.append(m.text) if "Security Policy" in m.text else None)
            page.goto(url + "/")
            web.expect(page.locator("#health")).to_contain_text("funnel")
            page.fill("#api-key", KEY)
            page.click("#key-form button[type=submit]")
            web.expect(page.locator("#collection option", has_text="a (2 documents)")).to_be_attached()
            page.select_option("#collection", "a")
            web.expect(page.locator("#documents tbody tr", has_text="notes.html")).to_be_visible()
            time.sleep(0.5)  # a late report
            assert not violations, violations
