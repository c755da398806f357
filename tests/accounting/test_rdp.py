"""Tests of the RDP accountant: closed forms, mpmath quadrature, published numbers, properties.

Reference values carry their source (see docs/references.md).
"""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpcalc.accounting.moments import MomentsAccountant
from dpcalc.accounting.rdp import (
    DEFAULT_ORDERS,
    RdpAccountant,
    delta_from_rdp,
    epsilon_from_rdp,
    log_a_sampled_gaussian,
    rdp_gaussian,
    rdp_laplace,
    rdp_of_event,
    rdp_pure_dp,
    rdp_sampled_gaussian,
)
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

#: TF Privacy ``compute_dp_sgd_privacy_lib`` order grid (for reproducing its numbers)
TF_ORDERS = [1.25, 1.5, 1.75, 2.0, 2.25, 2.5, 3.0, 3.5, 4.0, 4.5, *range(5, 64), 128, 256, 512]
#: Opacus ``RDPAccountant.DEFAULT_ALPHAS``
OPACUS_ORDERS = [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64))


def eps_rdp(sigma, q, steps, delta, **kw):
    ev = dpsgd_event(noise_multiplier=sigma, sample_rate=q, steps=steps)
    return RdpAccountant(**kw).epsilon(ev, delta=delta)


# ---------------------------------------------------------------------------
# Closed forms
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("sigma", [0.3, 1.0, 7.5, 1e4])
@pytest.mark.parametrize("steps", [1, 100, 10**9])
def test_unsampled_gaussian_rdp_is_alpha_T_over_2_sigma2(sigma, steps):
    # Mironov 2017, Prop. 7 (and additivity, Prop. 1): ε(α) = α T / (2σ²) exactly
    orders = np.array(DEFAULT_ORDERS)
    expected = orders * steps / (2 * sigma**2)
    for event in (SelfComposedEvent(GaussianEvent(sigma), steps),
                  dpsgd_event(noise_multiplier=sigma, sample_rate=1.0, steps=steps),
                  SelfComposedEvent(PoissonSampledEvent(1.0, GaussianEvent(sigma)), steps)):
        np.testing.assert_allclose(rdp_of_event(event, orders), expected, rtol=1e-15, atol=0)
    np.testing.assert_allclose(rdp_gaussian(noise_multiplier=sigma, orders=orders),
                               orders / (2 * sigma**2), rtol=1e-15)


def _mp_log_a(q, sigma, alpha):
    """log A_α by mpmath quadrature of its definition (Mironov, Talwar, Zhang 2019, §3.3):
    A_α = E_{z~N(0,σ²)}[((1−q) + q·exp((2z−1)/(2σ²)))^α]."""
    q, s, a = mp.mpf(q), mp.mpf(sigma), mp.mpf(alpha)

    def f(z):
        return mp.npdf(z, 0, s) * ((1 - q) + q * mp.exp((2 * z - 1) / (2 * s * s))) ** a

    pts = sorted({-mp.inf, -12 * s, mp.mpf(0), mp.mpf(1) / 2, mp.mpf(1), a, a + 12 * s, mp.inf})
    return mp.log(mp.quad(f, pts))


MP_ORDERS = [1.5, 2, 2.7, 8, 17.3, 32]


@pytest.mark.parametrize("q", [1e-3, 0.01, 0.3, 0.5, 0.9])
@pytest.mark.parametrize("sigma", [0.5, 1.0, 4.0, 20.0])
def test_log_a_matches_mpmath_quadrature(q, sigma):
    with mp.workdps(20):
        ref = [_mp_log_a(q, sigma, a) for a in MP_ORDERS]
        got = log_a_sampled_gaussian(sample_rate=q, noise_multiplier=sigma, orders=MP_ORDERS)
        for a, g, r in zip(MP_ORDERS, got, ref, strict=True):
            # A_α to 1e-8 relative, i.e. log A_α to 1e-8 absolute
            assert abs(mp.mpf(float(g)) - r) <= 1e-8, (a, g, r)
            # and the RDP (log A/(α−1)) to 1e-7 relative unless it is tiny
            if r > 1e-10:
                assert abs(mp.mpf(float(g)) - r) / r <= 1e-7, (a, g, r)


