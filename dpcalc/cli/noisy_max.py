"""``dpcalc noisy-max``: report noisy max with Laplace, exponential (permute-and-flip) or Gumbel
(exponential mechanism) noise, and one-shot Gumbel top-k: ε ↔ noise scale, the utility
guarantee, and the exact release of an index."""

from __future__ import annotations

import click

from dpcalc.cli.ledger import release_ledger_options
from dpcalc.cli.options import (
    RANGES,
    OnlyWith,
    StrictCommand,
    example_epilog,
    json_option,
    number_option,
)
from dpcalc.cli.render import Column, emit, fmt

_CALCULATOR = OnlyWith("without --release (the calculator)", lambda p: not p["release"])
#: the option table (docs/design.md §5): --release draws with the scale --eps gives; the
#: calculator's inverse (--scale) and utility options (--gap, --beta) do not apply to it
ONLY_WITH = {
    "scale": OnlyWith("without --release (--release draws with the scale b that --eps gives)",
                      lambda p: not p["release"]),
    "gap": _CALCULATOR, "beta": _CALCULATOR,
}


@click.command("noisy-max", cls=StrictCommand, only_with=ONLY_WITH, epilog=example_epilog(
    "dpcalc noisy-max --eps 1 --candidates 1000",
    "dpcalc noisy-max --eps 1 --candidates 1000 --noise gumbel --top 10",
    "dpcalc noisy-max --scale 2 --candidates 50 --gap 10 --monotonic",
    "dpcalc noisy-max --eps 0.5 --scores counts.txt --noise exponential --release",
))
@number_option("--eps", "--epsilon", "epsilon", kind=RANGES["epsilon_mech"], default=None,
               help="ε > 0 (pure DP, total over the --top indices): prints the noise scale.")
@number_option("--scale", kind=RANGES["noise_scale"], default=None,
               help="Noise scale b > 0: prints the ε it gives (inverse).")
@number_option("--sensitivity", kind=RANGES["sensitivity"], default=1.0, show_default=True,
               help="Δ: the most one record moves any score.")
@click.option("--monotonic", is_flag=True,
              help="All scores move in the same direction between neighbours (e.g. counts under "
                   "add/remove): scale Δ/ε instead of 2Δ/ε.")
@number_option("--candidates", kind=RANGES["candidates"], default=None, help="m: number of candidates.")
@click.option("--scores", "scores_path", type=str, default=None,
              help="File (or - for stdin): one score per line or 'label,score' lines; m is its length.")
@click.option("--noise", type=click.Choice(["all", "laplace", "exponential", "gumbel"]), default="all",
              show_default=True, help="Noise added to the scores (exponential = permute-and-flip, "
                                      "gumbel = exponential mechanism).")
@number_option("--top", kind=RANGES["top_k"], default=1, show_default=True,
               help="k: release the k best noisy indices, in order (Gumbel noise only).")
@number_option("--beta", kind=RANGES["beta_union"], default=0.05, show_default=True,
               help="β in (0, 1): the gap t printed holds with probability ≥ 1 − β.")
@number_option("--gap", kind=RANGES["gap"], default=None,
               help="t ≥ 0: also print a lower bound on Pr[released index scores within t of the best].")
@click.option("--release", is_flag=True,
              help="Pick an index from --scores with the OS CSPRNG (exact for exponential and gumbel).")
