"""Answers written by an LLM from the passages a search found, and the fallback that keeps `ask` answering
when the model server is down.

`LlmGenerator` numbers the search's chunks best first ([1], [2], ...), each under its document's title and
location, packs as many as fit `context_tokens`, and asks the model to answer only from them and cite by
number. The numbers the answer uses become `Citation`s of exactly those chunks; an answer citing none is
flagged "uncited", one citing a number no passage has is flagged "unknown_citation".

Streaming: `stream_answer` returns an `AnswerStream`, an iterator of text deltas whose `answer` is the
finished `Answer` once the deltas are exhausted. On its own, a broken stream raises from the iterator
(`AnswerInterrupted` after some text, carrying the partial answer). `FallbackGenerator` turns failures
into answers: before the first delta it answers with the fallback instead; after it, the stream ends
with the delta `INTERRUPTED.format(reason=...)` (a blank line, then "[answer interrupted: <reason>]") and
the final answer is the text shown so far plus that marker, flagged "interrupted".
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Generator
from dataclasses import dataclass

from funnel.errors import BackendUnavailable, UpstreamError
from funnel.generate.base import ANSWER_TOKENS, CONTEXT_TOKENS
from funnel.generate.base import Generator as AnswerGenerator
from funnel.generate.chat import ChatMessage, ChatModel, ReturningStream
from funnel.generate.abstain import NOT_IN_DOCUMENTS
from funnel.generate.extractive import NOT_FOUND
from funnel.types import Answer, Chunk, Citation, SearchResult

SYSTEM_PROMPT = (
    "You answer questions using ONLY the numbered context passages the user gives you. "
    "After every statement, cite the passage(s) it comes from by number in square brackets, "
    "like [1] or [2][3]. "
    "When the question asks several things, answer every part of it, each with its citation. "
    "If the passages do not contain the answer, reply with this sentence alone: "
    f"\"{NOT_IN_DOCUMENTS}\" Never use outside knowledge."
)
INTERRUPTED = "\n\n[answer interrupted: {reason}]"
FALLBACK_ERRORS = (UpstreamError, BackendUnavailable)
_CITATION = re.compile(r"\[(\s*\d+\s*(?:[,;]\s*\d+\s*)*)\]")


def approximate_tokens(text: str) -> int:
    """About four characters per token: the usual rule of thumb for English under BPE tokenizers."""
    return math.ceil(len(text) / 4)


@dataclass(frozen=True)
class Passage:
    """One numbered context passage, as the model sees it."""

    number: int
    chunk: Chunk
    text: str  # the chunk's text without its context line (the header names the document instead)
    tokens: int  # of `render()`, by the generator's counter

    def render(self) -> str:
        return f"{header(self.number, self.chunk)}\n{self.text}"


def header(number: int, chunk: Chunk) -> str:
    return f"[{number}] {chunk.context_line} ({chunk.location})"


class AnswerStream(ReturningStream[Answer]):
    """The text deltas of an answer. `answer` is None until the deltas are exhausted, then the `Answer`."""

    @property
    def answer(self) -> Answer | None:
        return self.value


class AnswerInterrupted(UpstreamError):
    """The model's stream broke after some text was shown; `partial` is the answer so far, flagged."""

    def __init__(self, cause: UpstreamError, partial: Answer):
        super().__init__(
            cause.stage, f"the answer stream broke after {len(partial.text)} characters: {cause.detail}"
        )
        self.cause = cause
        self.partial = partial


