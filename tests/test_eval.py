"""`funnel eval`: loading BEIR folders and question sets, metrics against ranx and closed forms,
variant comparisons, the runner end to end, the seed 001 replay with the real embedder, and the CLI."""

import json
import math
import os
import random
import re
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from funnel.embed import HashingEmbedder, load_embedder
from funnel.errors import ConfigError
from funnel.eval import report
from funnel.eval.beir import load_beir
from funnel.eval.compare import compare, paired_p_values
from funnel.eval.metrics import MEASURES, as_run, per_query
from funnel.eval.questions import load_questions, source_key
from funnel.eval.runner import run_eval
from funnel.eval.suite import build_index, open_suite
from funnel.eval.variants import DEFAULT, Variant, answerers, parse_variants
from funnel.index.lance import LanceStore
from funnel.ingest.pdf import load_pdf
from funnel.engine_config import EngineConfig
from funnel.pipeline import Pipeline
from funnel.rerank.policies import RerankPolicy
from funnel.retrieve.first_stage import Retrieval
from funnel.types import RerankResult, SectionKind

from helpers import FailingReranker

ROOT = Path(__file__).parents[1]
DATASETS = ROOT.parent / "shared" / "datasets"
QUESTIONS = ROOT / "samples" / "eval" / "questions.yaml"
FUNNEL = [sys.executable, "-c", "from funnel.apps.cli import run; run()"]
RERANK_VARIANTS = ("hybrid+rerank(replace)", "hybrid+rerank(guaranteed_slots)", "hybrid+rerank(rrf)")

needs_datasets = pytest.mark.skipif(not DATASETS.is_dir(), reason="../shared/datasets is not checked out")

CORPUS = {
    "anvil": "Acme forges anvils from hardened steel at its Ohio works.",
    "roadrunner": "Roadrunners sprint across the desert at great speed.",
    "coyote": "Coyotes chase roadrunners through the desert with rockets.",
    "torque": "Gears transmit torque between parallel shafts.",
    "worm": "Worm gears reduce rotational speed by a large ratio.",
    "cactus": "The saguaro cactus stores water in its pleated stem.",
}
QUERIES = {
    "q1": "who forges anvils from steel",
    "q2": "roadrunners in the desert",
    "q3": "worm gears reduce speed",
    "q4": "torque between shafts",
}
QRELS = {"q1": {"anvil": 1}, "q2": {"roadrunner": 2, "coyote": 1}, "q3": {"worm": 1}, "q4": {"torque": 1}}


def write_beir(root: Path, corpus=CORPUS, queries=QUERIES, qrels=QRELS, split="test") -> Path:
    """A BEIR folder: corpus.jsonl, queries.jsonl, qrels/<split>.tsv."""
    (root / "qrels").mkdir(parents=True, exist_ok=True)
    records = [{"_id": d, "title": "", "text": t} for d, t in corpus.items()]
    (root / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    lines = [json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries.items()]
    (root / "queries.jsonl").write_text("".join(lines))
    rows = [f"{q}\t{d}\t{s}" for q, rel in qrels.items() for d, s in rel.items()]
    (root / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n" + "\n".join(rows) + "\n")
    return root


# --- BEIR folders ---------------------------------------------------------------------------------------


@needs_datasets
def test_scifact_test_split():
    s = load_beir(DATASETS / "scifact", "test")
    assert (s.level, s.split, len(s.queries), sum(map(len, s.qrels.values()))) == ("record", "test", 300, 339)
    assert s.skipped == {} and s.parents == {} and not s.by_path
    assert set(s.queries) == set(s.qrels)


@needs_datasets
def test_tatqa_chunk_and_document_levels():
    chunk = load_beir(DATASETS / "tatqa", "test", "chunk")
    document = load_beir(DATASETS / "tatqa", "test", "document")
    assert load_beir(DATASETS / "tatqa", "test").level == "chunk"  # auto prefers the finer judgments
    assert (chunk.level, len(chunk.queries), chunk.parents) == ("chunk", 1663, {})
    assert (document.level, len(document.queries), len(document.parents)) == ("document", 1663, 1556)
    assert len(set(document.parents.values())) == 277
    # A judged chunk's parent is the judged document of the same question.
    for qid, judged in chunk.qrels.items():
        assert {document.parents[r] for r in judged} <= set(document.qrels[qid])


@needs_datasets
def test_cosqa_test_split():
    s = load_beir(DATASETS / "cosqa", "test")
    assert (s.level, len(s.queries), sum(map(len, s.qrels.values())), s.skipped) == ("record", 500, 500, {})


@needs_datasets
def test_a_missing_split_of_a_real_set_names_what_exists():
    with pytest.raises(ConfigError, match=r"no split 'train'; found: dev, test"):
        load_beir(DATASETS / "tatqa", "train")
    with pytest.raises(ConfigError, match=r"split 'dev'.*found: test.tsv, train.tsv"):
        load_beir(DATASETS / "scifact", "dev")


def test_missing_corpus_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="no corpus.jsonl"):
        load_beir(tmp_path)


def test_a_split_that_does_not_exist_lists_the_splits(tmp_path):
    write_beir(tmp_path / "dev", split="dev")
    write_beir(tmp_path / "test")
    with pytest.raises(ConfigError, match=r"no split 'train'; found: dev, test"):
        load_beir(tmp_path, "train")
    assert len(load_beir(tmp_path, "dev").queries) == 4


@pytest.mark.parametrize("file", ["corpus.jsonl", "queries.jsonl"])
def test_malformed_json_names_file_and_line(tmp_path, file):
    write_beir(tmp_path)
    lines = (tmp_path / file).read_text().splitlines()
    lines[2] = '{"_id": "broken", "text": '
    (tmp_path / file).write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match=rf"{file}:3: not JSON"):
        load_beir(tmp_path)


def test_a_record_without_id_names_file_and_line(tmp_path):
    write_beir(tmp_path)
    with open(tmp_path / "corpus.jsonl", "a") as fh:
        fh.write('{"title": "no id", "text": "orphan"}\n')
    with pytest.raises(ConfigError, match=r"corpus.jsonl:7: expected a JSON object with an '_id'"):
        load_beir(tmp_path)


