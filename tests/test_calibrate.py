"""Per-index calibration (funnel.calibrate) and the `auto` policy that uses it, on real LanceDB indexes with
the deterministic HashingEmbedder. The rerankers here are real scorers with known quality: an oracle that
knows the original corpus (so it must be trusted) and its mirror image (so it must not)."""

import json
import random

import numpy as np
import pytest

from funnel.calibrate import (
    FIRST_STAGE, GATED, MIN_QUERIES, Calibration, Judged, calibrate, read_judged, sentence_query, title_query,
)
from funnel.embed import HashingEmbedder
from funnel.errors import ConfigError, StoreError
from funnel.index.lance import LanceStore
from funnel.engine_config import EngineConfig, GroupingConfig
from funnel.pipeline import Pipeline
from funnel.rerank.policies import RerankPolicy
from funnel.types import RerankResult, RerankStatus

from helpers import chunk

WORDS = ("alpha beta gamma delta epsilon zeta theta iota kappa lambda omicron sigma tau upsilon omega "
         "river mountain forest desert ocean valley canyon glacier meadow island harbor bridge tower castle "
         "engine turbine piston valve gasket rotor stator bearing spindle gear lever pulley spring").split()


def _corpus(n_docs: int = 40, seed: int = 1) -> list:
    """Documents of two chunks, each a few sentences of random words (so sentences are distinct)."""
    rng = random.Random(seed)
    chunks = []
    for d in range(n_docs):
        title = " ".join(rng.sample(WORDS, 4)).title()
        for ordinal in range(2):
            sentences = [" ".join(rng.choices(WORDS, k=rng.randint(7, 12))).capitalize() + "." for _ in range(4)]
            chunks.append(chunk(f"d{d:02d}", ordinal, f"{title}\n" + " ".join(sentences), title=title))
    return chunks


def _index(tmp_path, chunks, embedder):
    store = LanceStore(tmp_path / "index")
    with store.transaction(embedder.name, embedder.dim) as tx:
        tx.add(chunks, np.asarray(embedder.embed([c.text for c in chunks])))
    return store


class Oracle:
    """Knows the original corpus: a candidate scores 1 when the query was taken from its document (a
    sentence or the title), else 0. Any sensible calibration must let it reorder."""

    name = "oracle"

    def __init__(self, chunks, invert: bool = False):
        self.source = {}
        for c in chunks:
            self.source.setdefault(c.doc_id, "")
            self.source[c.doc_id] += " " + c.text
        self.invert = invert
        self.calls = 0

    def rerank(self, query, candidates):
        self.calls += 1
        hit = [1.0 if query in self.source[c.chunk.doc_id] else 0.0 for c in candidates]
        return RerankResult(tuple(1.0 - h if self.invert else h for h in hit))


class Interrupting(Oracle):
    def rerank(self, query, candidates):
        if self.calls >= 3:
            raise KeyboardInterrupt
        return super().rerank(query, candidates)


EMB = HashingEmbedder(dim=64)


@pytest.fixture
def corpus():
    return _corpus()


def test_queries_are_taken_out_of_the_chunks_that_answer_them(corpus):
    rng = random.Random(0)
    doc = [c for c in corpus if c.doc_id == "d03"]
    sentence = sentence_query(doc, doc[0], rng)
    assert sentence.kind == "sentence" and sentence.text in doc[0].text
    assert sentence.text not in sentence.edits[0].text  # no verbatim match left
    assert sentence.relevant == {"d03#0", "d03#1"}  # the passage and its neighbour
    title = title_query(doc, doc[1], rng)
    assert title.text == doc[0].title and title.relevant == {"d03#0", "d03#1"}
    assert all(title.text not in e.text for e in title.edits)
    # A file name is not a query a person would type.
    assert title_query([chunk("x", 0, "x.pdf\nsome words here", title="report_2024.pdf")], chunk(
        "x", 0, "x.pdf\nsome words here", title="report_2024.pdf"), rng) is None


