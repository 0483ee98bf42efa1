"""A collection's calibration as the service tells it: what `auto` does and why (/health), whether the index
has changed since it was measured (so the lane's last job queues a calibration whatever that job did), and
the line a web user reads (`GET /v1/collections/{name}/calibration`).

The core's reasons end in "run `funnel calibrate`", which is right in a shell and wrong for someone on the web
page: the service calibrates by itself after a change, and on `POST .../calibrate` (the page's Calibrate
button), so `for_the_service` says that instead.
"""

from __future__ import annotations

import re

from funnel.errors import FunnelError
from funnel.rerank.base import Reranker

CLI_HINT = re.compile(r"[;,:]?\s*run `funnel calibrate`")
CLI_ASIDE = re.compile(r"\s*\(`funnel calibrate[^`]*`\)")  # "(`funnel calibrate --generated`)"
NOT_YET = "not calibrated yet"


def calibration_summary(store, reranker: Reranker | None) -> dict:
    """What `auto` does on an index with this reranker and why, from the stored calibration only (no model is
    loaded, so /health stays cheap)."""
    from funnel.calibrate import Calibration

    try:
        data = store.read_calibration()
        c = Calibration.from_json(data) if data is not None else None
    except FunnelError as e:
        return {"option": "first_stage", "reason": for_the_service(str(e), False)}
    if c is None:
        reason = "no reranker configured" if reranker is None else NOT_YET
        return {"option": "first_stage", "reason": reason}
    first = {"first_stage": c.first_stage, "first_stage_reason": c.first_stage_reason,
             "languages": c.languages}
    if reranker is None:
        return {"option": "first_stage", "reason": "no reranker configured", **first}
    mismatch = c.mismatch(reranker.name, c.embedder)  # the embedder is not loaded here: only the reranker is checked
    if mismatch:
        return {"option": "first_stage", "reason": for_the_service(mismatch, False), **first}
    return {"option": c.option, "reason": c.reason, "created": c.created, "queries": c.queries,
            "source": c.source, **first}


def stored(store) -> dict | None:
    """The stored calibration's JSON; None when there is none or it cannot be read (a new one replaces it)."""
    try:
        return store.read_calibration()
    except FunnelError:
        return None


def needs_calibration(store) -> bool:
    """Whether the index holds chunks that no calibration measured: none stored, an unreadable one, or one made
    on an earlier version of the index."""
    info = store.info()
    if info is None or info.chunks == 0:
        return False
    data = stored(store)
    return data is None or data.get("index_version") != info.version


def for_the_service(reason: str, calibrating: bool) -> str:
    """`reason` with the shell's "run `funnel calibrate`" replaced by what the service does about it."""
    if "funnel calibrate" not in reason:
        return reason
    instead = "calibrating now" if calibrating else "it calibrates after the next upload, or on Calibrate"
    return CLI_ASIDE.sub("", CLI_HINT.sub(f"; {instead}", reason))


def page_status(store, reranker: Reranker | None, calibrating: bool, changing: bool, error: str | None) -> dict:
    """The calibration as the page shows it: `state` (calibrating, calibrated, changed, not_calibrated,
    empty), a `message` for a person, and the summary's fields (option, reason, created...). `changing`:
    uploads or deletes are queued or running, and the last of them queues a calibration if one is needed."""
    summary = calibration_summary(store, reranker)
    error = for_the_service(error, False) if error else None
    info = store.info()
    data = stored(store)
    if calibrating:
        state, message = "calibrating", "calibrating…"
    elif changing:
        state, message = "calibrating", "calibrates once the uploads in progress end…"
    elif info is None or info.chunks == 0:
        state, message = "empty", "calibrates after the first upload"
    elif data is None:
        state, message = "not_calibrated", f"{NOT_YET}: it calibrates after the next upload, or press Calibrate"
    elif data.get("index_version") != info.version:
        state = "changed"
        message = "the documents changed since the last calibration; it calibrates after the next upload, " \
                  "or press Calibrate"
    else:
        state = "calibrated"
        message = f"calibrated: {summary['option']} ({for_the_service(summary['reason'], False)})"
    if error and not calibrating:
        message = f"the last calibration failed ({error}); the previous one is kept"
    return {"state": state, "message": message, "error": error, "created": (data or {}).get("created"),
            **summary}