@pytest.mark.parametrize(
    "tsv, message",
    [("query-id\tcorpus-id\tscore\nq1\tanvil\thigh\n", r"test.tsv:2: expected .* integer score"),
     ("qid\tdocid\trel\nq1\tanvil\t1\n", "expected a header query-id, corpus-id, score")],
)
def test_bad_qrels_are_config_errors(tmp_path, tsv, message):
    write_beir(tmp_path)
    (tmp_path / "qrels" / "test.tsv").write_text(tsv)
    with pytest.raises(ConfigError, match=message):
        load_beir(tmp_path)


def test_judgments_naming_unknown_records_are_counted_not_used(tmp_path):
    qrels = {**QRELS, "q1": {"anvil": 1, "ghost": 1}, "q3": {"ghost": 2, "phantom": 1}}
    s = load_beir(write_beir(tmp_path, qrels=qrels))
    assert s.skipped == {
        "judgments naming ids not in the corpus": 3, "queries with no relevant judged document": 1}
    assert s.qrels["q1"] == {"anvil": 1} and "q3" not in s.qrels and "q3" not in s.queries
    assert not any(d in {"ghost", "phantom"} for rel in s.qrels.values() for d in rel)


def test_judged_queries_without_text_are_counted_not_used(tmp_path):
    queries = {"q1": QUERIES["q1"], "q2": "   ", "q3": QUERIES["q3"]}  # q4 is judged but absent
    s = load_beir(write_beir(tmp_path, queries=queries))
    assert set(s.queries) == set(s.qrels) == {"q1", "q3"}
    assert s.skipped == {"judged queries missing from the queries file": 1, "judged queries without text": 1}


def test_no_judged_query_left_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="no judged queries left"):
        load_beir(write_beir(tmp_path, qrels={"q1": {"ghost": 1}}))


# --- question sets --------------------------------------------------------------------------------------


def test_the_sample_question_set_loads():
    qs = load_questions(QUESTIONS)
    s = qs.evalset
    assert qs.documents == ((ROOT / "samples" / "docs").resolve(),)
    assert (s.level, s.by_path, s.skipped) == ("document", True, {})
    assert 12 <= len(set(s.queries) - s.abstain) <= 19 and len(s.abstain) >= 8
    assert s.queries["ceo"] == "Who is the CEO of Zentara Robotics?"
    assert s.qrels["ceo"] == {"portfolio_companies.pdf": 1} and s.answers["ceo"] == ["Iris Kallas"]
    assert all(s.qrels[q] and s.answers[q] for q in s.queries if q not in s.abstain)
    # `expect: abstain`: asked and answered, judged by whether the answer abstained, never scored for ranking
    assert all(not s.qrels[q] and not s.answers.get(q) for q in s.abstain)
    assert s.queries["unanswerable_heron"] == "Who leads Project Heron and what is its budget?"


@pytest.mark.parametrize("entry, problem", [
    ({"question": "q", "expect": "refuse"}, "'expect' may only be 'abstain'"),
    ({"question": "q", "expect": "abstain", "sources": ["a.txt"]}, "takes no 'sources' or 'answer_contains'"),
])
def test_expect_takes_abstain_alone(tmp_path, entry, problem):
    path = tmp_path / "q.yaml"
    path.write_text(json.dumps({"documents": ".", "questions": [entry]}))
    with pytest.raises(ConfigError, match=problem):
        load_questions(path)


@pytest.mark.slow
def test_every_expected_answer_is_in_its_source_text():
    s = load_questions(QUESTIONS).evalset
    docs = ROOT / "samples" / "docs"

    def text(name):
        if name.endswith(".pdf"):
            return " ".join(sec.text for sec in load_pdf(docs / name, name, name).sections)
        return (docs / name).read_text()

    for qid, expected in s.answers.items():
        sources = " ".join(" ".join(text(name).split()) for name in s.qrels[qid])
        assert all(e in sources for e in expected), qid


@pytest.mark.parametrize(
    "content, message",
    [
        ("documents: docs\nquestions: []\n", "the question set is empty"),
        ("", "expected a mapping with a 'questions' list"),
        ("questions:\n  - sources: [a.txt]\n", "question 1: needs a non-empty 'question'"),
        ("questions:\n  - {question: '  ', sources: a.txt}\n", "question 1: needs a non-empty 'question'"),
        ("questions: [ {question: x\n", "not valid YAML"),
        ("questions:\n  - question: Who?\n  - question: Why?\n",
         "no question has 'sources', 'answer_contains' or 'expect'"),
        ("questions:\n  - {id: a, question: x, sources: a.txt}\n  - {id: a, question: y, sources: b.txt}\n",
         "question 2: duplicate id 'a'"),
        ("questions:\n  - {question: x, answer_contains: [1, 2]}\n", "answer_contains: expected a string"),
        ("questions:\n  - {question: x, sources: a.txt}\n", "no documents to search"),
        ("questions:\n  - {question: x, sources: [a.pdf, b.pdf], page: 2}\n", "'page' needs exactly one entry"),
        ("questions:\n  - {question: x, sources: a.pdf, page: second}\n", "'page' must be a page number"),
        ("questions:\n  - {question: x, sources: a.pdf, page: [0]}\n", "'page' must be a page number"),
    ],
)
def test_bad_question_sets_are_config_errors(tmp_path, content, message):
    path = tmp_path / "qs.yaml"
    path.write_text(content)
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_questions(path)


def test_questions_without_expectations_are_counted(tmp_path):
    path = tmp_path / "qs.yaml"
    path.write_text("documents: docs\nquestions:\n"
                    "  - question: Why?\n  - {question: 'Who?', answer_contains: Roe}\n")
    s = load_questions(path).evalset
    assert list(s.queries) == ["q2"] and s.answers == {"q2": ["Roe"]} and s.qrels == {"q2": {}}
    assert s.skipped == {"questions without sources or answer_contains": 1}