@pytest.mark.slow
def test_a_reranker_that_knows_the_answers_is_trusted(tmp_path, corpus):
    store = _index(tmp_path, corpus, EMB)
    whole = EngineConfig.of(rerank_depth=GroupingConfig.candidates)  # the reranker sees the whole window
    result = calibrate(Pipeline.build(whole, store=store, embedder=EMB, reranker=Oracle(corpus)), n_queries=40)
    assert result.queries == 40 and set(result.mrr_by_kind) == {"title", "sentence"}
    assert result.policy is not RerankPolicy.NONE, result.reason
    assert result.mrr[result.option] > result.mrr[FIRST_STAGE.label] and result.p_value < 0.05
    assert result.mrr["replace"] == pytest.approx(result.window_recall)  # the oracle puts every answer first
    # At a shallower depth it sees only the window's top: answers below it stay where the first stage put them.
    shallow = calibrate(Pipeline.build(EngineConfig.of(rerank_depth=3), store=store, embedder=EMB,
                                       reranker=Oracle(corpus)), n_queries=40)
    assert shallow.window_recall == result.window_recall
    assert shallow.mrr["replace"] < result.mrr["replace"]


class SureAndWrong(Oracle):
    """Sure of one candidate, and always the wrong one: the best non-answer gets 1, the answers 0, the rest
    0.5 (a lead of 0.5, so the gate lets it reorder)."""

    name = "sure-and-wrong"

    def rerank(self, query, candidates):
        hit = super().rerank(query, candidates).scores
        wrong = next((i for i, h in enumerate(hit) if not h), None)
        return RerankResult(tuple(0.0 if h else 1.0 if i == wrong else 0.5 for i, h in enumerate(hit)))


@pytest.mark.slow
def test_a_reranker_that_is_always_wrong_is_not_run(tmp_path, corpus):
    store = _index(tmp_path, corpus, EMB)
    # The mirror of the oracle scores every other candidate alike: never sure, so even gated it moves nothing.
    result = calibrate(Pipeline.build(store=store, embedder=EMB, reranker=Oracle(corpus, invert=True)), n_queries=40)
    assert result.policy is RerankPolicy.NONE and result.option == "first_stage"
    assert "did not help" in result.reason and "never sure enough" in result.reason
    assert result.mrr["replace"] < result.mrr[FIRST_STAGE.label]
    assert result.mrr[GATED.label] == result.mrr[FIRST_STAGE.label]
    # One that is sure and wrong is caught by the gated option's own test.
    sure = calibrate(Pipeline.build(store=store, embedder=EMB, reranker=SureAndWrong(corpus)), n_queries=40)
    assert sure.policy is RerankPolicy.NONE and "even where it was sure it hurt" in sure.reason, sure.reason
    assert sure.mrr[GATED.label] < 0.5 * sure.mrr[FIRST_STAGE.label]


def test_with_no_option_shown_to_help_the_reranker_reorders_only_what_it_is_sure_of():
    from funnel.calibrate import OPTIONS
    from funnel.calibrate.decide import choose

    rng = np.random.default_rng(5)
    first = rng.random(120)
    rr = {o.label: list(first - 0.1 * (o.label != FIRST_STAGE.label)) for o in OPTIONS}  # every option hurts
    moved = np.where(rng.random(120) < 0.2, rng.choice([-0.1, 0.1], 120), 0.0)  # a few move, both ways
    rr[GATED.label] = list(first + moved)
    mrr = {name: float(np.mean(v)) for name, v in rr.items()}
    chosen, reason, _ = choose(rr, mrr, "120 test queries")
    assert chosen is GATED and "not shown to hurt" in reason
    c = Calibration(chosen.kind, chosen.weight, reason, "m", "e", 1, 10, gate=chosen.gate)
    assert c.option == "rrf:1|gate:0.2" and Calibration.from_json(json.loads(json.dumps(c.to_json()))) == c
    old = {k: v for k, v in c.to_json().items() if k != "gate"}  # stored before the gate existed
    assert Calibration.from_json(old).gate == 0.0 and Calibration.from_json(old).option == "rrf:1"


