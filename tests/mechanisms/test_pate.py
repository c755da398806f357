"""PATE per-query bounds and their composition (dpcalc.mechanisms.pate, dpcalc.accounting.pate).

References:

* an independent, straightforward mpmath implementation below (:func:`ref_gnmax`,
  :func:`ref_lnmax`, :func:`ref_threshold`), written from the papers — Papernot et al. 2017 Thm 3
  and §3 (q̃ from the exact tail of a difference of two Laplace variables, union bound), Papernot
  et al. 2018 Thm 6, Prop 7, 8, 10, Alg 1 — one query and one order at a time, in 40 digits;
* closed forms for the data-independent curves (λ/σ², λ/(2σ₁²), randomized response and Laplace
  RDP, Mironov 2017 Table 2) and the CKS 2020 Prop 12 conversion minimised in mpmath.
"""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcalc.accounting import pate as ap
from dpcalc.accounting.rdp import RdpAccountant
from dpcalc.errors import ParameterError, UnsupportedEventError
from dpcalc.events import (
    GNMaxEvent,
    LNMaxEvent,
    PateThresholdEvent,
    SelfComposedEvent,
)
from dpcalc.mechanisms import pate as pm

mp.mp.dps = 40

#: a fine grid of orders (fractional and integer, up to 400)
FINE_ORDERS = np.unique(np.concatenate([1 + np.geomspace(0.01, 1, 12), np.linspace(2, 60, 59),
                                        np.geomspace(61, 400, 25)]))


# ---------------------------------------------------------------------------
# The independent reference (mpmath, one query, one order)
# ---------------------------------------------------------------------------

def _plurality(votes):
    i = max(range(len(votes)), key=lambda j: (votes[j], -j))
    return i, [votes[i] - votes[j] for j in range(len(votes)) if j != i]


def ref_q_gnmax(votes, sigma):
    """2018 Prop 7: q̃ = ½ Σ_{j≠i*} erfc(Δ_j/(2σ)), capped at 1 − 1/m."""
    m = len(votes)
    if m == 1:
        return mp.mpf(0)
    _, g = _plurality(votes)
    q = sum(mp.erfc(mp.mpf(d) / (2 * mp.mpf(sigma))) / 2 for d in g)
    return min(q, 1 - mp.mpf(1) / m)


def ref_q_lnmax(votes, b):
    """2017 §3: q̃ = Σ_{j≠i*} (2 + Δ_j/b)/(4 e^{Δ_j/b}), capped at 1 − 1/m."""
    m = len(votes)
    if m == 1:
        return mp.mpf(0)
    _, g = _plurality(votes)
    b = mp.mpf(b)
    q = sum((2 + d / b) / (4 * mp.exp(d / b)) for d in g)
    return min(q, 1 - mp.mpf(1) / m)


def ref_thm6(q, s, lam):
    """2018 Thm 6 with Prop 10's μ's for a mechanism with RDP λ/s²; None where it does not apply."""
    q, s, lam = mp.mpf(q), mp.mpf(s), mp.mpf(float(lam))
    if q == 0:
        return mp.mpf(0)
    mu2 = s * mp.sqrt(-mp.log(q))
    mu1 = mu2 + 1
    e1, e2 = mu1 / s**2, mu2 / s**2
    if not (mu2 > 1 and lam < mu1 and q * mp.exp(e2) < 1):
        return None
    if q > mp.exp((mu2 - 1) * e2) / ((mu1 / (mu1 - 1)) * (mu2 / (mu2 - 1))) ** mu2:
        return None
    log1q = mp.log1p(-q)
    log_a = log1q - mp.log1p(-(q * mp.exp(e2)) ** ((mu2 - 1) / mu2))
    log_b = e1 - mp.log(q) / (mu1 - 1)
    # ln((1−q)A^{λ−1} + qB^{λ−1}) through expm1/log1p: exact for values near 0 (unanimous votes)
    return mp.log1p(mp.expm1(log1q + (lam - 1) * log_a) + q * mp.exp((lam - 1) * log_b)) / (lam - 1)


