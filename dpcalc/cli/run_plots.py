"""The ``--plot`` pictures of ``dpcalc epsilon``, ``sigma``, ``train`` and ``tune``.

Each function draws series a library function computed (:mod:`dpcalc.accounting.series`; the
trainer's per-epoch records) in the one style of :mod:`dpcalc.cli.plot_style`, and writes a PNG
or an SVG by the extension. No mathematics here: every number drawn is one the library returned.
matplotlib is imported only when a picture is drawn.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from dpcalc.cli.plot_style import (
    COLOURS,
    accountant_style,
    finish,
    fmt_number,
    new_axes,
    plain_log_ticks,
    require_matplotlib,
    save_figure,
    series_style,
    setting,
    titled,
)

__all__ = ["schedule_setting", "plot_epsilon", "plot_sigma", "plot_tune", "train_series", "plot_train",
           "epsilon_plot", "sigma_plot", "tune_plot", "epsilon_series", "sigma_series"]


def _nan(values: Iterable[float | None]) -> list[float]:
    return [float("nan") if y is None else y for y in values]


def schedule_setting(schedule, *, sigma: float | None = None, delta: float | None = None) -> str:
    """The setting line of a DP-SGD picture: σ, the sampler with q (and B, N) and T, δ."""
    parts = [None if sigma is None else f"σ = {fmt_number(sigma)}"]
    if schedule.source == "unsampled":
        parts.append("no sampling")
    else:
        sampler = "" if schedule.sampling == "poisson" else f"{schedule.sampling}, "
        parts.append(f"{sampler}q = {fmt_number(schedule.sample_rate)}")
        if schedule.batch_size and schedule.dataset_size:
            parts.append(f"B = {schedule.batch_size:,}, N = {schedule.dataset_size:,}")
    parts.append(f"T = {schedule.steps:,} steps")
    if delta is not None:
        parts.append(f"δ = {delta:g}")
    return setting(*parts)


def _label(curve) -> str:
    return curve.name + ("" if curve.certified else " (approx.)")


def plot_epsilon(series, path: str, *, where: str) -> None:
    """ε against epochs, one line per accountant (:func:`dpcalc.accounting.series.epsilon_by_epochs`);
    where an accountant gives a certified bracket (pld) the band between its lower and upper end
    is shaded. Accountants without a value (not applicable) are left out.

    Args:
        series: the :class:`~dpcalc.accounting.series.Series` to draw.
        path: the .png or .svg file to write.
        where: the setting line of the title (:func:`schedule_setting`).
    """
    plt = require_matplotlib()
    fig, ax = new_axes(plt)
    x = list(series.x)
    for c in series.curves:
        if not c.drawn:
            continue
        colour, ls, marker = accountant_style(c.name)
        ax.plot(x, _nan(c.values), ls, color=colour, marker=marker, label=_label(c))
        if c.lower is not None:
            ax.fill_between(x, _nan(c.lower), _nan(c.values), color=colour, alpha=0.25, lw=0,
                            label=f"{c.name}: certified bracket [lower, upper]")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    finish(ax, title=titled("ε spent against epochs, per accountant", where),
           xlabel="epochs (passes over the data)", ylabel=f"ε at δ = {series.details['delta']:g}")
    save_figure(fig, path)
    plt.close(fig)


def plot_sigma(series, path: str, *, where: str) -> None:
    """σ against the target ε around the requested one (:func:`dpcalc.accounting.series.sigma_by_target`),
    one line per accountant; the requested ε is marked.

    Args:
        series: the :class:`~dpcalc.accounting.series.Series` to draw.
        path: the .png or .svg file to write.
        where: the setting line of the title.
    """
    plt = require_matplotlib()
    fig, ax = new_axes(plt)
    for c in series.curves:
        if not c.drawn:
            continue
        colour, ls, marker = accountant_style(c.name)
        ax.plot(list(series.x), _nan(c.values), ls, color=colour, marker=marker, label=_label(c))
    target = series.details["target_epsilon"]
    ax.axvline(target, color=COLOURS["target"], lw=0.9, ls="--", label=f"requested ε = {fmt_number(target)}")
    ax.set_ylim(bottom=0)
    finish(ax, title=titled(f"Noise multiplier σ for a target ε (δ = {series.details['delta']:g})", where),
           xlabel="target ε", ylabel="σ (noise std / clipping norm)")
    save_figure(fig, path)
    plt.close(fig)


def plot_tune(series, path: str, *, where: str, mean_runs: float) -> None:
    """ε of a hyperparameter search against the mean number of runs E[K], one line per law of K
    and the runs all composed (:func:`dpcalc.accounting.series.tuning_epsilon_by_runs`); the
    requested E[K] is marked.

    Args:
        series: the :class:`~dpcalc.accounting.series.Series` to draw.
        path: the .png or .svg file to write.
        where: the setting line of the title.
        mean_runs: the requested E[K].
    """
    plt = require_matplotlib()
    fig, ax = new_axes(plt)
    i = 0
    for c in series.curves:
        if not c.drawn:
            continue
        if c.name == "composed":
            colour, ls, marker = COLOURS["reference"], ":", "x"
            label = "⌈E[K]⌉ runs, all composed"
        else:
            colour, ls, marker = series_style(i)
            i += 1
            label = f"K ~ {c.name}"
        ax.plot(list(series.x), _nan(c.values), ls, color=colour, marker=marker,
                label=label + ("" if c.certified else " (approx.)"))
    ax.axvline(mean_runs, color=COLOURS["target"], lw=0.9, ls="--", label=f"requested E[K] = {fmt_number(mean_runs)}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    plain_log_ticks(ax.xaxis)
    plain_log_ticks(ax.yaxis)
    finish(ax, title=titled(f"ε of the whole search ({series.details['accountant']} accountant)", where),
           xlabel="mean number of runs E[K]", ylabel=f"ε at δ = {series.details['delta']:g}")
    save_figure(fig, path)
    plt.close(fig)


def train_series(history: Sequence[Any]) -> dict[str, list]:
    """The per-epoch series of a ``dpcalc train`` run: its epoch records
    (:class:`dpcalc.train.results.EpochRecord`, or the dicts of its ``--log`` lines) as lists.

    Returns:
        ``{"epoch": [...], "test_accuracy": [...], "epsilon": [...], "steps": [...]}`` — the
        records' own values, in order (no value is recomputed).
    """
    keys = ("epoch", "test_accuracy", "epsilon", "steps")

    def get(r, k):
        return r[k] if isinstance(r, Mapping) else getattr(r, k)

    return {k: [get(r, k) for r in history] for k in keys}


def plot_train(history: Sequence[Any], path: str, *, where: str, accountant: str, delta: float) -> None:
    """Test accuracy (left axis) and the certified ε spent (right axis) after each epoch of a
    ``dpcalc train`` run (:func:`train_series`).

    Args:
        history: the run's epoch records.
        path: the .png or .svg file to write.
        where: the setting line of the title.
        accountant: the accountant that gave ε.
        delta: δ of ε.
    """
    data = train_series(history)
    plt = require_matplotlib()
    fig, (ax, right) = new_axes(plt, twin=True)
    from matplotlib.ticker import PercentFormatter

    h1 = ax.plot(data["epoch"], data["test_accuracy"], "-", color=COLOURS["primary"], marker="o", label="test accuracy")
    h2 = right.plot(data["epoch"], data["epsilon"], "--", color=COLOURS["secondary"], marker="s",
                    label=f"ε spent ({accountant})")
    ax.set_ylim(0, 1)
    ax.yaxis.set_major_formatter(PercentFormatter(xmax=1))
    right.set_ylim(bottom=0)
    right.set_ylabel(f"ε at δ = {delta:g}", color=COLOURS["secondary"])
    finish(ax, title=titled("DP-SGD training: accuracy and privacy spent per epoch", where),
           xlabel="epoch", ylabel="test accuracy (%)", legend="lower right", handles=h1 + h2)
    save_figure(fig, path)
    plt.close(fig)


# -- what the commands call: the library's series, then the picture ---------------------------------

def epsilon_series(*, noise_multiplier: float, schedule, delta: float, accountants: Sequence[str],
                   neighboring: str, options: Mapping[str, Mapping[str, Any]]):
    """The series ``dpcalc epsilon --plot`` draws (and ``dpcalc serve``'s ε page plots, through
    :mod:`dpcalc.cli.plot_data`): :func:`dpcalc.accounting.series.epsilon_by_epochs` of the
    command's run. Returns the :class:`~dpcalc.accounting.series.Series`."""
    from dpcalc.accounting.series import epsilon_by_epochs

    return epsilon_by_epochs(noise_multiplier=noise_multiplier, schedule=schedule, delta=delta,
                             accountants=accountants, neighboring=neighboring, options=options)


