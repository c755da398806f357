"""Smooth sensitivity of GNMax's data-dependent RDP and the GNSS release cost
(dpcalc/mechanisms/pate_ss.py; Papernot et al. 2018 App. B–C).

References: the local sensitivity at distance d is checked against a brute-force search over every
vote histogram within d teacher changes (n ≤ 6 teachers, m ≤ 3 classes), written here from the
definition (LS_d(x) = max over y within d changes of max over y's neighbours |f(y') − f(y)|, with f
the per-query value dpcalc composes); the GNSS cost against the closed form of 2018 Thm 23
(arXiv:1802.08908) in mpmath.
"""

from __future__ import annotations

import itertools
import math

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcalc.errors import ParameterError
from dpcalc.mechanisms import pate as pm
from dpcalc.mechanisms import pate_ss as ss


def _histograms(n: int, m: int) -> list[tuple[int, ...]]:
    return [h for h in itertools.product(range(n + 1), repeat=m) if sum(h) == n]


def _brute_force(n: int, m: int, sigma: float, order: float):
    """Every histogram, its ln q̃ and its exact local sensitivity at distances 0 … n (BFS over the
    graph whose edges move one teacher's vote)."""
    hs = _histograms(n, m)
    index = {h: i for i, h in enumerate(hs)}
    lq = pm.log_q_gnmax(np.array(hs, dtype=float), sigma)
    f = ss.gnmax_rdp_of_logq(lq, sigma, order)
    nbrs = []
    for h in hs:
        out = set()
        for i, j in itertools.permutations(range(m), 2):
            if h[i] > 0:
                g = list(h)
                g[i] -= 1
                g[j] += 1
                out.add(index[tuple(g)])
        nbrs.append(sorted(out))
    ls1 = np.array([max((abs(f[j] - f[i]) for j in nbrs[i]), default=0.0) for i in range(len(hs))])
    exact = np.zeros((len(hs), n + 1))
    for x in range(len(hs)):
        seen, frontier = {x}, [x]
        exact[x, 0] = ls1[x]
        for d in range(1, n + 1):
            frontier = [w for u in frontier for w in nbrs[u] if w not in seen]
            seen.update(frontier)
            exact[x, d] = max(ls1[w] for w in seen)
    return hs, lq, exact, nbrs


CASES = [(n, m, s, lam) for n in range(1, 7) for m in (2, 3) for s in (0.5, 1.0, 2.0) for lam in (1.5, 2.0, 4.0)]


@pytest.mark.parametrize("n,m,sigma,order", CASES)
def test_local_sensitivity_bounds_brute_force(n, m, sigma, order):
    hs, lq, exact, _ = _brute_force(n, m, sigma, order)
    bound = ss.local_sensitivity_gnmax(lq, sigma=sigma, order=order, m=m, dmax=n)
    assert bound.shape == exact.shape
    assert np.all(bound >= exact), (hs, bound, exact)
    assert np.all(bound <= order / sigma**2 * (1 + 1e-12))


def test_brute_force_catches_a_too_small_bound():
    """The range of f over the ball of radius d alone (forgetting the neighbour one step further)
    is below the exact local sensitivity somewhere: the brute force has teeth."""
    n, m, sigma, order = 6, 3, 1.0, 2.0
    hs, lq, exact, _ = _brute_force(n, m, sigma, order)
    llo, lhi = ss.ball_logq(lq, m, sigma, n)
    wrong = ss.gnmax_rdp_of_logq(lhi, sigma, order) - ss.gnmax_rdp_of_logq(llo, sigma, order)
    assert np.any(wrong < exact - 1e-9)
    assert np.any(exact > 0.1)  # a non-trivial case: the data-dependent bound applies somewhere


@pytest.mark.parametrize("n,m,sigma,order", [(6, 3, 1.0, 2.0), (5, 2, 0.5, 4.0), (6, 2, 2.0, 1.5)])
def test_ball_contains_every_histogram_within_d(n, m, sigma, order):
    """q̃ of every histogram within d changes lies in [lo_d, hi_d] (the iterated B_L, B_U)."""
    hs, lq, _, nbrs = _brute_force(n, m, sigma, order)
    llo, lhi = ss.ball_logq(lq, m, sigma, n)
    for x in range(len(hs)):
        seen, frontier = {x}, [x]
        for d in range(1, n + 1):
            frontier = [w for u in frontier for w in nbrs[u] if w not in seen]
            seen.update(frontier)
            vals = lq[sorted(seen)]
            assert vals.min() >= llo[x, d] and vals.max() <= lhi[x, d]


