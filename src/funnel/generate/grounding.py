"""Whether a model's sentence says only what its passages hold.

A sentence's *values* are what a reader would copy from it and act on: numbers (`4096`, `7.28.0`), quoted
text (`"--no-time-strict"`, `` `R_LIBS` ``) and identifiers (`ASN1_DER_ERROR`, `--enable-foo`,
`/etc/hosts`, `mime.cache`, `asn1_der_decoding`). A value is held by a passage when the passage's text has
it, compared case-insensitively with whitespace folded. Each sentence of the answer is then:
- kept, when every value is in a passage it cites;
- mended, when a value is only in a passage it does not cite: that passage's citation is added;
- dropped, when a value is in no passage at all (the model invented or changed it), or when the sentence
  cites nothing and shares no term with any passage.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


_NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,:]\d+)*(?![\w])")
_QUOTED = re.compile(r"\"([^\"\n]{1,80})\"|`([^`\n]{1,80})`|“([^”\n]{1,80})”")
_IDENT = re.compile(
    r"(?<![\w-])(?:--?[A-Za-z][\w-]*"  # an option: -x, --no-time-strict
    r"|[A-Za-z]\w*_\w+"  # snake or upper case with an underscore: ASN1_DER_ERROR, asn1_der_decoding
    r"|[A-Z][A-Z0-9]{2,}"  # an acronym or constant: GLPK, UTF8
    r"|[A-Za-z]+[a-z0-9]*[A-Z]\w*"  # camelCase or inner capitals: setValue, LaTeX
    r"|(?:/[\w.+-]+){2,}/?"  # a path: /usr/share/doc
    r"|\w+(?:\.\w+)+(?:\(\))?"  # a dotted name: mime.cache, os.path.join()
    r")")
# The end of a sentence: a full stop (not inside a number or a dotted name) and the citations after it, then a
# space or the end.
SENTENCE_DONE = re.compile(r"[.!?。](?:\s*\[\d+(?:\s*[,;]\s*\d+)*\])*(?=\s|$)")
_CITE = re.compile(r"\[(\s*\d+\s*(?:[,;]\s*\d+\s*)*)\]")
# Words a model writes around a value that are not values: sentence-initial acronyms it is allowed to use.
_COMMON = frozenset({"THE", "AND", "NOT", "YES", "API", "URL", "PDF", "FAQ"})


def values(sentence: str) -> list[str]:
    """The values a sentence states, in order, each once (quoted text first, then numbers and identifiers)."""
    text = _CITE.sub(" ", sentence)
    found: list[str] = []
    for match in _QUOTED.finditer(text):
        found.append(next(g for g in match.groups() if g))
    unquoted = _QUOTED.sub(" ", text)
    found += [m.group(0) for m in _NUMBER.finditer(unquoted)]
    found += [m.group(0).rstrip(".") for m in _IDENT.finditer(unquoted) if m.group(0) not in _COMMON]
    seen: set[str] = set()
    return [v for v in found if v.strip() and not (v.lower() in seen or seen.add(v.lower()))]


def fold(text: str) -> str:
    return " ".join(text.lower().split())


def holds(passage: str, value: str) -> bool:
    """Whether the passage's text has the value (a number as a whole number: 12 is not in 2012)."""
    folded, wanted = fold(passage), fold(value)
    if wanted.replace(".", "").replace(",", "").isdigit():
        return re.search(rf"(?<![\d.,]){re.escape(wanted)}(?![\d]|[.,]\d)", folded) is not None
    return wanted in folded


def sentences(text: str) -> list[str]:
    """The answer's sentences, each with the citations right after its full stop; lines kept apart."""
    out: list[str] = []
    for line in text.splitlines():
        rest = line.strip()
        while (match := SENTENCE_DONE.search(rest)) is not None:
            out.append(rest[: match.end()].strip())
            rest = rest[match.end():].strip()
        if rest:
            out.append(rest)
    return [s for s in out if s]


def cited_numbers(sentence: str) -> set[int]:
    return {int(n) for m in _CITE.finditer(sentence) for n in re.findall(r"\d+", m.group(1)) if len(n) <= 9}


@dataclass(frozen=True)
class Checked:
    """One sentence after the check: its text (citations mended), and what happened to it."""

    text: str
    verdict: str  # "kept", "mended" or "dropped"
    missing: tuple[str, ...] = ()  # the values no passage holds (why it was dropped)


def check(sentence: str, passages: dict[int, str]) -> Checked:
    """`sentence` held to `passages` (number -> text) as the module says."""
    cited = cited_numbers(sentence) & passages.keys()
    wanted = values(sentence)
    missing = tuple(v for v in wanted if not any(holds(t, v) for t in passages.values()))
    if missing:
        return Checked(sentence, "dropped", missing)
    add: set[int] = set()
    for value in wanted:
        if not any(holds(passages[n], value) for n in cited):
            add.add(min(n for n, t in passages.items() if holds(t, value)))
    if not cited and not add:
        best = _overlap(sentence, passages)
        if best is None:
            return Checked(sentence, "dropped")
        add.add(best)
    if not add:
        return Checked(sentence, "kept")
    marks = "".join(f"[{n}]" for n in sorted(add))
    body = sentence.rstrip()
    return Checked(f"{body} {marks}", "mended")


_WORD = re.compile(r"\w{3,}")


def _overlap(sentence: str, passages: dict[int, str]) -> int | None:
    """The passage sharing most words with an uncited sentence (at least two), or None."""
    words = {w.lower() for w in _WORD.findall(_CITE.sub(" ", sentence))}
    best, shared = None, 1
    for number, text in sorted(passages.items()):
        n = len(words & {w.lower() for w in _WORD.findall(text)})
        if n > shared:
            best, shared = number, n
    return best
