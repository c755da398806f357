"""``dpcalc pate``: privacy analysis of PATE (LNMax, GNMax, Confident-GNMax) from teacher votes,
data-independent and data-dependent, and the planning inverse (queries or noise for a target ε)."""

from __future__ import annotations

import click

from dpcalc.cli.ledger import release_ledger_options
from dpcalc.cli.options import (
    RANGES,
    StrictCommand,
    example_epilog,
    json_option,
    number_option,
)
from dpcalc.cli.render import Column, emit, fmt

#: numeric options of this command (ranges in dpcalc.cli.options.RANGES)
KINDS = {
    "noise": RANGES["pate_noise"],
    "threshold": RANGES["pate_threshold"],
    "teachers": RANGES["pate_teachers"],
    "classes": RANGES["pate_classes"],
    "queries": RANGES["queries"],
    "answered_count": RANGES["pate_answered"],
    "order": RANGES["pate_order"],
    "beta": RANGES["pate_beta"],
    "sigma_ss": RANGES["pate_sigma_ss"],
    "seed": RANGES["seed"],
}

LEDGER_WHAT = ("the aggregator's answers to the student are the release (the teachers' votes never leave "
               "the aggregator)")
RELEASE_NOTE = ("Publishing: rows marked 'yes' may be published. The 'released' row is the data-dependent RDP "
                "released with Gaussian noise scaled by its smooth sensitivity (Papernot et al. 2018 App. B–C; "
                "GNSS, Thm 23 of arXiv:1802.08908), its cost included. Rows marked 'no' are functions of the "
                "private votes: do not publish them. The released ε is a noisy estimate of the 'rdp+release' "
                "data-dependent row (not a certified upper bound: the noise may lower it); the plain rdp/pld rows "
                "do not include the release's cost, the data-independent 'rdp+release' row does.")

LEAK_NOTE = ("WARNING: the data-dependent ε ('data-dep., not certified'; JSON data_dependent: true) is a function "
             "of the private votes, not a publishable guarantee; publishing it leaks "
             "information about them: do not publish the data-dependent value; publish the data-independent one, "
             "or (GNMax) release it privately with --release-epsilon (smooth sensitivity, Papernot et al. 2018 "
             "App. B–C).")

_NOISE_FLAGS = {"lnmax": ("scale",), "gnmax": ("sigma",), "confident-gnmax": ("threshold", "sigma1", "sigma2")}


def _check_noise(mechanism: str, given: dict) -> None:
    from dpcalc.errors import ParameterError

    need = _NOISE_FLAGS[mechanism]
    for name, val in given.items():
        if val is not None and name not in need:
            raise ParameterError(name, "", val, message=f"--{name} does not apply to --mechanism {mechanism} "
                                 f"(it takes {', '.join('--' + n for n in need)})")


def _independent_event(mechanism: str, noise: dict, queries: int, answered: int):
    from dpcalc.events import (
        ComposedEvent,
        GNMaxEvent,
        LNMaxEvent,
        PateThresholdEvent,
        SelfComposedEvent,
    )

    if mechanism == "lnmax":
        return SelfComposedEvent(LNMaxEvent(noise["scale"]), queries)
    if mechanism == "gnmax":
        return SelfComposedEvent(GNMaxEvent(noise["sigma"]), queries)
    return ComposedEvent((SelfComposedEvent(PateThresholdEvent(noise["sigma1"]), queries),
                          SelfComposedEvent(GNMaxEvent(noise["sigma2"]), answered)))


#: how the table marks a row computed from the votes (JSON: ``data_dependent: true``, not certified)
DEPENDENT_LABEL = "data-dep., not certified"

#: the first line of a --per-query file (a CSV comment line, as the ``# order=`` line after it)
PER_QUERY_WARNING = ("# WARNING: rdp_data_dependent is data-dependent, not certified: a function of the private "
                     "votes, not a publishable guarantee; do not publish it (rdp_data_independent holds for "
                     "every vote histogram)")


def _row(method: str, analysis: str, mechanism: str, epsilon, delta, answered: int, order, *,
         certified: bool = True, data_dependent: bool = False, source: str = "", details: dict | None = None,
         reason: str | None = None):
    """One result row. ``data_dependent``: the number is computed from the private votes (not a
    DP release of them): a statement about these votes, not a publishable guarantee, so never
    ``certified`` (issue 32); the smooth-sensitivity release is not such a row."""
    from dpcalc.results import MechanismResult

    return MechanismResult(
        method=method,
        values={"analysis": analysis, "data_dependent": data_dependent, "mechanism": mechanism,
                "epsilon": epsilon, "delta": delta, "queries_answered": answered, "order": order},
        certified=certified and not data_dependent, source=source, details=details or {}, reason=reason,
        applicable=epsilon is not None and delta is not None).to_json()


def _registered() -> list:
    from dpcalc.accounting import registry

    return [registry.get_accountant(name) for name in registry.available()]