def epsilon_plot(path: str, *, noise_multiplier: float, schedule, delta: float, accountants: Sequence[str],
                 neighboring: str, options: Mapping[str, Mapping[str, Any]]) -> str:
    """``dpcalc epsilon --plot``: :func:`epsilon_series` drawn by :func:`plot_epsilon`. Returns
    the note printed under the table."""
    series = epsilon_series(noise_multiplier=noise_multiplier, schedule=schedule, delta=delta,
                            accountants=accountants, neighboring=neighboring, options=options)
    plot_epsilon(series, path, where=schedule_setting(schedule, sigma=noise_multiplier))
    return f"Plot written to {path} (ε at {len(series.x)} step counts up to T, per accountant)."


def sigma_series(*, target_epsilon: float, delta: float, schedule, accountants: Sequence[str],
                 neighboring: str, options: Mapping[str, Mapping[str, Any]], fallback: bool):
    """The series ``dpcalc sigma --plot`` draws (and ``dpcalc serve``'s σ page plots, through
    :mod:`dpcalc.cli.plot_data`): :func:`dpcalc.accounting.series.sigma_by_target` of the
    command's run. Returns the :class:`~dpcalc.accounting.series.Series`."""
    from dpcalc.accounting.series import sigma_by_target

    return sigma_by_target(target_epsilon=target_epsilon, delta=delta, schedule=schedule,
                           accountants=accountants, neighboring=neighboring, options=options, fallback=fallback)