@release_ledger_options
@json_option
def noisy_max_command(epsilon, scale, sensitivity, monotonic, candidates, scores_path, noise, top, beta,
                      gap, release, ledger_path, ledger_dataset, json_output):
    """Report noisy max: the noise scale for ε (or the ε of a scale) and the utility it buys.

    Adds noise of scale b to every score and releases the index of the largest:
    b = 2Δ/ε is ε-DP (Δ/ε for monotonic scores) with Laplace (Dwork & Roth 2014
    Claim 3.9), exponential (= permute-and-flip, McKenna & Sheldon 2020; Ding et al.
    2021) or Gumbel noise (= the exponential mechanism). --top k with Gumbel noise is
    one-shot top-k: k peeling exponential mechanisms (Durfee & Rogers 2019), kε₀-DP.

    Utility, for every score vector with m candidates: with probability ≥ 1 − β the
    released index scores within t of the best, and the expected gap is at most the
    bound shown (worst case over scores; --scores adds the exact data-dependent numbers
    where they have a closed form — those are not private to publish).
    """
    from dpcalc.cli.ledger import release_guard, with_ledger
    from dpcalc.errors import ParameterError
    from dpcalc.mechanisms import noisy_max as nm

    guard = release_guard(ledger_path, ledger_dataset, releasing=release)
    scores = None
    if scores_path is not None:
        scores = nm.read_scores_file(scores_path)
        if candidates is not None and candidates != scores.values.size:
            raise ParameterError("candidates", f"equal to the number of scores ({scores.values.size})",
                                 candidates)
    if release:
        if scores is None:
            raise ParameterError("scores", "given with --release", None,
                                 message="scores is required with --release (--scores FILE)")
        if noise == "all":
            raise ParameterError("noise", "one of laplace, exponential, gumbel with --release", noise,
                                 message="noise must be chosen with --release: --noise exponential "
                                         "(permute-and-flip, exact), gumbel (exact) or laplace (floating point)")
        if epsilon is None:
            raise ParameterError("epsilon", "given", None, message="epsilon is required with --release")
        # every check of the release before the ledger records it (nothing charged for bad input)
        nm.check_release(noise=noise, scores=scores.texts, epsilon=epsilon, sensitivity=sensitivity, top=top,
                         labels=scores.labels)
        if guard is not None:
            _reserve(guard, noise=noise, epsilon=epsilon, sensitivity=sensitivity, monotonic=monotonic,
                     top=top, candidates=int(scores.values.size))
        res = nm.release_noisy_max(noise=noise, scores=scores.texts, epsilon=epsilon, sensitivity=sensitivity,
                                   monotonic=monotonic, top=top, labels=scores.labels)
        inputs = {"epsilon": epsilon, "sensitivity": sensitivity, "monotonic": monotonic, "noise": noise,
                  "top": top, "candidates": int(scores.values.size)}

        def shown(r):
            idx = r["released"]
            labs = r.get("released_labels")
            return ", ".join(labs[i] if labs else f"#{j + 1}" for i, j in enumerate(idx))

        notes = [f"Guarantee: {res.details['guarantee']}.",
                 f"Sampler: {res.details['sampler']}.",
                 "Candidates are numbered from 1 in the table (#1 = first line); JSON 'released' is 0-based.",
                 "Source: " + res.source + "."]
        emit(command="noisy-max", inputs=inputs, results=[with_ledger(res.to_json(), guard, notes)],
             json_output=json_output, title="released index" + ("es (in order)" if top > 1 else ""),
             columns=[Column("mechanism", lambda r: r["method"], "left"),
                      Column("ε", lambda r: fmt(r["epsilon"], rounding="up")),
                      Column("scale b", lambda r: fmt(r["scale"], 7, "up")),
                      Column("released", shown, "left")],
             notes=notes)
        if guard is not None:
            guard.released()
        return

    noises = ["gumbel"] if top > 1 else (["laplace", "exponential", "gumbel"] if noise == "all" else [noise])
    if top > 1 and noise not in ("all", "gumbel"):
        raise ParameterError("top", "1 unless --noise gumbel (one-shot top-k is proven for Gumbel noise)", top)
    results = [nm.noisy_max(noise=n, epsilon=epsilon, scale=scale, sensitivity=sensitivity, monotonic=monotonic,
                            candidates=candidates, scores=None if scores is None else scores.values,
                            top=top, beta=beta, gap=gap) for n in noises]
    m = results[0]["candidates"]
    inputs = {"epsilon": epsilon, "scale": scale, "sensitivity": sensitivity, "monotonic": monotonic,
              "candidates": m, "top": top, "beta": beta, "gap": gap}
    cols = [Column("mechanism", lambda r: r["method"], "left"),
            Column("ε", lambda r: fmt(r["epsilon"], rounding="up")),
            Column("scale b", lambda r: fmt(r["scale"], 7, "up")),
            Column("noise std", lambda r: fmt(r["noise_std"], 7, "up")),
            Column(f"gap t (1−β = {fmt(1 - beta)})", lambda r: fmt(r["gap_at_beta"], rounding="up")),
            Column("E(gap) ≤", lambda r: fmt(r["expected_gap"], rounding="up"))]
    if gap is not None:
        cols.append(Column(f"Pr(gap ≤ {fmt(gap)}) ≥", lambda r: fmt(r["prob_within"], rounding="down")))
    if scores is not None:
        cols.append(Column("E(gap), data", lambda r: fmt(r["details"].get("data_expected_gap"))))
        if gap is not None:
            cols.append(Column(f"Pr(gap ≤ {fmt(gap)}), data",
                               lambda r: fmt(r["details"].get("data_prob_within_gap"))))
    notes = []
    if top > 1:
        notes.append(f"Top-k: the i-th released index scores ≥ q_(i) − t (q_(i) the i-th best score) for all "
                     f"i ≤ {top} with probability ≥ 1 − β; ε₀ = {fmt(results[0].details['epsilon_per_index'])} "
                     "per index, total ε by basic composition.")
    else:
        notes.append("gap = best score − released score; t and the E(gap) bound hold for every score vector "
                     f"with m = {m:,} candidates (worst case).")
    notes.append("exponential noise = permute-and-flip; gumbel noise = the exponential mechanism.")
    if any(n == "laplace" for n in noises):
        notes.append("laplace: the worst-case Pr(gap > t) and E(gap) by quadrature.")
    if scores is not None:
        notes.append("'data' columns use the scores: publishing them is not private; — where no closed form.")
    notes.append("Sources: " + "; ".join(dict.fromkeys(r.source for r in results)) + ".")
    emit(command="noisy-max", inputs=inputs, results=[r.to_json() for r in results], json_output=json_output,
         title="report noisy max" + (f": top-{top}" if top > 1 else ""), columns=cols, notes=notes)


