"""``dpcalc convert``: group privacy, amplification by Poisson subsampling and by shuffling, pure DP ↔ zCDP ↔ (ε, δ)."""

from __future__ import annotations

import click

from dpcalc.cli.options import (
    RANGES,
    StrictCommand,
    StrictGroup,
    example_epilog,
    json_option,
    number_option,
)
from dpcalc.cli.render import Column, emit, fmt


def _notes(res) -> list[str]:
    notes = [f"{res.details['note']}." ] if "note" in res.details else []
    return notes + ["Source: " + res.source + "."]


@click.group("convert", cls=StrictGroup, epilog=example_epilog(
    "dpcalc convert group --eps 1 --delta 1e-6 --group-size 4",
    "dpcalc convert subsample --eps 2 --delta 1e-5 --sample-rate 0.01",
    "dpcalc convert zcdp --rho 0.5 --delta 1e-5",
    "dpcalc convert shuffle --eps0 4 --n 100000 --delta 1e-6",
))
def convert_group():
    """Conversions: group privacy, amplification by subsampling and by shuffling, zCDP."""


@convert_group.command("group", epilog=example_epilog("dpcalc convert group --eps 1 --delta 1e-6 --group-size 4"))
@number_option("--eps", "--epsilon", "epsilon", kind=RANGES["epsilon_dp"], required=True, help="ε ≥ 0 per individual.")
@number_option("--delta", kind=RANGES["delta_closed"], default=0.0, show_default=True, help="δ in [0, 1] per individual.")
@number_option("--group-size", kind=RANGES["group_size"], required=True, help="k ≥ 1 records in the group.")
@json_option
def group_command(epsilon, delta, group_size, json_output):
    """Group privacy: (ε, δ) ⇒ (kε, δ·(e^{kε} − 1)/(e^ε − 1)) for groups of k records."""
    from dpcalc.mechanisms.conversions import group_privacy

    res = group_privacy(epsilon=epsilon, delta=delta, group_size=group_size)
    emit(command="convert group", inputs={"epsilon": epsilon, "delta": delta, "group_size": group_size},
         results=[res.to_json()], json_output=json_output, title="group privacy",
         columns=[Column("group size k", lambda r: fmt(r["group_size"])),
                  Column("ε (group)", lambda r: fmt(r["epsilon"], rounding="up")),
                  Column("δ (group)", lambda r: fmt(r["delta"], rounding="up")),
                  Column("δ, loose k·e^{(k−1)ε}·δ", lambda r: fmt(r["details"]["delta_loose"], rounding="up"))],
         notes=_notes(res))


@convert_group.command("subsample", epilog=example_epilog(
    "dpcalc convert subsample --eps 2 --delta 1e-5 --sample-rate 0.01"))
@number_option("--eps", "--epsilon", "epsilon", kind=RANGES["epsilon_dp"], required=True, help="ε ≥ 0 of the mechanism.")
@number_option("--delta", kind=RANGES["delta_closed"], default=0.0, show_default=True, help="δ in [0, 1].")
@number_option("-q", "--sample-rate", kind=RANGES["sample_rate_convert"], required=True, help="q in (0, 1]: Poisson sampling rate.")
@json_option
def subsample_command(epsilon, delta, sample_rate, json_output):
    """Amplification by Poisson subsampling: (ε, δ) ⇒ (ln(1 + q(e^ε − 1)), qδ), add/remove adjacency."""
    from dpcalc.mechanisms.conversions import poisson_subsampling

    res = poisson_subsampling(epsilon=epsilon, delta=delta, sample_rate=sample_rate)
    emit(command="convert subsample",
         inputs={"epsilon": epsilon, "delta": delta, "sample_rate": sample_rate},
         results=[res.to_json()], json_output=json_output, title="amplification by Poisson subsampling",
         columns=[Column("q", lambda r: fmt(r["sample_rate"])),
                  Column("ε (subsampled)", lambda r: fmt(r["epsilon"], rounding="up")),
                  Column("δ (subsampled)", lambda r: fmt(r["delta"], rounding="up",
                                                           exact=r["details"].get("delta_decimal")))],
         notes=_notes(res) + ["Assumes Poisson sampling and add/remove adjacency."])


@convert_group.command("zcdp", epilog=example_epilog(
    "dpcalc convert zcdp --eps 1", "dpcalc convert zcdp --rho 0.5 --delta 1e-5"))
@number_option("--eps", "--epsilon", "epsilon", kind=RANGES["epsilon_pure"], default=None,
               help="ε of a pure ε-DP mechanism: prints ρ = ε²/2.")
