"""Tests of the certified PLD accountant (dpcalc.accounting.pld).

Reference values and where they come from:
- Unsampled Gaussian composed T times is μ-GDP with μ = √T/σ (Balle & Wang 2018 Thm 8;
  Dong, Roth, Su 2019 Cor. 2.13): δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2), evaluated with
  mpmath here; σ = 10, T = 100, δ = 1e-5 → ε = 4.37718 (docs/references.md).
- T-fold pure ε₀-DP: exact optimal composition (Kairouz, Oh, Viswanath 2015 Thm 3.3), the
  T-fold randomized-response curve δ(ε) = Σ_k C(T,k) p^{T−k}(1−p)^k (1 − e^{ε−(T−2k)ε₀})₊,
  p = e^{ε₀}/(1+e^{ε₀}), summed exactly with mpmath here.
- Abadi et al. 2016 setting (q = 0.01, σ = 4, T = 10⁴, δ = 1e-5): true ε ≈ 0.947
  (dp_accounting PLD 0.9470; prv_accountant 0.9469 in [0.937, 0.957]) — docs/references.md.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcalc.accounting._pld_grid import discretize
from dpcalc.accounting._pld_mechanisms import (
    GaussianLoss,
    LaplaceLoss,
    RandomizedResponseLoss,
    SampledGaussianLoss,
    SampledGaussianReplaceLoss,
)
from dpcalc.accounting.calibrate import calibrate_dpsgd
from dpcalc.accounting.pld import PldAccountant
from dpcalc.errors import ParameterError, UnsupportedEventError
from dpcalc.events import (
    ComposedEvent,
    EpsilonDeltaEvent,
    GaussianEvent,
    LaplaceEvent,
    PoissonSampledEvent,
    SelfComposedEvent,
    dpsgd_event,
)

# ----------------------------------------------------------------------------- references


def _bisect(f, lo: float, hi: float) -> float:
    """Root of a decreasing f on [lo, hi] by 100 halvings (returns the upper end)."""
    lo, hi = mpmath.mpf(lo), mpmath.mpf(hi)
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if f(mid) > 0 else (lo, mid)
    return float(hi)


def gdp_delta(mu: float, eps: float) -> float:
    """Exact δ(ε) of μ-GDP (Dong, Roth, Su 2019 Cor. 2.13), mpmath."""
    mpmath.mp.dps = 40
    e, m = mpmath.mpf(eps), mpmath.mpf(mu)
    return float(mpmath.ncdf(-e / m + m / 2) - mpmath.exp(e) * mpmath.ncdf(-e / m - m / 2))


def gdp_epsilon(mu: float, delta: float) -> float:
    mpmath.mp.dps = 40
    return _bisect(lambda e: mpmath.ncdf(-e / mu + mu / 2) - mpmath.exp(e) * mpmath.ncdf(-e / mu - mu / 2) - delta,
                   0, 60)


def kov_delta(eps0: float, count: int, eps) -> mpmath.mpf:
    """Exact δ(ε) of T-fold ε₀-DP (Kairouz, Oh, Viswanath 2015 Thm 3.3), mpmath."""
    mpmath.mp.dps = 40
    e0 = mpmath.mpf(eps0)
    p = mpmath.exp(e0) / (1 + mpmath.exp(e0))
    total = mpmath.mpf(0)
    for k in range(count + 1):
        loss = (count - 2 * k) * e0
        if loss > eps:
            total += mpmath.binomial(count, k) * p ** (count - k) * (1 - p) ** k * (1 - mpmath.exp(eps - loss))
    return total


def kov_epsilon(eps0: float, count: int, delta: float) -> float:
    return _bisect(lambda e: kov_delta(eps0, count, e) - delta, 0, count * eps0)


def test_references_match_published():
    # docs/references.md: σ = 10, T = 100 (μ = 1), δ = 1e-5 → 4.37718
    assert gdp_epsilon(1.0, 1e-5) == pytest.approx(4.37718, abs=1e-5)
    # KOV: one ε₀-DP step has δ(ε₀) = 0 and δ(0) = (e^{ε₀} − 1)/(e^{ε₀} + 1)
    assert float(kov_delta(0.5, 1, 0.5)) == 0.0
    assert float(kov_delta(0.5, 1, 0.0)) == pytest.approx(math.tanh(0.25), rel=1e-12)


# ----------------------------------------------------------------------------- discretisation


PAIRS = [
    GaussianLoss(0.3),
    SampledGaussianLoss(1.1, 0.01, "remove"),
    SampledGaussianLoss(1.1, 0.01, "add"),
    SampledGaussianReplaceLoss(2.0, 0.05),
    LaplaceLoss(2.0),
    RandomizedResponseLoss(0.7, 1e-3),
]


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: type(p).__name__)
def test_discretisation_keeps_mass_and_brackets_the_curve(pair):
    h = 1e-3
    up, lo = discretize(pair, h, tail=1e-14, max_points=2 ** 20)
    # total mass (finite + ∞) is 1 for the upper PMF, ≤ 1 (lower tail dropped) for the lower one
    assert up.total_mass() == pytest.approx(1.0, abs=1e-12)
    assert 1.0 - 1e-12 <= up.total_mass() <= 1.0 + 1e-12
    assert 1.0 - 1e-12 <= lo.total_mass() + 1e-13 and lo.total_mass() <= 1.0 + 1e-12
    assert np.all(up.probs >= 0) and np.all(lo.probs >= 0)
    # a valid dominating pair has Q-mass Σ p e^{−ℓ} ≤ 1 (connect the dots preserves it)
    assert float(np.sum(up.probs * np.exp(-up.losses))) <= 1.0 + 1e-9
    # one step: lower δ ≤ exact δ ≤ upper δ at several ε
    for eps in (0.0, 0.05, 0.3, 0.69):
        exact = pair.delta(eps)
        d_up = float(np.sum(up.probs * np.clip(-np.expm1(eps - up.losses), 0, None))) + up.p_inf
        d_lo = float(np.sum(lo.probs * np.clip(-np.expm1(eps - lo.losses), 0, None))) + lo.p_inf
        assert d_lo <= exact + 1e-12
        assert exact <= d_up + 1e-12


def test_connect_the_dots_matches_the_curve_at_grid_points():
    # Doroshenko et al. 2022: the connect-the-dots PLD has the exact δ at every grid value of ε
    pair = SampledGaussianLoss(0.8, 0.05, "remove")
    h = 2e-3
    up, _ = discretize(pair, h, tail=1e-15, max_points=2 ** 20)
    for k in (0, 10, 100, 300):
        eps = k * h
        d_up = float(np.sum(up.probs * np.clip(-np.expm1(eps - up.losses), 0, None))) + up.p_inf
        assert d_up == pytest.approx(pair.delta(eps), rel=1e-6, abs=1e-13)


# ----------------------------------------------------------------------------- Gaussian (exact)


def test_gaussian_published_case_upper_within_0_1_percent():
    # σ = 10, T = 100, δ = 1e-5 → exact ε = 4.37718 (docs/references.md, μ-GDP closed form)
    exact = gdp_epsilon(1.0, 1e-5)
    for acc in (None, 1e-3):
        r = PldAccountant(accuracy=acc).epsilon(dpsgd_event(noise_multiplier=10, sample_rate=1, steps=100),
                                                delta=1e-5)
        assert r.certified and r.accountant == "pld"
        assert r.details["epsilon_lower"] <= exact <= r.epsilon
        assert r.epsilon <= exact * 1.001  # upper within 0.1% of exact (default accuracy too)


@pytest.mark.parametrize("sigma,steps,delta", [(1.0, 1, 1e-5), (2.0, 50, 1e-6), (5.0, 1000, 1e-3), (0.5, 3, 1e-8)])
def test_gaussian_sandwich(sigma, steps, delta):
    exact = gdp_epsilon(math.sqrt(steps) / sigma, delta)
    r = PldAccountant().epsilon(SelfComposedEvent(GaussianEvent(sigma), steps), delta=delta)
    assert r.details["epsilon_lower"] <= exact <= r.epsilon
    assert r.epsilon - r.details["epsilon_lower"] <= max(0.005 * r.epsilon, 1e-3) * 1.0001


def test_gaussian_delta_sandwich():
    mu = math.sqrt(100) / 10
    r = PldAccountant().delta(SelfComposedEvent(GaussianEvent(10.0), 100), epsilon=2.0)
    exact = gdp_delta(mu, 2.0)
    assert r.details["delta_lower"] <= exact <= r.delta
    assert r.delta <= exact * 1.01


def test_heterogeneous_gaussians_compose_exactly():
    # segments σ=2 ×30 and σ=5 ×200: μ² = 30/4 + 200/25 (GDP composition, Dong, Roth, Su 2019 Cor. 3.3)
    event = ComposedEvent((SelfComposedEvent(GaussianEvent(2.0), 30), SelfComposedEvent(GaussianEvent(5.0), 200)))
    exact = gdp_epsilon(math.sqrt(30 / 4 + 200 / 25), 1e-5)
    r = PldAccountant().epsilon(event, delta=1e-5)
    assert r.details["epsilon_lower"] <= exact <= r.epsilon


def test_replace_one_gaussian_is_sensitivity_two():
    # replace-one changes a sum by up to 2 clipping norms: μ = 2√T/σ (dp_accounting REPLACE_ONE at q = 1)
    exact = gdp_epsilon(2 * math.sqrt(10) / 8.0, 1e-5)
    r = PldAccountant(neighboring="replace").epsilon(dpsgd_event(noise_multiplier=8.0, sample_rate=1, steps=10),
                                                     delta=1e-5)
    assert r.details["epsilon_lower"] <= exact <= r.epsilon


# ----------------------------------------------------------------------------- pure DP / Laplace


@pytest.mark.parametrize("eps0,count,delta", [(0.1, 100, 1e-5), (0.5, 20, 1e-6), (1.0, 5, 1e-3)])
def test_epsilon_dp_matches_kov_and_laplace_is_no_larger(eps0, count, delta):
    exact = kov_epsilon(eps0, count, delta)
    acc = PldAccountant()
    r = acc.epsilon(SelfComposedEvent(EpsilonDeltaEvent(eps0, 0.0), count), delta=delta)
    assert r.details["epsilon_lower"] <= exact <= r.epsilon
    lap = acc.epsilon(SelfComposedEvent(LaplaceEvent(1 / eps0), count), delta=delta)
    # Laplace is dominated by randomized response with the same ε (KOV 2015 §2–3)
    assert lap.details["epsilon_lower"] <= exact
    assert lap.epsilon <= r.epsilon


def test_published_composition_100_x_0_1():
    # docs/references.md: k = 100 × (0.1, 0), δ = 1e-5 → exact optimal composition 4.3068 (KOV);
    # the PLD bracket must contain it (to the 4 published digits).
    r = PldAccountant().epsilon(SelfComposedEvent(EpsilonDeltaEvent(0.1), 100), delta=1e-5)
    assert r.details["epsilon_lower"] <= 4.3068 + 1e-4 and 4.3068 - 1e-4 <= r.epsilon


@pytest.mark.parametrize("eps0,delta0,count,delta", [
    (0.1, 0.0, 10_000, 1e-5), (0.1, 1e-8, 10_000, 1e-3), (1.0, 0.0, 10 ** 6, 1e-5), (0.01, 0.0, 10 ** 6, 1e-6),
])
def test_many_identical_dp_steps_sandwich_kov(eps0, delta0, count, delta):
    # exact homogeneous optimal composition (KOV 2015 Thm 3.3, dpcalc.composition.optimal); ε = 465,896
    # for 10⁶ × ε₀ = 1 also checks the read-out where e^{−ℓ} underflows (ℓ > 745)
    optimal = pytest.importorskip("dpcalc.composition.optimal")
    exact = optimal.homogeneous_epsilon(epsilon=eps0, delta=delta0, count=count, target_delta=delta)
    r = PldAccountant().epsilon(SelfComposedEvent(EpsilonDeltaEvent(eps0, delta0), count), delta=delta)
    assert r.details["epsilon_lower"] <= exact <= r.epsilon
    assert r.epsilon - r.details["epsilon_lower"] <= 0.005 * r.epsilon


def test_distinct_dp_steps_bracket_the_optimal_composition():
    # 300 distinct (ε_i, δ_i): ε_i rounded up (upper) / down (lower) to the grid, equal values
    # grouped; the bracket must meet dpcalc.composition.optimal's certified numeric bracket
    optimal = pytest.importorskip("dpcalc.composition.optimal")
    rng = np.random.default_rng(1)
    eps, deltas = rng.uniform(0.01, 0.1, 300), rng.uniform(0, 1e-10, 300)
    ref = optimal.optimal_epsilon(eps, deltas, np.ones(300, dtype=np.int64), delta=1e-5, rtol=1e-3)
    event = ComposedEvent(tuple(EpsilonDeltaEvent(float(e), float(d)) for e, d in zip(eps, deltas, strict=True)))
    r = PldAccountant().epsilon(event, delta=1e-5)
    assert r.details["epsilon_lower"] <= ref.value and ref.lower <= r.epsilon
    assert r.epsilon - r.details["epsilon_lower"] <= 0.005 * r.epsilon * 1.0001


def test_atom_at_grid_point_up_to_round_off_stays_finite():
    # regression: ceil(ε/h)·h rounded below ε, so the atom at ε was sent to +∞ (ε = inf reported)
    up, lo = discretize(RandomizedResponseLoss(0.10715298307297609), 0.0006533718480059517, tail=1e-12,
                        max_points=2 ** 20)
    assert up.p_inf == 0.0 and up.total_mass() == pytest.approx(1.0, abs=1e-12)


def test_infinity_mass_composes():
    # (0, δ₀)-DP T times: δ(0) = 1 − (1 − δ₀)^T exactly (mass at +∞ composes multiplicatively)
    r = PldAccountant().delta(SelfComposedEvent(EpsilonDeltaEvent(0.0, 1e-4), 1000), epsilon=0.0)
    exact = -math.expm1(1000 * math.log1p(-1e-4))
    assert r.details["delta_lower"] <= exact * (1 + 1e-9)
    assert exact <= r.delta <= exact * (1 + 1e-6)


def test_infinite_epsilon_when_delta_below_infinite_mass():
    r = PldAccountant().epsilon(SelfComposedEvent(EpsilonDeltaEvent(1.0, 1e-3), 10), delta=1e-3)
    assert math.isinf(r.epsilon) and r.reason
    assert r.to_json()["epsilon"] is None


# ----------------------------------------------------------------------------- sampled Gaussian


def test_abadi_case_brackets_published_value():
    # docs/references.md: true ε ≈ 0.947 (dp_accounting PLD 0.9470, prv 0.9469 ∈ [0.937, 0.957])
    r = PldAccountant().epsilon(dpsgd_event(noise_multiplier=4, sample_rate=0.01, steps=10_000), delta=1e-5)
    lower = r.details["epsilon_lower"]
    assert lower <= 0.9470 and 0.9469 <= r.epsilon
    assert r.epsilon - lower <= 0.005 * r.epsilon
    assert r.details["grid_points"] <= 2 ** 22 and "warnings" not in r.details


@pytest.mark.parametrize("q,sigma,steps,delta", [
    (0.01, 4.0, 10_000, 1e-5),
    (0.004266, 1.1, 2000, 1e-5),
    (0.04, 1.5, 2250, 1e-5),
    (0.1, 0.8, 100, 1e-6),
    (0.001, 2.0, 50_000, 1e-7),
])
def test_pld_tighter_than_rdp_tighter_than_ma(q, sigma, steps, delta):
    rdp = pytest.importorskip("dpcalc.accounting.rdp")
    moments = pytest.importorskip("dpcalc.accounting.moments")
    event = dpsgd_event(noise_multiplier=sigma, sample_rate=q, steps=steps)
    e_pld = PldAccountant().epsilon(event, delta=delta).epsilon
    e_rdp = rdp.RdpAccountant().epsilon(event, delta=delta).epsilon
    e_ma = moments.MomentsAccountant().epsilon(event, delta=delta).epsilon
    assert e_pld <= e_rdp <= e_ma


def test_opacus_prv_reference_case():
    # docs/references.md (Opacus accountants_test): σ = 1.5, q = 0.04, T = 2250 → PRV 6.7774, an
    # estimate with Opacus' eps_error = 0.01. Run at higher precision (here, dp_accounting PLD
    # with h = 1e-5 and prv_accountant with eps_error = 1e-3) both give 6.76878, PRV's bracket
    # being [6.76775, 6.76982]: that is the value our bracket must contain.
    r = PldAccountant().epsilon(dpsgd_event(noise_multiplier=1.5, sample_rate=0.04, steps=2250), delta=1e-5)
    assert r.details["epsilon_lower"] <= 6.76878 <= r.epsilon
    assert abs(r.epsilon - 6.7774) <= 0.01  # within Opacus' own error budget of its reference


def test_both_orderings_are_accounted():
    # δ of the composition is the max over the two orderings: the remove ordering alone must not exceed it
    from dpcalc.accounting._pld_compose import epsilon_for_delta, self_compose

    q, sigma, steps = 0.01, 1.0, 3000
    up_r, _ = discretize(SampledGaussianLoss(sigma, q, "remove"), 2e-4, tail=1e-16, max_points=2 ** 22)
    up_a, _ = discretize(SampledGaussianLoss(sigma, q, "add"), 2e-4, tail=1e-16, max_points=2 ** 22)
    e_r = epsilon_for_delta(self_compose(up_r, steps, eta=1e-12, max_points=2 ** 22), 1e-5)
    e_a = epsilon_for_delta(self_compose(up_a, steps, eta=1e-12, max_points=2 ** 22), 1e-5)
    r = PldAccountant().epsilon(dpsgd_event(noise_multiplier=sigma, sample_rate=q, steps=steps), delta=1e-5)
    assert r.epsilon >= max(e_r, e_a) - 5e-3 * r.epsilon


def test_replace_one_is_weaker_than_add_remove():
    event = dpsgd_event(noise_multiplier=1.0, sample_rate=0.02, steps=500)
    add_remove = PldAccountant().epsilon(event, delta=1e-5)
    replace = PldAccountant(neighboring="replace").epsilon(event, delta=1e-5)
    assert replace.details["epsilon_lower"] > add_remove.epsilon


def test_replace_one_cross_check_dp_accounting():
    pld_mod = pytest.importorskip("dp_accounting.pld.pld_privacy_accountant")
    dp_event = pytest.importorskip("dp_accounting.dp_event")
    pa = pytest.importorskip("dp_accounting.privacy_accountant")
    acc = pld_mod.PLDAccountant(pa.NeighboringRelation.REPLACE_ONE, value_discretization_interval=1e-4)
    acc.compose(dp_event.PoissonSampledDpEvent(0.02, dp_event.GaussianDpEvent(1.0)), 500)
    theirs = acc.get_epsilon(1e-5)
    r = PldAccountant(neighboring="replace").epsilon(dpsgd_event(noise_multiplier=1.0, sample_rate=0.02, steps=500),
                                                     delta=1e-5)
    assert r.details["epsilon_lower"] <= theirs * 1.0005 and theirs <= r.epsilon * 1.0005


def test_large_step_count_small_rate():
    # cost grows with √T and log T, not T: a million steps are cheap (10⁸ in the slow test)
    r = PldAccountant().epsilon(dpsgd_event(noise_multiplier=1.0, sample_rate=1e-4, steps=10 ** 6), delta=1e-5)
    rdp = pytest.importorskip("dpcalc.accounting.rdp")
    e_rdp = rdp.RdpAccountant().epsilon(dpsgd_event(noise_multiplier=1.0, sample_rate=1e-4, steps=10 ** 6),
                                        delta=1e-5).epsilon
    assert 0 < r.details["epsilon_lower"] <= r.epsilon <= e_rdp
    assert r.epsilon - r.details["epsilon_lower"] <= 0.005 * r.epsilon * 1.0001


@pytest.mark.slow
def test_hundred_million_steps():
    r = PldAccountant().epsilon(dpsgd_event(noise_multiplier=1.0, sample_rate=1e-5, steps=10 ** 8), delta=1e-5)
    assert 0 < r.details["epsilon_lower"] <= r.epsilon < 1.0
    assert r.details["slack"] < 1e-3 * 1e-5


# ----------------------------------------------------------------------------- tiny sample rates, δ(ε) speed


def _sampled_delta1(q: float, sigma: float, eps: float) -> float:
    """Exact δ(ε) of one Poisson-sampled Gaussian step, max over both orderings (mpmath).

    The loss is monotone in x, so δ = P(x > x*) − e^ε Q(x > x*) at the crossing x*
    (Mironov, Talwar, Zhang 2019 §3.3): remove x* = σ² ln((e^ε − (1−q))/q) + ½ with
    P = (1−q)N(0,σ²) + qN(1,σ²), Q = N(0,σ²); add: P = N(0,σ²), Q = the mixture, and
    {L_add > ε} = {x < x*_add}, x*_add = σ² ln((e^{−ε} − (1−q))/q) + ½ (empty if e^{−ε} ≤ 1−q).
    """
    mpmath.mp.dps = 50
    q, s, e = mpmath.mpf(q), mpmath.mpf(sigma), mpmath.mpf(eps)
    ncdf = mpmath.ncdf
    x = s ** 2 * mpmath.log((mpmath.exp(e) - (1 - q)) / q) + mpmath.mpf(0.5)
    rem = (1 - q) * ncdf(-x / s) + q * ncdf((1 - x) / s) - mpmath.exp(e) * ncdf(-x / s)
    add = mpmath.mpf(0)
    if mpmath.exp(-e) > 1 - q:
        xa = s ** 2 * mpmath.log((mpmath.exp(-e) - (1 - q)) / q) + mpmath.mpf(0.5)
        add = ncdf(xa / s) - mpmath.exp(e) * ((1 - q) * ncdf(xa / s) + q * ncdf((xa - 1) / s))
    return float(max(rem, add, 0))


@pytest.mark.parametrize("q,sigma", [(1e-6, 0.5), (1e-5, 0.5), (1e-6, 0.8)])
def test_tiny_sample_rate_one_step_is_exact_and_small(q, sigma):
    # Regression (audit report, performance 8): the grid step used to be tied to the loss std
    # (~q) and to ln(1−q) alignment, i.e. ~3.5M points (10 s) for q = 1e-6, σ = 0.5 at δ = 1e-12.
    r = PldAccountant().epsilon(dpsgd_event(noise_multiplier=sigma, sample_rate=q, steps=1), delta=1e-12)
    up, lo = r.epsilon, r.details["epsilon_lower"]
    assert 0 < lo <= up
    assert _sampled_delta1(q, sigma, up) <= 1e-12 * (1 + 1e-9)  # certified
    # a true lower bound, up to round-off (see test_tiny_sample_rate_lower_bound_round_off)
    assert _sampled_delta1(q, sigma, lo) >= 1e-12 * (1 - 1e-6)
    assert up - lo <= max(0.005 * up, 1e-3)
    assert r.details["grid_points"] <= 2 ** 18


@pytest.mark.xfail(strict=True, reason="open: this one-step lower PMF exceeds the exact δ by ~3e-8 relative "
                   "at δ ≈ 1e-12 (q = 1e-6, σ = 0.8, h = 2.2e-7, the grid the accountant used before the "
                   "speed work); lower bound only, cause not found (not the ndtr error model)")
def test_tiny_sample_rate_lower_bound_round_off():
    eps = 5.5002802e-4
    _, lo = discretize(SampledGaussianLoss(0.8, 1e-6, "remove"), 2.2222233333340742e-07, tail=1.25e-18,
                       max_points=2 ** 20)
    d_lo = float(np.sum(lo.probs * np.clip(-np.expm1(eps - lo.losses), 0, None))) + lo.p_inf
    assert d_lo <= _sampled_delta1(1e-6, 0.8, eps) * (1 + 1e-9)


def test_rarely_sampled_composition_window_is_tight():
    # Regression: the Chernoff window searched λ only within e^{±2.5} of the Gaussian guess; for
    # T·q ≪ 1 the best λ is far from it and the window was 11.9M points (q = 1e-5, σ = 0.8, T = 1000).
    r = PldAccountant().epsilon(dpsgd_event(noise_multiplier=0.8, sample_rate=1e-5, steps=1000), delta=1e-5)
    assert 0 < r.details["epsilon_lower"] <= r.epsilon
    assert r.epsilon - r.details["epsilon_lower"] <= 1e-3
    assert r.details["grid_points"] <= 2 ** 18
    assert "warnings" not in r.details


def test_chernoff_window_valid_and_tight_for_rare_events():
    # T = 1000 Bernoulli(p = 1e-5) jumps of 1000 grid steps: the composed index is 1000·Binomial(T, p).
    # The window must hold all but η/2 of it above (validity) and be near the exact quantile.
    from dpcalc.accounting._pld_compose import _chernoff_window

    p_jump, count, eta = 1e-5, 1000, 1e-10
    lo, hi, _ = _chernoff_window(np.array([1 - p_jump, p_jump]), np.array([0.0, 1000.0]), count, eta)
    mpmath.mp.dps = 40
    def tail(j):  # P(Binomial ≥ j)
        return sum(mpmath.binomial(count, i) * mpmath.mpf(p_jump) ** i * (1 - mpmath.mpf(p_jump)) ** (count - i)
                   for i in range(j, count + 1))
    above = math.floor(hi / 1000) + 1  # jumps counts whose index lies above the window
    assert tail(above) <= eta / 2
    assert lo <= 0
    assert hi <= 10 * 1000  # exact: P(≥ 4 jumps) ≈ 4e-11 < η/2, so ≥ 4000 is the best possible window


def test_delta_readout_uses_relative_truncation():
    # δ(ε) queries used η = 1e-14 (slow accurate Fourier powers, ~1.4 s); η is now 1e-5 × an
    # estimate of δ, so the numerical allowance stays tiny relative to δ and the bracket holds.
    event = dpsgd_event(noise_multiplier=1.1, sample_rate=256 / 60000, steps=14063)
    r = PldAccountant().delta(event, epsilon=2.5)
    assert r.details["delta_lower"] <= r.delta <= r.details["delta_lower"] / (1 - 0.005) * (1 + 1e-9)
    assert r.details["slack"] <= 1e-3 * r.delta
    e = PldAccountant().epsilon(event, delta=r.delta)
    e_lo = PldAccountant().epsilon(event, delta=r.details["delta_lower"])
    # ε(δ_upper) ≤ 2.5 ≤ ε(δ_lower), up to the two brackets
    assert e.details["epsilon_lower"] <= 2.5 + 1e-9
    assert e_lo.epsilon >= 2.5 - 1e-9


def test_delta_readout_brackets_exact_one_step():
    # δ(ε) of one sampled step against the closed form (both orderings), including tiny δ
    for q, sigma, eps in [(1e-6, 0.5, 0.05), (0.01, 1.0, 1.0), (0.3, 2.0, 0.2), (0.01, 0.7, 4.0)]:
        r = PldAccountant().delta(dpsgd_event(noise_multiplier=sigma, sample_rate=q, steps=1), epsilon=eps)
        exact = _sampled_delta1(q, sigma, eps)
        assert r.details["delta_lower"] <= exact * (1 + 1e-9) + 1e-300
        assert exact <= r.delta * (1 + 1e-9)


def test_delta_near_round_off_floor_never_lowers_epsilon():
    # prv_accountant issue #17: ε jumped down as δ shrank near the FFT floor. Ours may grow
    # (or become inf) but never fall below the ε certified at a larger δ.
    event = dpsgd_event(noise_multiplier=1.0, sample_rate=0.01, steps=1000)
    acc = PldAccountant()
    prev = 0.0
    for delta in (1e-8, 1e-12, 1e-16, 1.1e-18, 1e-22):
        e = acc.epsilon(event, delta=delta).epsilon
        assert e >= prev
        prev = e


# ----------------------------------------------------------------------------- calibration


def test_calibration_meets_target_within_accuracy():
    acc = PldAccountant()
    res = calibrate_dpsgd(acc, target_epsilon=3.0, delta=1e-5, sample_rate=256 / 60000, steps=3000, rtol=1e-5)
    sigma = res.noise_multiplier
    check = acc.epsilon(dpsgd_event(noise_multiplier=sigma, sample_rate=256 / 60000, steps=3000), delta=1e-5)
    assert check.epsilon <= 3.0
    assert 3.0 - check.details["epsilon_lower"] <= max(0.005 * 3.0, 1e-3)


class _NoHintNoSearch(PldAccountant):
    """pld searched as it is, from σ = 1 (no first guess, no fixed-grid stand-in)."""

    def calibration_hint(self, **kwargs):
        return None

    def calibration_search(self, result):
        return None


def test_calibration_hint_does_not_change_the_answer():
    # the coarse first guess only moves the starting bracket: the search runs on a fixed-grid
    # copy (smooth in σ) and is repeated until it is the default accountant's grid at the σ
    # found, so both paths agree to the root-finding tolerance (tests/accounting/test_pld_calibration.py)
    kwargs = dict(target_epsilon=2.0, delta=1e-5, sample_rate=0.01, steps=1000, rtol=1e-5)
    hinted = calibrate_dpsgd(PldAccountant(), **kwargs)
    plain = calibrate_dpsgd(_NoHintNoSearch(), **kwargs)
    assert hinted.epsilon <= 2.0 and plain.epsilon <= 2.0
    assert hinted.noise_multiplier == pytest.approx(plain.noise_multiplier, rel=2e-3)


# ----------------------------------------------------------------------------- properties


@settings(max_examples=8, deadline=None)
@given(sigma=st.floats(0.5, 20.0), steps=st.integers(1, 2000))
def test_monotone_in_sigma_and_steps(sigma, steps):
    acc = PldAccountant()
    base = acc.epsilon(SelfComposedEvent(GaussianEvent(sigma), steps), delta=1e-5)
    more_noise = acc.epsilon(SelfComposedEvent(GaussianEvent(sigma * 1.2), steps), delta=1e-5)
    more_steps = acc.epsilon(SelfComposedEvent(GaussianEvent(sigma), 2 * steps), delta=1e-5)
    assert more_noise.epsilon <= base.epsilon
    assert base.epsilon <= more_steps.epsilon


@settings(max_examples=6, deadline=None)
@given(eps=st.floats(0.05, 3.0))
def test_round_trip_delta_epsilon(eps):
    event = dpsgd_event(noise_multiplier=1.2, sample_rate=0.02, steps=300)
    acc = PldAccountant()
    d = acc.delta(event, epsilon=eps)
    if d.delta < 1e-12:
        return
    back = acc.epsilon(event, delta=d.delta)
    # the certified ε at the certified δ(ε) is at most ε up to the accuracy; the lower never exceeds ε
    assert back.details["epsilon_lower"] <= eps + 1e-9
    assert back.epsilon <= eps * 1.01 + 1e-3


# ----------------------------------------------------------------------------- errors


def test_unsupported_events_and_bad_parameters():
    acc = PldAccountant()
    with pytest.raises(UnsupportedEventError, match="Poisson sampling of the Gaussian"):
        acc.epsilon(PoissonSampledEvent(0.1, LaplaceEvent(1.0)), delta=1e-5)
    assert not acc.supports(PoissonSampledEvent(0.1, LaplaceEvent(1.0)))
    with pytest.raises(ParameterError, match="delta must be in"):
        acc.epsilon(GaussianEvent(1.0), delta=0.0)
    with pytest.raises(ParameterError, match="epsilon"):
        acc.delta(GaussianEvent(1.0), epsilon=-1.0)
    with pytest.raises(ParameterError, match="discretization"):
        PldAccountant(discretization=-1e-3)
    with pytest.raises(ParameterError, match="accuracy"):
        PldAccountant(accuracy=2.0)
    with pytest.raises(ParameterError, match="neighboring"):
        PldAccountant(neighboring="swap")


def test_explicit_discretization_and_memory_cap_warning():
    event = dpsgd_event(noise_multiplier=4, sample_rate=0.01, steps=10_000)
    r = PldAccountant(discretization=1e-3).epsilon(event, delta=1e-5)
    assert r.details["discretization"] <= 1e-3 and r.details["rounds"] == 1
    assert r.details["epsilon_lower"] <= 0.9470 <= r.epsilon
    capped = PldAccountant(accuracy=1e-5, max_grid_points=20_000).epsilon(event, delta=1e-5)
    assert any("not met" in w for w in capped.details["warnings"])
    assert capped.details["epsilon_lower"] <= 0.9470 <= capped.epsilon


def test_registered_first_and_default():
    from dpcalc.accounting.registry import available, default_accountant, get_accountant

    assert available()[0] == "pld"
    assert default_accountant() == "pld"
    assert isinstance(get_accountant("pld", neighboring="replace"), PldAccountant)