def _rdp_accountant(event, accountants: list | None = None):
    """The first registered accountant with a Rényi-DP curve of ``event`` (the capability
    :meth:`~dpcalc.accounting.base.Accountant.rdp_curve`): the PATE analysis is an RDP analysis,
    so its rows (data-dependent, planning, and their data-independent comparator) are labelled
    by it.

    Raises:
        RuntimeError: no registered accountant has an RDP curve of ``event``.
    """
    from dpcalc.errors import UnsupportedEventError

    for acc in _registered() if accountants is None else accountants:
        try:
            if acc.rdp_curve(event) is not None:
                return acc
        except UnsupportedEventError:
            continue
        except (ArithmeticError, ValueError, MemoryError):  # it has a curve, failing here: its row says so
            return acc
    raise RuntimeError("no registered accountant has a Rényi-DP curve of this PATE history")


def _independent_accountants(event) -> list:
    """The accountants of the data-independent rows: the RDP accountant (:func:`_rdp_accountant`)
    and the tightest certified accountant that supports ``event`` (registry order), once each."""
    accs = _registered()
    tightest = next((a for a in accs if a.certified and a.supports(event)), None)
    return [a for a in dict.fromkeys((_rdp_accountant(event, accs), tightest)) if a is not None]


def _independent_rows(mechanism: str, event, *, delta, epsilon, answered: int, queries: int, eps0):
    """Data-independent rows: the RDP accountant and the tightest certified one
    (:func:`_independent_accountants`), and for LNMax basic and optimal (KOV) composition of the
    pure ε₀ queries."""
    from dpcalc.errors import DpcalcError, ParameterError

    rows = []
    for acc in _independent_accountants(event):
        try:
            res = acc.epsilon(event, delta=delta) if delta is not None else acc.delta(event, epsilon=epsilon)
        except ParameterError:
            raise
        except (DpcalcError, ArithmeticError, ValueError, MemoryError) as e:  # as dpcalc compose does
            rows.append(_row(acc.name, "data-independent", mechanism, None, None, answered, None,
                             certified=False, source=acc.source, reason=f"not evaluated for these inputs: {e}"))
            continue
        det = dict(res.details)
        order = det.pop("order", None)
        rows.append(_row(acc.name, "data-independent", mechanism, res.epsilon, res.delta, answered, order,
                         certified=res.certified, source=acc.source, details=det,
                         reason=res.reason))
    if eps0 is not None:
        from dpcalc.composition.basic import basic_delta, basic_epsilon
        from dpcalc.composition.optimal import homogeneous_delta, homogeneous_epsilon

        src_b = "Dwork & Roth 2014 Thm 3.14 (basic composition of ε₀ = 2/b)"
        src_o = "Kairouz, Oh, Viswanath 2015 Thm 3.3 (optimal composition of ε₀ = 2/b)"
        if delta is not None:
            rows.append(_row("basic", "data-independent", mechanism,
                             basic_epsilon([eps0], [0.0], [queries], delta=delta), delta, answered, None,
                             source=src_b))
            if queries <= 10**6:
                rows.append(_row("optimal", "data-independent", mechanism,
                                 homogeneous_epsilon(epsilon=eps0, delta=0.0, count=queries, target_delta=delta),
                                 delta, answered, None, source=src_o))
        else:
            rows.append(_row("basic", "data-independent", mechanism, epsilon,
                             basic_delta([eps0], [0.0], [queries], epsilon=epsilon), answered, None, source=src_b))
            if queries <= 10**6:
                rows.append(_row("optimal", "data-independent", mechanism, epsilon,
                                 homogeneous_delta(epsilon=eps0, delta=0.0, count=queries, target_epsilon=epsilon),
                                 answered, None, source=src_o))
    return rows


@click.command("pate", cls=StrictCommand, epilog=example_epilog(
    "dpcalc pate --mechanism gnmax --sigma 40 --votes votes.csv --delta 1e-5",
    "dpcalc pate --mechanism confident-gnmax --threshold 200 --sigma1 150 --sigma2 40 --votes votes.npy "
    "--answered answered.csv --delta 1e-5",
    "dpcalc pate --mechanism lnmax --scale 20 --queries 100 --delta 1e-5",
    "dpcalc pate --mechanism gnmax --sigma 40 --eps 2 --delta 1e-5",
    "dpcalc pate --mechanism gnmax --queries 1000 --eps 2 --delta 1e-5",
))
@click.option("--mechanism", type=click.Choice(["lnmax", "gnmax", "confident-gnmax"]), required=True,
              help="The aggregator: LNMax (Laplace noise, 2017), GNMax (Gaussian noise, 2018), "
                   "Confident-GNMax (a noisy threshold check, then GNMax; 2018 Alg 1).")
@click.option("--votes", "votes_path", type=str, default=None,
              help="Vote counts: one query per row, one class per column (CSV with or without a header "
                   "line, or .npy); every row sums to the number of teachers. Gives the data-dependent analysis.")
@click.option("--answered", "answered_path", type=str, default=None,
              help="Confident-GNMax with --votes: a file with one 0/1 per query (1 = passed the threshold "
                   "check, answered). Default: every query counted as answered (an upper bound).")
