"""pld for truncated Poisson batches, add/remove (issue 32; dpcalc/accounting/_truncated_pld.py).

References used here (each test says which):

* the branch probabilities p_M = P[Bin(M, q) ≥ B_max] and γ_M = B_max·P[Bin(M+1, q) ≥ B_max+1]/((M+1)·p_M)
  in mpmath (regularised incomplete beta, 40 digits), straight from their definitions;
* an achievable lower bound: the explicit worst-case instance of one dimension, the differing
  record contributing +C and every other record −C (C = 1). One step outputs (x kept) − (others
  kept) + N(0, σ²); its law is a finite Gaussian mixture over the batch-size distribution, written
  out below in mpmath (:func:`_instance_step`), and its hockey-stick divergence
  sup_A P(A) − e^ε Q(A) is evaluated on the set where p > e^ε q (roots refined in mpmath, masses
  by Φ). Any set A gives a lower bound, so the number is an achievable δ(ε) whatever the
  root finding misses. For T steps the adversary looks at the sum of the T outputs (a
  post-processing): the T-fold convolution of the step's discrete part plus N(0, Tσ²), again a
  lower bound on the T-step δ(ε). When B_max is far below the expected batch (p ≈ 1) this
  instance attains the pair of the truncated branch exactly (one step);
* dp_accounting's PLD accountant on ``TruncatedSubsampledGaussianDpEvent`` (its second branch is
  the looser symmetric replace-one pair at σ/2; it takes M = N − 1, so M = N is its dataset_size
  N + 1);
* dpcalc's rdp accountant (the same decomposition in Rényi DP, converted to (ε, δ): looser);
* issue 32's reference bracket for the two truncated rows (an independent check: ≤ 2.181 at
  B_max 300 and ≤ 5.286 at B_max 256, dp_accounting PLD 2.167 and 5.735).
"""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest

from dpcalc.accounting._pld_mechanisms import SampledGaussianLoss
from dpcalc.accounting._sampling import default_accountant_for
from dpcalc.accounting._truncated_pld import MixtureLoss, truncated_poisson_pair, truncation_weights
from dpcalc.accounting.pld import PldAccountant
from dpcalc.accounting.rdp import RdpAccountant
from dpcalc.accounting.registry import available, get_accountant
from dpcalc.errors import UnsupportedEventError
from dpcalc.events import (
    GaussianEvent,
    LaplaceEvent,
    PoissonSampledEvent,
    SelfComposedEvent,
    TruncatedPoissonSampledEvent,
    dpsgd_event,
)

MP_DPS = 40


def _trunc(q, n, bmax, sigma, steps=1):
    step = TruncatedPoissonSampledEvent(q, n, bmax, GaussianEvent(sigma))
    return step if steps == 1 else SelfComposedEvent(step, steps)


def _tail_mp(n, k, q):
    """P[Bin(n, q) ≥ k] in mpmath: the pmf at k (log-gamma) and the ratio recurrence, summed from k
    upwards (k above the mean) or 1 − the sum from k − 1 downwards."""
    q = mpmath.mpf(q)
    if k <= 0:
        return mpmath.mpf(1)
    if k > n:
        return mpmath.mpf(0)
    if q == 1:
        return mpmath.mpf(1)

    def pmf(j):
        return mpmath.e ** (mpmath.loggamma(n + 1) - mpmath.loggamma(j + 1) - mpmath.loggamma(n - j + 1)
                            + j * mpmath.log(q) + (n - j) * mpmath.log1p(-q))

    tiny = mpmath.mpf(10) ** -(MP_DPS + 5)
    total = mpmath.mpf(0)
    if k >= n * q:
        j, t = k, pmf(k)
        while j <= n and t > total * tiny:
            total += t
            t, j = t * (n - j) / (j + 1) * q / (1 - q), j + 1
        return total
    j, t = k - 1, pmf(k - 1)
    while j >= 0 and t > tiny:
        total += t
        t, j = t * j / (n - j + 1) * (1 - q) / q, j - 1
    return 1 - total


def _branch_mp(q, m, bmax):
    """(p_M, γ_M) in mpmath, from their definitions."""
    with mpmath.workdps(MP_DPS):
        if m < bmax:
            return mpmath.mpf(0), mpmath.mpf(0)
        p = _tail_mp(m, bmax, q)
        return p, bmax * _tail_mp(m + 1, bmax + 1, q) / ((m + 1) * p)


# ----------------------------------------------------------------------------- the weights

