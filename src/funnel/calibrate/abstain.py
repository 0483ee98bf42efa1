"""The abstention threshold of one index: how much evidence (`funnel.generate.abstain.measure`) an answer needs
here before the documents are taken to support it.

Two samples, searched on the index itself as `funnel ask` searches it:
- unanswerable: questions about other matters (`foreign_questions.txt`, English and Korean: cooking, sport,
  travel, ...): on this index, how high can a question its documents do not answer score?
- answerable: sentences of the index's own chunks (`queries.generated`), which it holds verbatim.

The threshold starts from DEFAULT_THRESHOLD (measured on the development sets, BENCHMARKS.md "Abstention"),
rises until FOREIGN_ABSTAIN of the foreign questions would abstain (an index whose vocabulary is so wide that
any question finds its words: a large general corpus), and never rises past the score below which
ANSWERABLE_ABSTAIN of the answerable sample would abstain.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING

import numpy as np

from funnel.analyze import has_cjk
from funnel.calibrate.queries import generated
from funnel.generate.abstain import DEFAULT_THRESHOLD, measure
from funnel.rerank.policies import RerankPolicy

if TYPE_CHECKING:
    from funnel.search import Searcher

FOREIGN_ABSTAIN = 0.8  # the share of foreign questions the threshold aims to abstain on
ANSWERABLE_ABSTAIN = 0.03  # ... and the most of the answerable sample it may abstain on
ANSWERABLE_QUERIES = 40
Progress = Callable[[int, int], None]


@cache
def foreign_questions() -> tuple[str, ...]:
    text = resources.files("funnel.calibrate").joinpath("foreign_questions.txt").read_text(encoding="utf-8")
    return tuple(line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#"))


def _scores(pipeline: Searcher, questions: list[str], progress: Progress | None) -> list[float]:
    """Each question's evidence; `progress(done, total)` after each (it may raise to stop the calibration)."""
    scores = []
    for done, question in enumerate(questions, start=1):
        result = pipeline.search(question, policy=RerankPolicy.NONE)
        scores.append(measure(question, result, pipeline.store).score)
        if progress:
            progress(done, len(questions))
    return scores


def _answerable(pipeline: Searcher, seed: int) -> tuple[list[str], bool]:
    """Sentences of chunks sampled across the index, as the calibration samples them, and whether any chunk
    sampled is in Hangul, Han or Kana."""
    queries, sources = generated(pipeline.store, ANSWERABLE_QUERIES, seed, ("sentence",))
    return [q.text for q in queries], any(has_cjk(chunk.text) for chunk in sources.values())


def asked(questions: tuple[str, ...], cjk_index: bool) -> list[str]:
    """The foreign questions worth asking this index: on one with no Hangul, Han or Kana, a question in those
    scripts shares no term with any chunk (its evidence is nil, it abstains whatever the threshold), and
    analysing it would load the Korean analyzer (~600 MB) into a process that never reads Korean."""
    return list(questions) if cjk_index else [q for q in questions if not has_cjk(q)]


def abstention_threshold(pipeline: Searcher, seed: int = 0, progress: Progress | None = None) -> dict:
    """The calibration's abstention fields: the threshold, why, and what it abstains on in both samples."""
    own, cjk_index = _answerable(pipeline, seed)
    foreign = _scores(pipeline, asked(foreign_questions(), cjk_index), progress)
    answerable = _scores(pipeline, own, progress)
    wanted = float(np.quantile(foreign, FOREIGN_ABSTAIN)) + 0.01
    threshold, reason = DEFAULT_THRESHOLD, "the default"
    if wanted > threshold:
        threshold, reason = wanted, f"raised so that {FOREIGN_ABSTAIN:.0%} of questions about other matters abstain"
    if answerable:
        cap = float(np.quantile(answerable, ANSWERABLE_ABSTAIN))
        if cap < threshold:
            threshold, reason = cap, (f"lowered so that at most {ANSWERABLE_ABSTAIN:.0%} of sentences of this "
                                      "index's own documents would abstain")
    return dict(
        abstain_threshold=round(threshold, 4),
        abstain_reason=reason,
        abstain_measured={
            "foreign_questions": len(foreign),
            "foreign_abstained": float(np.mean([s < threshold for s in foreign])),
            "answerable_queries": len(answerable),
            "answerable_abstained": float(np.mean([s < threshold for s in answerable])) if answerable else 0.0,
        },
    )