@number_option("--answered-count", "answered_count", kind=KINDS["answered_count"], default=None,
               help="Confident-GNMax without --votes: how many of the --queries passed the check (default: all).")
@number_option("--scale", kind=KINDS["noise"], default=None,
               help="LNMax: Laplace scale b in votes (ε₀ = 2/b per query; the 2017 paper's γ = 1/b).")
@number_option("--sigma", kind=KINDS["noise"], default=None, help="GNMax: noise std σ in votes.")
@number_option("--threshold", kind=KINDS["threshold"], default=None,
               help="Confident-GNMax: threshold T on the noisy max count (votes).")
@number_option("--sigma1", kind=KINDS["noise"], default=None, help="Confident-GNMax: σ₁ of the threshold check.")
@number_option("--sigma2", kind=KINDS["noise"], default=None, help="Confident-GNMax: σ₂ of GNMax.")
@number_option("--teachers", kind=KINDS["teachers"], default=None,
               help="n: number of teachers (checked against --votes; informational without).")
@number_option("--classes", kind=KINDS["classes"], default=None,
               help="m: number of classes (checked against --votes; informational without).")
@number_option("--queries", kind=KINDS["queries"], default=None,
               help="k: number of queries (data-independent analysis). Omit with --eps and --delta to "
                    "get the largest k.")
@number_option("--delta", kind=RANGES["delta"], default=None, help="δ in (0, 1): prints ε.")
@number_option("--eps", "--epsilon", "epsilon", kind=RANGES["epsilon_at"], default=None,
               help="ε ≥ 0: prints δ; with --delta and without --queries or the noise: the planning inverse.")
@click.option("--per-query", "per_query_path", type=str, default=None,
              help="With --votes: write each query's RDP cost at the chosen order to this CSV file.")
@click.option("--plot", "plot_path", type=str, default=None,
              help="With --votes: save cumulative ε against queries answered (PNG or SVG by the extension; "
                   "needs matplotlib).")
@click.option("--release-epsilon", "release_eps", is_flag=True, default=False,
              help="GNMax with --votes and --delta: release the data-dependent RDP at --order privately, with "
                   "Gaussian noise (std --sigma-ss × its β-smooth sensitivity, Papernot et al. 2018 App. B–C), "
                   "and print the released ε and the total cost including the release.")
@number_option("--order", kind=KINDS["order"], default=None,
               help="With --release-epsilon: the Rényi order λ of the released RDP (chosen before seeing the "
                    "votes; λ < 1/(2β)).")
@number_option("--beta", kind=KINDS["beta"], default=None,
               help="With --release-epsilon: the smoothness β of the smooth sensitivity (the 2018 code searches "
                    "0.3/λ … 0.5/λ).")
@number_option("--sigma-ss", "sigma_ss", kind=KINDS["sigma_ss"], default=None,
               help="With --release-epsilon: σ_s, the noise std in units of the smooth sensitivity.")
@number_option("--seed", kind=KINDS["seed"], default=None,
               help="With --release-epsilon: seed the release's noise (tests only; default: the OS CSPRNG).")
