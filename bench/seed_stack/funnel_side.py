"""Roles funnel-ingest and funnel-query (run in .venv): funnel's own pipeline, as `funnel ingest` and
`funnel search` run it; and funnel's chunk texts for --seed-chunks funnel."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from .common import vm_hwm_mb


def role_funnel_ingest(spec: dict) -> dict:
    from funnel.embed import load_embedder
    from funnel.eval.beir import load_corpus
    from funnel.index.lance import LanceStore
    from funnel.pipeline import Pipeline

    index = Path(spec["index"])
    shutil.rmtree(index, ignore_errors=True)
    started = time.perf_counter()
    embedder = load_embedder("minilm", threads=spec["threads"])
    embedder.warm_up()
    pipeline = Pipeline.build(store=LanceStore(index), embedder=embedder, reranker=None)
    keep = set(spec["keep"]) if spec["keep"] is not None else None
    report = pipeline.indexer.ingest_documents(load_corpus(Path(spec["corpus"]), keep))
    ingest_s = time.perf_counter() - started
    info = pipeline.store.info()
    # As `funnel ingest` does: calibrate the second stage on the new index (timed apart from the ingest).
    from funnel.rerank.onnx_cross_encoder import OnnxCrossEncoder

    started = time.perf_counter()
    calibration = Pipeline.build(store=pipeline.store, embedder=embedder, reranker=OnnxCrossEncoder.builtin(threads=spec["threads"])).calibrate()
    return {"ingest_s": ingest_s, "documents": info.documents, "units": info.chunks, "embedded": report.chunks,
            "problems": [str(p) for p in report.problems], "rss_peak_mb": vm_hwm_mb(),
            "calibrate_s": time.perf_counter() - started, "calibration": calibration.option,
            "calibration_reason": calibration.reason}


def role_funnel_query(spec: dict) -> dict:
    from funnel.embed import load_embedder
    from funnel.index.lance import LanceStore
    from funnel.engine_config import EngineConfig
    from funnel.pipeline import Pipeline
    from funnel.rerank.onnx_cross_encoder import OnnxCrossEncoder
    from funnel.rerank.policies import RerankPolicy

    # builtin: the reranker under rrf, always; default: the shipped default (builtin under `auto`, i.e. the
    # index's calibration); none: the first stage alone.
    threads, mode = spec["threads"], spec["funnel_reranker"]
    rerank = mode in ("builtin", "default")
    started = time.perf_counter()
    embedder = load_embedder("minilm", threads=threads)
    reranker = OnnxCrossEncoder.builtin(threads=threads) if rerank else None
    embedder.warm_up()
    if reranker is not None:
        reranker.warm_up()
    policy = {"builtin": RerankPolicy.RRF, "default": RerankPolicy.AUTO}.get(mode, RerankPolicy.NONE)
    config = EngineConfig.of(k=10, candidates=spec["candidates"], policy=policy)
    pipeline = Pipeline.build(config, store=LanceStore(Path(spec["index"])), embedder=embedder, reranker=reranker)
    load_s = time.perf_counter() - started

    if spec.get("langchain"):  # the same pipeline called through funnel's LangChain retriever
        from funnel.integrations.langchain import FunnelRetriever

        retriever = FunnelRetriever(pipeline=pipeline)

        def search(text: str):
            found = retriever.invoke(text)
            return [d.metadata["doc_id"] for d in found], (found[0].metadata["rerank_status"] if found else
                                                           "empty"), None
    else:
        def search(text: str):
            result = pipeline.search(text)
            return [d.doc_id for d in result.documents], result.rerank_status.value, result

    for text in spec["warmup"]:
        search(text)
    out = {"final": {}, "query_ms": [], "statuses": {}, "short_rankings": 0, "check": []}
    for qid, text in spec["queries"]:
        t0 = time.perf_counter()
        ids, status, result = search(text)
        out["query_ms"].append(1000 * (time.perf_counter() - t0))
        out["final"][qid] = ids
        out["short_rankings"] += len(ids) < 10
        out["statuses"][status] = out["statuses"].get(status, 0) + 1
        if result is not None and mode == "builtin" and len(out["check"]) < spec["check_queries"]:
            out["check"].append({"query": result.query, "texts": [h.chunk.text for h in result.hits]})
    out.update(load_s=load_s, rss_peak_mb=vm_hwm_mb(), reranker=getattr(reranker, "name", "none"))
    return out


def funnel_chunks(corpus: Path, keep: set[str] | None, path: Path) -> int:
    """funnel's chunk texts for --seed-chunks funnel (computed here, so not counted in the seed's ingest)."""
    from funnel.embed import load_embedder
    from funnel.eval.beir import load_corpus
    from funnel.ingest.chunk import chunk_document

    embedder = load_embedder("minilm")
    embedder.warm_up()
    count = 0
    with open(path, "w", encoding="utf-8") as fh:
        for doc in load_corpus(corpus, keep):
            for chunk in chunk_document(doc, embedder, embedder.max_tokens):
                fh.write(json.dumps({"doc_id": chunk.doc_id, "text": chunk.text}) + "\n")
                count += 1
    return count
