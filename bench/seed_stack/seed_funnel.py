"""Role seed-funnel (runs in .venv-seed, where funnel is installed too): the seed's first stage, unchanged,
with funnel's FunnelReranker as its LangChain compressor, timed beside the seed's own CrossEncoder search."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from .common import unique, vm_hwm_mb
from .seed_side import seed_documents, seed_embeddings, seed_first_stage


class TimedReranker:
    """A funnel Reranker that records how long each call of the model it wraps takes."""

    def __init__(self, inner):
        self.inner, self.name, self.ms = inner, inner.name, []

    def warm_up(self) -> None:
        self.inner.warm_up()

    def rerank(self, query, candidates):
        started = time.perf_counter()
        try:
            return self.inner.rerank(query, candidates)
        finally:
            self.ms.append(1000 * (time.perf_counter() - started))



class SeedFunnelRun:
    """One seed + FunnelReranker run: the seed's ensemble, funnel's reranker behind its score cache with a
    compressor per policy, the seed's CrossEncoder for the paired timing, and what was measured (`out`)."""

    def __init__(self, spec: dict) -> None:
        threads = spec["threads"]
        import faiss
        import torch

        torch.set_num_threads(threads)
        faiss.omp_set_num_threads(threads)
        from langchain_classic.retrievers import ContextualCompressionRetriever
        from langchain_core.runnables import RunnableLambda
        from sentence_transformers import CrossEncoder

        from funnel.integrations.langchain import FunnelReranker
        from funnel.rerank.cache import CachedReranker
        from funnel.rerank.onnx_cross_encoder import OnnxCrossEncoder

        self.docs = seed_documents(spec)
        self.ensemble, _ = seed_first_stage(spec, self.docs, seed_embeddings(), Path(spec["seed_faiss"]))
        self.n = n = spec["candidates"]
        base = self.ensemble | RunnableLambda(lambda found: found[:n])  # the seed's `ensemble.invoke(query)[:n]`

        started = time.perf_counter()
        # What FunnelReranker(reranker="builtin") builds (the built-in int8 model behind the score cache), with
        # the thread count every system here gets.
        self.timed = TimedReranker(OnnxCrossEncoder.builtin(threads=threads))
        self.shared = CachedReranker(self.timed)
        self.shared.warm_up()
        self.load_s = time.perf_counter() - started
        self.policies = policies = spec["funnel_policies"]
        self.compressors = {p: FunnelReranker(reranker=self.shared, policy=p, top_n=n, document_key="doc_id")
                            for p in policies}
        self.timed_retriever = ContextualCompressionRetriever(base_compressor=self.compressors[policies[0]],
                                                              base_retriever=base)
        self.cross = CrossEncoder(spec["cross_encoder"], max_length=spec["max_length"], device="cpu")
        self.every = spec.get("paired_every", 1)
        self.out = {"final": {p: {} for p in policies}, "query_ms": {policies[0]: []}, "model_ms": [],
                    "statuses": {p: {} for p in policies}, "first_stage": {}, "few_candidates": 0,
                    "paired_seed_ms": [], "paired_funnel_ms": [], "paired_seed_final": {}, "loadavg_1min": []}

    def seed_search(self, query: str) -> tuple[float, list[str]]:
        """role_seed's search, timed; its ranking kept for the paired nDCG."""
        t0 = time.perf_counter()
        candidates = self.ensemble.invoke(query)[:self.n]
        scores = self.cross.predict([(query, d.page_content) for d in candidates], show_progress_bar=False)
        order = sorted(range(len(candidates)), key=lambda i: -float(scores[i]))
        ms = 1000 * (time.perf_counter() - t0)
        return ms, unique(candidates[i].metadata["doc_id"] for i in order)

    def warm_up(self, texts: list[str]) -> None:
        for text in texts:
            self.seed_search(text)
            self.timed_retriever.invoke(text)

    def time_seed(self, qid: str, text: str) -> None:
        ms, ranking = self.seed_search(text)
        self.out["paired_seed_final"][qid] = ranking
        self.out["paired_seed_ms"].append(ms)

    def query(self, number: int, qid: str, text: str) -> None:
        """One query: the first policy timed end to end (the seed's search before or after it, alternating,
        on every `paired_every`-th query), then the other policies on its scores."""
        out = self.out
        out["loadavg_1min"].append(os.getloadavg()[0])
        paired, seed_first = number % self.every == 0, (number // self.every) % 2 == 0
        if paired and seed_first:
            self.time_seed(qid, text)
        calls = len(self.timed.ms)
        t0 = time.perf_counter()
        found = self.timed_retriever.invoke(text)
        ms = 1000 * (time.perf_counter() - t0)
        out["query_ms"][self.policies[0]].append(ms)
        out["model_ms"].append(sum(self.timed.ms[calls:]))
        if paired:
            out["paired_funnel_ms"].append(ms)
            if not seed_first:
                self.time_seed(qid, text)
        self.record_policies(qid, text, found)

    def record_policies(self, qid: str, text: str, found: list) -> None:
        """The first stage's ranking and every policy's, from the first policy's documents `found`."""
        out, policies = self.out, self.policies
        # The same 25 documents in the first stage's order, without funnel's metadata, for the other policies.
        by_input = sorted(found, key=lambda d: d.metadata["input_rank"])
        incoming = [type(d)(page_content=d.page_content, metadata={"doc_id": d.metadata["doc_id"]})
                    for d in by_input]
        out["first_stage"][qid] = unique(d.metadata["doc_id"] for d in by_input)
        out["few_candidates"] += len(found) < self.n
        for p in policies:
            ranked = found if p == policies[0] else self.compressors[p].compress_documents(incoming, text)
            out["final"][p][qid] = unique(d.metadata["doc_id"] for d in ranked)
            status = ranked[0].metadata["rerank_status"] if ranked else "empty"
            out["statuses"][p][status] = out["statuses"][p].get(status, 0) + 1

    def result(self) -> dict:
        self.out.update(units=len(self.docs), load_s=self.load_s, rss_peak_mb=vm_hwm_mb(),
                        cache_hits=self.shared.hits, cache_misses=self.shared.misses, reranker=self.shared.name)
        return self.out


def role_seed_funnel(spec: dict) -> dict:
    """The seed's first stage, unchanged, with funnel's FunnelReranker as the LangChain compressor
    (ContextualCompressionRetriever) instead of the CrossEncoder. Runs in .venv-seed, where funnel is
    installed too. The first policy is timed end to end per query; the others rerank the same 25 documents
    on its scores (the reranker's cache: same pairs, same scores, only the policy's arithmetic differs) and
    are not timed. The seed's own CrossEncoder search runs here too on every `paired_every`-th query,
    interleaved with the first policy (which goes first alternates), so those latencies are paired under
    the same machine load."""
    run = SeedFunnelRun(spec)
    run.warm_up(spec["warmup"])  # its rankings are not kept, unlike those of the paired queries
    partial = Path(spec["partial"]) if spec.get("partial") else None
    for number, (qid, text) in enumerate(spec["queries"]):
        if partial is not None and number % 5 == 0:  # what is done so far, for a run cut short
            partial.write_text(json.dumps({**run.out, "done": number}))
        run.query(number, qid, text)
    return run.result()
