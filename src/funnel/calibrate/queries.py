"""Test queries made from the documents, no human judgments needed: a title or section heading (answer: the
text under it), one sentence (answer: the rest of its passage and the chunks beside it; the inverse cloze
task), or, for a corpus of one-sentence records, half of a record. The query is taken out of its answer, so
neither retriever can win by matching it verbatim."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, replace

from funnel.analyze import CJK_LETTERS, SENTENCE_END
from funnel.index.base import Store
from funnel.types import Chunk

DEFAULT_QUERIES = 120
# The first stage is chosen on a larger sample of its own: it needs no reranker, so queries are cheap, and
# its options differ by less (on a Korean manual set, BM25 alone against the hybrid: p=0.50 on 96 queries,
# p=0.009 on 194; BENCHMARKS.md "Korean").
FIRST_STAGE_QUERIES = 300
MIN_QUERIES = 20  # below this a corpus is too small to say anything; the safe choice stays

# A real word: 3+ letters, or 2+ Hangul/CJK characters (a Korean or Chinese word is often two syllables).
_WORD = re.compile(f"[^\\W\\d_{CJK_LETTERS}]{{3,}}|[{CJK_LETTERS}]{{2,}}")
_FILE_NAME = re.compile(r"[\w.-]+\.[A-Za-z0-9]{1,5}")


@dataclass(frozen=True)
class PseudoQuery:
    text: str
    kind: str  # "title": a title or heading -> its text; "sentence": a sentence -> the rest of its chunk
    relevant: frozenset[str]  # chunk ids that answer it
    edits: tuple[Chunk, ...]  # chunks whose text changes in the small copy (the query taken out of them)


def _content(chunk: Chunk) -> str:
    """The chunk's text without the context line the chunker put first ("title > heading")."""
    first, sep, rest = chunk.text.partition("\n")
    return rest if sep and first.strip() == chunk.context_line.strip() else chunk.text


def _units(text: str) -> list[str]:
    """Sentences, and lines that are not sentences (table rows, code, list items)."""
    units = []
    for line in text.splitlines():
        units.extend(s.strip() for s in SENTENCE_END.split(line) if s.strip())
    return units


def _informative(text: str | None) -> bool:
    """A title or heading a person might have typed as a query: 3+ real words, not a file name."""
    if not text or _FILE_NAME.fullmatch(text.strip()):
        return False
    return len(_WORD.findall(text)) >= 3 and len(text.split()) <= 30


def _neighbours(chunks: list[Chunk], target: Chunk) -> frozenset[str]:
    """The target and the chunks beside it: the passage a reader would accept (chunks overlap)."""
    return frozenset(c.chunk_id for c in chunks if abs(c.ordinal - target.ordinal) <= 1)


def sentence_query(chunks: list[Chunk], chunk: Chunk, rng: random.Random) -> PseudoQuery | None:
    """One sentence of the chunk as the query, and the chunk without it as the target (the inverse cloze
    task); None if the chunk has no sentence of 5-40 words with 3 real words, or too little would be left."""
    content = _content(chunk)
    usable = [u for u in _units(content) if 5 <= len(u.split()) <= 40 and len(_WORD.findall(u)) >= 3]
    if not usable:
        return None
    sentence = rng.choice(usable)
    rest = content.replace(sentence, " ", 1)
    if len(rest.split()) < 12:
        return None
    head = chunk.text[: len(chunk.text) - len(content)]
    return PseudoQuery(sentence, "sentence", _neighbours(chunks, chunk), (replace(chunk, text=head + rest),))


def title_query(chunks: list[Chunk], chunk: Chunk, rng: random.Random) -> PseudoQuery | None:
    """The chunk's section heading (else its document's title) as the query, and the chunks under it as
    the answer, with that heading taken out of their context lines; None when it is not informative or
    the chunks would be left with too little text."""
    if _informative(chunk.heading):
        name, members = chunk.heading, [c for c in chunks if c.heading == chunk.heading]
    elif _informative(chunk.title):
        name, members = chunk.title, chunks
    else:
        return None
    edits = []
    for member in members:
        content = _content(member)
        if len(content.split()) >= 12:
            edits.append(replace(member, text=content.replace(name, " ")))
    if not edits:
        return None
    return PseudoQuery(name, "title", frozenset(e.chunk_id for e in edits), tuple(edits))


def half_query(chunks: list[Chunk], chunk: Chunk, rng: random.Random) -> PseudoQuery | None:
    """For a record of one sentence (a corpus of short records gives no sentence with a passage left
    around it): one half of its words as the query, the record without them as the target. None when the
    record has fewer than 8 words, or 3 real words on either side."""
    content = _content(chunk)
    words = content.split()
    if not 8 <= len(words) <= 80:
        return None
    cut = len(words) // 2
    first, second = " ".join(words[:cut]), " ".join(words[cut:])
    query, rest = (first, second) if rng.random() < 0.5 else (second, first)
    if len(_WORD.findall(query)) < 2 or len(_WORD.findall(rest)) < 2:
        return None
    head = chunk.text[: len(chunk.text) - len(content)]
    return PseudoQuery(query, "half", frozenset({chunk.chunk_id}), (replace(chunk, text=head + rest),))


MAKERS = {"title": title_query, "sentence": sentence_query, "half": half_query}


def generated(
    store: Store, n_queries: int, seed: int, kinds: tuple[str, ...]
) -> tuple[list[PseudoQuery], dict[str, Chunk]]:
    """`sample`'s queries, or halves of records where the corpus is of one-sentence records."""
    queries, sources = sample(store, n_queries, random.Random(seed), kinds)
    if len(queries) < MIN_QUERIES:
        queries, sources = sample(store, n_queries, random.Random(seed), ("half",))
    return queries, sources


def sample(
    store: Store, n_queries: int, rng: random.Random, kinds: tuple[str, ...]
) -> tuple[list[PseudoQuery], dict[str, Chunk]]:
    """Pseudo-queries spread over randomly chosen documents (several per document when there are few, as
    in one long PDF), and every chunk of the documents they came from."""
    doc_ids = sorted(store.document_hashes())  # ids only: lighter than the outline on a large index
    rng.shuffle(doc_ids)
    per_doc = max(1, -(-n_queries // max(1, len(doc_ids))))
    queries: list[PseudoQuery] = []
    seen: dict[str, Chunk] = {}
    edited: set[str] = set()
    for doc_id in doc_ids:
        if len(queries) >= n_queries:
            break
        chunks = store.get_chunks(doc_id)
        order = list(chunks)
        rng.shuffle(order)
        taken = 0
        for chunk in order:
            if taken == per_doc or len(queries) == n_queries:
                break
            # the kinds take turns; a chunk that has no title gives a sentence
            first = len(queries) % len(kinds)
            query = next((q for kind in kinds[first:] + kinds[:first]
                          if (q := MAKERS[kind](chunks, chunk, rng)) is not None), None)
            if query is not None and not edited & {e.chunk_id for e in query.edits}:
                queries.append(query)
                edited |= {e.chunk_id for e in query.edits}
                taken += 1
        if taken:
            seen.update((c.chunk_id, c) for c in chunks)
    return queries, seen