@release_ledger_options
@json_option
def pate_command(mechanism, votes_path, answered_path, answered_count, scale, sigma, threshold, sigma1, sigma2,
                 teachers, classes, queries, delta, epsilon, per_query_path, plot_path, release_eps, order, beta,
                 sigma_ss, seed, ledger_path, ledger_dataset, json_output):
    """PATE privacy analysis: teachers vote, the aggregator releases a noisy argmax.

    \b
    Parameterisation (noise in votes; one record changes one teacher's vote, i.e. two counts by one):
      LNMax  (Papernot et al. 2017): argmax n_j + Lap(b); ε₀ = 2/b pure DP per query.
      GNMax  (Papernot et al. 2018): argmax n_j + N(0, σ²); RDP λ/σ² per query.
      Confident-GNMax (2018 Alg 1): answer only if max n_j + N(0, σ₁²) ≥ T; every query pays
      the check (RDP λ/(2σ₁²)), answered ones also GNMax(σ₂).
    --release-epsilon (GNMax): publishes the data-dependent RDP at --order with noise
      SS_β·N(0, σ_s²) and pays λe^{2β}/σ_s² + (βλ − ½ln(1 − 2λβ))/(λ − 1) more (2018 App. C).
    With --votes the data-dependent bounds (2017 Thm 3; 2018 Thm 6, Prop 7, 10) are applied per
    query where their conditions hold (else the data-independent bound), composed in RDP and
    converted with Canonne–Kamath–Steinke 2020 Prop 12, the order refined continuously.
    The data-dependent ε itself depends on the private votes: do not publish it.

    \b
    With --ledger FILE --dataset NAME (run it before the aggregator answers the student):
    the data-independent cost of answering the k queries (Confident-GNMax: every query
    counted as answered) is recorded in the ledger before the analysis is printed, and
    refused (exit 1) past the dataset's budget. The data-dependent cost is never recorded.
    """
    from dpcalc.cli.ledger import release_guard
    from dpcalc.errors import ParameterError

    noise = {"scale": scale, "sigma": sigma, "threshold": threshold, "sigma1": sigma1, "sigma2": sigma2}
    _check_noise(mechanism, noise)
    if release_eps and ledger_path is not None:
        raise ParameterError("release_epsilon", "", None, message=(
            "--release-epsilon with --ledger is not supported yet: the ledger cannot record the release's "
            "RDP at one order; run the release without --ledger only if its cost is accounted elsewhere"))
    guard = release_guard(ledger_path, ledger_dataset, releasing=True)
    if answered_path is not None and (mechanism != "confident-gnmax" or votes_path is None):
        raise ParameterError("answered", "", answered_path,
                             message="--answered applies to --mechanism confident-gnmax with --votes")
    if answered_count is not None and (mechanism != "confident-gnmax" or votes_path is not None):
        raise ParameterError("answered_count", "", answered_count,
                             message="--answered-count applies to --mechanism confident-gnmax without --votes")
    release = _check_release(mechanism, votes_path, delta, release_eps, order, beta, sigma_ss, seed)
    if votes_path is not None:
        if (delta is None) == (epsilon is None):
            raise ParameterError("delta", "", None, message="give exactly one of --delta (prints ε) and --eps "
                                 "(prints δ) with --votes")
        missing = [n for n in _NOISE_FLAGS[mechanism] if noise[n] is None]
        if missing:
            raise ParameterError(missing[0], "", None, message=f"--{missing[0]} is required with --mechanism "
                                 f"{mechanism}")
        return _votes_analysis(mechanism, noise, votes_path, answered_path, teachers, classes, queries,
                               delta, epsilon, per_query_path, plot_path, json_output, guard, release=release)
    for path, flag in ((per_query_path, "--per-query"), (plot_path, "--plot")):
        if path is not None:
            raise ParameterError(flag.lstrip("-").replace("-", "_"), "", path,
                                 message=f"{flag} needs --votes (the per-query costs come from the votes)")
    return _independent(mechanism, noise, teachers, classes, queries, answered_count, delta, epsilon,
                        json_output, guard)


def _ledger_reserve(guard, mechanism: str, noise: dict, queries: int, teachers, classes) -> None:
    """Record a PATE run of ``queries`` queries in the ledger (before anything is printed): the
    data-independent events, every Confident-GNMax query counted as answered (which queries pass
    the check is only known after the run; docs/design.md §11).

    Raises:
        BudgetExceededError: the filter refuses (exit 1, nothing recorded).
    """
    if guard is None:
        return
    event = _independent_event(mechanism, noise, queries, queries)
    used = {k: float(val) for k, val in noise.items() if val is not None and k != "threshold"}
    params = {**used, "queries": int(queries), "queries_answered_counted": int(queries),
              "teachers": teachers, "classes": classes, "analysis": "data-independent"}
    guard.reserve(mechanism=f"pate-{mechanism}", params=params, event=event)


def _ledger_finish(guard, results: list, notes: list, queries: int, mechanism: str) -> list:
    """The results with the ledger's entry on the first row and its note appended."""
    if guard is None:
        return results
    info = guard.summary()
    counted = " (every query counted as answered)" if mechanism == "confident-gnmax" else ""
    notes.append(
        f"Recorded in ledger {info['file']} (dataset {info['dataset']!r}, event #{info['event']}) before this "
        f"analysis was printed: the data-independent cost of {queries:,} queries{counted}, since "
        f"{LEDGER_WHAT}; ε spent {fmt(info['filter_epsilon'], rounding='up')} of {fmt(info['budget_epsilon'])} "
        f"at δ = {fmt(info['delta'])} (RDP filter, valid under adaptive composition), "
        f"{fmt(info['left'], rounding='down')} left. The data-dependent cost is never recorded: it is a "
        "function of the private votes.")
    return [{**results[0], "ledger": info}, *results[1:]]