def test_jsonl_question_set_takes_documents_from_the_caller(tmp_path):
    path = tmp_path / "qs.jsonl"
    path.write_text('{"question": "Who?", "sources": ["a.txt"]}\n{"question": \n')
    with pytest.raises(ConfigError, match=r"qs.jsonl:2: not JSON"):
        load_questions(path)
    path.write_text('{"question": "Who?", "sources": ["a.txt"]}\n')
    assert load_questions(path, [tmp_path]).documents == (tmp_path,)


def test_sources_match_whole_path_suffixes():
    assert source_key("/data/docs/report.pdf", ["report.pdf"]) == "report.pdf"
    assert source_key("/data/docs/report.pdf", ["docs/report.pdf"]) == "docs/report.pdf"
    assert source_key("/data/docs/annual_report.pdf", ["report.pdf"]) == "/data/docs/annual_report.pdf"


# --- metrics --------------------------------------------------------------------------------------------


def test_metrics_match_closed_forms():
    qrels = {"q1": {"a": 1, "b": 2}, "q2": {"c": 1}}
    values = per_query(qrels, {"q1": ["x", "b", "a"], "q2": ["y", "z", "w", "c"]})
    ideal = 2 + 1 / math.log2(3)
    assert values["ndcg@10"]["q1"] == pytest.approx((2 / math.log2(3) + 1 / math.log2(4)) / ideal, abs=1e-9)
    assert values["ndcg@10"]["q2"] == pytest.approx(1 / math.log2(5), abs=1e-9)
    assert values["mrr@10"] == pytest.approx({"q1": 1 / 2, "q2": 1 / 4})
    assert values["recall@100"] == pytest.approx({"q1": 1.0, "q2": 1.0})
    assert values["hit@1"] == pytest.approx({"q1": 0.0, "q2": 0.0})
    assert values["hit@5"] == pytest.approx({"q1": 1.0, "q2": 1.0})
    # Our order is the ranking, whatever the ids: "b" before "a" (pytrec_eval alone would break ties by id).
    assert per_query({"q": {"a": 1}}, {"q": ["b", "a"]})["mrr@10"]["q"] == pytest.approx(0.5)
    scores = as_run({"q": ["z", "a", "m"]})["q"]
    assert scores["z"] > scores["a"] > scores["m"]


def test_an_empty_ranking_scores_zero_and_is_not_dropped():
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}, "q3": {"c": 1}}
    values = per_query(qrels, {"q1": ["a"], "q2": []})  # q3: no ranking at all
    for metric in MEASURES:
        assert values[metric] == pytest.approx({"q1": 1.0, "q2": 0.0, "q3": 0.0}), metric
    assert per_query(qrels, {})["ndcg@10"] == {"q1": 0.0, "q2": 0.0, "q3": 0.0}


def _agrees_with_ranx(qrels, rankings):
    from ranx import Qrels, Run, evaluate

    ours = per_query(qrels, rankings)
    run = Run(as_run(rankings))
    means = evaluate(Qrels(qrels), run, ["ndcg@10", "recall@100", "mrr@10"])
    for metric in ("ndcg@10", "recall@100", "mrr@10"):
        assert sum(ours[metric].values()) / len(ours[metric]) == pytest.approx(float(means[metric]), abs=1e-6)
        for qid, value in ours[metric].items():
            assert value == pytest.approx(float(run.scores[metric][qid]), abs=1e-6), (metric, qid)


@pytest.mark.slow
def test_metrics_agree_with_ranx_on_random_graded_rankings():
    rng = random.Random(7)
    docs = [f"d{i}" for i in range(150)]
    qrels = {
        f"q{i}": {d: rng.choice([1, 1, 2, 3]) for d in rng.sample(docs, rng.randint(1, 8))} for i in range(40)
    }
    rankings = {q: rng.sample(docs, rng.randint(5, 120)) for q in qrels}
    _agrees_with_ranx(qrels, rankings)


def _bm25(corpus: dict[str, str], queries: dict[str, str], depth=100, k1=0.9, b=0.4) -> dict[str, list[str]]:
    """A plain BM25 ranking, only to give the metrics a realistic run."""
    tokens = {d: re.findall(r"[a-z0-9]+", t.lower()) for d, t in corpus.items()}
    postings: dict[str, dict[str, int]] = {}
    for d, words in tokens.items():
        for w, f in Counter(words).items():
            postings.setdefault(w, {})[d] = f
    avg, n = sum(map(len, tokens.values())) / len(tokens), len(tokens)
    out = {}
    for qid, text in queries.items():
        scores: Counter = Counter()
        for w in set(re.findall(r"[a-z0-9]+", text.lower())) & postings.keys():
            idf = math.log(1 + (n - len(postings[w]) + 0.5) / (len(postings[w]) + 0.5))
            for d, f in postings[w].items():
                scores[d] += idf * f * (k1 + 1) / (f + k1 * (1 - b + b * len(tokens[d]) / avg))
        out[qid] = [d for d, _ in scores.most_common(depth)]
    return out


@needs_datasets
@pytest.mark.slow
def test_metrics_agree_with_ranx_on_a_bm25_run_over_scifact():
    s = load_beir(DATASETS / "scifact", "test")
    qids = list(s.queries)[:50]
    judged = {d for q in qids for d in s.qrels[q]}
    corpus = {}
    with open(DATASETS / "scifact" / "corpus.jsonl") as fh:
        for number, line in enumerate(fh):
            record = json.loads(line)
            if number < 1500 or record["_id"] in judged:
                corpus[record["_id"]] = f"{record['title']} {record['text']}"
    rankings = _bm25(corpus, {q: s.queries[q] for q in qids})
    qrels = {q: s.qrels[q] for q in qids}
    assert 0.4 < sum(per_query(qrels, rankings)["ndcg@10"].values()) / 50 < 1.0  # a real ranking, not noise
    _agrees_with_ranx(qrels, rankings)


# --- comparisons ----------------------------------------------------------------------------------------


