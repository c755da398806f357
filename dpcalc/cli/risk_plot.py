"""The trade-off picture of ``dpcalc risk --plot`` (matplotlib imported lazily, as in
:mod:`dpcalc.cli.plot`; the file is written atomically)."""

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
        path: PNG file to write.

    Raises:
        ParameterError: matplotlib missing.
    """
    from dpcalc.cli.plot import require_matplotlib, save_figure
    from dpcalc.risk.tradeoff import pair_tradeoff

    plt = require_matplotlib()
    a = np.unique(np.concatenate([np.linspace(0.0, 1.0, 801), np.logspace(-7, 0, 400)]))
    f = curve.tradeoff(a)
    lo = curve.tpr_lower(a)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.8))
    label = f"{curve.method}: certified lower envelope" if curve.certified else f"{curve.method} (approx.)"
    if pair is not None:
        fp = pair_tradeoff(a, *pair)
        ax1.fill_between(a, fp, 1.0 - a, color="#ff7f0e", alpha=0.12,
                         label=f"allowed by (ε, δ) = ({pair[0]:.3g}, {pair[1]:.2g})")
        ax1.plot(a, fp, "--", color="#ff7f0e", lw=1.4)
    ax1.plot(a, f, "-", color="#d62728", lw=1.8, label=label)
    if lo is not None and curve.method not in ("gdp-exact", "epsilon-delta"):
        ax1.plot(a, 1.0 - lo, ":", color="#d62728", lw=1.0, label="exact profile's curve is below this")
    ax1.plot([0, 1], [1, 0], color="#7f7f7f", lw=1.0, label="random guessing")
    ax1.set_xlim(0, 1)
    ax1.set_ylim(0, 1)
    ax1.set_aspect("equal")
    ax1.set_xlabel("FPR α (type-I error)")
    ax1.set_ylabel("type-II error f(α) = 1 − TPR")
    ax1.set_title("Trade-off curve: no test goes below it")
    ax1.grid(True, alpha=0.3)
    ax1.legend(fontsize=7.5, loc="upper right")

    m = a > 0
    ax2.loglog(a[m], curve.tpr(a[m]), "-", color="#d62728", lw=1.8, label="TPR bound, full curve")
    if pair is not None:
        ax2.loglog(a[m], 1.0 - pair_tradeoff(a[m], *pair), "--", color="#ff7f0e", lw=1.4,
                   label="TPR bound, (ε, δ) alone")
    ax2.loglog(a[m], a[m], color="#7f7f7f", lw=1.0, label="random guessing")
    ax2.set_xlim(1e-6, 1)
    ax2.set_ylim(1e-6, 1.05)
    ax2.set_xlabel("FPR")
    ax2.set_ylabel("TPR (upper bound)")
    ax2.set_title("Membership inference: ROC bound (log-log)")
    ax2.grid(True, which="both", alpha=0.3)
    ax2.legend(fontsize=7.5, loc="lower right")
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