@pytest.mark.parametrize("n,m,sigma,order,beta", [(6, 3, 1.0, 2.0, 0.1), (5, 2, 0.5, 4.0, 0.05)])
def test_smooth_sensitivity_is_beta_smooth_and_above_local(n, m, sigma, order, beta):
    """SS_β(x) ≥ LS(x) and SS_β(x) ≤ e^β SS_β(y) for neighbours (Nissim, Raskhodnikova, Smith 2007
    Def. 2.1), checked on every histogram (single-query runs)."""
    hs, lq, exact, nbrs = _brute_force(n, m, sigma, order)
    sv = np.array([ss.smooth_sensitivity_gnmax(lq[i:i + 1], sigma=sigma, order=order, m=m, n=n, beta=beta)
                   for i in range(len(hs))])
    assert np.all(sv >= exact[:, 0])
    for x in range(len(hs)):
        for y in nbrs[x]:
            assert sv[x] <= math.exp(beta) * sv[y] * (1 + 1e-12)
            assert sv[x] <= math.exp(beta * (1 + 1e-9)) * sv[y]  # the β' that rdp_gnss charges


def _votes(seed: int, k: int = 60, n: int = 50, m: int = 5) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.multinomial(n, rng.dirichlet(np.full(m, 0.2), size=k)).astype(float)


@settings(max_examples=25, deadline=None)
@given(b1=st.floats(1e-3, 0.2), b2=st.floats(1e-3, 0.2), seed=st.integers(0, 3))
def test_smooth_sensitivity_monotone_in_beta(b1, b2, seed):
    v = _votes(seed)
    lq = pm.log_q_gnmax(v, 5.0)
    lo, hi = sorted((b1, b2))
    s_lo = ss.smooth_sensitivity_gnmax(lq, sigma=5.0, order=3.0, m=5, n=50, beta=lo)
    s_hi = ss.smooth_sensitivity_gnmax(lq, sigma=5.0, order=3.0, m=5, n=50, beta=hi)
    assert s_hi <= s_lo
    # and it bounds the run's local sensitivity at distance 0 (the sum of the per-query bounds)
    ls0 = ss.local_sensitivity_gnmax(lq, sigma=5.0, order=3.0, m=5, dmax=0)[:, 0].sum()
    assert s_hi >= ls0


def _gnss_mp(beta, sigma_s, lam):
    mpmath.mp.dps = 50
    b, s, l_ = mpmath.mpf(beta), mpmath.mpf(sigma_s), mpmath.mpf(lam)
    return l_ * mpmath.e ** (2 * b) / s**2 + (b * l_ - mpmath.log(1 - 2 * l_ * b) / 2) / (l_ - 1)


@pytest.mark.parametrize("beta,sigma_s,lam", [(0.04, 3.0, 10.0), (0.0329, 6.23, 14.0), (1e-4, 1.0, 2.0),
                                               (0.2, 50.0, 2.4), (0.01, 0.5, 49.0)])
def test_gnss_cost_closed_form(beta, sigma_s, lam):
    """2018 Thm 23 (arXiv:1802.08908): λe^{2β}/σ_s² + (βλ − ½ln(1 − 2λβ))/(λ − 1), rounded up."""
    got = ss.rdp_gnss(beta, sigma_s, lam)
    ref = _gnss_mp(beta, sigma_s, lam)
    assert got >= ref
    # charged at β(1 + 1e-9) (β-smoothness up to rounding): within 1e-7 relative of the closed form
    assert float((got - ref) / ref) < 1e-7
    assert got >= _gnss_mp(beta * (1 + 1e-9), sigma_s, lam)


def test_gnss_order_range():
    with pytest.raises(ParameterError, match="1/\\(2β\\)"):
        ss.rdp_gnss(0.1, 1.0, 5.0)
    with pytest.raises(ParameterError):
        ss.rdp_gnss(0.1, 1.0, 1.0)


def test_release_is_seeded_and_centred():
    a = ss.release(1.0, 0.5, 2.0, seed=3)
    assert a == ss.release(1.0, 0.5, 2.0, seed=3)
    assert ss.release(1.0, 0.0, 2.0) == 1.0
    draws = np.array([ss.release(0.0, 1.0, 1.0, seed=s) for s in range(400)])
    assert abs(draws.mean()) < 0.2 and 0.8 < draws.std() < 1.2  # N(0, 1): 400 draws, ~4 std errors


def test_single_class_has_zero_sensitivity():
    lq = pm.log_q_gnmax(np.array([[5.0], [5.0]]), 1.0)
    assert ss.smooth_sensitivity_gnmax(lq, sigma=1.0, order=2.0, m=1, n=5, beta=0.1) == 0.0


def test_c5_holds_on_a_grid_and_its_failure_is_refused(monkeypatch):
    """C5 (G non-decreasing in q) holds for the (σ, λ, m) the CLI typically sees; a G that
    decreases somewhere (simulated) is refused with InfeasibleError (exit 1), not used."""
    from dpcalc.errors import InfeasibleError

    for sigma in (0.5, 2.0, 40.0, 300.0):
        for lam in (1.5, 10.0, 100.0):
            ss.check_c5(sigma, lam, 10)
    real = ss.gnmax_rdp_of_logq
    monkeypatch.setattr(ss, "gnmax_rdp_of_logq", lambda lq, s, o: real(lq, s, o) + np.sin(np.asarray(lq)))
    with pytest.raises(InfeasibleError, match="C5"):
        ss.check_c5(1.0, 2.0, 3)
