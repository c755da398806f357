"""pld for fixed-size batches under add/remove adjacency (issue 32).

Without replacement (dpcalc/accounting/_sampling_pld.py, "Add/remove adjacency"): the step is
dominated by the Poisson-sampled Gaussian at q = B/N, σ/2, and the instance "x = +C, every other
record −C" (1-D) attains it. References used here, independent of pld:

* the instance's output laws by enumeration of every B-subset (itertools), for a small N;
* the exact δ(ε) of the instance for T = 1 and T = 2 steps by mpmath quadrature of the
  hockey-stick divergence (T = 2: a 1-D integral over the first output, the region of the
  second given in closed form by the monotone loss);
* rdp (Birrell, Ebrahimi, Behnia, Pacheco 2024 Thm 3.1/3.3): an upper bound, pld must be below.
"""

from __future__ import annotations

import itertools
import math

import mpmath
import pytest

from dpcalc.accounting._sampling import default_accountant_for
from dpcalc.accounting._sampling_pld import without_replacement_add_remove_step
from dpcalc.accounting.pld import PldAccountant
from dpcalc.accounting.rdp import RdpAccountant
from dpcalc.events import (
    FixedSizeSampledEvent,
    GaussianEvent,
    PoissonSampledEvent,
    SelfComposedEvent,
)

mpmath.mp.dps = 20


def _instance_laws(b: int, n_prime: int) -> tuple[dict, dict]:
    """Output means (units of C, before noise) of the ±C instance with their probabilities, by
    enumeration: D′ = {+1, −1 × (n′−1)}, D = D′ without the +1; a uniform B-subset of each."""
    dprime = [1] + [-1] * (n_prime - 1)
    p: dict[int, float] = {}
    subsets = list(itertools.combinations(range(n_prime), b))
    for s in subsets:
        tot = sum(dprime[i] for i in s)
        p[tot] = p.get(tot, 0.0) + 1.0 / len(subsets)
    q = {-b: 1.0}  # every B-subset of D sums to −B
    return p, q


def _mix_pdf(laws: dict, sigma, y):
    return sum(mpmath.mpf(w) * mpmath.npdf(y, m, sigma) for m, w in laws.items())


def _delta_one_step(p: dict, q: dict, sigma: float, eps: float) -> mpmath.mpf:
    """∫ (p − e^ε q)₊ by mpmath quadrature, split at the crossing points."""
    s = mpmath.mpf(sigma)
    f = lambda y: max(_mix_pdf(p, s, y) - mpmath.e ** eps * _mix_pdf(q, s, y), 0)  # noqa: E731
    pts = sorted(set(list(p) + list(q)))
    grid = [-mpmath.inf] + [mpmath.mpf(x) + k * s for x in pts for k in (-2, 0, 2)] + [mpmath.inf]
    grid = sorted(set(grid))
    return mpmath.quad(f, grid)


@pytest.mark.parametrize("b,n,sigma", [(2, 5, 1.0), (3, 7, 0.8), (1, 4, 2.0)])
def test_instance_is_the_poisson_sampled_gaussian_at_half_sigma(b, n, sigma):
    """Enumerating the batches of the ±C instance gives exactly (1−q)N(−B) + qN(−B+2) vs N(−B),
    q = B/N: the pair pld uses (its step is the Poisson-sampled Gaussian at σ/2, rate B/N)."""
    p, q = _instance_laws(b, n)
    assert set(p) == {-b, -b + 2} and p[-b + 2] == pytest.approx(b / n, rel=1e-12)
    step = without_replacement_add_remove_step(FixedSizeSampledEvent(b, n, GaussianEvent(sigma)))
    assert step == PoissonSampledEvent(b / n, GaussianEvent(sigma / 2))
    acc = PldAccountant(accuracy=1e-3)
    for eps in (0.0, 0.3, 1.0):
        # both orderings: δ of D′ vs D and of D vs D′
        exact = max(_delta_one_step(p, q, sigma, eps), _delta_one_step(q, p, sigma, eps))
        res = acc.delta(FixedSizeSampledEvent(b, n, GaussianEvent(sigma)), epsilon=eps)
        assert res.details["delta_lower"] <= float(exact) * (1 + 1e-9) + 1e-15
        assert float(exact) <= res.delta
        assert res.delta <= float(exact) * 1.01 + 1e-12


