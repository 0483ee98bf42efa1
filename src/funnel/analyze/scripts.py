"""The script-level pieces every analyzer shares: CJK runs as bigrams, camelCase parts, sentence ends, and the
two analyzers that need no dependency (`english`, `cjk`). The Korean analyzer (`korean.py`) builds on these;
`funnel.analyze` registers them all."""

from __future__ import annotations

import re

# Hangul syllables and jamo, CJK ideographs (with extension A and compatibility), kana and half-width kana.
_CJK_CHARS = "\uac00-\ud7a3\u1100-\u11ff\u3130-\u318f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff" \
             "\u31f0-\u31ff\uff66-\uff9f"
_CJK_RUN = re.compile(f"[{_CJK_CHARS}]+")

# camelCase / PascalCase identifiers get their parts indexed too ("UserService" -> "User Service"),
# because the FTS tokenizer splits on punctuation (so snake_case is handled) but not on case humps.
# ASCII word boundaries (\\b would take a Hangul particle as part of the word: `UserService를`).
_CAMEL = re.compile(r"(?<![A-Za-z0-9_])[A-Za-z][a-z0-9]+(?:[A-Z][a-z0-9]+)+(?![A-Za-z0-9_])")
_HUMP = re.compile(r"[A-Z]?[a-z0-9]+")


def lexical_text(text: str) -> str:
    """The text the BM25 index sees: the chunk plus the parts of its camelCase identifiers."""
    parts = [" ".join(_HUMP.findall(m.group())) for m in _CAMEL.finditer(text)]
    return text if not parts else text + "\n" + " ".join(parts)


# A sentence ends at . ! ? before a capital, a digit, an opening mark or a Hangul/CJK character, or at a CJK
# full stop (。！？), which needs no space after it. English text splits exactly as before.
# Hangul syllables, kana and the CJK ideographs: the letters a sentence or a word in those scripts starts
# with.
CJK_LETTERS = "\uac00-\ud7a3\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff"
SENTENCE_END = re.compile(f"(?<=[.!?])\\s+(?=[\"'(\\[A-Z0-9{CJK_LETTERS}])|(?<=[。！？])\\s*")


def has_cjk(text: str) -> bool:
    return _CJK_RUN.search(text) is not None


def bigrams(run: str) -> str:
    """Overlapping character bigrams of a run without spaces; a single character stays itself."""
    return run if len(run) < 2 else " ".join(run[i:i + 2] for i in range(len(run) - 1))


class English:
    """Today's analysis: the text with its camelCase identifiers' parts added."""

    name = "english"

    def lex(self, text: str) -> str:
        return lexical_text(text)


class CjkWordsApart:
    """A question's analysis for an index that holds no Hangul, Han or Kana (`LanceStore.query_analyzer`): each CJK
    run set apart from the Latin text it is joined to and kept whole, one term a word. Nothing of it can match
    there, whatever the analysis, so no Kiwi is loaded; `Docker의` still searches `docker`, as Kiwi's `Docker 의`
    did, and the abstention gate counts about as many absent words as Kiwi's morphemes. Not an index analyzer."""

    name = "cjk-words-apart"

    def lex(self, text: str) -> str:
        text = lexical_text(text)
        return _CJK_RUN.sub(lambda m: f" {m.group()} ", text) if has_cjk(text) else text


class Cjk:
    """Hangul, Han and Kana runs as character bigrams; everything else as `english`."""

    name = "cjk"

    def lex(self, text: str) -> str:
        text = lexical_text(text)
        return _CJK_RUN.sub(lambda m: bigrams(m.group()), text) if has_cjk(text) else text
