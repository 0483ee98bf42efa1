"""funnel.http: the one upstream client. Its callers (LLM backends, HTTP rerankers, Slack) have their own
suites; these pin the shared pieces: the error table, redaction and the retry delays."""

from __future__ import annotations

import httpx
import pytest
from upstream_support import Reply, closed_port, fake  # noqa: F401 (fake: a fixture)

from funnel.deadline import DeadlineExceeded
from funnel.errors import UpstreamError, UpstreamTimeout
from funnel.http import Failure, Retry, Upstream, failure_of, without_userinfo


def mocked(handler, base="http://up.test", **kw) -> Upstream:
    return Upstream("test", base, 5.0, httpx.Client(transport=httpx.MockTransport(handler)), **kw)


@pytest.mark.parametrize(
    ("error", "failure"),
    [
        (httpx.ConnectTimeout("slow"), Failure.TIMEOUT),  # a ConnectError too: the first row wins
        (httpx.ReadTimeout("slow"), Failure.TIMEOUT),
        (DeadlineExceeded(), Failure.TIMEOUT),
        (httpx.ConnectError("refused"), Failure.UNREACHABLE),
        (httpx.UnsupportedProtocol("ftp"), Failure.UNREACHABLE),
        (httpx.RemoteProtocolError("cut"), Failure.BROKE),
        (httpx.ReadError("reset"), Failure.BROKE),
        (ValueError("not ours"), None),
    ],
)
def test_the_table_says_what_each_httpx_error_means(error, failure):
    assert failure_of(error) is failure


def test_each_failure_becomes_its_funnel_error():
    def refuse(request):
        raise httpx.ConnectError("refused", request=request)

    with pytest.raises(UpstreamError, match=r"^test: cannot reach http://up.test: ConnectError: refused$"):
        mocked(refuse).post("/x", {})

    def cut(request):
        raise httpx.RemoteProtocolError("peer closed", request=request)

    with pytest.raises(UpstreamError, match=r"^test: http://up.test /x broke off: RemoteProtocolError"):
        mocked(cut).post("/x", {})

    def slow(request):
        raise httpx.ReadTimeout("slow", request=request)

    with pytest.raises(UpstreamTimeout, match=r"timed out \(http://up.test after 5s\)"):
        mocked(slow).post("/x", {})


def test_status_and_body_errors_name_the_path_and_quote_the_body():
    up = mocked(lambda request: httpx.Response(500, text="<h1>boom</h1>"))
    with pytest.raises(UpstreamError, match=r"^test: http://up.test /x answered HTTP 500: boom$"):
        up.post("/x", {})
    up = mocked(lambda request: httpx.Response(200, text="{not json"))
    with pytest.raises(UpstreamError, match=r"^test: http://up.test answered malformed JSON: \{not json$"):
        up.post("", {})


def test_the_key_and_the_urls_password_never_reach_a_message():
    def echo(request):
        return httpx.Response(401, text=f"{request.headers['authorization']} from {request.url}")

    up = mocked(echo, base="http://user:hunter22@up.test", api_key="sk-live-0123456789")
    with pytest.raises(UpstreamError) as caught:
        up.post("/x", {})
    message = str(caught.value)
    assert "sk-live-0123456789" not in message and "hunter22" not in message and "Bearer ***" in message
    assert up.shown == "http://up.test" and without_userinfo("https://a:b@h/p") == "https://h/p"


def test_a_streamed_post_yields_lines_and_a_refused_one_says_so(fake):
    fake.answer(Reply(lines=["one", "", "two"]))
    assert list(Upstream("test", fake.url, 5.0).stream_lines("/s", {})) == ["one", "two"]
    with pytest.raises(UpstreamError, match="cannot reach"):
        list(Upstream("test", f"http://127.0.0.1:{closed_port()}", 5.0).stream_lines("/s", {}))


def test_retry_delays_double_and_honour_retry_after_within_the_cap():
    retry = Retry(retries=4, backoff=0.5, cap=30.0)
    assert [retry.delay(a) for a in (1, 2, 3)] == [0.5, 1.0, 2.0]
    assert retry.delay(1, httpx.Response(429, headers={"Retry-After": "2"})) == 2.0
    assert retry.delay(1, httpx.Response(429, headers={"Retry-After": "600"})) == 30.0
    assert retry.delay(2, httpx.Response(503, headers={"Retry-After": "9"})) == 1.0  # only a 429's counts
    assert [retry.retryable(s) for s in (429, 500, 503, 400, 404)] == [True, True, True, False, False]
