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

from funnel.calibrate.queries import generated
from funnel.generate.abstain import DEFAULT_THRESHOLD, measure
from funnel.rerank.policies import RerankPolicy

if TYPE_CHECKING:
    from funnel.pipeline import Pipeline

FOREIGN_ABSTAIN = 0.8  # the share of foreign questions the threshold aims to abstain on
ANSWERABLE_ABSTAIN = 0.03  # ... and the most of the answerable sample it may abstain on
ANSWERABLE_QUERIES = 40
Progress = Callable[[int, int], None]


@cache
def foreign_questions() -> tuple[str, ...]:
    text = resources.files("funnel.calibrate").joinpath("foreign_questions.txt").read_text(encoding="utf-8")
    return tuple(line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#"))


def _scores(pipeline: Pipeline, questions: list[str], progress: Progress | None) -> list[float]:
    """Each question's evidence; `progress(done, total)` after each (it may raise to stop the calibration)."""
    scores = []
    for done, question in enumerate(questions, start=1):
        result = pipeline.search(question, policy=RerankPolicy.NONE)
        scores.append(measure(question, result, pipeline.store).score)
        if progress:
            progress(done, len(questions))
    return scores


def _answerable(pipeline: Pipeline, seed: int) -> list[str]:
    """Sentences of chunks sampled across the index, as the calibration samples them."""
    queries, _ = generated(pipeline.store, ANSWERABLE_QUERIES, seed, ("sentence",))
    return [q.text for q in queries]


def abstention_threshold(pipeline: Pipeline, seed: int = 0, progress: Progress | None = None) -> dict:
    """The calibration's abstention fields: the threshold, why, and what it abstains on in both samples."""
    foreign = _scores(pipeline, list(foreign_questions()), progress)
    answerable = _scores(pipeline, _answerable(pipeline, seed), progress)
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
