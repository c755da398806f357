"""Copy as Python: for each page, a snippet that calls the library (the public API, ``import
dpcalc``, or the documented module the command itself calls) with the result's inputs and prints
the same main number(s) as the result. Built from the CLI's JSON ``inputs`` echo and the argv only
(text, no mathematics here). Inputs a snippet cannot express (settings without a library
argument) give the command itself, run through :func:`dpcalc.cli.main`, with a comment saying why.

tests/web/test_server.py executes every snippet and compares its first printed number with the
result's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["python_snippet"]

Snippet = Callable[[Mapping[str, Any], list, Sequence[str], "str | None"], "str | None"]


def _r(x: Any) -> str:
    return repr(x)


def _flags(argv: Sequence[str], *flags: str) -> bool:
    return any(w in flags for w in argv)


def _values(argv: Sequence[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, w in enumerate(argv[:-1]) if w == flag]


def _first(rows: list) -> Mapping[str, Any]:
    return next((r for r in rows if isinstance(r, Mapping) and r.get("applicable", True)), {})


def _dpsgd_defaults(inp: Mapping[str, Any], argv: Sequence[str]) -> bool:
    """The one-call DP-SGD snippets reproduce the default settings only: Poisson sampling,
    add/remove, one record per person, the accountants' default settings."""
    return (inp.get("sampling", "poisson") == "poisson" and inp.get("group_size", 1) == 1
            and inp.get("neighboring", "add-remove") == "add-remove" and "records_per_user" not in inp
            and not _flags(argv, "--discretization", "--accuracy", "--privacy-unit"))


def _sigma(inp, rows, argv, upload):
    first = _first(rows)
    if not (_dpsgd_defaults(inp, argv) and first.get("accountant")):
        return None
    return ("import dpcalc\n\n"
            f"acc = dpcalc.get_accountant({_r(first['accountant'])})\n"
            f"res = dpcalc.calibrate_dpsgd(acc, target_epsilon={_r(inp['epsilon'])}, delta={_r(inp['delta'])},\n"
            f"                             sample_rate={_r(inp['sample_rate'])}, steps={_r(inp['steps'])})\n"
            "print(res.noise_multiplier)  # σ\n")


def _epsilon(inp, rows, argv, upload):
    first = _first(rows)
    if not (_dpsgd_defaults(inp, argv) and first.get("accountant")):
        return None
    return ("import dpcalc\n\n"
            f"event = dpcalc.dpsgd_event(noise_multiplier={_r(inp['noise_multiplier'])}, "
            f"sample_rate={_r(inp['sample_rate'])}, steps={_r(inp['steps'])})\n"
            f"res = dpcalc.get_accountant({_r(first['accountant'])}).epsilon(event, delta={_r(inp['delta'])})\n"
            "print(res.epsilon)  # ε\n")


def _samplers(inp, rows, argv, upload):
    if _flags(argv, "--max-batch-size") or not rows or rows[0].get("sampler") != "poisson":
        return None
    args = (f"batch_size={_r(inp['batch_size'])}, dataset_size={_r(inp['dataset_size'])}, "
            f"epochs={_r(inp['epochs'])}")
    return ("from dpcalc.accounting import shuffling\n\n"
            f"layout = shuffling.batch_layout({args})\n"
            f"poisson = shuffling.poisson_epsilon(noise_multiplier={_r(inp['noise_multiplier'])}, layout=layout, "
            f"delta={_r(inp['delta'])})\n"
            "print(poisson.epsilon)  # ε with Poisson sampling (certified)\n"
            f"print(shuffling.certified_upper_epsilon(noise_multiplier={_r(inp['noise_multiplier'])}, "
            f"epochs={_r(inp['epochs'])}, delta={_r(inp['delta'])}))  # shuffle / balls-in-bins: certified ε\n")


