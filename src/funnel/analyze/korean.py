"""The `korean` analyzer: Hangul through Kiwi (`kiwipiepy`, Apache-2.0, its model from `kiwipiepy-model`;
both offline), Han and Kana as bigrams, everything else as `english`.

Kiwi splits a word into morphemes, so the noun of `서울에서` is the term `서울`, as in `서울과` and `서울`.
Every morpheme but punctuation is kept (particles and endings are frequent, so BM25's idf gives them little
weight): on klue-nli-ko that scored 0.973 nDCG@10 against 0.969 for content morphemes only and 0.968 for
character bigrams (BENCHMARKS.md, "Korean").
"""

from __future__ import annotations

import importlib.util
import logging
import re
import threading

from funnel.analyze.scripts import bigrams, lexical_text
from funnel.errors import ConfigError

_HANGUL = "\uac00-\ud7a3\u1100-\u11ff\u3130-\u318f"
# A span of Hangul words with what may stand between them in a sentence, handed to Kiwi in one piece.
_SPAN = re.compile(f"[{_HANGUL}]+(?:[\\s\\d.,;:!?'\"()\\[\\]·~%/-]+[{_HANGUL}]+)*")
_HAN_KANA = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\u31f0-\u31ff\uff66-\uff9f"
_CJK_OTHER = re.compile(f"[{_HAN_KANA}]+")
_ALL_CJK = re.compile(f"[{_HANGUL}{_HAN_KANA}]+")
log = logging.getLogger(__name__)

_lock = threading.Lock()
_kiwi = None
_problem: str | None = None
_told = False


def _load():
    """The process's one Kiwi, loaded on first use; a ConfigError of one line when it cannot be."""
    global _kiwi, _problem
    with _lock:
        if _kiwi is None and _problem is None:
            try:
                from kiwipiepy import Kiwi

                _kiwi = Kiwi(num_workers=-1)
            except ImportError:
                _problem = "Kiwi is not installed (pip install 'funnel[korean]')"
            except Exception as e:  # a damaged model file, an unsupported CPU: say it, in one line
                first = str(e).splitlines()[0][:200] if str(e) else ""
                _problem = f"Kiwi failed to load ({type(e).__name__}: {first})"
        if _kiwi is None:
            raise ConfigError(f"analyzer korean: {_problem}")
        return _kiwi


def _kiwi_or_none():
    """Kiwi, or None (said once in the log) when it is missing or fails to load: Hangul is then analyzed as
    bigrams, at ingest and at query time alike in this process, rather than stopping the ingest or search."""
    global _told
    try:
        return _load()
    except ConfigError as e:
        if not _told:
            _told = True
            log.warning("%s; Hangul is analyzed as character bigrams", e)
        return None


def kiwi_problem() -> str | None:
    """Why Kiwi cannot be used here (not installed, or it failed to load before), or None. Cheap: Kiwi itself
    is loaded by the first Hangul text."""
    if _problem is not None:
        return _problem
    if importlib.util.find_spec("kiwipiepy") is None or importlib.util.find_spec("kiwipiepy_model") is None:
        return "Kiwi is not installed (pip install 'funnel[korean]')"
    return None


class Korean:
    name = "korean"

    def lex(self, text: str) -> str:
        text = lexical_text(text)
        spans = list(_SPAN.finditer(text))
        if not spans:
            return _CJK_OTHER.sub(lambda m: bigrams(m.group()), text) if _CJK_OTHER.search(text) else text
        kiwi = _kiwi_or_none()
        if kiwi is None:
            return _ALL_CJK.sub(lambda m: bigrams(m.group()), text)
        analyzed = kiwi.tokenize([m.group() for m in spans])
        out, at = [], 0
        for match, tokens in zip(spans, analyzed):
            out.append(text[at:match.start()])
            words = (t.form for t in tokens if not t.tag.startswith("S") or t.tag in _KEPT)
            out.append(" " + " ".join(words) + " ")
            at = match.end()
        out.append(text[at:])
        joined = "".join(out)
        return _CJK_OTHER.sub(lambda m: bigrams(m.group()), joined)


# Kiwi's symbol tags that are words: foreign (Latin) words, Hanja, numbers.
_KEPT = ("SL", "SH", "SN")