def ref_thm3(q, eps0, lam):
    """2017 Thm 3 as RDP (α(l)/l, l = λ − 1); None where q ≥ 1/(e^{ε₀} + 1)."""
    q, eps0, lm1 = mp.mpf(q), mp.mpf(eps0), mp.mpf(float(lam)) - 1
    if q == 0:
        return mp.mpf(0)
    if not q < 1 / (mp.exp(eps0) + 1):
        return None
    log1q = mp.log1p(-q)
    log_a = log1q - mp.log1p(-mp.exp(eps0) * q)
    return mp.log1p(mp.expm1(log1q + lm1 * log_a) + q * mp.exp(eps0 * lm1)) / lm1


def ref_rr(eps, lam):
    """RDP of randomized response at ε (Mironov 2017 Table 2), capped at min(ε, λε²/2)."""
    eps, lam = mp.mpf(eps), mp.mpf(float(lam))
    p = mp.exp(eps) / (1 + mp.exp(eps))
    v = mp.log(p**lam * (1 - p) ** (1 - lam) + (1 - p) ** lam * p ** (1 - lam)) / (lam - 1)
    return min(v, eps, lam * eps**2 / 2)


def ref_laplace(b, lam):
    """RDP of the Laplace mechanism of scale b, sensitivity 1 (Mironov 2017 Table 2), capped at 1/b."""
    b, lam = mp.mpf(b), mp.mpf(float(lam))
    v = mp.log(lam / (2 * lam - 1) * mp.exp((lam - 1) / b) + (lam - 1) / (2 * lam - 1) * mp.exp(-lam / b)) / (lam - 1)
    return min(v, 1 / b)


def ref_lnmax_base(b, lam):
    return min(ref_rr(2 / mp.mpf(b), lam), 2 * ref_laplace(b, lam))


def ref_gnmax(votes, sigma, lam):
    base = mp.mpf(float(lam)) / mp.mpf(sigma) ** 2
    dd = ref_thm6(ref_q_gnmax(votes, sigma), sigma, lam)
    return base if dd is None else min(base, dd)


def ref_lnmax(votes, b, lam):
    base = ref_lnmax_base(b, lam)
    dd = ref_thm3(ref_q_lnmax(votes, b), 2 / mp.mpf(b), lam)
    return base if dd is None else min(base, dd)


def ref_threshold(votes, t, sigma1, lam):
    base = mp.mpf(float(lam)) / (2 * mp.mpf(sigma1) ** 2)
    p = mp.ncdf((max(votes) - mp.mpf(t)) / mp.mpf(sigma1))
    dd = ref_thm6(min(p, 1 - p), mp.sqrt(2) * sigma1, lam)
    return base if dd is None else min(base, dd)


def synthetic_votes(seed: int, k: int, m: int = 10, n: int = 250, conc: float = 0.3) -> np.ndarray:
    """k histograms of n teachers over m classes: class probabilities ~ Dirichlet(conc), votes
    ~ Multinomial (low conc = confident teachers)."""
    rng = np.random.default_rng(seed)
    return rng.multinomial(n, rng.dirichlet(np.full(m, conc), size=k))


def _close(ours: float, ref, rel: float = 1e-9) -> bool:
    ref = float(ref)
    return ours >= ref * (1 - 1e-15) - 1e-300 and ours <= ref * (1 + rel) + 1e-300


# ---------------------------------------------------------------------------
# Vectorised path = the independent reference (1e-9 relative), never below it
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("sigma", [5.0, 20.0, 40.0])
def test_gnmax_per_query_matches_mpmath(sigma):
    votes = synthetic_votes(1, 25, conc=0.15)
    votes[0] = [250] + [0] * 9          # unanimous
    votes[1] = [125, 125] + [0] * 8     # a tie
    run = ap.PateRun(pm.pate_votes_event(votes, mechanism="gnmax", noise=sigma))
    applied = 0
    for lam in FINE_ORDERS:
        dep, _ = run.per_query(float(lam))
        for i in range(len(votes)):
            ref = ref_gnmax([int(x) for x in votes[i]], sigma, lam)
            assert _close(dep[i], ref), (sigma, lam, i, dep[i], ref)
            applied += ref < mp.mpf(float(lam)) / sigma**2
    assert applied > 0  # the data-dependent bound was exercised


