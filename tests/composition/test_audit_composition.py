"""Privacy audit of the composition theorems (dpcalc.composition) against the exact optimal
composition.

Reference (independent of dpcalc): Kairouz, Oh, Viswanath 2015 Thm 3.3 / Murtagh &
Vadhan 2016 Thm 1.5 — for pure (ε_i, 0) mechanisms the optimal δ̃(ε) is the hockey-stick
divergence of the product of randomized-response pairs,
δ̃(ε) = E[(1 − e^{ε − L})₊], L = Σ_j ε_j (k_j − 2 l_j), l_j ~ Binomial(k_j, 1/(1 + e^{ε_j}))
independent; with δ_i > 0 the total is 1 − (1 − δ̃)∏(1 − δ_i)^{k_i}. Evaluated here as
a sum of nonnegative terms in log space (no cancellation), and with mpmath for one group.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.special import gammaln, logsumexp
from test_audit_refs import kov_delta

from dpcalc.composition.advanced import drv_epsilon, kov_epsilon
from dpcalc.composition.basic import basic_epsilon
from dpcalc.composition.optimal import optimal_delta, optimal_epsilon


def exact_delta_tilde(epsilons, counts, eps):
    """Optimal δ̃(ε) for groups of pure-DP mechanisms (see module docstring)."""
    losses = np.zeros(1)
    logp = np.zeros(1)
    for e0, k in zip(epsilons, counts, strict=True):
        ls = np.arange(k + 1)
        lp = (gammaln(k + 1) - gammaln(ls + 1) - gammaln(k - ls + 1)
              + (k - ls) * e0 - k * np.logaddexp(0.0, e0))
        losses = (losses[:, None] + e0 * (k - 2 * ls)[None, :]).ravel()
        logp = (logp[:, None] + lp[None, :]).ravel()
    m = losses > eps
    if not m.any():
        return 0.0
    return float(np.exp(logsumexp(logp[m] + np.log(-np.expm1(eps - losses[m])))))


def exact_total_delta(epsilons, deltas, counts, eps):
    dt = exact_delta_tilde(epsilons, counts, eps)
    spent = -math.expm1(sum(k * math.log1p(-d) for d, k in zip(deltas, counts, strict=True)))
    return dt + (1 - dt) * spent  # = 1 − (1 − δ̃)∏(1 − δ_i)^{k_i} without cancellation


def test_reference_matches_mpmath_kov():
    for e0, k, eps in [(0.1, 100, 4.3068), (1.0, 10, 3.0), (0.5, 7, 0.2)]:
        assert exact_delta_tilde([e0], [k], eps) == pytest.approx(kov_delta(e0, k, eps), rel=1e-11)


def test_reference_matches_subset_enumeration():
    """Murtagh–Vadhan's sum over subsets S ⊆ [k], brute force for k = 6 distinct ε_i."""
    eps_i = [0.1, 0.3, 0.7, 1.1, 0.05, 0.4]
    target = 0.9
    tot = 0.0
    for bits in itertools.product((0, 1), repeat=len(eps_i)):
        a = sum(e for e, b in zip(eps_i, bits, strict=True) if b)
        c = sum(e for e, b in zip(eps_i, bits, strict=True) if not b)
        tot += max(0.0, math.exp(a) - math.exp(target) * math.exp(c))
    tot /= math.prod(1 + math.exp(e) for e in eps_i)
    assert exact_delta_tilde(eps_i, [1] * 6, target) == pytest.approx(tot, rel=1e-12)


CASES = [  # (epsilons, deltas, counts, target δ)
    ([0.1], [0.0], [100], 1e-5),
    ([1.0], [0.0], [10], 1e-6),
    ([0.5, 0.2], [1e-7, 0.0], [30, 50], 1e-5),
    ([0.05, 0.3, 1.0], [0.0, 1e-8, 0.0], [200, 40, 3], 1e-6),
    ([0.01], [0.0], [5000], 1e-8),
]


@pytest.mark.parametrize("epsilons,deltas,counts,delta", CASES)
def test_optimal_epsilon_is_exact_upper_and_lower(epsilons, deltas, counts, delta):
    res = optimal_epsilon(epsilons, deltas, counts, delta=delta)
    assert exact_total_delta(epsilons, deltas, counts, res.value) <= delta * (1 + 1e-9)
    if res.lower > 0:  # a lower bound up to rounding of ε (1e-12 relative)
        assert exact_total_delta(epsilons, deltas, counts, res.lower * (1 - 1e-12)) >= delta * (1 - 1e-9)


def test_optimal_epsilon_numeric_path():
    """Π(k_i + 1) = 151³ > 2·10⁶ atoms: the numeric (grid) path must still be certified."""
    epsilons, deltas, counts = [0.02, 0.05, 0.11], [0.0, 0.0, 0.0], [150, 150, 150]
    res = optimal_epsilon(epsilons, deltas, counts, delta=1e-6)
    assert exact_total_delta(epsilons, deltas, counts, res.value) <= 1e-6 * (1 + 1e-9)
    assert exact_total_delta(epsilons, deltas, counts, res.lower) >= 1e-6 * (1 - 1e-9)


@pytest.mark.parametrize("epsilons,deltas,counts,eps", [
    ([0.1], [0.0], [100], 3.0), ([0.5, 0.2], [1e-7, 0.0], [30, 50], 2.0), ([1.0], [0.0], [10], 0.5),
])
def test_optimal_delta_is_upper_bound(epsilons, deltas, counts, eps):
    res = optimal_delta(epsilons, deltas, counts, epsilon=eps)
    exact = exact_total_delta(epsilons, deltas, counts, eps)
    assert res.value >= exact * (1 - 1e-12)
    assert res.lower <= exact * (1 + 1e-10)


@pytest.mark.parametrize("epsilons,deltas,counts,delta", CASES)
def test_closed_form_theorems_dominate_optimal(epsilons, deltas, counts, delta):
    """Basic, KOV closed form and (homogeneous) DRV are valid: exact δ at their ε ≤ δ."""
    b = basic_epsilon(epsilons, deltas, counts, delta=delta)
    if math.isfinite(b):
        assert exact_total_delta(epsilons, deltas, counts, b) <= delta * (1 + 1e-9)
    kv = float(kov_epsilon(epsilons, deltas, counts, delta=delta))
    assert exact_total_delta(epsilons, deltas, counts, kv) <= delta * (1 + 1e-9)
    if len(epsilons) == 1:
        d = float(drv_epsilon(epsilon=epsilons[0], delta=deltas[0], count=counts[0], target_delta=delta))
        assert exact_total_delta(epsilons, deltas, counts, d) <= delta * (1 + 1e-9)


def test_published_composition_numbers():
    """docs/references.md: 100 × (0.1, 0) at δ = 1e-5: advanced 5.8502, exact optimal 4.3068."""
    assert float(drv_epsilon(epsilon=0.1, delta=0.0, count=100, target_delta=1e-5)) >= 5.8502 - 1e-4
    assert optimal_epsilon([0.1], [0.0], [100], delta=1e-5).value >= 4.3068 - 1e-4