@pytest.mark.parametrize("q,sigma", [(1e-6, 1.0), (1e-3, 100.0), (0.01, 1e4), (0.999, 50.0)])
def test_tiny_rdp_is_accurate_not_just_A(q, sigma):
    # where A_α − 1 is tiny, log A must still be accurate relative to itself
    # (mpmath at 40 digits resolves A − 1 exactly enough)
    orders = [1.5, 2, 2.7, 8]
    got = log_a_sampled_gaussian(sample_rate=q, noise_multiplier=sigma, orders=orders)
    with mp.workdps(40):
        for a, g in zip(orders, got, strict=True):
            r = _mp_log_a(q, sigma, a)
            assert float(g) >= float(r) * (1 - 1e-12)  # never below (pessimistic rounding)
            assert abs(float(g) - float(r)) <= 1e-6 * float(r), (a, g, r)


def test_q_one_branch_and_cap():
    orders = [1.5, 2.0, 17.3]
    np.testing.assert_allclose(
        rdp_sampled_gaussian(sample_rate=1.0, noise_multiplier=2.0, orders=orders),
        np.array(orders) / 8.0, rtol=1e-15)
    # sampling never increases RDP (quasi-convexity, Mironov 2017)
    r = rdp_sampled_gaussian(sample_rate=0.7, noise_multiplier=0.3, orders=DEFAULT_ORDERS)
    assert np.all(r <= np.array(DEFAULT_ORDERS) / (2 * 0.3**2))


def test_pure_dp_and_laplace_rdp_against_mpmath():
    # Randomized response RDP (Mironov 2017, Table 2), computed directly with mpmath
    eps, orders = 0.7, [1.5, 3.0, 20.0]
    got = rdp_pure_dp(epsilon=eps, orders=orders)
    p = mp.e**eps / (1 + mp.e**eps)
    for a, g in zip(orders, got, strict=True):
        ref = mp.log(p**a * (1 - p) ** (1 - a) + (1 - p) ** a * p ** (1 - a)) / (a - 1)
        assert abs(g - float(ref)) <= 1e-12
        assert g <= min(eps, a * eps**2 / 2)  # Bun & Steinke 2016, Prop. 3.3
    # Laplace with scale b: D_α of Lap(0,b) vs Lap(1,b), by quadrature
    b = 2.0
    got = rdp_laplace(scale=b, orders=orders)
    for a, g in zip(orders, got, strict=True):
        def f(x, a=a):
            return mp.exp(-a * abs(x) / b - (1 - a) * abs(x - 1) / b) / (2 * b)
        ref = mp.log(mp.quad(f, [-mp.inf, 0, 1, mp.inf])) / (a - 1)
        assert abs(g - float(ref)) <= 1e-10


# ---------------------------------------------------------------------------
# Published numbers
# ---------------------------------------------------------------------------

def test_abadi_mnist_rdp_below_moments_accountant():
    # Abadi et al. 2016 §5: q=0.01, σ=4, T=10,000, δ=1e-5, moments accountant ε ≈ 1.26
    # docs/references.md: new-conversion RDP 1.0355 at order ≈ 17 (Opacus/dp_accounting run here)
    ev = dpsgd_event(noise_multiplier=4.0, sample_rate=0.01, steps=10_000)
    r = RdpAccountant().epsilon(ev, delta=1e-5)
    m = MomentsAccountant().epsilon(ev, delta=1e-5)
    assert abs(m.epsilon - 1.26) <= 0.01 * 1.26
    assert r.epsilon < m.epsilon
    assert r.epsilon <= 1.0355 + 1e-4 and r.epsilon >= 1.0355 * 0.995
    assert 16 <= r.details["order"] <= 18
    assert r.certified and r.source.startswith("Mironov 2017")


