"""The answer step, written once: prepare -> stream -> settle.

`Pipeline.prepare(result)` measures the evidence and picks the answerer (the configured generator, or the
abstainer when the evidence falls short); `AnswerStep.stream()` gives the answer's text deltas as they come;
`settle` holds the finished answer to the evidence (an LLM that said the documents do not answer abstained).
`AnswerStep.quote()` is what can be shown before the first delta: a reader's quoted sentences.
`Pipeline.ask`, the CLI, the HTTP API and its SSE stream, MCP and `funnel eval` all answer through it.
"""

from __future__ import annotations

from collections.abc import Generator
import time
from dataclasses import dataclass, replace

from funnel.generate import abstain
from funnel.generate.abstain import Evidence
from funnel.generate.base import Generator as AnswerGenerator
from funnel.generate.llm import AnswerStream, answer_stream
from funnel.types import Answer, Citation, SearchResult


# Evidence from this share of the index's threshold up to it is borderline: a reader (a generator with
# `borderline(evidence)`) reads those passages and decides, so a paraphrase could be answered rather than
# refused; below it the gate abstains without asking. Measured on the real-PDF set (BENCHMARKS.md, "The
# reader"), a band from 0.7 sent 3 unanswerable questions and no answerable one to the 1.5B reader, which
# abstained on 1: so by default (1.0) the gate alone decides, and `[answer] borderline` opens the band.
BORDERLINE = 1.0


def answerer(generator: AnswerGenerator, evidence: Evidence | None, borderline: float = BORDERLINE) -> AnswerGenerator:
    """What answers under `evidence`: `generator` when it is supported; its borderline form (a reader that
    abstains when it finds no answer) when it is close; else the abstainer."""
    if evidence is None or evidence.supported:
        return generator
    decide = getattr(generator, "borderline", None)
    if decide is not None and evidence.score >= borderline * evidence.threshold:
        return decide(evidence)
    return abstain.Abstainer(evidence, generator.name)


@dataclass(frozen=True)
class AnswerStep:
    """One question's answer, prepared: what answers it and the evidence it is held to."""

    question: str
    result: SearchResult
    answerer: AnswerGenerator
    evidence: Evidence | None  # None: abstention is off

    @property
    def abstains(self) -> bool:
        return isinstance(self.answerer, abstain.Abstainer)

    def quote(self) -> tuple[Citation, ...]:
        """What can be shown at once while the answer is written: a reader's quoted sentences (the picker's,
        in well under a second), or nothing (an abstention, or an answerer that is instant anyway)."""
        quote = None if self.abstains else getattr(self.answerer, "quote", None)
        return quote(self.question, self.result) if quote is not None else ()

    def stream(self) -> AnswerStream:
        """The text deltas; `answer` is the settled answer once they are exhausted."""
        return AnswerStream(self._settled(answer_stream(self.answerer, self.question, self.result)))

    def answer(self) -> Answer:
        """The whole answer at once (the generator's own `answer`: an HTTP LLM gets one request, not a stream)."""
        t0 = time.perf_counter()
        return self._timed(self.settle(self.answerer.answer(self.question, self.result)), t0)

    def settle(self, answer: Answer) -> Answer:
        return answer if self.evidence is None or answer.abstained else abstain.gated(answer, self.evidence)

    def _settled(self, stream: AnswerStream) -> Generator[str, None, Answer]:
        t0 = time.perf_counter()
        try:
            yield from stream
        finally:
            stream.close()
        assert stream.answer is not None
        return self._timed(self.settle(stream.answer), t0)

    @staticmethod
    def _timed(answer: Answer, started: float) -> Answer:
        if answer.search is None:
            return answer
        # The search result is frozen: the answer carries a copy with the generation's time added.
        timings = {**answer.search.timings_ms, "generate": 1000 * (time.perf_counter() - started)}
        return replace(answer, search=replace(answer.search, timings_ms=timings))
