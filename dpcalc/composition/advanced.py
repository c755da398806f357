r"""Closed-form "strong" composition bounds.

* **Advanced composition** (Dwork, Rothblum, Vadhan 2010; Dwork & Roth 2014,
  Thm 3.20): k mechanisms, each (ε, δ)-DP, compose to (ε', kδ + δ')-DP with
  ε' = √(2k ln(1/δ'))·ε + k·ε(e^ε − 1), for any δ' > 0. For a target total δ
  the slack is δ' = δ − kδ_0 (the only choice).
* **Kairouz–Oh–Viswanath closed form** (KOV 2015, Thm 3.4 for identical
  mechanisms, Thm 3.5 for heterogeneous ones; diffprivlib's ``BudgetAccountant``
  uses it): with a = Σ ε_i (e^{ε_i} − 1)/(e^{ε_i} + 1) and s² = Σ ε_i²,

  ε̃ = min{ Σε_i,  a + √(2s² ln(e + √(s²)/δ̃)),  a + √(2s² ln(1/δ̃)) }

  and the composition is (ε̃, 1 − (1 − δ̃)∏(1 − δ_i))-DP.

All functions accept counts of shape (..., n) so that many numbers of
compositions are evaluated at once (``--steps-grid``); results have shape (...).
Every value is rounded up (ε and δ are upper bounds).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from dpcalc._numerics import round_down, round_up
from dpcalc.composition.slack import slack_delta, total_delta

__all__ = ["drv_epsilon", "drv_delta", "kov_epsilon", "kov_delta", "slack_delta"]

#: rounding budget (in unit round-offs u) of every closed form here: ≤ 10 operations each within
#: 2 u, plus the pairwise sums' 2·log₂(n) u for n up to 10⁸ items (_numerics.round_up)
_ULPS = 64


def drv_epsilon(*, epsilon: float, delta: float, count: ArrayLike, target_delta: float) -> np.ndarray:
    r"""ε' of advanced composition (DRV 2010; Dwork & Roth 2014 Thm 3.20) at total δ.

    Args:
        epsilon: ε of each mechanism, ≥ 0.
        delta: δ of each mechanism, in [0, 1).
        count: k, the number of mechanisms (int or integer array).
        target_delta: total δ = kδ + δ' in (0, 1).

    Returns:
        ε' = √(2k ln(1/δ'))·ε + kε(e^ε − 1) with δ' = target_delta − kδ (rounded down);
        ``inf`` where kδ ≥ target_delta. Same shape as ``count``.
    """
    k = np.asarray(count, dtype=float)
    slack = round_down(target_delta - round_up(k * np.asarray(delta), _ULPS), _ULPS)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = round_up(np.sqrt(2 * k * np.log(1 / slack)) * epsilon + k * epsilon * np.expm1(epsilon), _ULPS)
    return np.where(slack > 0, out, np.inf)


def drv_delta(*, epsilon: float, delta: float, count: ArrayLike, target_epsilon: float) -> np.ndarray:
    """Total δ = kδ + δ' of advanced composition at ε' = ``target_epsilon`` (DR14 Thm 3.20,
    solved for δ'); 1 where ε' ≤ kε(e^ε − 1) (no bound). Shape of ``count``."""
    k = np.asarray(count, dtype=float)
    eps = np.asarray(epsilon, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        x = np.where(eps > 0, round_down(round_down(target_epsilon, _ULPS) - round_up(k * eps * np.expm1(eps), _ULPS))
                     / round_up(eps, _ULPS), np.inf)
        slack = np.where(x > 0, np.exp(-np.square(x) / (2 * k)), 1.0)
    return np.minimum(1.0, round_up(k * np.asarray(delta) + slack, _ULPS))


def _kov_terms(epsilons, counts):
    eps = np.asarray(epsilons, dtype=float)
    cnt = np.asarray(counts, dtype=float)
    total = round_up(np.sum(cnt * eps, axis=-1), _ULPS)
    a = round_up(np.sum(cnt * eps * np.tanh(eps / 2), axis=-1), _ULPS)  # ε(e^ε−1)/(e^ε+1) = ε·tanh(ε/2)
    s2 = round_up(np.sum(cnt * eps**2, axis=-1), _ULPS)
    return total, a, s2


def kov_epsilon(epsilons: ArrayLike, deltas: ArrayLike, counts: ArrayLike, *, delta: float) -> np.ndarray:
    r"""KOV 2015 Thm 3.5 (Thm 3.4 for identical mechanisms): ε̃ at total δ.

    Args:
        epsilons: ε_i, shape (n,).
        deltas: δ_i, shape (n,).
        counts: k_i, shape (..., n).
        delta: target total δ in (0, 1).

    Returns:
        ε̃ (rounded up), shape (...); ``inf`` where the δ_i alone exceed ``delta``.
    """
    total, a, s2 = _kov_terms(epsilons, counts)
    dt = slack_delta(delta=delta, deltas=deltas, counts=counts)
    with np.errstate(divide="ignore", invalid="ignore"):
        t2 = a + np.sqrt(2 * s2 * np.log(math.e + np.sqrt(s2) / dt))
        t3 = a + np.sqrt(2 * s2 * np.log(1 / dt))
        out = np.minimum(total, round_up(np.minimum(t2, t3), _ULPS))
    return np.where(dt > 0, out, np.inf)


def kov_delta(epsilons: ArrayLike, deltas: ArrayLike, counts: ArrayLike, *, epsilon: float) -> np.ndarray:
    """KOV 2015 Thm 3.5 solved for δ̃ at ε̃ = ``epsilon``; returns the total δ
    1 − (1 − δ̃)∏(1 − δ_i)^{k_i} (rounded up; 1 where no bound holds). Shape (...)."""
    total, a, s2 = _kov_terms(epsilons, counts)
    dl = np.asarray(deltas, dtype=float)
    cnt = np.asarray(counts, dtype=float)
    x = round_down(epsilon, _ULPS) - a
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        z = np.where(s2 > 0, np.square(np.maximum(x, 0)) / (2 * s2), np.inf)
        d3 = np.exp(-z)
        y = np.exp(z) - math.e
        d2 = np.where(y > 0, np.sqrt(s2) / y, 1.0)
        dt = np.where(x > 0, np.minimum(d2, d3), 1.0)
        dt = np.where(total <= epsilon, 0.0, np.minimum(round_up(dt, _ULPS), 1.0))
    return total_delta(delta_tilde=dt, deltas=dl, counts=cnt)
