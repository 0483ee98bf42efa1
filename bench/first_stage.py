"""First-stage quality and speed on a BEIR dataset: BM25 alone, dense alone, hybrid (RRF k=60).

    .venv/bin/python bench/first_stage.py --dataset ../shared/datasets/scifact --split test

Prints nDCG@10 / recall@100 / MRR@10 at document level (chunks grouped to documents), ingest
throughput, first-stage latency p50/p95 per mode (same run, interleaved), and peak RSS.
The index is cached in bench/out/ (content-hash incremental ingest), so re-runs skip embedding.
"""

from __future__ import annotations

import argparse
import platform
import resource
import shutil
import statistics
import sys
import time
from pathlib import Path

from ranx import Qrels, Run, evaluate

from funnel.embed import load_embedder
from funnel.eval.beir import load_beir, load_corpus, split_dir
from funnel.index.lance import LanceStore
from funnel.engine_config import EngineConfig
from funnel.pipeline import Pipeline
from funnel.rerank.policies import RerankPolicy
from funnel.retrieve.first_stage import FirstStageConfig, Retrieval

METRICS = ["ndcg@10", "recall@100", "mrr@10"]


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dataset", type=Path, default=Path("../shared/datasets/scifact"))
    parser.add_argument("--split", default="test")
    parser.add_argument("--embedder", default="minilm")
    parser.add_argument("--out", type=Path, default=Path("bench/out"))
    parser.add_argument("--fresh", action="store_true", help="rebuild the index to time ingest")
    parser.add_argument("--limit", type=int, default=0, help="evaluate only the first N queries")
    args = parser.parse_args()

    index_dir = args.out / f"{args.dataset.name}-{args.embedder.replace('/', '_')}"
    if args.fresh:
        shutil.rmtree(index_dir, ignore_errors=True)
    embedder = load_embedder(args.embedder)
    # Candidates and k large enough that recall@100 is measured over 100 distinct documents.
    config = EngineConfig.of(
        k=100, candidates=300, policy=RerankPolicy.NONE, first_stage=FirstStageConfig(per_retriever=300)
    )
    pipeline = Pipeline.build(config, store=LanceStore(index_dir), embedder=embedder, reranker=None)

    report = pipeline.indexer.ingest_documents(load_corpus(split_dir(args.dataset, args.split)))
    info = pipeline.store.info()
    print(f"# {args.dataset.name} ({args.split}), embedder {embedder.name}, {platform.processor() or platform.machine()}, "
          f"{time.strftime('%Y-%m-%d')}")
    print(f"index: {info.documents} docs, {info.chunks} chunks; this run embedded {report.chunks} chunks "
          f"in {report.seconds:.1f}s ({report.chunks_per_second:.1f} chunks/s); peak RSS after ingest "
          f"{peak_rss_mb():.0f} MB")

    split = load_beir(args.dataset, args.split)
    queries = list(split.queries.items())
    if args.limit:
        queries = queries[: args.limit]
    qrels = Qrels({q: split.qrels[q] for q, _ in queries})

    modes = [Retrieval.BM25, Retrieval.DENSE, Retrieval.HYBRID]
    runs: dict[Retrieval, dict[str, dict[str, float]]] = {m: {} for m in modes}
    latency: dict[Retrieval, list[float]] = {m: [] for m in modes}
    pipeline.search("warm up", retrieval=Retrieval.HYBRID)
    for qid, text in queries:
        for mode in modes:  # interleaved, so machine noise hits every mode alike
            started = time.perf_counter()
            result = pipeline.search(text, retrieval=mode)
            latency[mode].append(1000 * (time.perf_counter() - started))
            runs[mode][qid] = {d.doc_id: float(len(result.documents) - d.rank + 1) for d in result.documents}

    print(f"{len(queries)} queries (skipped: {split.skipped or 'nothing'})")
    print("| mode | nDCG@10 | recall@100 | MRR@10 | first stage p50 ms | p95 ms |")
    print("|---|---|---|---|---|---|")
    for mode in modes:
        scores = evaluate(qrels, Run(runs[mode]), METRICS)
        lat = sorted(latency[mode])
        p95 = lat[min(len(lat) - 1, int(0.95 * len(lat)))]
        print(f"| {mode.value} | {scores['ndcg@10']:.3f} | {scores['recall@100']:.3f} | {scores['mrr@10']:.3f} "
              f"| {statistics.median(lat):.1f} | {p95:.1f} |")
    print(f"peak RSS {peak_rss_mb():.0f} MB")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
