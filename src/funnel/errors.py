"""funnel's exception tree. Foreign errors are converted at the boundary, once."""

from __future__ import annotations

import html
import re

# An upstream's error body in a message: this many characters at most.
EXCERPT_CHARS = 200
_HTML_START = re.compile(r"\s*(<!doctype|<html|<head|<body|<h1|<p>)", re.IGNORECASE)
_HTML_NOISE = re.compile(r"<(head|script|style)\b.*?</\1\s*>", re.IGNORECASE | re.DOTALL)
_TAG = re.compile(r"<[^>]+>")


class FunnelError(Exception):
    """Base of every error funnel raises on purpose. Its message is meant for the user, in one line."""

    exit_code = 1


class ConfigError(FunnelError):
    """A setting, flag or argument is invalid."""

    exit_code = 2


class BackendUnavailable(FunnelError):
    """A backend cannot be used here: a missing optional dependency or model file."""

    exit_code = 3


class IngestError(FunnelError):
    """One source could not be loaded. Ingest reports it and goes on with the rest."""

    exit_code = 4

    def __init__(self, path: str, reason: str):
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class StoreError(FunnelError):
    """The index is missing, locked or unreadable."""

    exit_code = 5


class NotFound(FunnelError):
    """A named item (incident, collection, document) does not exist."""


class Conflict(FunnelError):
    """The request does not fit the state it finds: the collection exists, has nothing indexed yet, or holds
    too many files of one name (HTTP 409)."""


class Cancelled(BaseException):  # noqa: N818 (a stop asked for, not an error)
    """Work stopped on purpose: an upload's ingest when its document or collection is deleted.

    A BaseException, like asyncio.CancelledError, so the `except Exception` that keeps one odd file from
    failing a whole ingest (or a PDF's pages from failing their document) never swallows it; the store
    transaction it passes through rolls back."""


class UpstreamError(FunnelError):
    """A remote or model backend failed while serving a request."""

    exit_code = 6

    def __init__(self, stage: str, detail: str):
        super().__init__(f"{stage}: {detail}")
        self.stage = stage
        self.detail = detail


class UpstreamTimeout(UpstreamError):
    def __init__(self, stage: str, detail: str):
        super().__init__(stage, f"timed out ({detail})")


def missing_dependency(what: str, package: str, extra: str | None = None) -> BackendUnavailable:
    """The error for a dependency that is not installed, with the fix in the message."""
    fix = f"pip install 'funnel[{extra}]'" if extra else f"pip install {package}"
    return BackendUnavailable(f"{what} needs {package}: {fix}")


def body_excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """An upstream's response body as one short line. An HTML error page (a plain web server's 501, a
    proxy's 502) becomes its text, "Error response Error code: 501 Message: Unsupported method", not its
    markup; redact secrets before calling."""
    if _HTML_START.match(text):
        text = html.unescape(_TAG.sub(" ", _HTML_NOISE.sub(" ", text)))
    text = " ".join(text.split())
    return (text[:limit] + "…") if len(text) > limit else (text or "(empty body)")
