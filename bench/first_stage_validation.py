"""Does the per-index calibration choose the first stage that the real test queries would have chosen?

The calibration (`funnel.calibrate`, run by `funnel eval` when the `default` variant is asked for) now also
picks the FIRST stage's fusion among FIRST_STAGES (1:1 hybrid, bm25 alone, dense alone, hybrid:bm25x2,
hybrid:densex2) from queries made from the documents, with a max-T paired test against the 1:1 hybrid, and
`funnel search` (the eval's `default` variant) runs that first stage, then the second stage it chose.

For each judged collection, with a fresh index under --work (default /tmp/fsv/NAME/index):
`funnel eval --split test --variants bm25,dense,hybrid,default`. Then prints, per collection:

- the first stage the calibration chose (and its p-value, from `first_stage_reason`), and the second-stage
  option it chose;
- the best of {hybrid, bm25, dense} on the real test queries;
- nDCG@10 of bm25, dense, hybrid and default; default - hybrid and default - best; "before": `default`
  before this change (BENCHMARKS.md);
- whether the choice was right: default is not below hybrid by more than 0.005 AND keeps most (>= half) of
  the best first stage's gain over hybrid (when there is no gain, the first condition alone decides).

Note `default` includes the second stage (the reranker, as calibrated), so default - best mixes the first
stage's choice with what the second stage added.

    python bench/first_stage_validation.py                      # every set, small to large
    python bench/first_stage_validation.py --sets adi cacm --limit 50

Writes bench/results/first_stage_validation.json (rows, with wall time per set and the calibration record).
A set whose `funnel eval` fails is reported with its error and the other sets still run.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "datasets"
# small to large (corpus bytes; TAT-QA and SciFact also have the most test queries / longest calibration)
SETS = {
    "adi": ROOT / "bench/data/adi", "klue-nli-ko": SHARED / "klue-nli-ko", "cacm": ROOT / "bench/data/cacm",
    "time": ROOT / "bench/data/time", "tatqa": SHARED / "tatqa", "cosqa": SHARED / "cosqa",
    "lisa": ROOT / "bench/data/lisa", "scifact": SHARED / "scifact",
}
BEFORE = {  # nDCG@10 of `default` before the first stage was calibrated (BENCHMARKS.md)
    "scifact": 0.7101, "tatqa": 0.5680, "cosqa": 0.5105, "cacm": 0.5427, "lisa": 0.4498, "time": 0.7676,
    "adi": 0.5116, "klue-nli-ko": 0.795,
}
FIRST_STAGES = ("hybrid", "bm25", "dense")  # the eval variants among the calibration's first-stage options
VARIANTS = [*FIRST_STAGES, "default"]
TOLERANCE = 0.005  # default may be below hybrid by at most this much
KEEP = 0.5  # ... and keep at least this share of the best first stage's gain over hybrid
_P = re.compile(r"p([=<])([0-9.]+)")


def funnel_command() -> list[str]:
    cli = ROOT / ".venv" / "bin" / "funnel"
    return [str(cli)] if cli.exists() else [sys.executable, "-c", "from funnel.apps.cli import run; run()"]


def run_set(name: str, path: Path, work: Path, limit: int | None, reranker: str | None) -> dict:
    """`funnel eval` of the set's test split on a fresh index in work/name/index; results.json plus wall
    time, the calibration stored with the index, and the eval's output (or the error, when it failed)."""
    out = work / name
    shutil.rmtree(out, ignore_errors=True)  # a fresh index: the calibration is measured again
    out.mkdir(parents=True)
    cmd = [*funnel_command(), "eval", "--dataset", str(path), "--split", "test", "--variants", ",".join(VARIANTS),
           "--out", str(out), "--index", str(out / "index")]
    if reranker:
        cmd += ["--reranker", reranker]
    if limit:
        cmd += ["--limit", str(limit)]
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    seconds = time.perf_counter() - started
    (out / "eval.stdout").write_text(done.stdout)
    (out / "eval.stderr").write_text(done.stderr)
    if done.returncode != 0:
        return {"error": f"funnel eval exited {done.returncode}", "stderr": done.stderr[-6000:],
                "stdout": done.stdout[-2000:], "seconds": seconds, "command": " ".join(cmd)}
    results = json.loads((out / "results.json").read_text())
    stored = out / "index" / "funnel_calibration.json"
    calibration = json.loads(stored.read_text()) if stored.exists() else results.get("calibration", {})
    return {"results": results, "calibration": calibration, "calibration_file": stored.exists(),
            "seconds": seconds, "stdout": done.stdout, "command": " ".join(cmd)}


def p_of(reason: str) -> str | None:
    """"0.012" or "<0.001" from a reason saying p=0.012 / p<0.001; None when it says no p."""
    match = _P.search(reason or "")
    if not match:
        return None
    return match[2] if match[1] == "=" else "<" + match[2]


