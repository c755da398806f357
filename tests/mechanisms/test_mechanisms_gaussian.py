"""Gaussian mechanism: exact curve (Balle & Wang 2018 Thm 8), analytic/classical calibration,
accuracy and its inverse. Reference values carry their source."""

from __future__ import annotations

import math

import mpmath as mp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcalc.errors import ParameterError
from dpcalc.mechanisms.gaussian import (
    analytic_noise_std,
    calibrate_gaussian,
    classical_noise_std,
    gaussian_accuracy,
    gaussian_delta,
    gaussian_epsilon,
    gaussian_epsilon_for_accuracy,
    gaussian_log_delta,
)


def mp_delta(eps, mu, dps=60):
    """δ(ε) of μ-GDP at high precision (Balle & Wang 2018 Thm 8), the independent reference."""
    with mp.workdps(dps):
        eps, mu = mp.mpf(eps), mp.mpf(mu)
        return mp.ncdf(mu / 2 - eps / mu) - mp.e**eps * mp.ncdf(-mu / 2 - eps / mu)


# docs/references.md: classical σ = 4.8448 / analytic 3.730632 (ε=1, δ=1e-5); 5.2988 / 4.224679 (δ=1e-6);
# Dwork–Roth Thm A.1 and Balle–Wang 2018 (dp_accounting and autodp agree).
@pytest.mark.parametrize("delta, analytic, classical", [(1e-5, 3.730632, 4.8448), (1e-6, 4.224679, 5.2988)])
def test_published_sigmas(delta, analytic, classical):
    assert analytic_noise_std(epsilon=1, delta=delta) == pytest.approx(analytic, abs=1e-6)
    # the classical formula evaluated at ε = 1 (refused there as a theorem): Δ·√(2 ln(1.25/δ))/ε
    assert classical_noise_std(epsilon=0.5, delta=delta) * 0.5 == pytest.approx(classical, abs=1e-4)


def test_exact_epsilon_of_mu_one():
    # docs/references.md: σ=10, T=100 (μ-GDP with μ=1), δ=1e-5 → exact ε = 4.37718 (closed form, mpmath)
    assert gaussian_epsilon(delta=1e-5, mu=1.0) == pytest.approx(4.37718, abs=1e-5)
    assert gaussian_epsilon(delta=1e-5, mu=math.sqrt(100) * 1 / 10) == pytest.approx(4.37718, abs=1e-5)


@pytest.mark.parametrize("eps, mu", [(0, 0.001), (0.1, 10), (1, 1), (3, 0.1), (8, 0.5), (10, 3), (20, 1),
                                     (0.5, 0.2), (2, 5)])
def test_delta_matches_mpmath(eps, mu):
    ref = mp_delta(eps, mu)
    assert gaussian_log_delta(epsilon=eps, mu=mu) == pytest.approx(float(mp.log(ref)), rel=1e-12, abs=1e-12)


