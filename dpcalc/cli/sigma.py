"""``dpcalc sigma``: the noise multiplier a DP-SGD run needs for a target (ε, δ)."""

from __future__ import annotations

import click

from dpcalc.cli.epsilon import (
    accounting_columns,
    accounting_notes,
    checked_schedule,
    delta_warnings,
    epoch_bracket,
    group_extra,
    require_usable,
    stated_adjacency,
)
from dpcalc.cli.options import (
    RANGES,
    StrictCommand,
    accountant_option,
    accountant_settings,
    example_epilog,
    json_option,
    neighboring_option,
    number_option,
    pld_options,
    sampler_options,
    sampling_options,
    target_delta_option,
    target_epsilon_option,
)
from dpcalc.cli.person import (
    group_notes,
    group_size_option,
    per_user,
    resolve_user_unit,
    user_options,
)
from dpcalc.cli.plot_style import plot_option, prepare
from dpcalc.cli.render import emit, fmt, notes_before_sources


def calibration_accountants(accountant: str | None, schedule, neighboring: str) -> list[str]:
    """The accountants ``dpcalc sigma`` calibrates with: the ``--accountant`` given (``all``: every
    one), else the tightest certified one for the schedule's sampler (used by the command and by
    its plot series, :mod:`dpcalc.cli.plot_data`)."""
    from dpcalc.accounting.dpsgd import resolve_accountants

    if accountant is None and schedule.sampling != "poisson":
        from dpcalc.accounting._sampling import default_accountant_for

        return [default_accountant_for(schedule.event(1.0, max(schedule.steps, 1)), neighboring)]
    return resolve_accountants(accountant, default_all=False)


@click.command("sigma", cls=StrictCommand, epilog=example_epilog(
    "dpcalc sigma --eps 3 --delta 1e-5 --batch-size 256 --dataset-size 60000 --epochs 60",
    "dpcalc sigma --eps 1 --delta 1e-5 --steps 100",
))
@target_epsilon_option(required=True, help="Target ε > 0.")
@target_delta_option
@sampling_options
@sampler_options
@accountant_option(default=None, extra=("all",),
                   help="Accountant to calibrate with (default: the tightest certified one); 'all' compares.")
@number_option("--max-grad-norm", kind=RANGES["max_grad_norm"], default=None,
              help="Clipping norm C: also print the noise std σ·C added to the summed gradient.")
@group_size_option
@user_options
@neighboring_option
@pld_options
@plot_option("Also draw σ against the target ε (½ to 2 times the requested one) into FILE.")
@json_option
def sigma_command(epsilon, delta, sample_rate, steps, batch_size, dataset_size, epochs, sampling,
                  max_batch_size, accountant, max_grad_norm, group_size, privacy_unit, records_per_user, neighboring,
                  discretization, accuracy, plot, json_output):
    """The noise multiplier σ a DP-SGD run needs for a target (ε, δ).

    σ is the smallest noise multiplier (to 1e-6 relative, rounded up) whose ε under
    the accountant is at most the target; the ε achieved at σ is verified.
    """
    from dpcalc.accounting.dpsgd import noise_multiplier_by_accountant

    prepare(plot)  # a plot target that cannot be written is refused before any work
    dataset_size, unit_inputs, unit_notes = resolve_user_unit(privacy_unit, records_per_user, dataset_size, group_size)
    schedule = checked_schedule(sample_rate=sample_rate, steps=steps, batch_size=batch_size,
                                dataset_size=dataset_size, epochs=epochs, sampling=sampling,
                                max_batch_size=max_batch_size, group_size=group_size, neighboring=neighboring)
    chosen = calibration_accountants(accountant, schedule, neighboring)
    results = noise_multiplier_by_accountant(
        target_epsilon=epsilon, delta=delta, schedule=schedule,
        accountants=chosen,
        neighboring=neighboring, max_grad_norm=max_grad_norm,
        options=accountant_settings(discretization=discretization, accuracy=accuracy), fallback=accountant is None)
    require_usable(results, "noise_multiplier", "σ")
    inputs = {"epsilon": epsilon, "delta": delta, **schedule.as_inputs(),
              "neighboring": stated_adjacency(schedule, neighboring)}
    if max_grad_norm is not None:
        inputs["max_grad_norm"] = max_grad_norm
    inputs.update(unit_inputs)
    notes = unit_notes + per_user(accounting_notes(schedule, results, neighboring), unit_inputs)
    extra = None
    if schedule.sampling in ("shuffle", "balls-in-bins"):
        # σ is calibrated on the certified upper bound (every accountant's ε is the E-fold Gaussian's);
        # the bracket is shown at the calibrated σ, never used to calibrate
        sigma_used = next((r.noise_multiplier for r in results if r.applicable and r.noise_multiplier), None)
        bracket_notes, extra = epoch_bracket(schedule, sigma_used, delta, neighboring, sigma_rounding="up")
        notes_before_sources(notes, [f"σ is calibrated on the certified upper bound of {schedule.sampling} "
                                     "(never on its lower bound or an estimate).", *bracket_notes])
    if schedule.group_size > 1:  # what convert group would certify at the calibrated σ
        sigma_used = next((r.noise_multiplier for r in results if r.applicable and r.noise_multiplier), None)
        extra = group_extra(extra, schedule, sigma_used, neighboring, {"delta": delta}, discretization, accuracy)
        notes_before_sources(notes, [
            *group_notes(schedule, extra["group"], "epsilon")[:1],
            f"At this σ, `dpcalc convert group` from the record-level guarantee would certify only "
            f"ε = {fmt(extra['group']['convert_group_epsilon'], 4, 'up')} for the group "
            "(Vadhan 2017 Lemma 2.2): calibrating with it would need a larger σ."])
    if plot is not None:
        from dpcalc.cli.run_plots import sigma_plot

        notes.append(sigma_plot(plot, target_epsilon=epsilon, delta=delta, schedule=schedule, accountants=chosen,
                                neighboring=neighboring, fallback=accountant is None,
                                options=accountant_settings(discretization=discretization, accuracy=accuracy)))
    emit(command="sigma", inputs=inputs, results=[r.to_json() for r in results],
         json_output=json_output, columns=accounting_columns("noise_multiplier", "", "", noise_std=max_grad_norm is not None),
         title="noise multiplier for the target", notes=notes,
         warnings=delta_warnings(schedule, delta), extra=extra)
