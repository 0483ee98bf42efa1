"""The Slack notifier against a real HTTP receiver on 127.0.0.1.

The receiver is the shared fake server of upstream_support, which records every body it gets and answers
from a script (200 "ok", 429 + Retry-After, 500, 400 "invalid_payload", an answer slower than the client's
timeout). Time is faked: the clock is a counter the test moves, and `sleep` records its delays.

De-duplication and the rate limit are a contract (`AlertStateContract`) that every alert state's test class
inherits: this process's memory here, the service database in test_state_triage.py.
"""

from __future__ import annotations

import json
import logging
import threading
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest
from helpers import FakeClock
from upstream_support import FakeServer, Reply, closed_port, fake  # noqa: F401 (fake: a fixture)

from funnel.apps.state.alerts import EmbeddedAlertState
from funnel.apps.state.incident_schema import Analysis, AnalysisStatus, RankedFile, SuspectedFile, TriageResult
from funnel.apps.state.redact import REDACTED
from funnel.apps.triage import slack
from funnel.apps.triage.slack import Delivery, DeliveryStatus, SlackNotifier
from funnel.apps.triage.slack_message import HEADER_CHARS, LLM_UNAVAILABLE, MAX_BLOCKS, SECTION_CHARS
from funnel.errors import ConfigError, StoreError

WEBHOOK_SECRET = "xq7SecretWebhookPathZ9"
AWS_KEY_ID = "AKIAIOSFODNN7EXAMPLE"
SLACK_TOKEN = "xoxb-1234567890-abcdefghijkl"


# --- the receiver ---------------------------------------------------------------------------------------


def reply(status: int = 200, body: str = "ok", headers: dict | None = None, delay: float = 0.0) -> Reply:
    """What Slack answers: a status and a plain-text reason ("ok", "invalid_payload")."""
    raw, headers = body.encode(), headers or {}
    return Reply(status=status, raw=raw, content_type="text/plain", headers=headers, delay_s=delay)


class Receiver:
    """The shared fake server as a Slack webhook: `url` holds the secret path, `answer` queues replies."""

    def __init__(self, server: FakeServer) -> None:
        self.server = server
        self.url = f"{server.url}/services/T0001/B0002/{WEBHOOK_SECRET}"
        server.answer(reply())

    @property
    def raw(self) -> list[bytes]:
        with self.server.lock:
            return [r.raw for r in self.server.requests]

    @property
    def paths(self) -> list[str]:
        with self.server.lock:
            return [r.path for r in self.server.requests]

    @property
    def bodies(self) -> list[dict]:
        return [json.loads(raw) for raw in self.raw]

    def answer(self, *replies: Reply) -> None:
        self.server.queue(*replies)


@pytest.fixture
def receiver(fake):
    return Receiver(fake)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1000.0)


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def alert_state():
    """The state the notifiers of a test share; None: each keeps its own in memory (the default)."""
    return None


@pytest.fixture
def make(receiver, clock, sleeps, alert_state):
    clients = []

    def build(url: str | None = None, **kw) -> SlackNotifier:
        client = httpx.Client()
        clients.append(client)
        kw.setdefault("timeout", 2.0)
        kw.setdefault("state", alert_state)
        return SlackNotifier(url or receiver.url, client, clock=clock, sleep=sleeps.append, **kw)

    yield build
    for c in clients:
        c.close()


