"""The answer that needs no LLM: the best sentences (or table rows) of the top documents, cited.

Each candidate sentence is scored by cosine similarity to the question under the index's own embedder,
plus the share of the question's content words it contains, so an exact table row ("CEO: Iris Kallas")
beats a paraphrase that merely sounds close.
"""

from __future__ import annotations

import re

import numpy as np

from funnel.embed.base import Embedder
from funnel.types import Answer, Chunk, Citation, SearchResult

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(\[])")
_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    "a an the of in on at to for from by with and or not is are was were be been what which who whom "
    "whose when where why how does do did has have had it its this that these those as i you he she we "
    "they me my our your their there than then so if into about can could would should will".split()
)
NOT_FOUND = "No relevant passage was found in the indexed documents."


def _terms(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP}


def split_sentences(chunk: Chunk) -> list[str]:
    """Sentences of prose, or whole lines of tables and code; the chunk's context line is skipped."""
    lines = chunk.text.splitlines()
    if chunk.context_line and lines and lines[0].strip() == chunk.context_line:
        lines = lines[1:]
    if chunk.section_kind.value != "prose":
        return [line.strip() for line in lines if line.strip()]
    sentences: list[str] = []
    for paragraph in _paragraphs(lines):
        sentences.extend(s.strip() for s in _SENTENCE_END.split(paragraph) if len(s.split()) >= 3)
    return sentences


def _paragraphs(lines: list[str]) -> list[str]:
    """Lines joined into paragraphs; a blank line or a title-like line (short, no final punctuation)
    ends one, so a heading never glues itself to the sentence after it."""
    paragraphs: list[str] = []
    current: list[str] = []
    for line in (raw.strip() for raw in lines):
        title_like = line and len(line.split()) <= 8 and line[-1] not in ".!?:;,"
        if not line or title_like:
            if current:
                paragraphs.append(" ".join(current))
            current = []
            if title_like:
                paragraphs.append(line)
            continue
        current.append(line)
    if current:
        paragraphs.append(" ".join(current))
    return paragraphs


class ExtractiveGenerator:
    name = "extractive"

    def __init__(
        self, embedder: Embedder, max_sentences: int = 3, lexical_weight: float = 0.5, keep_ratio: float = 0.75
    ):
        self.embedder = embedder
        self.max_sentences = max_sentences
        self.lexical_weight = lexical_weight
        # A sentence joins the answer only if it scores at least this share of the best one:
        # three sentences where one answers is noise, not thoroughness.
        self.keep_ratio = keep_ratio

    def answer(self, question: str, result: SearchResult) -> Answer:
        pool: list[tuple[str, Chunk]] = []
        for document in result.documents:
            for hit in document.hits:
                pool.extend((s, hit.chunk) for s in split_sentences(hit.chunk))
        if not pool:
            return Answer(question, NOT_FOUND, (), self.name, result)

        vectors = self.embedder.embed([question] + [s for s, _ in pool])
        semantic = vectors[1:] @ vectors[0]
        q_terms = _terms(question)
        lexical = np.array([len(q_terms & _terms(s)) / max(len(q_terms), 1) for s, _ in pool])
        scores = semantic + self.lexical_weight * lexical

        chosen: list[int] = []
        seen: set[str] = set()
        floor = self.keep_ratio * float(scores.max())
        for i in np.argsort(-scores, kind="stable"):
            if chosen and scores[i] < floor:
                break
            key = pool[i][0].lower()
            if key in seen:
                continue
            seen.add(key)
            chosen.append(int(i))
            if len(chosen) == self.max_sentences:
                break

        numbers: dict[str, int] = {}
        citations: list[Citation] = []
        parts: list[str] = []
        for i in chosen:
            sentence, chunk = pool[i]
            if chunk.chunk_id not in numbers:
                numbers[chunk.chunk_id] = len(numbers) + 1
                citations.append(_citation(numbers[chunk.chunk_id], chunk, sentence))
            parts.append(f"{sentence} [{numbers[chunk.chunk_id]}]")
        return Answer(question, "\n".join(parts), tuple(citations), self.name, result)


def _citation(number: int, chunk: Chunk, sentence: str) -> Citation:
    return Citation(
        number=number,
        chunk_id=chunk.chunk_id,
        doc_id=chunk.doc_id,
        path=chunk.path,
        title=chunk.title,
        location=chunk.location,
        text=sentence,
        page=chunk.page,
        line_start=chunk.line_start,
        line_end=chunk.line_end,
    )
