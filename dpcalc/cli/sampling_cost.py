"""``dpcalc sampling-cost``: what your data loader costs — the same (σ, B, N, epochs, δ) under
every batch sampler side by side: certified ε (an upper bound), a proven lower bound, the
width of the bracket, and a note (docs/design.md §4).

Rows come from :data:`ROWS` (sampler name → function of a :class:`RowContext` returning a
:class:`dpcalc.accounting.shuffling.SamplerResult`): a new sampler is one entry there.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import click

from dpcalc.cli.options import (
    MAX_STEPS,
    RANGES,
    OnlyWith,
    StrictCommand,
    delta_option,
    example_epilog,
    json_option,
    noise_multiplier_option,
    number_option,
)
from dpcalc.cli.plot_style import plot_option, prepare
from dpcalc.cli.render import Column, emit, fmt

__all__ = ["sampling_cost_command", "ROWS", "RowContext"]


@dataclass(frozen=True)
class RowContext:
    """What every row needs: σ, the layout (B, N, E), δ, the Poisson result and the Monte Carlo options."""

    noise_multiplier: float
    layout: object  # dpcalc.accounting.shuffling.BatchLayout
    delta: float
    poisson: object  # AccountingResult of the pld accountant (Poisson, add/remove)
    monte_carlo: bool = True
    samples: int = 200_000
    seed: int = 0
    max_batch_size: int | None = None


def _poisson_row(ctx: RowContext):
    from dpcalc.accounting.shuffling import SamplerResult

    p = ctx.poisson
    lower = (p.details or {}).get("epsilon_lower")
    note = (f"each record independently with q = B/N = {fmt(ctx.layout.sample_rate, 4)}, "
            f"T = {ctx.layout.steps:,} steps; the number usually reported")
    reason = p.auto_reason()
    if reason:
        note = f"{note}; {reason}"
    return SamplerResult(sampler="poisson", epsilon=p.epsilon, epsilon_lower=lower, delta=ctx.delta,
                         poisson_epsilon=p.epsilon, certified=bool(p.certified), applicable=p.applicable,
                         reason=p.reason, source=p.source, details={"adjacency": "add/remove", "note": note})


def _bracket_row(name: str):
    def row(ctx: RowContext):
        import dataclasses

        from dpcalc.accounting.shuffling import sampler_bracket

        res = sampler_bracket(sampler=name, noise_multiplier=ctx.noise_multiplier, layout=ctx.layout,
                              delta=ctx.delta, poisson=ctx.poisson.epsilon, monte_carlo=ctx.monte_carlo,
                              samples=ctx.samples, seed=ctx.seed)
        notes = []
        pe = ctx.poisson.epsilon
        if pe is not None and math.isfinite(pe) and res.epsilon_lower is not None and pe < res.epsilon_lower:
            factor = f"≥ {fmt(res.epsilon_lower / pe, 3, 'down')}×" if pe > 0 else "an unbounded factor"
            notes.append(f"the Poisson ε {fmt(pe, 4, 'up')} is below this sampler's proven lower bound: "
                         f"reporting it under-reports ε by {factor}")
        est = res.estimate
        if est is not None:
            if est.get("skipped"):
                notes.append(est["skipped"])
            elif est.get("epsilon") is not None and math.isfinite(est["epsilon"]):
                lo, hi = est["ci"]
                notes.append(f"Monte Carlo estimate ≈ {fmt(est['epsilon'], 4)} (approx., not certified; "
                             f"{fmt(est['confidence'] * 100, 3)}% CI [{fmt(lo, 4, 'down')}, {fmt(hi, 4, 'up')}], "
                             f"{est['samples']:,} draws, seed {est['seed']})")
        if not notes:
            notes.append("each record in exactly one batch per epoch")
        return dataclasses.replace(res, details=dict(res.details, note="; ".join(notes)))
    return row


def _registry_row(sampling: str, neighboring: str, adjacency_note: str):
    """A sampler accounted by the registry (dpcalc/accounting/_sampling.py): the tightest certified
    accountant with a proof for (sampler, ``neighboring``), through ``epsilon_by_accountant`` on the
    same T steps. Its lower-bound column stays empty: the accountant's own lower value bounds its
    bound, not the sampler's ε (no proven lower bound on the sampler is implemented)."""
    def row(ctx: RowContext):
        from dpcalc.accounting._sampling import default_accountant_for
        from dpcalc.accounting.dpsgd import epsilon_by_accountant
        from dpcalc.accounting.shuffling import SamplerResult
        from dpcalc.schedule import resolve_schedule

        lay = ctx.layout
        if sampling == "truncated-poisson" and ctx.max_batch_size is None:
            return None
        sched = resolve_schedule(batch_size=lay.batch_size, dataset_size=lay.dataset_size, steps=lay.steps,
                                 sampling=sampling,
                                 max_batch_size=ctx.max_batch_size if sampling == "truncated-poisson" else None)
        name = default_accountant_for(sched.event(ctx.noise_multiplier), neighboring)
        res = epsilon_by_accountant(noise_multiplier=ctx.noise_multiplier, schedule=sched, delta=ctx.delta,
                                    accountants=[name], neighboring=neighboring)[0]
        note = f"{adjacency_note}; {name}"
        if res.reason:
            note = f"{note}; {res.reason}"
        return SamplerResult(sampler=sampling, epsilon=res.epsilon, epsilon_lower=None, delta=ctx.delta,
                             poisson_epsilon=ctx.poisson.epsilon, certified=bool(res.certified),
                             applicable=res.applicable, reason=res.reason, source=f"{name}: {res.source}",
                             details={"adjacency": neighboring, "accountant": name, "note": note})
    return row


