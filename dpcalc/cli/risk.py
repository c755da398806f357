"""``dpcalc risk``: what an ε means — membership-inference and reconstruction bounds from the
whole privacy curve, beside what the single (ε, δ) pair gives."""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from typing import Any

import click

from dpcalc.accounting.registry import default_accountant
from dpcalc.cli.options import (
    RANGES,
    OnlyWith,
    StrictCommand,
    accountant_option,
    accountant_settings,
    accountant_takes,
    example_epilog,
    json_option,
    neighboring_option,
    noise_multiplier_option,
    number_option,
    pld_options,
    sampling_options,
)
from dpcalc.cli.person import group_size_option
from dpcalc.cli.render import Column, emit, fmt

_LABELS = {
    "tpr_at_fpr": lambda r: f"TPR at FPR = {r['fpr']:g}",
    "advantage": lambda r: "advantage TPR − FPR",
    "balanced_accuracy": lambda r: "balanced accuracy",
    "prior_success": lambda r: f"P(guess right), prior {r['prior']:g}",
    "reconstruction": lambda r: f"reconstruction, baseline κ = {r['baseline']:g}",
}


def _cell_up(r: Mapping[str, Any], key: str) -> str:
    return fmt(r.get(key), 6, "up")


def _bracket(r: Mapping[str, Any]) -> str:
    lo = r.get("bound_lower")
    return "—" if lo is None else f"[{fmt(lo, 6, 'down')}, {fmt(r.get('bound'), 6, 'up')}]"


def _columns(pair_label: str | None) -> list[Column]:
    cols = [Column("attack bound", lambda r: _LABELS[r["quantity"]](r), "left"),
            Column("full curve", lambda r: _cell_up(r, "bound")),
            Column("exact curve within", _bracket)]
    if pair_label:
        cols.append(Column(pair_label, lambda r: _cell_up(r, "single_pair")))
    return cols


#: at most this many distinct mechanisms in a --spec (after identical entries are merged): each
#: profile evaluation composes every distinct one separately (~15–25 ms each with pld/rdp, up to
#: 24 evaluations), so 256 stay within seconds; larger sequences: dpcalc compose
RISK_MAX_DISTINCT = 256


def _curve_mode(p: dict) -> bool:
    return p.get("noise_multiplier") is not None or p.get("spec") is not None


def _run_mode(p: dict) -> bool:
    return p.get("noise_multiplier") is not None


def _with_accountant(option: str):
    takes = accountant_takes(option)
    return lambda p: _curve_mode(p) and takes(p)


_RUN = OnlyWith("with --sigma (a DP-SGD run)", _run_mode)
_CURVE = OnlyWith("with --sigma or --spec (an accountant's privacy curve)", _curve_mode)
#: the option table (docs/design.md §5): which mode of risk uses which option
ONLY_WITH = {
    "sample_rate": _RUN, "steps": _RUN, "batch_size": _RUN, "dataset_size": _RUN, "epochs": _RUN, "group_size": _RUN,
    "accountant": _CURVE, "neighboring": _CURVE,
    "discretization": OnlyWith("with --sigma or --spec and an accountant that takes it (pld)",
                               _with_accountant("discretization")),
    "accuracy": OnlyWith("with --sigma or --spec and an accountant that takes it (pld)",
                         _with_accountant("accuracy")),
}


def _read_spec(spec: str):
    """The --spec sequence, read by the one safe reader and bounded in size and distinct items."""
    from dpcalc.composition.spec import load_spec_file
    from dpcalc.errors import ParameterError

    sequence = load_spec_file(spec)
    if len(sequence) > RISK_MAX_DISTINCT:
        raise ParameterError("spec", f"at most {RISK_MAX_DISTINCT} distinct mechanisms", len(sequence), message=(
            f"--spec {spec!r} has {len(sequence):,} distinct mechanisms; risk evaluates the privacy curve of at "
            f"most {RISK_MAX_DISTINCT} (each is composed separately at every point of the curve): merge "
            "identical entries, or use dpcalc compose for its ε"))
    return sequence


@click.command("risk", cls=StrictCommand, only_with=ONLY_WITH, epilog=example_epilog(
    "dpcalc risk --sigma 4 --sample-rate 0.01 --steps 10000 --delta 1e-5",
    "dpcalc risk --eps 8 --delta 1e-5",
    "dpcalc risk --eps 1 --fpr 0.01",
    "dpcalc risk --gdp 1 --delta 1e-5 --plot tradeoff.png",
))
@noise_multiplier_option(default=None,
               help="σ of a DP-SGD run (with the sampling options), as in `dpcalc epsilon`.")
