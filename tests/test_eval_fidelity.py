"""funnel eval measures the product: each variant's top-k equals what Pipeline.search returns."""

from funnel.embed import HashingEmbedder
from funnel.eval.beir import EvalSet
from funnel.eval.runner import run_eval
from funnel.eval.variants import DEFAULT, parse_variants
from funnel.index.lance import LanceStore
from funnel.engine_config import EngineConfig
from funnel.pipeline import Pipeline
from funnel.rerank.lexical import LexicalReranker


def test_runner_top_k_matches_search_for_every_variant(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "long.md").write_text("\n\n".join(f"# Part {i}\n\nZebra migration across the plains, part {i}. " * 3
                                              for i in range(40)))
    for i in range(8):
        (docs / f"small{i}.md").write_text(f"Note {i}: the zebra herd crossed the river plains in season {i}.\n")
    pipeline = Pipeline.build(EngineConfig.of(k=5, candidates=10), store=LanceStore(tmp_path / "idx"), embedder=HashingEmbedder(dim=64), reranker=LexicalReranker())
    pipeline.ingest([docs])
    queries = {"q1": "zebra migration plains", "q2": "herd crossed the river", "q3": "season 3 note"}
    evalset = EvalSet("t", "test", "record", queries, {q: {"x": 1} for q in queries})
    run = run_eval(pipeline, evalset, parse_variants(DEFAULT), depth=20)
    for name, variant_run in run.variants.items():
        variant = variant_run.variant
        for qid, query in queries.items():
            result = pipeline.search(query, policy=variant.policy, retrieval=variant.retrieval)
            expected = [d.doc_id for d in result.documents]
            assert variant_run.rankings[qid][: len(expected)] == expected, (name, qid)