@pytest.mark.parametrize("b", [2.0, 10.0, 20.0])
def test_lnmax_per_query_matches_mpmath(b):
    votes = synthetic_votes(2, 25, conc=0.1)
    votes[0] = [250] + [0] * 9
    run = ap.PateRun(pm.pate_votes_event(votes, mechanism="lnmax", noise=b))
    applied = 0
    for lam in FINE_ORDERS:
        dep, ind = run.per_query(float(lam))
        base = ref_lnmax_base(b, lam)
        assert _close(ind[0], base), (b, lam)
        for i in range(len(votes)):
            ref = ref_lnmax([int(x) for x in votes[i]], b, lam)
            assert _close(dep[i], ref), (b, lam, i, dep[i], ref)
            applied += ref < base
    assert applied > 0


@pytest.mark.parametrize(("t", "sigma1", "applies"), [(200.0, 150.0, False), (150.0, 20.0, True),
                                                     (240.0, 5.0, True)])
def test_threshold_per_query_matches_mpmath(t, sigma1, applies):
    votes = synthetic_votes(3, 25, conc=0.2)
    ev = pm.pate_votes_event(votes, mechanism="confident-gnmax", noise=1e6, sigma1=sigma1, threshold=t,
                                   answered=np.zeros(len(votes)))  # no answer: only the check is paid
    run = ap.PateRun(ev)
    applied = 0
    for lam in FINE_ORDERS:
        dep, _ = run.per_query(float(lam))
        for i in range(len(votes)):
            ref = ref_threshold([int(x) for x in votes[i]], t, sigma1, lam)
            assert _close(dep[i], ref), (t, sigma1, lam, i, dep[i], ref)
            applied += ref < mp.mpf(float(lam)) / (2 * mp.mpf(sigma1) ** 2)
    assert (applied > 0) == applies  # σ₁ = 150 (the 2018 MNIST setting): q̃ too large for Thm 6


def test_composed_run_matches_mpmath_sum():
    """Confident-GNMax over 40 queries: Σ check + Σ_answered GNMax, at every order of a grid."""
    votes = synthetic_votes(4, 40, conc=0.2)
    answered = (np.arange(40) % 3 != 0).astype(int)
    t, s1, s2 = 180.0, 30.0, 15.0
    run = ap.PateRun(pm.pate_votes_event(votes, mechanism="confident-gnmax", noise=s2, sigma1=s1,
                                               threshold=t, answered=answered))
    orders = FINE_ORDERS[::4]
    ours = run.rdp_dependent(orders)
    for j, lam in enumerate(orders):
        ref = mp.fsum(ref_threshold([int(x) for x in v], t, s1, lam) for v in votes) + mp.fsum(
            ref_gnmax([int(x) for x in v], s2, lam) for v, a in zip(votes, answered, strict=True) if a)
        assert _close(ours[j], ref), (lam, ours[j], ref)
    assert run.answered == int(answered.sum())


def test_lnmax_bound_increases_with_q_where_thm3_applies():
    """The reason an upper bound q̃ may replace q (2017 Thm 3's condition): on a grid of q below
    1/(e^{ε₀}+1) the bound is non-decreasing, for several ε₀ and orders (mpmath)."""
    for eps0 in (0.1, 1.0, 3.0):
        top = 1 / (mp.exp(eps0) + 1)
        for lam in (1.5, 3, 20, 100):
            vals = [ref_thm3(top * i / 200, eps0, lam) for i in range(1, 200)]
            assert all(b >= a * (1 - mp.mpf(10) ** -30) for a, b in zip(vals, vals[1:], strict=False)), (eps0, lam)


# ---------------------------------------------------------------------------
# Data-independent figures from the closed forms (mpmath)
# ---------------------------------------------------------------------------

