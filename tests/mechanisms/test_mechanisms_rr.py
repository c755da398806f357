"""Randomized response: probabilities (Warner 1965; DR14 §3.2), unbiased estimation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcalc.errors import ParameterError
from dpcalc.mechanisms.randomized_response import (
    parse_counts,
    randomized_response,
    rr_probabilities,
)


def test_ln3_gives_three_quarters():
    # Dwork & Roth 2014 §3.2: ε = ln 3 → truthful with probability 3/4
    p, q = rr_probabilities(epsilon=math.log(3))
    assert p == pytest.approx(0.75, rel=1e-15) and q == pytest.approx(0.25, rel=1e-14)


@settings(max_examples=50, deadline=None)
@given(eps=st.floats(1e-4, 50), k=st.integers(2, 1000))
def test_k_ary_probabilities(eps, k):
    p, q = rr_probabilities(epsilon=eps, categories=k)
    assert p + (k - 1) * q == pytest.approx(1, rel=1e-12)
    assert math.log(p / q) == pytest.approx(eps, rel=1e-9)  # exactly ε-LDP


def test_estimates_are_unbiased_in_expectation():
    # feed the expected observed counts: the estimate must return the true frequencies
    eps, k, n = 1.0, 3, 10**6
    pi = np.array([0.5, 0.3, 0.2])
    p, q = rr_probabilities(epsilon=eps, categories=k)
    expected = n * (pi * p + (1 - pi) * q)
    res = randomized_response(epsilon=eps, categories=k, observed=[int(round(x)) for x in expected])
    assert np.allclose(res["estimates"], pi, atol=1e-5)


def test_simulated_standard_error():
    rng = np.random.default_rng(1)
    eps, n = math.log(3), 4000
    truth = rng.random(n) < 0.3
    keep = rng.random(n) < 0.75
    reported = np.where(keep, truth, ~truth)
    yes = int(reported.sum())
    res = randomized_response(epsilon=eps, observed=[yes, n - yes])
    est, se = res["estimates"][0], res["standard_errors"][0]
    # closed form: SE = √(λ(1−λ)/n)/(p−q) with p − q = 1/2
    lam = yes / n
    assert se == pytest.approx(math.sqrt(lam * (1 - lam) / n) / 0.5)
    assert abs(est - 0.3) < 4 * se


@pytest.mark.parametrize("kw", [{"epsilon": 0}, {"epsilon": -1}, {"epsilon": 1, "categories": 1},
                                {"epsilon": 1, "observed": [1, 2, 3]}, {"epsilon": 1, "observed": [0, 0]},
                                {"epsilon": 1, "observed": [-1, 3]}])
def test_bad_input(kw):
    with pytest.raises(ParameterError):
        randomized_response(**kw)


def test_parse_counts():
    assert parse_counts("10, 20,30") == [10, 20, 30]
    for bad in ("1,x", "1.5,2", "-1,2"):
        with pytest.raises(ParameterError, match="observed"):
            parse_counts(bad)
