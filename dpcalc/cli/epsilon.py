"""``dpcalc epsilon`` and ``dpcalc delta``: the privacy a DP-SGD run spent, per accountant."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import click

from dpcalc.cli.options import (
    RANGES,
    StrictCommand,
    accountant_option,
    accountant_settings,
    check_planned_steps,
    delta_option,
    example_epilog,
    json_option,
    neighboring_option,
    noise_multiplier_option,
    number_option,
    pld_options,
    sampler_options,
    sampling_options,
)
from dpcalc.cli.person import (
    group_notes,
    group_size_option,
    per_user,
    resolve_user_unit,
    user_options,
)
from dpcalc.cli.plot_style import plot_option, prepare
from dpcalc.cli.render import Column, emit, fmt, notes_before_sources


def sigma_option(f):
    return noise_multiplier_option(required=True, help="σ: noise std divided by the clipping norm (L2 sensitivity).")(f)


def _upper(res: Mapping[str, Any], key: str, digits: int = 6) -> str:
    """An upper bound cell: rounded up; ``∞`` when the accountant certifies no finite value
    (JSON has null and a ``reason`` there)."""
    value = res.get(key)
    if value is None and res.get("applicable", True) and res.get("reason"):
        return "∞"
    return fmt(value, digits, "up")


def _bracket(res: Mapping[str, Any], key: str, lower_key: str) -> str:
    lower = res.get("details", {}).get(lower_key)
    return "—" if lower is None else f"[{fmt(lower, rounding='down')}, {_upper(res, key)}]"


def _status(res: Mapping[str, Any]) -> str:
    if res.get("applicable") is False:
        return "n/a: " + (res.get("reason") or "")
    return "certified" if res.get("certified") else "approx."


def _order(res: Mapping[str, Any]) -> str:
    order = res.get("details", {}).get("order")
    return "—" if order is None else fmt(order, 4)


def accounting_columns(value_key: str, value_header: str, lower_key: str, *,
                       noise_std: bool = False) -> list[Column]:
    """Table columns of the accountant tables (epsilon, delta, sigma)."""
    cols = [Column("accountant", lambda r: r["accountant"], "left")]
    if value_key == "noise_multiplier":
        cols.append(Column("σ (noise mult.)", lambda r: fmt(r.get("noise_multiplier"), 7, "up")))
        if noise_std:
            cols.append(Column("noise std σ·C", lambda r: fmt(r.get("noise_std"), 7, "up")))
        cols.append(Column("ε achieved", lambda r: _upper(r, "epsilon", 8)))
        cols.append(Column("ε lower", lambda r: fmt(r.get("details", {}).get("epsilon_lower"), rounding="down")))
    else:
        cols.append(Column(value_header, lambda r: _upper(r, value_key)))
        cols.append(Column("bracket [lower, upper]", lambda r: _bracket(r, value_key, lower_key)))
    cols += [
        Column("order α", _order),
        Column("status", _status, "left"),
    ]
    return cols


def accounting_notes(schedule, results, neighboring: str) -> list[str]:
    """Assumption and warning lines shown under the accountant tables."""
    notes = []
    if schedule.source == "unsampled":
        notes.append("No sampling option given: no subsampling assumed (q = 1), the Gaussian "
                     "mechanism composed T times.")
    else:
        notes.append(sampler_note(schedule))
    notes.append(adjacency_note(schedule, neighboring))
    for r in results:
        for w in r.details.get("warnings", ()) if r.details else ():
            notes.append(f"{r.accountant}: {w}")
        if r.details and r.details.get("note"):
            notes.append(f"{r.accountant}: {r.details['note']}")
        if r.reason and r.applicable:
            notes.append(f"{r.accountant}: {r.reason}")
    sources = [f"{r.accountant}: {r.source}" for r in results if r.source]
    if sources:
        notes.append("Sources — " + "; ".join(sources) + ".")
    return list(dict.fromkeys(notes))  # each warning once, in order


def sampler_note(schedule) -> str:
    """The sentence saying which batch sampler the numbers assume."""
    sampling = getattr(schedule, "sampling", "poisson")
    if sampling == "without-replacement":
        return (f"Sampler: without-replacement — each step a uniformly random batch of exactly B = "
                f"{schedule.batch_size} of the N = {schedule.dataset_size} records (q = B/N = "
                f"{schedule.sample_rate:.4g}); replace-one: pld by the symmetric pair of Dong, Roth, Su 2022 §4.1 "
                "(subsampling theorem), rdp by Wang, Balle, Kasiviswanathan 2019 Thm 9; add/remove: the "
                "Poisson-sampled Gaussian at q = B/N with a shift of 2C, which dominates the step and is attained "
                "(docs/design.md §9): pld by its privacy loss distribution, rdp by Birrell, Ebrahimi, Behnia, "
                "Pacheco 2024 Thm 3.1/3.3.")
    if sampling == "with-replacement":
        return (f"Sampler: with-replacement — each step B = {schedule.batch_size} independent uniform draws "
                f"from the N = {schedule.dataset_size} records (q = B/N = {schedule.sample_rate:.4g}); add/remove: a "
                "record drawn j ~ Binomial(B, 1/N) times shifts the sum by at most 2jC; pld by the privacy loss "
                "distribution of that mixture of Gaussians, which dominates the step and is attained "
                "(docs/design.md §9), rdp by Birrell, Ebrahimi, Behnia, Pacheco 2024 Thm 3.6.")
    if sampling == "truncated-poisson":
        return (f"Sampler: truncated-poisson — Poisson sampling with probability q = {schedule.sample_rate:.4g}, "
                f"batch capped at B_max = {schedule.max_batch_size} (a random B_max kept); add/remove: the branch "
                "decomposition of dp_accounting's truncated subsampled Gaussian, a Poisson-sampled Gaussian per "
                "branch (pld: their privacy loss distributions, certified bracket; rdp: their Rényi DP).")
    if sampling in ("shuffle", "balls-in-bins"):
        per_epoch = -(-schedule.dataset_size // schedule.batch_size)
        how = ("one random permutation per epoch cut into" if sampling == "shuffle"
               else "each record put in one uniformly random batch of")
        epochs = schedule.steps / per_epoch
        whole = -(-schedule.steps // per_epoch)
        part = "" if whole == epochs else f", a partial last epoch counted whole (upper bound: {whole} epochs)"
        return (f"Sampler: {sampling} — {how} ceil(N/B) = {per_epoch:,} batches (B = {schedule.batch_size}, "
                f"N = {schedule.dataset_size}); T = {schedule.steps:,} steps = {epochs:.4g} epochs{part}. Each record "
                f"is in exactly one batch per epoch, so every accountant's ε is that of the Gaussian mechanism "
                f"composed {whole} times (μ = √E/σ): a certified upper bound on this sampler's ε (Chua et al. "
                "2024 §3, ABLQ_D).")
    if sampling != "poisson":
        return f"Sampler: {sampling} (q = B/N = {schedule.sample_rate:.4g})."
    return ("Assumes Poisson sampling (each record joins a step independently with "
            "probability q).")


def _neighboring_explicit() -> bool:
    """Whether ``--neighboring`` was given (a default add-remove means zero-out for shuffle)."""
    from click.core import ParameterSource

    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return True
    return ctx.get_parameter_source("neighboring") not in (ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP)


def stated_adjacency(schedule, neighboring: str) -> str:
    """The adjacency the numbers are stated under (``zero-out`` for shuffle / balls-in-bins without
    ``--neighboring``; dpcalc/accounting/_sampling.py), refused with the reason when unproven."""
    from dpcalc.accounting._sampling import sampler_adjacency

    return sampler_adjacency(schedule.sampling, neighboring, explicit=_neighboring_explicit())


def adjacency_note(schedule, neighboring: str) -> str:
    """The "Adjacency:" line under the accountant tables."""
    stated = stated_adjacency(schedule, neighboring)
    if stated == "zero-out":
        return ("Adjacency: zero-out (one record replaced by a ghost with zero gradient; Chua et al. 2024 §2). "
                "The accountants use the add/remove Gaussian pair N(0, σ²) vs N(1, σ²), which is zero-out's; "
                "add/remove itself is not analysed for this sampler (the batch layout depends on N).")
    return f"Adjacency: {stated}."


def epoch_bracket(schedule, noise_multiplier: float | None, delta: float, neighboring: str, *,
                  sigma_rounding: str | None = None):
    """``(notes, json)`` of the shuffle / balls-in-bins bracket at σ (zero-out only): the certified
    upper bound (E-fold Gaussian, :func:`dpcalc.accounting.shuffling.steps_bracket`), the proven
    lower bound, the width and the Poisson ε a user might have reported; ``([], None)`` for
    other samplers. A lower bound is never an ε. ``sigma_rounding``: how σ is displayed (``"up"`` for
    a calibrated σ, as in the sigma table; nearest for a given one)."""
    import math

    if schedule.sampling not in ("shuffle", "balls-in-bins") or noise_multiplier is None or schedule.steps < 1:
        return [], None
    stated = stated_adjacency(schedule, neighboring)
    if stated != "zero-out":
        return [f"{schedule.sampling}: the lower bound and the Poisson comparison are proven under zero-out "
                "adjacency (run without --neighboring); under replace-one only the certified ε above holds."], None
    from dpcalc.accounting.shuffling import steps_bracket

    res = steps_bracket(sampler=schedule.sampling, noise_multiplier=noise_multiplier,
                        batch_size=schedule.batch_size, dataset_size=schedule.dataset_size, steps=schedule.steps,
                        delta=delta)
    low = "none proven (less than one whole epoch)" if res.epsilon_lower is None else fmt(res.epsilon_lower, 4, "down")
    line = (f"{schedule.sampling} at σ = {fmt(noise_multiplier, 7, sigma_rounding)}: the true ε at δ = {delta:g} lies in "
            f"[{low}, {fmt(res.epsilon, 4, 'up')}] (lower bound: {res.details['source_lower']}; upper: certified, "
            f"E-fold Gaussian, μ = {fmt(res.details['mu'], 4, 'up')})")
    if res.width is not None:
        line += f", width {fmt(res.width, 3, 'up')}"
    pe = res.poisson_epsilon
    notes = [line + "."]
    if pe is not None and math.isfinite(pe):
        cmp = ""
        if res.epsilon_lower is not None and pe < res.epsilon_lower:
            factor = fmt(res.epsilon_lower / pe, 3, "down") + "×" if pe > 0 else "an unbounded factor"
            cmp = f": below this sampler's proven lower bound — reporting it under-reports ε by at least {factor}"
        notes.append(f"The Poisson ε a user might have reported for the same q = B/N and T: "
                     f"{fmt(pe, 4, 'up')} (pld){cmp}. It is not this sampler's ε.")
    if res.details.get("partial_epoch"):
        notes.append(res.details["partial_epoch"] + ".")
    if schedule.sampling == "balls-in-bins":
        notes.append("Monte Carlo estimate (approximate): dpcalc sampling-cost.")
    return notes, {"sampler": res.to_json()}


def delta_warnings(schedule, *deltas) -> list[str]:
    """The δ ≥ 1/N warning (once) when the schedule knows N and one of ``deltas`` is that large."""
    for d in deltas:
        w = schedule.small_delta_warning(d) if d is not None else None
        if w:
            return [w]
    return []


def checked_schedule(*, neighboring: str, **options):
    """:func:`dpcalc.schedule.resolve_schedule` of the sampling options, the planned-steps limit,
    and the refusal (exit 2, with the reason) of a sampler/adjacency pair without a proof."""
    from dpcalc.schedule import resolve_schedule

    schedule = resolve_schedule(**options)
    check_planned_steps(schedule)
    stated_adjacency(schedule, neighboring)
    return schedule


def group_extra(extra, schedule, noise_multiplier, neighboring, target, discretization, accuracy):
    """``extra`` with ``group`` (the convert-group comparison) added when ``--group-size`` k > 1."""
    if schedule.group_size <= 1:
        return extra
    from dpcalc.accounting.dpsgd import convert_group_comparison

    comparison = convert_group_comparison(noise_multiplier=noise_multiplier, schedule=schedule, neighboring=neighboring,
                                          options=accountant_settings(discretization=discretization, accuracy=accuracy),
                                          **target)
    return {**(extra or {}), "group": comparison}


def require_usable(results, key: str, what: str) -> None:
    """Exit status 1 with the reasons when no accountant gives a finite value (every row not
    applicable, unbounded or missing): there is no usable answer to print.

    Raises:
        InfeasibleError: no row has a finite ``key``.
    """
    import math

    from dpcalc.errors import InfeasibleError

    def finite(r) -> bool:
        val = getattr(r, key)
        return r.applicable and val is not None and math.isfinite(val)

    if not any(finite(r) for r in results):
        reasons = "; ".join(f"{r.accountant}: {r.reason or f'no finite {what}'}" for r in results)
        raise InfeasibleError(f"no accountant gives a finite {what} for these inputs ({reasons})")


def _account_run(quantity: str, *, noise_multiplier: float, target: Mapping[str, float], accountant,
                 neighboring: str, discretization, accuracy, **schedule_options):
    """What ``epsilon`` and ``delta`` share: the checked schedule (``schedule_options``: the
    sampling options), one row per accountant (``quantity`` ``"epsilon"``: ε at ``target``
    ``{"delta": δ}``; ``"delta"``: δ at ``{"epsilon": ε}``) and the JSON ``inputs``.

    Returns:
        (schedule, results, inputs).

    Raises:
        ParameterError: a bad option; InfeasibleError: no accountant gives a finite value.
    """
    from dpcalc.accounting.dpsgd import (
        delta_by_accountant,
        epsilon_by_accountant,
        resolve_accountants,
    )

    schedule = checked_schedule(neighboring=neighboring, **schedule_options)
    by_accountant = epsilon_by_accountant if quantity == "epsilon" else delta_by_accountant
    results = by_accountant(noise_multiplier=noise_multiplier, schedule=schedule, **target,
                            accountants=resolve_accountants(accountant, default_all=True),
                            neighboring=neighboring,
                            options=accountant_settings(discretization=discretization, accuracy=accuracy))
    require_usable(results, quantity, "ε" if quantity == "epsilon" else "δ")
    inputs = {"noise_multiplier": noise_multiplier, **schedule.as_inputs(), **target,
              "neighboring": stated_adjacency(schedule, neighboring)}
    return schedule, results, inputs


@click.command("epsilon", cls=StrictCommand, epilog=example_epilog(
    "dpcalc epsilon --sigma 4 --sample-rate 0.01 --steps 10000 --delta 1e-5",
    "dpcalc epsilon --sigma 1.1 --batch-size 256 --dataset-size 60000 --epochs 60 --delta 1e-5 --json",
))
@sigma_option
@sampling_options
@sampler_options
@delta_option
@accountant_option(default="all", extra=("all",), help="Which accountant(s) to run.")
@group_size_option
@user_options
@neighboring_option
@pld_options
@click.option("--risk", is_flag=True,
              help="Also bound a membership-inference attack's TPR at FPR = 1e-3 from each accountant's "
                   "whole privacy curve (as `dpcalc risk`).")
@plot_option("Also draw ε against epochs per accountant (pld's certified bracket as a band) into FILE.")
@json_option
def epsilon_command(noise_multiplier, sample_rate, steps, batch_size, dataset_size, epochs, sampling,
                    max_batch_size, delta, accountant, group_size, privacy_unit, records_per_user, neighboring,
                    discretization, accuracy, risk, plot, json_output):
    """The ε a DP-SGD run spent at δ, under each accountant side by side.

    The run adds Gaussian noise with std σ·C to the sum of per-example gradients
    clipped to norm C, for T steps with Poisson sampling rate q.
    """
    prepare(plot)  # a plot target that cannot be written is refused before any work
    dataset_size, unit_inputs, unit_notes = resolve_user_unit(privacy_unit, records_per_user, dataset_size, group_size)
    schedule, results, inputs = _account_run(
        "epsilon", noise_multiplier=noise_multiplier, sample_rate=sample_rate, steps=steps,
        batch_size=batch_size, dataset_size=dataset_size, epochs=epochs, sampling=sampling,
        max_batch_size=max_batch_size, target={"delta": delta}, accountant=accountant, group_size=group_size,
        neighboring=neighboring, discretization=discretization, accuracy=accuracy)
    rows = [r.to_json() for r in results]
    columns = accounting_columns("epsilon", "ε (upper bound)", "epsilon_lower")
    inputs.update(unit_inputs)
    notes = unit_notes + per_user(accounting_notes(schedule, results, neighboring), unit_inputs)
    if risk:  # imported only here: `epsilon` without --risk starts and runs exactly as before
        add_risk(rows, columns, notes, noise_multiplier=noise_multiplier, schedule=schedule, delta=delta,
                 neighboring=neighboring, options=accountant_settings(discretization=discretization, accuracy=accuracy))
    bracket_notes, extra = epoch_bracket(schedule, noise_multiplier, delta, neighboring)
    extra = group_extra(extra, schedule, noise_multiplier, neighboring, {"delta": delta}, discretization, accuracy)
    bracket_notes += group_notes(schedule, (extra or {}).get("group"), "epsilon")
    notes_before_sources(notes, bracket_notes)
    if plot is not None:
        from dpcalc.accounting.dpsgd import resolve_accountants
        from dpcalc.cli.run_plots import epsilon_plot

        notes.append(epsilon_plot(plot, noise_multiplier=noise_multiplier, schedule=schedule, delta=delta,
                                  accountants=resolve_accountants(accountant, default_all=True), neighboring=neighboring,
                                  options=accountant_settings(discretization=discretization, accuracy=accuracy)))
    emit(command="epsilon", inputs=inputs, results=rows, json_output=json_output, columns=columns,
         title="ε spent", notes=notes, warnings=delta_warnings(schedule, delta), extra=extra)


def _risk_cell(r: Mapping[str, Any]) -> str:
    risk = r.get("risk")
    if risk is None:
        return "—"
    if risk.get("tpr_bound") is None:
        return "n/a"
    return fmt(risk["tpr_bound"], 4, "up") + ("" if risk.get("certified") else " approx.")


def add_risk(rows: list[dict], columns: list[Column], notes: list[str], *, noise_multiplier: float, schedule,
             delta: float, neighboring: str, options: Mapping[str, Any]) -> None:
    """``epsilon --risk``: each applicable row gets ``risk`` (:func:`dpcalc.risk.curve.tpr_bound_at`:
    the TPR bound at FPR 10⁻³ from that accountant's privacy curve), a column and a note."""
    import math

    from dpcalc.risk.curve import RISK_FPR, tpr_bound_at

    event = schedule.event(noise_multiplier)
    for row in rows:
        eps = row.get("epsilon")
        if not row.get("applicable", True) or eps is None or not math.isfinite(eps):
            continue
        try:
            row["risk"] = tpr_bound_at(event, accountant=row["accountant"], delta=delta, neighboring=neighboring,
                                       options=options.get(row["accountant"], {}))
        except (ArithmeticError, ValueError) as e:  # one accountant's failure is its own cell
            row["risk"] = {"fpr": RISK_FPR, "tpr_bound": None, "reason": f"{type(e).__name__}: {e}"}
    at = next(i for i, c in enumerate(columns) if c.header == "bracket [lower, upper]") + 1
    columns.insert(at, Column("TPR at FPR 1e-3 ≤", _risk_cell))
    notes_before_sources(notes, [
        "TPR at FPR 1e-3: no membership-inference test on this output has a true-positive rate above it "
        "at false-positive rate 0.001 — read off each accountant's whole privacy curve (trade-off "
        "envelope, Dong, Roth, Su 2022 Prop 2.12), as `dpcalc risk` does."])


@click.command("delta", cls=StrictCommand, epilog=example_epilog(
    "dpcalc delta --sigma 4 --sample-rate 0.01 --steps 10000 --eps 1.2",
))
@sigma_option
@sampling_options
@sampler_options
@number_option("--eps", "--epsilon", "epsilon", kind=RANGES["epsilon_at"], required=True, help="ε ≥ 0.")
@accountant_option(default="all", extra=("all",), help="Which accountant(s) to run.")
@group_size_option
@user_options
@neighboring_option
@pld_options
@json_option
def delta_command(noise_multiplier, sample_rate, steps, batch_size, dataset_size, epochs, sampling,
                  max_batch_size, epsilon, accountant, group_size, privacy_unit, records_per_user, neighboring,
                  discretization, accuracy, json_output):
    """The δ of a DP-SGD run at a given ε, under each accountant side by side."""
    dataset_size, unit_inputs, unit_notes = resolve_user_unit(privacy_unit, records_per_user, dataset_size, group_size)
    schedule, results, inputs = _account_run(
        "delta", noise_multiplier=noise_multiplier, sample_rate=sample_rate, steps=steps,
        batch_size=batch_size, dataset_size=dataset_size, epochs=epochs, sampling=sampling,
        max_batch_size=max_batch_size, target={"epsilon": epsilon}, accountant=accountant, group_size=group_size,
        neighboring=neighboring, discretization=discretization, accuracy=accuracy)
    inputs.update(unit_inputs)
    notes = unit_notes + per_user(accounting_notes(schedule, results, neighboring), unit_inputs)
    extra = group_extra(None, schedule, noise_multiplier, neighboring, {"epsilon": epsilon}, discretization, accuracy)
    notes[len(notes) - 1:len(notes) - 1] = group_notes(schedule, (extra or {}).get("group"), "delta")
    if schedule.sampling in ("shuffle", "balls-in-bins"):
        notes.insert(2, f"{schedule.sampling}: δ above is certified (an upper bound, the E-fold Gaussian's); the "
                        "bracket with a lower bound and the Poisson comparison is on ε: dpcalc epsilon.")
    emit(command="delta", inputs=inputs, results=[r.to_json() for r in results],
         json_output=json_output, columns=accounting_columns("delta", "δ (upper bound)", "delta_lower"),
         title="δ at ε", notes=notes, extra=extra,
         warnings=delta_warnings(schedule, *(r.delta for r in results if r.applicable)))