def _independent(mechanism, noise, teachers, classes, queries, answered_count, delta, epsilon, json_output,
                 guard=None):
    from dpcalc.errors import ParameterError
    from dpcalc.mechanisms.pate import lnmax_epsilon

    missing = [n for n in _NOISE_FLAGS[mechanism] if noise[n] is None]
    if mechanism == "confident-gnmax" and "threshold" in missing:
        missing.remove("threshold")  # the data-independent check does not depend on T
    plan = delta is not None and epsilon is not None and (queries is None or missing)
    if plan and guard is not None:
        raise ParameterError("ledger", "", None, message="--ledger records a PATE run: give --queries and the "
                             "noise (the planning inverse releases nothing)")
    if plan:
        for name, val in (("answered_count", answered_count), ("teachers", teachers), ("classes", classes)):
            if val is not None:
                flag = "--" + name.replace("_", "-")
                raise ParameterError(name, "", val, message=(
                    f"{flag} is not used by the planning inverse (--eps and --delta without --queries or the "
                    "noise: data-independent, every query counted as answered); omit it"))
        return _plan(mechanism, noise, missing, queries, delta, epsilon, json_output)
    if delta is not None and epsilon is not None:
        raise ParameterError("epsilon", "", epsilon, message=(
            "give one of --delta (prints ε) and --eps (prints δ): with --queries and the noise both given there "
            "is nothing to plan (--eps with --delta plans the queries or the noise when one of them is omitted)"))
    if missing:
        raise ParameterError(missing[0], "", None, message=f"--{missing[0]} is required with --mechanism "
                             f"{mechanism} (or give --eps and --delta without it to get the smallest)")
    if queries is None:
        raise ParameterError("queries", "", None, message="--queries is required without --votes (or give "
                             "--eps and --delta without --queries to get the largest number of queries)")
    if delta is None and epsilon is None:
        raise ParameterError("delta", "", None, message="give --delta (prints ε) or --eps (prints δ)")
    if classes == 1:
        raise ParameterError("classes", "at least 2 for a data-independent analysis", classes,
                             message="--classes 1: the answer is always the only class (no privacy cost); "
                                     "give at least 2 classes")
    answered = queries if answered_count is None else answered_count
    if answered > queries:
        raise ParameterError("answered_count", f"at most --queries ({queries})", answered)
    if guard is not None and answered_count is not None and answered_count < queries:
        raise ParameterError("answered_count", "", answered_count, message=(
            "--answered-count with --ledger: the ledger counts every query as answered (which queries pass "
            "the check is known only after the run); omit --answered-count"))
    event = _independent_event(mechanism, noise, queries, answered)
    eps0 = lnmax_epsilon(noise["scale"]) if mechanism == "lnmax" else None
    _ledger_reserve(guard, mechanism, noise, queries, teachers, classes)
    results = _independent_rows(mechanism, event, delta=delta, epsilon=epsilon, answered=answered,
                                queries=queries, eps0=eps0)
    inputs = {"mechanism": mechanism, **{k: val for k, val in noise.items() if val is not None},
              "teachers": teachers, "classes": classes, "queries": queries, "queries_answered": answered,
              "delta": delta, "epsilon": epsilon}
    notes = _parameter_notes(mechanism, noise)
    if mechanism == "confident-gnmax" and answered_count is None:
        notes.append("Every query counted as answered (--answered-count sets how many passed the check).")
    notes.append("Data-independent: the guarantee holds for every vote histogram (publishable).")
    notes.append("Sources: " + "; ".join(dict.fromkeys(r["source"] for r in results if r.get("source"))) + ".")
    results = _ledger_finish(guard, results, notes, queries, mechanism)
    emit(command="pate", inputs=inputs, results=results, json_output=json_output,
         title=f"PATE {mechanism}: data-independent", columns=_columns(delta is not None, votes=False),
         notes=notes)
    if guard is not None:
        guard.released()


def _parameter_notes(mechanism: str, noise: dict) -> list[str]:
    from dpcalc.mechanisms.pate import lnmax_epsilon

    if mechanism == "lnmax":
        return [f"LNMax: Laplace scale b = {fmt(noise['scale'])} votes; one teacher's vote moves two counts by "
                f"one (L1 sensitivity 2), so ε₀ = 2/b = {fmt(lnmax_epsilon(noise['scale']), rounding='up')} per "
                "query (the 2017 paper's (2γ, 0)-DP with γ = 1/b)."]
    if mechanism == "gnmax":
        return ["GNMax: RDP λ/σ² per query (L2 sensitivity √2; Papernot et al. 2018 Prop 8)."]
    return ["Confident-GNMax: every query pays the threshold check (RDP λ/(2σ₁²), the max count has "
            "sensitivity 1), answered queries also GNMax (λ/σ₂²) (Papernot et al. 2018 Alg 1)."]


def _columns(eps_mode: bool, *, votes: bool) -> list[Column]:
    cols = [Column("analysis", lambda r: DEPENDENT_LABEL if r.get("data_dependent") else r["analysis"], "left"),
            Column("method", lambda r: r["method"], "left")]
    if eps_mode:
        cols.append(Column("ε", lambda r: fmt(r["epsilon"], rounding="up") if r.get("epsilon") is not None
                           else (r.get("reason") or "—")[:60]))
    else:
        cols.append(Column("δ", lambda r: fmt(r["delta"], rounding="up") if r.get("delta") is not None
                           else (r.get("reason") or "—")[:60]))
    cols.append(Column("queries answered", lambda r: fmt(r["queries_answered"])))
    cols.append(Column("order", lambda r: fmt(r["order"], 4) if r.get("order") is not None else "—"))
    if votes:
        cols.append(Column("data-dep. better", lambda r: (f"{100 * r['details']['fraction_better']:.1f}%"
                                                          if "fraction_better" in r["details"] else "—")))
    return cols


