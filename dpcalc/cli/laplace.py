"""``dpcalc laplace``: Laplace scale for ε, the accuracy it buys, the ε an accuracy needs,
and the exact (discrete Laplace) release of a value."""

from __future__ import annotations

import click

from dpcalc.cli._mechanism import calculator_beta, emit_release, require_release_epsilon
from dpcalc.cli.ledger import release_ledger_options
from dpcalc.cli.options import RANGES, StrictCommand, example_epilog, json_option, number_option
from dpcalc.cli.render import Column, emit, fmt


def _status(r) -> str:
    return "certified" if r.get("certified") else "approx."


@click.command("laplace", cls=StrictCommand, epilog=example_epilog(
    "dpcalc laplace --eps 1 --sensitivity 1 --beta 0.05 --dims 10000",
    "dpcalc laplace --accuracy 10 --beta 0.05 --sensitivity 1",
    "dpcalc laplace --eps 0.5 --sensitivity 1 --release 1234",
))
@number_option("--eps", "--epsilon", "epsilon", kind=RANGES["epsilon_mech"], default=None,
              help="ε > 0 (pure DP). Omit with --accuracy to get the ε needed.")
@number_option("--sensitivity", kind=RANGES["sensitivity"], default=1.0, show_default=True,
              help="Δ₁: L1 sensitivity of the query (whole query, all dims).")
@number_option("--beta", kind=RANGES["beta"], default=None,
              help="β in (0, 1): failure probability of the accuracy bound (0.05 with --accuracy).")
@number_option("--dims", kind=RANGES["dims"], default=1, show_default=True, help="k: number of noisy coordinates.")
@number_option("--accuracy", kind=RANGES["accuracy"], default=None,
              help="α > 0: target ℓ∞ error; prints the ε needed (inverse).")
@number_option("--release", "release", kind=RANGES["release"], default=None,
              help="Add exact discrete Laplace noise to this value and print it (integer unless --granularity).")
@number_option("--granularity", kind=RANGES["granularity"], default=None,
              help="g > 0: round the released value to multiples of g (sensitivity rescaled to ⌈Δ₁/g⌉ steps).")
@release_ledger_options
@json_option
def laplace_command(epsilon, sensitivity, beta, dims, accuracy, release, granularity, ledger_path,
                    ledger_dataset, json_output):
    """Laplace mechanism: scale b = Δ₁/ε, noise std √2·b, and the ℓ∞ accuracy.

    With --beta: the bound α with Pr[‖error‖∞ ≥ α] ≤ β, α = b·ln(k/β)
    (Dwork & Roth 2014 Thm 3.8) and the exact quantile for independent noise.
    With --accuracy α --beta β: the ε needed. With --release VALUE: the value plus
    exact discrete Laplace noise (Canonne, Kamath, Steinke 2020) from the OS CSPRNG;
    with --ledger FILE --dataset NAME it is recorded (as an ε-DP mechanism) before the
    noise is drawn, and refused past the dataset's budget.
    """
    from dpcalc.cli.ledger import release_guard
    from dpcalc.mechanisms import laplace as lap

    guard = release_guard(ledger_path, ledger_dataset, releasing=release is not None)
    if release is not None:
        from dpcalc.mechanisms.discrete import _grid, release_laplace

        epsilon = require_release_epsilon(epsilon)
        if guard is not None:
            from dpcalc.events import EpsilonDeltaEvent

            _, g, _, units = _grid(release, sensitivity, granularity)  # bad input: refused unrecorded
            guard.reserve(mechanism="discrete-laplace", event=EpsilonDeltaEvent(epsilon, 0.0),
                          params={"epsilon": epsilon, "sensitivity": sensitivity,
                                  "granularity": None if granularity is None else float(g),
                                  "sensitivity_units": units})
        res = release_laplace(value=release, epsilon=epsilon, sensitivity=sensitivity,
                              granularity=granularity)
        inputs = {"epsilon": epsilon, "sensitivity": sensitivity, "granularity": granularity,
                  "release": release}
        emit_release("laplace", res, inputs=inputs, guard=guard, json_output=json_output,
                     title="released value (exact discrete Laplace)",
                     columns=[Column("granularity g", lambda r: fmt(r["granularity"])),
                              Column("sensitivity (steps of g)", lambda r: fmt(r["sensitivity_units"])),
                              Column("scale b", lambda r: fmt(r["scale"], 7, "up"))])
        return
    beta = calculator_beta(epsilon, accuracy, beta)
    if accuracy is not None:
        res = lap.laplace_epsilon_for_accuracy(accuracy=accuracy, beta=beta,
                                               sensitivity=sensitivity, dims=dims)
        title = "ε needed for the accuracy target"
    else:
        res = lap.calibrate_laplace(epsilon=epsilon, sensitivity=sensitivity, beta=beta, dims=dims)
        title = "Laplace mechanism"
    inputs = {"epsilon": epsilon, "sensitivity": sensitivity, "accuracy": accuracy, "beta": beta,
              "dims": dims}
    cols = [Column("method", lambda r: r["method"], "left"),
            Column("ε", lambda r: fmt(r["epsilon"], rounding="up")),
            Column("scale b", lambda r: fmt(r["scale"], 7, "up")),
            Column("noise std", lambda r: fmt(r["noise_std"], 7, "up"))]
    notes = []
    if beta is not None:
        cols += [Column("ℓ∞ error α (Thm 3.8)", lambda r: fmt(r["accuracy"], rounding="up")),
                 Column("α exact", lambda r: fmt(r["details"].get("accuracy_exact"), rounding="up"))
                 if accuracy is None else
                 Column("ε exact quantile", lambda r: fmt(r["details"]["epsilon_exact"], rounding="up"))]
        notes.append(f"Pr(‖error‖∞ ≥ α) ≤ β = {fmt(res['beta'])} over k = {res['dims']} coordinate(s); "
                     "'exact' uses the exact quantile of k independent Laplace noises.")
    cols.append(Column("status", _status, "left"))
    notes.append("Source: " + res.source + ".")
    emit(command="laplace", inputs=inputs, results=[res.to_json()], json_output=json_output,
         columns=cols, title=title, notes=notes)