def test_compare_lists_helped_and_hurt_queries_with_first_relevant_ranks():
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}, "q3": {"c": 1}, "q4": {"d": 1}}
    queries = {q: f"query {q}" for q in qrels}
    rankings = {
        "base": {"q1": ["x", "a"], "q2": ["b"], "q3": ["c"], "q4": ["x", "y", "d"]},
        "new": {"q1": ["a"], "q2": ["x", "y", "b"], "q3": ["c"], "q4": ["d"]},
    }
    values = {name: per_query(qrels, r) for name, r in rankings.items()}
    passed = {"base": {"q1": False, "q2": True, "q3": True}, "new": {"q1": True, "q2": False, "q3": True}}
    c = compare("new", "base", "ndcg@10", values, rankings, qrels, queries, passed)
    assert [(h.qid, h.rank_before, h.rank_after) for h in c.helped] == [("q4", 3, 1), ("q1", 2, 1)]
    assert [(h.qid, h.rank_before, h.rank_after) for h in c.hurt] == [("q2", 1, 3)]
    assert c.hurt[0].query == "query q2"
    assert c.hurt[0].before == pytest.approx(1.0) and c.hurt[0].after == pytest.approx(0.5)
    assert c.delta == pytest.approx((0.5 + (1 - 1 / math.log2(3)) - 0.5) / 4)
    assert (c.answers_fixed, c.answers_broken) == (("q1",), ("q2",))


def test_identical_variants_have_p_one():
    values = [0.1 * i for i in range(30)]
    assert paired_p_values(values, list(values)) == (1.0, 1.0)
    rankings = {q: ["a", "b"] for q in ("q1", "q2", "q3")}
    qrels = {q: {"b": 1} for q in rankings}
    v = {"x": per_query(qrels, rankings), "y": per_query(qrels, rankings)}
    c = compare("y", "x", "ndcg@10", v, {"x": rankings, "y": rankings}, qrels, dict.fromkeys(qrels, ""), {})
    assert (c.p_randomization, c.p_ttest, c.helped, c.hurt, c.delta) == (1.0, 1.0, (), (), 0.0)


def test_a_clearly_better_variant_has_a_small_p():
    rng = random.Random(3)
    qids = [f"q{i}" for i in range(30)]
    before = {q: rng.uniform(0.1, 0.5) for q in qids}
    after = {q: min(1.0, v + rng.uniform(0.2, 0.4)) for q, v in before.items()}
    values = {"base": {"ndcg@10": before}, "new": {"ndcg@10": after}}
    qrels, queries = dict.fromkeys(qids, {}), dict.fromkeys(qids, "")
    c = compare("new", "base", "ndcg@10", values, {"base": {}, "new": {}}, qrels, queries, {})
    assert c.p_randomization < 0.001 and c.p_ttest < 0.001
    assert len(c.helped) == 30 and c.hurt == ()


# --- variants -------------------------------------------------------------------------------------------


def test_variant_specs_parse():
    v = Variant.parse(" hybrid+rerank(guaranteed_slots) ")
    assert (v.name, v.retrieval, v.policy, v.reranks) == (
        "hybrid+rerank(guaranteed_slots)", Retrieval.HYBRID, RerankPolicy.GUARANTEED_SLOTS, True)
    assert (Variant.parse("bm25").retrieval, Variant.parse("bm25").reranks) == (Retrieval.BM25, False)
    assert [v.name for v in parse_variants(DEFAULT)] == ["bm25", "dense", "hybrid", *RERANK_VARIANTS, "default"]
    weighted = Variant.parse("hybrid+rerank(rrf:0.25)")
    assert (weighted.policy, weighted.weight, weighted.reranks) == (RerankPolicy.RRF, 0.25, True)
    assert weighted.gate is None  # the setting's gate (0 unless set)
    gated = Variant.parse("hybrid+rerank(rrf:1|gate:0.2)")
    assert (gated.policy, gated.weight, gated.gate) == (RerankPolicy.RRF, 1.0, 0.2)
    assert Variant.parse("hybrid+rerank(rrf|gate:0.1)").weight == 1.0
    assert Variant.parse("default").is_default and not Variant.parse("default").reranks
    assert [v.name for v in parse_variants("dense, bm25+rerank(rrf),")] == ["dense", "bm25+rerank(rrf)"]


def test_answerer_variants_parse():
    """`+answer(ANSWERER)` puts answerers side by side on the same ranking (issue 39)."""
    local = Variant.parse("default+answer(local)")
    assert (local.name, local.is_default, local.answerer, local.reranks) == ("default+answer(local)", True, "local",
                                                                             False)
    mixed = Variant.parse("hybrid+rerank(rrf:0.5)+answer(ollama:qwen2.5)")
    assert (mixed.policy, mixed.weight, mixed.answerer) == (RerankPolicy.RRF, 0.5, "ollama:qwen2.5")
    assert Variant.parse("hybrid").answerer is None
    specs = "default,default+answer(extractive),hybrid+answer(local),default+answer(local)"
    assert answerers(parse_variants(specs)) == ["extractive", "local"]
    with pytest.raises(ConfigError, match=re.escape("bad variant 'Hybrid'")):
        Variant.parse("Hybrid+answer(local)")