def _plan(mechanism, noise, missing, queries, delta, epsilon, json_output):
    """Largest number of queries, or smallest noise, with data-independent ε ≤ target at δ (RDP;
    :mod:`dpcalc.accounting.pate_analysis`)."""
    from dpcalc.accounting import pate as ap
    from dpcalc.accounting import pate_analysis as pa
    from dpcalc.errors import InfeasibleError, ParameterError

    if epsilon <= 0:
        raise ParameterError("epsilon", "> 0 for planning", epsilon)
    if queries is None and missing:
        raise ParameterError("queries", "", None, message="plan one thing: omit --queries (largest number "
                             f"of queries) or --{missing[0]} (smallest noise), not both")
    inputs = {"mechanism": mechanism, **{k: val for k, val in noise.items() if val is not None},
              "queries": queries, "epsilon": epsilon, "delta": delta}
    if queries is None:
        plan = pa.largest_queries(mechanism, noise, epsilon=epsilon, delta=delta)
        lo, conv = int(plan.value), plan.conversion
        label = _rdp_accountant(_independent_event(mechanism, noise, lo, lo)).name
        if not plan.feasible:
            raise InfeasibleError(f"even one query costs ε = {fmt(conv.value, rounding='up')} > {epsilon:g} "
                                  f"at δ = {delta:g} ({label}); use more noise")
        res = _row(label, "data-independent", mechanism, conv.value, delta, lo, conv.order,
                   source=ap.SOURCE, details={"plan": "largest number of queries", "queries": lo})
        emit(command="pate", inputs=inputs, results=[res], json_output=json_output,
             title=f"PATE {mechanism}: largest number of queries with ε ≤ {epsilon:g}",
             columns=[Column("method", lambda r: r["method"], "left"),
                      Column("queries", lambda r: fmt(r["details"]["queries"])),
                      Column("ε", lambda r: fmt(r["epsilon"], rounding="up")),
                      Column("order", lambda r: fmt(r["order"], 4))],
             notes=_parameter_notes(mechanism, noise) + [
                 "Data-independent RDP (every query answered), CKS 2020 conversion, order refined; "
                 f"{lo + 1:,} queries would exceed the target."])
        return
    name = missing[0]
    if mechanism == "confident-gnmax":
        raise ParameterError(name, "", None, message=f"--{name} is required: planning the noise of "
                             "confident-gnmax (two σ) is not supported; plan --queries instead")
    plan = pa.smallest_noise(mechanism, name, queries=queries, epsilon=epsilon, delta=delta)
    hi, conv = plan.value, plan.conversion
    if not plan.feasible:
        raise InfeasibleError(f"even {name} = {hi:g} gives ε = {fmt(conv.value, rounding='up')} > {epsilon:g} "
                              f"for {queries:,} queries at δ = {delta:g}")
    label = _rdp_accountant(_independent_event(mechanism, {name: hi}, queries, queries)).name
    res = _row(label, "data-independent", mechanism, conv.value, delta, queries, conv.order, source=ap.SOURCE,
               details={"plan": f"smallest {name}", name: hi})
    emit(command="pate", inputs=inputs, results=[res], json_output=json_output,
         title=f"PATE {mechanism}: smallest {name} with ε ≤ {epsilon:g}",
         columns=[Column("method", lambda r: r["method"], "left"),
                  Column(name, lambda r: fmt(r["details"][name], 7, "up")),
                  Column("ε", lambda r: fmt(r["epsilon"], rounding="up")),
                  Column("order", lambda r: fmt(r["order"], 4))],
         notes=_parameter_notes(mechanism, {name: hi}) + [
             "Data-independent RDP, CKS 2020 conversion, order refined; the noise is rounded up."])


def _check_release(mechanism, votes_path, delta, release_eps, order, beta, sigma_ss, seed):
    """The --release-epsilon options, checked before any file is read: None without the flag,
    else {"order", "beta", "sigma_ss", "seed"}."""
    from dpcalc.errors import ParameterError

    if not release_eps:
        for name, val in (("order", order), ("beta", beta), ("sigma_ss", sigma_ss), ("seed", seed)):
            if val is not None:
                flag = "--" + name.replace("_", "-")
                raise ParameterError(name, "", val, message=f"{flag} applies only with --release-epsilon")
        return None
    if mechanism != "gnmax":
        raise ParameterError("mechanism", "", mechanism, message="--release-epsilon supports --mechanism gnmax "
                             f"only (the smooth sensitivity of {mechanism}'s bound is not implemented), got {mechanism}")
    if votes_path is None or delta is None:
        raise ParameterError("release_epsilon", "", None, message="--release-epsilon needs --votes and --delta "
                             "(it releases the data-dependent ε of the votes at δ)")
    for name, val in (("order", order), ("beta", beta), ("sigma_ss", sigma_ss)):
        if val is None:
            flag = "--" + name.replace("_", "-")
            raise ParameterError(name, "", None, message=f"{flag} is required with --release-epsilon")
    if not 2.0 * order * beta < 1.0:
        raise ParameterError("order", "", order, message=f"--order must be < 1/(2·--beta) = {1.0 / (2.0 * beta):.6g} "
                             f"(the GNSS release's RDP holds for 1 < λ < 1/(2β)), got {order:g}")
    return {"order": float(order), "beta": float(beta), "sigma_ss": float(sigma_ss), "seed": seed}