def result(fingerprint: str = "fp-1", *, analysis: bool = True, **kw) -> TriageResult:
    files = [
        RankedFile(
            path=f"src/app/mod{i}.py",
            rank=i + 1,
            score=1.0 / (i + 1),
            signals=["frame"] if i < 2 else ["search"],
            frames=[f"f{i}:{10 + i}"] if i < 2 else [],
            line_start=10 + i,
            line_end=20 + i,
        )
        for i in range(7)
    ]
    a = None
    if analysis:
        a = Analysis(
            summary="The user cache returns None for deleted users.",
            root_cause="get_user() dereferences the cached row without checking it.",
            suspected_files=[
                SuspectedFile(
                    path=f"src/app/mod{i}.py", line_start=10 + i, line_end=12 + i, reason=f"reason {i}"
                )
                for i in range(7)
            ],
            fix_suggestion="Check for None before using the row.",
            confidence=0.82,
        )
    values = {
        "service": "billing",
        "exception_type": "AttributeError",
        "message": "'NoneType' object has no attribute 'email'",
        "fingerprint": fingerprint,
        "files": files,
        "analysis": a,
        "analysis_status": AnalysisStatus.OK if analysis else AnalysisStatus.LLM_UNAVAILABLE,
        "analysis_reason": "" if analysis else "no LLM configured",
    }
    values.update(kw)
    return TriageResult(**values)


def blocks_of(payload: dict, kind: str) -> list[dict]:
    return [b for b in payload["blocks"] if b["type"] == kind]


def all_text(payload: dict) -> str:
    return json.dumps(payload, ensure_ascii=False)


# --- the message -----------------------------------------------------------------------------------------


def test_payload_structure_as_received(make, receiver):
    delivery = make().notify(result())
    assert delivery == Delivery(DeliveryStatus.SENT, 1, "delivered", 1)
    assert delivery.status == "sent"
    [payload] = receiver.bodies
    assert receiver.paths == [f"/services/T0001/B0002/{WEBHOOK_SECRET}"]
    assert payload["text"].startswith("AttributeError in billing: ")
    [header] = blocks_of(payload, "header")
    assert header["text"] == {"type": "plain_text", "text": "AttributeError in billing"}
    sections = [b["text"]["text"] for b in blocks_of(payload, "section")]
    assert all(b["text"]["type"] == "mrkdwn" for b in blocks_of(payload, "section"))
    assert any("*Root cause*\nget_user() dereferences" in s for s in sections)
    [files] = [s for s in sections if s.startswith("*Suspected files*")]
    bullets = files.split("\n")[1:]
    assert bullets == [f"• `src/app/mod{i}.py:{10 + i}-{12 + i}` — reason {i}" for i in range(5)]  # top 5
    contexts = [b["elements"][0]["text"] for b in blocks_of(payload, "context")]
    assert contexts[0] == "confidence: 0.82 · analysis: ok"
    assert contexts[1] == "fingerprint `fp-1` · first occurrence in the last hour"


def test_without_analysis_says_llm_unavailable_and_lists_ranked_files(make, receiver):
    make().notify(result(analysis=False))
    [payload] = receiver.bodies
    sections = [b["text"]["text"] for b in blocks_of(payload, "section")]
    assert any(s.startswith(f"*{LLM_UNAVAILABLE}*\n_no LLM configured_") for s in sections)
    [files] = [s for s in sections if s.startswith("*Ranked files*")]
    assert files.split("\n")[1:3] == [
        "• `src/app/mod0.py:10-20` — frame; frames f0:10",
        "• `src/app/mod1.py:11-21` — frame; frames f1:11",
    ]
    assert len(files.split("\n")) == 1 + 5
    assert "confidence" not in all_text(payload)


def test_secrets_are_redacted_in_what_slack_receives(make, receiver):
    r = result(
        message=f"connect failed: postgres://app:hunter2@db/x token={SLACK_TOKEN}",
        exception_type="KeyError",
    )
    r.analysis.root_cause = f"The key {AWS_KEY_ID} is hard-coded; password=swordfish in settings.py"
    r.files[0].frames = ["Authorization: Bearer abcdefghijklmnopqrstuvwxyz0123"]
    make().notify(r.model_copy(update={"analysis": None}))
    make().notify(r.model_copy(update={"fingerprint": "fp-2"}))
    raw = b"".join(receiver.raw).decode()
    for secret in ("hunter2", SLACK_TOKEN, AWS_KEY_ID, "swordfish", "abcdefghijklmnopqrstuvwxyz0123"):
        assert secret not in raw
    assert "postgres://app:***@db/x" in raw and f"password={REDACTED}" in raw