def _reserve(guard, *, noise: str, epsilon: float, sensitivity: float, monotonic: bool, top: int,
             candidates: int) -> None:
    """Record a noisy-max release before its noise is drawn. Gumbel noise is the exponential
    mechanism: k peeling rounds of ε/k each, every round ε/k-bounded-range (Durfee & Rogers
    2019; the monotone variant too: docs of :class:`dpcalc.events.ExponentialMechanismEvent`);
    exponential (permute-and-flip) and Laplace noise are ε-DP (McKenna & Sheldon 2020;
    Dwork & Roth 2014 Claim 3.9)."""
    import math

    from dpcalc import _validate as v
    from dpcalc.errors import ParameterError
    from dpcalc.events import EpsilonDeltaEvent, ExponentialMechanismEvent, SelfComposedEvent
    from dpcalc.ledger.filter import decimal

    k = v.count("top", top)
    if k > candidates:
        raise ParameterError("top", f"at most the number of candidates ({candidates})", k)
    eps = v.positive("epsilon", float(epsilon))
    if noise == "gumbel":
        per = eps / k
        while decimal(per) * k < decimal(eps):  # never below ε/k: the k rounds sum to at least ε
            per = math.nextafter(per, math.inf)
        event = ExponentialMechanismEvent(per) if k == 1 else SelfComposedEvent(ExponentialMechanismEvent(per), k)
    else:
        event = EpsilonDeltaEvent(eps, 0.0)
    guard.reserve(mechanism=f"noisy-max-{noise}" + (f"-top-{k}" if k > 1 else ""), event=event,
                  params={"epsilon": eps, "sensitivity": sensitivity, "monotonic": bool(monotonic),
                          "noise": noise, "top": k, "candidates": candidates})