@pytest.mark.parametrize(
    "specs, message",
    [
        ("hybrid+rerank", "bad variant 'hybrid+rerank'; expected bm25, dense or hybrid"),
        ("Hybrid", "bad variant 'Hybrid'"),
        ("colbert", "unknown retrieval 'colbert'; valid: auto, hybrid, bm25, dense"),
        ("auto", "the calibrated first stage is the `default` variant"),
        ("hybrid+rerank(auto)", "the calibrated policy is the `default` variant"),
        ("hybrid+rerank(replace:0.5)", "only rrf takes a weight"),
        ("hybrid+rerank(replace|gate:0.2)", "only rrf takes a gate"),
        ("hybrid+rerank(rrf:1|gate:x)", "bad variant 'hybrid+rerank(rrf:1|gate:x)'"),
        ("hybrid+rerank(smart)", "unknown rerank policy 'smart'; valid: none, replace, guaranteed_slots"),
        ("bm25,hybrid,bm25", "a variant is listed twice"),
        (" , ", "no variants given"),
    ],
)
def test_bad_variant_specs(specs, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_variants(specs)


# --- the runner, end to end with the HashingEmbedder ----------------------------------------------------


class FondReranker:
    """Scores by doc id (0 for any other): says exactly what the model thinks of each record."""

    name = "fond"

    def __init__(self, scores: dict[str, float]):
        self.scores = scores
        self.calls = 0

    def rerank(self, query, candidates):
        self.calls += 1
        return RerankResult(tuple(self.scores.get(c.chunk.doc_id, 0.0) for c in candidates))


@pytest.fixture
def beir_suite(tmp_path):
    suite = open_suite(write_beir(tmp_path / "tiny"))
    index = tmp_path / "index"
    build_index(Pipeline.build(store=LanceStore(index), embedder=HashingEmbedder(), reranker=None), suite)

    def pipeline(reranker=None):
        return Pipeline.build(store=LanceStore(index), embedder=HashingEmbedder(), reranker=reranker)

    return suite, pipeline


def test_every_variant_is_evaluated_and_rerank_variants_skip_without_a_reranker(beir_suite):
    suite, pipeline = beir_suite
    run = run_eval(pipeline(), suite.evalset, parse_variants(DEFAULT), depth=10)
    for name in ("bm25", "dense", "hybrid", "default"):
        vr = run.variants[name]
        assert not vr.skipped_reason and set(vr.rankings) == set(QUERIES)
        assert all(set(r) <= set(CORPUS) and len(r) == len(set(r)) for r in vr.rankings.values())
    for name in RERANK_VARIANTS:
        vr = run.variants[name]
        assert vr.skipped_reason == "no reranker configured" and not vr.rankings
    assert run.variants["bm25"].rankings["q1"][0] == "anvil"
    assert run.reranker == "none" and all(len(v) == 4 for v in run.latency_ms.values())
    scores = report.score(run, "hybrid")
    results = report.results_json(scores, report.gate(scores))
    assert set(scores.values) == {"bm25", "dense", "hybrid", "default"}
    assert set(scores.comparisons) == {"bm25", "dense", "default"}
    assert run.variants["default"].rankings == run.variants["hybrid"].rankings  # no reranker: the first stage
    assert all(results["variants"][n]["skipped"] == "no reranker configured" for n in RERANK_VARIANTS)
    # A gate asked to vouch for rerank variants that never ran must not pass.
    assert not results["gate"]["passed"]
    assert all(any(f.startswith(n + " was not evaluated") for f in results["gate"]["failures"]) for n in RERANK_VARIANTS)


def test_with_a_reranker_all_six_variants_run_from_one_rerank_per_query(beir_suite):
    suite, pipeline = beir_suite
    reranker = FondReranker({"cactus": 5.0})  # loves a record that answers nothing
    run = run_eval(pipeline(reranker), suite.evalset, parse_variants(DEFAULT), depth=10)
    assert reranker.calls == len(QUERIES)  # the three policies share one scoring of the window
    hybrid = run.variants["hybrid"].rankings
    for name in RERANK_VARIANTS:
        assert not run.variants[name].skipped_reason and not run.variants[name].fallbacks
        assert set(run.variants[name].rankings) == set(QUERIES)
    for q in QUERIES:
        assert run.variants["hybrid+rerank(replace)"].rankings[q][0] == "cactus"
        slots = run.variants["hybrid+rerank(guaranteed_slots)"].rankings[q]
        assert slots[:2] == hybrid[q][:2]  # the first stage's top 2 documents keep their places
        assert "cactus" in slots[:3]
    scores = report.score(run, "hybrid")
    replace = scores.comparisons["hybrid+rerank(replace)"]
    assert replace.delta < 0 and replace.hurt
    assert any(f.startswith("hybrid+rerank(replace) ndcg@10") for f in report.gate(scores))


def test_a_failing_reranker_is_counted_as_fallbacks_and_fails_the_gate(beir_suite):
    suite, pipeline = beir_suite
    run = run_eval(pipeline(FailingReranker(RuntimeError("model exploded"))), suite.evalset,
                   parse_variants(DEFAULT), depth=10)
    for name in RERANK_VARIANTS:
        vr = run.variants[name]
        assert sum(vr.fallbacks.values()) == len(QUERIES)
        assert all("model exploded" in reason for reason in vr.fallbacks)
        assert vr.rankings == run.variants["hybrid"].rankings  # the fallback is the first stage, unchanged
    scores = report.score(run, "hybrid")
    failures = report.gate(scores)
    for name in RERANK_VARIANTS:
        assert f"{name}: the reranker fell back on 4 queries" in failures
    assert report.results_json(scores, failures)["variants"]["hybrid+rerank(rrf)"]["rerank_fallbacks"] == 4


def test_a_question_set_is_judged_by_file_and_by_answer(tmp_path):
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "acme.txt").write_text("Acme makes anvils. The CEO of Acme is Jane Roe.\n")
    (docs / "sub" / "gears.md").write_text("# Gears\n\nWorm gears reduce rotational speed.\n")
    (docs / "birds.txt").write_text("Roadrunners sprint across the desert at great speed.\n")
    (tmp_path / "qs.yaml").write_text(
        "documents: docs\nquestions:\n"
        "  - {id: ceo, question: 'Who is the CEO of Acme?', sources: acme.txt, answer_contains: Jane Roe}\n"
        "  - {id: worm, question: 'What do worm gears reduce?', sources: sub/gears.md,\n"
        "     answer_contains: speed}\n"
        "  - {id: moon, question: 'What is the moon made of?', answer_contains: cheese}\n"
    )
    suite = open_suite(tmp_path / "qs.yaml")
    p = Pipeline.build(EngineConfig.of(k=2), store=LanceStore(tmp_path / "index"), embedder=HashingEmbedder(), reranker=None)
    build_index(p, suite)
    run = run_eval(p, suite.evalset, parse_variants("bm25,hybrid"), generator=p.generator)
    hybrid = run.variants["hybrid"]
    assert hybrid.rankings["ceo"][0] == "acme.txt" and "sub/gears.md" in hybrid.rankings["worm"]
    assert hybrid.passed == {"ceo": True, "worm": True, "moon": False}
    scores = report.score(run, "hybrid")
    assert set(scores.values["hybrid"]["ndcg@10"]) == {"ceo", "worm"}  # "moon" has no sources to rank
    assert scores.means["hybrid"]["answers_passed"] == pytest.approx(2 / 3)


