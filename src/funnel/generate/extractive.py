"""The answer that needs no LLM: the best sentences (or table rows) of the top documents, cited.

Each candidate sentence is scored by cosine similarity to the question under the index's own embedder,
plus the share of the question's content words it contains, so an exact table row ("CEO: Iris Kallas")
beats a paraphrase that merely sounds close.
"""

from __future__ import annotations

import re

import numpy as np

from funnel.analyze import SENTENCE_END, default_analyzer, has_cjk
from funnel.embed.base import Embedder, embed_queries
from funnel.generate.mail_fields import header_scores
from funnel.generate.question_parts import question_parts
from funnel.generate.table_cells import cell_answer, find_cell
from funnel.types import Answer, Chunk, Citation, SearchResult

# A line that starts a list item: a bullet, or a number or letter followed by "." or ")".
_LIST_ITEM = re.compile(r"^\s*(?:[-*+•◦▪–·]\s+|\(?(?:\d{1,3}|[a-z])[.)]\s+)")
# A lead-in ("...from the following sources, sorted by priority:") keeps at most this much of what follows.
MAX_LEAD_IN_CHARS = 900
MAX_LEAD_IN_ITEMS = 12
_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    "a an the of in on at to for from by with and or not is are was were be been what which who whom "
    "whose when where why how does do did has have had it its this that these those as i you he she we "
    "they me my our your their there than then so if into about can could would should will".split()
)
NOT_FOUND = "No relevant passage was found in the indexed documents."


# Korean particles and endings that BM25's analyzers keep as terms: no content of their own.
_STOP_KO = frozenset("은 는 이 가 을 를 의 에 도 와 과 로 으로 에서 에게 까지 부터 만 께 요 다 고 며 면 서 지 어 아 었 았 "
                     "겠 습니다 니다 는다 ᆫ ᆯ 하 되 있 없 것 수 등 및 그 이런 저 the".split())


def _terms(text: str, analyzer=None) -> set[str]:
    words = {w for w in _WORD.findall(text.lower()) if w not in _STOP}
    if has_cjk(text):  # Hangul, Han, Kana: the terms BM25 indexes (morphemes or bigrams), not [a-z0-9] runs
        lexed = (analyzer or default_analyzer()).lex(text).lower().split()
        words |= {t for t in lexed if has_cjk(t) and t not in _STOP_KO}
    return words


def question_terms(text: str, analyzer=None) -> set[str]:
    """The content terms of a text as the answer compares them: words less stop words, and for Hangul, Han
    and Kana the terms BM25 indexes (`analyzer`'s: the one the index analyzes a question with; default: the
    one a new index gets)."""
    return _terms(text, analyzer)


def _lexical(question: set[str], sentences: list[set[str]]) -> np.ndarray:
    """Each sentence's share of the question's terms, a term weighted by how rare it is among the candidate
    sentences (IDF over the pool): the row that names "Ogham" beats rows that share only "code" and "script"."""
    if not question:
        return np.zeros(len(sentences))
    n = len(sentences)
    weight = {t: np.log(1.0 + n / (1 + sum(t in s for s in sentences))) for t in question}
    total = sum(weight.values())
    return np.array([sum(weight[t] for t in question & s) / total for s in sentences])


def split_sentences(chunk: Chunk) -> list[str]:
    """Sentences of prose, or whole lines of tables and code; the chunk's context line is skipped. A
    sentence that leads in to a list or table ("...sorted by priority:") carries what follows it."""
    return [text for text, _ in _units(chunk)]


def _units(chunk: Chunk) -> list[tuple[str, bool]]:
    """(text, dangling) per answer unit: dangling = a lead-in whose list did not follow in this chunk."""
    if chunk.section_kind.value != "prose":
        return [(text, False) for text, _ in _pieces(chunk)]
    return _with_lists(_pieces(chunk))


def _pieces(chunk: Chunk) -> list[tuple[str, bool]]:
    """(text, is a list item): sentences and list items of prose, whole lines of tables and code."""
    lines = chunk.text.splitlines()
    if chunk.context_line and lines and lines[0].strip() == chunk.context_line:
        lines = lines[1:]
    if chunk.section_kind.value != "prose":
        return [(line.strip(), False) for line in lines if line.strip()]
    pieces: list[tuple[str, bool]] = []
    for paragraph in _paragraphs(lines):
        if _LIST_ITEM.match(paragraph):
            pieces.append((paragraph, True))
            continue
        pieces.extend((s.strip(), False) for s in SENTENCE_END.split(paragraph) if s.strip())
    return pieces


def _with_lists(pieces: list[tuple[str, bool]]) -> list[tuple[str, bool]]:
    """Each lead-in sentence (ending in a colon) joined with the list items after it (or, with no list,
    the one sentence it introduces); list items and sentences stay units of their own as well."""
    units: list[tuple[str, bool]] = []
    for i, (text, is_item) in enumerate(pieces):
        if len(_LIST_ITEM.sub("", text).split()) < 3:  # "1.", "Example:": too short to answer anything
            continue
        if not text.endswith(":"):
            units.append((text, False))
            continue
        following = _list_after(pieces, i + 1)
        units.append((" ".join([text, *following]), not following))
    return units


