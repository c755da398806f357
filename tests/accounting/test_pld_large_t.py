"""pld at a huge number of steps (issue 17, "Hangs and memory": `sigma` at T = 10⁸, q = 1e-5 took
51 s and printed a lower bound of 0).

* The accurate Fourier power (docs/numerical-accounting.md §4, "Accurate power") sums the heaviest
  window of the support term by term and the rest in blocks; it must agree with the term-by-term
  reference ``_accurate_power_direct`` to within the sum of their proven error bounds, and with
  an mpmath evaluation of Z_k^T to within its own bound.
* The Chernoff window's λ search runs on a summary of the PMF: the window must still hold all but
  η of the composed mass (checked against an explicit composition).
* The lower PMF's low edge bin (sampled Gaussian with q ~ h) grows upward instead of being
  labelled a grid step lower: the one-step lower curve must stay below the exact curve
  (closed form) at every ε, and the composed lower ε must be useful (not 0) and never above a
  certified upper reference (rdp).
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

from dpcalc.accounting import _pld_compose as pc
from dpcalc.accounting._pld_grid import discretize
from dpcalc.accounting._pld_mechanisms import GaussianLoss, SampledGaussianLoss


def _centred(pld):
    """(masses, centred consecutive indices) of a PMF as self_compose prepares them."""
    p = pld.probs
    nz = np.nonzero(p > 0)[0]
    p = p[nz[0]: nz[-1] + 1]
    c = int(round(float(np.dot(p, np.arange(p.size))) / p.sum()))
    return p, np.arange(p.size) - c


def _significant(p, d, count, n_fft, limit=400):
    a = np.bincount(np.mod(d, n_fft), weights=p, minlength=n_fft)
    la = np.log(np.maximum(np.abs(np.fft.rfft(a)), 1e-300))
    return np.nonzero(count * la > pc._LOG_NEGLIGIBLE)[0][:limit]


# (pair, grid step, T): sparse rarely sampled (q = 1e-5, the issue's case, both orderings, and a
# coarser grid), a moderate q, q = 1 (plain Gaussian), and small T (T = 2: exact zeros of the
# transform, tests/accounting/test_sampling.py::test_pld_two_fold_gaussian_is_never_zero)
POWER_CASES = [
    pytest.param(SampledGaussianLoss(0.555, 1e-5, "remove"), 4e-6, 10 ** 8, marks=pytest.mark.slow),
    (SampledGaussianLoss(0.555, 1e-5, "remove"), 2e-5, 10 ** 8),
    (SampledGaussianLoss(0.555, 1e-5, "add"), 2e-5, 10 ** 8),
    (SampledGaussianLoss(1.0, 0.01, "remove"), 1e-4, 10 ** 5),
    (SampledGaussianLoss(0.8, 1e-6, "remove"), 1e-5, 10 ** 6),
    (GaussianLoss(1 / 50.0), 1e-4, 10 ** 6),
    (GaussianLoss(1 / 2.0), 1e-3, 2),
    (GaussianLoss(1 / 0.7), 5e-3, 3),
]


@pytest.mark.parametrize("pair,h,count", POWER_CASES, ids=lambda x: repr(x)[:40])
@pytest.mark.parametrize("which", ["upper", "lower"])
def test_accurate_power_agrees_with_the_direct_reference(pair, h, count, which):
    up, lo = discretize(pair, h, tail=1e-20, max_points=2 ** 23)
    p, d = _centred(up if which == "upper" else lo)
    n_fft = pc._next_fast_len(2 * p.size + 1000)
    ks = _significant(p, d, count, n_fft)
    z_new, e_new = pc._accurate_power(p, d, ks, n_fft, count)
    z_ref, e_ref = pc._accurate_power_direct(p, d, ks, n_fft, count)
    # the same Parseval norm the allowance bounds: √(2 Σ |ΔZ_k^T|²)
    diff = math.sqrt(2 * float(np.sum(np.abs(z_new - z_ref) ** 2)))
    assert math.isfinite(e_new) and math.isfinite(e_ref)
    assert diff <= e_new + e_ref + 1e-300
    # the blocked tail costs no more than a little allowance: at most twice the reference's
    assert e_new <= 2 * e_ref + 1e-30


@pytest.mark.parametrize("upper", [True, False])
def test_accurate_power_against_mpmath(upper):
    """Z_k^T in 60-digit arithmetic for a PMF whose support exceeds the term-by-term window (so
    the blocked tail is used). The float mass m is on the pessimistic side (≥ Σp for an upper
    PMF, ≤ for a lower one), so the result is the exact power times the uniform factor
    S = (m/Σp)^T (≥ 1 upper, ≤ 1 lower: it only moves δ the safe way) within the proven bound.
    Without that care the float Σp's rounding, times T = 10⁷, put the old computation 3.6 times
    its allowance away from the exact power (7.8e-13 against 2.2e-13 at k = 1)."""
    rng = np.random.default_rng(17)
    n = pc._CORE_POINTS + 3000
    # a sharp bulk (most mass in 20 points) and a long light tail on both sides
    p = np.full(n, 1e-9) * rng.random(n)
    centre = 1500
    p[centre: centre + 20] += rng.random(20)
    p /= p.sum()
    d = np.arange(n) - centre
    n_fft, count = 3 * n, 10 ** 7
    ks = np.array([0, 1, 2, 11])
    z, err = pc._accurate_power(p, d, ks, n_fft, count, upper)
    mpmath.mp.dps = 60
    pm = [mpmath.mpf(float(x)) for x in p]
    m_exact = mpmath.fsum(pm)
    scale = (mpmath.mpf(pc._mass_bound(p, upper)[0]) / m_exact) ** count
    assert (scale >= 1) if upper else (scale <= 1)
    diff2 = 0.0
    for k, zk in zip(ks, z, strict=True):
        w = mpmath.fsum(pm[i] * mpmath.expjpi(-2 * mpmath.mpf(int(k) * int(d[i])) / n_fft) for i in range(n))
        exact = complex(scale * w ** count)
        diff2 += abs(zk - exact) ** 2
    assert math.sqrt(2 * diff2) <= err
    assert err < 1e-9  # and the bound is not vacuous


def test_accurate_power_exact_zero_of_the_transform():
    """Two equal atoms one step apart: Z_{N/2} = 0 exactly (the T = 2 trap). The power must be
    finite with a finite allowance, never NaN."""
    p, d = np.array([0.5, 0.5]), np.array([0, 1])
    n_fft = 64
    ks = np.arange(33)
    for fn in (pc._accurate_power, pc._accurate_power_direct):
        z, err = fn(p, d, ks, n_fft, 2)
        assert np.all(np.isfinite(z)) and math.isfinite(err)
        exact = np.array([(0.5 + 0.5 * np.exp(-2j * np.pi * k / n_fft)) ** 2 for k in ks])
        assert math.sqrt(2 * float(np.sum(np.abs(z - exact) ** 2))) <= err + 1e-15


def test_pairwise_sum_error_bound():
    rng = np.random.default_rng(3)
    x = rng.standard_normal(100_003) * np.exp(rng.uniform(-30, 30, 100_003))
    got = float(pc._pairwise_sum(x))
    exact = math.fsum(x.tolist())
    assert abs(got - exact) <= math.ceil(math.log2(x.size)) * pc._U * float(np.abs(x).sum())


def test_tail_sum_matches_direct_sum():
    rng = np.random.default_rng(5)
    p = rng.random(50_001) * 1e-6
    kk = np.array([0, 1, 3, 1000, 49_999], dtype=np.int64)
    n_fft, d0 = 120_000, -77_777
    re, im, err = pc._tail_sum(p, d0, kk, n_fft)
    theta = pc._reduced_angles(kk, d0 + np.arange(p.size, dtype=np.int64), n_fft)
    ref = np.exp(-1j * theta) @ p
    assert np.all(np.abs(re - ref.real) <= err) and np.all(np.abs(im - ref.imag) <= err)


def test_chernoff_window_on_a_summary_is_valid():
    """The λ search on the summary; the window must hold all but η of the composed mass (explicit
    composition by FFT, exact enough at this η) and match the full search's window to 1%."""
    pair = SampledGaussianLoss(0.8, 1e-3, "remove")
    up, _ = discretize(pair, 1e-4, tail=1e-16, max_points=2 ** 22)
    p, k = pc._trimmed(up)
    assert p.size > 4 * pc._CHERNOFF_SUMMARY  # the summary path is taken
    count, eta = 40, 1e-6
    lo, hi, _ = pc._chernoff_window(p, k, count, eta)
    full = np.zeros(int(k[-1] - k[0]) + 1)
    full[(k - k[0]).astype(int)] = p
    m = pc._next_fast_len(count * full.size)
    comp = np.maximum(np.fft.irfft(np.fft.rfft(full, m) ** count, m)[: count * (full.size - 1) + 1], 0.0)
    idx = count * int(k[0]) + np.arange(comp.size)
    outside = float(comp[(idx < lo) | (idx > hi)].sum())
    assert outside <= eta
    saved = pc._CHERNOFF_SUMMARY
    try:
        pc._CHERNOFF_SUMMARY = 10 ** 9  # the full search
        lo_f, hi_f, _ = pc._chernoff_window(p, k, count, eta)
    finally:
        pc._CHERNOFF_SUMMARY = saved
    assert hi - lo <= 1.01 * (hi_f - lo_f)


