r"""Basic (sequential) composition: ε and δ add up.

Dwork, McSherry, Nissim, Smith 2006; Dwork & Roth 2014, Thm 3.16: running
mechanisms that are (ε_i, δ_i)-DP in sequence (even adaptively) is
(Σ ε_i, Σ δ_i)-DP.

**Exact where exact** (docs/design.md, "Rounding policy"): the sums Σ k_i ε_i and Σ k_i δ_i
are computed in rational arithmetic and rounded up to the next float only when the exact
sum is not a float — so 200 × (0.1, 0) is exactly 20, not 20.000000000000004. Parameters a
user states (the ε, δ of a generic mechanism, the ε of a Laplace mechanism) are read as the
decimal numbers they print as (their shortest ``repr``: "0.1" is one tenth, the convention of
:func:`dpcalc.schedule.resolve_schedule`); values dpcalc computed itself (a Gaussian's ε₀ at δ₀)
are read as their exact binary value. Long sequences (more than :data:`EXACT_TERMS` distinct
items) use floating point with a stated round-up instead.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from numpy.typing import ArrayLike

from dpcalc._numerics import round_up

__all__ = ["basic_composition", "basic_epsilon", "basic_delta", "exact_sum", "EXACT_TERMS"]

#: at most this many distinct items are summed in rational arithmetic (beyond: floating point)
EXACT_TERMS = 256


def _up(fr: Fraction) -> float:
    """The smallest float ≥ ``fr`` (``inf`` beyond the float range)."""
    try:
        x = float(fr)  # correctly rounded to nearest
    except OverflowError:
        return math.inf
    if Fraction(x) < fr:
        x = math.nextafter(x, math.inf)
    return x


def exact_sum(values, counts, decimal=False) -> float:
    r"""Σ k_i·x_i as the smallest float ≥ the exact sum.

    Args:
        values: x_i ≥ 0 (finite), shape (n,).
        counts: k_i ≥ 0 (whole numbers), shape (n,).
        decimal: bool or boolean mask of shape (n,): read x_i as the decimal number its
            shortest ``repr`` shows (stated parameters) instead of its binary value.

    Returns:
        The sum rounded up to a float (exactly the sum when it is a float). More than
        :data:`EXACT_TERMS` terms: the floating-point sum rounded up by 2(n + 1) u.
    """
    x = np.asarray(values, dtype=float).ravel()
    k = np.asarray(counts).ravel()
    dec = np.broadcast_to(np.asarray(decimal, dtype=bool), x.shape)
    if x.size > EXACT_TERMS or not np.all(np.isfinite(x)):
        with np.errstate(over="ignore"):
            return float(round_up(float(np.sum(k.astype(float) * x)), 2 * (x.size + 1)))
    total = Fraction(0)
    for xi, ki, di in zip(x.tolist(), k.tolist(), dec.tolist(), strict=True):
        if xi and ki:
            total += int(ki) * (Fraction(repr(xi)) if di else Fraction(xi))
    return _up(total)


def basic_composition(epsilons: ArrayLike, deltas: ArrayLike, counts: ArrayLike, *,
                      decimal: bool | ArrayLike = False) -> tuple[float, float]:
    """(Σ k_i ε_i, Σ k_i δ_i), exact or rounded up (Dwork & Roth 2014, Thm 3.16).

    Args:
        epsilons: ε_i ≥ 0, shape (n,).
        deltas: δ_i in [0, 1), shape (n,).
        counts: how many times mechanism i runs, shape (n,).
        decimal: which values are stated parameters read as decimals (see :func:`exact_sum`).

    Returns:
        (ε, δ) of the composition; δ is capped at 1.
    """
    return (exact_sum(epsilons, counts, decimal), min(1.0, exact_sum(deltas, counts, decimal)))


def basic_epsilon(epsilons, deltas, counts, *, delta: float, decimal=False) -> float:
    """ε of basic composition if its δ = Σ k_i δ_i is at most ``delta``, else ``inf``."""
    e, d = basic_composition(epsilons, deltas, counts, decimal=decimal)
    return e if d <= delta else math.inf


def basic_delta(epsilons, deltas, counts, *, epsilon: float, decimal=False) -> float:
    """δ = Σ k_i δ_i if ``epsilon`` ≥ Σ k_i ε_i; otherwise basic composition gives nothing
    (δ = 1)."""
    e, d = basic_composition(epsilons, deltas, counts, decimal=decimal)
    return d if epsilon >= e else 1.0
