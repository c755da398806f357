"""Exponential mechanism: probabilities (McSherry & Talwar 2007), stability, utility bound."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcalc.errors import ParameterError
from dpcalc.mechanisms.exponential import (
    exponential_mechanism,
    exponential_probabilities,
    read_scores,
)

scores_st = st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=50)


def test_closed_form_two_candidates():
    # p_a/p_b = exp(ε(u_a − u_b)/(2Δu)) (DR14 Def 3.4): ε = 1, Δu = 1, u = (2, 0) → p_a = e/(1+e)
    p = exponential_probabilities(scores=[2.0, 0.0], epsilon=1.0)
    assert p[0] == pytest.approx(math.e / (1 + math.e), rel=1e-14)
    pm = exponential_probabilities(scores=[2.0, 0.0], epsilon=1.0, monotonic=True)
    assert pm[0] == pytest.approx(math.exp(2) / (1 + math.exp(2)), rel=1e-14)


def test_utility_bound_formula():
    # DR14 Thm 3.11: OPT − (2Δu/ε)(ln|H| + t), t = ln(1/β)
    res = exponential_mechanism(scores=[10, 8, 3, 10], epsilon=0.5, sensitivity=2, beta=0.01)
    assert res["utility_bound"] == pytest.approx(10 - 8 * (math.log(4) + math.log(100)))
    assert res.details["utility_bound_opt_count"] == pytest.approx(10 - 8 * (math.log(2) + math.log(100)))
    mono = exponential_mechanism(scores=[10, 8, 3, 10], epsilon=0.5, sensitivity=2, beta=0.01, monotonic=True)
    assert mono["utility_bound"] == pytest.approx(10 - 4 * (math.log(4) + math.log(100)))


def test_utility_bound_holds_for_the_distribution():
    rng = np.random.default_rng(0)
    u = rng.normal(0, 50, size=2000)
    res = exponential_mechanism(scores=u, epsilon=1.0, sensitivity=1.0, beta=0.05)
    p = res["probabilities"]
    assert p[u <= res["utility_bound"]].sum() <= 0.05


@settings(max_examples=50, deadline=None)
@given(scores=scores_st, shift=st.floats(-1e6, 1e6), eps=st.floats(1e-3, 10))
def test_shift_invariance(scores, shift, eps):
    p = exponential_probabilities(scores=scores, epsilon=eps)
    q = exponential_probabilities(scores=np.asarray(scores) + shift, epsilon=eps)
    assert np.allclose(p, q, rtol=1e-6, atol=1e-12)
    assert math.isclose(p.sum(), 1.0, rel_tol=1e-12)


@settings(max_examples=50, deadline=None)
@given(scores=scores_st, eps=st.floats(1e-3, 10))
def test_probabilities_follow_score_order(scores, eps):
    u = np.asarray(scores)
    p = exponential_probabilities(scores=u, epsilon=eps)
    order = np.argsort(u, kind="stable")
    assert np.all(np.diff(p[order]) >= -1e-300)


def test_large_scores_and_many_candidates():
    # 10⁶ candidates with scores in the 10⁶ range: no overflow, sums to 1, top candidate right
    u = np.linspace(0, 1e6, 1_000_000)
    p = exponential_probabilities(scores=u, epsilon=1e-3)
    assert np.all(np.isfinite(p)) and math.isclose(p.sum(), 1.0, rel_tol=1e-9)
    assert int(np.argmax(p)) == 999_999


def test_read_scores_formats():
    labels, u = read_scores(io.StringIO("# header\nalpha,3\nbeta, -1.5\n\n"))
    assert labels == ["alpha", "beta"] and u.tolist() == [3.0, -1.5]
    labels, u = read_scores(["1", "2e3"])
    assert labels is None and u.tolist() == [1.0, 2000.0]


@pytest.mark.parametrize("lines, match", [([], "empty"), (["1", "nan"], "line 2"), (["1", "x"], "line 2"),
                                          (["1", "a,2"], "all"), (["inf"], "finite")])
def test_bad_scores(lines, match):
    with pytest.raises(ParameterError, match=match):
        read_scores(lines)


def test_bad_parameters():
    with pytest.raises(ParameterError, match="epsilon"):
        exponential_probabilities(scores=[1, 2], epsilon=0)
    with pytest.raises(ParameterError, match="scores"):
        exponential_probabilities(scores=[1, float("nan")], epsilon=1)
    with pytest.raises(ParameterError, match="scores"):
        exponential_probabilities(scores=[], epsilon=1)