@pytest.mark.parametrize("sigma,q,h", [(0.555, 1e-5, 6.6667e-6), (0.555, 1e-5, 4.00002e-6), (0.7, 1e-4, 4e-5)])
def test_low_edge_bin_lower_pmf_stays_below_the_exact_curve(sigma, q, h):
    """One step: the lower PMF's δ(ε) ≤ the exact δ(ε) (closed form) at every ε, including
    negative ε around the edge ln(1−q) where the edge bin was regrouped; and its mean loss (the
    KL bias that T multiplies) is within 15% of the upper PMF's (it was −h·0.75, a drift of
    −3.8e-6 × 10⁸ steps, at h = 6.67e-6)."""
    pair = SampledGaussianLoss(sigma, q, "remove")
    edge = math.log1p(-q)
    k = math.floor(edge / h + 0.5)
    h = h if k == 0 else edge / (k - 0.5)  # aligned as pld aligns it (PldAccountant._align)
    up, lo = discretize(pair, h, tail=1e-20, max_points=2 ** 23)
    for eps in np.concatenate((np.linspace(-3 * q, 3 * q, 25), [0.0, 1e-3, 0.01, 0.1, 0.5, 1.0, 2.0])):
        exact = pair.delta(float(eps))
        d_lo = float(np.sum(lo.probs * np.clip(-np.expm1(eps - lo.losses), 0, None))) + lo.p_inf
        assert d_lo <= exact + 1e-15, eps
    mean_up = float(np.dot(up.probs, up.losses))
    mean_lo = float(np.dot(lo.probs, lo.losses))
    assert 0.85 * mean_up <= mean_lo <= mean_up


