"""Laplace mechanism: scale, accuracy (Dwork & Roth 2014 Thm 3.8) and the inverse."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcalc.errors import ParameterError
from dpcalc.mechanisms.laplace import (
    calibrate_laplace,
    laplace_accuracy,
    laplace_epsilon_for_accuracy,
    laplace_scale,
)


def test_census_example():
    # Dwork & Roth 2014 Thm 3.8 example (first names in the census): k = 10,000, ε = 1, β = 0.05
    # → ℓ∞ error ≤ ln(10000/0.05) ≈ 12.2 with probability 95%.
    res = calibrate_laplace(epsilon=1, sensitivity=1, beta=0.05, dims=10_000)
    assert res["accuracy"] == pytest.approx(math.log(10_000 / 0.05))
    assert round(res["accuracy"], 1) == 12.2
    assert res.details["accuracy_exact"] <= res["accuracy"]


def test_scale_and_std():
    # b = Δ₁/ε (DR14 Thm 3.6); Var Lap(b) = 2b²
    res = calibrate_laplace(epsilon=0.5, sensitivity=2)
    assert res["scale"] == 4.0
    assert res["noise_std"] == pytest.approx(4 * math.sqrt(2))
    assert res.to_json()["method"] == "laplace" and res.to_json()["delta"] == 0.0


def test_single_coordinate_exact_equals_theorem():
    # k = 1: Pr[|Y| ≥ t·b] = e^{−t} exactly, so both bounds are b·ln(1/β)
    acc = laplace_accuracy(scale=3.0, beta=0.1, dims=1)
    assert acc["accuracy"] == pytest.approx(3 * math.log(10))
    assert acc["accuracy_exact"] == pytest.approx(acc["accuracy"])


def test_exact_quantile_is_exact():
    acc = laplace_accuracy(scale=1.0, beta=0.05, dims=100)
    # Pr[max |Y_i| < α] = (1 − e^{−α/b})^k
    assert (1 - math.exp(-acc["accuracy_exact"])) ** 100 == pytest.approx(0.95, rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(alpha=st.floats(0.01, 1e4), beta=st.floats(1e-9, 0.99), dims=st.integers(1, 10**6),
       sens=st.floats(0.01, 100))
def test_inverse_round_trip(alpha, beta, dims, sens):
    inv = laplace_epsilon_for_accuracy(accuracy=alpha, beta=beta, sensitivity=sens, dims=dims)
    fwd = calibrate_laplace(epsilon=inv["epsilon"], sensitivity=sens, beta=beta, dims=dims)
    assert fwd["accuracy"] == pytest.approx(alpha, rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(e1=st.floats(0.01, 10), e2=st.floats(0.01, 10), dims=st.integers(1, 1000))
def test_accuracy_improves_with_epsilon(e1, e2, dims):
    lo, hi = sorted((e1, e2))
    a_lo = calibrate_laplace(epsilon=lo, beta=0.05, dims=dims)["accuracy"]
    a_hi = calibrate_laplace(epsilon=hi, beta=0.05, dims=dims)["accuracy"]
    assert a_hi <= a_lo


@pytest.mark.parametrize("kw", [{"epsilon": 0}, {"epsilon": -1}, {"epsilon": math.inf},
                                {"epsilon": 1, "sensitivity": 0}])
def test_bad_input(kw):
    with pytest.raises(ParameterError):
        laplace_scale(**kw)


def test_bad_beta_and_dims():
    with pytest.raises(ParameterError, match="beta"):
        calibrate_laplace(epsilon=1, beta=1.0)
    with pytest.raises(ParameterError, match="dims"):
        calibrate_laplace(epsilon=1, beta=0.1, dims=0)