class LlmGenerator:
    """The Generator protocol over any `ChatModel`.

    `count_tokens` sizes the context (pass the embedder's `count_tokens` for a closer count than the default
    four-characters-per-token estimate). `context_tokens` bounds the passages only, not the instructions or
    the question. A passage that does not fit is skipped and smaller ones after it may still go in; when
    even the best passage alone is too long, it is cut to fit so the model always sees something.
    """

    def __init__(
        self,
        chat: ChatModel,
        *,
        context_tokens: int = CONTEXT_TOKENS,
        count_tokens: Callable[[str], int] | None = None,
        max_answer_tokens: int = ANSWER_TOKENS,
        temperature: float = 0.0,
    ):
        self.chat = chat
        self.name = chat.name
        self.context_tokens = context_tokens
        self.count_tokens = count_tokens or approximate_tokens
        self.max_answer_tokens = max_answer_tokens
        self.temperature = temperature

    def answer(self, question: str, result: SearchResult) -> Answer:
        passages = self.pack(result)
        if not passages:
            return Answer(question, NOT_FOUND, (), self.name, result, flags=("no_context",))
        reply = self.chat.chat(
            self.messages(question, passages), max_tokens=self.max_answer_tokens, temperature=self.temperature
        )
        return self._answer(question, result, reply.content.strip(), passages)

    def stream_answer(self, question: str, result: SearchResult) -> AnswerStream:
        return AnswerStream(self._stream(question, result))

    def pack(self, result: SearchResult) -> tuple[Passage, ...]:
        """The search's chunks, best first, numbered, as many as fit `context_tokens`."""
        hits = sorted((h for d in result.documents for h in d.hits), key=lambda h: h.final_rank)
        passages: list[Passage] = []
        used = 0
        seen: set[str] = set()
        for hit in hits:
            chunk = hit.chunk
            if chunk.chunk_id in seen:
                continue
            seen.add(chunk.chunk_id)
            number = len(passages) + 1
            text = _body(chunk)
            tokens = self.count_tokens(f"{header(number, chunk)}\n{text}")
            if used + tokens > self.context_tokens:
                if passages:
                    continue
                text = self._cut(header(number, chunk), text)
                if not text:
                    continue
                tokens = self.count_tokens(f"{header(number, chunk)}\n{text}")
            passages.append(Passage(number, chunk, text, tokens))
            used += tokens
        return tuple(passages)

    def messages(self, question: str, passages: tuple[Passage, ...]) -> list[ChatMessage]:
        context = "\n\n".join(p.render() for p in passages)
        user = f"Context passages:\n\n{context}\n\nQuestion: {question}"
        return [ChatMessage("system", SYSTEM_PROMPT), ChatMessage("user", user)]

    # --- internals -----------------------------------------------------------------------------------

    def _stream(self, question: str, result: SearchResult) -> Generator[str, None, Answer]:
        passages = self.pack(result)
        if not passages:
            yield NOT_FOUND
            return Answer(question, NOT_FOUND, (), self.name, result, flags=("no_context",))
        deltas = self.chat.stream(
            self.messages(question, passages), max_tokens=self.max_answer_tokens, temperature=self.temperature
        )
        parts: list[str] = []
        try:
            for delta in deltas:
                parts.append(delta)
                yield delta
        except UpstreamError as e:
            if not parts:
                raise
            partial = self._answer(question, result, "".join(parts), passages)
            raise AnswerInterrupted(
                e, dataclasses.replace(partial, flags=partial.flags + ("interrupted",))
            ) from e
        finally:
            close = getattr(deltas, "close", None)
            if close is not None:
                close()
        return self._answer(question, result, "".join(parts).strip(), passages)

    def _answer(
        self, question: str, result: SearchResult, text: str, passages: tuple[Passage, ...]
    ) -> Answer:
        citations, unknown = cited(text, passages)
        flags = (("uncited",) if not citations else ()) + (("unknown_citation",) if unknown else ())
        return Answer(question, text, citations, self.name, result, flags=flags)

    def _cut(self, head: str, text: str) -> str:
        """The longest prefix of `text` that fits the budget under `head` (binary search: counters are
        monotonic in practice, and a tokenizer call per character would be slow)."""
        lo, hi = 0, len(text)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.count_tokens(f"{head}\n{text[:mid]}") <= self.context_tokens:
                lo = mid
            else:
                hi = mid - 1
        return text[:lo].rstrip()


