"""Does the per-index calibration choose what the real test queries would have chosen?

For each judged collection: `funnel eval --split test` with every second-stage option side by side plus the
`default` variant (exactly what `funnel search` returns; the eval calibrates its index first, from queries
made from the documents, never from the judged ones). Then prints, per collection:

- the option the calibration chose (and its p-value), and the option the real test queries favour;
- nDCG@10 of hybrid, of every option, of `default`, and default - hybrid (the issue's bar: >= -0.005);
- whether the choice was right in the sense that matters: default is not significantly below hybrid, and
  how much of the best option's gain it kept.

    python bench/calibration_validation.py                     # shared sets + bench/data collections
    python bench/calibration_validation.py --sets scifact cacm --limit 50

Indexes are cached by `funnel eval` (FUNNEL_EVAL__CACHE, default ~/.cache/funnel/eval); a calibration already
stored with a cached index is reused (delete funnel_calibration.json there to measure it again).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "datasets"
SETS = {
    "scifact": SHARED / "scifact", "tatqa": SHARED / "tatqa", "cosqa": SHARED / "cosqa",
    "cacm": ROOT / "bench/data/cacm", "lisa": ROOT / "bench/data/lisa", "time": ROOT / "bench/data/time",
    "adi": ROOT / "bench/data/adi",
}
IN_TRAINING = {"scifact", "tatqa", "cosqa"}  # the built-in reranker was trained on their train/dev splits
OPTIONS = {  # calibration option -> eval variant
    "first_stage": "hybrid",
    "rrf:0.25": "hybrid+rerank(rrf:0.25)",
    "rrf:0.5": "hybrid+rerank(rrf:0.5)",
    "rrf:1": "hybrid+rerank(rrf)",
    "rrf:2": "hybrid+rerank(rrf:2)",
    "guaranteed_slots": "hybrid+rerank(guaranteed_slots)",
    "replace": "hybrid+rerank(replace)",
    "rrf:1|gate:0.2": "hybrid+rerank(rrf:1|gate:0.2)",  # calibrate.GATED: when no option is shown to help
}


def run_set(name: str, path: Path, out: Path, limit: int | None, reranker: str,
            variants: list[str] | None = None, budget: str | None = None) -> dict:
    """`funnel eval` of the set's test split (every option plus `default` unless `variants`), in out/name;
    `budget` "DEPTH/TOKENS" sets the rerank depth and pair length (unset: the product's defaults)."""
    variants = ",".join(variants or [*OPTIONS.values(), "default"])
    cmd = [sys.executable, "-c", "from funnel.apps.cli import run; run()", "eval", "--dataset", str(path), "--split", "test",
           "--variants", variants, "--out", str(out / name), "--reranker", reranker]
    if limit:
        cmd += ["--limit", str(limit)]
    started = time.perf_counter()
    env = dict(os.environ)
    if budget:
        depth, tokens = budget.split("/")
        env.update(FUNNEL_RERANK_DEPTH=depth, FUNNEL_RERANK_MAX_TOKENS=tokens)
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    if done.returncode != 0:
        raise SystemExit(f"{name}: funnel eval failed: {done.stderr.strip().splitlines()[-1:]}")
    results = json.loads((out / name / "results.json").read_text())
    results["seconds"] = time.perf_counter() - started
    results["stderr"] = done.stderr
    return results


def p_note(p: float | None) -> str:
    """" (p=0.012)", or nothing when there is no p."""
    return f" (p={p:.3f})" if p is not None else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", nargs="*", default=list(SETS))
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--reranker", default="builtin")
    parser.add_argument("--out", type=Path, default=Path("eval-out/calibration"))
    args = parser.parse_args()
    rows = []
    for name in args.sets:
        results = run_set(name, SETS[name], args.out, args.limit, args.reranker)
        ndcg = {option: results["variants"][variant]["ndcg@10"] for option, variant in OPTIONS.items()}
        default = results["variants"]["default"]["ndcg@10"]
        comparison = results["comparisons"].get("default", {})
        calibration = results.get("calibration", {})
        best = max(ndcg, key=ndcg.get)
        rows.append({
            "set": name, "in_training": name in IN_TRAINING, "queries": results["queries"],
            "chosen": calibration.get("option", "?"), "p": calibration.get("p_value"),
            "calibration_queries": calibration.get("queries"), "real_best": best, "ndcg": ndcg,
            "default": default, "delta": default - ndcg["first_stage"],
            "p_default": comparison.get("p_randomization"), "seconds": results["seconds"],
        })
        print(json.dumps(rows[-1]), flush=True)
    print()
    print("| set | reranker trained on it | test queries | chosen from generated queries (p) | best on real test "
          "queries | hybrid | best option | default | default - hybrid (p) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['set']} | {'yes' if r['in_training'] else 'no'} | {r['queries']} | {r['chosen']}{p_note(r['p'])} | "
              f"{r['real_best']} | {r['ndcg']['first_stage']:.4f} | {r['ndcg'][r['real_best']]:.4f} | "
              f"{r['default']:.4f} | {r['delta']:+.4f}{p_note(r['p_default'])} |")


if __name__ == "__main__":
    main()