def _release_rows(run, votes, noise, delta, release, n, m, label: str):
    """Rows of the private release of the data-dependent RDP (GNMax,
    :func:`dpcalc.accounting.pate_analysis.release_gnmax`), labelled ``label`` + "+release"."""
    from dpcalc.accounting import pate_analysis as pa
    from dpcalc.mechanisms import pate_ss as ss

    lam, beta, s_ss = release["order"], release["beta"], release["sigma_ss"]
    rel = pa.release_gnmax(run, votes, sigma=noise["sigma"], order=lam, beta=beta, sigma_ss=s_ss, delta=delta,
                           teachers=n, classes=m, seed=release["seed"])
    det_common = {"rdp_gnss": rel.rdp_gnss, "beta": beta, "sigma_ss": s_ss}
    src = ss.SOURCE_SS
    rows = [
        _row("released", "data-dependent", "gnmax", rel.epsilon_released, delta, run.answered, lam,
             certified=False, source=src, details={**det_common, "publish": "yes", "rdp_released": rel.rdp_released,
                                  "noise": "OS CSPRNG" if release["seed"] is None else f"seeded ({release['seed']}), "
                                  "tests only"}),
        _row(f"{label}+release", "data-dependent", "gnmax", rel.epsilon_data_dependent, delta, run.answered, lam,
             data_dependent=True, source=src, details={**det_common, "publish": "no", "rdp_data_dependent": rel.rdp_data_dependent,
                                  "smooth_sensitivity_private": rel.smooth_sensitivity}),
        _row(f"{label}+release", "data-independent", "gnmax", rel.epsilon_data_independent, delta, run.answered,
             lam, source=src, details={**det_common, "publish": "yes",
                                       "rdp_data_independent": rel.rdp_data_independent}),
    ]
    return rows


def _votes_analysis(mechanism, noise, votes_path, answered_path, teachers, classes, queries, delta, epsilon,
                    per_query_path, plot_path, json_output, guard=None, release=None):
    import numpy as np

    from dpcalc._files import check_output_target
    from dpcalc.accounting import pate as ap
    from dpcalc.errors import ParameterError
    from dpcalc.mechanisms import pate as pm

    # every output checked, a file created and removed in its directory, before the votes are
    # read and the ledger is charged (issue 33)
    if per_query_path is not None:
        check_output_target(per_query_path, option="--per-query", probe=True)
    if plot_path is not None:
        from dpcalc.cli.plot_style import prepare

        prepare(plot_path)
    votes = pm.read_votes_file(votes_path)
    k, m = votes.shape
    answered = None
    if answered_path is not None:
        answered = pm.read_votes_file(answered_path, option="answered", binary=True)
        if answered.shape[1] != 1 or answered.shape[0] != k:
            raise ParameterError("answered", "", None, message=f"--answered {answered_path}: expected one "
                                 f"column of {k:,} rows (one per query), got {answered.shape[0]:,} × {answered.shape[1]}")
        answered = answered[:, 0]
    event = pm.pate_votes_event(
        votes, mechanism=mechanism,
        noise=noise["scale"] if mechanism == "lnmax" else noise["sigma"] if mechanism == "gnmax" else noise["sigma2"],
        sigma1=noise["sigma1"], threshold=noise["threshold"], answered=answered)
    n = int(votes[0].sum())
    for name, given, actual in (("teachers", teachers, n), ("classes", classes, m), ("queries", queries, k)):
        if given is not None and given != actual:
            raise ParameterError(name, f"equal to the votes file's ({actual:,})", given)
    _ledger_reserve(guard, mechanism, noise, k, n, m)
    run = ap.PateRun(event)
    ind_event = _independent_event(mechanism, noise, k, run.answered)
    label = _rdp_accountant(ind_event).name  # the data-dependent analysis is an RDP analysis
    release_rows = _release_rows(run, votes, noise, delta, release, n, m, label) if release is not None else []
    del votes
    if delta is not None:
        dep = ap.epsilon_of_curve(run.rdp_dependent, delta=delta)
        eps_dep, delta_dep = dep.value, delta
    else:
        dep = ap.delta_of_curve(run.rdp_dependent, epsilon=epsilon)
        eps_dep, delta_dep = epsilon, dep.value
    dq, iq = run.per_query(dep.order)
    better = float(np.mean(dq < iq)) if k else 0.0
    eps0 = pm.lnmax_epsilon(noise["scale"]) if mechanism == "lnmax" else None
    results = _independent_rows(mechanism, ind_event, delta=delta, epsilon=epsilon, answered=run.answered,
                                queries=k, eps0=eps0)
    det = {"fraction_better": better, "teachers": n, "classes": m, "queries": k,
           "rdp_data_dependent": float(run.rdp_dependent(np.array([dep.order]))[0]),
           "rdp_data_independent": float(run.rdp_independent(np.array([dep.order]))[0]),
           "warning": LEAK_NOTE}
    if dep.warnings:
        det["warnings"] = list(dep.warnings)
    results.append(_row(label, "data-dependent", mechanism, eps_dep, delta_dep, run.answered, dep.order,
                        data_dependent=True, source=ap.SOURCE, details=det))
    if release is not None:
        for r in results:
            r["details"].setdefault("publish", "no" if r["analysis"] == "data-dependent" else "yes")
        results.extend(release_rows)
    if per_query_path is not None:
        _write_per_query(per_query_path, run, dep.order, dq, iq, event)
    if plot_path is not None:
        _plot(plot_path, run, event, delta if delta is not None else None, epsilon, mechanism, label)
    inputs = {"mechanism": mechanism, **{kk: val for kk, val in noise.items() if val is not None},
              "votes": votes_path, "teachers": n, "classes": m, "queries": k, "delta": delta, "epsilon": epsilon}
    notes = _parameter_notes(mechanism, noise)
    if mechanism == "confident-gnmax" and answered_path is None:
        notes.append("No --answered file: every query counted as answered by GNMax (an upper bound; pass the "
                     "run's 0/1 file for its own cost).")
    notes.append(f"data-dep. better: the share of queries whose data-dependent bound is below the "
                 f"data-independent one at order {fmt(dep.order, 4)}.")
    if release is None:
        notes.append(LEAK_NOTE)
    else:
        inputs.update(release_epsilon=True, order=release["order"], beta=release["beta"],
                      sigma_ss=release["sigma_ss"], seed=release["seed"])
        notes.append(f"Release at order λ = {fmt(release['order'], 4)}, β = {fmt(release['beta'])}, σ_s = "
                     f"{fmt(release['sigma_ss'])}: GNSS cost {fmt(release_rows[0]['details']['rdp_gnss'], rounding='up')} "
                     "(RDP, added to every '+release' row and to 'released'); the order is fixed in advance, not "
                     "optimised on the votes.")
        notes.append(RELEASE_NOTE)
    notes.append("Sources: " + "; ".join(dict.fromkeys(r["source"] for r in results if r.get("source"))) + ".")
    results = _ledger_finish(guard, results, notes, k, mechanism)
    cols = _columns(delta is not None, votes=True)
    if release is not None:
        cols.append(Column("publish", lambda r: r["details"].get("publish", "—"), "left"))
    emit(command="pate", inputs=inputs, results=results, json_output=json_output,
         title=f"PATE {mechanism}: {k:,} queries, {n:,} teachers, {m:,} classes",
         columns=cols, notes=notes)
    if guard is not None:
        guard.released()


