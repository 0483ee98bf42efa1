"""BM25 analyzers: what the lexical index sees of a text, chosen per index.

An analyzer turns text into *lex text*: words separated by spaces that the store's own BM25 analysis
(LanceDB's full-text index, or `funnel.index.bm25_text` for PostgreSQL: split on non-alphanumerics, lower
case, English stemming, stop words) then indexes. Both stores call `lex` in the same two places, at ingest and
on the query, so an index and its queries are always analyzed alike.

Latin-script text (and any script no analyzer knows: Thai, Arabic, Cyrillic, ...) passes through every
analyzer unchanged, so an English index is the same whichever analyzer built it. What differs is the
scripts that do not separate words the way English does:

- `english`: today's analysis, for indexes made before analyzers existed; Korean, Chinese and Japanese
  text is matched by whole space-separated words (`서울에서` and `서울` are different terms).
- `cjk`: Hangul, Han and Kana runs become overlapping character bigrams (`서울에서` -> `서울 울에 에서`), so
  a noun matches whatever particle is attached to it. No dependency.
- `korean`: Hangul through Kiwi's morphological analyzer (`kiwipiepy`, the `korean` extra), Han and Kana
  as bigrams. Without Kiwi, a new index asking for it gets `cjk` with a one-line warning.

`auto` (the default) gives a new index `korean` when Kiwi is installed and `cjk` otherwise; an existing index
keeps the analyzer it was built with (`settle`). The choice is recorded in the index's info.
"""

from __future__ import annotations

import logging
from typing import Protocol

from funnel.analyze.scripts import (  # noqa: F401  (the package's names)
    CJK_LETTERS, SENTENCE_END, Cjk, English, bigrams, has_cjk, lexical_text,
)
from funnel.errors import ConfigError
from funnel.registry import Registry

log = logging.getLogger(__name__)

__all__ = ["AUTO", "LEGACY", "REGISTRY", "Analyzer", "get", "has_cjk", "settle"]

REGISTRY = Registry("analyzer", group="funnel.analyzers")
AUTO = "auto"
LEGACY = "english"  # what an index made before analyzers were recorded was built with

_DEFAULT: list[Analyzer] = []


def default_analyzer() -> Analyzer:
    """The analyzer a new index gets under `auto` (Kiwi's when installed, else bigrams): for matching a
    question's terms in a passage as BM25 does (the extractive answer, once per sentence: decided once)."""
    if not _DEFAULT:
        _DEFAULT.append(get(_default()))
    return _DEFAULT[0]


class Analyzer(Protocol):
    name: str

    def lex(self, text: str) -> str:
        """The text the BM25 index sees for `text` (a chunk at ingest, a query at search)."""
        ...


@REGISTRY.register("english")
def _english(_: str, **__) -> Analyzer:
    return English()


@REGISTRY.register("cjk")
def _cjk(_: str, **__) -> Analyzer:
    return Cjk()


@REGISTRY.register("korean")
def _korean(_: str, **__) -> Analyzer:
    from funnel.analyze.korean import Korean

    return Korean()


_LOADED: dict[str, Analyzer] = {}


def get(name: str) -> Analyzer:
    """The analyzer an index records (one instance per process: Kiwi takes seconds and ~300 MB to load). An
    unknown name or a missing dependency is a ConfigError of one line."""
    analyzer = _LOADED.get(name)
    if analyzer is None:
        analyzer = _LOADED[name] = REGISTRY.load(name)
    return analyzer


def names() -> tuple[str, ...]:
    return (AUTO, *REGISTRY.forms())


def _default() -> str:
    from funnel.analyze.korean import kiwi_problem

    problem = kiwi_problem()
    if problem is None:
        return "korean"
    log.info("Korean text will be analyzed as character bigrams (cjk): %s", problem)
    return "cjk"


def settle(requested: str | None, recorded: str | None, where: object) -> str:
    """The analyzer a write to an index uses: the index's own (`recorded`; None for a new index), which an
    explicit request must match, or for a new index the one asked for (`auto`: `korean` when Kiwi loads, else
    `cjk`). `korean` without Kiwi falls back to `cjk` with a warning."""
    requested = (requested or AUTO).strip()
    if requested != AUTO and requested not in REGISTRY.forms():
        raise ConfigError(f"unknown analyzer {requested!r}; valid: {', '.join(names())}")
    if recorded is not None:
        if requested not in (AUTO, recorded):
            raise ConfigError(f"{where} was analyzed with {recorded}, not {requested}; use analyzer "
                              f"{recorded} (or auto), or ingest into a new index to re-analyze")
        return recorded
    if requested == AUTO:
        return _default()
    if requested == "korean":
        from funnel.analyze.korean import kiwi_problem

        problem = kiwi_problem()
        if problem is not None:
            log.warning("analyzer korean: %s; Korean text is analyzed as character bigrams (cjk)", problem)
            return "cjk"
    return requested
