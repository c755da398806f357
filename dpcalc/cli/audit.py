"""``dpcalc audit``: an empirical lower bound on ε from the user's own membership experiment."""

from __future__ import annotations

import click

from dpcalc.cli.options import (
    RANGES,
    OnlyWith,
    StrictCommand,
    example_epilog,
    given,
    json_option,
    number_option,
)
from dpcalc.cli.render import Column, emit, fmt


def _interval(r, key):
    iv = r.get(key)
    return "—" if iv is None else f"[{fmt(iv[0], 4, 'down')}, {fmt(iv[1], 4, 'up')}]"


_ONE_RUN = OnlyWith("with --method one-run or both", lambda p: p["method"] in ("one-run", "both"))
#: the option table (docs/design.md §5): which --method uses which option; the score-only options
#: (--k-in, --k-out, --threshold, --seed) are also refused for a file of guesses (after reading it)
ONLY_WITH = {
    "k_in": _ONE_RUN, "k_out": _ONE_RUN,
    "threshold": OnlyWith("with --method clopper-pearson or both",
                          lambda p: p["method"] in ("clopper-pearson", "both")),
    "seed": OnlyWith("with --method clopper-pearson or both and no --threshold (it draws the random half "
                     "that chooses the threshold)",
                     lambda p: p["method"] in ("clopper-pearson", "both") and p["threshold"] is None),
}
_SCORE_ONLY = ("k_in", "k_out", "threshold", "seed")


@click.command("audit", cls=StrictCommand, only_with=ONLY_WITH, epilog=example_epilog(
    "dpcalc audit --guesses canaries.csv --delta 1e-5",
    "dpcalc audit --guesses runs.json --delta 1e-5 --method clopper-pearson --beta 0.05",
))
@click.option("--guesses", "path", type=str, required=True,
              help="CSV (header) or JSON: per canary (or per run) 'included' yes/no and 'score' "
                   "(higher = more likely in) or 'guess' (in/out/abstain).")
@number_option("--delta", kind=RANGES["delta_audit"], required=True, help="δ of the (ε, δ) claim audited, in [0, 1).")
@number_option("--beta", kind=RANGES["beta"], default=0.05, show_default=True,
               help="1 − confidence, in (0, 1): the bound holds with probability ≥ 1 − β.")
@click.option("--method", type=click.Choice(["one-run", "clopper-pearson", "both"]), default="one-run",
              show_default=True,
              help="one-run: canaries of ONE training run, each included with probability ½ (Steinke et al. "
                   "2023); clopper-pearson: one row per independent run (Jagielski et al. 2020).")
@number_option("--k-in", kind=RANGES["k_guesses"], default=None,
               help="one-run with scores: guess 'in' for the top k scores.")
@number_option("--k-out", kind=RANGES["k_guesses"], default=None,
               help="one-run with scores: guess 'out' for the bottom k scores.")
@number_option("--threshold", kind=RANGES["threshold"], default=None,
               help="clopper-pearson with scores: guess 'in' when score ≥ threshold (default: chosen on a random half).")
@number_option("--seed", kind=RANGES["seed"], default=0, show_default=True, help="Seed of the random half split.")
@number_option("--certified-eps", kind=RANGES["epsilon_certified"], default=None,
               help="The certified ε of the run (from `dpcalc epsilon`), printed beside the empirical bound.")
