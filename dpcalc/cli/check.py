"""``dpcalc check``: is a published ε right? One claim from the options, or a JSON / YAML file of
claims (docs/claims/claim.schema.json), each checked against the certified bracket of the
mechanism it states (:mod:`dpcalc.claims.check`). Exit 0 only when every claim holds, 1 when
any does not (or is inconclusive, or not checkable), 2 for bad input."""

from __future__ import annotations

import click

from dpcalc.claims.schema import NEIGHBORINGS, STEP_CONVENTIONS
from dpcalc.cli.options import (
    RANGES,
    OnlyWith,
    StrictCommand,
    check_only_with,
    example_epilog,
    json_option,
    noise_multiplier_option,
    number_option,
    sampler_options,
    sampling_options,
    tuning_options,
)
from dpcalc.cli.render import Column, emit, fmt

__all__ = ["check_command"]

#: the claim fields given as options (parameter name → claim field)
_OPTION_FIELDS = {
    "claimed_epsilon": "claimed_epsilon", "delta": "delta", "noise_multiplier": "noise_multiplier",
    "sample_rate": "sample_rate", "steps": "steps", "batch_size": "batch_size", "dataset_size": "dataset_size",
    "epochs": "epochs", "sampling": "sampling", "max_batch_size": "max_batch_size", "neighboring": "neighboring",
    "accounted_neighboring": "accounted_neighboring", "accountant_used": "accountant_used",
    "steps_convention": "steps_convention", "tuning_runs": "tuning_runs", "tuning_accounted": "tuning_accounted",
}
_FLAG_OF = {"claimed_epsilon": "--claimed-eps", "noise_multiplier": "--sigma", "delta": "--delta"}

_NOT_WITH_FILE = OnlyWith("without --claims (the file states each claim's setting)", lambda p: p["claims"] is None)
#: the option table (docs/design.md §5), checked by the command itself: an option of one claim is refused
#: with --claims (tests/claims/test_claims_check.py exercises every entry)
ONLY_WITH = {name: _NOT_WITH_FILE for name in _OPTION_FIELDS}


def _flags_cell(r) -> str:
    if r["verdict"] == "not checkable":
        return r.get("reason") or ""
    return "; ".join(f"[{f['flag']}] {f['message']}" for f in r["flags"]) or "—"


COLUMNS = [
    Column("claim", lambda r: r["claim"], "left"),
    Column("claimed ε", lambda r: fmt(r["claimed_epsilon"], 6)),
    Column("certified ε", lambda r: fmt(r["epsilon"], 4, "up")),
    Column("lower bound", lambda r: fmt(r["epsilon_lower"], 4, "down")),
    Column("verdict", lambda r: r["verdict"], "left"),
    Column("flags", _flags_cell, "left"),
]


@click.command("check", cls=StrictCommand, epilog=example_epilog(
    "dpcalc check --claimed-eps 2.92 --delta 1e-5 --sigma 1.1 --batch-size 256 --dataset-size 60000 --epochs 60",
    "dpcalc check --claims docs/claims/published.yaml",
))
@click.option("--claims", type=click.Path(dir_okay=False), default=None,
              help="A JSON or YAML file of claims (one, or a list; schema: docs/claims/claim.schema.json).")
@number_option("--claimed-eps", "--claimed-epsilon", "claimed_epsilon", kind=RANGES["epsilon_at"], default=None,
               help="The ε the claim states.")
@number_option("--delta", kind=RANGES["delta"], default=None, help="The δ of the claim, in (0, 1).")
@noise_multiplier_option(default=None,
               help="σ: noise std / clipping norm.")
@sampling_options
@sampler_options
@click.option("--neighboring", type=click.Choice(list(NEIGHBORINGS)), default=None,
              help="The adjacency the guarantee states [default: add-remove; zero-out for shuffle / balls-in-bins].")
@click.option("--accounted-neighboring", type=click.Choice(list(NEIGHBORINGS)), default=None,
              help="The adjacency the claim's accountant used, when it differs (flagged).")
@click.option("--accountant-used", default=None, help="The claim's accountant, for the record (rdp, ma, prv, ...).")
@click.option("--steps-convention", type=click.Choice(list(STEP_CONVENTIONS)), default=None,
              help="How the paper turned epochs into steps: ceil = ceil(E·N/B) (default), epochs-times-batches = "
                   "E·ceil(N/B), epochs-times-floor = E·floor(N/B), epochs-over-q = ceil(E/q).")
@tuning_options
@json_option
@click.pass_context
def check_command(ctx: click.Context, claims, json_output, **options):
    """Is a published ε right? The certified ε of the run a claim describes and the verdict.

    \b
    holds          the claimed ε is at least the certified upper bound
    does not hold  the claimed ε is below a proven lower bound: false for
                   the stated mechanism
    inconclusive   between the lower bound and the certified bound
    not checkable  a field is missing (named), or no accountant models it

    Flags: a Poisson ε claimed for a shuffled or fixed-size run (with the
    sampler's certified ε, its lower bound and the factor), δ ≥ 1/N, a verdict
    that changes with how epochs become steps, an adjacency mismatch, a loose
    accountant ("you could claim …"), tuning runs not accounted.

    Exit status: 0 when every claim holds, 1 otherwise, 2 for bad input.
    """
    from dpcalc.claims import claim_from_mapping, load_claims
    from dpcalc.claims.check import check_claims, exit_status
    from dpcalc.errors import ParameterError

    check_only_with(ctx.command, ctx, ONLY_WITH)

    if claims is not None:
        items = load_claims(claims)
        inputs = {"claims": claims, "count": len(items)}
    else:
        given = {field: options.get(name) for name, field in _OPTION_FIELDS.items()}
        if given["sampling"] == "poisson":
            given["sampling"] = None
        missing = [name for name in ("claimed_epsilon", "delta", "noise_multiplier") if given[name] is None]
        if missing:
            raise ParameterError(missing[0], "", None, message=(
                f"give {_FLAG_OF[missing[0]]} (the claim: --claimed-eps, --delta, --sigma and the schedule), "
                "or --claims FILE"))
        item = claim_from_mapping(given)
        if item.missing:
            raise ParameterError("steps", "", None, message=(
                "the schedule is incomplete: give --batch-size, --dataset-size and --epochs (or --steps), "
                f"or --sample-rate with --steps or --epochs (missing: {', '.join(item.missing)})"))
        items = [item]
        inputs = {k: v for k, v in given.items() if v is not None}
    results = check_claims(items, name_claims=claims is not None)
    counts = {v: sum(r.verdict == v for r in results) for v in ("holds", "does not hold", "inconclusive",
                                                                 "not checkable")}
    notes = [", ".join(f"{n} {v}" for v, n in counts.items() if n) + ".",
             "Certified ε: the tightest certified accountant with a proof for the stated sampler and adjacency "
             "(pld for Poisson; the E-fold Gaussian for shuffle / balls-in-bins); lower bound: a proven lower "
             "bound on the true ε of the stated mechanism (— where none is implemented: a claim below the "
             "certified ε is then inconclusive)."]
    emit(command="check", inputs=inputs, results=[r.to_json() for r in results], json_output=json_output,
         columns=COLUMNS, title="Published claims against their certified ε", notes=notes,
         extra={"exit_status": exit_status(results)})
    ctx.exit(exit_status(results))
