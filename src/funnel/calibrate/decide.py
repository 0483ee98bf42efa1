"""Deciding from the measurements: an option is adopted only when it beats the safe choice by MIN_GAIN with
a paired randomization test p < MAX_P. The test knows the option was the best of several: each round flips
the same queries' signs for every option and keeps the largest standardised change (max-T), so picking the
luckiest of six is not mistaken for a real gain."""

from __future__ import annotations

import time

import numpy as np

from funnel.calibrate.options import (
    FIRST_STAGE, FIRST_STAGES, GATED, HYBRID, OPTIONS, FirstStageOption, Option,
)
from funnel.calibrate.queries import PseudoQuery
from funnel.calibrate.record import Calibration
from funnel.rerank.policies import RerankPolicy

MIN_GAIN = 0.005  # MRR@10 the reranker must add before it is trusted
MAX_P = 0.05  # ... with this paired-test significance


def best_of_p(diffs: np.ndarray, best: int, rounds: int = 5000, seed: int = 0) -> float:
    """Two-sided paired randomization (sign-flip) p of column `best`'s mean change, where `diffs` holds one
    column per option (queries x options, each option's reciprocal rank minus the first stage's) and `best`
    was chosen for having the largest mean. Every round flips the same queries' signs in all columns and
    keeps the largest standardised |mean| of any column (max-T), so the p holds for the choice; each column
    is scaled by its root mean square (which a sign flip does not change), so an option that moves ranks a
    lot (replace) does not drown out one that moves them a little. With one column this is the plain paired
    test."""
    scale = np.sqrt((diffs**2).mean(axis=0))
    if scale[best] == 0.0 or diffs[:, best].mean() == 0.0:
        return 1.0
    columns = diffs[:, scale > 0] / scale[scale > 0]
    observed = abs(float(diffs[:, best].mean() / scale[best]))
    rng = np.random.default_rng(seed)
    at_least = 0
    for start in range(0, rounds, 500):  # blocks, so thousands of judged queries stay a few MB
        signs = rng.choice((-1.0, 1.0), size=(min(500, rounds - start), diffs.shape[0]))
        at_least += int(np.sum(np.abs(signs @ columns / diffs.shape[0]).max(axis=1) >= observed - 1e-12))
    return float((at_least + 1) / (rounds + 1))


def choose_first_stage(
    rr: dict[str, list[float]], described: str
) -> tuple[FirstStageOption, str, float | None]:
    """The first stage adopted: an option other than the 1:1 hybrid only when it beats it by MIN_GAIN with
    p < MAX_P under the same max-T paired test as the second stage's options."""
    mrr = {name: float(np.mean(values)) for name, values in rr.items()}
    base = mrr[HYBRID.name]
    best = max(FIRST_STAGES, key=lambda o: (round(mrr[o.name], 6), o is HYBRID))
    if best is HYBRID:
        return HYBRID, f"no weighting beat the 1:1 hybrid's MRR@10 {base:.3f} on {described}", None
    others = [o for o in FIRST_STAGES if o is not HYBRID]
    diffs = np.stack([np.asarray(rr[o.name]) - np.asarray(rr[HYBRID.name]) for o in others], axis=1)
    p = best_of_p(diffs, others.index(best))
    measured = f"{best.name} {mrr[best.name]:.3f} vs hybrid {base:.3f} MRR@10 on {described}, p={p:.3f}"
    if mrr[best.name] - base >= MIN_GAIN and p < MAX_P:
        return best, measured, p
    return HYBRID, f"1:1 hybrid kept (best: {measured})", p


def decide(
    rr: dict[str, list[float]], queries: list[PseudoQuery], window_recall: float, described: str,
    started: float, made: dict,
) -> Calibration:
    """The second stage's calibration from each option's reciprocal ranks (`choose`), with the
    measurements."""
    mrr = {name: float(np.mean(values)) for name, values in rr.items()}
    kinds_of = [q.kind for q in queries]
    mrr_by_kind = {
        kind: {name: float(np.mean([v for v, k in zip(values, kinds_of) if k == kind]))
               for name, values in rr.items()}
        for kind in sorted(set(kinds_of))
    }
    chosen, reason, p = choose(rr, mrr, described)
    return Calibration(
        chosen.kind, _weight(chosen), reason, gate=chosen.gate or 0.0, queries=len(queries), mrr=mrr,
        mrr_by_kind=mrr_by_kind, window_recall=window_recall, p_value=p,
        seconds=time.perf_counter() - started, **made,
    )


def _weight(chosen: Option) -> float:
    """The reranker's weight a calibration records: its own under rrf, 1 for the other reranking options, 0
    for the first-stage order."""
    if chosen.kind is RerankPolicy.NONE:
        return 0.0
    return 1.0 if chosen.weight is None else chosen.weight


def choose(
    rr: dict[str, list[float]], mrr: dict[str, float], described: str
) -> tuple[Option, str, float | None]:
    """The option adopted, why (`described`: the queries, e.g. "120 test queries made from this corpus"), and
    the paired test's p (None when the first stage was best). When no option is shown to help, GATED, unless
    it never moved an answer or is shown to hurt: then the first-stage order."""
    first = mrr[FIRST_STAGE.label]
    best = max(OPTIONS, key=lambda o: (round(mrr[o.label], 6), o is FIRST_STAGE))
    others = [o for o in OPTIONS if o is not FIRST_STAGE]
    diffs = np.stack([np.asarray(rr[o.label]) - np.asarray(rr[FIRST_STAGE.label]) for o in others], axis=1)
    p = best_of_p(diffs, others.index(best)) if best is not FIRST_STAGE else None
    if best is not FIRST_STAGE and mrr[best.label] - first >= MIN_GAIN and p is not None and p < MAX_P:
        return best, (f"{best.label} raised MRR@10 on {described} from "
                      f"{first:.3f} to {mrr[best.label]:.3f} (p={p:.3f})"), p
    if best is FIRST_STAGE:
        measured = f"no option beat the first-stage order's MRR@10 {first:.3f}"
    else:
        measured = f"best: {best.label} {mrr[best.label]:.3f} vs first stage {first:.3f}, p={p:.3f}"
    gated = mrr[GATED.label]
    change = np.asarray(rr[GATED.label]) - np.asarray(rr[FIRST_STAGE.label])
    if not change.any():  # never sure enough to move an answer: running it would cost time for nothing
        return FIRST_STAGE, (f"the reranker did not help on {described} ({measured}) and was never sure "
                             f"enough to move an answer under {GATED.label}; the first-stage order is kept"), p
    hurt = best_of_p(change[:, None], 0)
    if first - gated >= MIN_GAIN and hurt < MAX_P:
        return FIRST_STAGE, (f"the reranker did not help on {described} ({measured}), and even where it was "
                             f"sure it hurt ({GATED.label}: {gated:.3f}, p={hurt:.3f}); the first-stage order "
                             "is kept"), p
    return GATED, (f"the reranker did not help on {described} ({measured}); it reorders only the queries "
                   f"where it is sure of one candidate ({GATED.label}: MRR@10 {gated:.3f}, not shown to "
                   "hurt)"), p
