"""A gate on the reranker's score gap: rrf that reorders a query only when the reranker's best score leads its
second by at least GATE (`Rrf.gate`), replayed for many gates and weights over one scoring per query.

    python bench/score_gate.py --split test --model builtin                        # the seven test splits
    python bench/score_gate.py --split dev --model onnx:DIR --sets scifact cosqa tatqa   # SciFact: train
    python bench/score_gate.py --split test --model builtin --table               # the BENCHMARKS.md table

Per set and model, each query's product window (what `Pipeline.search` hands the second stage), the deeper
first stage below it and the reranker's scores of the window's top `rerank_depth` are computed once, as
`funnel eval` does; then every (gate, weight) is applied to those scores with the product's own policy
(`Rrf(weight=W, gate=G).order`) and scored with the product's metrics. Prints the change in nDCG@10 from
hybrid per set and pooled over all queries. TAT-QA is cut to its first 400 queries unless --limit says
otherwise. Indexes are the eval cache's ([eval] cache, FUNNEL_EVAL__CACHE), built on first use.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from funnel.apps.factory import build_pipeline
from funnel.apps.settings import load_settings
from funnel.eval import runner
from funnel.eval.compare import paired_p_values
from funnel.eval.metrics import per_query
from funnel.eval.suite import build_index, default_index_dir, open_suite
from funnel.rerank.policies import RerankPolicy, Rrf, identity, ordered
from funnel.retrieve.first_stage import Retrieval

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calibration_validation import SETS  # noqa: E402

SPLITS = {"dev": {"scifact": "train", "cosqa": "dev", "tatqa": "dev"}}  # the tuning split of each shared set


def windows(name: str, split: str, model: str, limit: int | None) -> tuple[list, object]:
    """Per query: (window, deep tail, reranker scores) and the eval set."""
    suite = open_suite(SETS[name], SPLITS.get(split, {}).get(name, split), "auto", limit)
    index = default_index_dir(suite, "minilm", load_settings().section("eval").cache)
    settings = load_settings(index=str(index), embedder="minilm", reranker=model)
    pipeline = build_pipeline(settings)
    build_index(pipeline, suite)
    product = pipeline.plan("", policy=RerankPolicy.NONE)
    depth = max(product.first_stage.per_retriever, product.candidates, 300)
    queries = []
    for qid, query in suite.evalset.queries.items():
        both = runner._first_stages(pipeline, query, Retrieval.HYBRID, depth)
        window, deep = (w[Retrieval.HYBRID] for w in both)
        scored = pipeline.second_stage(pipeline.plan(query, policy=RerankPolicy.REPLACE), window)
        by_id = {h.chunk.chunk_id: h.rerank_score for h in scored.hits if h.rerank_score is not None}
        scores = [by_id[c.chunk.chunk_id] for c in window[: len(by_id)]]
        in_window = {c.chunk.chunk_id for c in window}
        queries.append((qid, window, [c for c in deep if c.chunk.chunk_id not in in_window], scores))
    return queries, suite.evalset


def ndcg(queries: list, evalset, policy: Rrf | None) -> np.ndarray:
    rankings = {}
    for qid, window, tail, scores in queries:
        head = identity(window) if policy is None else ordered(policy, window, scores)
        rankings[qid] = runner._ranking(runner._window_then_tail(head, tail), evalset, qid, 100)
    values = per_query(evalset.qrels, rankings)["ndcg@10"]
    return np.array([values[qid] for qid, *_ in queries])


def sure(scores: list[float], gate: float) -> bool:
    return len(scores) > 1 and Rrf(gate=gate).sure(scores)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", nargs="*", default=list(SETS))
    parser.add_argument("--split", default="test", help="test, or dev (SciFact train, CoSQA and TAT-QA dev)")
    parser.add_argument("--model", default="builtin", help="a reranker spec: builtin, onnx:DIR")
    parser.add_argument("--limit", type=int, default=None, help="queries per set (default: all; TAT-QA 400)")
    parser.add_argument("--gates", default="0,0.1,0.15,0.2,0.3")
    parser.add_argument("--weights", default="0.5,1,2")
    parser.add_argument("--table", action="store_true", help="hybrid, rrf:1 and rrf:1|gate:0.2 with paired p")
    args = parser.parse_args()
    gates = [float(g) for g in args.gates.split(",")]
    weights = [float(w) for w in args.weights.split(",")]
    pooled: dict[str, list[np.ndarray]] = {}
    for name in args.sets:
        limit = args.limit or (400 if name == "tatqa" else None)
        queries, evalset = windows(name, args.split, args.model, limit)
        hybrid = ndcg(queries, evalset, None)
        pooled.setdefault("hybrid", []).append(hybrid)
        if args.table:
            rrf, gated = ndcg(queries, evalset, Rrf()), ndcg(queries, evalset, Rrf(gate=0.2))
            share = np.mean([sure(q[3], 0.2) for q in queries])
            cells = []
            for key, values in (("rrf:1", rrf), ("rrf:1|gate:0.2", gated)):
                pooled.setdefault(key, []).append(values)
                p, _ = paired_p_values(list(values), list(hybrid))
                cells.append(f"{values.mean():.4f} ({values.mean() - hybrid.mean():+.3f}, p={p:.3f})")
            print(f"| {name} ({len(queries)}) | {args.model} | {hybrid.mean():.4f} | {' | '.join(cells)} | "
                  f"{share:.0%} |", flush=True)
            continue
        cells = []
        for gate in gates:
            for weight in weights:
                values = ndcg(queries, evalset, Rrf(weight=weight, gate=gate))
                pooled.setdefault(f"gate {gate:g} rrf:{weight:g}", []).append(values)
                cells.append(f"{gate:g}/{weight:g} {values.mean() - hybrid.mean():+.4f}")
        print(f"{name} ({len(queries)}, hybrid {hybrid.mean():.4f}): " + "; ".join(cells), flush=True)
    base = np.concatenate(pooled.pop("hybrid"))
    for key, parts in pooled.items():
        values = np.concatenate(parts)
        p, _ = paired_p_values(list(values), list(base))
        print(f"pooled ({len(base)} queries) {key}: {values.mean() - base.mean():+.4f} (p={p:.3f})")


if __name__ == "__main__":
    main()
