"""``dpcalc exponential``: selection probabilities and utility guarantee of the exponential mechanism."""

from __future__ import annotations

import click

from dpcalc.cli.options import RANGES, StrictCommand, example_epilog, json_option, number_option
from dpcalc.cli.render import Column, emit, fmt

#: largest --scores input (10⁶ scores of ~20 characters are ~20 MB)
MAX_SCORES_BYTES = 256 * 10**6


@click.command("exponential", cls=StrictCommand, epilog=example_epilog(
    "printf 'a,10\\nb,8\\nc,3\\n' | dpcalc exponential --eps 1 --sensitivity 1 --scores -",
))
@number_option("--eps", "--epsilon", "epsilon", kind=RANGES["epsilon_mech"], required=True, help="ε > 0.")
@number_option("--sensitivity", kind=RANGES["sensitivity"], default=1.0, show_default=True,
              help="Δu: the most one record can change any score.")
@click.option("--scores", "scores_file", type=str, required=True, metavar="FILE",
              help="Regular file (or - for stdin) of UTF-8 text, at most "
                   f"{MAX_SCORES_BYTES // 10**6} MB: one score per line, or 'label,score' lines.")
@click.option("--monotonic", is_flag=True,
              help="Scores move in the same direction for all candidates between neighbours "
                   "(e.g. counts under add/remove): use exp(ε·u/Δu) instead of exp(ε·u/(2Δu)).")
@number_option("--beta", kind=RANGES["beta"], default=0.05, show_default=True,
              help="Utility guarantee holds with probability 1 − β (t = ln(1/β)).")
@number_option("--top", kind=RANGES["top"], default=20, show_default=True, help="Candidates shown in the table.")
@json_option
def exponential_command(epsilon, sensitivity, scores_file, monotonic, beta, top, json_output):
    """Exponential mechanism: the probability of selecting each candidate, and the utility guarantee.

    Pr[h] ∝ exp(ε·u(h)/(2Δu)) (McSherry & Talwar 2007; Dwork & Roth Thm 3.10),
    normalised by log-sum-exp. With probability ≥ 1 − β the selected candidate
    scores above OPT − (2Δu/ε)(ln|H| + ln(1/β)) (Dwork & Roth Thm 3.11). JSON
    `probabilities` are aligned with the input order.
    """
    from dpcalc.cli.options import read_input_file
    from dpcalc.errors import ParameterError
    from dpcalc.mechanisms.exponential import exponential_mechanism, read_scores

    data = read_input_file(scores_file, option="scores", max_bytes=MAX_SCORES_BYTES)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ParameterError("scores", "UTF-8 text", scores_file, message=(
            f"scores must be UTF-8 text, got a binary file ({scores_file!r}: byte {e.start} "
            "is not UTF-8)")) from None
    labels, scores = read_scores(text.splitlines())
    res = exponential_mechanism(scores=scores, epsilon=epsilon, sensitivity=sensitivity,
                                monotonic=monotonic, beta=beta, labels=labels)
    inputs = {"epsilon": epsilon, "sensitivity": sensitivity, "monotonic": monotonic, "beta": beta,
              "candidates": int(scores.size)}
    notes = [f"Utility: with probability ≥ {fmt(1 - beta)} the selected candidate's score is ≥ "
             f"{fmt(res['utility_bound'])} (OPT = {fmt(res['opt'])}; "
             f"{fmt(res.details['utility_bound_opt_count'])} using the {res.details['optimal_candidates']} "
             "optimal candidate(s), Thm 3.11).",
             "These use the data (OPT): publishing them is not private.",
             "Source: " + res.source + "."]
    if json_output:
        emit(command="exponential", inputs=inputs, results=[res.to_json()], json_output=True, columns=[])
        return
    import numpy as np

    probs = res["probabilities"]
    k = max(0, min(top, probs.size))
    order = np.argsort(-probs, kind="stable")[:k]
    rows = [{"rank": i + 1, "candidate": labels[j] if labels else f"#{j + 1}",
             "score": float(scores[j]), "probability": float(probs[j])} for i, j in enumerate(order)]
    if k < probs.size:
        notes.insert(0, f"Showing the {k} most likely of {probs.size:,} candidates (--top, or --json for all).")
    emit(command="exponential", inputs=inputs, results=rows, json_output=False,
         title="exponential mechanism: selection probabilities",
         columns=[Column("rank", lambda r: fmt(r["rank"])),
                  Column("candidate", lambda r: r["candidate"], "left"),
                  Column("score", lambda r: fmt(r["score"])),
                  Column("probability", lambda r: fmt(r["probability"], 5))],
         notes=notes)