@pytest.mark.parametrize("q,n,bmax", [
    (256 / 60000, 60000, 300), (256 / 60000, 60000, 256), (0.01, 10000, 110), (0.01, 10000, 150),
    (0.5, 60, 5), (0.3, 30, 8), (0.05, 1000, 55), (0.001, 100000, 200), (1.0, 50, 20), (0.2, 10, 10),
    (0.9, 30, 29), (1e-4, 1000000, 180), (1e-6, 10 ** 9, 1100), (1e-10, 10 ** 12, 130)])
def test_weights_bracket_the_exact_branch_probabilities(q, n, bmax):
    """w_A ≤ 1 − p_M and w_B ≤ p_M for both neighbours M = N − 1, N; the weights sum to 1 exactly;
    γ̄ ≥ γ_M (mpmath); and the third branch's weight is the spread of p_M, not more than
    |p_N − p_{N−1}| plus the 1e-8 widening (so the bracket is not loose for nothing). The last two
    cases have more than 2³¹ records (scipy.special.bdtrc's integer argument overflows there)."""
    w_a, w_b, w_c, gamma = truncation_weights(sample_rate=q, dataset_size=n, max_batch_size=bmax)
    assert min(w_a, w_b, w_c) >= 0.0
    assert Fraction(w_a) + Fraction(w_b) + Fraction(w_c) == 1
    exact = [_branch_mp(q, m, bmax) for m in (n - 1, n)]
    for p, g in exact:
        assert mpmath.mpf(w_a) <= 1 - p
        assert mpmath.mpf(w_b) <= p
        assert mpmath.mpf(gamma) >= g
        if p > 0:
            assert g < q  # γ_M ≤ q·B/(B+1): the C branch is the B branch at rate q
    spread = abs(exact[1][0] - exact[0][0])
    top = max(p for p, _ in exact)
    assert w_c <= spread + 3e-8 * top + 2.0 ** -52
    if top > 0:
        assert gamma <= max(g for _, g in exact) * (1 + 3e-8)


def test_mixture_is_the_branch_revealing_sum():
    """Each distribution function is the weighted sum of the branches', so the hockey-stick
    divergence is the weighted sum of the branches' (joint convexity attained); the support is the
    union; weights that do not sum to 1 exactly are refused."""
    a, b = SampledGaussianLoss(1.1, 0.004, "remove"), SampledGaussianLoss(0.55, 0.0038, "remove")
    mix = MixtureLoss((0.75, 0.25), (a, b))
    ell = np.array([-0.003, 0.0, 0.01, 0.5, 2.0])
    for got, fa, fb in zip(mix.functions(ell), a.functions(ell), b.functions(ell), strict=True):
        np.testing.assert_allclose(got, 0.75 * fa + 0.25 * fb, rtol=1e-15)
    for eps in (0.0, 0.3, 1.0, 3.0):
        assert mix.delta(eps) == pytest.approx(0.75 * a.delta(eps) + 0.25 * b.delta(eps), rel=1e-12)
    assert mix.support == (math.log1p(-0.004), math.inf) and not mix.symmetric
    with pytest.raises(ValueError, match="sum to 1"):
        MixtureLoss((0.7, 0.2), (a, b))


# ----------------------------------------------------------------------------- the achievable lower bound

def _instance_step(q, m, bmax):
    """The ±C instance (module docstring): the law of V = (x kept) − (others kept) under P (x in
    the data) and Q (x not), as {value: mass} in mpmath."""
    q = mpmath.mpf(q)
    P, Q = {}, {}
    for k in range(m + 1):
        w = mpmath.binomial(m, k) * q ** k * (1 - q) ** (m - k)
        j = min(k, bmax)
        Q[-j] = Q.get(-j, 0) + w
        P[-j] = P.get(-j, 0) + w * (1 - q)
        if k + 1 <= bmax:  # x joins, nothing truncated
            P[1 - k] = P.get(1 - k, 0) + w * q
        else:  # x joins, B_max of the k + 1 kept: x among them with probability B_max/(k+1)
            kept = mpmath.mpf(bmax) / (k + 1)
            P[2 - bmax] = P.get(2 - bmax, 0) + w * q * kept
            P[-bmax] = P.get(-bmax, 0) + w * q * (1 - kept)
    return P, Q


def _power(law, t):
    out = {0: mpmath.mpf(1)}
    for _ in range(t):
        nxt: dict = {}
        for i, x in out.items():
            for j, y in law.items():
                nxt[i + j] = nxt.get(i + j, 0) + x * y
        out = nxt
    return out