def test_mrkdwn_control_characters_are_escaped(make, receiver):
    r = result(message="<!channel> a < b && c > d <http://evil|click>")
    r.analysis.root_cause = "compare <T> & friends"
    make().notify(r)
    [payload] = receiver.bodies
    sections = "\n".join(b["text"]["text"] for b in blocks_of(payload, "section"))
    assert "&lt;!channel&gt; a &lt; b &amp;&amp; c &gt; d &lt;http://evil|click&gt;" in sections
    assert "compare &lt;T&gt; &amp; friends" in sections
    assert "<" not in sections and ">" not in sections
    assert "<!channel>" not in payload["text"]


def test_slack_limits_are_respected(make):
    notifier = make()
    r = result(exception_type="VeryLong" * 40 + "Error", message="m&" * 5000)
    r.analysis.root_cause = "<>" * 4000
    r.analysis.fix_suggestion = "x" * 10_000
    payload = notifier.blocks_for(r, count=3)
    assert len(payload["blocks"]) <= MAX_BLOCKS
    [header] = blocks_of(payload, "header")
    assert len(header["text"]["text"]) <= HEADER_CHARS
    for block in blocks_of(payload, "section"):
        text = block["text"]["text"]
        assert len(text) <= SECTION_CHARS
        assert not text.rstrip("…").endswith(("&", "&a", "&am", "&amp", "&l", "&lt", "&g", "&gt"))
    for block in blocks_of(payload, "context"):
        assert all(len(e["text"]) <= SECTION_CHARS for e in block["elements"])
    assert len(payload["text"]) <= SECTION_CHARS
    assert payload["blocks"][-1]["elements"][0]["text"].endswith("seen 3 times in the last hour")


# --- retries -----------------------------------------------------------------------------------------------


def test_429_honours_retry_after(make, receiver, sleeps):
    receiver.answer(reply(429, "rate_limited", {"Retry-After": "2"}))
    delivery = make().notify(result())
    assert (delivery.status, delivery.attempts) == ("sent", 2)
    assert sleeps == [2.0]
    assert len(receiver.bodies) == 2


def test_retry_after_is_capped_at_thirty_seconds(make, receiver, sleeps):
    receiver.answer(reply(429, "rate_limited", {"Retry-After": "600"}), reply(429, "rate_limited"))
    delivery = make().notify(result())
    assert (delivery.status, delivery.attempts) == ("sent", 3)
    assert sleeps == [30.0, 1.0]  # without the header: the backoff of attempt 2


def test_5xx_is_retried_with_exponential_backoff_then_fails(make, receiver, sleeps):
    receiver.answer(*[reply(500, "internal error")] * 5)
    delivery = make(max_retries=4, backoff=0.5).notify(result())
    assert delivery.status == DeliveryStatus.FAILED
    assert delivery.attempts == 5 and len(receiver.bodies) == 5
    assert sleeps == [0.5, 1.0, 2.0, 4.0]
    assert "HTTP 500: internal error" in delivery.detail and "gave up after 5 attempts" in delivery.detail


def test_5xx_then_success(make, receiver, sleeps):
    receiver.answer(reply(503, "busy"))
    delivery = make().notify(result())
    assert (delivery.status, delivery.attempts, sleeps) == ("sent", 2, [0.5])


def test_400_fails_at_once_with_slacks_reason(make, receiver, sleeps):
    receiver.answer(reply(400, "invalid_payload"))
    delivery = make().notify(result())
    assert (delivery.status, delivery.attempts) == ("failed", 1)
    assert delivery.detail == "Slack answered HTTP 400: invalid_payload"
    assert sleeps == [] and len(receiver.bodies) == 1


