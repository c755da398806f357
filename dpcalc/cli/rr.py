"""``dpcalc rr``: randomized-response probabilities and unbiased frequency estimates."""

from __future__ import annotations

import click

from dpcalc.cli.options import RANGES, StrictCommand, example_epilog, json_option, number_option
from dpcalc.cli.render import Column, emit, fmt


@click.command("rr", cls=StrictCommand, epilog=example_epilog(
    "dpcalc rr --eps 1.0986",
    "dpcalc rr --eps 1 --categories 3 --observed 500,300,200",
))
@number_option("--eps", "--epsilon", "epsilon", kind=RANGES["epsilon_rr"], required=True, help="ε > 0 (local DP).")
@number_option("--categories", kind=RANGES["categories"], default=2, show_default=True,
              help="k ≥ 2 answer categories (2 = Warner's binary randomized response).")
@click.option("--observed", type=str, default=None,
              help="Counts of each reported category, comma-separated (k numbers): estimate the true frequencies.")
@json_option
def rr_command(epsilon, categories, observed, json_output):
    """Randomized response: report the truth with probability e^ε/(e^ε + k − 1).

    Each other category is reported with probability 1/(e^ε + k − 1) (ε-local DP;
    Warner 1965, Dwork & Roth §3.2, generalized RR for k > 2). With --observed
    counts: unbiased estimates of the true frequencies with standard errors.
    """
    from dpcalc.mechanisms.randomized_response import parse_counts, randomized_response

    counts = parse_counts(observed) if observed is not None else None
    res = randomized_response(epsilon=epsilon, categories=categories, observed=counts)
    inputs = {"epsilon": epsilon, "categories": categories, "observed": observed}
    notes = [f"Truthful with probability p = {fmt(res['p_truth'], 8, 'down')}; each other category with "
             f"q = {fmt(res['p_other'], 8, 'up')}.", "Source: " + res.source + "."]
    if json_output or counts is None:
        emit(command="rr", inputs=inputs, results=[res.to_json()], json_output=json_output,
             title="randomized response",
             columns=[Column("method", lambda r: r["method"], "left"),
                      Column("ε", lambda r: fmt(r["epsilon"], rounding="up")),
                      Column("k", lambda r: fmt(r["categories"])),
                      Column("p_truth", lambda r: fmt(r["p_truth"], 8, "down")),
                      Column("p_other (each)", lambda r: fmt(r["p_other"], 8, "up"))],
             notes=notes[1:])
        return
    rows = [{"category": j + 1, "observed": res["observed"][j], "estimate": res["estimates"][j],
             "se": res["standard_errors"][j], "count": res["estimated_counts"][j]}
            for j in range(categories)]
    notes.insert(1, f"n = {res['n']:,}; estimates are unbiased and may fall outside [0, 1]; "
                 "standard errors are plug-in (Wang et al. 2017).")
    emit(command="rr", inputs=inputs, results=rows, json_output=False,
         title="randomized response: estimated true frequencies",
         columns=[Column("category", lambda r: fmt(r["category"])),
                  Column("observed", lambda r: fmt(r["observed"])),
                  Column("estimated frequency", lambda r: fmt(r["estimate"], 5)),
                  Column("std. error", lambda r: fmt(r["se"], 3)),
                  Column("estimated count", lambda r: fmt(r["count"], 6))],
         notes=notes)