def _hockey(P, Q, s, eps):  # noqa: N803
    """P(A) − e^ε Q(A) of the mixtures Σ P_c N(c, s²), Σ Q_c N(c, s²) on A = {p > e^ε q}, located on
    a fine grid (floats) and refined by bisection and integrated by Φ (mpmath)."""
    ee = mpmath.e ** eps
    locs = sorted(set(P) | set(Q))
    ys = np.linspace(locs[0] - 12 * s, locs[-1] + 12 * s, 20001)

    def logdens(law):
        c = np.array(list(law), float)
        w = np.array([float(x) for x in law.values()])
        keep = w > 0
        z = np.log(w[keep])[None, :] - 0.5 * ((ys[:, None] - c[keep][None, :]) / s) ** 2
        top = z.max(1)
        return top + np.log(np.exp(z - top[:, None]).sum(1))

    f = logdens(P) - (float(eps) + logdens(Q))

    def g(y):
        return (sum(w * mpmath.npdf(y, c, s) for c, w in P.items())
                - ee * sum(w * mpmath.npdf(y, c, s) for c, w in Q.items()))

    edges = []
    for i in np.nonzero((f[:-1] > 0) != (f[1:] > 0))[0]:
        lo, hi = mpmath.mpf(ys[i]), mpmath.mpf(ys[i + 1])
        g_lo = g(lo)
        for _ in range(80):
            mid = (lo + hi) / 2
            g_mid = g(mid)
            if (g_mid > 0) == (g_lo > 0):
                lo, g_lo = mid, g_mid
            else:
                hi = mid
        edges.append((lo + hi) / 2)
    points = [mpmath.ninf, *edges, mpmath.inf]

    def mass(law, a, b):
        return sum(w * (mpmath.ncdf(b, c, s) - mpmath.ncdf(a, c, s)) for c, w in law.items())

    total, inside = mpmath.mpf(0), bool(f[0] > 0)
    for a, b in zip(points[:-1], points[1:], strict=True):
        if inside:
            total += mass(P, a, b) - ee * mass(Q, a, b)
        inside = not inside
    return total


def _instance_delta(q, n, bmax, sigma, steps, eps):
    """The instance's δ(ε) (one step exact; T steps through the sum), both orderings, both
    neighbours (the dataset with x has N records, or the one without)."""
    with mpmath.workdps(30):
        out = mpmath.mpf(0)
        for m in (n - 1, n):
            P, Q = _instance_step(q, m, bmax)
            PT, QT = _power(P, steps), _power(Q, steps)  # noqa: N806
            s = sigma * math.sqrt(steps)
            out = max(out, _hockey(PT, QT, s, eps), _hockey(QT, PT, s, eps))
        return out


@pytest.mark.parametrize("q,n,bmax,sigma", [(0.5, 60, 5, 1.0), (0.3, 30, 8, 1.0)])
def test_one_step_pair_dominates_the_instance(q, n, bmax, sigma):
    """The exact δ(ε) of the pair (from its distribution functions, no grid) is ≥ the ±C instance's
    exact one-step δ(ε); with p ≈ 1 (B_max = 5 of an expected 30) the instance attains it: the
    truncated branch's pair PSG(γ̄, σ/2) cannot be improved (to 1e-6 relative here)."""
    step = _trunc(q, n, bmax, sigma)
    for eps in (0.0, 0.5, 1.0, 2.0):
        inst = _instance_delta(q, n, bmax, sigma, 1, eps)
        pair = max(truncated_poisson_pair(step, d).delta(eps) for d in ("remove", "add"))
        assert pair >= inst * (1 - 1e-12), (eps, pair, inst)
        if bmax == 5:
            assert pair <= inst * (1 + 1e-6), (eps, pair, inst)


@pytest.mark.parametrize("q,n,bmax,sigma,steps", [
    (0.5, 60, 5, 1.0, 1), (0.5, 60, 5, 1.0, 2), (0.5, 60, 5, 1.0, 4), (0.3, 30, 8, 1.0, 1),
    pytest.param(0.3, 30, 8, 1.0, 3, marks=pytest.mark.slow)])  # the exact 3-step instance: ~15 s
def test_pld_certified_delta_is_above_the_instance(q, n, bmax, sigma, steps):
    """pld's certified δ(ε) (upper bound) is ≥ the achievable δ(ε) of the ±C instance for one and a
    few steps; the instance is also ≤ the pld bracket's upper end in ε (at δ = the instance's δ, pld's
    ε is ≥ ε)."""
    event = _trunc(q, n, bmax, sigma, steps)
    for eps in (0.0, 0.5, 1.0):
        inst = float(_instance_delta(q, n, bmax, sigma, steps, eps))
        res = PldAccountant().delta(event, epsilon=eps)
        assert res.delta >= inst, (eps, res.delta, inst)
        assert res.details["delta_lower"] <= res.delta
        if steps == 1 and bmax == 5:  # the instance attains the pair: the bracket must contain it
            assert res.details["delta_lower"] <= inst * (1 + 1e-6)
    inst = float(_instance_delta(q, n, bmax, sigma, steps, 0.5))
    assert PldAccountant().epsilon(event, delta=inst).epsilon >= 0.5


