"""``dpcalc plan``: choose batch size, epochs and σ for a target (ε, δ) before training."""

from __future__ import annotations

import click

from dpcalc.cli.options import (
    RANGES,
    NumberList,
    StrictCommand,
    accountant_option,
    accountant_settings,
    example_epilog,
    json_option,
    neighboring_option,
    noise_multiplier_option,
    number_option,
    pld_options,
    target_delta_option,
    target_epsilon_option,
)
from dpcalc.cli.person import group_size_option
from dpcalc.cli.render import Column, emit, fmt
from dpcalc.errors import ParameterError

#: points of a ``lo:hi`` range without an explicit count
DEFAULT_POINTS = 10

#: ``progress(done, total)`` given to the grid's calibration (None: no progress); the web worker
#: (dpcalc.web.worker) sets it to report a running plan's progress to the page
PROGRESS_HOOK = None

#: --batch-size, --epochs, --steps: values 'a,b,c' or a log-spaced range 'lo:hi[:count]', each
#: value read strictly with the supported range of the same option of `dpcalc sigma`
BATCH_SIZES = NumberList(RANGES["batch_size"], RANGES["grid_points"], default_points=DEFAULT_POINTS)
EPOCHS = NumberList(RANGES["epochs"], RANGES["grid_points"], default_points=DEFAULT_POINTS)
STEPS = NumberList(RANGES["plan_steps"], RANGES["grid_points"], default_points=DEFAULT_POINTS)


def _grid_columns(steps_mode: bool) -> list[Column]:
    return [
        Column("rank", lambda r: fmt(r.get("rank"))),
        Column("front", lambda r: "★" if r.get("pareto") else "", "center"),
        Column("batch B", lambda r: fmt(r["batch_size"])),
        Column("epochs", lambda r: fmt(r.get("epochs_expected") if steps_mode else r.get("epochs"), 4)),
        Column("steps T", lambda r: fmt(r["steps"])),
        Column("σ (noise mult.)", lambda r: _na(r) or fmt(r.get("noise_multiplier"), 7, "up")),
        Column("ε achieved", lambda r: _na(r) or fmt(r.get("epsilon"), 8, "up")),
        Column("noise std σ·C/B", lambda r: _na(r) or fmt(r.get("mean_noise_std"), 4, "up")),
        Column("TAN η", lambda r: _na(r) or fmt(r.get("tan"), 4, "up")),
        Column("examples B·T", lambda r: fmt(r["examples"])),
    ]


def _na(r) -> str:
    return "n/a" if r.get("applicable") is False else ""


def _steps_columns() -> list[Column]:
    return [
        Column("batch B", lambda r: fmt(r["batch_size"])),
        Column("max steps T*", lambda r: fmt(r.get("max_steps"))),
        Column("ε at T*", lambda r: _na(r) or fmt(r.get("epsilon"), 8, "up")),
        Column("ε at T*+1", lambda r: fmt(r.get("epsilon_next_step"), 8, "up")),
        Column("epochs T*·B/N", lambda r: fmt(r.get("epochs"), 4, "down")),
        Column("whole epochs E*", lambda r: fmt(r.get("max_epochs"))),
        Column("ε at E*+1 epochs", lambda r: fmt(r.get("epsilon_next_epoch"), 8, "up")),
        Column("noise std σ·C/B", lambda r: fmt(r.get("mean_noise_std"), 4, "up")),
        Column("TAN η", lambda r: _na(r) or fmt(r.get("tan"), 4, "up")),
    ]


def _batch_columns(by_steps: bool) -> list[Column]:
    return [
        Column("steps" if by_steps else "epochs", lambda r: fmt(r.get("steps_asked") if by_steps else r.get("epochs"), 6)),
        Column("max batch B*", lambda r: fmt(r.get("max_batch_size"))),
        Column("steps T", lambda r: _na(r) or fmt(r["steps"])),
        Column("ε at B*", lambda r: _na(r) or fmt(r.get("epsilon"), 8, "up")),
        Column("ε at B*+1", lambda r: fmt(r.get("epsilon_next_batch"), 8, "up")),
        Column("noise std σ·C/B", lambda r: fmt(r.get("mean_noise_std"), 4, "up")),
        Column("TAN η", lambda r: _na(r) or fmt(r.get("tan"), 4, "up")),
    ]


