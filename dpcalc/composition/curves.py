r"""The δ(ε) privacy curve of a composition for the tight methods (``dpcalc compose --plot-curve``)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from dpcalc.composition.spec import MechanismSpec, merge

__all__ = ["CURVE_METHODS", "privacy_curves"]

#: methods drawn on the privacy-curve plot (the tight ones)
CURVE_METHODS = ("optimal", "pld", "rdp", "gdp")


def privacy_curves(sequence: Sequence[MechanismSpec], report, *, points: int = 40) -> dict:
    """δ(ε) of the composition for the tight methods that apply.

    optimal, rdp and gdp are evaluated at ``points`` values of ε from ~0 to twice the tightest
    certified ε (ε mode) or twice the target ε (δ mode); pld is evaluated in its fast
    direction instead — ε at 16 log-spaced values of δ — and its points are kept where ε is
    in the plotted range.

    Args:
        sequence: the mechanisms of ``report``.
        report: the :class:`~dpcalc.composition.compose.ComposeReport` of ``sequence``.
        points: how many values of ε.

    Returns:
        ``{"curves": {method: {"epsilon": [...], "delta": [...]}}, "certified": {method: bool}}``
        (points without a bound are left out).
    """
    from dpcalc.composition.compose import evaluate

    sequence = merge(sequence)
    ref = None
    if report.mode == "epsilon" and report.tightest is not None:
        ref = report.tightest.epsilon
    elif report.mode == "delta":
        ref = report.inputs.get("epsilon")
    ref = ref if ref and math.isfinite(ref) and ref > 0 else 1.0
    eps_grid = np.linspace(ref / points, 2 * ref, points)
    live = [r.method for r in report.results if r.applicable and r.method in CURVE_METHODS]
    curves: dict[str, dict] = {}
    for name in live:
        if name == "pld":
            continue
        xs, ys = [], []
        for e in eps_grid:
            row = evaluate(sequence, delta=None, epsilon=float(e), methods=(name,))[0][0]
            if row.applicable and row.delta is not None and row.delta > 0:
                xs.append(float(e))
                ys.append(float(row.delta))
        curves[name] = {"epsilon": xs, "delta": ys}
    if "pld" in live:
        lows = [min(c["delta"]) for c in curves.values() if c["delta"]]
        d_lo = max(min(lows) if lows else 1e-12, 1e-15)
        xs, ys = [], []
        for d in np.geomspace(d_lo, 0.5, 16):
            row = evaluate(sequence, delta=float(d), epsilon=None, methods=("pld",))[0][0]
            if row.applicable and row.epsilon is not None and math.isfinite(row.epsilon) and row.epsilon <= 2 * ref:
                xs.append(float(row.epsilon))
                ys.append(float(d))
        order = np.argsort(xs)
        curves["pld"] = {"epsilon": [xs[i] for i in order], "delta": [ys[i] for i in order]}
    return {"curves": curves,
            "certified": {r.method: r.certified for r in report.results if r.method in curves}}
