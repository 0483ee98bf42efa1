"""Ingest embeds a batch of 256 chunks in slices of 64 (funnel.indexer.EMBED_SLICE), so a cancel or a Ctrl-C
is obeyed within a slice. Does slicing cost throughput? Both ways side by side, interleaved, one process.

    python bench/embed_slice.py --texts 1024 --rounds 3

Texts: SciFact abstracts (../shared/datasets/scifact), cut to the chunker's length (first 1,000 characters).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

from funnel.embed import load_embedder
from funnel.indexer import BATCH, EMBED_SLICE

CORPUS = Path(__file__).resolve().parent.parent.parent / "shared" / "datasets" / "scifact" / "corpus.jsonl"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--embedder", default="minilm")
    args = parser.parse_args()
    texts = []
    with CORPUS.open() as f:
        for line in f:
            record = json.loads(line)
            texts.append(f"{record.get('title', '')}\n{record['text']}"[:1000])
            if len(texts) == args.texts:
                break
    embedder = load_embedder(args.embedder)
    embedder.embed(texts[:8])  # warm-up: model build and load
    seconds = {BATCH: 0.0, EMBED_SLICE: 0.0}
    for _ in range(args.rounds):
        for size in (BATCH, EMBED_SLICE):
            start = time.perf_counter()
            for i in range(0, len(texts), size):
                embedder.embed(texts[i : i + size])
            seconds[size] += time.perf_counter() - start
    print(f"{time.strftime('%Y-%m-%d')} · {platform.processor() or platform.machine()} · {args.embedder} · "
          f"{len(texts)} texts x {args.rounds} rounds, interleaved")
    for size, s in seconds.items():
        print(f"slices of {size:>3}: {len(texts) * args.rounds / s:6.1f} texts/s")
    print(f"ratio (64 / 256): {seconds[BATCH] / seconds[EMBED_SLICE]:.3f} of the throughput")


if __name__ == "__main__":
    main()