def test_a_readers_answer_is_scored_alone_and_with_the_sentence_quoted_beside_it(tmp_path):
    """`answers_passed` scores the reader's own text; `answers_passed_with_quote` what the person reads, the
    answer and the picker's sentence shown beside it."""
    from upstream_support import ScriptedChat

    from funnel.generate.extractive import ExtractiveGenerator
    from funnel.generate.llm import FallbackGenerator
    from funnel.generate.reader import ReaderGenerator

    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "acme.txt").write_text("Acme makes anvils. The CEO of Acme is Jane Roe.\n")
    (tmp_path / "qs.yaml").write_text(
        "documents: docs\nquestions:\n"
        "  - {id: ceo, question: 'Who is the CEO of Acme?', sources: acme.txt, answer_contains: Jane Roe}\n")
    suite = open_suite(tmp_path / "qs.yaml")
    p = Pipeline.build(EngineConfig.of(k=2), store=LanceStore(tmp_path / "index"), embedder=HashingEmbedder(),
                       reranker=None)
    build_index(p, suite)
    picker = ExtractiveGenerator(p.embedder)
    reader = FallbackGenerator(ReaderGenerator(ScriptedChat("The CEO leads Acme [1]."), picker), picker)
    run = run_eval(p, suite.evalset, parse_variants("hybrid"), generator=reader)
    assert run.variants["hybrid"].passed == {"ceo": False}
    assert run.variants["hybrid"].passed_with_quote == {"ceo": True}
    entry = report.results_json(report.score(run, "hybrid"), [])["variants"]["hybrid"]
    assert entry["answers_passed"] == 0.0 and entry["answers_passed_with_quote"] == 1.0
    # A reader whose own text passes: the verdicts agree, and the column is still there to compare variants by.
    right = FallbackGenerator(ReaderGenerator(ScriptedChat("Jane Roe is the CEO [1]."), picker), picker)
    agreed = run_eval(p, suite.evalset, parse_variants("hybrid"), generator=right)
    entry = report.results_json(report.score(agreed, "hybrid"), [])["variants"]["hybrid"]
    assert entry["answers_passed"] == entry["answers_passed_with_quote"] == 1.0
    plain = run_eval(p, suite.evalset, parse_variants("hybrid"), generator=picker)
    assert "answers_passed_with_quote" not in report.score(plain, "hybrid").means["hybrid"]


def _three_page_manual(path: Path) -> None:
    canvas = pytest.importorskip("reportlab.pdfgen.canvas")
    c = canvas.Canvas(str(path))
    for text in ("Installing the anvil needs a concrete floor.", "The anvil weighs ninety kilograms.",
                 "Anvils are painted red at the factory."):
        c.drawString(72, 700, text)
        c.showPage()
    c.save()


def test_a_question_set_is_judged_by_page_and_limit_keeps_only_its_questions(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    _three_page_manual(docs / "anvil.pdf")
    (tmp_path / "qs.yaml").write_text(
        "documents: docs\nquestions:\n"
        "  - {id: weight, question: 'How many kilograms does the anvil weigh?', sources: anvil.pdf, page: 2,\n"
        "     answer_contains: ninety kilograms}\n"
        "  - {id: colour, question: 'What colour are anvils painted?', sources: anvil.pdf, page: [3],\n"
        "     answer_contains: red}\n"
    )
    suite = open_suite(tmp_path / "qs.yaml")
    assert suite.evalset.pages == {"weight": {"anvil.pdf#p2": 1}, "colour": {"anvil.pdf#p3": 1}}
    p = Pipeline.build(EngineConfig.of(k=3), store=LanceStore(tmp_path / "index"), embedder=HashingEmbedder(), reranker=None)
    build_index(p, suite)
    run = run_eval(p, suite.evalset, parse_variants("bm25"), generator=p.generator)
    assert run.variants["bm25"].page_rankings["weight"][0] == "anvil.pdf#p2"
    results = report.results_json(report.score(run, "bm25"), [])
    assert results["variants"]["bm25"]["page_hit@1"] == 1.0
    assert results["per_query"]["bm25"]["colour"]["page_rank"] == 1
    assert "| weight | p@1 ✓ |" in report.markdown(results)
    limited = open_suite(tmp_path / "qs.yaml", limit=1).evalset
    assert list(limited.pages) == ["weight"] and list(limited.answers) == ["weight"]


def _acme_with_a_dead_llm(tmp_path):
    """One question over one document, indexed; and an LLM answerer whose server is down (the extractive answer
    its fallback): (suite, pipeline, that answerer, the dead port)."""
    from funnel.generate.extractive import ExtractiveGenerator
    from funnel.generate.llm import FallbackGenerator, LlmGenerator
    from funnel.generate.openai_compat import OpenAIChat

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "acme.txt").write_text("The CEO of Acme is Jane Roe.\n")
    (tmp_path / "qs.yaml").write_text(
        "documents: docs\nquestions:\n  - {question: 'Who is the CEO of Acme?', sources: acme.txt, answer_contains: Roe}\n"
    )
    suite = open_suite(tmp_path / "qs.yaml")
    p = Pipeline.build(store=LanceStore(tmp_path / "index"), embedder=HashingEmbedder(), reranker=None)
    build_index(p, suite)
    with socket.socket() as s:  # a port nothing listens on: the LLM is down
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    llm = LlmGenerator(OpenAIChat(f"http://127.0.0.1:{port}/v1", model="m", timeout=2))
    return suite, p, FallbackGenerator(llm, ExtractiveGenerator(p.embedder)), port


def test_an_llm_that_fails_is_counted_not_hidden_behind_the_extractive_answer(tmp_path):
    suite, p, generator, port = _acme_with_a_dead_llm(tmp_path)
    run = run_eval(p, suite.evalset, parse_variants("hybrid"), generator=generator)
    assert run.variants["hybrid"].passed == {"q1": True}  # the extractive answer stood in ...
    entry = report.results_json(report.score(run, "hybrid"), [])["variants"]["hybrid"]
    assert entry["answer_fallbacks"] == 1  # ... and the results say so
    assert all(str(port) in why for why in entry["answer_fallback_reasons"])


