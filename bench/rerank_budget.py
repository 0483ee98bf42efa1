"""How much reranking does quality need? Rerank depth and pair length against nDCG@10 and rerank time.

The reranker's cost is (pairs scored) x (tokens per pair). Two settings cut it: `rerank_depth` (the window's
top chunks the reranker scores; the rest keep first-stage order below them) and `rerank_max_tokens` (the
longest pair; the passage is cut). For each set and each DEPTH/TOKENS budget this runs `funnel eval --split
test` with every second-stage option, and prints nDCG@10 per option, the change against the first budget
(the baseline, by default today's 25/256) with the paired randomisation p, and the eval's rerank p50.

    python bench/rerank_budget.py --sets cacm lisa --budgets 25/256 15/192 10/256

The budgets' evals run one after another, so their rerank times are side by side; the first stage and the judged
queries are the same for every budget (the eval's cached index), so a quality change is the budget's alone.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calibration_validation import OPTIONS, SETS, run_set  # noqa: E402

from funnel.eval.compare import paired_p_values  # noqa: E402

METRIC = "ndcg@10"


def run(name: str, budget: str, out: Path, limit: int | None) -> dict:
    return run_set(name, SETS[name], out / budget.replace("/", "-"), limit, "builtin",
                   variants=list(OPTIONS.values()), budget=budget)


def cell(results: dict, base: dict, variant: str) -> str:
    score = results["variants"][variant][METRIC]
    if results is base:
        return f"{score:.4f}"
    a, b = (r["per_query"][variant] for r in (base, results))
    qids = sorted(a)
    _, p = paired_p_values([a[q][METRIC] for q in qids], [b[q][METRIC] for q in qids])
    return f"{score:.4f} ({score - base['variants'][variant][METRIC]:+.4f}, p={p:.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", nargs="*", default=list(SETS))
    parser.add_argument("--budgets", nargs="*", default=["25/256", "15/192", "10/256"],
                        help="DEPTH/TOKENS; the first is the baseline")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--out", type=Path, default=Path("eval-out/rerank-budget"))
    args = parser.parse_args()
    variants = [v for v in OPTIONS.values() if v != "hybrid"]
    print(f"| set | depth/tokens | hybrid | {' | '.join(o for o in OPTIONS if o != 'first_stage')} | rerank p50 ms |")
    print("|---|---|---|" + "---|" * (len(variants) + 1))
    for name in args.sets:
        base = None
        for budget in args.budgets:
            results = run(name, budget, args.out, args.limit)
            base = base or results
            cells = " | ".join(cell(results, base, v) for v in variants)
            rerank_ms = results["latency_ms"]["rerank"]["p50"]
            print(f"| {name} | {budget} | {results['variants']['hybrid'][METRIC]:.4f} | {cells} | {rerank_ms:.0f} |",
                  flush=True)


if __name__ == "__main__":
    main()