def _check_plot_path(path: str | None) -> None:
    if path is None:
        return
    from dpcalc.cli.plot_style import prepare

    prepare(path)  # a .png or .svg file that can be written, and matplotlib


@click.command("plan", cls=StrictCommand, epilog=example_epilog(
    "dpcalc plan --eps 3 --delta 1e-5 --dataset-size 50000 --batch-size 256,1024,4096 --epochs 10,30,100",
    "dpcalc plan --eps 3 --delta 1e-5 --dataset-size 50000 --batch-size 64:4096:20 --epochs 1:100:20 --accountant rdp --plot plan.png",
    "dpcalc plan --eps 3 --delta 1e-5 --dataset-size 50000 --sigma 1 --batch-size 256,1024,4096",
    "dpcalc plan --eps 3 --delta 1e-5 --dataset-size 50000 --sigma 1 --epochs 1,10,30",
))
@target_epsilon_option(required=True, help="Target ε > 0.")
@target_delta_option
@number_option("--dataset-size", kind=RANGES["dataset_size"], required=True, help="Dataset size N.")
@click.option("--batch-size", "batch_size", type=BATCH_SIZES, default=None,
              help="Expected batch sizes B: 'a,b,c' or a log-spaced range 'lo:hi[:count]' "
                   f"(default count {DEFAULT_POINTS}). With --sigma and --epochs: the range searched (default 1:N). "
                   f"[each: {RANGES['batch_size'].range_text}, at most N]")
@click.option("--epochs", type=EPOCHS, default=None,
              help="Epochs E (T = ceil(E·N/B)): 'a,b,c' or 'lo:hi[:count]'. "
                   f"[each: {RANGES['epochs'].range_text}; count: {RANGES['grid_points'].range_text}]")
@click.option("--steps", type=STEPS, default=None,
              help="Steps T instead of epochs: 'a,b,c' or 'lo:hi[:count]'. "
                   f"[each: {RANGES['plan_steps'].range_text}]")
@noise_multiplier_option(default=None,
               help="Fix σ and solve instead: the most steps each batch size allows, or with "
                    "--epochs/--steps the largest batch size.")
@number_option("--examples-budget", kind=RANGES["examples_budget"], default=None,
               help="Compute budget: only cells processing at most this many examples (B·T) are "
                    "calibrated; the best of them is marked.")
@accountant_option(default=None, help="Accountant (default: the tightest certified one, as dpcalc sigma).")
@number_option("--max-grad-norm", kind=RANGES["max_grad_norm"], default=1.0, show_default=True,
               help="Clipping norm C, for the noise std σ·C/B on the averaged gradient.")
@neighboring_option
@click.option("--sampling", type=click.Choice(["poisson", "without-replacement", "with-replacement", "shuffle",
                                              "balls-in-bins"]),
              default="poisson", show_default=True,
              help="Batch sampler: poisson (q = B/N), fixed-size batches of exactly B (without-replacement: "
                   "add/remove or --neighboring replace; with-replacement: add/remove only), or shuffle / "
                   "balls-in-bins (an epoch is ceil(N/B) steps; "
                   "certified upper bound: the Gaussian composed once per epoch, zero-out adjacency). The default "
                   "accountant is the tightest certified one with a proof for the sampler.")
@pld_options
@group_size_option
@number_option("--rows", kind=RANGES["rows"], default=20, show_default=True,
               help="Table rows to show (0: all); --json always has every cell.")
@click.option("--quick", is_flag=True, default=False,
              help="Grid under pld: certify each σ on one grid step fixed per cell (ε within 0.1% below the "
                   "target; σ may differ from dpcalc sigma's by ~0.1%), about 5x faster than calibrating each "
                   "cell as dpcalc sigma. For interactive use. Ignored under an accountant other than pld, "
                   "with --discretization, a sampler other than poisson or --group-size > 1.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
              help="Write a PNG heatmap of σ and TAN over (B, E) with the Pareto front (needs dpcalc[plot]).")