@pytest.mark.parametrize("sigma,q,steps,delta,ref,ref_order", [
    # TF Privacy compute_dp_sgd_privacy_test.py (new conversion), docs/references.md
    (1.3, 150 / 60_000, 6000, 1e-5, 0.7242234026109595, 19),
    (1.0, 100 / 1e5, 30_000, 1e-7, 1.4154988495444842, 13),
    (0.1, 1024 / 1e8, math.ceil(10 * 1e8 / 1024), 1e-7, 5907982.3113984, 1.25),
])
def test_tf_privacy_reference_values(sigma, q, steps, delta, ref, ref_order):
    # on TF Privacy's own order grid without refinement: the same number
    same = eps_rdp(sigma, q, steps, delta, orders=TF_ORDERS, refine=False)
    assert same.epsilon == pytest.approx(ref, rel=1e-9)
    assert same.details["order"] == ref_order
    # with our grid and refinement: never larger, and close when TF's grid was not the limit
    ours = eps_rdp(sigma, q, steps, delta)
    assert ours.epsilon <= ref * (1 + 1e-12)
    if ref_order > 1.25:
        assert ours.epsilon >= 0.99 * ref


def test_opacus_reference_values():
    # Opacus tests/accountants_test.py: σ=1.5, q=0.04, T=2250, δ=1e-5 -> RDP 7.32911117143
    same = eps_rdp(1.5, 0.04, 2250, 1e-5, orders=OPACUS_ORDERS, refine=False)
    assert same.epsilon == pytest.approx(7.32911117143, rel=1e-10)
    assert eps_rdp(1.5, 0.04, 2250, 1e-5).epsilon <= 7.32911117143
    # Opacus analysis/rdp.py docstring: heterogeneous history, orders 2..32 -> 0.336 at order 23
    history = ComposedEvent([dpsgd_event(noise_multiplier=1.0, sample_rate=1e-5, steps=10),
                             dpsgd_event(noise_multiplier=3.0, sample_rate=1e-4, steps=4)])
    r = RdpAccountant(orders=range(2, 33), refine=False).epsilon(history, delta=1e-5)
    assert r.epsilon == pytest.approx(0.336, abs=5e-4) and r.details["order"] == 23
    assert RdpAccountant().epsilon(history, delta=1e-5).epsilon <= r.epsilon


def test_heterogeneous_history_adds_rdp_curves():
    a = dpsgd_event(noise_multiplier=1.0, sample_rate=0.01, steps=300)
    b = dpsgd_event(noise_multiplier=2.0, sample_rate=0.02, steps=700)
    orders = [1.5, 2.0, 9.5, 64.0]
    np.testing.assert_allclose(rdp_of_event(ComposedEvent([a, b]), orders),
                               rdp_of_event(a, orders) + rdp_of_event(b, orders), rtol=1e-14)
    # 300 + 300 steps in two segments == 600 steps in one
    c1 = dpsgd_event(noise_multiplier=1.0, sample_rate=0.01, steps=600)
    np.testing.assert_allclose(rdp_of_event(ComposedEvent([a, a]), orders),
                               rdp_of_event(c1, orders), rtol=1e-14)


def test_unsampled_gaussian_never_below_exact_curve():
    # σ=10, T=100: μ-GDP with μ=1, exact ε(δ=1e-5) = 4.37718 (Balle & Wang 2018, closed form)
    phi = lambda x: 0.5 * math.erfc(-x / math.sqrt(2))  # noqa: E731
    exact = 4.37718
    assert phi(-exact + 0.5) - math.exp(exact) * phi(-exact - 0.5) == pytest.approx(1e-5, rel=1e-4)
    ev = SelfComposedEvent(GaussianEvent(10.0), 100)
    assert RdpAccountant().epsilon(ev, delta=1e-5).epsilon >= exact
    assert MomentsAccountant().epsilon(ev, delta=1e-5).epsilon >= exact


def test_pure_dp_composition_never_below_optimal_composition():
    # 100 × (0.1, 0)-DP, δ=1e-5: exact optimal composition 4.3068 (docs/references.md, KOV 2015)
    ev = SelfComposedEvent(EpsilonDeltaEvent(0.1, 0.0), 100)
    assert RdpAccountant().epsilon(ev, delta=1e-5).epsilon >= 4.3068
    lap = SelfComposedEvent(LaplaceEvent(10.0), 100)  # Laplace with ε0 = 0.1 is (0.1, 0)-DP
    assert RdpAccountant().epsilon(lap, delta=1e-5).epsilon >= 4.3068 * 0.99  # Laplace < RR