def test_a_tiny_corpus_keeps_the_first_stage_and_says_why(tmp_path):
    tiny = _corpus(n_docs=3)
    result = calibrate(Pipeline.build(store=_index(tmp_path, tiny, EMB), embedder=EMB, reranker=Oracle(tiny)), n_queries=40)
    assert result.queries < MIN_QUERIES and result.policy is RerankPolicy.NONE
    assert result.reason.startswith("too small to calibrate")


@pytest.mark.slow
def test_the_auto_policy_follows_the_stored_calibration(tmp_path, corpus):
    store = _index(tmp_path, corpus, EMB)
    oracle = Oracle(corpus)
    pipeline = Pipeline.build(EngineConfig.of(k=3), store=store, embedder=EMB, reranker=oracle)
    query = corpus[5].text.split("\n")[1].split(".")[0]

    before = pipeline.search(query)  # never calibrated: first-stage order, the reranker not run
    assert before.rerank_status is RerankStatus.SKIPPED and "not calibrated" in before.rerank_reason
    assert before.policy == "auto: first_stage" and oracle.calls == 0

    result = pipeline.calibrate(n_queries=40)
    assert json.loads(json.dumps(store.read_calibration())) == result.to_json()
    after = pipeline.search(query)
    assert after.rerank_status is RerankStatus.OK and after.policy == f"auto: {result.option}"
    assert after.documents[0].doc_id == corpus[5].doc_id

    explicit = pipeline.search(query, policy="none")  # a user's explicit policy wins
    assert explicit.policy == "none" and explicit.rerank_status is RerankStatus.SKIPPED

    other = Pipeline.build(EngineConfig.of(k=3), store=store, embedder=EMB, reranker=Oracle(corpus, invert=True))
    other.reranker.name = "another-model"
    refused = other.search(query)  # calibrated with another reranker: not silently reused
    assert refused.rerank_status is RerankStatus.SKIPPED and refused.policy == "auto: first_stage"
    assert "calibrated with reranker oracle, not another-model" in refused.rerank_reason
    assert other.calibration_problem().startswith("calibrated with reranker oracle")


@pytest.mark.slow
def test_an_interrupted_calibration_keeps_the_previous_one(tmp_path, corpus):
    store = _index(tmp_path, corpus, EMB)
    first = Pipeline.build(store=store, embedder=EMB, reranker=Oracle(corpus)).calibrate(n_queries=40)
    stored = store.read_calibration()
    with pytest.raises(KeyboardInterrupt):
        Pipeline.build(store=store, embedder=EMB, reranker=Interrupting(corpus)).calibrate(n_queries=40)
    assert store.read_calibration() == stored and Calibration.from_json(stored).option == first.option
    assert store.info().chunks == len(corpus)


def test_a_damaged_calibration_is_one_line_and_searches_go_on(tmp_path, corpus):
    store = _index(tmp_path, corpus, EMB)
    (tmp_path / "index" / "funnel_calibration.json").write_text("{not json")
    with pytest.raises(StoreError, match="unreadable calibration"):
        store.read_calibration()
    result = Pipeline.build(store=store, embedder=EMB, reranker=Oracle(corpus)).search("alpha beta")
    assert result.rerank_status is RerankStatus.SKIPPED and "unreadable calibration" in result.rerank_reason
    (tmp_path / "index" / "funnel_calibration.json").write_text(json.dumps({"format": 99}))
    with pytest.raises(StoreError, match="unknown format"):
        Calibration.from_json(store.read_calibration())


def test_calibration_json_round_trip_and_mismatch():
    c = Calibration(RerankPolicy.RRF, 0.5, "why", "model-a", "emb-a", 3, 100, queries=40,
                    mrr={"first_stage": 0.5, "rrf:0.5": 0.6})
    again = Calibration.from_json(json.loads(json.dumps(c.to_json())))
    assert again == c and again.option == "rrf:0.5"
    assert c.mismatch("model-a", "emb-a") is None
    assert c.mismatch("model-b", "emb-a") == "calibrated with reranker model-a, not model-b"
    assert c.mismatch("model-a", "emb-b") == "calibrated with embedder emb-a, not emb-b"


