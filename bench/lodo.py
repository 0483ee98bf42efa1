"""Leave-one-domain-out: a reranker trained without a domain, on that domain's test queries.

    .venv-train/bin/python tools/train_reranker.py --leave-out cosqa --work W --out M   # train without CoSQA
    python bench/lodo.py --set cosqa --model onnx:M --model builtin                     # then measure it

For each model: `funnel eval --split test` with every second-stage option side by side (the first stage is
the same for all), nDCG@10 with the difference from hybrid and the paired p. Nothing is tuned here.

With more than one set, a last row per model pools their queries (each query one pair, so a large set weighs
more): one paired test over all of them, where a 35-query collection alone can show only large changes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from funnel.eval.compare import paired_p_values

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calibration_validation import OPTIONS, SETS, run_set  # noqa: E402


def run(name: str, model: str, out: Path, limit: int | None, budget: str | None) -> dict:
    return run_set(name, SETS[name], out / model.replace(":", "_").replace("/", "_"), limit, model,
                   variants=list(OPTIONS.values()), budget=budget)


def cell(results: dict, variant: str) -> str:
    score = results["variants"][variant]["ndcg@10"]
    c = results["comparisons"].get(variant)
    if c is None:  # the baseline, hybrid
        return f"{score:.4f}"
    return f"{score:.4f} ({c['delta']:+.3f}, p={c['p_randomization']:.3f})"


def pooled(runs: list[dict]) -> str:
    """The cells of one row over every query of `runs`: mean nDCG@10 and its paired change from hybrid."""
    def values(variant: str) -> list[float]:
        return [q["ndcg@10"] for r in runs for _, q in sorted(r["per_query"][variant].items())]

    hybrid = values(OPTIONS["first_stage"])
    cells = [f"{sum(hybrid) / len(hybrid):.4f}"]
    for variant in list(OPTIONS.values())[1:]:
        scores = values(variant)
        p, _ = paired_p_values(scores, hybrid)
        mean = sum(scores) / len(scores)
        cells.append(f"{mean:.4f} ({mean - sum(hybrid) / len(hybrid):+.3f}, p={p:.3f})")
    return " | ".join(cells)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", dest="sets", action="append", required=True, choices=list(SETS))
    parser.add_argument("--model", dest="models", action="append", required=True,
                        help="a reranker spec: builtin, onnx:DIR (repeatable)")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--out", type=Path, default=Path("eval-out/lodo"))
    parser.add_argument("--budget", default=None,
                        help="rerank DEPTH/TOKENS (default: the product's); the 2026-12-02 table used 25/256")
    args = parser.parse_args()
    print(f"| set | reranker | {' | '.join(OPTIONS)} | eval s |")
    print("|---|---|" + "---|" * (len(OPTIONS) + 1))
    runs: dict[str, list[dict]] = {model: [] for model in args.models}
    for name in args.sets:
        for model in args.models:
            results = run(name, model, args.out, args.limit, args.budget)
            runs[model].append(results)
            cells = " | ".join(cell(results, v) for v in OPTIONS.values())
            print(f"| {name} | {model} | {cells} | {results['seconds']:.0f} |", flush=True)
    if len(args.sets) > 1:
        for model, done in runs.items():
            seconds = sum(r["seconds"] for r in done)
            print(f"| pooled: {'+'.join(args.sets)} ({sum(r['queries'] for r in done)} queries) | {model} | "
                  f"{pooled(done)} | {seconds:.0f} |")


if __name__ == "__main__":
    main()
