"""Pictures for ``dpcalc compose`` (optional extra ``dpcalc[plot]``: matplotlib) — display,
so it belongs to the cli layer.

matplotlib is imported only inside these functions, never at ``import dpcalc``. The style, the
target checks and the writer are :mod:`dpcalc.cli.plot_style`'s (re-exported here for the
commands that import them from this module): PNG or SVG by the extension, checked before any
work, written atomically and deterministically.
"""

from __future__ import annotations

import math

from dpcalc.cli.plot_style import (
    accountant_style,
    check_target,
    finish,
    new_axes,
    plain_log_ticks,
    require_matplotlib,
    save_figure,
    titled,
)

__all__ = ["require_matplotlib", "check_target", "save_figure", "plot_steps", "plot_curve"]


def _style(method: str) -> tuple[str | None, str]:
    """(colour, line style) of a method's line (:func:`dpcalc.cli.plot_style.accountant_style`)."""
    color, ls, _ = accountant_style(method)
    return color, ls


def _label(method: str, certified: bool) -> str:
    return method + ("" if certified else " (approx.)")


def plot_steps(report, path: str) -> None:
    """ε at the target δ (or δ at the target ε) against the number of compositions, one line
    per applicable method (the picture of Abadi et al. 2016 Fig. 2). Log-scaled axes where
    the values span more than a decade."""
    plt = require_matplotlib()
    key = report.mode
    fig, ax = new_axes(plt)
    ys_all = []
    for r in report.results:
        grid = r.details.get("grid") if r.applicable else None
        if not grid:
            continue
        pts = [(s, y) for s, y in zip(grid["steps"], grid[key], strict=True) if y is not None and math.isfinite(y) and y > 0]
        if not pts:
            continue
        xs, ys = zip(*pts, strict=True)
        ys_all += ys
        color, ls = _style(r.method)
        sparse = len(xs) < 20
        if sparse and "note" in grid:  # evaluated at a subset of the grid: show the points, join them thinly
            ls, lw = ":", 1.0
        else:
            lw = 1.6
        ax.plot(xs, ys, ls, color=color, marker="o" if sparse else None, ms=3.5, lw=lw,
                label=_label(r.method, r.certified) + (" (points)" if sparse and "note" in grid else ""))
    steps = [s for r in report.results for s in (r.details.get("grid") or {}).get("steps", [])]
    if steps and max(steps) / max(min(steps), 1) > 20:
        ax.set_xscale("log")
        plain_log_ticks(ax.xaxis)
    if key == "delta" or (ys_all and max(ys_all) / max(min(ys_all), 1e-300) > 30):
        ax.set_yscale("log")
    target = report.inputs.get("delta") if key == "epsilon" else report.inputs.get("epsilon")
    ax.legend(ncol=2)
    finish(ax, title=titled(("ε at δ = %g" if key == "epsilon" else "δ at ε = %g") % target + " by composition method"),
           xlabel="number of compositions (total mechanisms run)", ylabel="ε" if key == "epsilon" else "δ",
           legend=False)
    save_figure(fig, path)
    plt.close(fig)


def plot_curve(report, path: str) -> None:
    """The δ(ε) privacy curve of the whole composition for the tight methods (log δ)."""
    plt = require_matplotlib()
    curve = report.curve or {}
    fig, ax = new_axes(plt)
    for method, c in curve.get("curves", {}).items():
        pts = [(x, y) for x, y in zip(c["epsilon"], c["delta"], strict=True) if y is not None and 0 < y]
        if not pts:
            continue
        xs, yv = zip(*pts, strict=True)
        color, ls = _style(method)
        ax.plot(xs, yv, ls, color=color, lw=1.6, marker="o" if len(xs) < 20 else None, ms=3,
                label=_label(method, curve.get("certified", {}).get(method, True)))
    ax.set_yscale("log")
    finish(ax, title="Privacy curve of the composition", xlabel="ε", ylabel="δ(ε)")
    save_figure(fig, path)
    plt.close(fig)
