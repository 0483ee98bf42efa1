"""The Block Kit message for one triage result: what Slack shows, redacted, escaped and cut to Slack's
limits. Sending it (de-duplication, rate limit, retries) is `funnel.apps.triage.slack`."""

from __future__ import annotations

import math

from funnel.apps.state.incident_schema import TriageResult
from funnel.apps.state.redact import redact_obj

HEADER_CHARS = 150  # Slack's limit for a header block
SECTION_CHARS = 3000  # Slack's limit for a section's (and a context element's) text
MAX_BLOCKS = 50  # Slack's limit for a message
TOP_FILES = 5
LLM_UNAVAILABLE = "LLM unavailable — ranked files only"
_MESSAGE_CHARS = 1000
_BULLET_CHARS = 400


def blocks_for(result: TriageResult, count: int, span_s: float | None, window_s: float) -> dict:
    """The Block Kit payload `{"text": fallback, "blocks": [...]}` for `result`, redacted and escaped.

    `count` occurrences are reported, over the last `span_s` seconds (the de-duplication window,
    `window_s`, when None).
    """
    top = sorted(result.files, key=lambda f: f.rank)[:TOP_FILES]
    # only what the message shows is redacted (excerpts can be long and are not shown)
    r = redact_obj(
        result.model_copy(update={"files": [f.model_copy(update={"excerpt": ""}) for f in top]})
    )
    title = f"{r.exception_type or 'Error'} in {r.service}"
    blocks: list[dict] = [
        {"type": "header", "text": {"type": "plain_text", "text": cut(title, HEADER_CHARS)}}
    ]
    if r.message:
        blocks.append(_section(f"*Error*\n{_fit(_escape(r.message), _MESSAGE_CHARS)}"))
    if r.analysis is not None:
        text = (
            f"*Summary*\n{_escape(r.analysis.summary)}\n\n*Root cause*\n{_escape(r.analysis.root_cause)}"
        )
        blocks.append(_section(text))
    else:
        reason = f"\n_{_escape(r.analysis_reason)}_" if r.analysis_reason else ""
        blocks.append(_section(f"*{LLM_UNAVAILABLE}*{reason}"))
    files = _file_lines(r)
    if files:
        title_files = "Suspected files" if r.analysis and r.analysis.suspected_files else "Ranked files"
        blocks.append(_section(f"*{title_files}*\n" + "\n".join(files)))
    if r.analysis is not None and r.analysis.fix_suggestion:
        blocks.append(_section(f"*Suggested fix*\n{_escape(r.analysis.fix_suggestion)}"))
    status = f"analysis: {r.analysis_status.value}"
    if r.analysis is not None:
        status = f"confidence: {r.analysis.confidence:.2f} · {status}"
    blocks.append(_context(status))
    seen = _occurrences(count, span_s, window_s)
    blocks.append(_context(f"fingerprint `{_escape(r.fingerprint)}` · {seen}"))
    summary = r.analysis.summary if r.analysis is not None else r.message
    fallback = _fit(_escape(f"{title}: {summary}" if summary else title), SECTION_CHARS)
    return redact_obj({"text": fallback, "blocks": blocks[:MAX_BLOCKS]})


def _escape(text: str) -> str:
    """Slack mrkdwn's three control characters; anything else is shown as written."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _fit(escaped: str, limit: int) -> str:
    """`cut` for escaped text: never ends in half an entity (`&am`)."""
    if len(escaped) <= limit:
        return escaped
    cut = escaped[: limit - 1]
    amp = cut.rfind("&", max(0, len(cut) - 5))
    if amp != -1 and ";" not in cut[amp:]:
        cut = cut[:amp]
    return cut + "…"


def _section(text: str) -> dict:
    return {"type": "section", "text": {"type": "mrkdwn", "text": _fit(text, SECTION_CHARS)}}


def _context(text: str) -> dict:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": _fit(text, SECTION_CHARS)}]}


def _lines(start: int | None, end: int | None) -> str:
    if start is None:
        return ""
    return f":{start}" if end is None or end == start else f":{start}-{end}"


def _code(text: str) -> str:
    return "`" + _escape(text.replace("`", "'")) + "`"


def _file_lines(r: TriageResult) -> list[str]:
    if r.analysis is not None and r.analysis.suspected_files:
        rows = [(f.path + _lines(f.line_start, f.line_end), f.reason) for f in r.analysis.suspected_files]
    else:
        rows = []
        for f in sorted(r.files, key=lambda f: f.rank):
            why = ", ".join(f.signals)
            if f.frames:
                why += ("; " if why else "") + "frames " + ", ".join(f.frames[:3])
            rows.append((f.path + _lines(f.line_start, f.line_end), why))
    return [
        _fit(f"• {_code(where)}" + (f" — {_escape(why)}" if why else ""), _BULLET_CHARS)
        for where, why in rows[:TOP_FILES]
    ]


def duration(seconds: float) -> str:
    """'minute', '20 minutes', 'hour', '3 hours': a span rounded up, for 'in the last ...'."""
    minutes = max(1, math.ceil(seconds / 60 - 1e-9))
    if minutes == 1:
        return "minute"
    if minutes % 60 == 0 or minutes > 120:
        hours = math.ceil(minutes / 60)
        return "hour" if hours == 1 else f"{hours} hours"
    return f"{minutes} minutes"


def _occurrences(count: int, span_s: float | None, window_s: float) -> str:
    if count <= 1:
        return f"first occurrence in the last {duration(window_s)}" if window_s > 0 else "first occurrence"
    return f"seen {count} times in the last {duration(span_s if span_s is not None else window_s)}"