# ---------------------------------------------------------------------------
# Grid independence, edge warnings, conversion
# ---------------------------------------------------------------------------

def test_refined_order_does_not_depend_on_grid():
    ev = dpsgd_event(noise_multiplier=1.1, sample_rate=256 / 60_000, steps=14_063)
    dense = RdpAccountant(orders=np.linspace(1.01, 40, 4000), refine=False).epsilon(ev, delta=1e-5)
    coarse = RdpAccountant(orders=[1.5, 4, 16, 64], refine=True).epsilon(ev, delta=1e-5)
    default = RdpAccountant().epsilon(ev, delta=1e-5)
    assert default.epsilon <= dense.epsilon + 1e-9
    assert default.epsilon >= dense.epsilon - 1e-5
    assert coarse.epsilon == pytest.approx(default.epsilon, abs=1e-6)


def test_warning_when_optimal_order_is_at_grid_edge():
    ev = dpsgd_event(noise_multiplier=4.0, sample_rate=0.01, steps=10_000)
    r = RdpAccountant(orders=[2, 3, 4]).epsilon(ev, delta=1e-5)
    assert any("largest order" in w for w in r.details["warnings"])
    r = RdpAccountant().epsilon(ev, delta=1e-5)
    assert "warnings" not in r.details
    big = dpsgd_event(noise_multiplier=0.3, sample_rate=1.0, steps=10**6)
    r = RdpAccountant().epsilon(big, delta=1e-5)
    assert any("smallest order" in w for w in r.details["warnings"])


def test_conversion_functions():
    orders = np.array([2.0, 8.0, 32.0])
    rdp = orders / 8.0  # Gaussian σ = 2
    eps, order = epsilon_from_rdp(orders=orders, rdp=rdp, delta=1e-5)
    # CKS 2020 Prop 12 at each order, written out
    by_hand = [r + math.log1p(-1 / a) - (math.log(1e-5) + math.log(a)) / (a - 1)
               for a, r in zip(orders, rdp, strict=True)]
    assert eps == pytest.approx(min(by_hand), rel=1e-14) and order == 8.0
    d, _ = delta_from_rdp(orders=orders, rdp=rdp, epsilon=eps)
    assert d == pytest.approx(1e-5, rel=1e-9)
    # zero RDP: ε = 0 (total variation bound), and ε is never negative
    assert epsilon_from_rdp(orders=orders, rdp=np.zeros(3), delta=1e-5)[0] == 0.0
    with pytest.raises(ParameterError, match="delta must be in \\(0, 1\\), got 0"):
        epsilon_from_rdp(orders=orders, rdp=rdp, delta=0.0)
    with pytest.raises(ParameterError, match="orders"):
        RdpAccountant(orders=[0.5, 2])


# ---------------------------------------------------------------------------
# Unsupported events
# ---------------------------------------------------------------------------

def test_unsupported_events_raise_with_reason():
    acc = RdpAccountant()
    with pytest.raises(UnsupportedEventError, match="delta=0.001 > 0"):
        acc.epsilon(EpsilonDeltaEvent(1.0, 1e-3), delta=1e-5)
    with pytest.raises(UnsupportedEventError, match="add/remove"):
        RdpAccountant(neighboring="replace").epsilon(
            dpsgd_event(noise_multiplier=1.0, sample_rate=0.1, steps=10), delta=1e-5)
    with pytest.raises(UnsupportedEventError, match="Gaussian mechanism only"):
        acc.check(PoissonSampledEvent(0.1, LaplaceEvent(1.0)))
    assert not acc.supports(ComposedEvent([GaussianEvent(1.0), EpsilonDeltaEvent(1.0, 1e-6)]))
    assert acc.supports(ComposedEvent([GaussianEvent(1.0), LaplaceEvent(2.0)]))
    assert not MomentsAccountant(neighboring="replace").supports(
        dpsgd_event(noise_multiplier=1.0, sample_rate=0.1, steps=10))


