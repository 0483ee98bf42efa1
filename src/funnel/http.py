"""One client for every HTTP upstream: the LLM servers, the HTTP rerankers and the Slack webhook.

`Upstream` holds one base URL, one timeout, an optional API key and one `httpx.Client` (the injected one, or
one created on first use under a lock). It turns every httpx error into a `FunnelError` through one table,
`FAILURES`, read first match first, as httpx's own `map_exceptions` reads its table: a timeout (httpx's, or
the deadline on the whole call) is an `UpstreamTimeout`, a server that cannot be reached or an exchange that
broke is an `UpstreamError`. A server that cannot be reached stays an `UpstreamError`, not a
`BackendUnavailable`: the LLM fallback and the API's 502 key on it, and `BackendUnavailable` means something
missing here (a package, a model file), not a server down there.

Every message names the server by its URL without userinfo, and `redact` takes the key and the URL's
password out of anything a server echoes back. `Retry` is the backoff of a caller that retries (Slack):
exponential, honouring a 429's `Retry-After` (seconds or an HTTP date), capped.
"""

from __future__ import annotations

import enum
import json
import math
import threading
from collections.abc import Generator
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx

from funnel.deadline import DeadlineExceeded, call_within, iterate_within
from funnel.errors import UpstreamError, UpstreamTimeout, body_excerpt


class Failure(enum.Enum):
    TIMEOUT = "timeout"  # no answer in time: httpx's per-read timeout, or the deadline on the whole call
    UNREACHABLE = "unreachable"  # no connection: the server is down, the name does not resolve, a bad URL
    BROKE = "broke"  # connected, then the exchange broke (reset, truncated body, protocol error)


# httpx's exception -> what happened; the first match wins (so ConnectTimeout is a timeout).
FAILURES: tuple[tuple[type[BaseException], Failure], ...] = (
    (httpx.TimeoutException, Failure.TIMEOUT),
    (DeadlineExceeded, Failure.TIMEOUT),
    (httpx.ConnectError, Failure.UNREACHABLE),
    (httpx.UnsupportedProtocol, Failure.UNREACHABLE),
    (httpx.ProxyError, Failure.UNREACHABLE),
    (httpx.InvalidURL, Failure.UNREACHABLE),
    (httpx.HTTPError, Failure.BROKE),
    (OSError, Failure.UNREACHABLE),
)
CAUGHT = tuple(kind for kind, _ in FAILURES)


def failure_of(error: BaseException) -> Failure | None:
    """What `error` means for an upstream call, by `FAILURES`; None when it is not an upstream failure."""
    return next((failure for kind, failure in FAILURES if isinstance(error, kind)), None)