def _cks_min(curve, lo=1.0001, hi=5000.0, delta=1e-5):
    """min over λ of curve(λ) + ln(1 − 1/λ) − (ln δ + ln λ)/(λ − 1), by golden search on ln λ in
    mpmath after a scan (the objective is unimodal for these curves)."""
    ld = mp.log(delta)

    def f(x):
        lam = mp.e ** x
        return curve(lam) + mp.log(1 - 1 / lam) - (ld + mp.log(lam)) / (lam - 1)

    xs = [mp.log(lo) + (mp.log(hi) - mp.log(lo)) * i / 400 for i in range(401)]
    i = min(range(len(xs)), key=lambda j: f(xs[j]))
    a, b = xs[max(i - 1, 0)], xs[min(i + 1, 400)]
    g = (mp.sqrt(5) - 1) / 2
    for _ in range(120):
        c, d = b - g * (b - a), a + g * (b - a)
        if f(c) < f(d):
            b = d
        else:
            a = c
    return max(f((a + b) / 2), mp.mpf(0))


@pytest.mark.parametrize(("sigma", "k", "delta"), [(40.0, 286, 1e-5), (40.0, 3098, 1e-6), (100.0, 10**4, 1e-8),
                                                   (5.0, 10, 1e-5)])
def test_gnmax_data_independent_closed_form(sigma, k, delta):
    """k GNMax queries: RDP kλ/σ² (2018 Prop 8), CKS 2020 Prop 12 minimised over λ (mpmath)."""
    exact = _cks_min(lambda lam: k * lam / mp.mpf(sigma) ** 2, delta=delta)
    ours = RdpAccountant().epsilon(SelfComposedEvent(GNMaxEvent(sigma), k), delta=delta).epsilon
    assert float(exact) <= ours <= float(exact) * (1 + 1e-6)
    conv = ap.epsilon_of_curve(lambda o: k * ap.independent_rdp("gnmax", sigma, o), delta=delta)
    assert float(exact) <= conv.value <= float(exact) * (1 + 1e-6)


@pytest.mark.parametrize(("t_sigma1", "sigma2", "k", "answered", "delta"),
                         [(150.0, 40.0, 640, 286, 1e-5), (200.0, 40.0, 8500, 3098, 1e-6)])
def test_confident_data_independent_closed_form(t_sigma1, sigma2, k, answered, delta):
    """The 2018 paper's MNIST/SVHN settings (Table 2: σ₁, σ₂, queries, answered, δ) analysed
    data-independently: kλ/(2σ₁²) + aλ/σ₂² (mpmath)."""
    def curve(lam):
        return k * lam / (2 * mp.mpf(t_sigma1) ** 2) + answered * lam / mp.mpf(sigma2) ** 2

    exact = _cks_min(curve, delta=delta)
    ev = pm.pate_votes_event(np.tile([250] + [0] * 9, (k, 1)), mechanism="confident-gnmax", noise=sigma2,
                                   sigma1=t_sigma1, threshold=200.0,
                                   answered=(np.arange(k) < answered).astype(int))
    conv = ap.epsilon_of_curve(ap.PateRun(ev).rdp_independent, delta=delta)
    assert float(exact) <= conv.value <= float(exact) * (1 + 1e-6)


@pytest.mark.parametrize(("b", "k", "delta"), [(20.0, 100, 1e-5), (20.0, 1000, 1e-5), (2.0, 50, 1e-6)])
def test_lnmax_data_independent_closed_form(b, k, delta):
    """k LNMax queries (the 2017 paper's γ = 0.05, i.e. b = 20, at 100 and 1000 queries): RDP
    k·min(RR(2/b), 2·Laplace(b)) minimised in mpmath; basic composition k·2/b exactly."""
    exact = _cks_min(lambda lam: k * ref_lnmax_base(b, lam), delta=delta)
    ours = RdpAccountant(orders=ap.ORDERS).epsilon(SelfComposedEvent(LNMaxEvent(b), k), delta=delta).epsilon
    assert float(exact) <= ours <= float(exact) * (1 + 1e-6)
    assert pm.lnmax_epsilon(b) * k >= 2 * k / b and pm.lnmax_epsilon(b) == pytest.approx(2 / b, rel=1e-15)