def _risk(inp, rows, argv, upload):
    fpr = next((r["fpr"] for r in rows if r.get("quantity") == "tpr_at_fpr"), 0.001)
    if "mu" in inp and set(inp) <= {"mu", "delta"}:
        return ("import dpcalc\n\n"
                f"curve = dpcalc.gdp_curve({_r(inp['mu'])})  # the exact trade-off curve of μ-GDP\n"
                f"print(float(curve.tpr({_r(fpr)})))  # the largest TPR of any membership test at FPR {fpr:g}\n")
    if "noise_multiplier" in inp and _flags(argv, "--sigma", "--noise-multiplier") \
            and not _flags(argv, "--discretization", "--accuracy", "--prior", "--baseline", "--spec", "--sampling") \
            and inp.get("group_size", 1) == 1:
        fprs = sorted({r["fpr"] for r in rows if r.get("quantity") == "tpr_at_fpr"})
        return ("import dpcalc\n\n"
                f"event = dpcalc.dpsgd_event(noise_multiplier={_r(inp['noise_multiplier'])}, "
                f"sample_rate={_r(inp['sample_rate'])}, steps={_r(inp['steps'])})\n"
                f"curve, head = dpcalc.curve_from_accountant(event, accountant={_r(inp['accountant'])}, "
                f"delta={_r(inp['delta'])},\n"
                f"                                           neighboring={_r(inp['neighboring'])}, fprs={_r(fprs)})\n"
                f"print(float(curve.tpr({_r(fpr)})))  # the largest TPR of any membership test at FPR {fpr:g}\n"
                "print(head.epsilon)  # the accountant's ε at δ\n")
    if "epsilon" not in inp or not set(inp) <= {"epsilon", "delta", "fpr", "prior", "baseline"}:
        return None
    return ("import dpcalc\n\n"
            f"curve = dpcalc.pair_curve(epsilon={_r(inp['epsilon'])}, delta={_r(inp.get('delta', 0.0))})\n"
            f"print(float(curve.tpr({_r(fpr)})))  # the largest TPR of any membership test at FPR {fpr:g}\n")


def _plan(inp, rows, argv, upload):
    if inp.get("noise_multiplier") is not None or _flags(argv, "--discretization", "--accuracy"):
        return None
    grid = "steps" if inp.get("steps") is not None else "epochs"
    extra = "".join(f", {k}={_r(inp[k])}" for k in ("examples_budget",) if inp.get(k) is not None)
    extra += f", sampling={_r(inp['sampling'])}" if inp.get("sampling", "poisson") != "poisson" else ""
    extra += f", group_size={_r(inp['group_size'])}" if inp.get("group_size", 1) != 1 else ""
    extra += ", quick=True" if inp.get("quick") else ""
    return ("import dpcalc\n\n"
            f"plan = dpcalc.plan_grid(target_epsilon={_r(inp['epsilon'])}, delta={_r(inp['delta'])}, "
            f"dataset_size={_r(inp['dataset_size'])},\n"
            f"                        batch_sizes={_r(inp['batch_size'])}, {grid}={_r(inp[grid])}, "
            f"accountant={_r(inp.get('accountant'))},\n"
            f"                        neighboring={_r(inp.get('neighboring', 'add-remove'))}, "
            f"max_grad_norm={_r(inp.get('max_grad_norm', 1.0))}{extra})\n"
            "rows = [r for r in plan.results_json() if not r.get(\"over_budget\")]\n"
            "print(rows[0][\"noise_multiplier\"])  # σ of the first-ranked cell\n"
            "for r in rows:\n"
            f"    print(r[\"batch_size\"], r[{_r(grid)}], r[\"noise_multiplier\"], r.get(\"pareto\"))\n")


def _compose(inp, rows, argv, upload):
    mechs = inp.get("mechanisms")
    if not isinstance(mechs, list) or not mechs or not _first(rows):
        return None
    mode = "delta" if inp.get("delta") is not None else "epsilon"
    methods = _values(argv, "--method")
    specs = ",\n    ".join(f"dpcalc.MechanismSpec(**{_r(dict(m))})" for m in mechs)
    target = f"delta={_r(inp['delta'])}" if mode == "delta" else f"epsilon={_r(inp['epsilon'])}"
    what = "ε" if mode == "delta" else "δ"
    return ("import dpcalc\n\n"
            f"report = dpcalc.compose([\n    {specs},\n], {target}"
            + (f", methods={_r(methods)}" if methods else "") + ")\n"
            + f"print(report.results[0].{'epsilon' if mode == 'delta' else 'delta'})  # {what}, first row\n"
            + "for r in report.results:\n"
            + f"    print(r.method, r.{'epsilon' if mode == 'delta' else 'delta'}, r.certified)\n")


