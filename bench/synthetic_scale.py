"""First-stage latency on a synthetic index of N chunks (default 100k).

    .venv/bin/python bench/synthetic_scale.py --chunks 100000

Chunk texts are real SciFact sentences re-packed into ~120-word passages (so the BM25 index has a real
vocabulary and length distribution); vectors are random unit vectors (embedding 100k chunks would take
~20 minutes here and does not change search cost). Queries are real SciFact claims, embedded by the
real query embedder, so the timing covers the whole first stage: embed + BM25 + dense + RRF.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import shutil
import statistics
import time
from pathlib import Path

import numpy as np

from funnel.embed import load_embedder
from funnel.index.lance import LanceStore
from funnel.engine_config import EngineConfig
from funnel.pipeline import Pipeline
from funnel.rerank.policies import RerankPolicy
from funnel.types import Chunk


def passages(dataset: Path, n: int, words: int = 120) -> list[str]:
    vocabulary_text = []
    with open(dataset / "corpus.jsonl", encoding="utf-8") as fh:
        for line in fh:
            record = json.loads(line)
            vocabulary_text.extend((record["title"] + " " + record["text"]).split())
    rng = random.Random(0)
    out = []
    for _ in range(n):
        start = rng.randrange(0, len(vocabulary_text) - words)
        out.append(" ".join(vocabulary_text[start : start + words]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--dataset", type=Path, default=Path("../shared/datasets/scifact"))
    parser.add_argument("--out", type=Path, default=Path("bench/out"))
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()

    embedder = load_embedder("minilm")
    index_dir = args.out / f"synthetic-{args.chunks}"
    shutil.rmtree(index_dir, ignore_errors=True)
    texts = passages(args.dataset, args.chunks)
    rng = np.random.default_rng(0)
    store = LanceStore(index_dir)
    started = time.perf_counter()
    with store.transaction(embedder.name, embedder.dim) as tx:
        for start in range(0, len(texts), 10_000):
            batch = texts[start : start + 10_000]
            chunks = [
                Chunk(f"d{start + i}#0", f"d{start + i}", 0, t, f"d{start + i}", f"d{start + i}", "text", 160)
                for i, t in enumerate(batch)
            ]
            vectors = rng.normal(size=(len(batch), embedder.dim)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            tx.add(chunks, vectors)
    build_s = time.perf_counter() - started
    disk_mb = sum(p.stat().st_size for p in index_dir.rglob("*") if p.is_file()) / 2**20

    pipeline = Pipeline.build(EngineConfig.of(k=10, candidates=25, policy=RerankPolicy.NONE), store=store, embedder=embedder, reranker=None)
    with open(args.dataset / "queries.jsonl", encoding="utf-8") as fh:
        queries = [json.loads(line)["text"] for line in fh][: args.queries]
    for q in queries[:5]:
        pipeline.search(q)  # warm caches and the model
    modes = ("bm25", "dense", "hybrid")
    latency: dict[str, list[float]] = {m: [] for m in modes}
    for q in queries:
        for mode in modes:
            t0 = time.perf_counter()
            pipeline.search(q, retrieval=mode)
            latency[mode].append(1000 * (time.perf_counter() - t0))
    print(f"# synthetic {args.chunks} chunks ({time.strftime('%Y-%m-%d')}): build (store write + BM25 + ANN "
          f"index) {build_s:.1f}s, disk {disk_mb:.0f} MB, peak RSS "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    print("| mode | p50 ms | p95 ms |")
    print("|---|---|---|")
    for mode in modes:
        lat = sorted(latency[mode])
        print(f"| {mode} | {statistics.median(lat):.1f} | {lat[int(0.95 * (len(lat) - 1))]:.1f} |")


if __name__ == "__main__":
    main()