# ----------------------------------------------------------------------------- cross-checks

def _dp_accounting(n, q, bmax, sigma, steps, delta, interval=1e-3):
    import dp_accounting as dpa
    from dp_accounting.pld import pld_privacy_accountant as dpa_pld

    acc = dpa_pld.PLDAccountant(value_discretization_interval=interval)
    acc.compose(dpa.SelfComposedDpEvent(dpa.TruncatedSubsampledGaussianDpEvent(n, q, bmax, sigma), steps))
    return acc.get_epsilon(delta)


@pytest.mark.parametrize("q,n,bmax,sigma,steps,delta", [
    (0.01, 10000, 110, 1.0, 1000, 1e-5), (0.05, 1000, 55, 2.0, 500, 1e-5), (0.01, 10000, 100, 1.0, 1000, 1e-5),
    (0.02, 2000, 40, 1.5, 300, 1e-6), (0.1, 200, 20, 2.0, 100, 1e-5)])
def test_at_or_below_dp_accounting_and_rdp(q, n, bmax, sigma, steps, delta):
    """Where the cap truncates often, pld's certified ε is below dp_accounting's PLD (the one-sided
    pair of the truncated branch against its symmetric replace-one pair; dp_accounting at N and at
    N + 1 for the two neighbours) and below rdp's; the bracket is proper."""
    event = _trunc(q, n, bmax, sigma, steps)
    res = PldAccountant().epsilon(event, delta=delta)
    ref = max(_dp_accounting(n, q, bmax, sigma, steps, delta), _dp_accounting(n + 1, q, bmax, sigma, steps, delta))
    assert res.details["epsilon_lower"] <= res.epsilon <= ref, (res.epsilon, ref)
    assert res.epsilon <= RdpAccountant().epsilon(event, delta=delta).epsilon
    poisson = PldAccountant().epsilon(SelfComposedEvent(PoissonSampledEvent(q, GaussianEvent(sigma)), steps),
                                      delta=delta)
    assert res.details["epsilon_lower"] >= poisson.epsilon  # truncation costs privacy at these caps


def test_rare_truncation_is_dp_accounting_within_the_bracket():
    """A cap 5 standard deviations above the mean (p ~ 1e-6): both pairs are the Poisson one up to a
    tiny branch, and dpcalc's and dp_accounting's numbers differ by discretisation only: dpcalc's
    proven lower bound is ≤ dp_accounting's (pessimistic, grid 1e-4) ε, and its certified upper
    bound within its own bracket's width above it."""
    q, n, bmax, sigma, steps, delta = 0.01, 10000, 150, 1.0, 1000, 1e-5
    res = PldAccountant().epsilon(_trunc(q, n, bmax, sigma, steps), delta=delta)
    ref = max(_dp_accounting(n, q, bmax, sigma, steps, delta, 1e-3),
              _dp_accounting(n + 1, q, bmax, sigma, steps, delta, 1e-3))
    width = res.epsilon - res.details["epsilon_lower"]
    assert res.details["epsilon_lower"] <= ref
    assert res.epsilon <= ref + width


@pytest.mark.parametrize("bmax,truth_upper", [(300, 2.181), (256, 5.286)])
def test_issue_32_rows(bmax, truth_upper):
    """The issue's rows (B 256, N 60000, E 10, σ 1.1, δ 1e-5; T = ⌈E·N/B⌉ = 2,344 as `dpcalc epsilon`
    counts Poisson-like steps): within 5% of the reference bracket's upper end, at or below
    dp_accounting's PLD (2.167 / 5.735 at its grid 1e-4; computed here at 1e-3) and below rdp."""
    q, n, sigma, steps, delta = 256 / 60000, 60000, 1.1, 2344, 1e-5
    event = dpsgd_event(noise_multiplier=sigma, steps=steps, sampling="truncated-poisson", sample_rate=q,
                        dataset_size=n, max_batch_size=bmax)
    res = PldAccountant().epsilon(event, delta=delta)
    assert res.epsilon <= truth_upper * 1.05
    assert res.epsilon <= _dp_accounting(n, q, bmax, sigma, steps, delta)
    assert res.epsilon <= _dp_accounting(n + 1, q, bmax, sigma, steps, delta)
    assert res.epsilon < RdpAccountant().epsilon(event, delta=delta).epsilon