def _laplace(inp, rows, argv, upload):
    if inp.get("epsilon") is None:
        return None
    beta = f", beta={_r(inp['beta'])}" if inp.get("beta") is not None else ""
    return ("import dpcalc\n\n"
            f"res = dpcalc.calibrate_laplace(epsilon={_r(inp['epsilon'])}, "
            f"sensitivity={_r(inp.get('sensitivity', 1.0))}{beta}, dims={_r(inp.get('dims', 1))})\n"
            "print(res[\"scale\"])  # Laplace scale b\n")


def _gaussian(inp, rows, argv, upload):
    if inp.get("epsilon") is None:
        return None
    return ("import dpcalc\n\n"
            f"res = dpcalc.calibrate_gaussian(epsilon={_r(inp['epsilon'])}, delta={_r(inp['delta'])}, "
            f"sensitivity={_r(inp.get('sensitivity', 1.0))}, method={_r(inp.get('method', 'analytic'))})\n"
            "print(res[0][\"noise_std\"])  # noise standard deviation (the chosen method first)\n")


def _exponential(inp, rows, argv, upload):
    if not upload:
        return None
    return ("import dpcalc\n"
            "from dpcalc.mechanisms.exponential import read_scores\n\n"
            f"with open({_r(upload)}, encoding=\"utf-8\") as f:  # the scores file you uploaded\n"
            "    labels, scores = read_scores(f.read().splitlines())\n"
            f"res = dpcalc.exponential_mechanism(scores=scores, epsilon={_r(inp['epsilon'])}, "
            f"sensitivity={_r(inp['sensitivity'])},\n"
            f"                                   monotonic={_r(inp['monotonic'])}, beta={_r(inp['beta'])}, "
            "labels=labels)\n"
            "print(float(res[\"probabilities\"][0]))  # probability of the first candidate\n"
            "print(list(res[\"probabilities\"]))\n")


def _rr(inp, rows, argv, upload):
    counts = f", observed={_r([int(x) for x in str(inp['observed']).split(',')])}" if inp.get("observed") else ""
    return ("import dpcalc\n\n"
            f"res = dpcalc.randomized_response(epsilon={_r(inp['epsilon'])}, categories={_r(inp['categories'])}"
            f"{counts})\n"
            "print(res[\"p_truth\"])  # probability of reporting the truth\n"
            + ("print(list(res[\"estimates\"]))  # unbiased estimates of each category's share\n" if counts else ""))


_PATE_EVENTS = {
    "lnmax": "dpcalc.SelfComposedEvent(dpcalc.LNMaxEvent({scale}), {queries})",
    "gnmax": "dpcalc.SelfComposedEvent(dpcalc.GNMaxEvent({sigma}), {queries})",
}


def _pate(inp, rows, argv, upload):
    first = _first(rows)
    if upload or inp.get("mechanism") not in _PATE_EVENTS or inp.get("queries") is None \
            or first.get("analysis") != "data-independent" or inp.get("epsilon") is not None:
        return None
    noise = {"scale": _r(inp.get("scale")), "sigma": _r(inp.get("sigma"))}
    event = _PATE_EVENTS[inp["mechanism"]].format(queries=_r(inp["queries"]), **noise)
    return ("import dpcalc\n\n"
            f"event = {event}  # the answered queries, data-independent\n"
            f"for name in {_r([r['method'] for r in rows if r.get('analysis') == 'data-independent'])}:\n"
            "    if name in dpcalc.available():  # the accountants' rows (the table's theorems: dpcalc.cli.pate)\n"
            f"        print(dpcalc.get_accountant(name).epsilon(event, delta={_r(inp['delta'])}).epsilon, name)  # ε\n")


def _mf(inp, rows, argv, upload):
    if _flags(argv, "--optimize") or not inp.get("strategy"):
        return None
    target = (f"epsilon={_r(inp['epsilon'])}" if inp.get("epsilon") is not None
              else f"noise_multiplier={_r(inp['noise_multiplier'])}")
    sep = f", {_r(inp['min_separation'])}" if inp.get("min_separation") is not None else ""
    return ("from dpcalc.accounting.correlated import mf_compare\n"
            "from dpcalc.mechanisms.correlated import Participation\n"
            "from dpcalc.mechanisms.correlated.spec import parse_strategy\n\n"
            f"participation = Participation({_r(inp['steps'])}, {_r(inp['epochs'])}{sep})\n"
            f"strategy = parse_strategy({_r(_values(argv, '--strategy')[0])}, steps={_r(inp['steps'])}, "
            f"epochs={_r(inp['epochs'])})\n"
            f"rows = mf_compare(strategy, participation, delta={_r(inp['delta'])}, {target},\n"
            f"                  sample_rate={_r(inp.get('sample_rate'))}, "
            f"poisson={_r(not _flags(argv, '--no-poisson'))})\n"
            "print(rows[0].to_json()[\"rmse\"])  # RMSE of the prefix sums, this strategy\n"
            "for r in rows:\n"
            "    j = r.to_json()\n"
            "    print(j[\"method\"], j[\"noise_multiplier\"], j[\"rmse\"])\n")