def test_answerers_are_scored_side_by_side_on_one_ranking(tmp_path):
    """`hybrid` answers with the configured generator (extractive here), `hybrid+answer(down)` with an LLM that
    is down: its fallbacks are counted on that variant alone, and a variant whose answerer was not built is
    one line, not a silent extractive answer."""
    from funnel.apps.factory import build_answerers
    from funnel.apps.settings import Settings

    suite, p, down, _ = _acme_with_a_dead_llm(tmp_path)
    variants = parse_variants("hybrid,hybrid+answer(down)")
    run = run_eval(p, suite.evalset, variants, generator=p.generator, answerers={"down": down})
    entries = report.results_json(report.score(run, "hybrid"), [])["variants"]
    assert entries["hybrid"].get("answer_fallbacks", 0) == 0 and entries["hybrid+answer(down)"]["answer_fallbacks"] == 1
    assert entries["hybrid"]["answers_passed"] == entries["hybrid+answer(down)"]["answers_passed"] == 1.0
    assert run.variants["hybrid"].rankings == run.variants["hybrid+answer(down)"].rankings
    with pytest.raises(ConfigError, match=re.escape("no answerer was built for hybrid+answer(down)")):
        run_eval(p, suite.evalset, variants, generator=p.generator)
    configured, other = "openai:http://127.0.0.1:9/v1", "ollama:http://127.0.0.1:9"
    built = build_answerers(Settings(llm=configured), p, ["extractive", other, configured])
    assert type(built["extractive"]).__name__ == "ExtractiveGenerator"
    assert built[configured] is p.generator, "the configured answerer is the pipeline's own, not a second copy"
    assert "ollama" in built[other].name and built[other] is not p.generator


# --- seed 001, replayed on the sample corpus with the real embedder -------------------------------------


class ProseLovingReranker:
    """A stand-in for cross-encoder/ms-marco-MiniLM-L-6-v2 as seed 001 measured it: trained on MS MARCO
    prose passages, it scores a dense table row ("Company: Zentara Robotics | CEO: Iris Kallas | ...")
    lowest even when the row holds the answer. No pre-trained cross-encoder can be downloaded here, so
    this one scores prose by its share of the query's words and gives every table chunk a penalty that
    no overlap can make up for — the behaviour, not the model."""

    name = "prose-loving (stand-in for ms-marco-MiniLM-L-6-v2)"
    TABLE_PENALTY = 10.0

    def rerank(self, query, candidates):
        words = set(re.findall(r"[a-z0-9]+", query.lower()))
        scores = []
        for c in candidates:
            overlap = len(words & set(re.findall(r"[a-z0-9]+", c.chunk.text.lower()))) / max(len(words), 1)
            table = c.chunk.section_kind is SectionKind.TABLE
            scores.append(overlap - (self.TABLE_PENALTY if table else 0.0))
        return RerankResult(tuple(scores))


@pytest.fixture(scope="module")
def seed_001(tmp_path_factory):
    qs = load_questions(QUESTIONS)
    # Like the seed: top_k = 3 passages, one per source = 2 guaranteed first-stage slots + 1 the
    # reranker chooses. (With funnel's default of 3 passages per document the row survives even
    # `replace` here: see test_grouping_passages_protect_the_row_even_under_replace.)
    p = Pipeline.build(EngineConfig.of(k=3, guaranteed=2, chunks_per_document=1), store=LanceStore(tmp_path_factory.mktemp("seed001")), embedder=load_embedder("minilm"), reranker=ProseLovingReranker())
    assert p.ingest(list(qs.documents)).problems == []
    variants = parse_variants("hybrid,hybrid+rerank(replace),hybrid+rerank(guaranteed_slots)")
    run = run_eval(p, qs.evalset, variants, generator=p.generator)
    return run, report.score(run, "hybrid")


@pytest.mark.model
def test_seed_001_a_reranker_buries_the_table_row_and_guaranteed_slots_keep_it(seed_001):
    run, scores = seed_001
    hybrid = run.variants["hybrid"]
    replace = run.variants["hybrid+rerank(replace)"]
    slots = run.variants["hybrid+rerank(guaranteed_slots)"]
    # Hybrid answers the CEO question from the PDF's table row, and ranks the PDF within the guaranteed slots.
    assert hybrid.passed["ceo"]
    assert hybrid.rankings["ceo"].index("portfolio_companies.pdf") < 2
    # Reranking replaces the first-stage order: the table row is gone and the answer with it.
    assert not replace.passed["ceo"]
    assert "ceo" in scores.comparisons["hybrid+rerank(replace)"].answers_broken
    failures = report.gate(scores)  # --fail-if-worse-than hybrid
    assert any(f.startswith("hybrid+rerank(replace) breaks the answer to") and "ceo" in f for f in failures)
    # Guaranteed slots: hybrid's top 2 documents keep their places and passages; the answer survives.
    assert slots.passed["ceo"]
    assert "ceo" not in scores.comparisons["hybrid+rerank(guaranteed_slots)"].answers_broken
    assert all(slots.rankings[q][:2] == hybrid.rankings[q][:2] for q in hybrid.rankings)
    assert scores.comparisons["hybrid+rerank(guaranteed_slots)"].delta >= 0


@pytest.mark.model
def test_seed_001_guaranteed_slots_keep_every_answer_hybrid_finds(seed_001):
    # Guaranteed documents keep their first-stage chunk order: for 'employees' and 'founded' the table
    # row is the PDF's 2nd/3rd chunk, which a per-chunk guarantee would have let the reranker bury.
    run, scores = seed_001
    hybrid, slots = run.variants["hybrid"], run.variants["hybrid+rerank(guaranteed_slots)"]
    assert [q for q, ok in hybrid.passed.items() if ok and not slots.passed[q]] == []


