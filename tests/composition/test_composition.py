"""Composition theorems: basic, advanced (DRV), KOV closed form, optimal (KOV Thm 3.3 /
Murtagh–Vadhan), the GDP accountant, and ``compose`` end to end. Sources next to each number."""

from __future__ import annotations

import itertools
import math

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcalc.composition import advanced, basic, optimal
from dpcalc.composition.compose import MechanismSpec, compose, parse_spec
from dpcalc.errors import ParameterError


def kfold_rr_delta(eps: float, k: int, i: int) -> float:
    """KOV 2015 Thm 3.3, in mpmath: δ of k-fold ε-randomized response at ε' = (k − 2i)ε."""
    mpmath.mp.dps = 50
    e = mpmath.mpf(eps)
    s = sum(mpmath.binomial(k, j) * (mpmath.e ** ((k - j) * e) - mpmath.e ** ((k - 2 * i + j) * e))
            for j in range(i))
    return float(s / (1 + mpmath.e**e) ** k)


# ------------------------------------------------------------------ optimal = exact RR curve


@pytest.mark.parametrize("eps,k", [(0.3, 20), (1.0, 7), (0.05, 200)])
def test_kov_optimal_equals_kfold_randomized_response(eps, k):
    for i in range(1, k // 2 + 1):
        target = (k - 2 * i) * eps
        exact = kfold_rr_delta(eps, k, i)
        got = optimal.homogeneous_delta(epsilon=eps, delta=0.0, count=k, target_epsilon=target)
        assert got >= exact * (1 - 1e-13)  # never below the truth
        assert got == pytest.approx(exact, rel=1e-9, abs=1e-300)


def test_optimal_epsilon_round_trip_and_reference():
    # docs/references.md: k = 100 × (0.1, 0), δ = 1e-5: exact optimal 4.3068
    e = optimal.homogeneous_epsilon(epsilon=0.1, delta=0.0, count=100, target_delta=1e-5)
    assert e == pytest.approx(4.3068, abs=1e-4)
    d = optimal.homogeneous_delta(epsilon=0.1, delta=0.0, count=100, target_epsilon=e)
    assert d <= 1e-5 and d == pytest.approx(1e-5, rel=1e-6)


def test_homogeneous_with_delta_i():
    # (ε', 1 − (1−δ̃)(1−δ)^k): with δ = 1e-7, k = 50 the δ̃ budget is 1 − (1−1e-5)/(1−1e-7)^50
    eps = optimal.homogeneous_epsilon(epsilon=0.2, delta=1e-7, count=50, target_delta=1e-5)
    dt = 1 - (1 - 1e-5) / (1 - 1e-7) ** 50
    assert optimal.homogeneous_delta(epsilon=0.2, delta=0.0, count=50, target_epsilon=eps) <= dt * (1 + 1e-9)


def test_large_k_is_finite_and_near_gaussian_limit():
    # k ε² fixed = 1: the composition tends to 1-GDP, ε(1e-5) = 4.37718 (docs/references.md, closed form)
    e = optimal.homogeneous_epsilon(epsilon=1e-3, delta=0.0, count=10**6, target_delta=1e-5)
    assert 4.37 < e < 4.38


def _laplace_pessimistic_delta(eps: float, k: int, target: float, h: float = 1e-3) -> float:
    """Upper bound on δ of k-fold Laplace (scale 1/ε): loss CDF F(ℓ) = ½e^{(ℓ−ε)/2} on [−ε, ε)
    with atoms ½e^{−ε} at −ε and ½ at ε (P = Lap(0, b), Q = Lap(1, b)); mass rounded UP to
    the grid, composed by direct convolution."""
    n = int(math.ceil(eps / h))
    grid = np.arange(-n, n + 1) * h
    cdf = np.where(grid < eps, 0.5 * np.exp((np.minimum(grid, eps) - eps) / 2), 1.0)
    cdf[-1] = 1.0
    pmf = np.diff(np.concatenate([[0.0], cdf]))  # mass in (ℓ_{i−1}, ℓ_i] goes to ℓ_i
    out = pmf
    for _ in range(k - 1):
        out = np.convolve(out, pmf)
    loss = (np.arange(out.size) - k * n) * h
    mask = loss > target
    return float(np.sum(out[mask] * -np.expm1(target - loss[mask])))


@pytest.mark.parametrize("eps,k", [(0.5, 4), (1.0, 3)])
def test_kfold_laplace_is_no_larger_than_kov(eps, k):
    for target in np.linspace(0.1, k * eps * 0.9, 5):
        lap = _laplace_pessimistic_delta(eps, k, float(target))
        kov = optimal.homogeneous_delta(epsilon=eps, delta=0.0, count=k, target_epsilon=float(target))
        assert lap <= kov + 1e-12


# ------------------------------------------------------------------ ordering of the bounds


@settings(max_examples=40, deadline=None)
@given(eps=st.floats(0.01, 2.0), k=st.integers(1, 300), delta=st.floats(1e-9, 0.1))
def test_basic_ge_advanced_ge_kov_ge_optimal(eps, k, delta):
    b = basic.basic_epsilon([eps], [0.0], [k], delta=delta)
    drv = min(float(advanced.drv_epsilon(epsilon=eps, delta=0.0, count=k, target_delta=delta)), b)
    kov = float(advanced.kov_epsilon([eps], [0.0], [k], delta=delta))
    opt = optimal.homogeneous_epsilon(epsilon=eps, delta=0.0, count=k, target_delta=delta)
    slack = 1 + 1e-12  # each bound is rounded up on its own; compare up to that rounding
    assert b * slack >= drv and drv * slack >= opt
    assert b * slack >= kov and kov * slack >= opt


@settings(max_examples=25, deadline=None)
@given(eps=st.floats(0.01, 1.0), k=st.integers(1, 200), d1=st.floats(1e-9, 1e-3))
def test_optimal_monotone_in_delta_and_k(eps, k, d1):
    e1 = optimal.homogeneous_epsilon(epsilon=eps, delta=0.0, count=k, target_delta=d1)
    e2 = optimal.homogeneous_epsilon(epsilon=eps, delta=0.0, count=k, target_delta=d1 * 10)
    e3 = optimal.homogeneous_epsilon(epsilon=eps, delta=0.0, count=k + 1, target_delta=d1)
    assert e2 <= e1 <= e3


def test_reference_values_composition():
    # docs/references.md: k = 100 × (0.1, 0), total δ 1e-5: basic 10, advanced (DRV) 5.8502
    assert basic.basic_epsilon([0.1], [0.0], [100], delta=1e-5) == pytest.approx(10.0)
    assert float(advanced.drv_epsilon(epsilon=0.1, delta=0.0, count=100, target_delta=1e-5)) == pytest.approx(5.8502, abs=1e-4)
    # diffprivlib BudgetAccountant docstring: 20 × ε = 0.05, slack 1e-3 → 0.7613352285668463 (KOV Thm 3.5)
    kov = float(advanced.kov_epsilon([0.05], [0.0], [20], delta=1e-3))
    assert kov >= 0.7613352285668463 and kov == pytest.approx(0.7613352285668463, rel=1e-12)


def test_kov_and_drv_delta_invert_epsilon():
    e = float(advanced.kov_epsilon([0.1, 0.3], [1e-8, 0.0], [50, 20], delta=1e-5))
    assert float(advanced.kov_delta([0.1, 0.3], [1e-8, 0.0], [50, 20], epsilon=e)) <= 1e-5 * (1 + 1e-9)
    e = float(advanced.drv_epsilon(epsilon=0.1, delta=1e-8, count=100, target_delta=1e-5))
    assert float(advanced.drv_delta(epsilon=0.1, delta=1e-8, count=100, target_epsilon=e)) == pytest.approx(1e-5, rel=1e-9)


# ------------------------------------------------------------------ heterogeneous


def brute_force_mv(eps_list, target):
    """Murtagh–Vadhan 2016 Thm 1.5 summed over all 2^k subsets (mpmath)."""
    mpmath.mp.dps = 40
    e = [mpmath.mpf(x) for x in eps_list]
    norm = mpmath.fprod(1 + mpmath.e**x for x in e)
    total = mpmath.mpf(0)
    for mask in itertools.product((0, 1), repeat=len(e)):
        ins = sum(x for x, m in zip(e, mask, strict=True) if m)
        out = sum(x for x, m in zip(e, mask, strict=True) if not m)
        total += max(mpmath.mpf(0), mpmath.e**ins - mpmath.e ** (mpmath.mpf(target) + out))
    return float(total / norm)


def test_heterogeneous_exact_equals_brute_force():
    rng = np.random.default_rng(5)
    eps_list = list(rng.choice([0.1, 0.5, 1.2], size=11))
    for target in (0.0, 0.7, 1.9, 3.3, 5.0):
        exact = brute_force_mv(eps_list, target)
        got = optimal.optimal_delta(eps_list, [0.0] * 11, [1] * 11, epsilon=target)
        assert got.method == "exact"
        assert got.value >= exact * (1 - 1e-13)
        assert got.value == pytest.approx(exact, rel=1e-9, abs=1e-300)


def test_numeric_bracket_contains_exact_and_is_within_one_percent():
    eps, cnt = [0.1, 0.37], [400, 150]
    exact = optimal.optimal_epsilon(eps, [0, 0], cnt, delta=1e-6)
    assert exact.method == "exact"
    num = optimal.grid_bracket(eps, cnt, delta_tilde=optimal.delta_tilde_target(
        delta=1e-6, deltas=np.zeros(2), counts=np.array(cnt)), rtol=0.01)
    assert num.lower <= exact.value <= num.value
    assert num.value - num.lower <= 0.01 * num.value


def test_many_distinct_epsilons_go_numeric_with_certified_bracket():
    rng = np.random.default_rng(0)
    eps = rng.uniform(0.01, 0.1, size=300)
    res = optimal.optimal_epsilon(eps, rng.uniform(0, 1e-10, 300), np.ones(300, dtype=int), delta=1e-5)
    assert res.method == "numeric"
    assert res.lower <= res.value <= res.lower * 1.0101
    kov = float(advanced.kov_epsilon(eps, rng.uniform(0, 1e-10, 300) * 0, np.ones(300), delta=1e-5))
    assert res.lower <= kov  # the closed form is an upper bound on the optimum


# ------------------------------------------------------------------ compose, Abadi et al.


def _paper_strong_composition() -> float:
    """The variant that reproduces Abadi et al. 2016's 9.34: per-step ε₀ = √(2 ln(1.25/δ₀))/σ
    (classical Gaussian), amplified to q·ε₀ (the O(qε) of their §3.1 with constant 1), then
    ε = ε_s√(2T ln(1/δ')) + T·ε_s² with T·q·δ₀ + δ' = 1e-5, the split optimised."""
    from scipy.optimize import minimize_scalar

    q, sigma, steps, total = 0.01, 4.0, 10_000, 1e-5

    def f(t):
        frac = 1 / (1 + math.exp(-t))
        d0 = frac * total / (steps * q)
        es = q * math.sqrt(2 * math.log(1.25 / d0)) / sigma
        return es * math.sqrt(2 * steps * math.log(1 / (total - steps * q * d0))) + steps * es**2

    return minimize_scalar(f, bounds=(-10, 10), method="bounded").fun


def test_abadi_comparison():
    # Abadi et al. 2016 §5: q = 0.01, σ = 4, δ = 1e-5, T = 1e4: strong composition 9.34, MA 1.26
    assert _paper_strong_composition() == pytest.approx(9.34, abs=0.01)
    rep = compose([MechanismSpec("gaussian", 10_000, noise_multiplier=4.0, sample_rate=0.01)], delta=1e-5)
    rows = {r.method: r for r in rep.results}
    adv = rows["advanced"]
    assert adv.certified and 9.34 < adv.epsilon < 20  # certified DRV: same order, larger (valid amplification)
    if rows["ma"].applicable:
        assert rows["ma"].epsilon == pytest.approx(1.26, abs=0.01)
        assert adv.epsilon / rows["ma"].epsilon > 5
    assert rep.tightest is not None and rep.tightest.epsilon < 1.3
    assert not rows["zcdp"].applicable and "Poisson" in rows["zcdp"].reason
    assert rows["gdp"].certified is False


def test_compose_rows_complete_and_sorted():
    rep = compose([MechanismSpec("dp", 20, epsilon=0.5, delta=1e-7), MechanismSpec("laplace", 50, epsilon=0.1)],
                  delta=1e-5)
    names = [r.method for r in rep.results]
    assert sorted(names) == sorted(["basic", "advanced", "kov", "optimal", "ma", "rdp", "zcdp", "pld", "gdp"])
    rows = {r.method: r for r in rep.results}
    assert not rows["advanced"].applicable and "identical" in rows["advanced"].reason
    assert rows["optimal"].details["evaluation"] == "exact"
    live = [r.epsilon for r in rep.results if r.applicable and r.certified and r.epsilon is not None]
    assert live == sorted(live)
    assert rows["basic"].epsilon == pytest.approx(20 * 0.5 + 50 * 0.1)


def test_compose_delta_mode_and_steps_grid():
    rep = compose([MechanismSpec("dp", 100, epsilon=0.1)], epsilon=4.3068, steps_grid=20)
    rows = {r.method: r for r in rep.results}
    assert rows["optimal"].delta == pytest.approx(1e-5, rel=1e-3)
    grid = rows["kov"].details["grid"]
    assert grid["steps"][0] == 1 and grid["steps"][-1] == 100
    assert grid["delta"] == sorted(grid["delta"])


def test_gdp_accountant():
    from dpcalc.accounting.gdp import GdpAccountant
    from dpcalc.errors import UnsupportedEventError
    from dpcalc.events import LaplaceEvent, dpsgd_event

    acc = GdpAccountant()
    # docs/references.md: σ = 10, T = 100 → μ = 1, exact ε(1e-5) = 4.37718
    r = acc.epsilon(dpsgd_event(noise_multiplier=10.0, sample_rate=1.0, steps=100), delta=1e-5)
    assert r.certified and r.epsilon == pytest.approx(4.37718, abs=1e-5)
    # Opacus tests/accountants_test.py: σ = 1.5, q = 0.04, steps = int(90 // 0.04) = 2249 (float
    # floor division; docs/references.md says 2250): GDP ε in (6.59, 6.6). Opacus gives 6.60157 at 2250.
    r = acc.epsilon(dpsgd_event(noise_multiplier=1.5, sample_rate=0.04, steps=2249), delta=1e-5)
    assert not r.certified and 6.59 < r.epsilon < 6.6
    r = acc.epsilon(dpsgd_event(noise_multiplier=1.5, sample_rate=0.04, steps=2250), delta=1e-5)
    assert r.epsilon == pytest.approx(6.6015670901582295, rel=1e-9)
    with pytest.raises(UnsupportedEventError):
        acc.check(LaplaceEvent(1.0))


def test_spec_errors():
    with pytest.raises(ParameterError, match="unknown mechanism 'cauchy'"):
        parse_spec([{"mechanism": "cauchy", "parameters": {}, "count": 1}])
    with pytest.raises(ParameterError, match="count must be a whole number >= 1, got -3"):
        parse_spec([{"mechanism": "dp", "parameters": {"epsilon": 1}, "count": -3}])
    with pytest.raises(ParameterError, match="unknown parameter"):
        parse_spec([{"mechanism": "laplace", "parameters": {"sigma": 1}, "count": 1}])
