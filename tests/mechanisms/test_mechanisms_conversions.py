"""Group privacy, amplification by Poisson subsampling, zCDP conversions."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcalc.errors import ParameterError
from dpcalc.mechanisms.conversions import (
    group_privacy,
    poisson_subsampling,
    pure_to_zcdp,
    zcdp_to_epsilon,
)
from dpcalc.mechanisms.gaussian import gaussian_epsilon


def test_group_privacy_closed_form():
    # Vadhan 2017 Lemma 2.2: δ_k = δ·Σ_{i<k} e^{iε}
    res = group_privacy(epsilon=1.0, delta=1e-6, group_size=4)
    assert res["epsilon"] == 4.0
    assert res["delta"] == pytest.approx(1e-6 * sum(math.exp(i) for i in range(4)), rel=1e-12)
    assert res["delta"] <= res.details["delta_loose"]
    assert group_privacy(epsilon=0, delta=1e-6, group_size=5)["delta"] == pytest.approx(5e-6)
    assert group_privacy(epsilon=1, delta=0, group_size=5)["delta"] == 0
    assert group_privacy(epsilon=10, delta=1e-3, group_size=100)["delta"] == 1.0  # vacuous, capped


def test_subsampling_closed_form():
    # Balle, Barthe, Gaboardi 2018 Thm 8: ln(1 + q(e^ε − 1)), qδ
    res = poisson_subsampling(epsilon=2.0, delta=1e-5, sample_rate=0.01)
    assert res["epsilon"] == pytest.approx(math.log(1 + 0.01 * (math.e**2 - 1)), rel=1e-14)
    assert res["delta"] == pytest.approx(1e-7)
    assert poisson_subsampling(epsilon=2.0, sample_rate=1.0)["epsilon"] == pytest.approx(2.0)
    assert poisson_subsampling(epsilon=1000.0, sample_rate=0.5)["epsilon"] == pytest.approx(1000 + math.log(0.5))


@settings(max_examples=50, deadline=None)
@given(eps=st.floats(0, 50), q1=st.floats(1e-6, 1), q2=st.floats(1e-6, 1))
def test_subsampling_monotone_in_q(eps, q1, q2):
    lo, hi = sorted((q1, q2))
    e_lo = poisson_subsampling(epsilon=eps, sample_rate=lo)["epsilon"]
    e_hi = poisson_subsampling(epsilon=eps, sample_rate=hi)["epsilon"]
    assert e_lo <= e_hi * (1 + 1e-12) + 1e-300 and e_hi <= eps * (1 + 1e-12)


def test_pure_to_zcdp():
    assert pure_to_zcdp(epsilon=1.0)["rho"] == 0.5  # Bun & Steinke 2016 Prop 1.4


@pytest.mark.parametrize("mu, delta", [(1.0, 1e-5), (0.3, 1e-8), (3.0, 1e-3)])
def test_zcdp_conversion_is_valid_and_tighter(mu, delta):
    # A Gaussian with μ = Δ/σ is (μ²/2)-zCDP; the CKS conversion must not go below its exact ε
    # (Balle & Wang curve) and is at most Bun–Steinke's ρ + 2√(ρ ln 1/δ).
    res = zcdp_to_epsilon(rho=mu**2 / 2, delta=delta)
    exact = gaussian_epsilon(delta=delta, mu=mu)
    assert exact <= res["epsilon"] <= res.details["epsilon_bun_steinke"]


def test_zcdp_minimum_over_orders():
    rho, delta = 0.1, 1e-6
    res = zcdp_to_epsilon(rho=rho, delta=delta)
    # brute force over a fine α grid (CKS20 Prop 12 formula)
    f = lambda a: a * rho + math.log1p(-1 / a) - (math.log(delta) + math.log(a)) / (a - 1)  # noqa: E731
    best = min(f(1 + i / 1000) for i in range(1, 200_000))
    assert res["epsilon"] <= best + 1e-9


@pytest.mark.parametrize("call", [
    lambda: group_privacy(epsilon=-1, group_size=2), lambda: group_privacy(epsilon=1, group_size=0),
    lambda: group_privacy(epsilon=1, delta=2, group_size=2), lambda: poisson_subsampling(epsilon=1, sample_rate=0),
    lambda: zcdp_to_epsilon(rho=0, delta=1e-5), lambda: zcdp_to_epsilon(rho=1, delta=1)])
def test_bad_input(call):
    with pytest.raises(ParameterError):
        call()
