"""Where a query's time goes, in FLOPs: hybrid first stage + built-in reranker (25 candidates) + group.

    .venv/bin/python bench/query_flops.py --limit 100

On SciFact test queries (index cached in bench/out/scifact-minilm, built on first run) this prints per stage
p50/p95 ms and, for the two transformer passes, the work done: tokens, GFLOP (counted from the ONNX graphs:
every MatMul with a weight matrix is 2*K*N per token, attention is 2 * 2 * seq * hidden per token and layer)
and the rate achieved. The rate is set against the practical peak of the same onnxruntime int8 kernel
(dynamic-quantised MatMul, per-channel weights, 2 threads) measured here on one large 384 x 1536 matmul, so
"achieved fraction" says how much of what this CPU's int8 GEMM can do the pipeline gets.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from funnel.embed.onnx import OnnxEmbedder
from funnel.eval.beir import load_beir, load_corpus, split_dir
from funnel.index.lance import LanceStore
from funnel.engine_config import EngineConfig
from funnel.pipeline import Pipeline
from funnel.rerank.onnx_cross_encoder import OnnxCrossEncoder
from funnel.rerank.policies import RerankPolicy


def graph_cost(model_path: Path) -> tuple[float, int, int]:
    """(linear FLOPs per token, layers, hidden size) of a BERT-family ONNX graph."""
    import onnx

    model = onnx.load(str(model_path), load_external_data=False)
    weights = {i.name: tuple(i.dims) for i in model.graph.initializer}
    linear = 0.0
    for node in model.graph.node:
        if node.op_type in ("MatMul", "MatMulInteger") and len(node.input) > 1:
            shape = weights.get(node.input[1])
            if shape and len(shape) == 2:
                linear += 2.0 * shape[0] * shape[1]
    layers = sum(1 for n in model.graph.node if n.op_type == "Softmax")
    hidden = min(s for s in (s[0] for s in weights.values() if len(s) == 2 and s[0] == s[1]))  # q/k/v/o
    return linear, layers, hidden


def flops(tokens: int, linear_per_token: float, layers: int, hidden: int) -> float:
    return tokens * linear_per_token + layers * 4.0 * tokens * tokens * hidden


def int8_peak(threads: int, m: int = 5400, k: int = 384, n: int = 1536) -> float:
    """FLOP/s of onnxruntime's dynamic int8 MatMul on one large matmul (the kernel the models use)."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization import QuantType, quantize_dynamic

    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((k, n)).astype(np.float32), "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["Y"])], "peak",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, k])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, n])], [weight],
    )
    with tempfile.TemporaryDirectory() as tmp:
        fp32, int8 = Path(tmp) / "m.onnx", Path(tmp) / "m8.onnx"
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(fp32))
        logging.getLogger().setLevel(logging.ERROR)  # quantize_dynamic's advice on pre-processing
        quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8, per_channel=True)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        session = ort.InferenceSession(str(int8), options, providers=["CPUExecutionProvider"])
    x = rng.standard_normal((m, k)).astype(np.float32)
    session.run(None, {"X": x})
    runs = []
    for _ in range(30):
        t = time.perf_counter()
        session.run(None, {"X": x})
        runs.append(time.perf_counter() - t)
    return 2.0 * m * k * n / min(runs)  # the best run: what the kernel can do when nothing else runs


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dataset", type=Path, default=Path("../shared/datasets/scifact"))
    parser.add_argument("--split", default="test")
    parser.add_argument("--limit", type=int, default=100)
    parser.add_argument("--candidates", type=int, default=25)
    parser.add_argument("--out", type=Path, default=Path("bench/out"))
    args = parser.parse_args()

    embedder = OnnxEmbedder.default()
    reranker = OnnxCrossEncoder.builtin()
    embedder.warm_up()
    reranker.warm_up()
    config = EngineConfig.of(k=10, candidates=args.candidates, policy=RerankPolicy.RRF)
    pipeline = Pipeline.build(config, store=LanceStore(args.out / "scifact-minilm"), embedder=embedder, reranker=reranker)
    pipeline.indexer.ingest_documents(load_corpus(split_dir(args.dataset, args.split)))
    queries = list(load_beir(args.dataset, args.split).queries.items())[: args.limit]

    emb_linear, emb_layers, emb_hidden = graph_cost(embedder.model_path)
    ce_linear, ce_layers, ce_hidden = graph_cost(reranker.model_path)
    for _, text in queries[:3]:
        pipeline.search(text)  # warm caches
    stages: dict[str, list[float]] = {"first_stage": [], "rerank": [], "group": [], "total": []}
    query_tokens, pair_tokens, rerank_flops, embed_flops = [], [], [], []
    for _, text in queries:
        result = pipeline.search(text)
        for name, ms in result.timings_ms.items():
            stages[name].append(ms)
        stages["total"].append(sum(result.timings_ms.values()))
        q = len(embedder._tokenizer.encode(text).ids)
        query_tokens.append(q)
        embed_flops.append(flops(q, emb_linear, emb_layers, emb_hidden))
        pairs = reranker._tokenizer.encode_batch([(text, h.chunk.text) for h in result.hits])
        lengths = [len(e.ids) for e in pairs]
        pair_tokens.extend(lengths)
        rerank_flops.append(sum(flops(n, ce_linear, ce_layers, ce_hidden) for n in lengths))

    threads = reranker.threads
    peak = int8_peak(threads)
    rerank_rate = statistics.median(rerank_flops) / (statistics.median(stages["rerank"]) / 1000)
    print(f"# {args.dataset.name} {args.split}, {len(queries)} queries, {args.candidates} candidates, "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, {threads} ORT threads, "
          f"{time.strftime('%Y-%m-%d')}")
    print("| stage | p50 ms | p95 ms |\n|---|---:|---:|")
    for name, values in stages.items():
        print(f"| {name} | {statistics.median(values):.1f} | {pct(values, 95):.1f} |")
    print(f"\nquery embedding: {statistics.mean(query_tokens):.0f} tokens, "
          f"{statistics.mean(embed_flops) / 1e9:.2f} GFLOP ({emb_layers} layers, hidden {emb_hidden})")
    print(f"rerank: {len(pair_tokens) / len(queries):.1f} pairs x {statistics.mean(pair_tokens):.0f} tokens, "
          f"{statistics.median(rerank_flops) / 1e9:.1f} GFLOP per query (p50), "
          f"{ce_linear / 1e6:.1f} MFLOP per token in weight matmuls")
    print(f"int8 matmul practical peak ({threads} threads, 5400x384x1536): {peak / 1e9:.0f} GFLOP/s")
    print(f"rerank achieved: {rerank_rate / 1e9:.0f} GFLOP/s = {rerank_rate / peak:.0%} of that peak; "
          f"at the peak the rerank would take {statistics.median(rerank_flops) / peak * 1000:.0f} ms")


if __name__ == "__main__":
    main()
