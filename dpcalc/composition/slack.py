r"""The δ bookkeeping shared by the (ε, δ) composition theorems: one formula each.

A composition of (ε_i, δ_i)-DP mechanisms (k_i runs each) that is (ε', δ̃)-DP for its
"pure" part is (ε', 1 − (1 − δ̃)∏(1 − δ_i)^{k_i})-DP (Kairouz, Oh, Viswanath 2015,
Thm 3.3/3.5; Murtagh & Vadhan 2016, Thm 1.5). :func:`total_delta` evaluates that total
and :func:`slack_delta` solves it for δ̃ at a target total δ. Both work on arrays (the
``--steps-grid`` evaluates many count vectors at once) and state their rounding budgets
(``_numerics.round_up``/``round_down``, docs/design.md, "Rounding policy").
"""

from __future__ import annotations

import math

import numpy as np

from dpcalc._numerics import UNIT_ROUNDOFF, round_down, round_up

__all__ = ["slack_delta", "total_delta"]


def _log_keep(deltas, counts) -> tuple[np.ndarray, np.ndarray, float]:
    """(Σ k_i ln(1 − δ_i), Σ |k_i ln(1 − δ_i)|, error factor in u) along the last axis."""
    dl = np.asarray(deltas, dtype=float)
    cnt = np.asarray(counts, dtype=float)
    terms = cnt * np.log1p(-dl)
    n = max(terms.shape[-1] if terms.ndim else 1, 1)
    # each term within 2 u; pairwise summation adds ~log2(n) u of Σ|terms|
    return np.sum(terms, axis=-1), np.sum(np.abs(terms), axis=-1), 4.0 + 2.0 * math.log2(n + 1)


def slack_delta(*, delta: float, deltas, counts) -> np.ndarray:
    r"""δ̃ with 1 − (1 − δ̃)∏(1 − δ_i)^{k_i} = ``delta``, rounded down.

    δ̃ = −expm1(ln(1 − δ) − Σ k_i ln(1 − δ_i)); the exponent's floating-point error
    (bounded by ``(4 + 2 log₂(n + 1))·u`` of the size of its terms) is added before expm1,
    so cancellation (Σ k_i δ_i close to δ) is covered, and the result is then moved down
    by 4 u.

    Args:
        delta: the target total δ in (0, 1).
        deltas: δ_i in [0, 1), shape (..., n) (broadcast against ``counts``).
        counts: k_i ≥ 0, shape (..., n).

    Returns:
        δ̃, shape (...); ≤ 0 where the δ_i alone use up ``delta`` (nothing left).
    """
    keep, size, ulps = _log_keep(deltas, counts)
    ld = math.log1p(-delta)
    x = ld - keep + ulps * UNIT_ROUNDOFF * (abs(ld) + size)
    val = -np.expm1(x)
    return np.where(val > 0, round_down(val, 4), val)


def total_delta(*, delta_tilde, deltas, counts) -> np.ndarray:
    r"""1 − (1 − δ̃)∏(1 − δ_i)^{k_i}, capped at 1, rounded up.

    Evaluated as δ̃ + (1 − δ̃)·s with s = −expm1(Σ k_i ln(1 − δ_i)) (no cancellation); the
    relative error is that of the log-sum ((2 + log₂ n) u) plus a few operations (4 u),
    covered by rounding up by max(16, 8 + 2(2 + log₂(n + 1))) u.

    Args:
        delta_tilde: δ̃ in [0, 1], shape (...) or scalar.
        deltas: δ_i in [0, 1), shape (..., n).
        counts: k_i ≥ 0, shape (..., n).

    Returns:
        The total δ, shape (...).
    """
    keep, _, _ = _log_keep(deltas, counts)
    spent = -np.expm1(keep)
    dt = np.asarray(delta_tilde, dtype=float)
    n = max(np.shape(deltas)[-1] if np.ndim(deltas) else 1, 1)
    # log-sum within (2 + log₂ n) u relative, expm1 and the final sum/product within 4 u: doubled
    return np.minimum(1.0, round_up(dt + (1.0 - dt) * spent, max(16.0, 8.0 + 2.0 * (2.0 + math.log2(n + 1)))))
