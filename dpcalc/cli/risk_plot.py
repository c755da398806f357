"""The trade-off picture of ``dpcalc risk --plot`` (matplotlib imported lazily; the style and the
atomic, deterministic PNG/SVG writer are :mod:`dpcalc.cli.plot_style`'s)."""

from __future__ import annotations

import numpy as np

__all__ = ["plot_risk"]


def plot_risk(curve, pair: tuple[float, float] | None, path: str) -> None:
    """Two panels: (left) the trade-off curve f(α) (type-II error against FPR α) with the
    (ε, δ) region and the diagonal of random guessing; (right) the log-log bound on TPR
    against FPR, as membership-inference attacks are reported (Carlini et al. 2022).

    Args:
        curve: a :class:`dpcalc.risk.curve.RiskCurve`.
        pair: the single (ε, δ) pair to compare with, or None.
        path: the .png or .svg file to write.

    Raises:
        ParameterError: matplotlib missing.
    """
    from dpcalc.cli.plot_style import COLOURS, finish, new_axes, require_matplotlib, save_figure
    from dpcalc.risk.tradeoff import pair_tradeoff

    plt = require_matplotlib()
    a = np.unique(np.concatenate([np.linspace(0.0, 1.0, 801), np.logspace(-7, 0, 400)]))
    f = curve.tradeoff(a)
    lo = curve.tpr_lower(a)
    fig, (ax1, ax2) = new_axes(plt, ncols=2)
    bound, allowed, chance = COLOURS["primary"], COLOURS["allowed"], COLOURS["reference"]
    label = f"{curve.method}: certified lower envelope" if curve.certified else f"{curve.method} (approx.)"
    if pair is not None:
        fp = pair_tradeoff(a, *pair)
        ax1.fill_between(a, fp, 1.0 - a, color=allowed, alpha=0.12,
                         label=f"allowed by (ε, δ) = ({pair[0]:.3g}, {pair[1]:.2g})")
        ax1.plot(a, fp, "--", color=allowed, lw=1.4)
    ax1.plot(a, f, "-", color=bound, lw=1.8, label=label)
    if lo is not None and curve.method not in ("gdp-exact", "epsilon-delta"):
        ax1.plot(a, 1.0 - lo, ":", color=bound, lw=1.0, label="exact profile's curve is below this")
    ax1.plot([0, 1], [1, 0], color=chance, lw=1.0, label="random guessing")
    ax1.set_xlim(0, 1)
    ax1.set_ylim(0, 1)
    ax1.set_aspect("equal")
    finish(ax1, title="Trade-off curve: no test goes below it", xlabel="FPR α (type-I error)",
           ylabel="type-II error f(α) = 1 − TPR", legend="upper right")

    m = a > 0
    ax2.loglog(a[m], curve.tpr(a[m]), "-", color=bound, lw=1.8, label="TPR bound, full curve")
    if pair is not None:
        ax2.loglog(a[m], 1.0 - pair_tradeoff(a[m], *pair), "--", color=allowed, lw=1.4,
                   label="TPR bound, (ε, δ) alone")
    ax2.loglog(a[m], a[m], color=chance, lw=1.0, label="random guessing")
    ax2.set_xlim(1e-6, 1)
    ax2.set_ylim(1e-6, 1.05)
    finish(ax2, title="Membership inference: ROC bound (log-log)", xlabel="FPR",
           ylabel="TPR (upper bound)", legend="lower right")
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