@sampling_options
@group_size_option
@click.option("--spec", type=str, default=None,
              help="A mechanism sequence file, as in `dpcalc compose --spec` (a regular file of at most "
                   f"16 MiB, at most {RISK_MAX_DISTINCT} distinct mechanisms).")
@number_option("--eps", "--epsilon", "epsilon", kind=RANGES["epsilon_dp"], default=None,
               help="A bare (ε, δ) guarantee to interpret (with --delta; without it, or with --delta 0, "
                    "pure ε-DP).")
@number_option("--gdp", "mu", kind=RANGES["mu"], default=None, help="μ of a μ-GDP guarantee (exact curve).")
@number_option("--delta", kind=RANGES["delta_risk"], default=None,
               help="δ of the (ε, δ) pair shown beside the full-curve bounds: needed (> 0) with --sigma and "
                    "--spec; with --eps default 0 (pure ε-DP); with --gdp optional (no pair column without it).")
@accountant_option(default=default_accountant, help="Accountant whose privacy curve is used.")
@neighboring_option
@pld_options
@number_option("--fpr", "fprs", kind=RANGES["fpr"], multiple=True,
               help="Extra FPR at which to bound the TPR, in (0, 1) (repeatable; 1e-4 … 1e-1 always).")
@number_option("--prior", "priors", kind=RANGES["prior"], multiple=True,
               help="Prior probability of membership π, in (0, 1): bound on a Bayes attacker's P(guess right).")
@number_option("--baseline", "baselines", kind=RANGES["baseline"], multiple=True,
               help="Reconstruction baseline κ in (0, 1) (chance of success without the output).")
@click.option("--plot", type=click.Path(dir_okay=False), default=None,
              help="Write the trade-off curve and the log-log ROC bound to this PNG or SVG (by the extension).")
