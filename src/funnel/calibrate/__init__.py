"""Per-index calibration: does the second stage help on *this* corpus, and how much say should it get?

A reranker trained on a few domains can hurt on others (measured: five unseen collections, all worse under
`replace`). So before the reranker reorders anything, funnel measures it on the corpus itself, with queries
made from the documents and no human judgments:

1. Make test queries from sampled chunks (`queries.py`): a title or section heading (answer: the text under
   it), or one sentence (answer: the rest of its passage and the chunks beside it; the inverse cloze task).
   The query is taken out of its answer, so neither retriever can win by matching it verbatim.
2. Copy what competes for those queries in the real index (each query's BM25 and dense top-n, with their
   stored vectors) plus the edited answers into a small temporary embedded index (`small_copy.py`), and run
   the pipeline's own first stage on it (`measure.py`: `Searcher.over(copy)`, `plan`, `retrieve`,
   `first_stage`; BM25 + dense + RRF, same window and per-document cap).
3. Score each window with the reranker once (`Searcher.second_stage`, its checks of the scores); apply every
   option (`options.py`: first-stage order, rrf with reranker weights 0.25/0.5/1/2, guaranteed slots,
   replace) and take the reciprocal rank of the answer.
4. Adopt the best option only if it beats the first-stage order by MIN_GAIN with a paired randomization test
   p < MAX_P (`decide.py`). The test knows the option was the best of six: each round flips the same
   queries' signs for every option and keeps the largest standardised change (max-T), so picking the
   luckiest of six is not mistaken for a real gain.
5. Otherwise the reranker reorders only the queries it is sure of (GATED: rrf:1, when its best score leads
   its second by 0.2), unless that too is shown to hurt here (a drop of MIN_GAIN with p < MAX_P) or never
   moved an answer; then the first-stage order is kept and the reranker is not run at all.

Queries made from the documents are a different relation from what people ask (a reranker trained on real
questions can look worse on them than it is), so a user who has real queries with known answers can
calibrate on those instead (`funnel calibrate --judged FILE`, `judged.py`): the same options and rule, on
the real index itself (nothing is taken out of the answers). They are stored with the calibration, so the
recalibration after an ingest measures them again.

The result (`record.py`) is stored with the index (`Store.write_calibration`) and read by the search
(`funnel.search`) under the `auto` policy. It names the reranker and embedder it was measured with, so a
different model is noticed. `run.py` ties the steps together; the caller hands it the searcher: a
`Pipeline`, which imports this package (nothing here imports the pipeline, and `funnel.search`, which reads
`record.py`, only for its types).
"""

from funnel.calibrate.decide import MAX_P, MIN_GAIN
from funnel.calibrate.judged import MAX_JUDGED, Judged, judged_queries, parse_judged, read_judged
from funnel.calibrate.measure import RR_DEPTH
from funnel.calibrate.options import (
    FIRST_STAGE, FIRST_STAGES, GATED, HYBRID, MEASURED, OPTIONS, FirstStageOption, Option,
)
from funnel.calibrate.queries import (
    DEFAULT_QUERIES, FIRST_STAGE_QUERIES, MAKERS, MIN_QUERIES, PseudoQuery, half_query, sentence_query,
    title_query,
)
from funnel.calibrate.record import FORMAT, GENERATED, JUDGED, Calibration
from funnel.calibrate.run import calibrate

__all__ = [
    "DEFAULT_QUERIES", "FIRST_STAGE", "FIRST_STAGE_QUERIES", "FIRST_STAGES", "FORMAT", "GATED", "GENERATED",
    "HYBRID", "JUDGED", "MAKERS", "MAX_JUDGED", "MAX_P", "MEASURED", "MIN_GAIN", "MIN_QUERIES", "OPTIONS",
    "RR_DEPTH", "Calibration", "FirstStageOption", "Judged", "Option", "PseudoQuery", "calibrate",
    "half_query", "judged_queries", "parse_judged", "read_judged", "sentence_query", "title_query",
]
