"""The command line: in a child, run one role; in the parent, run every system, then print the table."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from .common import CHECK_QUERIES, ROOT
from .cross_encoder_check import EXPORTED, TEACHER, choose_cross_encoder, role_seed_check
from .funnel_side import funnel_chunks, role_funnel_ingest, role_funnel_query
from .install_size import SEED_PACKAGES, role_seed_dists
from .report import Report
from .runner import run_systems
from .seed_funnel import role_seed_funnel
from .seed_side import role_seed

ROLES = {"seed": role_seed, "seed-funnel": role_seed_funnel, "seed-check": role_seed_check,
         "seed-dists": role_seed_dists, "funnel-ingest": role_funnel_ingest, "funnel-query": role_funnel_query}


def parse_args(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--dataset", type=Path, default=ROOT.parent / "shared" / "datasets" / "scifact")
    parser.add_argument("--split", default="test")
    parser.add_argument("--limit", type=int, default=None, help="only the first N queries (smoke test)")
    parser.add_argument("--corpus-sample", type=int, default=None,
                        help="with --limit: index only the judged abstracts + this many others (default 500)")
    parser.add_argument("--seed-python", default=str(ROOT / ".venv-seed" / "bin" / "python"))
    parser.add_argument("--cross-encoder", type=Path, default=None,
                        help="fp32 checkpoint of funnel's reranker (config.json, model.safetensors, "
                        f"tokenizer.json); default: {TEACHER} if `make reranker` left one there, else the shipped "
                        f"int8 model dequantized to fp32 by tools/export_reranker_checkpoint.py into {EXPORTED}")
    parser.add_argument("--candidates", type=int, default=25)
    parser.add_argument("--seed-k", type=int, default=50, help="k of each retriever in the seed's ensemble")
    parser.add_argument("--seed-weights", default="0.5,0.5", help="EnsembleRetriever weights: BM25,FAISS")
    parser.add_argument("--seed-chunks", choices=("abstract", "seed500", "funnel"), default="abstract")
    parser.add_argument("--seed-bm25-lower", action="store_true", help="lower-case BM25 tokens (default: str.split)")
    parser.add_argument("--funnel-policies", default="guaranteed_slots,replace,rrf",
                        help="seed + FunnelReranker: policies, the first timed end to end, the others on its scores")
    parser.add_argument("--paired-every", type=int, default=1,
                        help="seed + FunnelReranker: time the seed's search beside it on every Nth query")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=10, help="train-split queries run before timing")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "seed-stack")
    parser.add_argument("--refresh-install-size", action="store_true")
    parser.add_argument("--role", choices=sorted(ROLES), help=argparse.SUPPRESS)
    parser.add_argument("--spec", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    return parser.parse_args()


def prepare(args: argparse.Namespace):
    """The queries, the records kept and the spec every child reads; funnel's chunk texts for
    --seed-chunks funnel."""
    from funnel.errors import ConfigError
    from funnel.eval import beir
    from funnel.eval.suite import open_suite

    corpus_sample = args.corpus_sample if args.corpus_sample is not None else (500 if args.limit else None)
    suite = open_suite(args.dataset, args.split, "auto", args.limit, corpus_sample)
    evalset = suite.evalset
    try:
        warmup = list(beir.load_beir(args.dataset, "train").queries.values())[: args.warmup]
    except ConfigError:  # no train split: any text warms the caches
        warmup = ["what is the effect of the treatment"] * args.warmup
    work = args.out
    work.mkdir(parents=True, exist_ok=True)
    keep = sorted(suite.keep) if suite.keep is not None else None
    n_records = len(keep) if keep is not None else beir.corpus_size(suite.corpus)
    spec = {
        "corpus": str(suite.corpus), "keep": keep, "queries": list(evalset.queries.items()), "warmup": warmup,
        "threads": args.threads, "candidates": args.candidates, "max_length": 256,
        "cross_encoder": str(args.cross_encoder), "seed_k": args.seed_k,
        "seed_weights": [float(w) for w in args.seed_weights.split(",")], "seed_chunks": args.seed_chunks,
        "seed_bm25_lower": args.seed_bm25_lower, "index": str(work / "funnel-index"),
        "check_queries": CHECK_QUERIES, "chunks_file": str(work / "funnel-chunks.jsonl"),
        "seed_faiss": str(work / "seed-faiss"), "funnel_policies": args.funnel_policies.split(","),
        "seed_packages": list(SEED_PACKAGES), "paired_every": args.paired_every,
        "partial": str(work / "seed-funnel.partial.json"),
    }
    if args.seed_k * 2 < args.candidates:
        raise SystemExit(f"--seed-k {args.seed_k} cannot bring {args.candidates} candidates")
    if args.seed_chunks == "funnel":
        funnel_chunks(suite.corpus, set(keep) if keep else None, Path(spec["chunks_file"]))
    return evalset, spec, n_records


def main(doc: str) -> None:
    args = parse_args(doc.split("\n\n")[0])
    if args.role:
        result = ROLES[args.role](json.loads(args.spec.read_text()))
        args.result.write_text(json.dumps(result))
        return

    args.cross_encoder = choose_cross_encoder(args.cross_encoder)
    if not Path(args.seed_python).is_file():
        raise SystemExit(f"compare_seed_stack: no seed venv python at {args.seed_python}: run `make seed-stack`")
    evalset, spec, n_records = prepare(args)
    work = args.out
    load_start = os.getloadavg()
    started = time.time()
    print(f"{len(evalset.queries)} queries, {n_records} records; running seed, seed + FunnelReranker, funnel ingest + "
          f"calibrate, funnel query x3, FunnelRetriever, cross-encoder check (logs in {work}) ...", file=sys.stderr,
          flush=True)
    runs = run_systems(args, spec, work)
    load_end = os.getloadavg()
    Report(args, evalset, n_records, runs, (load_start, load_end), started).print_all(work)