def test_tiny_delta_in_log_space():
    # δ(50; μ=1) ≈ e^{-1262}: underflows as a double, finite in log space (mpmath reference)
    assert gaussian_delta(epsilon=50, mu=1.0) == 0.0
    assert gaussian_log_delta(epsilon=50, mu=1.0) == pytest.approx(float(mp.log(mp_delta(50, 1))), rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(eps=st.floats(0.01, 30), log_delta=st.floats(-27.6, -0.7), sens=st.floats(0.01, 100))
def test_analytic_sigma_meets_condition_with_equality(eps, log_delta, sens):
    delta = math.exp(log_delta)
    sigma = analytic_noise_std(epsilon=eps, delta=delta, sensitivity=sens)
    achieved = gaussian_delta(epsilon=eps, mu=sens / sigma)
    assert achieved <= delta  # never under-calibrated
    assert achieved == pytest.approx(delta, rel=1e-9)  # Balle–Wang condition holds with equality


@settings(max_examples=40, deadline=None)
@given(eps=st.floats(0.01, 0.99), log_delta=st.floats(-27.6, -0.7))
def test_analytic_never_above_classical(eps, log_delta):
    delta = math.exp(log_delta)
    assert analytic_noise_std(epsilon=eps, delta=delta) <= classical_noise_std(epsilon=eps, delta=delta)


@settings(max_examples=40, deadline=None)
@given(e1=st.floats(0.05, 10), e2=st.floats(0.05, 10), log_delta=st.floats(-23, -1))
def test_sigma_decreases_with_epsilon(e1, e2, log_delta):
    delta = math.exp(log_delta)
    lo, hi = sorted((e1, e2))
    # monotone up to the root finder's tolerance (σ is found to ~1e-15 relative, then verified)
    assert analytic_noise_std(epsilon=hi, delta=delta) <= analytic_noise_std(epsilon=lo, delta=delta) * (1 + 1e-12)


@settings(max_examples=40, deadline=None)
@given(log_delta=st.floats(-27.6, -0.1), mu=st.floats(0.02, 20))
def test_epsilon_delta_round_trip(log_delta, mu):
    delta = math.exp(log_delta)
    eps = gaussian_epsilon(delta=delta, mu=mu)
    if eps == 0:
        assert gaussian_delta(epsilon=0, mu=mu) <= delta
        return
    assert gaussian_delta(epsilon=eps, mu=mu) <= delta
    assert gaussian_delta(epsilon=eps, mu=mu) == pytest.approx(delta, rel=1e-9)
    # and back: calibrating σ for (ε, δ) returns μ
    assert analytic_noise_std(epsilon=eps, delta=delta) == pytest.approx(1 / mu, rel=1e-8)


def test_calibrate_rows_side_by_side():
    rows = calibrate_gaussian(epsilon=0.5, delta=1e-5, sensitivity=2, beta=0.05, dims=10)
    a, c = (r.to_json() for r in rows)
    assert (a["method"], c["method"]) == ("analytic", "classical")
    assert a["noise_multiplier"] == pytest.approx(a["noise_std"] / 2)
    assert a["details"]["saving_vs_classical"] == pytest.approx(1 - a["noise_std"] / c["noise_std"])
    assert a["details"]["rho"] == pytest.approx(4 / (2 * a["noise_std"] ** 2))  # Bun & Steinke 2016
    assert a["details"]["mu"] == pytest.approx(2 / a["noise_std"])
    assert a["details"]["accuracy"]["per_coordinate"] == pytest.approx(1.959963985 * a["noise_std"])
    first = calibrate_gaussian(epsilon=0.5, delta=1e-5, method="classical")
    assert first[0].method == "classical"


def test_classical_refused_for_large_epsilon():
    with pytest.raises(ParameterError, match="analytic"):
        classical_noise_std(epsilon=1.0, delta=1e-5)
    with pytest.raises(ParameterError, match="analytic"):
        calibrate_gaussian(epsilon=2.0, delta=1e-5, method="classical")
    rows = calibrate_gaussian(epsilon=2.0, delta=1e-5)
    assert rows[1].applicable is False and rows[1].to_json()["noise_std"] is None


def test_accuracy_quantiles():
    scipy_stats = pytest.importorskip("scipy.stats")
    acc = gaussian_accuracy(noise_std=2.0, beta=0.05, dims=50)
    # ℓ2: σ·√(χ²_k quantile) (independent reference: scipy.stats)
    assert acc["l2"] == pytest.approx(2.0 * math.sqrt(scipy_stats.chi2.isf(0.05, 50)), rel=1e-10)
    # ℓ∞ exact: Pr[max |Z_i| < α] = (1 − 2Φ(−α/σ))^k = 1 − β
    p_inside = (1 - 2 * scipy_stats.norm.sf(acc["linf"] / 2.0)) ** 50
    assert p_inside == pytest.approx(0.95, rel=1e-10)
    assert acc["linf"] <= acc["linf_union_bound"]
    one = gaussian_accuracy(noise_std=1.0, beta=0.05, dims=1)
    assert one["per_coordinate"] == pytest.approx(one["linf"]) == pytest.approx(one["l2"])
    assert one["per_coordinate"] == pytest.approx(1.959963984540054)  # Φ⁻¹(0.975)


@pytest.mark.parametrize("norm", ["linf", "l2"])
def test_accuracy_inverse_round_trip(norm):
    rows = gaussian_epsilon_for_accuracy(accuracy=10, beta=0.05, delta=1e-5, sensitivity=1, dims=20, norm=norm)
    eps = rows[0]["epsilon"]
    sigma = analytic_noise_std(epsilon=eps, delta=1e-5)
    acc = gaussian_accuracy(noise_std=sigma, beta=0.05, dims=20)[norm]
    assert acc == pytest.approx(10, rel=1e-8)
    assert acc <= 10 * (1 + 1e-12)


def test_bad_input():
    for kw in ({"epsilon": 0, "delta": 1e-5}, {"epsilon": -1, "delta": 1e-5}, {"epsilon": 1, "delta": 0},
               {"epsilon": 1, "delta": 1}, {"epsilon": float("nan"), "delta": 1e-5},
               {"epsilon": 1, "delta": 1e-5, "sensitivity": 0}):
        with pytest.raises(ParameterError):
            analytic_noise_std(**kw)
    with pytest.raises(ParameterError, match="mu"):
        gaussian_delta(epsilon=1, mu=0)
    with pytest.raises(ParameterError, match="delta"):
        gaussian_epsilon(delta=1.5, mu=1)