def test_data_independent_curves_are_the_closed_forms():
    for lam in FINE_ORDERS:
        for b in (0.5, 20.0, 1e3):
            assert _close(float(ap.independent_rdp("lnmax", b, [lam])[0]), ref_lnmax_base(b, lam), 1e-10)
        assert _close(float(ap.independent_rdp("gnmax", 40.0, [lam])[0]), mp.mpf(float(lam)) / 1600, 1e-15)
        assert _close(float(ap.independent_rdp("threshold", 150.0, [lam])[0]), mp.mpf(float(lam)) / 45000, 1e-15)


def test_seed_equation_7_12_parameterisation():
    """Seed check (docs/design.md §4). The private-deep-learning chapter writes the per-query
    privacy loss of LNMax as γ and states the first log-moment bound (its eq. 7.12) as 2λγ. The
    primary source, Papernot et al. 2017 Thm 3 / §3, uses γ = 1/b (the inverse Laplace scale)
    and calls one query (2γ, 0)-DP: there α(λ) ≤ 2λγ = λε₀ with ε₀ = 2/b. Read with the chapter's
    γ = ε₀, 2λγ = 2λε₀ double counts the sensitivity factor (loose by 2×, never attained); read
    with γ = 1/b as the *loss*, λγ = λ/b would under-report. dpcalc implements α(λ) ≤ λε₀,
    ε₀ = 2/b: the per-query RDP α(λ−1)/(λ−1) never exceeds ε₀, and the worst ε₀-DP mechanism
    (randomized response, the pure-DP curve dpcalc uses) reaches it as λ → ∞."""
    b = 20.0
    eps0 = 2.0 / b
    lam = np.array([2.0, 10.0, 100.0, 1e4])
    curve = ap.independent_rdp("lnmax", b, lam)
    assert np.all(curve <= eps0 * (1 + 1e-12))                 # α(l) ≤ l·ε₀ = 2lγ (γ = 1/b)
    rr = [float(ref_rr(eps0, x)) for x in lam]
    assert rr[-1] > 0.999 * eps0 > 1.0 / b                     # λ/b (γ = 1/b as the loss) under-reports
    assert rr[-1] < 2 * eps0 * 0.5001                          # 2λε₀ (chapter's γ = ε₀) is 2× too loose


# ---------------------------------------------------------------------------
# Boundary behaviour
# ---------------------------------------------------------------------------

def test_unanimous_votes_cost_far_below_data_independent():
    votes = np.tile([250] + [0] * 9, (1000, 1))
    run = ap.PateRun(pm.pate_votes_event(votes, mechanism="gnmax", noise=40.0))
    dep = ap.epsilon_of_curve(run.rdp_dependent, delta=1e-5).value
    ind = ap.epsilon_of_curve(run.rdp_independent, delta=1e-5).value
    assert dep < 0.1 * ind
    # q → 0 as the gap grows (Prop 7): the data-dependent cost shrinks with σ fixed
    small = ap.PateRun(pm.pate_votes_event(np.tile([2500] + [0] * 9, (1000, 1)), mechanism="gnmax",
                                                 noise=40.0))
    assert ap.epsilon_of_curve(small.rdp_dependent, delta=1e-5).value < dep


@pytest.mark.parametrize("mechanism", ["gnmax", "lnmax"])
def test_ties_fall_back_to_data_independent(mechanism):
    votes = np.tile([25] * 10, (50, 1))  # q at the cap 1 − 1/m
    run = ap.PateRun(pm.pate_votes_event(votes, mechanism=mechanism, noise=40.0))
    assert np.array_equal(run.rdp_dependent(ap.ORDERS), run.rdp_independent(ap.ORDERS)) or np.allclose(
        run.rdp_dependent(ap.ORDERS), run.rdp_independent(ap.ORDERS), rtol=1e-13, atol=0)
    dq, iq = run.per_query(10.0)
    assert np.array_equal(dq, iq)


def test_single_class_costs_nothing_data_dependently():
    run = ap.PateRun(pm.pate_votes_event(np.full((7, 1), 250), mechanism="gnmax", noise=40.0))
    assert np.all(run.rdp_dependent(ap.ORDERS) == 0) and np.all(run.rdp_independent(ap.ORDERS) > 0)


