"""Pictures for ``dpcalc compose`` (optional extra ``dpcalc[plot]``: matplotlib) — display,
so it belongs to the cli layer.

matplotlib is imported only inside these functions, never at ``import dpcalc``.
Targets are checked before any work (:func:`check_target`: a non-empty path in an existing
directory, and either absent or a regular file — a device node or a directory is never
replaced); files are written atomically (temporary file in the same directory + rename:
nothing half-written on error) with the permissions a plain ``open()`` would give (0666
minus the umask), not the 0600 of a temporary file.
"""

from __future__ import annotations

import math
from typing import Any

from dpcalc._files import atomic_write, check_output_target
from dpcalc.errors import ParameterError

__all__ = ["require_matplotlib", "check_target", "plot_steps", "plot_curve"]

#: (colour, line style) of the composition theorems
_THEOREM_STYLE = {
    "basic": ("#7f7f7f", ":"), "advanced": ("#8c564b", "--"), "kov": ("#e377c2", "--"),
    "optimal": ("#1f77b4", "-"),
}
#: (colour, line style) of the registered accountants, in registry order (then matplotlib's own)
_ACCOUNTANT_STYLES = (("#d62728", "-"), ("#2ca02c", "-"), ("#9467bd", "-."), ("#ff7f0e", "-."),
                      ("#17becf", ":"))


def _style(method: str) -> tuple[str | None, str]:
    """(colour, line style) of a method's line: a theorem's own, an accountant's by its place in
    the registry (no accountant is named here), else (None, "-")."""
    if method in _THEOREM_STYLE:
        return _THEOREM_STYLE[method]
    from dpcalc.accounting.registry import available

    names = available()
    if method in names and names.index(method) < len(_ACCOUNTANT_STYLES):
        return _ACCOUNTANT_STYLES[names.index(method)]
    return None, "-"


def require_matplotlib() -> Any:
    """Import matplotlib with the non-interactive Agg backend.

    Raises:
        ParameterError: matplotlib is missing (one line: install ``dpcalc[plot]``).
    """
    try:
        import matplotlib
    except ImportError:
        raise ParameterError("plot", "", None, message="--plot needs matplotlib: pip install 'dpcalc[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def check_target(path: str, option: str = "--plot") -> str:
    """Refuse a plot target that cannot be written as a regular file, before any work.

    Args:
        path: the file to write.
        option: the option name for messages.

    Returns:
        ``path``.

    Raises:
        ParameterError: empty path; its directory missing or not a directory; the path an
            existing non-regular file (a device, a directory, a FIFO, ...).
    """
    return check_output_target(path, option=option, what="a PNG file" if "plot" in option else "a regular file")


def save_figure(fig, path: str, option: str = "--plot") -> None:
    """Write ``fig`` as a PNG to ``path`` atomically (:func:`dpcalc._files.atomic_write`: 0666 minus
    the umask, nothing half-written, a non-regular target refused)."""
    atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=120, bbox_inches="tight"),
                 option=option, what="a PNG file")


def _label(method: str, certified: bool) -> str:
    return method + ("" if certified else " (approx.)")


def _plain_log_ticks(axis) -> None:
    """Log axis labelled with plain numbers (1, 10, 100, 1,000 …) and no minor labels, so
    short ranges do not get overlapping 3×10⁰-style labels."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    lo, hi = axis.get_view_interval()
    if hi / max(lo, 1e-300) < 1e3:  # short range: label 1, 2, 5, 10, 20, 50 …
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x:,.0f}" if x >= 1 else f"{x:g}"))
    axis.set_minor_formatter(NullFormatter())


def plot_steps(report, path: str) -> None:
    """ε at the target δ (or δ at the target ε) against the number of compositions, one line
    per applicable method (the picture of Abadi et al. 2016 Fig. 2). Log-scaled axes where
    the values span more than a decade."""
    plt = require_matplotlib()
    key = report.mode
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
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
        _plain_log_ticks(ax.xaxis)
    if key == "delta" or (ys_all and max(ys_all) / max(min(ys_all), 1e-300) > 30):
        ax.set_yscale("log")
    target = report.inputs.get("delta") if key == "epsilon" else report.inputs.get("epsilon")
    ax.set_xlabel("number of compositions (total mechanisms run)")
    ax.set_ylabel("ε" if key == "epsilon" else "δ")
    ax.set_title(("ε at δ = %g" if key == "epsilon" else "δ at ε = %g") % target + " by composition method")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    save_figure(fig, path)
    plt.close(fig)


def plot_curve(report, path: str) -> None:
    """The δ(ε) privacy curve of the whole composition for the tight methods (log δ)."""
    plt = require_matplotlib()
    curve = report.curve or {}
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for method, c in curve.get("curves", {}).items():
        pts = [(x, y) for x, y in zip(c["epsilon"], c["delta"], strict=True) if y is not None and 0 < y]
        if not pts:
            continue
        xs, yv = zip(*pts, strict=True)
        color, ls = _style(method)
        ax.plot(xs, yv, ls, color=color, lw=1.6, marker="o" if len(xs) < 20 else None, ms=3,
                label=_label(method, curve.get("certified", {}).get(method, True)))
    ax.set_yscale("log")
    ax.set_xlabel("ε")
    ax.set_ylabel("δ(ε)")
    ax.set_title("Privacy curve of the composition")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    save_figure(fig, path)
    plt.close(fig)
