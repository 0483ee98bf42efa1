"""BM25 text analysis and scoring that reproduce LanceDB's default full-text index, for stores that keep
their own term statistics (PostgreSQL). LanceStore builds `FTS(with_position=False)` on its `lex` column;
in lancedb 0.40 (lance 13) that analyser is, in this order:

1. the simple tokenizer: maximal runs of Unicode alphanumeric characters;
2. tokens of 40 or more UTF-8 bytes dropped;
3. lower-cased character by character;
4. the Snowball English (Porter2) stemmer, as in the `rust-stemmers` crate;
5. stop words removed - NLTK's English list, checked *after* stemming (so "was" goes, "because",
   stemmed to "becaus", stays);
6. ASCII folding ("café" -> "cafe"), last.

Scoring is Lucene's BM25 with k1 = 1.2, b = 0.75 and idf = ln(1 + (N - df + 0.5) / (df + 0.5)), where N
counts only documents with at least one token. A query term that appears twice counts twice.
The stop-word list and the order of the filters were checked against lancedb itself (tests and
bench/bm25_agreement.py hold the evidence).
"""

from __future__ import annotations

import threading

import math
import re
import unicodedata
from collections import Counter

from funnel.errors import missing_dependency

K1 = 1.2
B = 0.75
MAX_TOKEN_BYTES = 40

# NLTK's English stop words without the apostrophe forms (the tokenizer never yields those).
STOP_WORDS = frozenset(
    """
    a about above after again against ain all am an and any are aren as at be because been before being
    below between both but by can couldn d did didn do does doesn doing don down during each few for from
    further had hadn has hasn have haven having he her here hers herself him himself his how i if in into
    is isn it its itself just ll m ma me mightn more most mustn my myself needn no nor not now o of off on
    once only or other our ours ourselves out over own re s same shan she should shouldn so some such t
    than that the their theirs them themselves then there these they this those through to too under
    until up ve very was wasn we were weren what when where which while who whom why will with won
    wouldn y you your yours yourself yourselves
    """.split()
)

# Python's \w is "alphanumeric or underscore"; without the underscore it is Rust's char::is_alphanumeric
# but for combining marks that Unicode counts as alphabetic (Indic vowel signs): those split words here.
_WORD = re.compile(r"[^\W_]+")

# ASCII folding, as lance-tokenizer does it: these letters by table; any other non-ASCII character by
# its compatibility decomposition, keeping the ASCII parts and the table's letters and dropping combining
# marks and everything else ("¼" -> "14"); a character with nothing left stays as it is ("µ", "β").
_FOLD = {
    "ß": "ss", "ẞ": "SS", "Æ": "AE", "æ": "ae", "Œ": "OE", "œ": "oe", "Ø": "O", "ø": "o", "Ł": "L",
    "ł": "l", "Đ": "D", "Ð": "D", "đ": "d", "ð": "d", "Þ": "TH", "þ": "th", "Ħ": "H", "ħ": "h",
    "Ŧ": "T", "ŧ": "t", "Ŋ": "N", "ŋ": "n", "ı": "i", "ĸ": "k", "ſ": "s",
}
_MARKS = ("Mn", "Mc", "Me")


def _fold_char(ch: str) -> str:
    if ch in _FOLD:
        return _FOLD[ch]
    out = "".join(
        c if c.isascii() else _FOLD.get(c, "")
        for c in unicodedata.normalize("NFKD", ch)
        if c.isascii() or unicodedata.category(c) not in _MARKS
    )
    return out or ch


def _fold(token: str) -> str:
    return token if token.isascii() else "".join(ch if ch.isascii() else _fold_char(ch) for ch in token)


def _lower(token: str) -> str:
    # Character by character, like Rust's char::to_lowercase: no word-final sigma.
    return token.lower() if token.isascii() else "".join(ch.lower() for ch in token)


class Analyzer:
    """Text -> index terms. Words are analysed once and remembered (a corpus has far fewer distinct
    words than tokens, so ingest pays for the stemmer only once per word)."""

    def __init__(self) -> None:
        try:
            # The pure-Python module itself: `snowballstemmer.stemmer()` would hand over to PyStemmer when
            # that is installed, whose Snowball release may stem differently.
            from snowballstemmer.english_stemmer import EnglishStemmer
        except ImportError:
            raise missing_dependency("BM25 outside LanceDB", "snowballstemmer", "postgres") from None
        self._stemmer = EnglishStemmer
        self._local = threading.local()  # the stemmer keeps its state on the object: one per thread
        self._seen: dict[str, str | None] = {}  # a dict's get/set are atomic: safe to share

    def _term(self, word: str) -> str | None:
        if len(word) * 4 >= MAX_TOKEN_BYTES and len(word.encode("utf-8")) >= MAX_TOKEN_BYTES:
            return None
        stemmer = getattr(self._local, "stemmer", None)
        if stemmer is None:
            stemmer = self._local.stemmer = self._stemmer()
        stemmed = stemmer.stemWord(_lower(word))
        return None if stemmed in STOP_WORDS else _fold(stemmed)

    def terms(self, text: str) -> list[str]:
        seen = self._seen
        out = []
        for word in _WORD.findall(text):
            term = seen.get(word, "")
            if term == "":
                term = seen[word] = self._term(word)
                if len(seen) > 1_000_000:  # a bound for long-running servers fed odd text
                    seen.clear()
            if term is not None:
                out.append(term)
        return out

    def counts(self, text: str) -> Counter[str]:
        return Counter(self.terms(text))


def idf(df: int, n_docs: int) -> float:
    return math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))


def term_weight(tf: int, doc_len: int, avg_doc_len: float) -> float:
    return tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * doc_len / avg_doc_len))


def score(
    query_terms: list[str], doc_terms: Counter[str], df: dict[str, int], n_docs: int, avg_doc_len: float
) -> float:
    """The BM25 score of one document: the closed form the SQL in postgres.py computes."""
    doc_len = sum(doc_terms.values())
    return sum(
        idf(df[t], n_docs) * term_weight(doc_terms[t], doc_len, avg_doc_len)
        for t in query_terms
        if doc_terms.get(t) and df.get(t)
    )