def _rappor(inp, rows, argv, upload):
    return ("from dpcalc.mechanisms.ldp.rappor import rappor_epsilon\n\n"
            f"r = rappor_epsilon(f={_r(inp['f'])}, p={_r(inp['p'])}, q={_r(inp['q'])}, hashes={_r(inp['hashes'])})\n"
            "print(r[\"epsilon_one\"])  # ε of one report\n"
            "print(r[\"epsilon_inf\"])  # ε of any number of reports of one value (longitudinal)\n")


def _ldp_mean(inp, rows, argv, upload):
    return ("from dpcalc.mechanisms.ldp.mean import mean_table\n\n"
            f"for row in mean_table(epsilon={_r(inp['epsilon'])}, n={_r(inp['users'])}):\n"
            "    r = row.to_json()\n"
            "    print(r[\"standard_error\"], r[\"method\"])  # standard error of the mean\n")


_SNIPPETS: dict[str, Snippet] = {
    "sigma": _sigma, "epsilon": _epsilon, "samplers": _samplers, "risk": _risk, "plan": _plan,
    "compose": _compose, "mechanisms/laplace": _laplace, "mechanisms/gaussian": _gaussian,
    "mechanisms/exponential": _exponential, "mechanisms/rr": _rr, "pate": _pate, "mf": _mf,
    "ldp/rappor": _rappor, "ldp/mean": _ldp_mean,
}

#: why a page's inputs got the command instead of a library call
_WHY = {
    "sigma": "these settings (a non-Poisson sampler, replace-one, a group or user unit, pld grid options) "
             "are resolved by the command (dpcalc.cli.sigma) before it calls the library",
    "epsilon": "these settings (a non-Poisson sampler, replace-one, a group or user unit, pld grid options) "
               "are resolved by the command (dpcalc.cli.epsilon) before it calls the library",
    "samplers": "the truncated-Poisson and Monte Carlo rows are assembled by the command (dpcalc.cli.sampling_cost)",
    "plan": "the fixed-σ modes and pld grid options are resolved by the command (dpcalc.cli.plan)",
    "pate": "the data-dependent analysis of uploaded votes (and Confident-GNMax, a target ε) is assembled by "
            "the command (dpcalc.cli.pate) from several library calls",
    "mf": "--optimize runs the optimiser through the command (dpcalc.cli.mf)",
    "risk": "a --spec file, priors or baselines, a sampler or pld grid options are assembled by the command "
            "(dpcalc.cli.risk)",
}


def python_snippet(page_path: str, argv: Sequence[str], result: Mapping[str, Any],
                   upload_name: str | None = None) -> str:
    """A Python snippet that calls the library and prints the result's main number first.

    Args:
        page_path: the page (``"sigma"``, ``"mechanisms/rr"``, ...).
        argv: the command's words (the upload, if any, as ``-``).
        result: the CLI's JSON object.
        upload_name: the uploaded file's (sanitised) name, read by the snippet.

    Returns:
        The snippet. Where no library call covers the inputs: the command run through
        :func:`dpcalc.cli.main`, with a comment saying why.
    """
    inp = result.get("inputs") or {}
    rows = [r for r in result.get("results") or [] if isinstance(r, Mapping)]
    make = _SNIPPETS.get(page_path)
    code = None
    if make is not None:
        try:
            code = make(inp, rows, argv, upload_name)
        except (KeyError, TypeError, ValueError, IndexError):  # an unexpected JSON shape: the command
            code = None
    if code is not None:
        return code
    why = _WHY.get(page_path, "no library function gives this page's table in one call")
    words = [upload_name if (w == "-" and upload_name) else w for w in argv]
    return (f"# No single library call covers these inputs: {why}.\n"
            "# The same command, run in Python (prints its JSON):\n"
            "from dpcalc.cli import main\n\n"
            f"main({list(words) + ['--json']!r})\n")
