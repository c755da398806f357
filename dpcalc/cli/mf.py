"""``dpcalc mf``: correlated-noise (matrix-factorization) mechanisms — DP-FTRL tree aggregation,
the Toeplitz square root, banded, BLT and dense strategies: sensitivity, σ/ε, prefix-sum error
and the DP-SGD rows at the same (ε, δ)."""

from __future__ import annotations

import click

from dpcalc.cli.options import (
    RANGES,
    Number,
    StrictCommand,
    delta_option,
    example_epilog,
    json_option,
    noise_multiplier_option,
    number_option,
)
from dpcalc.cli.render import Column, emit, fmt

_STEPS = Number("[1, inf)", "[1, 1e6]", whole=True, domain_text="a whole number >= 1")
_EPOCHS = Number("[1, inf)", "[1, 1e6]", whole=True, domain_text="a whole number >= 1")
_BANDS = Number("[1, inf)", "[1, 1e4]", whole=True, domain_text="a whole number >= 1")


def _status(r) -> str:
    if r.get("applicable") is False:
        return "n/a: " + (r.get("reason") or "")
    return "certified" if r.get("certified") else "approx."


def _exact(r) -> str:
    if r.get("sensitivity") is None:
        return "—"
    return "exact" if r.get("sensitivity_exact") else "bound"


def _vs(first):
    def get(r) -> str:
        if r.get("rmse") is None or not first.get("rmse"):
            return "—"
        return f"{r['rmse'] / first['rmse']:.3g}×"
    return get


@click.command("mf", cls=StrictCommand, epilog=example_epilog(
    "dpcalc mf --strategy sqrt --steps 1000 --eps 3 --delta 1e-5 --no-poisson",
    "dpcalc mf --strategy banded:8 --steps 2000 --epochs 10 --eps 3 --delta 1e-5",
    "dpcalc mf --strategy tree-honaker --steps 1024 --sigma 5 --delta 1e-5 --no-poisson",
    "dpcalc mf --optimize banded --bands 16 --steps 2000 --epochs 4 --eps 2 --delta 1e-6 --no-poisson",
))
@click.option("--strategy", default=None, metavar="SPEC",
              help="C: tree | tree-honaker | sqrt | banded:B | blt:DECAYS/SCALES | dense:FILE.npy | identity.")
@click.option("--optimize", type=click.Choice(["banded"]), default=None,
              help="Optimize a banded Toeplitz C (--bands B) for the prefix-sum error instead of --strategy.")
@number_option("--bands", kind=_BANDS, default=None, help="B: bands of the --optimize banded strategy.")
@number_option("--steps", kind=_STEPS, required=True, help="n: steps (prefix sums released).")
@number_option("--epochs", kind=_EPOCHS, default=1, show_default=True,
              help="k: participations of one record (the tree restarts every epoch).")
@number_option("--min-separation", "min_separation", kind=_STEPS, default=None,
              help="b: fewest steps between two participations [default: steps // epochs, which assumes "
                   "the same record order every epoch; with a reshuffle per epoch use 1].")
@noise_multiplier_option(default=None, help="σ: noise std over the sensitivity (prints ε).")
@number_option("--eps", "--epsilon", "epsilon", kind=RANGES["epsilon_target"], default=None,
              help="Target ε (prints the σ needed).")
@delta_option
@number_option("--sample-rate", "sample_rate", kind=RANGES["sample_rate"], default=None,
              help="q: Poisson rate of the DP-SGD comparison [default: epochs/steps].")
@click.option("--no-poisson", is_flag=True,
              help="Skip the rows that need a DP-SGD calibration (Poisson, amplified banded).")