#: row key → row function, in display order; a row function returning None is omitted (with a
#: note). A new sampler is one more entry returning a SamplerResult. A sampler accounted under two
#: adjacencies has two rows (key ``sampler/adjacency`` for the second; the result's ``sampler`` is
#: the ``--sampling`` name, its ``details["adjacency"]`` tells them apart).
ROWS: dict[str, Callable[[RowContext], object]] = {
    "poisson": _poisson_row,
    "shuffle": _bracket_row("shuffle"),
    "balls-in-bins": _bracket_row("balls-in-bins"),
    "without-replacement": _registry_row(
        "without-replacement", "replace",
        "exactly B records each step; replace-one (N fixed): not comparable number for number with the "
        "other adjacencies"),
    "without-replacement/add-remove": _registry_row(
        "without-replacement", "add-remove",
        "exactly B records each step; the Poisson-sampled Gaussian at q = B/N, σ/2 (dominating, attained)"),
    "with-replacement": _registry_row(
        "with-replacement", "add-remove",
        "B uniform draws each step, duplicates kept (a record drawn n times moves the sum by up to 2nC): "
        "a binomial mixture of Gaussians (no replace-one proof)"),
    "truncated-poisson": _registry_row(
        "truncated-poisson", "add-remove",
        "Poisson capped at B_max (a random B_max kept)"),
}


def _adjacency_label(adjacency: str) -> str:
    """The short adjacency of a row for the table (the JSON keeps the full text)."""
    if adjacency.startswith("zero-out"):
        return "zero-out"
    return {"add-remove": "add/remove", "replace": "replace-one"}.get(adjacency, adjacency)


def _epochs_grid(epochs: int) -> list[int]:
    if epochs <= 12:
        return list(range(1, epochs + 1))
    return sorted({max(1, round(epochs ** (i / 11))) for i in range(12)} | {epochs})


#: the rows of the registry-accounted samplers drawn by ``--plot`` (label → ROWS key, line style)
_PLOTTED_ROWS = {
    "without-replacement, add/remove (certified)": ("without-replacement/add-remove", ("#9467bd", "-", "D")),
    "with-replacement, add/remove (certified)": ("with-replacement", ("#8c564b", "-", "P")),
    "truncated-poisson, add/remove (certified)": ("truncated-poisson", ("#ff7f0e", "-", "X")),
}


