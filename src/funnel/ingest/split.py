"""Where a section's text may be cut, as [start, end) spans of it: paragraphs (code fences kept whole),
sentences, lines, code lines and table cells; and, for a span none of these cut small enough, how good a
place any one offset is (`cut_at`). The chunker (`chunk.py`) packs these into chunks."""

from __future__ import annotations

import re
import unicodedata
from enum import IntEnum

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
# A sentence ends at . ! ? (plus closing quotes/brackets) before a capital or digit, or before a letter of a
# script without case (Korean "...입니다. 다음"); a list item starts one.
_ENDS = r"(?P<end>[.!?]+[\"'\u201d\u2019)\]]*)\s+(?=[\"'\u201c\u2018(\[]?(?P<next>[A-Z0-9]|[^\W\x00-\x7f]))"
_ITEM = r"\n(?=[ \t]*(?:[-*+]|\d+[.)])[ \t])"
_SENTENCE_BREAK = re.compile(f"{_ENDS}|{_ITEM}")
# Chinese and Japanese end one at 。！？ whatever follows. A pattern of its own, used only where one occurs:
# the third alternative slows every other text by half.
_FULL_STOPS = "\u3002\uff01\uff1f\uff61"
_FULL_STOP_END = (
    r"(?P<full>[\u3002\uff01\uff1f\uff61]+[\"'\u201d\u2019)\]\u300d\u300f\uff09\u3011\u3009\u300b]*)\s*(?=\S)"
)
_FULL_STOP_BREAK = re.compile(f"{_ENDS}|{_FULL_STOP_END}|{_ITEM}")

_ENUMERATOR = re.compile(r"^\s*(\d{1,3}|[A-Za-z]|[ivxIVX]{1,4})\s*$")
_ABBREVIATIONS = frozenset(
    {"dr", "mr", "mrs", "ms", "prof", "st", "vs", "etc", "no", "fig", "e.g", "i.e", "inc", "ltd"}
)


def paragraphs(text: str) -> list[tuple[int, int, bool]]:
    """(start, end, is_fenced) spans between blank lines; a fenced code block is one span, blanks and all."""
    spans: list[tuple[int, int, bool]] = []
    start: int | None = None
    fence: str | None = None
    pos = 0
    for line in text.split("\n"):
        line_end = pos + len(line)
        opener = _FENCE.match(line)
        if fence is not None:
            if line.strip().startswith(fence) and not line.strip().strip(fence[0]):
                spans.append((start, line_end, True))  # type: ignore[arg-type]
                start, fence = None, None
        elif opener:
            if start is not None:
                spans.append((start, pos - 1, False))
            start, fence = pos, opener.group(1)
        elif not line.strip():
            if start is not None:
                spans.append((start, pos - 1, False))
                start = None
        elif start is None:
            start = pos
        pos = line_end + 1
    if start is not None:
        spans.append((start, len(text), fence is not None))
    return [strip_span(text, s, e) + (f,) for s, e, f in spans if text[s:e].strip()]


def sentences(text: str, start: int, end: int) -> list[tuple[int, int]]:
    spans = []
    cursor = start
    full_stops = any(text.find(stop, start, end) >= 0 for stop in _FULL_STOPS)
    pattern = _FULL_STOP_BREAK if full_stops else _SENTENCE_BREAK
    for m in pattern.finditer(text, start, end):
        if m.group("next") and m.group("next").islower():  # "etc. über": not a new sentence
            continue
        line_start = max(cursor, text.rfind("\n", 0, m.start()) + 1)
        if m.group("end") and _not_a_sentence_end(text, line_start, m.start()):
            continue
        ending = "end" if m.group("end") else "full" if m.groupdict().get("full") else None
        stop = m.end(ending) if ending else m.start()
        spans.append((cursor, stop))
        cursor = m.end()
    spans.append((cursor, end))
    return [strip_span(text, s, e) for s, e in spans if text[s:e].strip()]


def _not_a_sentence_end(text: str, line_start: int, dot: int) -> bool:
    """A list number at the start of a line ("2. Pellucid Bio") or a known abbreviation ("Dr. Kallas")."""
    if _ENUMERATOR.match(text[line_start:dot]):
        return True
    word = text[line_start:dot].rsplit(None, 1)[-1] if text[line_start:dot].strip() else ""
    return word.lower() in _ABBREVIATIONS


def lines(text: str, start: int, end: int) -> list[tuple[int, int]]:
    spans = []
    pos = start
    for line in text[start:end].split("\n"):
        if line.strip():
            spans.append(strip_span(text, pos, pos + len(line)))
        pos += len(line) + 1
    return spans


