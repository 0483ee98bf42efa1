"""Triage results to Slack through an incoming webhook.

`SlackNotifier.notify(result)` turns a `TriageResult` into a Block Kit message and posts it, with three
guards in front of the HTTP call:

- de-duplication by `result.fingerprint`: the first occurrence opens a window (`dedupe_window_s`) and is
  sent; later occurrences inside the window are only counted. The first occurrence after the window sends a
  new message that says how many happened meanwhile ("seen 4 times in the last 2 hours").
- a rate limit: at most `rate_per_minute` messages in any rolling minute. A message over the limit is
  dropped (not queued); its occurrence is still counted and reported by the next message that goes out.
- where the two guards keep their state: `state`, an `AlertState` (`funnel.apps.state.alerts`). By default
  this process's memory; with `PostgresAlertState` there the service database, so that every
  `funnel serve` process shares one window per fingerprint and one rate limit. When the shared state cannot
  be reached the notifier posts anyway, de-duplicated within this process only, and says so in the
  delivery's detail: an on-call engineer would rather get a possibly duplicate alert than none.
- retries: 429 (honouring `Retry-After`, capped at 30 s), 5xx, timeouts and connection errors are retried
  with exponential backoff; any other 4xx fails at once with Slack's plain-text reason.

Nothing here raises for a delivery problem: `notify` returns a `Delivery` (`funnel.apps.state.alerts`, where
the incident store reads it) saying what happened. Everything
in the message goes through `redact` first, and the webhook URL (itself a credential) is never put in a log
line or a `Delivery.detail`.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable

import httpx

from funnel.apps.state.alerts import (
    Admission,
    AlertState,
    Deduplicated,
    Delivery,
    DeliveryStatus,
    EmbeddedAlertState,
    RateLimited,
    Reservation,
)
from funnel.apps.state.incident_schema import TriageResult
from funnel.apps.state.redact import redact
from funnel.apps.triage.slack_message import blocks_for, cut, duration
from funnel.errors import ConfigError, StoreError, UpstreamError, UpstreamTimeout, body_excerpt
from funnel.http import Retry, Upstream
from funnel.http import retry_after as _retry_after  # noqa: F401 (the reliability fuzz reads it from here)

log = logging.getLogger(__name__)

RETRY_AFTER_CAP_S = 30.0
_DETAIL_CHARS = 300
SHARED_STATE_RETRY_S = 30.0  # after the shared state failed, how long this process keeps to its own


class SlackNotifier:
    """Posts triage results to one Slack incoming webhook. Thread-safe; cheap to build (no connection).

    `client` is used as given (tests hand in one over a local server); without one, an `httpx.Client` is
    created on first use. `timeout` applies to every request. `max_retries` is the number of retries after
    the first attempt. `state` keeps the de-duplication windows and the rate limit (this process's memory
    unless given). `clock` (seconds; the state's own clock unless given) and `sleep` are injectable for
    tests.
    """

    def __init__(
        self,
        webhook_url: str,
        client: httpx.Client | None = None,
        *,
        timeout: float = 10,
        max_retries: int = 4,
        backoff: float = 0.5,
        rate_per_minute: int = 20,
        dedupe_window_s: float = 3600,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        state: AlertState | None = None,
    ):
        _check_url(webhook_url)
        if timeout <= 0:
            raise ConfigError(f"timeout must be positive, got {timeout}")
        if max_retries < 0:
            raise ConfigError(f"max_retries must be 0 or more, got {max_retries}")
        if backoff < 0:
            raise ConfigError(f"backoff must be 0 or more, got {backoff}")
        if rate_per_minute < 1:
            raise ConfigError(f"rate_per_minute must be at least 1, got {rate_per_minute}")
        if dedupe_window_s < 0:
            raise ConfigError(f"dedupe_window_s must be 0 or more, got {dedupe_window_s}")
        self._secret_parts = _secret_parts(webhook_url)
        _LOG_SCRUBBER.watch(self._secret_parts)
        self.timeout = float(timeout)
        self.max_retries = max_retries
        self.backoff = float(backoff)
        self.rate_per_minute = rate_per_minute
        self.dedupe_window_s = float(dedupe_window_s)
        self.state = state if state is not None else EmbeddedAlertState()
        self._clock = clock or self.state.clock
        self._sleep = sleep
        self._retry = Retry(max_retries, self.backoff, RETRY_AFTER_CAP_S)
        self._upstream = Upstream("slack", webhook_url, self.timeout, client)
        self._local = EmbeddedAlertState()  # while `state` cannot be reached
        self._shared_down: tuple[float, str] | None = None  # (until, why)

    def __repr__(self) -> str:  # never shows the webhook URL
        return (
            f"SlackNotifier(webhook=[REDACTED], rate_per_minute={self.rate_per_minute}, "
            f"dedupe_window_s={self.dedupe_window_s:g})"
        )

    def close(self) -> None:
        """Closes the client this notifier created (an injected client belongs to the caller)."""
        self._upstream.close()

    # --- the one verb ----------------------------------------------------------------------------------

    def notify(self, result: TriageResult) -> Delivery:
        """Posts `result` unless it is a duplicate or over the rate limit; never raises for delivery.

        A rate-limited message is dropped, not queued: its occurrence is counted and the next message for
        the fingerprint reports it. A failed message opens no de-duplication window, so the next occurrence
        tries again (and reports this one too).
        """
        fingerprint = result.fingerprint
        key = json.dumps([result.service, fingerprint])  # the same error in two services is two incidents
        now = self._clock()
        state, admitted, note = self._admit(key, now)
        if not isinstance(admitted, Reservation):
            delivery = self._held_back(admitted, now, note)
            log.info("slack: %s for %s (%s)", delivery.status.value, fingerprint, delivery.detail)
            return delivery
        span = max(0.0, now - admitted.since) if admitted.count > 1 else None
        try:
            payload = self.blocks_for(result, admitted.count, span_s=span)
            sent, attempts, detail = self._post(payload)
        except Exception as e:  # noqa: BLE001 (a bug must not take the caller, an API request, down with it)
            reason = f"{type(e).__name__}: {self._scrub(str(e))}"
            sent, attempts, detail = False, 0, f"could not build or post the message: {reason}"
        self._settle(state, admitted, sent)
        if sent:
            return Delivery(DeliveryStatus.SENT, attempts, detail + note, admitted.count)
        log.warning("slack: delivery failed for %s: %s", fingerprint, detail)
        return Delivery(DeliveryStatus.FAILED, attempts, detail + note, admitted.count)

    # --- the message -----------------------------------------------------------------------------------

    def blocks_for(self, result: TriageResult, count: int = 1, *, span_s: float | None = None) -> dict:
        """The Block Kit payload `{"text": fallback, "blocks": [...]}` for `result`, redacted and escaped.

        `count` occurrences are reported, over the last `span_s` seconds (the de-duplication window when
        not given).
        """
        return blocks_for(result, count, span_s, self.dedupe_window_s)

    # --- guards: de-duplication and rate limit, in `state` ----------------------------------------------

    def _admit(self, key: str, now: float) -> tuple[AlertState, Admission, str]:
        """Asks the state; when it fails (the database is down), this process's own state for
        `SHARED_STATE_RETRY_S`, so that the alert still goes out and a burst is not posted once per
        occurrence. The note says so in the delivery's detail."""
        down = self._shared_down
        if down is None or not now < down[0] <= now + SHARED_STATE_RETRY_S:  # over, or the clock went back
            try:
                admitted = self.state.admit(key, now, self.dedupe_window_s, self.rate_per_minute)
                self._shared_down = None
                return self.state, admitted, ""
            except StoreError as e:
                log.warning("slack: de-duplicating in this process only for %gs: %s", SHARED_STATE_RETRY_S, e)
                down = self._shared_down = (now + SHARED_STATE_RETRY_S, str(e))
        admitted = self._local.admit(key, now, self.dedupe_window_s, self.rate_per_minute)
        return self._local, admitted, f"; de-duplicated in this process only ({down[1]})"

    def _held_back(self, admitted: Deduplicated | RateLimited, now: float, note: str) -> Delivery:
        if isinstance(admitted, Deduplicated):
            ago = duration(max(0.0, now - admitted.window_start))
            detail = f"already sent within the last {ago}; {admitted.in_window} occurrences in this window"
            return Delivery(DeliveryStatus.DEDUPLICATED, 0, detail + note, admitted.in_window)
        detail = f"over {self.rate_per_minute} Slack messages a minute: dropped, not queued"
        return Delivery(DeliveryStatus.RATE_LIMITED, 0, detail + note, admitted.unreported)

    def _settle(self, state: AlertState, reservation: Reservation, sent: bool) -> None:
        try:
            state.settle(reservation, sent)
        except StoreError as e:  # the message's outcome stands; a failed one's window stays open
            log.warning("slack: could not record the outcome of the message for %s: %s", reservation.key, e)

    # --- HTTP --------------------------------------------------------------------------------------------

    def _post(self, payload: dict) -> tuple[bool, int, str]:
        attempts, detail = 0, ""
        for attempt in range(1, self.max_retries + 2):
            attempts, response = attempt, None
            try:
                response = self._upstream.send("", payload)
            except UpstreamTimeout:
                detail = f"Slack did not answer within {self.timeout:g}s"
            except UpstreamError as e:  # what httpx said, without the URL: the webhook is the secret
                cause = e.__cause__
                detail = f"cannot reach Slack: {type(cause).__name__}: {self._scrub(str(cause))}"
            else:
                if response.is_success:
                    return True, attempt, "delivered" if attempt == 1 else f"delivered on attempt {attempt}"
                detail = f"Slack answered HTTP {response.status_code}: {self._scrub(_body(response))}"
                if not self._retry.retryable(response.status_code):
                    return False, attempt, detail  # 400 invalid_payload, 403 invalid_token, 404, 410: final
            if attempt <= self.max_retries:
                delay = self._retry.delay(attempt, response)
                log.info("slack: attempt %d failed (%s); retrying in %.2fs", attempt, detail, delay)
                self._sleep(delay)
        return False, attempts, f"{detail} (gave up after {attempts} attempts)"

    def _scrub(self, text: str) -> str:
        """One line, without the webhook URL or any part of it that carries the secret, redacted, cut."""
        for part in self._secret_parts:
            text = text.replace(part, "[webhook]")
        return cut(redact(" ".join(text.split())), _DETAIL_CHARS)


# --- helpers -------------------------------------------------------------------------------------------


class _WebhookLogScrubber(logging.Filter):
    """httpx logs every request's URL at INFO ("HTTP Request: POST https://hooks.slack.com/..."); this
    filter, on the httpx and httpcore loggers, puts `[webhook]` in place of any webhook URL a notifier
    holds, so turning on INFO logging does not leak it."""

    def __init__(self) -> None:
        super().__init__()
        self._parts: set[str] = set()
        self._lock = threading.Lock()
        self._installed = False

    def watch(self, parts: list[str]) -> None:
        with self._lock:
            self._parts.update(parts)
            if not self._installed:
                for name in ("httpx", "httpcore"):
                    logging.getLogger(name).addFilter(self)
                self._installed = True

    def filter(self, record: logging.LogRecord) -> bool:
        parts = sorted(self._parts, key=len, reverse=True)
        if not parts:
            return True
        message = record.getMessage()
        scrubbed = message
        for part in parts:
            scrubbed = scrubbed.replace(part, "[webhook]")
        if scrubbed != message:
            record.msg, record.args = scrubbed, None
        return True


_LOG_SCRUBBER = _WebhookLogScrubber()


def _check_url(url: str) -> None:
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError):
        raise ConfigError("the Slack webhook URL is not a valid URL") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ConfigError("the Slack webhook URL must be an http(s) URL with a host")


def _secret_parts(url: str) -> list[str]:
    """The strings that would give the webhook away: the URL as given and as httpx prints it, its path."""
    parsed = httpx.URL(url)
    parts = {url, str(parsed), url.rstrip("/")}
    path = parsed.raw_path.decode("ascii", "replace")
    if len(path) > 1:
        parts.add(path)
        parts.add(path.split("?", 1)[0])
        last = path.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
        if len(last) >= 8:  # Slack's secret is the last segment; a body may echo it alone
            parts.add(last)
    return sorted((p for p in parts if len(p) > 1), key=len, reverse=True)


def _body(response: httpx.Response) -> str:
    return body_excerpt(response.text, _DETAIL_CHARS)  # a proxy's HTML page as its text; errors="replace"
