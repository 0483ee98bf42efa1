"""Measure the built-in reranker on the TEST splits (measurement only: nothing here is tuned on them).

    .venv/bin/python tools/eval_reranker.py [--model DIR] [--out bench/out/reranker] \
        [--index scifact=bench/out/scifact-minilm] [--only scifact,tatqa,cosqa] [--latency]

For each of SciFact test, TAT-QA test (chunk level) and CoSQA test: funnel's hybrid first stage over the
cached `funnel eval` index, then the reranker under every policy, scored with funnel.eval (nDCG@10 and
the rest, paired comparisons against hybrid), report files written per dataset. `--latency` times
reranking 25 real candidates of <= 256 tokens alone, one query after another, and prints the FLOPs per pair.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATASETS = REPO.parent / "shared" / "datasets"
VARIANTS = "hybrid,hybrid+rerank(replace),hybrid+rerank(guaranteed_slots),hybrid+rerank(rrf)"
SETS = {  # name -> (folder, level)
    "scifact": (DATASETS / "scifact", "auto"),
    "tatqa": (DATASETS / "tatqa", "chunk"),
    "cosqa": (DATASETS / "cosqa", "auto"),
}


def _eval_cache() -> Path | None:
    """The `eval.cache` setting (FUNNEL_EVAL__CACHE, or the older FUNNEL_EVAL_CACHE): where `funnel eval`
    keeps its indexes."""
    from funnel.apps.settings import load_settings

    return load_settings().section("eval").cache


def evaluate(name: str, index_dir: Path | None, reranker, out: Path, limit: int | None) -> dict:
    from funnel.embed import load_embedder
    from funnel.eval import report
    from funnel.eval.runner import run_eval
    from funnel.eval.suite import build_index, default_index_dir, open_suite
    from funnel.eval.variants import parse_variants
    from funnel.index.lance import LanceStore
    from funnel.pipeline import Pipeline

    folder, level = SETS[name]
    suite = open_suite(folder, "test", level, limit)
    index_dir = index_dir or default_index_dir(suite, "minilm", _eval_cache())
    pipeline = Pipeline(LanceStore(index_dir), load_embedder("minilm"), reranker=reranker)
    ingest = build_index(pipeline, suite)  # incremental: an up-to-date cached index is left as it is
    started = time.perf_counter()
    run = run_eval(pipeline, suite.evalset, parse_variants(VARIANTS), depth=100)
    results = report.results_json(report.score(run, "hybrid"), [])
    report.write(results, out / f"{name}-test")
    results["wall_s"] = time.perf_counter() - started
    results["index"] = str(index_dir)
    results["chunks_embedded_now"] = ingest.chunks
    return results


def print_results(results: dict) -> None:
    print(f"\n{results['dataset']} test ({results['level']} level, {results['queries']} queries, "
          f"reranker {results['reranker']}, {results['wall_s']:.0f}s)")
    for variant, entry in results["variants"].items():
        c = results["comparisons"].get(variant)
        versus = (f"  {c['delta']:+.4f} vs hybrid, p={c['p_randomization']:.3f}, "
                  f"+{len(c['helped'])}/-{len(c['hurt'])} queries") if c else ""
        fallbacks = f"  FALLBACKS {entry['rerank_fallbacks']}" if entry.get("rerank_fallbacks") else ""
        print(f"  {variant:36s} nDCG@10 {entry['ndcg@10']:.4f}  MRR@10 {entry.get('mrr@10', 0):.4f}"
              f"  R@100 {entry.get('recall@100', 0):.4f}{versus}{fallbacks}")
    latency = results["latency_ms"]
    print(f"  per query: first stage p50 {latency['first_stage']['p50']:.0f} ms, "
          f"rerank p50 {latency['rerank']['p50']:.0f} / p95 {latency['rerank']['p95']:.0f} ms")


def flops_per_pair(model_dir: Path, seq: int) -> float:
    """Multiply-adds x 2 of one forward pass at `seq` tokens (dense layers, attention, head)."""
    from funnel.onnx.build import read_config

    config_path = model_dir / "config.json"
    if config_path.is_file():
        cfg = read_config(model_dir)
        h, inter, layers = cfg.hidden, cfg.intermediate, cfg.layers
    else:  # the shipped directory has no config.json: all-MiniLM-L6-v2's shape
        h, inter, layers = 384, 1536, 6
    dense = 2 * seq * (4 * h * h + 2 * h * inter)
    attention = 2 * 2 * seq * seq * h  # Q K^T and P V
    return layers * (dense + attention) + 2 * (h * h + h)


def latency(reranker, index_dir: Path, repeats: int) -> dict:
    """25 first-stage candidates for SciFact test claims (long chunks: most fill the 256-token window)."""
    from funnel.embed import load_embedder
    from funnel.eval.beir import load_beir
    from funnel.index.lance import LanceStore
    from funnel.retrieve.first_stage import FirstStageConfig, first_stage

    store, embedder = LanceStore(index_dir), load_embedder("minilm")
    queries = list(load_beir(SETS["scifact"][0], "test").queries.values())[:repeats]
    reranker.warm_up()
    wall, cpu, tokens = [], [], []
    for query in queries:
        candidates = first_stage(store, embedder, query, 25, FirstStageConfig())
        encodings = reranker._tokenizer.encode_batch([(query, c.chunk.text) for c in candidates])
        tokens.append(sum(len(e.ids) for e in encodings) / len(encodings))
        c0, t0 = time.process_time(), time.perf_counter()
        reranker.rerank(query, candidates)
        wall.append(1000 * (time.perf_counter() - t0))
        cpu.append(1000 * (time.process_time() - c0))
    mean_tokens = statistics.mean(tokens)
    return {
        "queries": len(queries),
        "threads": reranker.threads,
        "p50_ms": statistics.median(wall),
        "p95_ms": sorted(wall)[int(0.95 * (len(wall) - 1))],
        "cpu_p50_ms": statistics.median(cpu),
        "mean_tokens_per_pair": mean_tokens,
        "gflops_per_pair_at_256": flops_per_pair(reranker.model_dir, 256) / 1e9,
        "gflops_per_query_measured": 25 * flops_per_pair(reranker.model_dir, round(mean_tokens)) / 1e9,
    }


def main(argv: list[str] | None = None) -> int:
    from funnel.rerank.onnx_cross_encoder import OnnxCrossEncoder, builtin_model_dir

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, help="cross-encoder directory (default: the built-in one)")
    parser.add_argument("--fp32", action="store_true", help="use model.onnx instead of model_int8.onnx")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "reranker")
    parser.add_argument("--index", action="append", default=[], metavar="NAME=DIR")
    parser.add_argument("--only", default=",".join(SETS), help="comma-separated: scifact, tatqa, cosqa")
    parser.add_argument("--limit", type=int, help="first N queries of each set (a quick look)")
    parser.add_argument("--latency", action="store_true", help="also time 25-candidate reranks alone")
    parser.add_argument("--latency-queries", type=int, default=50)
    parser.add_argument("--threads", type=int)
    args = parser.parse_args(argv)

    model_dir = args.model or builtin_model_dir()
    reranker = OnnxCrossEncoder(model_dir, quantized=not args.fp32, threads=args.threads)
    indexes = {}
    for spec in args.index:
        name, _, path = spec.partition("=")
        if name not in SETS or not path:
            parser.error(f"--index takes NAME=DIR with NAME one of {', '.join(SETS)}")
        indexes[name] = Path(path)
    args.out.mkdir(parents=True, exist_ok=True)
    summary = {}
    for name in [n.strip() for n in args.only.split(",") if n.strip()]:
        if name not in SETS:
            parser.error(f"unknown set {name!r}; valid: {', '.join(SETS)}")
        results = evaluate(name, indexes.get(name), reranker, args.out, args.limit)
        print_results(results)
        summary[name] = {v: e.get("ndcg@10") for v, e in results["variants"].items()}
        summary[name]["rerank_p50_ms"] = results["latency_ms"]["rerank"]["p50"]
    if args.latency:
        from funnel.eval.suite import default_index_dir, open_suite

        scifact = open_suite(SETS["scifact"][0], "test", "auto")
        index_dir = indexes.get("scifact") or default_index_dir(scifact, "minilm", _eval_cache())
        summary["latency"] = latency(reranker, index_dir, args.latency_queries)
        print(f"\nlatency: {json.dumps(summary['latency'])}")
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