def code_lines(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """Lines with their indentation kept: a chunk that starts mid-definition should still read as code."""
    spans = []
    pos = start
    for line in text[start:end].split("\n"):
        if line.strip():
            spans.append((pos, strip_span(text, pos, pos + len(line))[1]))
        pos += len(line) + 1
    return spans


def cells(text: str, start: int, end: int) -> list[tuple[int, int]]:
    spans = []
    cursor = start
    for m in re.finditer(re.escape(" | "), text[start:end]):
        spans.append((cursor, start + m.start()))
        cursor = start + m.end()
    spans.append((cursor, end))
    return [s for s in spans if s[1] > s[0]]


def strip_span(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


class Cut(IntEnum):
    """How good a place an offset is to cut a text that has no better one, best first."""

    SPACE = 0  # between words: at a space (or the zero-width space Thai and Khmer write between words)
    PUNCTUATION = 1  # after a mark such as 。、,- / or before an opening bracket
    CHARACTER = 2  # between two characters of a script written without spaces: Chinese, Japanese, Thai
    IN_WORD = 3  # inside a word but between whole characters: all a 300-letter string leaves
    NEVER = 4  # inside one character: before a combining mark, around a joiner, between Hangul jamo


_ZERO_WIDTH_SPACE = "\u200b"
_JOINER = "\u200d"
_MID_WORD = frozenset("'.:\u2019\u00b7\u2027")  # inside "don't", "e.g", "12:30" (Unicode's MidLetter)
# Scripts written without spaces between words: any character boundary is a word boundary there.
_UNSPACED = (
    (0x0E00, 0x0FFF),  # Thai, Lao, Tibetan
    (0x1000, 0x109F),  # Myanmar
    (0x1780, 0x17FF),  # Khmer
    (0x3040, 0x31FF),  # Hiragana, Katakana, Bopomofo, CJK strokes
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFF66, 0xFF9F),  # half-width Katakana
    (0x20000, 0x3FFFF),  # CJK extensions B and later
)


def cut_at(text: str, pos: int) -> Cut:
    """How good a place `pos` is to cut `text` between two chunks (`Cut`); the ends of the text are SPACE."""
    if pos <= 0 or pos >= len(text):
        return Cut.SPACE
    before, after = text[pos - 1], text[pos]
    if _one_character(before, after):
        return Cut.NEVER
    if before.isspace() or after.isspace() or _ZERO_WIDTH_SPACE in (before, after):
        return Cut.SPACE
    word_before, word_after = _is_word(before), _is_word(after)
    if word_before and word_after:
        return Cut.CHARACTER if _unspaced(before) or _unspaced(after) else Cut.IN_WORD
    if (before in _MID_WORD and word_after and pos >= 2 and _is_word(text[pos - 2])) or (
        after in _MID_WORD and word_before and pos + 1 < len(text) and _is_word(text[pos + 1])
    ):
        return Cut.IN_WORD
    if before == "," and after.isdigit() and text[pos - 2 : pos - 1].isdigit():
        return Cut.IN_WORD  # 1,000
    opening = ("Ps", "Pi")
    if unicodedata.category(before)[0] == "P" and unicodedata.category(before) not in opening:
        return Cut.PUNCTUATION
    if unicodedata.category(after) in opening:
        return Cut.PUNCTUATION
    return Cut.CHARACTER


def _one_character(before: str, after: str) -> bool:
    """Whether the two code points belong to one character as a reader sees it (a grapheme cluster)."""
    a = ord(after)
    if unicodedata.category(after)[0] == "M" or _JOINER in (before, after):
        return True  # a combining accent, Thai vowel sign or Devanagari matra; an emoji ZWJ sequence
    if 0xFE00 <= a <= 0xFE0F or 0xE0000 <= a <= 0xE01EF or 0x1F3FB <= a <= 0x1F3FF:
        return True  # variation selectors, tags, skin tones
    if before == "\r" and after == "\n":
        return True
    if 0xD800 <= ord(before) <= 0xDBFF and 0xDC00 <= a <= 0xDFFF:
        return True  # a surrogate pair (text decoded with surrogateescape or from JSON)
    if 0x1F1E6 <= ord(before) <= 0x1F1FF and 0x1F1E6 <= a <= 0x1F1FF:
        return True  # a flag's two regional indicators
    return _hangul_jamo_join(ord(before), a)


def _hangul_jamo_join(b: int, a: int) -> bool:
    """Decomposed Hangul (NFD, as some Mac file names arrive): leading, vowel and trailing jamo are one
    syllable; a vowel or trailing jamo also continues a precomposed syllable before it."""
    leading = 0x1100 <= b <= 0x115F or 0xA960 <= b <= 0xA97F
    vowel_or_trailing = 0x1160 <= a <= 0x11FF or 0xD7B0 <= a <= 0xD7FF
    syllable_or_jamo = leading or 0x1160 <= b <= 0x11FF or 0xD7B0 <= b <= 0xD7FF or 0xAC00 <= b <= 0xD7A3
    if leading and (vowel_or_trailing or 0x1100 <= a <= 0x115F):
        return True
    return syllable_or_jamo and vowel_or_trailing


def _is_word(ch: str) -> bool:
    return ch.isalnum() or ch == "_" or unicodedata.category(ch)[0] == "M"


def _unspaced(ch: str) -> bool:
    code = ord(ch)
    return any(low <= code <= high for low, high in _UNSPACED)