def _write_per_query(path: str, run, order: float, dq, iq, event) -> None:
    """Atomically write query, answered, rdp_data_dependent, rdp_data_independent (at ``order``;
    :func:`dpcalc._files.atomic_write`)."""
    import io

    import numpy as np

    from dpcalc._files import atomic_write

    def write(f) -> None:
        fh = io.TextIOWrapper(f, encoding="utf-8")
        fh.write(f"{PER_QUERY_WARNING}\n# order={order!r}\nquery,answered,rdp_data_dependent,rdp_data_independent\n")
        ans = event.answered().astype(np.int64)
        table = np.column_stack([np.arange(1, run.queries + 1), ans, dq, iq])
        np.savetxt(fh, table, delimiter=",", fmt=["%d", "%d", "%.17g", "%.17g"])
        fh.flush()
        fh.detach()  # the binary file stays open for atomic_write's fsync

    atomic_write(path, write, option="--per-query")


def _plot(path: str, run, event, delta, epsilon, mechanism, label: str) -> None:
    """Cumulative ε (or δ) against queries answered: data-dependent vs data-independent
    (:func:`dpcalc.accounting.pate_analysis.cumulative_cost`)."""
    import numpy as np

    from dpcalc.accounting import pate as ap
    from dpcalc.accounting import pate_analysis as pa
    from dpcalc.cli.plot_style import (
        COLOURS,
        finish,
        new_axes,
        require_matplotlib,
        save_figure,
        titled,
    )

    plt = require_matplotlib()
    k = run.queries
    counts = np.unique(np.linspace(0, k, min(k, 200) + 1).round().astype(np.int64))
    yd, yi = pa.cumulative_cost(run, ap.ORDERS, counts, delta=delta, epsilon=epsilon)
    ylabel = f"ε at δ = {delta:g}" if delta is not None else f"δ at ε = {epsilon:g}"
    answered = np.concatenate([[0], np.cumsum(event.answered())])[counts]
    fig, ax = new_axes(plt)
    ax.plot(answered, yi, label=f"data-independent ({label})", color=COLOURS["reference"], linestyle="--")
    ax.plot(answered, yd, label=f"data-dependent ({label}; not publishable)", color=COLOURS["lower"])
    finish(ax, title=titled(f"PATE {mechanism}: cumulative privacy cost", "grid of orders, not refined"),
           xlabel="queries answered", ylabel=ylabel)
    save_figure(fig, path)
    plt.close(fig)