@json_option
def risk_command(noise_multiplier, sample_rate, steps, batch_size, dataset_size, epochs, group_size, spec, epsilon, mu,
                 delta, accountant, neighboring, discretization, accuracy, fprs, priors, baselines, plot,
                 json_output):
    """What an ε means: bounds on membership inference and reconstruction.

    The whole privacy curve bounds every attack: the best membership test's TPR at each FPR
    (the trade-off curve of f-DP), its advantage and balanced accuracy, a Bayes attacker's
    chance with a given prior, and reconstruction success with a given baseline. Each is an
    upper bound on attack success (certified when the accountant is), beside the bound the
    single (ε, δ) pair gives.
    """
    from dpcalc import _validate as v
    from dpcalc.errors import ParameterError
    from dpcalc.risk.curve import DEFAULT_FPRS, curve_from_accountant, gdp_curve, pair_curve

    if plot is not None:  # a plot target that cannot be written is refused before any work
        from dpcalc.cli.plot import check_target, require_matplotlib

        check_target(plot)
        require_matplotlib()
    fpr_list = sorted(set(DEFAULT_FPRS) | {v.open_unit("fpr", x) for x in fprs})
    priors = [v.open_unit("prior", x) for x in priors]
    baselines = [v.open_unit("baseline", x) for x in baselines]
    sources = [x is not None for x in (noise_multiplier, spec, epsilon, mu)]
    if sum(sources) != 1:
        raise ParameterError("sigma", "", None,
                             message="give exactly one of --sigma (with sampling options), --spec, --eps or --gdp")
    inputs: dict[str, Any] = {}
    notes: list[str] = []
    pair: tuple[float, float] | None
    if epsilon is not None:
        delta = 0.0 if delta is None else v.closed_unit("delta", delta)
        curve = pair_curve(epsilon, delta)
        pair = (curve.epsilons[0], delta)
        inputs = {"epsilon": epsilon, "delta": delta}
        if delta == 0:
            notes.append("Pure ε-DP (δ = 0): the trade-off curve is f_ε(α) = max{0, 1 − e^ε·α, e^{−ε}(1 − α)}, "
                         "so TPR ≤ min{e^ε·α, 1 − e^{−ε}(1 − α)} at FPR α (Kairouz, Oh, Viswanath 2015 Thm 2.1).")
        notes.append("A bare (ε, δ) guarantee: its trade-off curve is f_{ε,δ} itself, so the full curve "
                     "and the pair agree; an accountant's whole curve (--sigma/--spec) is usually far tighter.")
    elif mu is not None:
        from dpcalc.mechanisms.gaussian import gaussian_epsilon

        curve = gdp_curve(mu)
        inputs = {"mu": mu}
        if delta is None or (delta == 0 and mu > 0):
            pair = None
            notes.append("μ-GDP: exact trade-off curve f(α) = Φ(Φ⁻¹(1 − α) − μ), so TPR ≤ Φ(Φ⁻¹(α) + μ) at FPR α "
                         "(Dong, Roth, Su 2022 Def 2.7); no δ is needed"
                         + ("" if delta is None else " (μ-GDP with μ > 0 is ε-DP for no finite ε at δ = 0)")
                         + "; give --delta for the (ε, δ) pair beside it.")
        else:
            delta = v.closed_unit("delta", delta)
            pair = (gaussian_epsilon(delta=delta, mu=mu) if mu > 0 else 0.0, delta)
            notes.append(f"μ-GDP: exact trade-off curve; the pair is its exact ε at δ = {delta:g} "
                         "(Balle & Wang 2018 Thm 8).")
        if delta is not None:
            inputs["delta"] = delta
    else:
        if delta is None or delta == 0:
            raise ParameterError("delta", "in (0, 1)", delta, message=(
                "--delta is needed with --sigma and --spec, in (0, 1)"
                + ("" if delta is None else ", got 0") + ": an accountant's (ε, δ) curve has ε = ∞ at δ = 0"))
        if spec is not None:
            from dpcalc.composition.compose import sequence_event

            event = sequence_event(_read_spec(spec))
            inputs = {"spec": spec, "delta": delta, "neighboring": neighboring}
        else:
            from dpcalc.events import dpsgd_event
            from dpcalc.schedule import resolve_schedule

            schedule = resolve_schedule(sample_rate=sample_rate, steps=steps, batch_size=batch_size,
                                        dataset_size=dataset_size, epochs=epochs, group_size=group_size)
            event = dpsgd_event(noise_multiplier=noise_multiplier, sample_rate=schedule.sample_rate,
                                steps=schedule.steps, group_size=schedule.group_size)
            inputs = {"noise_multiplier": noise_multiplier, **schedule.as_inputs(), "delta": delta,
                      "neighboring": neighboring}
        options = accountant_settings(discretization=discretization, accuracy=accuracy).get(accountant, {})
        with warnings.catch_warnings():  # numpy's overflow warnings: the result (or error) says it
            warnings.simplefilter("ignore", RuntimeWarning)
            curve, head = curve_from_accountant(event, accountant=accountant, delta=delta,
                                                neighboring=neighboring, options=options, fprs=fpr_list,
                                                priors=priors, baselines=baselines)
        eps_head = head.epsilon if head.epsilon is not None else math.inf
        pair = (eps_head, delta)
        notes += list(curve.notes)
        inputs["accountant"] = accountant
    rows = curve.bounds(fprs=fpr_list, priors=priors, baselines=baselines, pair=pair)
    gap = curve.gap()
    if gap is not None and curve.method not in ("gdp-exact", "epsilon-delta"):
        notes.append(f"The curve of the exact privacy profile lies within {fmt(gap, 3, 'up')} (TPR, absolute, "
                     "over all FPR) of the printed one; brackets per bound in 'exact curve within'.")
    status = "certified upper bounds" if curve.certified else "APPROXIMATE (not certified)"
    notes.insert(0, f"{curve.method}: {status} on attack success — no membership test or reconstruction "
                    "attack on this output does better, whatever the attacker knows.")
    if curve.rdp is not None:
        notes.append(f"{curve.method}: TPR bounds also use the Rényi-DP region of each binary test (Balle et al. 2020).")
    notes.append(f"Sources — {curve.source}.")
    pair_label = None if pair is None else f"from (ε, δ) = ({fmt(pair[0], 4, 'up')}, {pair[1]:g}) alone"
    if plot:
        from dpcalc.cli.risk_plot import plot_risk

        plot_risk(curve, pair, plot)
        notes.append(f"Plot written to {plot}.")
    results = [dict(r) for r in rows]
    if json_output:
        results.append({"quantity": "privacy_profile", "method": curve.method, "certified": curve.certified,
                        "epsilon": list(curve.epsilons), "delta": list(curve.deltas),
                        "delta_lower": None if curve.deltas_lower is None else list(curve.deltas_lower),
                        "mu": curve.mu, "gap": gap, "single_pair": None if pair is None else list(pair)})
    emit(command="risk", inputs=inputs, results=results, json_output=json_output,
         columns=_columns(pair_label), title="What the privacy curve allows an attacker (upper bounds)",
         notes=notes)