def _plot(path: str, sigma: float, batch_size: int, dataset_size: int, epochs: int, delta: float,
          max_batch_size: int | None = None) -> None:
    """ε against epochs for each sampler (Poisson certified, the shared certified upper bound of
    shuffle / balls-in-bins, their lower bounds, and the certified ε of the fixed-size and
    truncated-Poisson samplers under add/remove — the rows of the table, at each epoch count)."""
    from dpcalc.accounting import shuffling as sh
    from dpcalc.cli.plot_style import finish, new_axes, require_matplotlib, save_figure, titled

    plt = require_matplotlib()
    grid = _epochs_grid(epochs)
    series = {"poisson (certified)": [], "shuffle / balls-in-bins: certified upper": [],
              "shuffle: lower bound": [], "balls-in-bins: lower bound": []}
    rows = {label: key for label, (key, _) in _PLOTTED_ROWS.items()
            if key != "truncated-poisson" or max_batch_size is not None}
    series.update({label: [] for label in rows})
    for e in grid:
        lay = sh.batch_layout(batch_size=batch_size, dataset_size=dataset_size, epochs=e)
        t = lay.steps_per_epoch
        poisson = sh.poisson_epsilon(noise_multiplier=sigma, layout=lay, delta=delta)
        series["poisson (certified)"].append(poisson.epsilon)
        ctx = RowContext(sigma, lay, delta, poisson, monte_carlo=False, max_batch_size=max_batch_size)
        for label, key in rows.items():
            res = ROWS[key](ctx)
            series[label].append(res.epsilon if res is not None and res.applicable else None)
        series["shuffle / balls-in-bins: certified upper"].append(
            sh.certified_upper_epsilon(noise_multiplier=sigma, epochs=e, delta=delta))
        series["shuffle: lower bound"].append(
            sh.shuffle_lower_epsilon(noise_multiplier=sigma, steps_per_epoch=t, epochs=e, delta=delta))
        series["balls-in-bins: lower bound"].append(
            sh.balls_in_bins_lower_epsilon(noise_multiplier=sigma, steps_per_epoch=t, epochs=e, delta=delta))
    style = {"poisson (certified)": ("#d62728", "-", "o"),
             "shuffle / balls-in-bins: certified upper": ("#1f77b4", "-", "s"),
             "shuffle: lower bound": ("#1f77b4", "--", "v"),
             "balls-in-bins: lower bound": ("#2ca02c", ":", "^"),
             **{label: st for label, (_, st) in _PLOTTED_ROWS.items()}}
    fig, ax = new_axes(plt)
    for name, ys in series.items():
        c, ls, mk = style[name]
        ax.plot(grid, [y if y is not None else float("nan") for y in ys], ls, color=c, marker=mk, ms=4, label=name)
    if len(grid) > 1 and grid[-1] / grid[0] >= 20:
        ax.set_xscale("log")
    finish(ax, title=titled("What the sampler costs", f"σ = {sigma:g}, B = {batch_size:,}, N = {dataset_size:,}"),
           xlabel="epochs (passes over the data)", ylabel=f"ε at δ = {delta:g}")
    save_figure(fig, path)
    plt.close(fig)


_MONTE_CARLO = OnlyWith("without --no-monte-carlo (they set the balls-in-bins Monte Carlo estimate)",
                        lambda p: not p["no_mc"])
#: the option table (docs/design.md §5)
ONLY_WITH = {"mc_samples": _MONTE_CARLO, "seed": _MONTE_CARLO}


@click.command("sampling-cost", cls=StrictCommand, only_with=ONLY_WITH, epilog=example_epilog(
    "dpcalc sampling-cost --sigma 1 --batch-size 256 --dataset-size 60000 --epochs 10 --delta 1e-5",
    "dpcalc sampling-cost --sigma 0.8 --batch-size 512 --dataset-size 50000 --epochs 20 --delta 1e-5 "
    "--plot cost.png",
))
@noise_multiplier_option(required=True,
               help="σ: noise std / clipping norm.")
@number_option("--batch-size", kind=RANGES["batch_size"], required=True,
               help="B: records per batch (expected, for Poisson and balls-in-bins), 1 ≤ B ≤ N.")
@number_option("--dataset-size", kind=RANGES["dataset_size"], required=True, help="N: records.")
@number_option("--epochs", kind=RANGES["epochs_whole"], required=True,
               help="E: whole passes (one permutation / assignment per epoch).")
@delta_option
@number_option("--mc-samples", kind=RANGES["mc_samples"], default=200_000, show_default=True,
               help="One-epoch Monte Carlo draws for the balls-in-bins estimate (capped by a work budget).")
@number_option("--seed", kind=RANGES["seed"], default=0, show_default=True, help="Seed of the Monte Carlo estimate.")
@click.option("--no-monte-carlo", "no_mc", is_flag=True, help="Skip the balls-in-bins Monte Carlo estimate.")
@number_option("--max-batch-size", kind=RANGES["batch_size"], default=None,
               help="B_max of a truncated-Poisson loader: adds its row (omitted without it).")
