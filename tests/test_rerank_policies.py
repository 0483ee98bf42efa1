import time

import pytest

from funnel.errors import ConfigError
from funnel.group import group
from funnel.rerank.policies import GuaranteedSlots, PolicyParams, RerankPolicy, Rrf, second_stage
from funnel.types import RerankResult, RerankStatus

from helpers import FailingReranker, ScriptedReranker, candidates


def order(result):
    return [h.chunk.doc_id for h in result.hits]


def test_seed_001_table_row_survives_a_reranker_that_scores_it_lowest():
    # Hybrid ranks the CEO table row #1; an MS MARCO-style cross-encoder scores it lowest.
    cands = candidates(["ceo_row", "history", "employees", "culture", "office"])
    reranker = ScriptedReranker(
        {"ceo_row": -9.0, "history": 0.9, "employees": 0.1, "culture": 0.8, "office": 0.7}
    )
    replaced = second_stage("Who is the CEO of Zentara Robotics?", cands, reranker, RerankPolicy.REPLACE)
    top3 = [d.doc_id for d in group(replaced.hits, k=3)]
    assert "ceo_row" not in top3  # the seed 001 failure, reproduced

    kept = second_stage(
        "Who is the CEO of Zentara Robotics?", cands, reranker, GuaranteedSlots(2)
    )
    top3 = [d.doc_id for d in group(kept.hits, k=3)]
    assert top3 == ["ceo_row", "history", "culture"]  # 2 guaranteed + the reranker's best of the rest
    assert [h.guaranteed for h in kept.hits[:3]] == [True, True, False]
    assert kept.status is RerankStatus.OK


def test_guaranteed_slots_count_documents_and_keep_their_chunks_in_first_stage_order():
    cands = candidates(["a", "b", "c", "a", "d"])
    reranker = ScriptedReranker({"a": 0.0, "b": 0.0, "c": 1.0, "d": 0.5})
    result = second_stage("q", cands, reranker, GuaranteedSlots(g=2))
    assert [h.chunk.chunk_id for h in result.hits if h.guaranteed] == ["a#0", "b#0", "a#1"]
    assert [h.chunk.chunk_id for h in result.hits] == ["a#0", "b#0", "a#1", "c#0", "d#0"]
    assert [d.doc_id for d in group(result.hits, k=3)] == ["a", "b", "c"]


def test_replace_orders_by_reranker_and_reports_ranks():
    cands = candidates(["a", "b", "c"])
    result = second_stage("q", cands, ScriptedReranker({"a": 0.1, "b": 0.5, "c": 0.9}), RerankPolicy.REPLACE)
    assert order(result) == ["c", "b", "a"]
    assert [h.rerank_rank for h in result.hits] == [1, 2, 3]
    assert [h.final_rank for h in result.hits] == [1, 2, 3]
    assert result.hits[0].candidate.fused_rank == 3


def test_rrf_policy_fuses_first_stage_and_reranker_ranks():
    cands = candidates(["a", "b", "c"])
    result = second_stage("q", cands, ScriptedReranker({"a": 0.0, "b": 1.0, "c": 0.5}), Rrf(k=60))
    # a: 1/61 + 1/63, b: 1/62 + 1/61, c: 1/63 + 1/62
    assert order(result) == ["b", "a", "c"]
    assert result.hits[0].final_score == pytest.approx(1 / 62 + 1 / 61)


def test_none_policy_skips_the_reranker():
    reranker = ScriptedReranker({"a": 1.0, "b": 2.0})
    result = second_stage("q", candidates(["a", "b"]), reranker, RerankPolicy.NONE)
    assert order(result) == ["a", "b"] and reranker.calls == 0
    assert result.status is RerankStatus.SKIPPED


@pytest.mark.parametrize(
    "error", [RuntimeError("model exploded"), ConnectionError("refused"), KeyError("index")]
)
@pytest.mark.parametrize("policy", [RerankPolicy.REPLACE, RerankPolicy.GUARANTEED_SLOTS, RerankPolicy.RRF])
def test_fallback_is_identity_on_first_stage_order(error, policy):
    cands = candidates(["a", "b", "c", "a", "d"])
    result = second_stage("q", cands, FailingReranker(error), policy)
    assert [h.candidate for h in result.hits] == cands
    assert [h.final_rank for h in result.hits] == [1, 2, 3, 4, 5]
    assert [h.final_score for h in result.hits] == [c.fused_score for c in cands]
    assert all(h.rerank_score is None for h in result.hits)
    assert result.status is RerankStatus.FALLBACK
    assert type(error).__name__ in result.reason


class _Malformed:
    name = "malformed"

    def __init__(self, result):
        self.result = result

    def rerank(self, query, candidates):
        return self.result


@pytest.mark.parametrize(
    "bad",
    [RerankResult((0.1,)), RerankResult((0.1, float("nan"), 0.3)), {"scores": [1, 2, 3]}],
    ids=["too-few", "nan", "not-a-result"],
)
def test_malformed_reranker_output_falls_back(bad):
    cands = candidates(["a", "b", "c"])
    result = second_stage("q", cands, _Malformed(bad), RerankPolicy.REPLACE)
    assert result.status is RerankStatus.FALLBACK
    assert order(result) == ["a", "b", "c"]