def test_zero_teachers_and_unequal_totals_are_refused():
    with pytest.raises(ParameterError, match="zero teachers"):
        pm.pate_votes_event(np.zeros((3, 4)), mechanism="gnmax", noise=1.0)
    with pytest.raises(ParameterError, match="row 1 sums to 10, row 3 to 9"):
        pm.pate_votes_event([[10, 0], [5, 5], [9, 0]], mechanism="gnmax", noise=1.0)
    with pytest.raises(ParameterError, match="row 2, column 1"):
        pm.pate_votes_event([[1, 0], [-1, 2]], mechanism="gnmax", noise=1.0)
    with pytest.raises(ParameterError, match="row 1, column 2"):
        pm.pate_votes_event([[1, 0.5]], mechanism="gnmax", noise=1.0)
    with pytest.raises(ParameterError):
        GNMaxEvent(1.0, votes=(0, 0))


# ---------------------------------------------------------------------------
# Events in the accountants
# ---------------------------------------------------------------------------

def test_query_events_equal_the_run():
    votes = synthetic_votes(5, 30)
    run = ap.PateRun(pm.pate_votes_event(votes, mechanism="gnmax", noise=20.0))
    acc = RdpAccountant(orders=ap.ORDERS)
    from dpcalc.events import ComposedEvent

    composed = ComposedEvent(tuple(GNMaxEvent(20.0, tuple(int(x) for x in v)) for v in votes))
    np.testing.assert_allclose(acc.rdp(composed), run.rdp_dependent(ap.ORDERS), rtol=1e-12)
    np.testing.assert_allclose(acc.rdp(pm.pate_votes_event(votes, mechanism="gnmax", noise=20.0)),
                               run.rdp_dependent(ap.ORDERS), rtol=1e-15)


def test_pld_takes_data_independent_events_only():
    from dpcalc.accounting.pld import PldAccountant

    pld = PldAccountant()
    g = pld.epsilon(SelfComposedEvent(GNMaxEvent(40.0), 100), delta=1e-5).epsilon
    from dpcalc.events import GaussianEvent

    same = pld.epsilon(SelfComposedEvent(GaussianEvent(40.0 / math.sqrt(2)), 100), delta=1e-5).epsilon
    assert g == same
    with pytest.raises(UnsupportedEventError, match="rdp"):
        pld.epsilon(GNMaxEvent(40.0, (10, 0)), delta=1e-5)
    with pytest.raises(UnsupportedEventError, match="add/remove"):
        PldAccountant(neighboring="replace").epsilon(LNMaxEvent(20.0), delta=1e-5)
    with pytest.raises(UnsupportedEventError, match="one changed teacher vote"):
        RdpAccountant(neighboring="replace").epsilon(GNMaxEvent(40.0, (10, 0)), delta=1e-5)
    # replace-one: two votes may change, sensitivity 2 (4λ/σ²)
    r = RdpAccountant(neighboring="replace").rdp(GNMaxEvent(40.0), [2.0])
    assert r[0] == pytest.approx(4 * 2.0 / 1600, rel=1e-14)


def test_threshold_event_needs_threshold_with_votes():
    with pytest.raises(ParameterError, match="threshold"):
        PateThresholdEvent(10.0, votes=(3, 1))
    ev = PateThresholdEvent(150.0, 200.0, (250, 0))
    assert RdpAccountant().rdp(ev, [2.0])[0] <= 2.0 / (2 * 150.0**2) * (1 + 1e-15)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 60), min_size=2, max_size=6), st.floats(0.5, 80.0))
def test_data_dependent_never_above_data_independent_and_grows_with_noise_property(counts, sigma):
    """Property: per order, data-dependent ≤ data-independent (the minimum is taken), and every
    value is ≥ 0; unanimous-in-the-limit histograms are at most the base."""
    if sum(counts) == 0:
        counts[0] = 1
    ev = pm.pate_votes_event([counts], mechanism="gnmax", noise=sigma)
    run = ap.PateRun(ev)
    d, i = run.rdp(ap.ORDERS)
    assert np.all(d >= 0) and np.all(d <= i)