@plot_option("Also draw ε against epochs per sampler into FILE.")
@json_option
def sampling_cost_command(noise_multiplier, batch_size, dataset_size, epochs, delta, mc_samples, seed, no_mc,
                          max_batch_size, plot, json_output):
    """What your batch sampler costs: ε of the same run under each sampler, side by side.

    \b
    poisson        each record independently with q = B/N (certified, pld)
    shuffle        one permutation per epoch cut into ceil(N/B) batches
    balls-in-bins  each record put in one of ceil(N/B) batches at random, per epoch
    without-replacement  exactly B records each step (two rows: replace-one and
                         add/remove adjacency)
    with-replacement     B independent uniform draws each step (add/remove)
    truncated-poisson    Poisson capped at --max-batch-size (row omitted without it)

    For shuffle and balls-in-bins the certified ε is the E-fold Gaussian mechanism
    (μ = √E/σ; each record is in exactly one batch per epoch), and the lower bound is
    Chua et al.'s (ICML 2024, NeurIPS 2024, AISTATS 2025): the true ε lies between. A lower
    bound is never an ε. Adjacency: zero-out (a record replaced by one with zero gradient),
    which for Poisson sampling is add/remove.
    """
    from dpcalc.accounting import shuffling as sh
    from dpcalc.errors import ParameterError

    prepare(plot)  # a plot target that cannot be written is refused before any work
    layout = sh.batch_layout(batch_size=batch_size, dataset_size=dataset_size, epochs=epochs)
    if layout.steps > MAX_STEPS:
        raise ParameterError("epochs", "", layout.steps, message=(
            f"--epochs gives T = epochs·ceil(N/B) = {layout.steps:.3g} steps, outside the supported range "
            f"[1, {MAX_STEPS:.0e}]; use fewer epochs or a larger batch".replace("+", "")))
    poisson = sh.poisson_epsilon(noise_multiplier=noise_multiplier, layout=layout, delta=delta)
    ctx = RowContext(noise_multiplier, layout, delta, poisson, monte_carlo=not no_mc, samples=mc_samples, seed=seed,
                     max_batch_size=max_batch_size)
    results = [r for r in (fn(ctx) for fn in ROWS.values()) if r is not None]
    inputs = {"noise_multiplier": noise_multiplier, "batch_size": layout.batch_size,
              "dataset_size": layout.dataset_size, "epochs": layout.epochs, "delta": delta,
              **({"max_batch_size": max_batch_size} if max_batch_size is not None else {}),
              "sample_rate": layout.sample_rate, "steps_per_epoch": layout.steps_per_epoch, "steps": layout.steps}
    cols = [Column("sampler", lambda r: r["sampler"], "left"),
            Column("adjacency", lambda r: _adjacency_label(r["details"].get("adjacency", "")), "left"),
            Column("ε certified (upper)", lambda r: fmt(r["epsilon"], 4, "up")),
            Column("lower bound", lambda r: fmt(r["epsilon_lower"], 4, "down")),
            Column("width", lambda r: fmt(r["width"], 3, "up")),
            Column("note", lambda r: r["details"].get("note", ""), "left")]
    notes = [f"Adjacency: {sh.ADJACENCY} for shuffle and balls-in-bins (for Poisson sampling this is "
             "add/remove); each row's adjacency is in its column: rows under different adjacencies are not "
             "comparable number for number.",
             "Certified ε for shuffle and balls-in-bins: " + sh.SOURCE_UPPER + ".",
             "Lower bounds are proven lower bounds on the sampler's ε, never an ε: the true ε lies in "
             "[lower, certified].",
             "Sources: shuffle lower bound " + sh.SOURCE_SHUFFLE_LOWER + "; balls-in-bins " + sh.SOURCE_BNB
             + "; poisson " + (poisson.source or poisson.accountant) + "."]
    if max_batch_size is None:
        notes.append("truncated-poisson: row omitted (give --max-batch-size B_max, the cap of your loader).")
    notes.append("without-replacement, with-replacement and truncated-poisson: certified by the tightest "
                 "accountant with a proof (named in each row; pld's dominating pairs, docs/design.md §9); no proven "
                 "lower bound on the sampler's ε is shown for them (lower bound —).")
    if plot:
        _plot(plot, noise_multiplier, layout.batch_size, layout.dataset_size, layout.epochs, delta,
              max_batch_size)
        notes.append(f"Plot written to {plot}.")
    emit(command="sampling-cost", inputs=inputs, results=[r.to_json() for r in results], json_output=json_output,
         title="ε of the same run under each batch sampler", columns=cols, notes=notes,
         input_labels={"noise_multiplier": "σ", "batch_size": "B", "dataset_size": "N", "epochs": "E",
                       "delta": "δ", "max_batch_size": "B_max", "sample_rate": "q", "steps_per_epoch": "T/epoch", "steps": "T"})