@json_option
def audit_command(path, delta, beta, method, k_in, k_out, threshold, seed, certified_eps, json_output):
    """Empirical ε lower bound from a membership experiment (confidence 1 − β).

    The number is a LOWER bound on the true ε of the audited run: it can show that a claimed
    ε is violated (a bug) or how close the certified ε is to what an attack achieves. It never
    replaces the certified (upper-bound) ε.
    """
    from dpcalc import _validate as v
    from dpcalc.risk.audit import (
        CP_SOURCE,
        ONE_RUN_SOURCE,
        clopper_pearson_epsilon,
        one_run_audit,
        read_guesses,
    )

    beta = v.open_unit("beta", beta)
    delta = v.closed_unit("delta", delta)
    if delta >= 1:
        from dpcalc.errors import ParameterError

        raise ParameterError("delta", "in [0, 1)", delta)
    data = read_guesses(path)
    if data.guesses is not None:
        ctx = click.get_current_context()
        for name in _SCORE_ONLY:
            if given(ctx, name):
                from dpcalc.errors import ParameterError

                flag = "--" + name.replace("_", "-")
                raise ParameterError(name, "with scores", ctx.params[name], message=(
                    f"{flag} is used only with a file of scores; {path!r} has guesses (in/out/abstain), "
                    f"used as given (got {flag} {ctx.params[name]}): leave it out"))
    rows = []
    if method in ("one-run", "both"):
        r = one_run_audit(data, delta=delta, beta=beta, k_in=k_in, k_out=k_out)
        rows.append({"method": "one-run", "epsilon_lower": r.epsilon_lower, "canaries": r.canaries,
                     "guesses": r.guesses, "correct": r.correct, "rule": r.rule, "rules_tried": r.rules_tried,
                     "certified": True, "source": ONE_RUN_SOURCE})
    if method in ("clopper-pearson", "both"):
        c = clopper_pearson_epsilon(data, delta=delta, beta=beta, seed=seed, threshold=threshold)
        rows.append({"method": "clopper-pearson", "epsilon_lower": c["epsilon_lower"], "canaries": c["runs"],
                     "tpr_interval": c["tpr_interval"], "fpr_interval": c["fpr_interval"], "rule": c["rule"],
                     "certified": True, "source": CP_SOURCE})
    cols = [Column("method", lambda r: r["method"], "left"),
            Column(f"empirical ε ≥ ({1 - beta:.0%})", lambda r: fmt(r["epsilon_lower"], 4, "down")),
            Column("rows", lambda r: fmt(r["canaries"])),
            Column("guesses (correct)", lambda r: f"{r['guesses']:,} ({r['correct']:,})" if "guesses" in r else "—"),
            Column("TPR / FPR interval", lambda r: (_interval(r, "tpr_interval") + " / " + _interval(r, "fpr_interval"))
                   if "tpr_interval" in r else "—"),
            Column("rule", lambda r: r["rule"], "left")]
    notes = [f"A lower bound on the true ε of the audited run at δ = {delta:g}, holding with probability "
             f"≥ {1 - beta:.0%}; it is never a replacement for the certified ε (an upper bound).",
             "Valid only if each canary's inclusion was decided at random (probability ½ for one-run) and the "
             "guesses/scores were computed without looking at the labels."]
    if certified_eps is not None:
        ce = v.nonnegative("certified_eps", certified_eps)
        best = max(r["epsilon_lower"] for r in rows)
        notes.insert(0, f"Certified ε = {fmt(ce, 6, 'up')} (upper bound) ≥ empirical ε ≥ {fmt(best, 4, 'down')}."
                     if best <= ce else
                     f"Empirical ε ≥ {fmt(best, 4, 'down')} EXCEEDS the certified ε = {fmt(ce, 6, 'up')}: "
                     "the claimed guarantee does not hold for this run (an implementation or accounting bug, "
                     "or the experiment broke an assumption) — with probability ≥ " f"{1 - beta:.0%}.")
    if any(r.get("rules_tried", 1) > 1 for r in rows):
        notes.append("Scores: a fixed family of guessing rules (top/bottom k, chosen from the number of canaries "
                     "alone) was tried, with β split over them (Bonferroni).")
    notes.append("Sources — " + "; ".join(f"{r['method']}: {r['source']}" for r in rows) + ".")
    emit(command="audit", inputs={"guesses": path, "delta": delta, "beta": beta, "method": method},
         results=rows, json_output=json_output, columns=cols, title="Empirical privacy audit", notes=notes)