def test_a_reply_slower_than_the_timeout_is_retried(make, receiver, sleeps):
    receiver.answer(reply(200, "ok", delay=1.5))
    delivery = make(timeout=0.3).notify(result())
    assert (delivery.status, delivery.attempts) == ("sent", 2)
    assert sleeps == [0.5]
    assert len(receiver.bodies) == 2


def test_a_receiver_that_always_times_out(make, receiver, sleeps):
    receiver.answer(*[reply(200, "ok", delay=1.0)] * 2)
    delivery = make(timeout=0.2, max_retries=1).notify(result())
    assert (delivery.status, delivery.attempts) == ("failed", 2)
    assert delivery.detail.startswith("Slack did not answer within 0.2s")


def test_connection_refused_is_retried_and_never_raises(make, sleeps):
    url = f"http://127.0.0.1:{closed_port()}/services/T1/B2/{WEBHOOK_SECRET}"
    delivery = make(url, max_retries=2).notify(result())
    assert (delivery.status, delivery.attempts) == ("failed", 3)
    assert delivery.detail.startswith("cannot reach Slack: ConnectError")
    assert sleeps == [0.5, 1.0]
    assert WEBHOOK_SECRET not in delivery.detail


def test_an_error_that_names_the_url_is_scrubbed(clock, sleeps):
    url = f"https://hooks.example.test/services/T1/B2/{WEBHOOK_SECRET}"

    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(
            f"cannot connect to {request.url} (path {request.url.path})", request=request
        )

    client = httpx.Client(transport=httpx.MockTransport(handler))
    delivery = SlackNotifier(url, client, max_retries=0, clock=clock, sleep=sleeps.append).notify(result())
    assert delivery.status == "failed"
    assert WEBHOOK_SECRET not in delivery.detail and "hooks.example.test/services" not in delivery.detail
    assert "[webhook]" in delivery.detail


# --- de-duplication and rate limit: the contract of every alert state -------------------------------------


