"""``dpcalc svt``: the sparse vector technique — noise scales, budget split and (α, β)-accuracy,
and the ε an accuracy needs; refuses the published variants that are not private."""

from __future__ import annotations

import click

from dpcalc.cli.options import RANGES, StrictCommand, example_epilog, json_option, number_option
from dpcalc.cli.render import Column, emit, fmt


@click.command("svt", cls=StrictCommand, epilog=example_epilog(
    "dpcalc svt --eps 1 --queries 1000 --answers 10",
    "dpcalc svt --eps 1 --queries 1000 --answers 10 --monotonic --variant lyu",
    "dpcalc svt --accuracy 50 --queries 1000 --answers 10",
    "dpcalc svt --eps 0.5 --queries 1000 --answers 10 --variant dwork-roth --delta 1e-6",
))
@number_option("--eps", "--epsilon", "epsilon", kind=RANGES["epsilon_mech"], default=None,
               help="ε > 0 for the whole run. Omit with --accuracy to get the ε needed.")
@number_option("--accuracy", kind=RANGES["accuracy"], default=None,
               help="α > 0: target accuracy; prints the ε needed.")
@number_option("--queries", kind=RANGES["queries"], required=True, help="k: number of queries the accuracy covers.")
@number_option("--answers", kind=RANGES["answers"], default=1, show_default=True,
               help="c: the run halts after c queries are reported above the threshold (c ≤ k).")
@number_option("--sensitivity", kind=RANGES["sensitivity"], default=1.0, show_default=True,
               help="Δ of every query.")
@click.option("--monotonic", is_flag=True,
              help="Queries move in the same direction between neighbours (e.g. counts): "
                   "halves the query noise of --variant lyu.")
@number_option("--beta", kind=RANGES["beta_union"], default=0.05, show_default=True, help="β in (0, 1).")
@click.option("--variant", type=str, default="all", show_default=True,
              help="lyu (Lyu, Su, Li 2017, optimal split), dwork-roth (DR14 Alg. 1–2), numeric "
                   "(DR14 Alg. 3, NumericSparse) or all. Variants shown not private (no-query-noise, "
                   "unscaled-query-noise, no-cutoff, output-noisy-answer) are refused with the reason.")
@click.option("--split", type=click.Choice(["optimal", "equal"]), default="optimal", show_default=True,
              help="lyu: ε₁ : ε₂ = 1 : (2c)^(2/3) (1 : c^(2/3) monotonic), or ε/2 each.")
@number_option("--delta", kind=RANGES["delta_svt"], default=0.0, show_default=True,
               help="δ for DR14's advanced-composition versions (dwork-roth, numeric); 0 = pure ε-DP.")
