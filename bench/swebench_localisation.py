"""File-level bug localisation on SWE-bench Lite: issue text -> the file the fix changed.

    .venv/bin/python bench/swebench_corpus.py            # first: sdists -> file corpora + manifest
    .venv/bin/python bench/swebench_localisation.py --repos requests,flask --reranker builtin

For every instance whose gold file exists in the corpus built from the matching PyPI release, ranks the
corpus's files five ways and reports recall@1/@3/@5 and MRR (over the top 20 files) per repository:

  bm25, dense, hybrid          funnel's first stage alone, chunks grouped to files
  hybrid+rerank                + the reranker under the default policy (guaranteed_slots)
  triage                       the full triage retrieval (funnel.apps.triage.locate): hybrid fused with the
                               stack-trace frames, paths and symbols the issue names; no reranker
  triage+rerank                the same, then the reranker and policy (what `funnel triage` runs with one)

No LLM is involved. Indexes are cached per corpus under the manifest's cache (`index/`), so a second run
only re-queries. Instances are never used for tuning (Lite is a test set).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

from funnel.apps.factory import build_reranker
from funnel.apps.triage.locate import FileLocator, LocateConfig
from funnel.apps.triage.stacktrace import parse_trace
from funnel.embed import load_embedder
from funnel.index.lance import LanceStore
from funnel.engine_config import EngineConfig
from funnel.pipeline import Pipeline
from funnel.rerank.policies import RerankPolicy

DATASET = Path(__file__).resolve().parent.parent.parent / "shared" / "datasets" / "swe-bench-lite"
DEPTH = 20
CUTS = (1, 3, 5)
VARIANTS = ("bm25", "dense", "hybrid", "hybrid+rerank", "triage", "triage+rerank")


def ranks_of(paths: list[str], gold: set[str]) -> int | None:
    return next((i for i, p in enumerate(paths, start=1) if p in gold), None)


def scores(ranks: list[int | None]) -> dict[str, float]:
    n = max(1, len(ranks))
    out = {f"R@{k}": sum(1 for r in ranks if r is not None and r <= k) / n for k in CUTS}
    out["MRR"] = sum(1.0 / r for r in ranks if r is not None) / n
    return out


def report(ranks, timings, per_instance, ingest_log, out: Path, final: bool) -> None:
    """Print the table (at the end) and write results.json (after every corpus, so a stopped run keeps
    what it measured)."""
    table = {}
    for repo in sorted(ranks, key=lambda r: (r == "ALL", r)):
        table[repo] = {variant: scores(ranks[repo][variant]) for variant in VARIANTS}
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(
        {"scores": table, "instances": per_instance, "ingest": ingest_log,
         "latency_p50_ms": {v: statistics.median(t) for v, t in timings.items() if t}}, indent=1))
    if not final:
        return
    print("\nrecall@1 / @3 / @5 / MRR@20 per variant")
    print(f"{'repo':<24}{'n':>4}  " + "  ".join(f"{v:>20}" for v in VARIANTS))
    for repo, row in table.items():
        cells = [f"{s['R@1']:.2f}/{s['R@3']:.2f}/{s['R@5']:.2f}/{s['MRR']:.2f}" for s in row.values()]
        print(f"{repo:<24}{len(ranks[repo]['hybrid']):>4}  " + "  ".join(f"{c:>20}" for c in cells))
    print("\nquery latency p50 ms: " + ", ".join(
        f"{v} {statistics.median(t):.0f}" for v, t in timings.items() if t))
    print(f"wrote {out / 'results.json'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "funnel" / "swebench")
    parser.add_argument("--repos", default="", help="comma-separated repo names (e.g. requests,flask)")
    parser.add_argument("--max-instances", type=int, default=0, help="per repository, 0 = all")
    parser.add_argument("--max-chunks", type=int, default=0, help="skip corpora larger than this (0 = no cap)")
    parser.add_argument("--reranker", default="builtin")
    parser.add_argument("--embedder", default="minilm")
    parser.add_argument("--out", type=Path, default=Path("bench/out/swebench"))
    args = parser.parse_args(argv)

    manifest = json.loads((args.cache / "manifest.json").read_text())
    wanted = {r.strip() for r in args.repos.split(",") if r.strip()}
    instances = [i for i in manifest["instances"] if i.get("gold_present")
                 and (not wanted or i["repo"].split("/")[-1] in wanted or i["repo"] in wanted)]
    problems = {json.loads(line)["instance_id"]: json.loads(line)["problem_statement"]
                for line in (DATASET / "instances.jsonl").open()}
    by_corpus: dict[str, list[dict]] = defaultdict(list)
    per_repo_count: dict[str, int] = defaultdict(int)
    for inst in instances:
        if args.max_instances and per_repo_count[inst["repo"]] >= args.max_instances:
            continue
        per_repo_count[inst["repo"]] += 1
        by_corpus[inst["corpus_dir"]].append(inst)

    embedder = load_embedder(args.embedder)
    reranker = build_reranker(args.reranker)
    config = EngineConfig.of(k=DEPTH, candidates=50, policy=RerankPolicy.GUARANTEED_SLOTS)
    ranks: dict[str, dict[str, list[int | None]]] = defaultdict(lambda: defaultdict(list))
    per_instance = []
    timings: dict[str, list[float]] = defaultdict(list)
    ingest_log = []
    print(f"# SWE-bench Lite file localisation, {platform.machine()} {platform.processor()}, "
          f"{time.strftime('%Y-%m-%d')}, embedder {embedder.name}, reranker {args.reranker}")
    for corpus_dir, members in sorted(by_corpus.items()):
        corpus = Path(corpus_dir)
        index_dir = args.cache / "index" / f"{corpus.name}-{args.embedder}"
        plain = Pipeline.build(config, store=LanceStore(index_dir), embedder=embedder, reranker=None)
        started = time.perf_counter()
        ingested = plain.ingest([corpus])
        info = plain.store.info()
        ingest_log.append({"corpus": corpus.name, "chunks": info.chunks if info else 0,
                           "files": info.documents if info else 0, "embedded": ingested.chunks,
                           "seconds": round(time.perf_counter() - started, 1)})
        print(f"{corpus.name}: {ingest_log[-1]}", file=sys.stderr, flush=True)
        if args.max_chunks and info and info.chunks > args.max_chunks:
            continue
        reranked = Pipeline.build(config, store=plain.store, embedder=embedder, reranker=reranker)
        locate_config = LocateConfig(k=DEPTH, candidates=config.candidates)
        locator = FileLocator(reranked, locate_config, repo_root=corpus)
        plain_locator = FileLocator(plain, locate_config, repo_root=corpus)
        for inst in members:
            text = problems[inst["instance_id"]]
            gold = set(inst["gold_files"])
            row = {"instance_id": inst["instance_id"], "repo": inst["repo"]}
            for variant in VARIANTS:
                t0 = time.perf_counter()
                if variant.startswith("triage"):
                    chosen = locator if variant == "triage+rerank" else plain_locator
                    paths = [f.path for f in chosen.locate(parse_trace(text), text).files]
                elif variant == "hybrid+rerank":
                    paths = [locator.path_of(d.doc_id, d.path) for d in reranked.search(text).documents]
                else:
                    found = plain.search(text, policy="none", retrieval=variant).documents
                    paths = [locator.path_of(d.doc_id, d.path) for d in found]
                timings[variant].append(1000 * (time.perf_counter() - t0))
                rank = ranks_of(paths, gold)
                ranks[inst["repo"]][variant].append(rank)
                ranks["ALL"][variant].append(rank)
                row[variant] = rank
            per_instance.append(row)
        report(ranks, timings, per_instance, ingest_log, args.out, final=False)

    report(ranks, timings, per_instance, ingest_log, args.out, final=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
