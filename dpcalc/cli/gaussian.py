"""``dpcalc gaussian``: Gaussian noise for (ε, δ) — analytic and classical side by side —
the accuracy it buys, the ε an accuracy needs, and the exact (discrete Gaussian) release."""

from __future__ import annotations

import click

from dpcalc.cli._mechanism import calculator_beta, emit_release, require_release_epsilon
from dpcalc.cli.ledger import release_ledger_options
from dpcalc.cli.options import (
    RANGES,
    StrictCommand,
    delta_option,
    example_epilog,
    json_option,
    number_option,
)
from dpcalc.cli.render import Column, emit, fmt


def _status(r) -> str:
    if r.get("applicable") is False:
        return "n/a: " + (r.get("reason") or "")
    return "certified" if r.get("certified") else "approx."


def _saving(r) -> str:
    s = r.get("details", {}).get("saving_vs_classical")
    return "—" if s is None or r["method"] == "classical" else f"{100 * s:.1f}%"


def _acc(key):
    return lambda r: fmt(r.get("details", {}).get("accuracy", {}).get(key))


@click.command("gaussian", cls=StrictCommand, epilog=example_epilog(
    "dpcalc gaussian --eps 1 --delta 1e-5 --sensitivity 1",
    "dpcalc gaussian --eps 0.5 --delta 1e-6 --sensitivity 2 --beta 0.05 --dims 100",
    "dpcalc gaussian --accuracy 10 --beta 0.05 --delta 1e-5",
    "dpcalc gaussian --eps 1 --delta 1e-5 --release 1234",
))
@number_option("--eps", "--epsilon", "epsilon", kind=RANGES["epsilon_gaussian"], default=None,
              help="ε > 0. Omit with --accuracy to get the ε needed.")
@delta_option
@number_option("--sensitivity", kind=RANGES["sensitivity"], default=1.0, show_default=True,
              help="Δ₂: L2 sensitivity of the query.")
@click.option("--method", type=click.Choice(["analytic", "classical"]), default="analytic",
              show_default=True,
              help="analytic: Balle & Wang 2018 Thm 8 (exact); classical: Dwork & Roth Thm A.1 (ε < 1 only).")
@number_option("--beta", kind=RANGES["beta"], default=None,
              help="β in (0, 1): show error bounds at confidence 1 − β (0.05 with --accuracy).")
@number_option("--dims", kind=RANGES["dims"], default=1, show_default=True, help="k: number of noisy coordinates.")
@number_option("--accuracy", kind=RANGES["accuracy"], default=None,
              help="α > 0: target error; prints the ε needed (inverse).")
@click.option("--norm", type=click.Choice(["linf", "l2"]), default="linf", show_default=True,
              help="Norm of the --accuracy target (linf = max coordinate error).")
@number_option("--release", "release", kind=RANGES["release"], default=None,
              help="Add exact discrete Gaussian noise to this value and print it (integer unless --granularity).")
@number_option("--granularity", kind=RANGES["granularity"], default=None,
              help="g > 0: round the released value to multiples of g (sensitivity rescaled to ⌈Δ₂/g⌉ steps).")