class Down:
    name = "down"

    def rerank(self, query, candidates):
        raise ConnectionError("connection refused")


@pytest.mark.slow
def test_a_reranker_that_fails_stops_calibration_and_keeps_the_old_one(tmp_path, corpus):
    from funnel.errors import BackendUnavailable

    store = _index(tmp_path, corpus, EMB)
    Pipeline.build(store=store, embedder=EMB, reranker=Oracle(corpus)).calibrate(n_queries=40)
    stored = store.read_calibration()
    stopped = "calibration stopped: down failed: ConnectionError: connection refused; the previous"
    with pytest.raises(BackendUnavailable, match=stopped):
        Pipeline.build(store=store, embedder=EMB, reranker=Down()).calibrate(n_queries=40)
    assert store.read_calibration() == stored


def _judged(corpus, n: int, seed: int = 3, by_path: bool = False) -> list[Judged]:
    """Real-looking queries: a 4-word phrase of one document (which the oracle recognises), answered by it."""
    rng = random.Random(seed)
    docs = sorted({c.doc_id for c in corpus})
    judged = []
    for doc_id in rng.sample(docs, n):
        words = next(c for c in corpus if c.doc_id == doc_id).text.split("\n")[1].split()
        start = rng.randrange(len(words) - 4)
        judged.append(Judged(" ".join(words[start:start + 4]), (f"docs/{doc_id}.txt" if by_path else doc_id,)))
    return judged


def test_judged_queries_are_read_from_json_lines_with_one_line_errors(tmp_path):
    good = tmp_path / "judged.jsonl"
    good.write_text('{"query": "what is alpha", "relevant": ["d01", "d02"]}\n\n{"query": "beta", "relevant": "d03"}\n')
    assert read_judged(good) == [Judged("what is alpha", ("d01", "d02")), Judged("beta", ("d03",))]
    for text, message in [
        ('{"query": "q", "relevant": ["d01"]}\nnot json\n', r"judged.jsonl:2: not JSON"),
        ('{"query": "", "relevant": ["d01"]}\n', r":1: \"query\" must be a non-empty string"),
        ('{"query": "q", "relevant": []}\n', r":1: \"relevant\" must be"),
        ('{"query": "q", "relevant": [3]}\n', r":1: \"relevant\" must be"),
        ('["q", "d01"]\n', r":1: expected an object"),
        ("\n\n", r"no judged queries in it"),
    ]:
        good.write_text(text)
        with pytest.raises(ConfigError, match=message):
            read_judged(good)
    good.write_bytes(b"\xff\xfe{")
    with pytest.raises(ConfigError, match="cannot read judged queries"):
        read_judged(good)
    with pytest.raises(ConfigError, match="cannot read judged queries .*No such file"):
        read_judged(tmp_path / "missing.jsonl")


@pytest.mark.slow
def test_judged_queries_decide_and_are_measured_again_after_a_change(tmp_path, corpus):
    store = _index(tmp_path, corpus, EMB)
    pipeline = Pipeline.build(EngineConfig.of(rerank_depth=GroupingConfig.candidates), store=store, embedder=EMB, reranker=Oracle(corpus))
    judged = _judged(corpus, 30)
    result = pipeline.calibrate(judged=judged)
    assert result.source == "judged" and result.queries == 30 and set(result.mrr_by_kind) == {"judged"}
    assert result.policy is not RerankPolicy.NONE and "on 30 judged queries" in result.reason
    assert result.mrr[result.option] > result.mrr[FIRST_STAGE.label] and result.p_value < 0.05
    assert [Judged(j["query"], tuple(j["relevant"])) for j in result.judged] == judged

    # A later calibration (after an ingest, say) measures the stored judged queries again...
    again = pipeline.calibrate()
    assert again.source == "judged" and again.judged == result.judged and again.mrr == result.mrr
    # ... until the user asks for generated ones.
    generated = pipeline.calibrate(n_queries=40, generated=True)
    assert generated.source == "generated" and generated.judged == [] and generated.queries == 40
    assert pipeline.calibrate(n_queries=40).source == "generated"


