"""Leave-one-domain-out: a reranker trained without a domain, on that domain's test queries.

    .venv-train/bin/python tools/train_reranker.py --leave-out cosqa --work W --out M   # train without CoSQA
    python bench/lodo.py --set cosqa --model onnx:M --model builtin                     # then measure it

For each model: `funnel eval --split test` with every second-stage option side by side (the first stage is
the same for all), nDCG@10 with the difference from hybrid and the paired p. Nothing is tuned here.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

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
    for name in args.sets:
        for model in args.models:
            results = run(name, model, args.out, args.limit, args.budget)
            cells = " | ".join(cell(results, v) for v in OPTIONS.values())
            print(f"| {name} | {model} | {cells} | {results['seconds']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