@json_option
def mf_command(strategy, optimize, bands, steps, epochs, min_separation, noise_multiplier, epsilon,
               delta, sample_rate, no_poisson, json_output):
    """Correlated noise: matrix-factorization mechanisms (DP-FTRL, BandMF, BLT).

    The released prefix sums of n clipped gradients are A·x + B·z with A = B·C (A: prefix
    sums); privacy is the Gaussian mechanism on C·x with the sensitivity Δ of C for k
    participations at least b steps apart — exact where a theorem gives it, else a proven upper
    bound, with the source printed. Prints σ (noise std / Δ) or ε (exact μ-GDP, μ = 1/σ), the
    RMSE and largest error std of the n prefix sums (per coordinate, clip norm 1), and DP-SGD
    without amplification and with Poisson sampling at the same (ε, δ).
    """
    from dpcalc.accounting.correlated import mf_compare
    from dpcalc.errors import ParameterError
    from dpcalc.mechanisms.correlated import Participation
    from dpcalc.mechanisms.correlated.spec import parse_strategy

    if (strategy is None) == (optimize is None):
        raise click.UsageError("give exactly one of --strategy and --optimize")
    if (noise_multiplier is None) == (epsilon is None):
        raise click.UsageError("give exactly one of --sigma and --eps")
    if optimize is not None and bands is None:
        raise click.UsageError("--optimize banded needs --bands B")
    if optimize is None and bands is not None:
        raise click.UsageError("--bands goes with --optimize banded (use --strategy banded:B otherwise)")
    participation = Participation(steps, epochs, min_separation)
    if optimize is not None:
        from dpcalc.mechanisms.correlated.optimize import optimize_banded

        if bands > steps:
            raise ParameterError("bands", f"a whole number in [1, steps = {steps}]", bands)
        c = optimize_banded(participation, bands)
    else:
        c = parse_strategy(strategy, steps=steps, epochs=epochs)
    rows = mf_compare(c, participation, delta=delta, noise_multiplier=noise_multiplier, epsilon=epsilon,
                      sample_rate=sample_rate, poisson=not no_poisson)
    results = [r.to_json() for r in rows]
    first = results[0]
    sens = first["details"]["sensitivity"]
    inputs = {"strategy": c.name, "steps": steps, "epochs": participation.epochs,
              "min_separation": participation.min_separation if participation.epochs > 1 else None,
              "delta": delta, "noise_multiplier": noise_multiplier, "epsilon": epsilon,
              "sample_rate": sample_rate}
    notes = [
        f"Sensitivity of {c.name}: {fmt(sens['sensitivity'], 7, 'up')} "
        f"({'exact' if sens['exact'] else 'upper bound'}) — {sens['method']}; achieved by a record at "
        f"steps {', '.join(str(i) for i in sens['pattern_start'])}{', …' if sens['pattern_size'] > 5 else ''}"
        f" ({sens['pattern_size']} participation{'s' if sens['pattern_size'] > 1 else ''}): "
        f"{fmt(sens['achieved'], 7, 'down')}.",
        f"Privacy: the Gaussian mechanism on C·x with noise std σ·Δ = {fmt(first.get('noise_std'), 7, 'up')}, "
        + ("μ-GDP with μ = 1/σ exactly" if sens["exact"] else "μ-GDP with μ ≤ 1/σ (Δ is an upper bound)")
        + " (Balle & Wang 2018 Thm 8); neighbouring: one record's gradients replaced by zero (zero-out, "
        "with the participation layout fixed; replace-one doubles Δ). The Poisson rows are add/remove.",
        f"Errors per gradient coordinate (clip norm 1), decoder {first['details']['decoder']}: RMSE over the "
        f"{steps} prefix sums and the largest error std; DP-SGD rows: noise only.",
    ]
    if participation.epochs > 1:
        notes.append(f"Participation: {participation.epochs} per record, at least "
                     f"{participation.min_separation} steps apart"
                     + (" (the default steps // epochs assumes the same record order every epoch; with a "
                        "reshuffle per epoch, two participations can be 1 step apart: --min-separation 1)"
                        if min_separation is None else "") + ".")
    notes += [f"{r['method']}: {r['source']}." for r in results[1:] if r.get("source")]
    if optimize is not None:
        coefs = ", ".join(f"{x:.6g}" for x in c.coefs[:8])
        notes.append(f"Optimized C (McKenna 2024 objective Δ²·‖A C⁻¹‖_F², L-BFGS-B): c = {coefs}"
                     f"{', …' if c.coefs.size > 8 else ''}.")
    cols = [Column("method", lambda r: r["method"], "left"),
            Column("σ", lambda r: fmt(r.get("noise_multiplier"), 7, "up")),
            Column("Δ", lambda r: fmt(r.get("sensitivity"), 7, "up")),
            Column("Δ is", _exact),
            Column("ε", lambda r: fmt(r.get("epsilon"), rounding="up")),
            Column("RMSE", lambda r: fmt(r.get("rmse"), 5)),
            Column("max error", lambda r: fmt(r.get("max_error"), 5)),
            Column("RMSE ratio", _vs(first)),
            Column("status", _status, "left")]
    emit(command="mf", inputs=inputs, results=results, json_output=json_output, columns=cols,
         title="matrix-factorization mechanism vs DP-SGD (same ε, δ)", notes=notes)