class AlertStateContract:
    """Every alert state's test class inherits this and provides `alert_state`, the one state that all the
    notifiers `make` builds in a test share."""

    @pytest.fixture
    def alert_state(self):
        raise NotImplementedError

    def test_duplicates_within_the_window_are_counted_not_sent(self, make, receiver, clock):
        notifier = make(dedupe_window_s=3600)
        first = notifier.notify(result("fp-a"))
        clock.now += 60
        second = notifier.notify(result("fp-a"))
        clock.now += 60
        third = notifier.notify(result("fp-a"))
        other = notifier.notify(result("fp-b"))
        assert [d.status for d in (first, second, third, other)] == [
            "sent",
            "deduplicated",
            "deduplicated",
            "sent",
        ]
        assert [d.count for d in (first, second, third)] == [1, 2, 3]
        assert second.attempts == 0
        assert len(receiver.bodies) == 2

    def test_after_the_window_a_new_message_says_how_many_occurred(self, make, receiver, clock):
        notifier = make(dedupe_window_s=3600)
        notifier.notify(result())  # t=0: sent
        clock.now += 600
        notifier.notify(result())  # t=10 min: counted
        clock.now += 600
        notifier.notify(result())  # t=20 min: counted
        clock.now += 3000  # t=70 min: window over
        delivery = notifier.notify(result())
        assert (delivery.status, delivery.count) == ("sent", 3)  # the two counted ones and this one
        seen = receiver.bodies[-1]["blocks"][-1]["elements"][0]["text"]
        assert seen == "fingerprint `fp-1` · seen 3 times in the last hour"
        clock.now += 10
        again = notifier.notify(result())  # a new window opened with that message
        assert (again.status, again.count) == ("deduplicated", 2)

    def test_a_new_window_after_a_quiet_one_reports_a_first_occurrence(self, make, receiver, clock):
        notifier = make(dedupe_window_s=3600)
        notifier.notify(result())
        clock.now += 7200
        delivery = notifier.notify(result())
        assert (delivery.status, delivery.count) == ("sent", 1)
        assert receiver.bodies[-1]["blocks"][-1]["elements"][0]["text"].endswith(
            "first occurrence in the last hour"
        )

    def test_a_failed_message_opens_no_window(self, make, receiver):
        receiver.answer(reply(400, "invalid_payload"))
        notifier = make()
        assert notifier.notify(result()).status == "failed"
        delivery = notifier.notify(result())
        assert (delivery.status, delivery.count) == ("sent", 2)  # reports the failed occurrence too
        assert len(receiver.bodies) == 2

    def test_dedupe_is_thread_safe(self, make, receiver):
        notifier = make()
        barrier = threading.Barrier(16)
        deliveries: list[Delivery] = []
        lock = threading.Lock()

        def worker() -> None:
            barrier.wait()
            d = notifier.notify(result("fp-race"))
            with lock:
                deliveries.append(d)

        threads = [threading.Thread(target=worker) for _ in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        statuses = [d.status for d in deliveries]
        assert statuses.count("sent") == 1 and statuses.count("deduplicated") == 15
        assert sorted(d.count for d in deliveries if d.status == "deduplicated") == list(range(2, 17))
        assert len(receiver.bodies) == 1

    def test_notifiers_on_one_state_share_its_windows_and_its_rate(self, make, receiver):
        first, second = make(rate_per_minute=2), make(rate_per_minute=2)
        assert first.notify(result("fp-a")).status == "sent"
        assert second.notify(result("fp-a")).status == "deduplicated"
        assert second.notify(result("fp-b")).status == "sent"
        assert first.notify(result("fp-c")).status == "rate_limited"
        assert len(receiver.bodies) == 2

    # --- rate limit --------------------------------------------------------------------------------------

    def test_rate_limit_drops_messages_over_the_limit(self, make, receiver, clock):
        notifier = make(rate_per_minute=2)
        d = [notifier.notify(result(f"fp-{i}")) for i in range(3)]
        assert [x.status for x in d] == ["sent", "sent", "rate_limited"]
        assert d[2].attempts == 0 and "not queued" in d[2].detail
        assert len(receiver.bodies) == 2
        clock.now += 30
        assert notifier.notify(result("fp-9")).status == "rate_limited"
        clock.now += 31  # the first two are now more than a minute old
        later = notifier.notify(result("fp-2"))
        assert (later.status, later.count) == ("sent", 2)  # the dropped occurrence is reported
        assert len(receiver.bodies) == 3

    def test_duplicates_do_not_use_the_rate(self, make, receiver):
        notifier = make(rate_per_minute=1)
        notifier.notify(result("fp-a"))
        assert notifier.notify(result("fp-a")).status == "deduplicated"
        assert notifier.notify(result("fp-b")).status == "rate_limited"


class TestEmbeddedAlertState(AlertStateContract):
    @pytest.fixture
    def alert_state(self):
        return EmbeddedAlertState()


# --- the webhook URL is a secret --------------------------------------------------------------------------------


def test_webhook_url_never_in_details_logs_or_repr(make, receiver, caplog):
    caplog.set_level(logging.DEBUG)
    receiver.answer(
        reply(500, f"error for {receiver.url}"),
        reply(429, "rate_limited", {"Retry-After": "1"}),
        reply(200, "ok"),
        reply(404, f"no_service {WEBHOOK_SECRET}"),
    )
    notifier = make(dedupe_window_s=0, rate_per_minute=100)
    deliveries = [notifier.notify(result()), notifier.notify(result())]
    refused = make(f"http://127.0.0.1:{closed_port()}/x/{WEBHOOK_SECRET}", max_retries=1).notify(result())
    assert [d.status for d in deliveries] == ["sent", "failed"]
    texts = [d.detail for d in [*deliveries, refused]] + [repr(notifier), caplog.text]
    assert caplog.text  # httpx and the notifier did log
    for text in texts:
        assert WEBHOOK_SECRET not in text
        assert "/services/T0001/B0002" not in text


def test_invalid_webhook_url_is_a_config_error_without_the_url():
    for url in ("not a url", "ftp://hooks.slack.com/services/T/B/" + WEBHOOK_SECRET, ""):
        with pytest.raises(ConfigError) as e:
            SlackNotifier(url)
        assert WEBHOOK_SECRET not in str(e.value)


def test_settings_are_validated():
    url = "https://hooks.slack.com/services/T/B/x"
    for kw in ({"timeout": 0}, {"max_retries": -1}, {"rate_per_minute": 0}, {"dedupe_window_s": -1}):
        with pytest.raises(ConfigError):
            SlackNotifier(url, **kw)


def test_retry_after_as_an_http_date(make, receiver, sleeps):
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=5), usegmt=True)
    receiver.answer(reply(429, "rate_limited", {"Retry-After": when}))
    assert make().notify(result()).status == "sent"
    [delay] = sleeps
    assert 3.0 <= delay <= 5.0


