"""Ingest speed side by side: this checkout against an earlier commit, and the analyzers against each other.

Issue 31's bar: per-language analysis and language detection must keep ingest of English text within 10% of
what it was. Each round ingests the same folder into a fresh index with each variant, one after the other
(`funnel ingest DIR --no-calibrate`, separate processes, so model loading counts the same for both), and
reports each variant's median seconds and chunks/s, and the ratio to the first variant.

    python bench/ingest_speed.py --before c9a8624                 # English: SciFact abstracts as .txt files
    python bench/ingest_speed.py --analyzers english cjk korean   # Korean: bench/data/korean-docs/docs

The earlier commit is checked out with `git worktree` into a temporary folder and run from its own src/
(PYTHONPATH) with this checkout's .venv. Numbers go to bench/results/ingest_speed.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCIFACT = ROOT.parent / "shared" / "datasets" / "scifact" / "corpus.jsonl"
KOREAN = ROOT / "bench" / "data" / "korean-docs" / "docs"
_LINE = re.compile(r"(\d+) chunks embedded in ([0-9.]+)s")


def english_folder(out: Path, n: int) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    with SCIFACT.open() as f:
        for i, line in zip(range(n), f):
            record = json.loads(line)
            (out / f"{record['_id']}.txt").write_text(f"{record['title']}\n\n{record['text']}\n", encoding="utf-8")
    return out


def ingest(src: Path, folder: Path, index: Path, analyzer: str | None) -> tuple[float, int]:
    """Seconds of the whole command and chunks embedded, for one ingest into a new index."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    cmd = [sys.executable, "-c", "from funnel.apps.cli import run; run()", "ingest", str(folder),
           "--index", str(index), "--no-calibrate", "--reranker", "none"]
    if analyzer:
        cmd += ["--analyzer", analyzer]
    started = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    found = _LINE.search(done.stdout)
    if done.returncode or not found:
        raise SystemExit(f"ingest failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    return seconds, int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="a commit to compare this checkout with (English folder)")
    parser.add_argument("--analyzers", nargs="+", help="compare analyzers on the Korean documents instead")
    parser.add_argument("--docs", type=int, default=1000, help="SciFact abstracts in the English folder")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if bool(args.before) == bool(args.analyzers):
        raise SystemExit("give --before COMMIT or --analyzers NAME...")
    with tempfile.TemporaryDirectory(prefix="funnel-ingest-speed-") as tmp:
        work = Path(tmp)
        if args.before:
            old = work / "before"
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(old), args.before],
                           check=True)
            variants = {f"before ({args.before})": (old / "src", None), "this checkout": (ROOT / "src", None)}
            folder = english_folder(work / "docs", args.docs)
        else:
            variants = {f"analyzer {a}": (ROOT / "src", a) for a in args.analyzers}
            folder = KOREAN
        try:
            times: dict[str, list[float]] = {name: [] for name in variants}
            chunks: dict[str, int] = {}
            for r in range(args.rounds):
                for name, (src, analyzer) in variants.items():
                    seconds, chunks[name] = ingest(src, folder, work / f"index-{r}-{len(times[name])}-{hash(name)}",
                                                   analyzer)
                    times[name].append(seconds)
                    print(f"round {r + 1}: {name}: {seconds:.1f}s, {chunks[name]} chunks", flush=True)
        finally:
            if args.before:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old)], check=False)
    first = statistics.median(next(iter(times.values())))
    rows = []
    for name, values in times.items():
        median = statistics.median(values)
        rows.append({"variant": name, "median_s": round(median, 2), "chunks": chunks[name],
                     "chunks_per_s": round(chunks[name] / median, 1), "ratio": round(median / first, 3)})
        print(f"{name:28s} median {median:6.1f}s  {chunks[name] / median:6.1f} chunks/s  x{median / first:.3f}")
    result = {"machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
              "date": time.strftime("%Y-%m-%d"), "folder": str(folder.relative_to(ROOT) if folder.is_relative_to(ROOT)
                                                              else f"{args.docs} SciFact abstracts"),
              "rounds": args.rounds, "rows": rows}
    out = ROOT / "bench" / "results" / "ingest_speed.json"
    existing = json.loads(out.read_text()) if out.exists() else {}
    existing["before" if args.before else "analyzers"] = result
    out.write_text(json.dumps(existing, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