def cited(text: str, passages: tuple[Passage, ...]) -> tuple[tuple[Citation, ...], tuple[int, ...]]:
    """The citations `text` makes, in passage-number order, and the numbers it cites that no passage has."""
    by_number = {p.number: p for p in passages}
    used: set[int] = set()
    for match in _CITATION.finditer(text):
        # A number of thousands of digits is no passage's, and int() refuses over 4300 of them.
        used.update(int(n) for n in re.findall(r"\d+", match.group(1)) if len(n) <= 9)
    citations = tuple(
        Citation.of(n, by_number[n].chunk, by_number[n].text) for n in sorted(used) if n in by_number
    )
    return citations, tuple(sorted(n for n in used if n not in by_number))


def _body(chunk: Chunk) -> str:
    """The chunk's text without the context line the chunker put first (the passage header says it)."""
    first, newline, rest = chunk.text.partition("\n")
    return rest.strip() if newline and first.strip() == chunk.context_line else chunk.text.strip()


class FallbackGenerator:
    """Answers with `primary`; when it raises `UpstreamError` or `BackendUnavailable`, with `fallback`,
    recording why in `Answer.fallback_reason` (`Answer.generator` says which one answered)."""

    def __init__(self, primary: AnswerGenerator, fallback: AnswerGenerator):
        self.primary = primary
        self.fallback = fallback
        self.name = f"{primary.name} (fallback: {fallback.name})"

    def __getattr__(self, name: str):
        # `borderline` is the primary's (a reader's), with the abstainer as its fallback: a borderline question
        # the reader cannot read is not answered by the picker the gate judged short of evidence.
        if name == "quote" and hasattr(self.primary, "quote"):  # the sentences shown while a reader reads
            return self.primary.quote
        if name == "borderline" and hasattr(self.primary, "borderline"):
            from funnel.generate.abstain import Abstainer

            return lambda evidence: FallbackGenerator(self.primary.borderline(evidence),
                                                      Abstainer(evidence, self.primary.name))
        raise AttributeError(name)

    def answer(self, question: str, result: SearchResult) -> Answer:
        try:
            return self.primary.answer(question, result)
        except FALLBACK_ERRORS as e:
            return self._fallback(self.fallback.answer(question, result), e)

    def stream_answer(self, question: str, result: SearchResult) -> AnswerStream:
        return AnswerStream(self._stream(question, result))

    def _stream(self, question: str, result: SearchResult) -> Generator[str, None, Answer]:
        primary = answer_stream(self.primary, question, result)
        try:
            first = next(primary)
        except StopIteration:
            return primary.answer  # an empty answer, not a failure
        except FALLBACK_ERRORS as e:
            primary.close()
            answer = yield from _deltas(answer_stream(self.fallback, question, result))
            return self._fallback(answer, e)
        shown = [first]
        try:
            yield first
            for delta in primary:
                shown.append(delta)
                yield delta
        except FALLBACK_ERRORS as e:
            if isinstance(e, AnswerInterrupted):
                reason, partial = e.cause, e.partial
            else:
                reason = e
                partial = Answer(
                    question, "".join(shown), (), self.primary.name, result, flags=("interrupted",)
                )
            marker = INTERRUPTED.format(reason=reason)
            yield marker
            quote = getattr(self.primary, "quote", None)  # what was shown first stays beside the broken answer
            kept = partial.quote or (quote(question, result) if quote is not None else ())
            return dataclasses.replace(partial, text=partial.text + marker, quote=kept)
        finally:
            primary.close()  # a reader that stops early drops the model's connection now, not at GC
        assert primary.answer is not None
        return primary.answer

    def _fallback(self, answer: Answer, error: Exception) -> Answer:
        return dataclasses.replace(answer, fallback_reason=f"{self.primary.name} failed: {error}")


def answer_stream(generator: AnswerGenerator, question: str, result: SearchResult) -> AnswerStream:
    """`generator.stream_answer` where it has one; otherwise its whole answer as a single delta."""
    stream = getattr(generator, "stream_answer", None)
    if stream is not None:
        return stream(question, result)

    def whole() -> Generator[str, None, Answer]:
        answer = generator.answer(question, result)
        if answer.text:
            yield answer.text
        return answer

    return AnswerStream(whole())


def _deltas(stream: AnswerStream) -> Generator[str, None, Answer]:
    """`yield from` over an AnswerStream, returning its answer."""
    yield from stream
    assert stream.answer is not None
    return stream.answer
