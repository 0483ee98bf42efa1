"""Does funnel's torch-free ONNX embedder agree with sentence-transformers, and how fast is it?

Run by hand from a virtualenv that has torch + sentence-transformers *and* onnxruntime + tokenizers +
onnx + safetensors, with funnel's src/ on the path:

    HF_HUB_OFFLINE=1 PYTHONPATH=src python bench/embedder_agreement.py [--model-dir DIR]

Reports, on SciFact (/work/shared/datasets/scifact by default):
  1. cosine(fp32 ONNX, torch) and cosine(int8 ONNX, torch) on ~200 texts, long abstracts included so
     that truncation at max_seq_length is compared too;
  2. top-10 retrieval agreement of int8 vs fp32 (and nDCG@10 of each against the test qrels);
  3. throughput (texts/s over 500 abstracts) and single-query latency (p50 over 200 short queries).
Timings on a shared 2-core VM move by 20-30% from run to run: repeat before trusting a difference.
Parts needing sentence-transformers are skipped with a message when it is not importable.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach a model hub: the weights are packaged
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from funnel.onnx import build as onnx_build  # noqa: E402
from funnel.embed.onnx import OnnxEmbedder  # noqa: E402

SEED = 13


def load_scifact(root: Path) -> tuple[dict[str, str], dict[str, str], dict[str, set[str]]]:
    corpus = {}
    with (root / "corpus.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            doc = json.loads(line)
            corpus[doc["_id"]] = f"{doc['title']}. {doc['text']}".strip()
    with (root / "queries.jsonl").open(encoding="utf-8") as fh:
        queries = {q["_id"]: q["text"] for q in map(json.loads, fh)}
    qrels: dict[str, set[str]] = {}
    with (root / "qrels" / "test.tsv").open(encoding="utf-8") as fh:
        next(fh)  # header
        for line in fh:
            qid, did, score = line.rstrip("\n").split("\t")
            if int(score) > 0:
                qrels.setdefault(qid, set()).add(did)
    return corpus, queries, qrels


def agreement_texts(
    corpus: dict[str, str], queries: dict[str, str], counter: OnnxEmbedder, n: int
) -> list[str]:
    """Half long abstracts (over the model window), a quarter short abstracts, a quarter queries."""
    rng = random.Random(SEED)
    docs = sorted(corpus.values())
    rng.shuffle(docs)
    long_docs = [d for d in docs if counter.count_tokens(d) > counter.max_tokens][: n // 2]
    short_docs = [d for d in docs if counter.count_tokens(d) <= counter.max_tokens][: n // 4]
    qs = sorted(queries.values())
    rng.shuffle(qs)
    return long_docs + short_docs + qs[: n - len(long_docs) - len(short_docs)]


def cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return np.sum(a * b, axis=1)


def compare_with_torch(src_dir: Path, texts: list[str], fp32: OnnxEmbedder, int8: OnnxEmbedder) -> None:
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        print(f"[skip] torch comparison: sentence_transformers is not importable ({exc})")
        return
    model = SentenceTransformer(str(src_dir), device="cpu")
    print(f"torch reference: max_seq_length={model.max_seq_length}")
    reference = model.encode(texts, batch_size=32, convert_to_numpy=True, normalize_embeddings=False)
    n_long = sum(fp32.count_tokens(t) > fp32.max_tokens for t in texts)
    print(f"agreement texts: {len(texts)} ({n_long} longer than {fp32.max_tokens} content tokens)")
    for label, emb in (("fp32", fp32), ("int8", int8)):
        cos = cosine_rows(emb.embed(texts), reference).astype(np.float64)
        long_min = cos[:n_long].min() if n_long else float("nan")  # long texts come first
        print(
            f"cosine {label} vs torch: mean {cos.mean():.7f}  min {cos.min():.7f}  "
            f"(1 - min = {1 - cos.min():.1e}; long texts min {long_min:.7f})"
        )

    # Same texts, same batch size: torch vs the ONNX sessions, for a like-for-like speed figure.
    for label, encode in (
        ("torch", lambda: model.encode(texts, batch_size=32)),
        ("fp32 onnx", lambda: fp32.embed(texts)),
        ("int8 onnx", lambda: int8.embed(texts)),
    ):
        start = time.perf_counter()
        encode()
        rate = len(texts) / (time.perf_counter() - start)
        print(f"{label} throughput on the agreement texts: {rate:.1f} texts/s")


def ndcg_at_10(ranked: list[str], relevant: set[str]) -> float:
    dcg = sum(1.0 / np.log2(rank + 2) for rank, did in enumerate(ranked[:10]) if did in relevant)
    ideal = sum(1.0 / np.log2(rank + 2) for rank in range(min(10, len(relevant))))
    return dcg / ideal


def retrieval_agreement(
    corpus: dict[str, str],
    queries: dict[str, str],
    qrels: dict[str, set[str]],
    fp32: OnnxEmbedder,
    int8: OnnxEmbedder,
    n_docs: int,
) -> None:
    """Top-10 over a sub-corpus holding every relevant doc of the test queries, padded with others."""
    qids = sorted(qrels, key=int)
    relevant = sorted({d for q in qids for d in qrels[q]})
    rng = random.Random(SEED)
    others = sorted(set(corpus) - set(relevant))
    rng.shuffle(others)
    dids = relevant + others[: max(0, n_docs - len(relevant))]
    doc_texts = [corpus[d] for d in dids]
    query_texts = [queries[q] for q in qids]

    tops = {}
    for label, emb in (("fp32", fp32), ("int8", int8)):
        scores = emb.embed(query_texts) @ emb.embed(doc_texts).T
        tops[label] = [[dids[j] for j in np.argsort(-row, kind="stable")[:10]] for row in scores]
        ndcg = np.mean([ndcg_at_10(top, qrels[q]) for top, q in zip(tops[label], qids, strict=True)])
        print(f"nDCG@10 {label}: {ndcg:.4f}  ({len(qids)} test queries, {len(dids)} docs)")
    overlap = [len(set(a) & set(b)) / 10 for a, b in zip(tops["fp32"], tops["int8"], strict=True)]
    same_top1 = np.mean([a[0] == b[0] for a, b in zip(tops["fp32"], tops["int8"], strict=True)])
    identical = np.mean([a == b for a, b in zip(tops["fp32"], tops["int8"], strict=True)])
    print(
        f"int8 vs fp32 top-10: mean overlap {np.mean(overlap):.4f}  min {min(overlap):.1f}  "
        f"same top-1 {same_top1:.4f}  identical ordered top-10 {identical:.4f}"
    )


def speed(corpus: dict[str, str], queries: dict[str, str], emb: OnnxEmbedder, label: str) -> None:
    abstracts = sorted(corpus.values())[:500]
    short = sorted(queries.values(), key=len)[:200]
    emb.embed(abstracts[:32])  # first runs allocate and tune; keep them out of the numbers
    start = time.perf_counter()
    emb.embed(abstracts)
    rate = len(abstracts) / (time.perf_counter() - start)
    latencies = []
    for q in short:
        start = time.perf_counter()
        emb.embed([q])
        latencies.append((time.perf_counter() - start) * 1000)
    latencies.sort()
    p50, p90 = statistics.median(latencies), latencies[int(0.9 * len(latencies))]
    print(
        f"{label}: {rate:.1f} texts/s (500 abstracts, {emb.rows_per_run} rows/run, {emb.threads} threads); "
        f"query latency p50 {p50:.2f} ms  p90 {p90:.2f} ms"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model-dir", type=Path, help="an onnx_build output dir (default: build one in a temp dir)"
    )
    parser.add_argument("--scifact", type=Path, default=Path("/work/shared/datasets/scifact"))
    parser.add_argument("--n-agree", type=int, default=200)
    parser.add_argument("--n-docs", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()

    src_dir = onnx_build.packaged_minilm_dir()
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = args.model_dir
        if model_dir is None:
            start = time.perf_counter()
            model_dir = onnx_build.build_packaged(Path(tmp) / "model")
            print(f"built ONNX models in {time.perf_counter() - start:.1f} s")
        fp32 = OnnxEmbedder(model_dir, quantized=False, threads=args.threads)
        int8 = OnnxEmbedder(model_dir, quantized=True, threads=args.threads)
        corpus, queries, qrels = load_scifact(args.scifact)

        # Speed first: once torch is imported its OpenMP threads compete with onnxruntime's.
        speed(corpus, queries, fp32, "fp32")
        speed(corpus, queries, int8, "int8")
        retrieval_agreement(corpus, queries, qrels, fp32, int8, args.n_docs)
        compare_with_torch(src_dir, agreement_texts(corpus, queries, fp32, args.n_agree), fp32, int8)
    return 0


if __name__ == "__main__":
    sys.exit(main())
