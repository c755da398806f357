"""Directed decimal rounding of numbers for display: a printed upper bound is never below the
computed one and a printed lower bound never above it (docs/design.md §8.2).

One home for the rule, used by the CLI's tables (:mod:`dpcalc.cli.render`) and by the claims'
texts (:mod:`dpcalc.claims`).
"""

from __future__ import annotations

import math
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal

__all__ = ["round_significant", "format_bound"]


def round_significant(x: float | Decimal, digits: int, rounding: str) -> float:
    """``x`` rounded to ``digits`` significant decimal digits, exactly (decimal arithmetic on
    the float's exact binary value), then converted to the nearest float.

    Args:
        x: a finite number (float or :class:`decimal.Decimal`).
        digits: significant digits kept, ≥ 1.
        rounding: ``"up"`` (towards +∞) or ``"down"`` (towards −∞).

    Returns:
        The rounded value (0.0 for 0).
    """
    d = x if isinstance(x, Decimal) else Decimal(x)
    if d == 0:
        return 0.0
    quantum = Decimal(1).scaleb(d.adjusted() - digits + 1)
    return float(d.quantize(quantum, rounding=ROUND_CEILING if rounding == "up" else ROUND_FLOOR))


def format_bound(x: float | None, rounding: str = "up", digits: int = 4) -> str:
    """A bound as short text: ``digits`` significant digits rounded outward (``"up"`` for an
    upper bound, ``"down"`` for a lower bound); ``—`` for a missing value, ``∞`` for an infinite
    one.

    Args:
        x: the bound, or None.
        rounding: ``"up"`` or ``"down"``.
        digits: significant digits shown.
    """
    if x is None:
        return "—"
    if not math.isfinite(x):
        return "∞"
    return f"{round_significant(x, digits, rounding):.{digits}g}"