def test_slow_reranker_times_out_to_first_stage_order():
    class Slow:
        name = "slow"

        def rerank(self, query, candidates):
            time.sleep(2)
            return RerankResult(tuple(range(len(candidates))))

    started = time.perf_counter()
    result = second_stage("q", candidates(["a", "b"]), Slow(), RerankPolicy.REPLACE, timeout_s=0.2)
    assert time.perf_counter() - started < 1.5
    assert result.status is RerankStatus.FALLBACK and "timed out" in result.reason
    assert order(result) == ["a", "b"]


def test_unknown_policy_lists_valid_values():
    with pytest.raises(ConfigError, match="guaranteed_slots"):
        RerankPolicy.parse("smart_merge")


def test_group_counts_documents_and_keeps_best_chunk_first():
    cands = candidates(["a", "b", "a", "c", "b", "d"])
    result = second_stage("q", cands, None, RerankPolicy.NONE)
    docs = group(result.hits, k=3)
    assert [d.doc_id for d in docs] == ["a", "b", "c"]
    assert [h.chunk.ordinal for h in docs[0].hits] == [0, 1]
    assert [d.rank for d in docs] == [1, 2, 3]


def test_weighted_rrf_matches_the_closed_form():
    from helpers import candidates as make

    cands = make(["a", "b", "c", "d", "e"])
    scores = [0.1, 0.9, 0.5, 0.8, 0.2]  # reranker ranks: b=1, d=2, c=3, e=4, a=5
    rerank_rank = {i: r for r, i in enumerate(sorted(range(5), key=lambda i: -scores[i]), start=1)}
    for weight in (0.25, 1.0, 2.0):
        hits = Rrf(k=60.0, weight=weight).order(cands, scores)
        expected = sorted(range(5), key=lambda i: -(1 / (60 + i + 1) + weight / (60 + rerank_rank[i])))
        assert [h.chunk.doc_id for h in hits] == [cands[i].chunk.doc_id for i in expected]
        assert hits[0].final_score == pytest.approx(max(1 / (61 + i) + weight / (60 + rerank_rank[i]) for i in range(5)))
    unweighted = Rrf(k=60.0, weight=0.0).order(cands, scores)
    assert [h.chunk.doc_id for h in unweighted] == ["a", "b", "c", "d", "e"]  # weight 0: the first-stage order


def test_a_gated_rrf_reorders_only_when_the_reranker_is_sure():
    from helpers import candidates as make

    cands = make(["a", "b", "c", "d"])
    unsure = [0.5, 0.9, 0.8, 0.1]  # best leads second by 0.1
    kept = Rrf(gate=0.2).order(cands, unsure)
    assert [h.chunk.doc_id for h in kept] == ["a", "b", "c", "d"]  # the first-stage order stands
    assert [h.rerank_score for h in kept] == unsure and [h.rerank_rank for h in kept] == [3, 1, 2, 4]
    assert [h.final_score for h in kept] == sorted((h.final_score for h in kept), reverse=True)
    sure = [0.5, 0.9, 0.6, 0.1]  # a lead of 0.3: the same as plain rrf
    assert Rrf(gate=0.2).order(cands, sure) == Rrf().order(cands, sure)
    assert Rrf(gate=0.2).order(cands[:1], [0.3]) == Rrf().order(cands[:1], [0.3])  # one candidate: no gate
    assert PolicyParams(rerank_gate=0.2).policy_of("rrf") == Rrf(gate=0.2)
    assert PolicyParams(rerank_gate=0.2).policy_of("rrf", weight=0.5, gate=0.0) == Rrf(weight=0.5)
    with pytest.raises(ConfigError, match="the rerank gate must be 0 or more"):
        Rrf(gate=-0.1)


def test_a_policy_object_carries_its_parameters_and_a_name_parses_into_one():
    from dataclasses import replace

    from funnel.rerank.policies import FirstStageOnly, Replace

    defaults = PolicyParams()
    assert defaults.policy_of("guaranteed_slots") == GuaranteedSlots() and GuaranteedSlots().g == 2
    assert PolicyParams(rerank_rrf_k=10, rerank_weight=0.5).policy_of(RerankPolicy.RRF) == Rrf(k=10, weight=0.5)
    assert defaults.policy_of("rrf", weight=0.25) == Rrf(weight=0.25)  # a calibration's or a variant's weight
    assert defaults.policy_of("rrf") == Rrf() and (Rrf().k, Rrf().weight) == (60.0, 1.0)
    assert (defaults.policy_of("none"), defaults.policy_of("replace")) == (FirstStageOnly(), Replace())
    assert [p.kind for p in (FirstStageOnly(), Replace(), GuaranteedSlots(), Rrf())] == [
        RerankPolicy.NONE, RerankPolicy.REPLACE, RerankPolicy.GUARANTEED_SLOTS, RerankPolicy.RRF]
    with pytest.raises(ValueError, match="auto"):
        defaults.policy_of("auto")
    with pytest.raises(ConfigError, match="guaranteed slots must be 0 or more"):
        GuaranteedSlots(-1)
    with pytest.raises(ConfigError, match="guaranteed slots must be 0 or more"):
        PolicyParams(guaranteed=-1)  # the parameters are checked by the policies they feed
    with pytest.raises(ConfigError, match="reranker weight must be 0 or more"):
        replace(Rrf(), weight=-1.0)  # an override is checked as a new policy is


