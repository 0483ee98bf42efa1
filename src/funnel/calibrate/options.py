"""What a calibration chooses between: the second stage's options (how the reranker's order and the first
stage's combine) and the first stage's (how BM25 and dense are weighted in its RRF)."""

from __future__ import annotations

from dataclasses import dataclass

from funnel.rerank.policies import PolicyChoice, RerankPolicy


# A second-stage option is a `PolicyChoice`, named by its label, the same string settings, eval variants
# (`hybrid+rerank(rrf:0.5)`) and results (`auto: rrf:1|gate:0.2`) use.
Option = PolicyChoice
FIRST_STAGE = PolicyChoice(RerankPolicy.NONE)  # label "first_stage"
OPTIONS = tuple(PolicyChoice.parse(label) for label in (
    "first_stage", "rrf:0.25", "rrf:0.5", "rrf:1", "rrf:2", "guaranteed_slots", "replace"))
# When no option is shown to help, the reranker still reorders the queries it is sure of: rrf with weight 1,
# gated on a 0.2 lead of its best score over its second (chosen on dev splits with a reranker that never saw
# them; on seven test sets it was never below the first stage by more than 0.004 nDCG@10, BENCHMARKS.md "A
# gate on the score gap"). It is kept unless the corpus shows that it hurts.
GATED = PolicyChoice.parse("rrf:1|gate:0.2")
MEASURED = (*OPTIONS, GATED)


@dataclass(frozen=True)
class FirstStageOption:
    """One weighting of BM25 and dense in the first stage's RRF (0: that retriever is not used)."""

    name: str
    bm25_weight: float
    dense_weight: float


# The fixed 1:1 fusion loses where one retriever is blind (an English embedder on Korean: dense 0.39 against
# BM25 0.97 on klue-nli-ko) or weak (BM25 on code, CoSQA): the calibration measures the alternatives too.
HYBRID = FirstStageOption("hybrid", 1.0, 1.0)
FIRST_STAGES = (
    HYBRID,
    FirstStageOption("bm25", 1.0, 0.0),
    FirstStageOption("dense", 0.0, 1.0),
    FirstStageOption("hybrid:bm25x2", 2.0, 1.0),
    FirstStageOption("hybrid:densex2", 1.0, 2.0),
)