def _two_step_delta(q: float, sigma: float, eps: float, order: str) -> mpmath.mpf:
    """Exact δ(ε) of two steps of the instance's pair (shift 2, noise σ), mpmath quadrature.

    remove order: P = (1−q)N(0,σ²) + qN(2,σ²) per step, Q = N(0,σ²); loss
    l(y) = ln(1 − q + q e^{(4y−4)/(2σ²)}), increasing; δ = ∫ [p(y₁)P̄(y₂*) − e^ε φ(y₁)Q̄(y₂*)] dy₁
    with y₂* = l⁻¹(ε − l(y₁)) (P̄, Q̄ survival functions; where ε − l(y₁) ≤ ln(1−q), y₂* = −∞).
    add order: P and Q swapped, loss −l, decreasing.
    """
    q, s = mpmath.mpf(q), mpmath.mpf(sigma)
    s2 = s * s

    def loss(y):
        return mpmath.log(1 - q + q * mpmath.e ** ((4 * y - 4) / (2 * s2)))

    def inv(ell):  # l⁻¹, −∞ below the support
        t = mpmath.e ** ell - (1 - q)
        if t <= 0:
            return -mpmath.inf
        return (mpmath.log(t / q) * 2 * s2 + 4) / 4

    def mix_sf(y):
        return (1 - q) * mpmath.ncdf(-y / s) + q * mpmath.ncdf(-(y - 2) / s)

    def mix_cdf(y):
        return (1 - q) * mpmath.ncdf(y / s) + q * mpmath.ncdf((y - 2) / s)

    def mix_pdf(y):
        return (1 - q) * mpmath.npdf(y, 0, s) + q * mpmath.npdf(y, 2, s)

    e = mpmath.e ** eps
    if order == "remove":
        def f(y1):
            y2 = inv(eps - loss(y1))
            return mix_pdf(y1) * mix_sf(y2) - e * mpmath.npdf(y1, 0, s) * mpmath.ncdf(-y2 / s)
    else:
        # L = −l(y₁) − l(y₂) > ε ⇔ l(y₂) < −ε − l(y₁) ⇔ y₂ < l⁻¹(−ε − l(y₁))
        def f(y1):
            y2 = inv(-eps - loss(y1))
            if y2 == -mpmath.inf:
                return mpmath.mpf(0)
            return mpmath.npdf(y1, 0, s) * mpmath.ncdf(y2 / s) - e * mix_pdf(y1) * mix_cdf(y2)
    return mpmath.quad(f, [-mpmath.inf, -4 * s, -s, 0, 1, 2, 2 + s, 2 + 4 * s, 2 + 10 * s, mpmath.inf])


@pytest.mark.parametrize("b,n,sigma", [pytest.param(10, 40, 0.9, marks=pytest.mark.slow), (1, 3, 1.5)])
def test_two_steps_bracket_the_exact_instance(b, n, sigma):
    """T = 2: pld's certified bracket contains the instance's exact δ(ε) (mpmath), both orders."""
    event = SelfComposedEvent(FixedSizeSampledEvent(b, n, GaussianEvent(sigma)), 2)
    acc = PldAccountant(accuracy=1e-3)
    for eps in (0.5, 1.5):
        exact = max(_two_step_delta(b / n, sigma, eps, "remove"), _two_step_delta(b / n, sigma, eps, "add"))
        res = acc.delta(event, epsilon=eps)
        assert res.details["delta_lower"] <= float(exact) * (1 + 1e-9) + 1e-15, (eps, res, exact)
        assert float(exact) <= res.delta, (eps, res, exact)
        assert res.delta <= float(exact) * 1.01 + 1e-12


#: the rows of issue 32's table: (σ, B, N, epochs) at δ = 1e-5, with the truth bracket's upper end
ISSUE_ROWS = [(1.1, 256, 60000, 10, 6.732), (1.1, 256, 60000, 60, 14.785), (2.0, 1000, 50000, 20, 3.904)]


@pytest.mark.parametrize("sigma,b,n,epochs,truth_hi", ISSUE_ROWS)
def test_issue_rows_within_one_percent_and_below_rdp(sigma, b, n, epochs, truth_hi):
    steps = math.ceil(epochs * n / b)
    event = SelfComposedEvent(FixedSizeSampledEvent(b, n, GaussianEvent(sigma)), steps)
    res = PldAccountant().epsilon(event, delta=1e-5)
    assert res.epsilon <= 1.01 * truth_hi
    # the instance attains the pair: pld's lower end is an achievable ε, below its upper end
    assert res.details["epsilon_lower"] <= res.epsilon <= res.details["epsilon_lower"] * 1.005
    assert res.epsilon <= RdpAccountant().epsilon(event, delta=1e-5).epsilon


def test_pld_is_the_default_for_without_replacement_under_add_remove():
    event = SelfComposedEvent(FixedSizeSampledEvent(256, 60000, GaussianEvent(1.1)), 100)
    assert default_accountant_for(event, "add-remove") == "pld"
    assert default_accountant_for(event, "replace") == "pld"


def test_full_batch_add_remove_is_the_gaussian_at_half_sigma():
    step = without_replacement_add_remove_step(FixedSizeSampledEvent(50, 50, GaussianEvent(3.0)))
    assert step == GaussianEvent(1.5)
    a = PldAccountant().epsilon(SelfComposedEvent(FixedSizeSampledEvent(50, 50, GaussianEvent(3.0)), 4), delta=1e-6)
    b = PldAccountant().epsilon(SelfComposedEvent(GaussianEvent(1.5), 4), delta=1e-6)
    assert a.epsilon == b.epsilon


def test_refusals_unchanged():
    """With replacement and non-Gaussian sampled mechanisms are still refused with the reason."""
    from dpcalc.errors import UnsupportedEventError
    from dpcalc.events import LaplaceEvent

    acc = PldAccountant()
    with pytest.raises(UnsupportedEventError, match="Gaussian"):
        acc.epsilon(FixedSizeSampledEvent(5, 50, LaplaceEvent(1.0)), delta=1e-5)
    with pytest.raises(UnsupportedEventError, match="Gaussian"):
        PldAccountant(neighboring="replace").epsilon(FixedSizeSampledEvent(5, 50, LaplaceEvent(1.0)), delta=1e-5)
