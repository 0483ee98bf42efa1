"""Calibrating on real judged queries (`funnel calibrate --judged FILE`): does the choice hold on test?

Queries made from the documents cannot show a reranker's gains on the kind of question it was trained for
(BENCHMARKS: on SciFact, TAT-QA and CoSQA they keep the first stage while the test queries favour rrf). A
user who has some real questions with known answers can calibrate on those instead. This measures that with
judged queries that are neither test queries nor ones the built-in reranker trained on: the validation slice
`tools/train_reranker.py` holds out of each training split (SciFact train, TAT-QA dev, CoSQA dev).

Per set:
1. write the slice as a judged-queries file (JSON Lines: query + relevant record ids);
2. copy the test index (`funnel eval`'s cache, built if missing) and `funnel calibrate --judged` the copy.
   TAT-QA's dev and test are different corpora, so its judged queries calibrate a dev index, and the test
   row shows the option they chose, measured on test (a user would calibrate each index with its own),
   and `default` there is the test index's own calibration from generated queries;
3. `funnel eval --split test` on the copy with every option plus `default` (exactly `funnel search` with
   that calibration in force).

    python bench/judged_calibration.py [--sets scifact cosqa tatqa] [--out eval-out/judged]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "bench"))

from calibration_validation import OPTIONS, SETS, p_note  # noqa: E402
from train_reranker import _is_validation  # noqa: E402  (the reranker's own hold-out rule)

from funnel.apps.settings import load_settings  # noqa: E402
from funnel.calibrate import Calibration  # noqa: E402
from funnel.eval.beir import load_beir  # noqa: E402
from funnel.eval.suite import default_index_dir, open_suite  # noqa: E402

TRAINING_SPLIT = {"scifact": "train", "tatqa": "dev", "cosqa": "dev"}
EMBEDDER = "minilm"


def funnel(*args: str) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-c", "from funnel.apps.cli import run; run()", *args],
                          capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"funnel {args[0]} failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
    return done


def judged_file(name: str, path: Path, out: Path) -> tuple[Path, int]:
    """The reranker's held-out validation slice of the set's training split, as judged queries."""
    split = TRAINING_SPLIT[name]
    evalset = load_beir(path, split)
    lines = [
        json.dumps({"query": text, "relevant": sorted(d for d, s in evalset.qrels[qid].items() if s > 0)})
        for qid, text in evalset.queries.items() if _is_validation(name, qid)
    ]
    target = out / f"{name}-{split}-heldout.jsonl"
    target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return target, len(lines)


def index_copy(path: Path, split: str, into: Path) -> Path:
    """A copy of `funnel eval`'s cached index for this split (built first when missing)."""
    cached = default_index_dir(open_suite(path, split), EMBEDDER, load_settings().section("eval").cache)
    if not cached.is_dir():
        funnel("eval", "--dataset", str(path), "--split", split, "--variants", "hybrid", "--limit", "1",
               "--out", str(into / "build"), "--embedder", EMBEDDER)
    target = into / f"{path.name}-{split}"
    shutil.copytree(cached, target)
    return target


def run_set(name: str, out: Path, tmp: Path) -> dict:
    path = SETS[name]
    judged, n_judged = judged_file(name, path, out)
    split = TRAINING_SPLIT[name]
    same_corpus = open_suite(path, split).cache_key == open_suite(path, "test").cache_key
    test_index = index_copy(path, "test", tmp)
    calibrated = test_index if same_corpus else index_copy(path, split, tmp)
    calibration = json.loads(funnel("calibrate", "--index", str(calibrated), "--judged", str(judged),
                                    "--json").stdout)
    # `default` on TAT-QA's test index is what its own (generated) calibration chooses, shown beside.
    variants = [*OPTIONS.values(), "default"]
    funnel("eval", "--dataset", str(path), "--split", "test", "--index", str(test_index), "--variants",
           ",".join(variants), "--out", str(out / name), "--embedder", EMBEDDER)
    results = json.loads((out / name / "results.json").read_text())
    ndcg = {v: results["variants"][v]["ndcg@10"] for v in variants}
    chosen = Calibration.from_json(calibration).option
    return {
        "set": name, "judged": n_judged, "used": calibration["queries"], "split": split,
        "chosen": chosen, "p": calibration.get("p_value"), "mrr": calibration["mrr"],
        "reason": calibration["reason"], "ndcg": ndcg, "same_corpus": same_corpus,
        "test_queries": results["queries"],
        "p_default": results["comparisons"].get("default", {}).get("p_randomization"),
        "default": ndcg["default"] if same_corpus else ndcg[OPTIONS[chosen]],
        "test_calibration": results.get("calibration", {}).get("reason"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", nargs="*", default=list(TRAINING_SPLIT), choices=list(TRAINING_SPLIT))
    parser.add_argument("--out", type=Path, default=Path("eval-out/judged"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="funnel-judged-") as tmp:
        for name in args.sets:
            row = run_set(name, args.out, Path(tmp))
            rows.append(row)
            print(json.dumps(row), flush=True)
    print("\n| set | judged queries (used) | chosen (p) | test queries | hybrid | best option on test | default | "
          "default − hybrid (p) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        hybrid = r["ndcg"]["hybrid"]
        best = max(OPTIONS, key=lambda o: r["ndcg"][OPTIONS[o]])
        where = "" if r["same_corpus"] else " (chosen on the dev index)"
        print(f"| {r['set']} | {r['judged']} ({r['used']}) from {r['split']} | {r['chosen']}{p_note(r['p'])}{where} | "
              f"{r['test_queries']} | {hybrid:.4f} | {best} {r['ndcg'][OPTIONS[best]]:.4f} | {r['default']:.4f} | "
              f"{r['default'] - hybrid:+.4f}{p_note(r['p_default'])} |")


if __name__ == "__main__":
    main()