@release_ledger_options
@json_option
def gaussian_command(epsilon, delta, sensitivity, method, beta, dims, accuracy, norm, release,
                     granularity, ledger_path, ledger_dataset, json_output):
    """Gaussian mechanism: the noise std σ for (ε, δ)-DP, analytic vs classical.

    analytic (default) is the exact calibration of Balle & Wang 2018 (Thm 8): the
    smallest σ with Φ(Δ/2σ − εσ/Δ) − e^ε·Φ(−Δ/2σ − εσ/Δ) ≤ δ. classical is
    σ = Δ·√(2 ln(1.25/δ))/ε (Dwork & Roth Thm A.1), a theorem only for ε < 1.
    Also prints the zCDP ρ = Δ²/(2σ²) and the GDP μ = Δ/σ of the calibrated
    mechanism and, with --beta, per-coordinate, ℓ∞ and ℓ2 error bounds. --release with
    --ledger FILE --dataset NAME records the release (ρ-zCDP, CKS20 Thm 4) before the
    noise is drawn, and refuses it past the dataset's budget.
    """
    from dpcalc.cli.ledger import release_guard
    from dpcalc.mechanisms import gaussian as g

    guard = release_guard(ledger_path, ledger_dataset, releasing=release is not None)
    if release is not None:
        from dpcalc.mechanisms.discrete import release_gaussian

        epsilon = require_release_epsilon(epsilon)
        if guard is not None:
            _reserve_gaussian(guard, release, epsilon, delta, sensitivity, granularity)
        res = release_gaussian(value=release, epsilon=epsilon, delta=delta, sensitivity=sensitivity,
                               granularity=granularity)
        inputs = {"epsilon": epsilon, "delta": delta, "sensitivity": sensitivity,
                  "granularity": granularity, "release": release}
        emit_release("gaussian", res, inputs=inputs, guard=guard, json_output=json_output,
                     title="released value (exact discrete Gaussian)",
                     columns=[Column("δ (discrete, computed)", lambda r: fmt(r["delta_discrete"], rounding="up")),
                              Column("ρ (zCDP)", lambda r: fmt(r["rho"], 4, "up")),
                              Column("granularity g", lambda r: fmt(r["granularity"])),
                              Column("sensitivity (steps of g)", lambda r: fmt(r["sensitivity_units"])),
                              Column("σ", lambda r: fmt(r["noise_std"], 7, "up"))])
        return

    beta = calculator_beta(epsilon, accuracy, beta)
    if accuracy is not None:
        results = g.gaussian_epsilon_for_accuracy(accuracy=accuracy, beta=beta, delta=delta,
                                                  sensitivity=sensitivity, dims=dims, norm=norm)
        inputs = {"accuracy": accuracy, "norm": norm, "beta": beta, "dims": dims, "delta": delta,
                  "sensitivity": sensitivity}
        cols = [Column("method", lambda r: r["method"], "left"),
                Column("ε needed", lambda r: "∞" if r.get("epsilon") is None and r.get("reason")
                       and r.get("applicable", True) else fmt(r["epsilon"], rounding="up")),
                Column("σ", lambda r: fmt(r["noise_std"])),
                Column("ρ (zCDP)", lambda r: fmt(r["details"].get("rho"), rounding="up")),
                Column("μ (GDP)", lambda r: fmt(r["details"].get("mu"), rounding="up")),
                Column("status", _status, "left")]
        notes = [f"σ is the largest noise std with Pr(‖error‖ ≥ {fmt(accuracy)}) ≤ β = {fmt(beta)} "
                 f"({norm}, k = {dims}, exact Gaussian quantile)."]
        title = "ε needed for the accuracy target"
    else:
        results = g.calibrate_gaussian(epsilon=epsilon, delta=delta, sensitivity=sensitivity,
                                       method=method, beta=beta, dims=dims)
        inputs = {"epsilon": epsilon, "delta": delta, "sensitivity": sensitivity, "method": method,
                  "beta": beta, "dims": dims}
        cols = [Column("method", lambda r: r["method"], "left"),
                Column("σ (noise std)", lambda r: fmt(r["noise_std"], 7, "up")),
                Column("σ/Δ₂", lambda r: fmt(r["noise_multiplier"], 7, "up")),
                Column("saving vs classical", _saving),
                Column("ρ (zCDP)", lambda r: fmt(r["details"].get("rho"), rounding="up")),
                Column("μ (GDP)", lambda r: fmt(r["details"].get("mu"), rounding="up"))]
        notes = []
        if beta is not None:
            cols += [Column("per-coord α", _acc("per_coordinate")), Column("ℓ∞ α", _acc("linf")),
                     Column("ℓ2 α", _acc("l2"))]
            notes.append(f"Error bounds: Pr(error ≥ α) = β = {fmt(beta)} for k = {dims} independent "
                         "N(0, σ²) coordinates (exact quantiles).")
        cols.append(Column("status", _status, "left"))
        title = "Gaussian mechanism"
    notes.append("Sources — " + "; ".join(f"{r.method}: {r.source}" for r in results) + ".")
    emit(command="gaussian", inputs=inputs, results=[r.to_json() for r in results],
         json_output=json_output, columns=cols, title=title, notes=notes)


def _reserve_gaussian(guard, release, epsilon, delta, sensitivity, granularity) -> None:
    """Record a discrete Gaussian release before its noise is drawn. The filter accounts it as
    the Gaussian mechanism of noise multiplier σ/Δ' (Δ' = ⌈Δ₂/g⌉ grid steps): the discrete
    Gaussian is (Δ'²/2σ²)-zCDP, i.e. has the continuous Gaussian's RDP curve at every order
    (Canonne, Kamath, Steinke 2020 Thm 4); the non-adaptive accountants use its computed
    (ε, δ) guarantee (CKS20 Thm 7), which holds for the discrete pmf."""
    from dpcalc import _validate as v
    from dpcalc.events import EpsilonDeltaEvent, GaussianEvent
    from dpcalc.mechanisms.discrete import _grid, discrete_gaussian_delta, discrete_gaussian_sigma

    _, g, _, units = _grid(release, sensitivity, granularity)  # bad input: refused unrecorded
    eps = v.positive("epsilon", float(epsilon))
    delta = v.open_unit("delta", delta)
    sigma = discrete_gaussian_sigma(epsilon=eps, delta=delta, sensitivity=units)  # as release_gaussian
    d_disc = discrete_gaussian_delta(epsilon=eps, sigma=sigma, sensitivity=units)
    guard.reserve(mechanism="discrete-gaussian", event=GaussianEvent(sigma / units),
                  dp_event=EpsilonDeltaEvent(eps, d_disc),
                  params={"epsilon": eps, "delta": delta, "delta_discrete": d_disc, "sensitivity": sensitivity,
                          "granularity": None if granularity is None else float(g),
                          "sensitivity_units": units, "noise_std_units": sigma})