@pytest.mark.model
def test_grouping_passages_protect_the_row_even_under_replace(tmp_path):
    # The product default keeps 3 passages per document: the PDF stays in the top 3 on its prose, and the
    # row, one of its first-stage passages, stays in the answer context. Measured: 19/19 for every policy.
    qs = load_questions(QUESTIONS)
    p = Pipeline.build(EngineConfig.of(k=3, guaranteed=2), store=LanceStore(tmp_path / "idx"), embedder=load_embedder("minilm"), reranker=ProseLovingReranker())
    p.ingest(list(qs.documents))
    run = run_eval(p, qs.evalset, parse_variants("hybrid,hybrid+rerank(replace)"), generator=p.generator)
    assert run.variants["hybrid"].passed["ceo"] and run.variants["hybrid+rerank(replace)"].passed["ceo"]


# --- the CLI --------------------------------------------------------------------------------------------


def funnel(*args, cwd):
    env = {**os.environ, "FUNNEL_EMBEDDER": "hashing", "FUNNEL_EVAL__CACHE": str(cwd / "cache")}
    return subprocess.run([*FUNNEL, *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=120)


def no_traceback(result):
    assert "Traceback" not in result.stderr + result.stdout


def test_cli_eval_writes_results_report_and_plot(tmp_path):
    write_beir(tmp_path / "tiny")
    result = funnel("eval", "--dataset", "tiny", "--out", "out", "--reranker", "none", cwd=tmp_path)
    no_traceback(result)
    assert result.returncode == 0, result.stderr
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert {"variants", "per_query", "comparisons", "latency_ms", "gate"} <= set(results)
    assert (results["dataset"], results["queries"], results["baseline"]) == ("tiny", 4, "hybrid")
    for name in ("bm25", "dense", "hybrid"):
        assert all(0.0 <= results["variants"][name][m] <= 1.0 for m in ("ndcg@10", "recall@100", "mrr@10"))
        assert set(results["per_query"][name]) == set(QUERIES)
    assert results["per_query"]["bm25"]["q1"]["first_relevant_rank"] == 1
    assert all(results["variants"][n]["skipped"] == "no reranker configured" for n in RERANK_VARIANTS)
    assert set(results["comparisons"]) == {"bm25", "dense", "default"}
    assert "| hybrid |" in (tmp_path / "out" / "report.md").read_text()
    assert (tmp_path / "out" / "metrics.png").read_bytes().startswith(b"\x89PNG")
    assert (tmp_path / "cache").is_dir()  # the index went to FUNNEL_EVAL__CACHE


def test_cli_gate_checks_only_variants_built_on_the_baseline(tmp_path):
    write_beir(tmp_path / "tiny")
    result = funnel("eval", "--dataset", "tiny", "--out", "out", "--variants", "bm25,hybrid,bm25+rerank(rrf)",
                    "--reranker", "lexical", "--fail-if-worse-than", "bm25", cwd=tmp_path)
    no_traceback(result)
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["baseline"] == "bm25" and set(results["comparisons"]) == {"hybrid", "bm25+rerank(rrf)"}
    gated = [f for f in results["gate"]["failures"] if not f.startswith("bm25+rerank(rrf)")]
    assert gated == []  # hybrid is not a bm25+... variant, so it is never gated
    assert result.returncode == (0 if results["gate"]["passed"] else 1)


def test_cli_gate_with_nothing_to_check_fails(tmp_path):
    write_beir(tmp_path / "tiny")
    result = funnel("eval", "--dataset", "tiny", "--out", "out", "--variants", "bm25,hybrid",
                    "--fail-if-worse-than", "bm25", cwd=tmp_path)
    no_traceback(result)
    assert result.returncode == 1 and "nothing to gate" in result.stderr


@pytest.mark.parametrize(
    "args, message",
    [(["--dataset", "nowhere"], "nowhere does not exist"),
     (["--dataset", "tiny", "--variants", "hybrid+rerank(smart)"], "unknown rerank policy 'smart'")],
)
def test_cli_bad_arguments_exit_2_with_one_line(tmp_path, args, message):
    write_beir(tmp_path / "tiny")
    result = funnel("eval", *args, "--out", "out", cwd=tmp_path)
    no_traceback(result)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_cli_eval_says_what_it_left_out_and_strict_refuses(tmp_path):
    # Half the judged ids are missing from the corpus: the run must say so in the terminal, not only in
    # report.md, and --strict must refuse (issue 17, defect 4).
    corpus = {d: t for d, t in CORPUS.items() if d not in ("anvil", "worm")}
    write_beir(tmp_path / "tiny", corpus=corpus)
    result = funnel("eval", "--dataset", "tiny", "--out", "out", "--variants", "bm25", "--baseline", "bm25",
                    cwd=tmp_path)
    no_traceback(result)
    assert result.returncode == 0, result.stderr
    assert "evaluating 2 queries; left out: 2 judgments naming ids not in the corpus" in result.stderr
    assert "2 queries with no relevant judged document" in result.stderr
    strict = funnel("eval", "--dataset", "tiny", "--out", "out", "--variants", "bm25", "--baseline", "bm25",
                    "--strict", cwd=tmp_path)
    no_traceback(strict)
    assert strict.returncode != 0 and "--strict and the data had to be trimmed" in strict.stderr


def test_cli_eval_refuses_an_empty_index(tmp_path):
    # A question set whose documents hold nothing funnel reads (or lie where .gitignore rules used to hide
    # them): refuse with the reason, never all-zero metrics that read as a result (issue 17, defect 6).
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "clip.gif").write_bytes(b"GIF89a")  # no loader takes a GIF
    (tmp_path / "qs.yaml").write_text(
        "documents: docs\nquestions:\n  - {question: 'Who is the CEO of Acme?', sources: acme.txt, answer_contains: Roe}\n"
    )
    result = funnel("eval", "--dataset", "qs.yaml", "--out", "out", "--variants", "bm25", "--baseline", "bm25",
                    "--reranker", "none", cwd=tmp_path)
    no_traceback(result)
    assert result.returncode != 0, result.stdout
    assert "the index holds no documents, so there is nothing to evaluate" in result.stderr
    assert "nothing to ingest in this folder" in result.stderr
    assert not (tmp_path / "out" / "results.json").exists()
