import pytest

from funnel.retrieve.fusion import rrf


def test_rrf_matches_closed_form():
    a = ["x", "y", "z"]
    b = ["z", "x"]
    fused = dict(rrf([a, b], k=60))
    assert fused["x"] == pytest.approx(1 / 61 + 1 / 62)
    assert fused["y"] == pytest.approx(1 / 62)
    assert fused["z"] == pytest.approx(1 / 63 + 1 / 61)


def test_rrf_orders_by_score_and_is_stable_on_ties():
    fused = rrf([["a", "b"], ["b", "a"]], k=60)
    assert [d for d, _ in fused] == ["a", "b"]  # equal scores: first seen first
    assert fused[0][1] == pytest.approx(fused[1][1])


def test_weighted_rrf():
    fused = dict(rrf([["a"], ["b"]], k=10, weights=[2.0, 0.5]))
    assert fused["a"] == pytest.approx(2.0 / 11)
    assert fused["b"] == pytest.approx(0.5 / 11)


def test_rrf_rejects_bad_arguments():
    with pytest.raises(ValueError):
        rrf([["a"]], k=0)
    with pytest.raises(ValueError):
        rrf([["a"], ["b"]], weights=[1.0])


def test_each_ranking_may_have_its_own_k():
    fused = dict(rrf([["a", "b"], ["b", "a"]], weights=[1.0, 2.0], ks=[1.0, 60.0]))
    assert fused["a"] == pytest.approx(1 / 2 + 2 / 62)
    assert fused["b"] == pytest.approx(1 / 3 + 2 / 61)
    with pytest.raises(ValueError):
        rrf([["a"]], ks=[0.0])