@json_option
def svt_command(epsilon, accuracy, queries, answers, sensitivity, monotonic, beta, variant, split, delta,
                json_output):
    """Sparse vector technique: noise scales for ε and the (α, β)-accuracy over k queries.

    With probability ≥ 1 − β every query answered before the run halts is classified
    within α: "above" only if q ≥ T − α, "below" only if q ≤ T + α (Dwork & Roth 2014
    Def. 3.9). lyu: threshold noise Lap(Δ/ε₁) once, query noise Lap(2cΔ/ε₂) (cΔ/ε₂
    monotonic), ε₁ : ε₂ = 1 : (2c)^(2/3) (Lyu, Su, Li 2017). dwork-roth / numeric:
    DR14 Alg. 2 / 3 with their closed-form accuracy (Thm 3.26 / 3.28). With --accuracy:
    the ε needed.
    """
    from dpcalc.errors import ParameterError
    from dpcalc.mechanisms import sparse_vector as sv

    if variant == "all":
        variants = ["dwork-roth", "numeric"] if delta else ["lyu", "lyu-equal", "dwork-roth", "numeric"]
    else:
        variants = [sv.check_variant(variant)]
        if variant == "lyu" and split == "equal":
            variants = ["lyu-equal"]
    if split == "equal" and variant not in ("lyu", "all"):
        raise ParameterError("split", "optimal unless --variant lyu", split)
    if (epsilon is None) == (accuracy is None):
        raise ParameterError("epsilon", "given (or --accuracy, not both)", epsilon,
                             message="give exactly one of --eps (→ accuracy) and --accuracy (→ ε needed)")
    results = []
    for name in variants:
        kw = dict(queries=queries, answers=answers, sensitivity=sensitivity, monotonic=monotonic, beta=beta,
                  variant="lyu" if name.startswith("lyu") else name,
                  split="equal" if name == "lyu-equal" else "optimal", delta=delta)
        if accuracy is not None:
            results.append(sv.sparse_vector_epsilon_for_accuracy(accuracy=accuracy, **kw))
        else:
            results.append(sv.sparse_vector(epsilon=epsilon, **kw))
    inputs = {"epsilon": epsilon, "accuracy": accuracy, "queries": queries, "answers": answers,
              "sensitivity": sensitivity, "monotonic": monotonic, "beta": beta, "variant": variant,
              "split": split, "delta": delta or None}
    cols = [Column("variant", lambda r: r["method"], "left"),
            Column("ε" if accuracy is None else "ε needed", lambda r: fmt(r["epsilon"], rounding="up")),
            Column("ε₁ (threshold)", lambda r: fmt(r.get("epsilon_threshold"))),
            Column("ε₂ (queries)", lambda r: fmt(r.get("epsilon_queries"))),
            Column("threshold noise b_ρ", lambda r: fmt(r["threshold_scale"], 7, "up")),
            Column("query noise b_ν", lambda r: fmt(r["query_scale"], 7, "up")),
            Column("answer noise", lambda r: fmt(r.get("answer_scale"), 7, "up")),
            Column("α" + (" (target)" if accuracy is not None else ""),
                   lambda r: fmt(r["accuracy"], rounding="up"))]
    notes = [f"(α, β): with probability ≥ {fmt(1 - beta)}, each of the k = {queries:,} queries answered before "
             f"halting (after c = {answers:,} above-threshold answers) is 'above' only if q ≥ T − α and 'below' "
             "only if q ≤ T + α; noises are Laplace scales.",
             "lyu: threshold noise drawn once; α from a union bound over the noise events. dwork-roth, numeric: "
             "threshold noise refreshed after every 'above'; α from DR14's closed form (numeric: also bounds the "
             "released values' error).",
             ]
    if monotonic and any(not r.method.startswith("lyu") for r in results):
        notes.append("--monotonic halves lyu's query noise only (DR14's algorithms are stated without it).")
    for r in results:
        if "accuracy_answers_part" in r.details:
            notes.append(f"{r.method} (δ > 0): DR14 Alg. 3's split for δ > 0, ε₁ = √512/(√512 + 1)·ε, ε₂ = "
                         "2/(√512 + 1)·ε; α is the larger of the threshold part (DR14 Thm 3.28's closed form, "
                         f"{fmt(r.details['accuracy_threshold_part'], rounding='up')}) and the released answers' "
                         f"Laplace error σ(ε₂)·ln(2c/β) ({fmt(r.details['accuracy_answers_part'], rounding='up')}), "
                         "which Thm 3.28's proof omits.")
        if "epsilon_advanced_composition" in r.details:
            notes.append(f"{r.method}: advanced composition (DR14 Thm 3.20) of the runs gives "
                         f"ε = {fmt(r.details['epsilon_advanced_composition'], rounding='up')} ≤ the ε shown.")
    notes.append("Sources: " + "; ".join(dict.fromkeys(r.source for r in results)) + ".")
    emit(command="svt", inputs=inputs, results=[r.to_json() for r in results], json_output=json_output,
         title="sparse vector technique" + (": ε needed for the accuracy" if accuracy is not None else ""),
         columns=cols, notes=notes)