def test_issue_17_large_t_lower_bound_is_useful():
    """The issue's case at its final grid (σ from `dpcalc sigma --eps 2 --delta 1e-5 -q 1e-5
    --steps 1e8`): the lower bound was 0; it must now be within 2% of the upper bound and never
    above a certified upper reference (rdp; the upper itself)."""
    from dpcalc.accounting.pld import PldAccountant
    from dpcalc.accounting.rdp import RdpAccountant
    from dpcalc.events import dpsgd_event

    ev = dpsgd_event(noise_multiplier=0.5551298, sample_rate=1e-5, steps=10 ** 8)
    res = PldAccountant(discretization=6.6667e-6).epsilon(ev, delta=1e-5)
    lower = res.details["epsilon_lower"]
    assert 0.98 * res.epsilon <= lower <= res.epsilon
    assert lower <= RdpAccountant().epsilon(ev, delta=1e-5).epsilon


def test_sampled_gaussian_values_follow_the_grid_path_not_the_array_size():
    """A grid of more than _NDTR_LIBM_MAX points takes Φ from the vectorised erfc; its values
    evaluated on a part of it (the memo of grid_functions, the ± dedup of the without-replacement
    pair) must be bitwise the full array's: the part passes the grid's path."""
    from dpcalc._numerics import _NDTR_LIBM_MAX

    h, k0, n = 2.5e-3, -400, 4 * _NDTR_LIBM_MAX
    for direction in ("remove", "add"):
        pair = SampledGaussianLoss(0.8, 0.01, direction)
        ell = (k0 + np.arange(n)) * h
        full = pair.functions(ell)
        part = pair.functions(ell[:100], vector=True)
        assert all(np.array_equal(f[:100], p) for f, p in zip(full, part, strict=True))
        libm = pair.functions(ell[:100])  # a 100-point array alone: libm's erfc
        assert all(np.array_equal(f, p) for f, p in zip(libm, pair.functions(ell[:100], vector=False),
                                                           strict=True))
    memo: dict = {}
    remove, add = SampledGaussianLoss(0.8, 0.01, "remove"), SampledGaussianLoss(0.8, 0.01, "add")
    remove.grid_functions(k0, n, h, False, memo)
    for pair in (add, remove):  # the add ordering reads the remove ordering's values from memo
        got = pair.grid_functions(k0 + 7, n - 20, h, False, memo)
        want = pair.functions((k0 + 7 + np.arange(n - 20)) * h)
        assert all(np.array_equal(g, w) for g, w in zip(got, want, strict=True))


@pytest.mark.parametrize("q", [1e-5, 0.003, 0.5])
def test_loss_to_x_is_the_same_with_or_without_large_losses(q):
    # x(ℓ) takes a gather-free path when no loss exceeds 30 nats (issue 31): the values must be
    # bitwise those of the two-branch path, which any array holding a loss above 30 takes
    pair = SampledGaussianLoss(0.7, q, "remove")
    rng = np.random.default_rng(1)
    u = np.concatenate([np.linspace(math.log1p(-q) - 1, 29.9, 70_001), rng.uniform(-1, 29.9, 5000)])
    assert np.array_equal(pair._x(u), pair._x(np.append(u, 31.0))[:-1])
