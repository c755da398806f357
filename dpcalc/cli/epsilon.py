"""``dpcalc epsilon`` and ``dpcalc delta``: the privacy a DP-SGD run spent, per accountant."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import click

from dpcalc.cli.options import (
    RANGES,
    StrictCommand,
    accountant_option,
    check_planned_steps,
    delta_option,
    example_epilog,
    json_option,
    neighboring_option,
    number_option,
    pld_options,
    pld_settings,
    sampler_options,
    sampling_options,
)
from dpcalc.cli.render import Column, emit, fmt


def sigma_option(f):
    return number_option("--sigma", "--noise-multiplier", "noise_multiplier", kind=RANGES["noise_multiplier"],
                         required=True, help="σ: noise std divided by the clipping norm (L2 sensitivity).")(f)


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
    notes.append(f"Adjacency: {neighboring}.")
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
                "(subsampling theorem), rdp by Wang, Balle, Kasiviswanathan 2019 Thm 9.")
    if sampling == "with-replacement":
        return (f"Sampler: with-replacement — each step B = {schedule.batch_size} independent uniform draws "
                f"from the N = {schedule.dataset_size} records (q = B/N = {schedule.sample_rate:.4g}).")
    if sampling == "truncated-poisson":
        return (f"Sampler: truncated-poisson — Poisson sampling with probability q = {schedule.sample_rate:.4g}, "
                f"batch capped at B_max = {schedule.max_batch_size} (a random B_max kept); rdp: branch "
                "decomposition of dp_accounting's truncated subsampled Gaussian, add/remove.")
    if sampling != "poisson":
        return f"Sampler: {sampling} (q = B/N = {schedule.sample_rate:.4g})."
    return ("Assumes Poisson sampling (each record joins a step independently with "
            "probability q).")


def delta_warnings(schedule, *deltas) -> list[str]:
    """The δ ≥ 1/N warning (once) when the schedule knows N and one of ``deltas`` is that large."""
    for d in deltas:
        w = schedule.small_delta_warning(d) if d is not None else None
        if w:
            return [w]
    return []


def checked_schedule(*, neighboring: str, **options):
    """:func:`dpcalc.events.resolve_schedule` of the sampling options, the planned-steps limit,
    and the refusal (exit 2, with the reason) of a sampler/adjacency pair without a proof."""
    from dpcalc.accounting._sampling import check_sampler_adjacency
    from dpcalc.events import resolve_schedule

    schedule = resolve_schedule(**options)
    check_planned_steps(schedule)
    check_sampler_adjacency(schedule.sampling, neighboring)
    return schedule


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


@click.command("epsilon", cls=StrictCommand, epilog=example_epilog(
    "dpcalc epsilon --sigma 4 --sample-rate 0.01 --steps 10000 --delta 1e-5",
    "dpcalc epsilon --sigma 1.1 --batch-size 256 --dataset-size 60000 --epochs 60 --delta 1e-5 --json",
))
@sigma_option
@sampling_options
@sampler_options
@delta_option
@accountant_option(default="all", extra=("all",), help="Which accountant(s) to run.")
@neighboring_option
@pld_options
@click.option("--risk", is_flag=True,
              help="Also bound a membership-inference attack's TPR at FPR = 1e-3 from each accountant's "
                   "whole privacy curve (as `dpcalc risk`).")
@json_option
def epsilon_command(noise_multiplier, sample_rate, steps, batch_size, dataset_size, epochs, sampling,
                    max_batch_size, delta, accountant, neighboring, discretization, accuracy, risk, json_output):
    """The ε a DP-SGD run spent at δ, under each accountant side by side.

    The run adds Gaussian noise with std σ·C to the sum of per-example gradients
    clipped to norm C, for T steps with Poisson sampling rate q.
    """
    from dpcalc.accounting.dpsgd import epsilon_by_accountant, resolve_accountants

    schedule = checked_schedule(sample_rate=sample_rate, steps=steps, batch_size=batch_size,
                                dataset_size=dataset_size, epochs=epochs, sampling=sampling,
                                max_batch_size=max_batch_size, neighboring=neighboring)
    results = epsilon_by_accountant(noise_multiplier=noise_multiplier, schedule=schedule, delta=delta,
                                    accountants=resolve_accountants(accountant, default_all=True),
                                    neighboring=neighboring,
                                    options=pld_settings(discretization, accuracy))
    require_usable(results, "epsilon", "ε")
    inputs = {"noise_multiplier": noise_multiplier, **schedule.as_inputs(), "delta": delta,
              "neighboring": neighboring}
    rows = [r.to_json() for r in results]
    columns = accounting_columns("epsilon", "ε (upper bound)", "epsilon_lower")
    notes = accounting_notes(schedule, results, neighboring)
    if risk:  # imported only here: `epsilon` without --risk starts and runs exactly as before
        add_risk(rows, columns, notes, noise_multiplier=noise_multiplier, schedule=schedule, delta=delta,
                 neighboring=neighboring, options=pld_settings(discretization, accuracy))
    emit(command="epsilon", inputs=inputs, results=rows, json_output=json_output, columns=columns,
         title="ε spent", notes=notes, warnings=delta_warnings(schedule, delta))


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
    notes.insert(len(notes) - 1 if notes and notes[-1].startswith("Sources") else len(notes),
                 "TPR at FPR 1e-3: no membership-inference test on this output has a true-positive rate above it "
                 "at false-positive rate 0.001 — read off each accountant's whole privacy curve (trade-off "
                 "envelope, Dong, Roth, Su 2022 Prop 2.12), as `dpcalc risk` does.")


@click.command("delta", cls=StrictCommand, epilog=example_epilog(
    "dpcalc delta --sigma 4 --sample-rate 0.01 --steps 10000 --eps 1.2",
))
@sigma_option
@sampling_options
@sampler_options
@number_option("--eps", "--epsilon", "epsilon", kind=RANGES["epsilon_at"], required=True, help="ε ≥ 0.")
@accountant_option(default="all", extra=("all",), help="Which accountant(s) to run.")
@neighboring_option
@pld_options
@json_option
def delta_command(noise_multiplier, sample_rate, steps, batch_size, dataset_size, epochs, sampling,
                  max_batch_size, epsilon, accountant, neighboring, discretization, accuracy, json_output):
    """The δ of a DP-SGD run at a given ε, under each accountant side by side."""
    from dpcalc.accounting.dpsgd import delta_by_accountant, resolve_accountants

    schedule = checked_schedule(sample_rate=sample_rate, steps=steps, batch_size=batch_size,
                                dataset_size=dataset_size, epochs=epochs, sampling=sampling,
                                max_batch_size=max_batch_size, neighboring=neighboring)
    results = delta_by_accountant(noise_multiplier=noise_multiplier, schedule=schedule, epsilon=epsilon,
                                  accountants=resolve_accountants(accountant, default_all=True),
                                  neighboring=neighboring,
                                  options=pld_settings(discretization, accuracy))
    require_usable(results, "delta", "δ")
    inputs = {"noise_multiplier": noise_multiplier, **schedule.as_inputs(), "epsilon": epsilon,
              "neighboring": neighboring}
    emit(command="delta", inputs=inputs, results=[r.to_json() for r in results],
         json_output=json_output, columns=accounting_columns("delta", "δ (upper bound)", "delta_lower"),
         title="δ at ε", notes=accounting_notes(schedule, results, neighboring),
         warnings=delta_warnings(schedule, *(r.delta for r in results if r.applicable)))