@json_option
def plan_command(epsilon, delta, dataset_size, batch_size, epochs, steps, noise_multiplier,
                 examples_budget, accountant, max_grad_norm, neighboring, sampling, discretization, accuracy,
                 group_size, rows, quick, plot_path, json_output):
    """Plan a DP-SGD run: σ for every (batch size, epochs) cell, or solve at a fixed σ.

    Grid (default): the noise multiplier σ of each cell for the target (ε, δ), each
    calibrated and verified exactly as `dpcalc sigma`, ranked by the utility proxies
    (Pareto front of total amount of noise vs examples processed first). With --sigma:
    the most steps (and whole epochs) each batch size allows, or with --epochs/--steps the
    largest batch size. Poisson sampling with q = B/N.
    """
    from dpcalc import _validate as v
    from dpcalc.planning import plan as lib

    if epochs is not None and steps is not None:
        raise ParameterError("steps", "", steps, message="give either --epochs or --steps, not both")
    n = v.count("dataset_size", dataset_size, minimum=1)
    v.positive("epsilon", epsilon)
    v.open_unit("delta", delta)
    bs, es, ts = batch_size, epochs, steps  # lists (NumberList) or None
    options = accountant_settings(discretization=discretization, accuracy=accuracy)
    common = dict(target_epsilon=epsilon, delta=delta, dataset_size=n, accountant=accountant,
                  neighboring=neighboring, options=options, max_grad_norm=max_grad_norm, sampling=sampling)
    from dpcalc.accounting._sampling import sampler_adjacency
    from dpcalc.cli.epsilon import _neighboring_explicit

    # shuffle / balls-in-bins without --neighboring: zero-out; an explicit add-remove is refused with the reason
    stated = sampler_adjacency(sampling, neighboring, explicit=_neighboring_explicit())
    inputs = {**({"sampling": sampling} if sampling != "poisson" else {}),
              "epsilon": epsilon, "delta": delta, "dataset_size": n, "batch_size": bs,
              "epochs": es, "steps": ts, "noise_multiplier": noise_multiplier,
              "examples_budget": examples_budget, "max_grad_norm": max_grad_norm,
              "neighboring": stated, **({"group_size": group_size} if group_size > 1 else {}),
              **({"quick": True} if quick else {})}

    if noise_multiplier is None:
        if bs is None:
            raise ParameterError("batch_size", "", None, message="--batch-size is needed (values or a range)")
        if es is None and ts is None:
            raise ParameterError("epochs", "", None, message="--epochs or --steps is needed (values or a range)")
        if bs[-1] > n:
            raise ParameterError("batch_size", f"at most dataset_size ({n})", bs[-1])
        _check_plot_path(plot_path)
        result = lib.plan_grid(batch_sizes=bs, epochs=es, steps=ts, examples_budget=examples_budget,
                               group_size=group_size, progress=PROGRESS_HOOK, quick=quick, **common)
        columns, title = _grid_columns(ts is not None), _grid_title(ts is not None, examples_budget)
        shown = [r for r in result.results_json() if not r.get("over_budget")]
    else:
        if group_size > 1:
            raise ParameterError("group_size", "", group_size,
                                 message="--group-size applies to the grid (a target ε); drop it with --sigma")
        if quick:
            raise ParameterError("quick", "", True, message="--quick applies to the grid (a target ε); "
                                 "drop it with --sigma")
        if examples_budget is not None:
            raise ParameterError("examples_budget", "", examples_budget,
                                 message="--examples-budget applies to the grid; drop it with --sigma")
        if plot_path is not None:
            raise ParameterError("plot", "", plot_path, message="--plot draws the grid; drop it with --sigma")
        if es is None and ts is None:
            if bs is None:
                raise ParameterError("batch_size", "", None,
                                     message="with --sigma give --batch-size (most steps per batch size) "
                                             "or --epochs/--steps (largest batch size)")
            result = lib.max_steps_for_sigma(noise_multiplier=noise_multiplier, batch_sizes=bs, **common)
            columns, title = _steps_columns(), (f"most steps each batch size allows at σ = {noise_multiplier:g} "
                                                "(T* meets ε, T*+1 does not)")
        else:
            rng = None
            if bs is not None:
                rng = (bs[0], bs[-1])
            result = lib.max_batch_size_for_sigma(noise_multiplier=noise_multiplier, epochs=es, steps=ts,
                                                  batch_range=rng, **common)
            columns = _batch_columns(ts is not None)
            title = (f"largest batch size at σ = {noise_multiplier:g} (B* meets ε, B*+1 does not)")
        shown = result.results_json()
    if plot_path is not None:
        _plot_grid(result, plot_path, steps_mode=ts is not None,
                   title=f"dpcalc plan: σ for ε = {epsilon:g}, δ = {delta:g}, N = {n:,} ({result.accountant})")
    inputs["accountant"] = result.accountant
    full = result.results_json()
    warn = [] if delta < 1.0 / n else [
        f"delta = {delta:g} is at least 1/N = {1.0 / n:.3g} (N = {n}): a mechanism that publishes one random "
        "record in the clear satisfies such a delta; use delta well below 1/N"]
    if json_output:
        emit(command="plan", inputs=inputs, results=full, json_output=True, columns=[], warnings=warn)
        return
    total = len(shown)
    if rows and total > rows:
        shown = shown[:rows]
    emit(command="plan", inputs={k: val for k, val in inputs.items() if k != "max_grad_norm" or val != 1.0},
         results=shown, json_output=False, columns=columns, title=title,
         notes=_notes(result, len(shown), total, delta, n, plot_path, sampling, neighboring, group_size,
                      options.get(result.accountant, {})),
         warnings=warn)