def test_second_stage_under_a_policy_name_is_that_policy_with_its_default_parameters():
    cands = candidates(["a", "b", "a", "c", "d"])
    reranker = ScriptedReranker({"a": 0.1, "b": 0.2, "c": 0.9, "d": 0.5})
    for name in (RerankPolicy.GUARANTEED_SLOTS, RerankPolicy.RRF, RerankPolicy.REPLACE):
        by_object = second_stage("q", cands, reranker, PolicyParams().policy_of(name))
        by_name = second_stage("q", cands, reranker, name)
        assert [(h.chunk.chunk_id, h.final_score, h.guaranteed) for h in by_object.hits] == [
            (h.chunk.chunk_id, h.final_score, h.guaranteed) for h in by_name.hits]
    assert order(second_stage("q", cands, reranker, GuaranteedSlots(1)))[:2] == ["a", "a"]


def test_search_config_and_settings_take_their_policy_parameters_from_the_core():
    from dataclasses import fields

    from funnel.apps.settings import SECTION_MODELS, Settings, load_settings, section_key
    from funnel.engine_config import EngineConfig
    from funnel.retrieve.first_stage import FirstStageConfig

    config = EngineConfig.of().rerank
    assert (config.guaranteed, config.rerank_rrf_k, config.rerank_weight) == (GuaranteedSlots().g, Rrf().k, Rrf().weight)
    assert config.policy_of(RerankPolicy.RRF, weight=0.5) == Rrf(k=config.rerank_rrf_k, weight=0.5)
    # Every PolicyParams field is a [rerank] setting with the core's default and range: a new parameter needs
    # no edit outside funnel/rerank/policies.py.
    rerank_fields = SECTION_MODELS["rerank"].model_fields
    for f in fields(PolicyParams):
        key = section_key("rerank", f.name)
        assert rerank_fields[key].default == f.default, f.name
        assert rerank_fields[key].description == f.metadata["description"], f.name
        with pytest.raises(ConfigError, match=f"invalid setting rerank.{key}"):
            load_settings(**{f.name: -1})
    assert SECTION_MODELS["search"].model_fields["rrf_k"].default == FirstStageConfig().rrf_k
    # [search] rrf_k is the first stage's fusion k; [rerank] rrf_k the rrf policy's: one does not set the other.
    built = Settings(rrf_k=10, rerank_rrf_k=30, guaranteed=4, rerank_weight=0.5).engine()
    assert (built.first_stage.rrf_k, built.rerank.rerank_rrf_k, built.rerank.guaranteed,
            built.rerank.rerank_weight) == (10, 30, 4, 0.5)
    with pytest.raises(ConfigError, match="guaranteed slots must be 0 or more"):
        EngineConfig.of(guaranteed=-1)


class _Recording(ScriptedReranker):
    def rerank(self, query, candidates):
        self.seen = [c.chunk.doc_id for c in candidates]
        return super().rerank(query, candidates)


@pytest.mark.parametrize("policy", [RerankPolicy.REPLACE, Rrf(weight=1.0), GuaranteedSlots(1)])
def test_a_rerank_depth_scores_only_the_window_top_and_keeps_the_rest_below_in_first_stage_order(policy):
    cands = candidates(["a", "b", "c", "d", "e"])
    reranker = _Recording({"a": 0.1, "b": 0.2, "c": 0.9, "d": 1.0, "e": 1.0})
    result = second_stage("q", cands, reranker, policy, depth=3)
    assert reranker.seen == ["a", "b", "c"]  # d and e never reach the model
    assert order(result)[3:] == ["d", "e"]  # however high the model would have scored them
    assert sorted(order(result)[:3]) == ["a", "b", "c"]
    assert [h.rerank_score is None for h in result.hits] == [False, False, False, True, True]
    assert [h.final_rank for h in result.hits] == [1, 2, 3, 4, 5]
    full = second_stage("q", cands, reranker, policy, depth=None)
    assert reranker.seen == ["a", "b", "c", "d", "e"]
    assert order(second_stage("q", cands, reranker, policy, depth=10)) == order(full)


def test_a_rerank_depth_below_one_is_refused():
    with pytest.raises(ConfigError, match="rerank depth"):
        second_stage("q", candidates(["a"]), ScriptedReranker({"a": 1.0}), RerankPolicy.REPLACE, depth=0)