def sigma_plot(path: str, *, target_epsilon: float, delta: float, schedule, accountants: Sequence[str],
               neighboring: str, options: Mapping[str, Mapping[str, Any]], fallback: bool) -> str:
    """``dpcalc sigma --plot``: :func:`sigma_series` drawn by :func:`plot_sigma`. Returns the
    note printed under the table."""
    series = sigma_series(target_epsilon=target_epsilon, delta=delta, schedule=schedule, accountants=accountants,
                          neighboring=neighboring, options=options, fallback=fallback)
    plot_sigma(series, path, where=schedule_setting(schedule))
    lo, hi = series.x[0], series.x[-1]
    return f"Plot written to {path} (σ for {len(series.x)} targets ε from {lo:.3g} to {hi:.3g})."


def tune_plot(path: str, *, run, accountant, delta: float, mean_runs: float, law: str, eta: float | None,
              where: str, pure_epsilon_of_runs=None) -> str:
    """``dpcalc tune --plot``: :func:`dpcalc.accounting.series.tuning_epsilon_by_runs` (the three
    laws without a free shape, and the requested negative-binomial η) drawn by :func:`plot_tune`."""
    from dpcalc.accounting.series import TUNING_LAWS, mean_runs_grid, tuning_epsilon_by_runs

    laws = [(name, None) for name in TUNING_LAWS]
    if law == "negative-binomial":
        laws.append((law, eta))
    series = tuning_epsilon_by_runs(run, accountant=accountant, delta=delta, mean_runs=mean_runs_grid(mean_runs),
                                    laws=laws, pure_epsilon_of_runs=pure_epsilon_of_runs)
    plot_tune(series, path, where=where, mean_runs=mean_runs)
    return f"Plot written to {path} (ε of the search for E[K] from {series.x[0]:g} to {series.x[-1]:g})."