def _list_after(pieces: list[tuple[str, bool]], start: int) -> list[str]:
    taken: list[str] = []
    size = 0
    for text, is_item in pieces[start:]:
        if taken and not is_item:
            break
        if len(taken) == MAX_LEAD_IN_ITEMS or (taken and size + len(text) > MAX_LEAD_IN_CHARS):
            break
        taken.append(text)
        size += len(text)
        if not is_item:  # a lead-in to a single sentence
            break
    return taken


def _paragraphs(lines: list[str]) -> list[str]:
    """Lines joined into paragraphs; a blank line or a title-like line (short, no final punctuation)
    ends one, so a heading never glues itself to the sentence after it. A list item starts one."""
    paragraphs: list[str] = []
    current: list[str] = []
    for line in (raw.strip() for raw in lines):
        item = bool(_LIST_ITEM.match(line))
        title_like = line and not item and len(line.split()) <= 8 and line[-1] not in ".!?:;,"
        if not line or title_like or item:
            if current:
                paragraphs.append(" ".join(current))
            current = []
            if title_like:
                paragraphs.append(line)
            if item:
                current = [line]
            continue
        current.append(line)
    if current:
        paragraphs.append(" ".join(current))
    return paragraphs


def _continued(pool: list[tuple[str, Chunk, bool]]) -> list[tuple[str, Chunk, bool]]:
    """A lead-in left dangling at the end of its chunk takes the list (or sentence) that opens the next
    chunk of the same document, when the context holds that chunk (`funnel.generate.context`); a lead-in
    that stays dangling is never chosen."""
    chunks = {(chunk.doc_id, chunk.ordinal): chunk for _, chunk, _ in pool}
    out = []
    for text, chunk, dangling in pool:
        if dangling:
            following = chunks.get((chunk.doc_id, chunk.ordinal + 1))
            items = _list_after(_pieces(following), 0) if following is not None else []
            if not items:
                continue
            text, dangling = " ".join([text, *items]), False
        out.append((text, chunk, dangling))
    return out


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
        return self.pick(question, result)[0]

    def pick(self, question: str, result: SearchResult) -> tuple[Answer, bool]:
        """The answer, and whether it is a table's cell found by its row and column (exact: the reader
        leaves those as they are)."""
        units: list[tuple[str, Chunk, bool]] = []
        for document in result.documents:
            for hit in document.hits:
                units.extend((text, hit.chunk, dangling) for text, dangling in _units(hit.chunk))
        pool = [(text, chunk) for text, chunk, _ in _continued(units)]
        if not pool:
            return Answer(question, NOT_FOUND, (), self.name, result), False

        cjk = has_cjk(question)
        if cjk and any(has_cjk(s) for s, _ in pool):  # a Korean (Chinese, Japanese) question: an answer in it
            pool = [(s, c) for s, c in pool if has_cjk(s)]
        sentences = self.embedder.embed([s for s, _ in pool])
        terms = [_terms(s) for s, _ in pool]
        # Each part of a multi-part question ("..., and who owns the fix?") is answered on its own.
        asked = question_parts(question)
        chosen: list[int] = []
        part_terms = [_terms(part) for part in asked]
        for n, (part, vector) in enumerate(zip(asked, embed_queries(self.embedder, list(asked)), strict=True)):
            # A part is answered by a sentence with its own terms, not one that echoes the others' as well
            # ("Summary: the root cause, who owns the fix, ..."): the other parts' own terms count against.
            others = set().union(*part_terms[:n], *part_terms[n + 1:]) - part_terms[n]
            lexical = _lexical(part_terms[n], terms) - 0.5 * _lexical(others, terms)
            # An English embedder reads Hangul as noise (unrelated Korean questions: mean cosine 0.675), so for
            # a question in those scripts the shared terms decide and the cosine only breaks ties.
            scores = (0.1 if cjk else 1.0) * (sentences @ vector) + self.lexical_weight * lexical
            scores = header_scores(part, pool, scores)  # "who sent ...": the message's From: line
            if len(asked) == 1 and (cell := find_cell(part, pool, scores)) is not None:  # a table lookup
                return cell_answer(question, cell, result, self.name), True
            chosen += self._choose(scores, pool, chosen, parts=len(asked))

        numbers: dict[str, int] = {}
        citations: list[Citation] = []
        parts: list[str] = []
        for i in chosen:
            sentence, chunk = pool[i]
            if chunk.chunk_id not in numbers:
                numbers[chunk.chunk_id] = len(numbers) + 1
                citations.append(Citation.of(numbers[chunk.chunk_id], chunk, sentence))
            parts.append(f"{sentence} [{numbers[chunk.chunk_id]}]")
        return Answer(question, "\n".join(parts), tuple(citations), self.name, result), False

    def _choose(
        self, scores: np.ndarray, pool: list[tuple[str, Chunk]], taken: list[int], parts: int
    ) -> list[int]:
        """The best sentences for one question (or one part of it): those within `keep_ratio` of the best,
        at most `max_sentences`, none repeated. A part whose best sentence an earlier part chose already is
        answered by it; each of several parts takes its share of `max_sentences`, so the answer stays short."""
        limit = max(1, self.max_sentences // parts)
        seen = {pool[i][0].lower() for i in taken}
        chosen: list[int] = []
        floor = self.keep_ratio * float(scores.max())
        for i in np.argsort(-scores, kind="stable"):
            if chosen and scores[i] < floor:
                break
            key = pool[i][0].lower()
            if key in seen:
                if not chosen and parts > 1:
                    return []
                continue
            seen.add(key)
            chosen.append(int(i))
            if len(chosen) == limit:
                break
        return chosen