@pytest.mark.slow
def test_a_wrong_reranker_is_not_trusted_on_judged_queries_either(tmp_path, corpus):
    store = _index(tmp_path, corpus, EMB)
    result = calibrate(Pipeline.build(store=store, embedder=EMB, reranker=Oracle(corpus, invert=True)), judged=_judged(corpus, 30))
    assert result.policy is RerankPolicy.NONE and "did not help on 30 judged queries" in result.reason


def test_judged_queries_name_documents_by_id_or_path_and_too_few_is_refused(tmp_path, corpus):
    with_paths = [replace_path(c) for c in corpus]
    store = _index(tmp_path, with_paths, EMB)
    judged = _judged(corpus, 12, by_path=True) + [Judged("q", ("nowhere.txt",))] * 15
    with pytest.raises(ConfigError, match=f"only 12 of 27 judged queries name a document in this index .at least "
                                          f"{MIN_QUERIES} needed"):
        calibrate(Pipeline.build(store=store, embedder=EMB, reranker=Oracle(corpus)), judged=judged)
    assert store.read_calibration() is None


def replace_path(c):
    from dataclasses import replace

    return replace(c, path=f"docs/{c.doc_id}.txt")


def test_the_best_of_six_useless_options_is_rarely_trusted():
    # Six options that only add noise to the first stage's reciprocal ranks: picking the best of them and
    # testing it alone would trust one far more often than 5% of the time; the max-T test must not.
    from funnel.calibrate.decide import best_of_p

    rng = np.random.default_rng(7)
    single, family, trials = 0, 0, 300
    for _ in range(trials):
        diffs = rng.normal(0.0, 0.2, size=(80, 6)) * (rng.random((80, 6)) < 0.4)  # most queries unchanged
        best = int(np.argmax(diffs.mean(axis=0)))
        single += best_of_p(diffs[:, [best]], 0, rounds=400) < 0.05
        family += best_of_p(diffs, best, rounds=400) < 0.05
    assert single / trials > 0.08  # the naive test's false trust: about 6 x 5% / 2 (one side)
    assert family / trials <= 0.05

    # A real gain is still found: one option that helps on most queries.
    diffs = rng.normal(0.0, 0.2, size=(80, 6)) * (rng.random((80, 6)) < 0.4)
    diffs[:, 2] = np.abs(diffs[:, 2]) + 0.02
    assert best_of_p(diffs, 2) < 0.01


def test_a_small_real_gain_is_not_drowned_by_an_option_that_moves_ranks_a_lot():
    # `replace` moves reciprocal ranks far more than rrf:0.25 does; the best-of-six test scales each option by
    # its own spread, else replace's swings would set the bar and hide a small, steady gain (measured: ADI).
    from funnel.calibrate.decide import best_of_p

    rng = np.random.default_rng(3)
    diffs = rng.normal(0.0, 0.05, size=(80, 6)) * (rng.random((80, 6)) < 0.3)
    diffs[:, 5] = (-np.abs(rng.normal(0.0, 0.4, 80)) * (rng.random(80) < 0.5)
                   + rng.normal(0.0, 0.3, 80) * (rng.random(80) < 0.2))  # replace-like: large moves, worse
    diffs[:, 1] = 0.06 * (rng.random(80) < 0.3) + rng.normal(0.0, 0.02, 80) * (rng.random(80) < 0.3)
    assert int(np.argmax(diffs.mean(axis=0))) == 1
    assert best_of_p(diffs, 1) < 0.01


class BlindEmbedder(HashingEmbedder):
    """An embedder that reads nothing of the text (a vector from its hash), as an English model reads Hangul:
    the first stage's calibration must find that dense does not help."""

    def __init__(self):
        super().__init__(dim=32)
        self.name = "blind-32"

    def embed(self, texts):
        out = np.stack([np.random.default_rng(abs(hash(t)) % 2**32).standard_normal(self.dim) for t in texts])
        return (out / np.linalg.norm(out, axis=1, keepdims=True)).astype(np.float32)


