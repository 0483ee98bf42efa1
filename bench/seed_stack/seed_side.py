"""Role seed (runs in .venv-seed): seed 001's stack from LangChain's parts, built from the raw corpus and
searched; seed-funnel reuses its documents and first stage."""

from __future__ import annotations

import time
from pathlib import Path

from .common import packaged_minilm_dir, read_jsonl, unique, vm_hwm_mb


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