def row_of(name: str, run: dict) -> dict:
    if "error" in run:
        return {"set": name, "error": run["error"], "stderr_tail": run["stderr"], "seconds": run["seconds"],
                "before": BEFORE.get(name)}
    results, calibration = run["results"], run["calibration"]
    ndcg = {v: results["variants"][v]["ndcg@10"] for v in VARIANTS}
    best = max(FIRST_STAGES, key=lambda v: (ndcg[v], v == "hybrid"))
    gain = ndcg[best] - ndcg["hybrid"]
    delta_hybrid, delta_best = ndcg["default"] - ndcg["hybrid"], ndcg["default"] - ndcg[best]
    kept = delta_hybrid / gain if gain > 0 else None
    right = delta_hybrid >= -TOLERANCE and (kept is None or kept >= KEEP)
    comparison = results.get("comparisons", {}).get("default", {})
    reason = calibration.get("first_stage_reason", "")
    return {
        "set": name, "queries": results["queries"], "level": results.get("level"),
        "chosen_first_stage": calibration.get("first_stage", "?"), "p_first_stage": p_of(reason),
        "first_stage_reason": reason, "first_stage_mrr": calibration.get("first_stage_mrr", {}),
        "second_stage": calibration.get("option") or _option(calibration), "second_stage_reason":
        calibration.get("reason"), "calibration_queries": calibration.get("queries"),
        "calibration_seconds": calibration.get("seconds"), "calibration_from_index_file": run["calibration_file"],
        "real_best": best, "ndcg": ndcg, "before": BEFORE.get(name), "default_minus_hybrid": delta_hybrid,
        "default_minus_best": delta_best, "default_minus_before": (ndcg["default"] - BEFORE[name])
        if name in BEFORE else None, "gain_kept": kept, "right": right,
        "p_default_vs_hybrid": comparison.get("p_randomization"), "seconds": run["seconds"],
    }


def _option(calibration: dict) -> str:
    """The second stage's option from the stored keys (funnel_calibration.json has no `option`)."""
    policy, weight, gate = calibration.get("policy"), calibration.get("weight"), calibration.get("gate")
    if policy is None:
        return "?"
    if policy == "rrf":
        return f"rrf:{weight:g}" + (f"|gate:{gate:g}" if gate else "")
    return "first_stage" if policy == "none" else policy


def fmt_p(p: str | None) -> str:
    return f" (p={p})" if p and not p.startswith("<") else f" (p{p})" if p else ""


def print_table(rows: list[dict]) -> None:
    print("| set | test queries | first stage chosen (p) | second stage | best on real test queries | bm25 | dense "
          "| hybrid | default | before | default - hybrid | default - best | right | seconds |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['set']} | failed: {r['error']} | | | | | | | | {r['before']} | | | | {r['seconds']:.0f} |")
            continue
        n = r["ndcg"]
        before = f"{r['before']:.4f}" if r["before"] is not None else "–"
        print(f"| {r['set']} | {r['queries']} | {r['chosen_first_stage']}{fmt_p(r['p_first_stage'])} | "
              f"{r['second_stage']} | {r['real_best']} | {n['bm25']:.4f} | {n['dense']:.4f} | {n['hybrid']:.4f} | "
              f"{n['default']:.4f} | {before} | {r['default_minus_hybrid']:+.4f} | {r['default_minus_best']:+.4f} | "
              f"{'yes' if r['right'] else 'NO'} | {r['seconds']:.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", nargs="*", default=list(SETS), choices=list(SETS))
    parser.add_argument("--limit", type=int, default=None, help="only the first N test queries")
    parser.add_argument("--reranker", default=None, help="second-stage backend (unset: the product's)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/fsv"), help="eval output and fresh indexes")
    parser.add_argument("--json", type=Path, default=ROOT / "bench/results/first_stage_validation.json")
    args = parser.parse_args()
    rows = []
    for name in args.sets:
        run = run_set(name, SETS[name], args.work, args.limit, args.reranker)
        rows.append(row_of(name, run))
        if "error" in run:
            print(f"{name}: FAILED after {run['seconds']:.0f}s\n{run['stderr'][-3000:]}", file=sys.stderr, flush=True)
        else:
            r = rows[-1]
            print(f"{name}: {run['seconds']:.0f}s; first stage {r['chosen_first_stage']} — {r['first_stage_reason']}; "
                  f"second stage {r['second_stage']} — {r['second_stage_reason']}", file=sys.stderr, flush=True)
        print(json.dumps({k: v for k, v in rows[-1].items() if k != "stderr_tail"}), flush=True)
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"tolerance": TOLERANCE, "keep": KEEP, "rows": rows}, indent=2) + "\n")
    print()
    print_table(rows)


if __name__ == "__main__":
    main()