@number_option("--rho", kind=RANGES["rho"], default=None, help="ρ > 0 of a ρ-zCDP mechanism: prints ε at --delta.")
@number_option("--delta", kind=RANGES["delta"], default=None, help="δ in (0, 1), with --rho.")
@json_option
def zcdp_command(epsilon, rho, delta, json_output):
    """ε-DP ⇒ (ε²/2)-zCDP (Bun & Steinke 2016), or ρ-zCDP ⇒ (ε, δ)-DP (Canonne, Kamath, Steinke 2020)."""
    from dpcalc.errors import ParameterError
    from dpcalc.mechanisms.conversions import pure_to_zcdp, zcdp_to_epsilon

    if (epsilon is None) == (rho is None):
        raise ParameterError("rho", "given", rho, message="rho or --eps is required (one, not both)")
    if epsilon is not None and delta is not None:
        raise ParameterError("delta", "given with --rho only", delta, message=(
            "delta is used with --rho only: ε-DP is (ε²/2)-zCDP whatever δ (Bun & Steinke 2016 "
            "Prop 1.4); for (ε, δ) from zCDP run: dpcalc convert zcdp --rho ρ --delta δ"))
    if epsilon is not None:
        res = pure_to_zcdp(epsilon=epsilon)
        emit(command="convert zcdp", inputs={"epsilon": epsilon}, results=[res.to_json()],
             json_output=json_output, title="pure DP to zCDP",
             columns=[Column("ε", lambda r: fmt(r["epsilon"])), Column("ρ", lambda r: fmt(r["rho"], rounding="up"))],
             notes=_notes(res))
        return
    if delta is None:
        raise ParameterError("delta", "given", None, message="delta is required with --rho")
    res = zcdp_to_epsilon(rho=rho, delta=delta)
    emit(command="convert zcdp", inputs={"rho": rho, "delta": delta}, results=[res.to_json()],
         json_output=json_output, title="zCDP to (ε, δ)-DP",
         columns=[Column("ρ", lambda r: fmt(r["rho"])), Column("δ", lambda r: fmt(r["delta"])),
                  Column("ε (CKS20)", lambda r: fmt(r["epsilon"], rounding="up")),
                  Column("order α", lambda r: fmt(r["details"]["order"], 4)),
                  Column("ε (ρ + 2√(ρ ln 1/δ))", lambda r: fmt(r["details"]["epsilon_bun_steinke"], rounding="up"))],
         notes=_notes(res))


@convert_group.command("shuffle", cls=StrictCommand, epilog=example_epilog(
    "dpcalc convert shuffle --eps0 4 --n 100000 --delta 1e-6"))
@number_option("--eps0", "eps0", kind=RANGES["eps0"], required=True,
               help="ε₀ > 0: each report's local randomizer is ε₀-LDP (pure).")
@number_option("--n", "n", kind=RANGES["reports"], required=True, help="n: number of shuffled reports.")
@number_option("--delta", kind=RANGES["delta"], required=True, help="δ in (0, 1) of the central guarantee.")
@json_option
def shuffle_command(eps0, n, delta, json_output):
    """Amplification by shuffling: n shuffled ε₀-LDP reports are (ε, δ)-DP centrally.

    Feldman, McMillan, Talwar 2021 ("Hiding among the clones"): the numerical bound (their
    clone reduction evaluated exactly; any n, ε₀) and the closed form of their Thm 3.1 (only
    for ε₀ ≤ ln(n/(16 ln(4/δ))); refused outside, with the reason). Replace-one adjacency of
    the n users' records.
    """
    from dpcalc.mechanisms.shuffling import shuffle_amplification

    results = shuffle_amplification(eps0=eps0, n=n, delta=delta)
    notes = [f"{r.method}: not applicable — {r.reason}." for r in results if not r.applicable]
    notes += ["Central guarantee of the shuffled multiset of the n reports (replace-one adjacency); "
              "never larger than ε₀ (post-processing of ε₀-LDP).",
              "The stronger clone of Feldman, McMillan, Talwar SODA 2023 is not used: its erratum restricts "
              "its general bound to a class of local randomizers.",
              "Sources: " + "; ".join(r.source for r in results) + "."]
    emit(command="convert shuffle", inputs={"eps0": eps0, "n": n, "delta": delta},
         results=[r.to_json() for r in results], json_output=json_output,
         title="amplification by shuffling", input_labels={"eps0": "ε₀"},
         columns=[Column("bound", lambda r: r["method"], "left"),
                  Column("ε (central)", lambda r: fmt(r["epsilon"], rounding="up")),
                  Column("δ", lambda r: fmt(r["delta"])),
                  Column("ε₀ / ε", lambda r: fmt(r["eps0"] / r["epsilon"], 4, "down")
                         if r["epsilon"] else "—")],
         notes=notes)