def _check_grid(best: dict, settings: dict) -> str:
    """The Check line's grid options: the quick cell's step, or the plan's own --discretization,
    and its --accuracy, so that `dpcalc epsilon` computes the ε the plan reports."""
    step = best["details"].get("discretization") if best.get("details", {}).get("quick") \
        else settings.get("discretization")
    out = f" --discretization {step!r}" if step is not None else ""
    if settings.get("accuracy") is not None:
        out += f" --accuracy {settings['accuracy']!r}"
    return out


def _grid_title(steps_mode: bool, budget) -> str:
    what = "(batch size, steps)" if steps_mode else "(batch size, epochs)"
    under = f", under {budget:g} examples" if budget is not None else ""
    return f"σ for each {what} cell{under}, best first (★ = Pareto front)"


def _notes(plan, shown: int, total: int, delta: float, n: int, plot_path, sampling: str = "poisson",
           neighboring: str = "add-remove", group_size: int = 1, settings=None) -> list[str]:
    notes = []
    if shown < total:
        notes.append(f"Showing {shown} of {total} rows (--rows 0 for all; --json has every cell).")
    window = max((c.result.details.get("quick_window", 0.0) for c in plan.cells if c.result.details.get("quick")),
                 default=None)
    if plan.mode == "grid" and window is not None:
        notes.append(f"--quick: each σ marked quick (details.quick) is certified by {plan.accountant}'s upper "
                     f"bound on one grid step fixed per cell (details.discretization): its ε is ≤ the target and "
                     f"within {window:.1%} below it. `dpcalc sigma` (plan without --quick) may print a σ a few "
                     "tenths of a percent apart, its grid being the automatic one.")
    elif plan.mode == "grid":
        notes.append("Each σ is calibrated and verified as `dpcalc sigma`: the smallest σ (to 1e-6, "
                     "rounded up) whose ε under the accountant is ≤ the target.")
    if plan.mode == "grid":
        notes.append("noise std σ·C/B: noise on the averaged clipped gradient of one step. TAN η = σ/(q·√T): "
                     "total amount of noise (Sander, Stock, Sablayrolles 2023). ★ = Pareto front: no other "
                     "cell has less TAN for as few examples processed (B·T); front first, then by TAN.")
        rows = plan.results_json()
        best = rows[plan.best] if plan.best is not None else rows[0]
        if best.get("applicable", True) and best.get("noise_multiplier") is not None:
            notes.append(f"Best{' under the budget' if plan.best is not None else ''}: B = {best['batch_size']}, "
                         f"T = {best['steps']:,} steps. Check: dpcalc epsilon --sigma {best['noise_multiplier']!r} "
                         f"--batch-size {best['batch_size']} --dataset-size {n} --steps {best['steps']} "
                         f"--delta {delta!r} --accountant {plan.accountant}"
                         + (f" --sampling {sampling}" if sampling != "poisson" else "")
                         + (" --neighboring replace" if neighboring == "replace" else "")
                         + (f" --group-size {group_size}" if group_size > 1 else "")
                         + _check_grid(best, settings or {}))
    if sampling == "poisson":
        notes.append("Assumes Poisson sampling (q = B/N; each record joins a step independently).")
    elif sampling in ("shuffle", "balls-in-bins"):
        notes.append(f"Sampler: {sampling} — an epoch is ceil(N/B) steps and each record is in exactly one batch "
                     "per epoch: σ is calibrated on the certified upper bound (the Gaussian composed once per "
                     "epoch, a partial epoch counted whole), never on a lower bound. Adjacency: zero-out (a record "
                     "replaced by a ghost with zero gradient) unless --neighboring replace; `dpcalc epsilon "
                     f"--sampling {sampling}` prints the bracket [lower, upper] and the Poisson number.")
    else:
        notes.append(f"Sampler: {sampling} — each step a uniformly random batch of exactly B of the N records "
                     "(q = B/N).")
    notes.extend(plan.notes)
    if plot_path:
        notes.append(f"plot written to {plot_path}")
    notes.append(f"Sources — {plan.accountant}: {plan.source}.")
    return notes


