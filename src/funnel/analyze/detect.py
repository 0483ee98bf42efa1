"""The language of a document, detected once at ingest (py3langid: a maintained fork of langid.py, 97
languages, its model in the wheel; its own instance here, so `release()` can free it) and kept on its chunks (`Chunk.language`, an ISO 639-1 code).

Code keeps its programming language there instead. Detection reads the first SAMPLE_CHARS of the text, so
it costs about a millisecond a document; a failure leaves the language unknown (None), never the ingest.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import replace

from funnel.types import Kind, LoadedDocument

log = logging.getLogger(__name__)

SAMPLE_CHARS = 1000
_lock = threading.Lock()
_identifier = None
_failed = False


def _classifier():
    global _identifier, _failed
    with _lock:
        if _identifier is None and not _failed:
            try:
                from py3langid.langid import MODEL_FILE, LanguageIdentifier

                identifier = LanguageIdentifier.from_model_file(MODEL_FILE)
                identifier.classify("warm up")  # a damaged model is said here, once
                _identifier = identifier.classify
            except Exception as e:  # not installed, or a damaged model: languages stay unknown
                _failed = True
                log.warning("language detection is off: %s: %s", type(e).__name__, str(e)[:200])
        return _identifier


def release() -> None:
    """Let the model go (~80 MB resident): calibration, which follows an ingest in the same process, needs no
    detection; the next document to detect loads it again (~1 s)."""
    global _identifier
    with _lock:
        _identifier = None


def language(text: str) -> str | None:
    """The ISO 639-1 code of the text's language, or None when there is no text or no detector."""
    sample = " ".join(text[:SAMPLE_CHARS].split())
    if not any(ch.isalpha() for ch in sample):
        return None
    identifier = _classifier()
    if identifier is None:
        return None
    try:
        return identifier(sample)[0]
    except Exception:  # the detector must never stop an ingest
        return None


def with_language(loaded: LoadedDocument) -> LoadedDocument:
    """The document with its detected language (prose only: code keeps its programming language)."""
    doc = loaded.document
    if doc.kind is Kind.CODE or doc.language is not None:
        return loaded
    text = "\n".join(s.text for s in loaded.sections[:20])
    found = language(text)
    return loaded if found is None else replace(loaded, document=replace(doc, language=found))