DOWN = "the database at postgresql://db:5432/funnel is unavailable: connection refused"


class UnreachableState(EmbeddedAlertState):
    """Kept in memory, but failing as a shared state whose database is down does, while `down` is set
    (`settle` too while `settle_down` is)."""

    down = settle_down = False

    def admit(self, *args):
        if self.down:
            raise StoreError(DOWN)
        return super().admit(*args)

    def settle(self, *args):
        if self.settle_down:
            raise StoreError(DOWN)
        super().settle(*args)


def test_an_unreachable_state_costs_dedupe_across_processes_not_the_alert(make, receiver, clock):
    state = UnreachableState()
    state.down = True
    notifier = make(state=state)
    first = notifier.notify(result())  # posted, de-duplicated by this process alone
    state.down = False
    second = notifier.notify(result())  # not asked again for a while: a burst does not wait on it each time
    assert (first.status, second.status) == ("sent", "deduplicated")
    assert first.detail == f"delivered; de-duplicated in this process only ({DOWN})"
    assert len(state) == 0 and len(receiver.bodies) == 1
    clock.now += slack.SHARED_STATE_RETRY_S + 1
    third = notifier.notify(result())  # asked again: it never saw the first, so this one goes out
    assert (third.status, third.detail) == ("sent", "delivered")
    assert len(state) == 1


def test_a_state_that_fails_after_the_post_does_not_fail_the_delivery(make, receiver):
    state = UnreachableState()
    state.settle_down = True
    assert make(state=state).notify(result()).status == "sent"
    assert len(receiver.bodies) == 1


def test_dedupe_state_in_memory_is_bounded(make, clock):
    state = EmbeddedAlertState(max_keys=4)
    notifier = make(rate_per_minute=1000, dedupe_window_s=60, state=state)
    for i in range(10):
        notifier.notify(result(f"fp-{i}"))
    assert len(state) <= 4  # all active: the oldest half was forgotten
    clock.now += 120  # every window is over: expired entries go first
    for i in range(10, 13):
        notifier.notify(result(f"fp-{i}"))
    assert len(state) <= 4
    assert notifier.notify(result("fp-0")).status == "sent"


def test_excerpts_are_not_sent(make, receiver):
    r = result(analysis=False)
    r.files[0].excerpt = "def secret_code(): pass"
    make().notify(r)
    assert b"secret_code" not in receiver.raw[0]


def test_the_slack_bounds_are_settings(tmp_path):
    # A Slack that is down held a report for ~57 s (10 s x 5 attempts) with no way to shorten it.
    from funnel.apps.settings import Settings
    from funnel.apps.triage.build import build_triage

    settings = Settings(embedder="hashing", reranker="none", index=tmp_path / "index", repo=tmp_path,
                        incidents=tmp_path / "incidents.sqlite", slack_webhook_url="http://127.0.0.1:9/hook",
                        slack_timeout_s=0.5, slack_retries=1)
    notifier = build_triage(settings).notifier
    assert (notifier.timeout, notifier.max_retries) == (0.5, 1)