def _plot_grid(plan, path: str, *, steps_mode: bool, title: str) -> None:
    """Two heatmaps over (batch size, epochs): σ and TAN η, the Pareto front drawn on both
    (stars joined in order of examples processed). Written atomically."""
    import numpy as np

    from dpcalc.cli.plot import require_matplotlib, save_figure

    plt = require_matplotlib()
    from matplotlib.patches import Patch, Rectangle

    cells = [c for c in plan.cells if c.feasible or c.result.reason]
    bs = sorted({c.batch_size for c in cells})
    key = (lambda c: c.steps) if steps_mode else (lambda c: c.epochs)
    xs = sorted({key(c) for c in cells if key(c) is not None})
    sig = np.full((len(bs), len(xs)), np.nan)
    tan = np.full_like(sig, np.nan)
    pos = {}
    for c in cells:
        if key(c) is None:
            continue
        i, j = bs.index(c.batch_size), xs.index(key(c))
        pos[id(c)] = (i, j)
        if c.feasible:
            sig[i, j], tan[i, j] = c.noise_multiplier, c.tan
    front = sorted((c for c in cells if c.pareto), key=lambda c: c.examples)
    fig, axes = plt.subplots(1, 2, figsize=(12.5, 0.32 * len(bs) + 3.2))
    for ax, data, label in ((axes[0], sig, "σ (noise multiplier)"), (axes[1], tan, "TAN η = σ/(q√T)")):
        im = ax.imshow(data, origin="lower", aspect="auto", cmap="viridis")
        fig.colorbar(im, ax=ax, label=label)
        if len(bs) * len(xs) <= 100:
            for (i, j), val in np.ndenumerate(data):
                if np.isfinite(val):
                    ax.text(j, i, f"{val:.3g}", ha="center", va="center", fontsize=7,
                            color="white" if val < np.nanmean(data) else "black")
        for c in front:  # the front: each cell outlined
            i, j = pos[id(c)]
            ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, ec="#d62728", lw=2.2))
        best = plan.cells[plan.best] if plan.best is not None else None
        handles = [Patch(fill=False, ec="#d62728", lw=2.2, label="Pareto front (TAN vs examples B·T)")]
        if best is not None and id(best) in pos:
            i, j = pos[id(best)]
            ax.add_patch(Rectangle((j - 0.42, i - 0.42), 0.84, 0.84, fill=False, ec="white", lw=2, ls="--"))
            handles.append(Patch(fill=False, ec="0.3", lw=2, ls="--", label="best under the budget (white dashes)"))
        step = max(1, len(xs) // 10)
        ax.set_xticks(range(0, len(xs), step))
        ax.set_xticklabels([f"{x:.3g}" for x in xs][::step], rotation=45)
        ystep = max(1, len(bs) // 12)
        ax.set_yticks(range(0, len(bs), ystep))
        ax.set_yticklabels([str(b) for b in bs][::ystep])
        ax.set_xlabel("steps T" if steps_mode else "epochs E")
        ax.set_ylabel("batch size B")
        ax.set_title(label)
        if front:
            ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.18), fontsize=8,
                      ncol=len(handles), frameon=False)
    fig.suptitle(title + "; blank = not calibrated", fontsize=10)
    save_figure(fig, path)
    plt.close(fig)