def _topical(n_docs: int = 40, seed: int = 2) -> list:
    """Documents that each keep to a vocabulary of their own (as real documents keep to a topic), so the
    sentence taken out of a chunk shares words with the rest of it."""
    rng = random.Random(seed)
    chunks = []
    for d in range(n_docs):
        topic = [f"{rng.choice(WORDS)}{d}{i}" for i in range(8)]
        for ordinal in range(2):
            sentences = [" ".join(rng.choices(topic, k=4) + rng.choices(WORDS, k=4)).capitalize() + "."
                         for _ in range(4)]
            chunks.append(chunk(f"t{d:02d}", ordinal, " ".join(sentences), title=f"t{d:02d}"))
    return chunks


def test_the_first_stage_drops_a_blind_retriever_and_search_follows(tmp_path):
    blind = BlindEmbedder()
    store = _index(tmp_path, _topical(), blind)
    result = calibrate(Pipeline.build(store=store, embedder=blind, reranker=None), n_queries=60)
    assert result.first_stage == "bm25" and result.policy is RerankPolicy.NONE
    assert result.first_stage_mrr["bm25"] > result.first_stage_mrr["hybrid"] + 0.05
    assert "p=" in result.first_stage_reason
    store.write_calibration(result.to_json())
    pipeline = Pipeline.build(store=store, embedder=blind, reranker=None)
    assert pipeline.search("river mountain forest").first_stage == "auto: bm25"
    assert pipeline.search("river mountain forest", retrieval="hybrid").first_stage == "hybrid"
    # another embedder than the one measured: the 1:1 hybrid
    assert Pipeline.build(store=store, embedder=HashingEmbedder(dim=32), reranker=None).plan("x").first_stage_label == "hybrid"


def test_a_first_stage_that_reads_well_keeps_the_hybrid(tmp_path):
    emb = HashingEmbedder(dim=256)
    store = _index(tmp_path, _topical(), emb)
    result = calibrate(Pipeline.build(store=store, embedder=emb, reranker=None), n_queries=60)
    assert result.first_stage != "dense"  # dense is the weaker one here: never chosen alone
    assert set(result.first_stage_mrr) == {"hybrid", "bm25", "dense", "hybrid:bm25x2", "hybrid:densex2"}


def test_one_sentence_records_give_test_queries(tmp_path):
    rng = random.Random(3)
    records = [chunk(f"r{i:03d}", 0, " ".join(rng.choices(WORDS, k=12)).capitalize() + ".") for i in range(60)]
    emb = HashingEmbedder(dim=64)
    store = _index(tmp_path, records, emb)
    result = calibrate(Pipeline.build(store=store, embedder=emb, reranker=None), n_queries=40)
    assert result.queries >= MIN_QUERIES and "too small" not in result.reason


def test_korean_sentences_are_split_and_counted_as_words():
    text = "서울에서 열린 회의는 세 시에 끝났습니다. 다음 회의는 부산에서 열릴 예정입니다. 東京では会議があります。次は大阪です。"
    from funnel.calibrate.queries import _units

    assert _units(text) == ["서울에서 열린 회의는 세 시에 끝났습니다.", "다음 회의는 부산에서 열릴 예정입니다.",
                            "東京では会議があります。", "次は大阪です。"]


def _runtime_imports(path) -> set[str]:
    """Every module a file imports when it runs: function-level imports included, `if TYPE_CHECKING:` left out."""
    import ast

    names: set[str] = set()

    def visit(node):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return names


def test_calibration_gets_the_pipeline_from_its_caller_and_never_imports_it():
    from pathlib import Path

    import funnel.calibrate

    package = Path(funnel.calibrate.__file__).parent
    modules = sorted(package.glob("*.py"))
    assert len(modules) > 5
    offenders = {p.name: sorted(n for n in _runtime_imports(p) if n.startswith("funnel.pipeline")) for p in modules}
    assert {name: found for name, found in offenders.items() if found} == {}
    assert "funnel.calibrate" in _runtime_imports(package.parent / "pipeline.py")  # one direction only