# ----------------------------------------------------------------------------- edges and the contract

def test_default_accountant_for_truncated_poisson_is_the_first_certified_supporting_one():
    """No special case: the first registered certified accountant supporting the step (pld, first
    in the registry) is the default for it under add/remove; under replace-one pld refuses it with
    the reason."""
    event = _trunc(0.01, 10000, 110, 1.0, 100)
    first = next(n for n in available() if get_accountant(n).certified and get_accountant(n).supports(event))
    assert default_accountant_for(event, "add-remove") == first == "pld"
    with pytest.raises(UnsupportedEventError, match="add/remove adjacency only"):
        PldAccountant(neighboring="replace").epsilon(event, delta=1e-5)
    laplace = SelfComposedEvent(TruncatedPoissonSampledEvent(0.01, 10000, 110, LaplaceEvent(1.0)), 3)
    with pytest.raises(UnsupportedEventError, match="Gaussian mechanism only"):
        PldAccountant().epsilon(laplace, delta=1e-5)
    assert not PldAccountant().supports(laplace)


def test_cap_at_n_is_the_poisson_step_plus_a_tiny_branch():
    """B_max = N: only the neighbour with N + 1 records can be truncated (p = q^N): pld's ε is ≥ the
    Poisson ε and equal to it to the bracket's accuracy; B_max > N is Poisson exactly (flatten)."""
    q, n, sigma, steps = 0.5, 20, 1.5, 30
    poisson = SelfComposedEvent(PoissonSampledEvent(q, GaussianEvent(sigma)), steps)
    base = PldAccountant().epsilon(poisson, delta=1e-5)
    capped = PldAccountant().epsilon(_trunc(q, n, n, sigma, steps), delta=1e-5)
    assert capped.epsilon >= base.details["epsilon_lower"]
    assert capped.epsilon == pytest.approx(base.epsilon, rel=0.01)
    assert PldAccountant().epsilon(_trunc(q, n, n + 1, sigma, steps), delta=1e-5).epsilon == base.epsilon


def test_full_rate_is_the_truncated_branch():
    """q = 1: every record joins, B_max of the M are kept, x with probability B_max/(M+1): the pair
    is PSG(B_max/N, σ/2) (M = N − 1; the other branch has weight ~1e-10, the Gaussian with
    sensitivity 2): the Poisson-sampled Gaussian's ε at that rate and σ/2, below the Gaussian's."""
    n, bmax, sigma, steps, delta = 40, 10, 2.0, 5, 1e-5
    res = PldAccountant().epsilon(_trunc(1.0, n, bmax, sigma, steps), delta=delta)
    same = PldAccountant().epsilon(SelfComposedEvent(PoissonSampledEvent(bmax / n, GaussianEvent(sigma / 2)),
                                                     steps), delta=delta)
    high = PldAccountant().epsilon(SelfComposedEvent(GaussianEvent(sigma / 2), steps), delta=delta)
    assert same.details["epsilon_lower"] <= res.epsilon < high.details["epsilon_lower"]
    assert res.epsilon == pytest.approx(same.epsilon, rel=1e-3)


def test_rdp_truncation_branch_beyond_two_billion_records():
    """Regression (found here): the rdp accountant's branch probabilities came from
    scipy.special.bdtrc, whose integer argument overflows beyond 2³¹ records (p = 1.6e-41 for the true
    0.854 at M = 1e10, q = 1e-8, B_max = 90: the Poisson number, far below the truth). Now p and γ
    match mpmath there, and rdp's ε for such a run is far above the Poisson one."""
    from dpcalc.accounting._sampling_rdp import truncation_branch

    q, m, bmax = 1e-8, 10 ** 10, 90
    p, gamma = truncation_branch(sample_rate=q, others=m, max_batch_size=bmax)
    p_mp, g_mp = _branch_mp(q, m, bmax)
    assert abs(p - p_mp) <= 1e-10 * p_mp
    assert g_mp <= gamma <= g_mp * (1 + 1e-7)
    event = _trunc(q, m, bmax, 1.0, 10 ** 7)
    poisson = SelfComposedEvent(PoissonSampledEvent(q, GaussianEvent(1.0)), 10 ** 7)
    assert RdpAccountant().epsilon(event, delta=1e-5).epsilon > 2 * RdpAccountant().epsilon(poisson, delta=1e-5).epsilon