def test_infeasible_hint_names_the_floor():
    acc = RdpAccountant()
    hint = acc.infeasible_hint(0.001, delta=1e-5)
    assert "orders up to 256" in hint and "delta=1e-05" in hint
    floor = acc.epsilon_floor(1e-5)
    # with zero RDP cost the best order is 256: ln(255/256) − (ln 1e-5 + ln 256)/255
    assert floor == pytest.approx(math.log(255 / 256) - (math.log(1e-5) + math.log(256)) / 255)


# ---------------------------------------------------------------------------
# Properties (hypothesis)
# ---------------------------------------------------------------------------

sigmas = st.floats(0.3, 1e4)
rates = st.one_of(st.floats(1e-6, 1.0), st.just(1.0), st.just(0.5))
step_counts = st.integers(1, 10**9)
SETTINGS = dict(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@settings(**SETTINGS)
@given(sigma=sigmas, q=rates, steps=step_counts, delta=st.floats(1e-12, 0.1))
def test_finite_over_the_whole_range(sigma, q, steps, delta):
    r = eps_rdp(sigma, q, steps, delta)
    assert math.isfinite(r.epsilon) and r.epsilon >= 0
    assert 1 < r.details["order"] <= 256
    rd = np.asarray(rdp_of_event(dpsgd_event(noise_multiplier=sigma, sample_rate=q, steps=steps),
                                 DEFAULT_ORDERS))
    assert not np.any(np.isnan(rd)) and np.all(rd >= 0)


@settings(**SETTINGS)
@given(sigma=st.floats(0.3, 50), q=st.floats(1e-4, 1.0), steps=st.integers(1, 10**6),
       factor=st.floats(1.01, 3.0))
def test_epsilon_monotone(sigma, q, steps, factor):
    base = eps_rdp(sigma, q, steps, 1e-5).epsilon
    tol = 1e-7 * base + 1e-12
    assert eps_rdp(sigma * factor, q, steps, 1e-5).epsilon <= base + tol      # falls with σ
    assert eps_rdp(sigma, min(q * factor, 1.0), steps, 1e-5).epsilon >= base - tol  # rises with q
    assert eps_rdp(sigma, q, int(steps * factor) + 1, 1e-5).epsilon >= base - tol  # rises with T
    m = MomentsAccountant().epsilon
    ev = dpsgd_event(noise_multiplier=sigma, sample_rate=q, steps=steps)
    ev2 = dpsgd_event(noise_multiplier=sigma * factor, sample_rate=q, steps=steps)
    assert m(ev2, delta=1e-5).epsilon <= m(ev, delta=1e-5).epsilon + 1e-12


@settings(**SETTINGS)
@given(sigma=st.floats(0.5, 20), q=st.floats(1e-4, 1.0), steps=st.integers(1, 10**5),
       delta=st.floats(1e-10, 1e-2))
def test_delta_epsilon_round_trip(sigma, q, steps, delta):
    ev = dpsgd_event(noise_multiplier=sigma, sample_rate=q, steps=steps)
    for acc in (RdpAccountant(), MomentsAccountant()):
        eps = acc.epsilon(ev, delta=delta).epsilon
        if eps == 0.0:
            continue
        d = acc.delta(ev, epsilon=eps).delta
        assert d == pytest.approx(delta, rel=1e-5)


def test_non_converging_series_warns_and_falls_back(monkeypatch):
    # force the cap: at q = 1/2 the fractional series converge only polynomially
    import dpcalc.accounting.sampled_gaussian_rdp as rdp_mod

    monkeypatch.setattr(rdp_mod, "_FRAC_MAX_TERMS", 64)
    rdp_mod._chunk_consts.cache_clear()
    warnings: list[str] = []
    r = rdp_sampled_gaussian(sample_rate=0.5, noise_multiplier=4.0, orders=[1.01, 2.0],
                             warnings=warnings)
    assert warnings and "did not converge" in warnings[0]
    assert r[0] == pytest.approx(1.01 / 32)  # the unsampled bound α/(2σ²), not NaN
    assert np.all(np.isfinite(r))
    ev = dpsgd_event(noise_multiplier=4.0, sample_rate=0.5, steps=10)
    res = RdpAccountant().epsilon(ev, delta=1e-5)
    assert math.isfinite(res.epsilon)
