r"""The δ(ε) privacy curve of a composition for the tight methods (``dpcalc compose --plot-curve``)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from dpcalc.accounting.registry import available, get_class
from dpcalc.composition.methods import evaluate
from dpcalc.composition.spec import MechanismSpec, merge

__all__ = ["CURVE_THEOREMS", "curve_methods", "privacy_curves"]

#: theorems drawn on the privacy-curve plot (the tight one); the accountants drawn are those
#: declaring :attr:`~dpcalc.accounting.base.Accountant.plotted_curve`
CURVE_THEOREMS = ("optimal",)


def curve_methods() -> tuple[str, ...]:
    """The methods drawn on the privacy-curve plot: :data:`CURVE_THEOREMS` and the registered
    accountants that declare :attr:`~dpcalc.accounting.base.Accountant.plotted_curve`."""
    return CURVE_THEOREMS + tuple(n for n in available() if get_class(n).plotted_curve)


def privacy_curves(sequence: Sequence[MechanismSpec], report, *, points: int = 40) -> dict:
    """δ(ε) of the composition for the tight methods that apply (:func:`curve_methods`).

    Most are evaluated at ``points`` values of ε from ~0 to twice the tightest certified ε
    (ε mode) or twice the target ε (δ mode); an accountant whose ε is cheaper than its δ
    (:attr:`~dpcalc.accounting.base.Accountant.curve_by_epsilon`: pld) is evaluated in its fast
    direction instead — ε at 16 log-spaced values of δ, from below the smallest δ of the other
    curves to 0.5 — and its points are kept where ε is in the plotted range.

    Args:
        sequence: the mechanisms of ``report``.
        report: the :class:`~dpcalc.composition.compose.ComposeReport` of ``sequence``.
        points: how many values of ε.

    Returns:
        ``{"curves": {method: {"epsilon": [...], "delta": [...]}}, "certified": {method: bool}}``
        (points without a bound are left out).
    """
    sequence = merge(sequence)
    ref = None
    if report.mode == "epsilon" and report.tightest is not None:
        ref = report.tightest.epsilon
    elif report.mode == "delta":
        ref = report.inputs.get("epsilon")
    ref = ref if ref and math.isfinite(ref) and ref > 0 else 1.0
    eps_grid = np.linspace(ref / points, 2 * ref, points)
    drawn = curve_methods()
    live = [r.method for r in report.results if r.applicable and r.method in drawn]
    by_epsilon = [n for n in live if n not in CURVE_THEOREMS and get_class(n).curve_by_epsilon]
    curves: dict[str, dict] = {}
    for name in live:
        if name in by_epsilon:
            continue
        xs, ys = [], []
        for e in eps_grid:
            row = evaluate(sequence, delta=None, epsilon=float(e), methods=(name,))[0][0]
            if row.applicable and row.delta is not None and row.delta > 0:
                xs.append(float(e))
                ys.append(float(row.delta))
        curves[name] = {"epsilon": xs, "delta": ys}
    lows = [min(c["delta"]) for c in curves.values() if c["delta"]]
    d_lo = max(min(lows) if lows else 1e-12, 1e-15)
    for name in by_epsilon:
        xs, ys = [], []
        for d in np.geomspace(d_lo, 0.5, 16):
            row = evaluate(sequence, delta=float(d), epsilon=None, methods=(name,))[0][0]
            if row.applicable and row.epsilon is not None and math.isfinite(row.epsilon) and row.epsilon <= 2 * ref:
                xs.append(float(row.epsilon))
                ys.append(float(d))
        order = np.argsort(xs)
        curves[name] = {"epsilon": [xs[i] for i in order], "delta": [ys[i] for i in order]}
    return {"curves": curves,
            "certified": {r.method: r.certified for r in report.results if r.method in curves}}