class Upstream:
    """One HTTP upstream, named in messages as `<stage>: <url without userinfo> ...`."""

    def __init__(
        self,
        stage: str,
        base_url: str,
        timeout: float,
        client: httpx.Client | None = None,
        api_key: str | None = None,
    ):
        self.stage = stage
        self.base = base_url.rstrip("/")
        self.shown = without_userinfo(self.base)
        self.timeout = timeout
        self._api_key = api_key
        self._secrets = [s for s in (api_key, _password(self.base)) if s]
        self._client = client
        self._owns_client = client is None
        self._lock = threading.Lock()

    # --- requests --------------------------------------------------------------------------------------

    def send(self, path: str, payload: dict) -> httpx.Response:
        """The response to a POST of `payload` as JSON, whatever its status; every failure converted."""
        def post() -> httpx.Response:
            url, headers = self.url(path), self.headers()
            return self.client().post(url, json=payload, headers=headers, timeout=self.timeout)

        try:
            # httpx's timeout bounds each read; the deadline bounds the answer (a server trickling it)
            return call_within(self.timeout, post)
        except CAUGHT as e:
            raise self.converted(e, f"{path} broke off".lstrip()) from e

    def post(self, path: str, payload: dict) -> object:
        """The JSON body of a successful POST."""
        response = self.send(path, payload)
        at = f"{path} " if path else ""
        if not response.is_success:
            raise self.error(f"{at}answered HTTP {response.status_code}: {self.excerpt(response.text)}")
        try:
            return response.json()
        except (ValueError, RecursionError):  # malformed, not text, or nested too deeply
            raise self.error(f"{at}answered malformed JSON: {self.excerpt(response.text)}") from None

    def stream_lines(self, path: str, payload: dict) -> Generator[str, None, None]:
        """The non-blank lines of a streamed POST, as they arrive. Close it to drop the connection early.
        Each line is due within the timeout of the one before (the first, of the request): a server that
        trickles bytes is cut off like one that hangs."""
        try:
            yield from iterate_within(self.timeout, self._lines(path, payload))
        except DeadlineExceeded:
            raise self.timed_out() from None

    def _lines(self, path: str, payload: dict) -> Generator[str, None, None]:
        connected = False
        try:
            with self.client().stream(
                "POST", self.url(path), json=payload, headers=self.headers(), timeout=self.timeout
            ) as response:
                connected = True
                if not response.is_success:
                    response.read()
                    raise self.error(
                        f"{path} answered HTTP {response.status_code}: {self.excerpt(response.text)}"
                    )
                for line in response.iter_lines():
                    if line.strip():
                        yield line
        except httpx.HTTPError as e:
            raise self.converted(e, f"the stream from {path} broke", connected=connected) from e

    def json_line(self, text: str, path: str) -> dict:
        """One streamed JSON object (an NDJSON line or an SSE data field)."""
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):  # malformed, or nested too deeply
            raise self.error(f"{path} streamed malformed JSON: {self.excerpt(text)}") from None
        if not isinstance(value, dict):
            raise self.error(f"{path} streamed {type(value).__name__}, not an object: {self.excerpt(text)}")
        return value

    def close(self) -> None:
        """Closes the client this upstream created (an injected client belongs to the caller)."""
        if self._owns_client and self._client is not None:
            self._client.close()
            self._client = None

    # --- messages --------------------------------------------------------------------------------------

    def converted(self, e: BaseException, broke: str, *, connected: bool = False) -> UpstreamError:
        """`e` as the `FunnelError` `FAILURES` says; `broke` says what broke, for an exchange cut short."""
        failure = failure_of(e)
        if failure is Failure.TIMEOUT:
            return self.timed_out()
        if failure is Failure.UNREACHABLE and not connected:
            return UpstreamError(self.stage, f"cannot reach {self.shown}: {self.described(e)}")
        return self.error(f"{broke}: {self.described(e)}")

    def error(self, problem: str) -> UpstreamError:
        return UpstreamError(self.stage, f"{self.shown} {problem}")

    def timed_out(self) -> UpstreamTimeout:
        return UpstreamTimeout(self.stage, f"{self.shown} after {self.timeout:g}s")

    def described(self, e: BaseException) -> str:
        return f"{type(e).__name__}: {self.redact(str(e))}"

    def excerpt(self, text: str, limit: int | None = None) -> str:
        redacted = self.redact(text)
        return body_excerpt(redacted) if limit is None else body_excerpt(redacted, limit)

    def redact(self, text: str) -> str:
        """A server (or a proxy) may echo the request headers back: the key never reaches a message."""
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    # --- plumbing --------------------------------------------------------------------------------------

    def url(self, path: str) -> str:
        # user:password in the URL becomes Basic auth (a proxy in front of the server); a key replaces it.
        return (self.shown if self._api_key else self.base) + path

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    def client(self) -> httpx.Client:
        if self._client is None:
            with self._lock:
                if self._client is None:
                    self._client = httpx.Client(timeout=self.timeout)
        return self._client


@dataclass(frozen=True)
class Retry:
    """Exponential backoff from `backoff` seconds, doubling per attempt; a 429's `Retry-After` instead when
    it sends one. Every delay lies within 0..`cap`."""

    retries: int
    backoff: float
    cap: float = 30.0

    def retryable(self, status: int) -> bool:
        """429 and 5xx are worth another try; any other 4xx is final."""
        return status == 429 or status >= 500

    def delay(self, attempt: int, response: httpx.Response | None = None) -> float:
        default = min(self.backoff * 2 ** (attempt - 1), self.cap)
        if response is not None and response.status_code == 429:
            return retry_after(response.headers.get("retry-after"), default, self.cap)
        return default


def retry_after(value: str | None, default: float, cap: float = 30.0) -> float:
    """Seconds from a `Retry-After` header (seconds or an HTTP date), within 0..cap; `default` without one."""
    if not value:
        return default
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = (parsedate_to_datetime(value) - datetime.now(UTC)).total_seconds()
        except (TypeError, ValueError):
            return default
    if math.isnan(seconds):
        return default
    return min(max(seconds, 0.0), cap)


def without_userinfo(url: str) -> str:
    """`https://user:secret@host/x` -> `https://host/x`: URLs go into messages and logs."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    authority, slash, path = rest.partition("/")
    return f"{scheme}://{authority.rpartition('@')[2]}{slash}{path}"


def _password(url: str) -> str | None:
    userinfo = url.partition("://")[2].partition("/")[0].rpartition("@")[0]
    password = userinfo.partition(":")[2]
    return password if len(password) >= 4 else None  # a short one would redact ordinary words
