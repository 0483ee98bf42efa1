"""Variant vs baseline, query by query: who was helped, who was hurt, and is the difference real.

Significance is a paired randomisation test (scipy.stats.permutation_test, sign flips of per-query
differences) on the headline metric, with the paired t-test beside it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from funnel.eval.metrics import first_relevant_rank


@dataclass(frozen=True)
class QueryChange:
    qid: str
    query: str
    before: float
    after: float
    rank_before: int | None  # rank of the first relevant unit (None: not in the ranking)
    rank_after: int | None


@dataclass(frozen=True)
class Comparison:
    variant: str
    baseline: str
    metric: str
    baseline_mean: float
    variant_mean: float
    p_randomization: float
    p_ttest: float
    helped: tuple[QueryChange, ...]  # biggest gain first
    hurt: tuple[QueryChange, ...]  # biggest loss first
    answers_fixed: tuple[str, ...] = ()  # question ids whose answer check now passes
    answers_broken: tuple[str, ...] = ()  # ... and now fails

    @property
    def delta(self) -> float:
        return self.variant_mean - self.baseline_mean


def paired_p_values(a: list[float], b: list[float], resamples: int = 10_000) -> tuple[float, float]:
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(x) < 2 or np.allclose(x, y):
        return 1.0, 1.0
    randomization = stats.permutation_test(
        (x, y),
        lambda u, v: np.mean(u - v),
        permutation_type="samples",
        n_resamples=resamples,
        alternative="two-sided",
        random_state=0,
    ).pvalue
    ttest = stats.ttest_rel(x, y).pvalue
    return float(randomization), float(0.0 if np.isnan(ttest) else ttest)


def compare(
    variant: str,
    baseline: str,
    metric: str,
    values: dict[str, dict[str, dict[str, float]]],  # variant -> metric -> qid -> value
    rankings: dict[str, dict[str, list[str]]],  # variant -> qid -> ranking
    qrels: dict[str, dict[str, int]],
    queries: dict[str, str],
    passed: dict[str, dict[str, bool]],
) -> Comparison:
    before, after = values[baseline][metric], values[variant][metric]
    qids = sorted(before)
    changes = [
        QueryChange(
            q, queries[q], before[q], after[q],
            first_relevant_rank(qrels[q], rankings[baseline].get(q, [])),
            first_relevant_rank(qrels[q], rankings[variant].get(q, [])),
        )
        for q in qids
        if not np.isclose(before[q], after[q])
    ]
    p_rand, p_t = paired_p_values([after[q] for q in qids], [before[q] for q in qids])
    base_pass, var_pass = passed.get(baseline, {}), passed.get(variant, {})
    return Comparison(
        variant=variant,
        baseline=baseline,
        metric=metric,
        baseline_mean=float(np.mean([before[q] for q in qids])) if qids else 0.0,
        variant_mean=float(np.mean([after[q] for q in qids])) if qids else 0.0,
        p_randomization=p_rand,
        p_ttest=p_t,
        helped=tuple(sorted((c for c in changes if c.after > c.before), key=lambda c: c.before - c.after)),
        hurt=tuple(sorted((c for c in changes if c.after < c.before), key=lambda c: c.after - c.before)),
        answers_fixed=tuple(q for q in var_pass if var_pass[q] and not base_pass.get(q, False)),
        answers_broken=tuple(q for q in var_pass if not var_pass[q] and base_pass.get(q, False)),
    )
