"""``dpcalc tune``: the privacy of a hyperparameter search — the best of K private runs, K random.

Each run is described like ``dpcalc epsilon`` (σ with the sampling options) or by a ``compose``
spec file (``--spec``); the number of runs K follows ``--runs-distribution`` with mean
``--mean-runs`` (and shape ``--eta``). The whole search is accounted by the rdp accountant
(:mod:`dpcalc.accounting.tuning`: Papernot & Steinke 2022 Thm 2 and 6; pure ε-DP runs:
(2+η)ε, 3ε for the geometric law of Liu & Talwar 2019), beside a fixed number of runs composed,
all runs composed at a high quantile of K (naive), and one run. With ``--eps`` it prints the
per-run σ that keeps the whole search within the target (the one calibration helper).
"""

from __future__ import annotations

import math

import click

from dpcalc.cli.options import (
    RANGES,
    StrictCommand,
    example_epilog,
    json_option,
    neighboring_option,
    number_option,
    read_input_file,
    sampling_options,
    target_delta_option,
    target_epsilon_option,
)
from dpcalc.cli.plot_style import plot_option, prepare
from dpcalc.cli.render import Column, emit, fmt

#: the quantile of K at which all runs are composed for the naive comparison
NAIVE_QUANTILE = 0.99
#: the largest --spec file read (bytes), as compose
SPEC_MAX_BYTES = 16 * 1024 * 1024


def _law(dist: str, mean: float, eta: float | None) -> str:
    shape = "" if eta is None or dist != "negative-binomial" else f", η={eta:g}"
    return f"K ~ {dist} (mean {mean:g}{shape})"


def _upper(r: dict, key: str, digits: int) -> str:
    val = r.get(key)
    if val is None:
        return "∞" if r.get("applicable", True) and r.get("reason") else "—"
    return fmt(val, digits, "up")


def _order(r: dict) -> str:
    d = r.get("details", {})
    if d.get("pure_dp"):
        return "∞ (pure DP)"
    return "—" if d.get("order") is None else fmt(d["order"], 4)


def _status(r: dict) -> str:
    if r.get("applicable") is False:
        return "n/a: " + (r.get("reason") or "")
    return "certified" if r.get("certified") else "approx."


@click.command("tune", cls=StrictCommand, epilog=example_epilog(
    "dpcalc tune --sigma 1 --sample-rate 0.01 --steps 1000 --delta 1e-5 --runs-distribution geometric --mean-runs 10",
    "dpcalc tune --eps 3 --sample-rate 0.01 --steps 1000 --delta 1e-5 --runs-distribution poisson --mean-runs 10",
    "dpcalc tune --spec runs.toml --delta 1e-5 --runs-distribution negative-binomial --eta 0.5 --mean-runs 20",
))
@number_option("--sigma", "--noise-multiplier", "noise_multiplier", kind=RANGES["noise_multiplier"],
               default=None, help="σ of each run (noise std over clipping norm); omit with --eps.")
@sampling_options
@click.option("--spec", type=str, default=None,
              help="Each run as a compose spec file (JSON, or TOML for any other suffix) instead of "
                   "--sigma and the sampling options.")
@click.option("--runs-distribution", type=click.Choice(["poisson", "negative-binomial", "geometric",
                                                        "logarithmic"]), required=True,
              help="Law of the number of runs K (Papernot & Steinke 2022; logarithmic: η → 0, "
                   "geometric: η = 1).")
@number_option("--mean-runs", kind=RANGES["mean_runs"], required=True,
               help="E[K], the mean number of runs (≥ 1).")
@number_option("--eta", kind=RANGES["eta"], default=None,
               help="Shape η of the negative-binomial law, > -1 (required with it only).")
@number_option("--fixed-runs", kind=RANGES["fixed_runs"], default=None,
               help="K of the fixed-K comparison (default: ⌈mean runs⌉).")
@target_delta_option
@target_epsilon_option(required=False, help="Target ε of the whole search: print the per-run σ instead of ε.")
@neighboring_option
@plot_option("Also draw ε of the search against the mean number of runs E[K], per law of K, into FILE "
             "(with --eps: at the per-run σ found for the search).")
@json_option
def tune_command(noise_multiplier, sample_rate, steps, batch_size, dataset_size, epochs, spec,
                 runs_distribution, mean_runs, eta, fixed_runs, delta, epsilon, neighboring, plot, json_output):
    """The privacy of a hyperparameter search: K private runs, K random, only the best kept.

    The whole search is accounted from each run's Rényi-DP curve (Papernot & Steinke 2022,
    Thm 2 and 6; rdp accountant), beside a fixed number of runs, all runs composed at the
    99th percentile of K, and a single run. With --eps: the per-run σ for a target ε.
    """
    from dpcalc.accounting import registry
    from dpcalc.accounting.calibrate import calibrate_noise_multiplier
    from dpcalc.accounting.tuning import SOURCE, pure_epsilon, runs_quantile
    from dpcalc.errors import InfeasibleError, ParameterError, UnsupportedEventError
    from dpcalc.events import SelfComposedEvent, TuningEvent, dpsgd_event
    from dpcalc.schedule import resolve_schedule

    prepare(plot)  # a plot target that cannot be written is refused before any work
    law_eta = eta if runs_distribution == "negative-binomial" else None
    if eta is not None and runs_distribution != "negative-binomial":
        raise ParameterError("eta", "", eta, message=(
            f"--eta is the shape of the negative-binomial law; {runs_distribution} "
            + ("has none" if runs_distribution == "poisson" else
               f"fixes it (η = {1 if runs_distribution == 'geometric' else 0})")))
    inputs: dict = {}
    schedule = None
    if spec is not None:
        if noise_multiplier is not None or any(x is not None for x in (sample_rate, steps, batch_size,
                                                                         dataset_size, epochs)):
            raise ParameterError("spec", "", spec, message=(
                "give each run either as --spec FILE or as --sigma with sampling options, not both"))
        if epsilon is not None:
            raise ParameterError("epsilon", "", epsilon, message=(
                "--eps calibrates the σ of a DP-SGD run: describe the run with sampling options, "
                "not --spec"))
        from dpcalc.composition.spec import parse_spec_text, sequence_event

        if not spec:
            raise ParameterError("spec", "", spec, message="--spec needs a file name, got an empty path")
        raw = read_input_file(spec, option="--spec", max_bytes=SPEC_MAX_BYTES)
        sequence = parse_spec_text(raw, name=spec, toml=not spec.lower().endswith(".json"))
        base_event = sequence_event(sequence)
        inputs["run"] = " + ".join(m.label() for m in sequence[:5]) + (
            f" + … ({len(sequence)} items)" if len(sequence) > 5 else "")
    else:
        if (noise_multiplier is None) == (epsilon is None):
            raise ParameterError("noise_multiplier", "", None, message=(
                "give --sigma (the privacy of each run) or --eps (a target for the whole search), "
                "exactly one of the two"))
        schedule = resolve_schedule(sample_rate=sample_rate, steps=steps, batch_size=batch_size,
                                    dataset_size=dataset_size, epochs=epochs)
        if schedule.steps < 1:
            raise ParameterError("steps", "at least 1", schedule.steps)
        base_event = None
        if noise_multiplier is not None:
            inputs["noise_multiplier"] = noise_multiplier
        inputs.update(schedule.as_inputs())

    search = TuningEvent(SelfComposedEvent(dpsgd_event(noise_multiplier=1.0, sample_rate=1.0, steps=1), 1),
                         runs_distribution, mean_runs, law_eta)  # validates the law early
    k_fixed = fixed_runs if fixed_runs is not None else max(1, math.ceil(mean_runs))
    k_naive = runs_quantile(search, NAIVE_QUANTILE)
    inputs.update(runs_distribution=runs_distribution, mean_runs=mean_runs, eta=law_eta,
                  delta=delta, neighboring=neighboring)
    if epsilon is not None:
        inputs["target_epsilon"] = epsilon
    # the tightest registered accountant that accounts for a repeat-and-select (capability: supports)
    acc = next((a for a in (registry.get_accountant(n, neighboring=neighboring) for n in registry.available())
                if a.supports(search)), None)
    if acc is None:
        raise UnsupportedEventError("no registered accountant accounts for a repeat-and-select")

    def run_of(sigma: float | None):
        if base_event is not None:
            return base_event
        return dpsgd_event(noise_multiplier=sigma, sample_rate=schedule.sample_rate, steps=schedule.steps)

    scenarios = [
        ("search", _law(runs_distribution, mean_runs, law_eta), f"random, mean {mean_runs:g}",
         lambda s: TuningEvent(run_of(s), runs_distribution, mean_runs, law_eta)),
        ("fixed", f"best of a fixed K = {k_fixed:,} runs (all composed)", f"{k_fixed:,}",
         lambda s: SelfComposedEvent(run_of(s), k_fixed)),
        ("naive", f"naive: all runs composed, K at its {NAIVE_QUANTILE:.0%} quantile",
         f"{k_naive:,}", lambda s: SelfComposedEvent(run_of(s), k_naive)),
        ("single", "one run", "1", lambda s: run_of(s)),
    ]
    results = []
    for key, label, runs, make in scenarios:
        if epsilon is None:
            res = acc.epsilon(make(noise_multiplier), delta=delta)
        else:
            try:
                res = calibrate_noise_multiplier(acc, target_epsilon=epsilon, delta=delta, make_event=make)
            except InfeasibleError as e:
                res = acc.not_applicable(str(e))
        row = res.to_json()
        if epsilon is None and key != "search":
            # a pure ε-DP run: basic composition (Dwork & Roth 2014 Thm 3.14) may beat the RDP route
            pure = pure_epsilon(make(noise_multiplier), 2.0 if neighboring == "replace" else 1.0)
            if pure is not None and row.get("epsilon") is not None and pure < row["epsilon"]:
                row.update(epsilon=pure, details={"order": math.inf, "pure_dp": True})
        row.update(scenario=key, label=label, runs=runs)
        results.append(row)
    if results[0].get("applicable") is False or (epsilon is None and results[0].get("epsilon") is None):
        raise InfeasibleError("the search has no finite guarantee: " + (results[0].get("reason") or ""))

    if epsilon is None:
        columns = [Column("scenario", lambda r: r["label"], "left"), Column("runs K", lambda r: r["runs"]),
                   Column("ε (upper bound)", lambda r: _upper(r, "epsilon", 6)),
                   Column("order α", _order), Column("status", _status, "left")]
        title = f"ε of the whole search at δ ({acc.name} accountant)"
    else:
        columns = [Column("scenario", lambda r: r["label"], "left"), Column("runs K", lambda r: r["runs"]),
                   Column("σ per run", lambda r: fmt(r.get("noise_multiplier"), 7, "up")),
                   Column("ε achieved", lambda r: _upper(r, "epsilon", 8)),
                   Column("status", _status, "left")]
        title = f"per-run σ for the target ε of the whole search ({acc.name} accountant)"
    notes = []
    if runs_distribution != "poisson" and mean_runs > 1:
        from dpcalc.accounting.tuning import tnb_gamma

        g = tnb_gamma(mean_runs, {"geometric": 1.0, "logarithmic": 0.0}.get(runs_distribution, law_eta))
        notes.append(f"Sample K from the truncated negative binomial with η = "
                     f"{ {'geometric': 1.0, 'logarithmic': 0.0}.get(runs_distribution, law_eta):g}, "
                     f"γ = {g:.10g} (E[K] = {mean_runs:g}); the guarantee assumes K is drawn afresh and "
                     "never revealed, and only the best run is released.")
    else:
        notes.append("The guarantee assumes K is drawn afresh and never revealed, and only the best "
                     "run is released (K = 0 releases nothing).")
    if any(r.get("details", {}).get("pure_dp") for r in results[:1]):
        notes.append("Each run is pure ε-DP: the search is (2+η)ε-DP (Papernot & Steinke 2022 Cor 3; "
                     "geometric law: 3ε, Liu & Talwar 2019); composed runs: ε adds up (basic composition).")
    if schedule is not None:
        notes.append("Each run: DP-SGD with Poisson sampling (q, T) as given." if schedule.source != "unsampled"
                     else "Each run: the Gaussian mechanism composed T times (no subsampling).")
    for r in results:
        for w in r.get("details", {}).get("warnings", ()):
            notes.append(f"{r['scenario']}: {w}")
    notes.append(f"Adjacency: {neighboring}. Sources — {acc.name} accountant; repeat-and-select: {SOURCE}.")
    if plot is not None:
        from dpcalc.cli.run_plots import schedule_setting, tune_plot

        sigma = noise_multiplier if epsilon is None else results[0].get("noise_multiplier")
        where = (f"each run: {inputs['run']}" if schedule is None
                 else "each run: " + schedule_setting(schedule, sigma=sigma))
        notes.append(tune_plot(plot, run=run_of(sigma), accountant=acc, delta=delta, mean_runs=mean_runs,
                               law=runs_distribution, eta=law_eta, where=where,
                               pure_epsilon_of_runs=lambda e: pure_epsilon(e, 2.0 if neighboring == "replace" else 1.0)))
    emit(command="tune", inputs=inputs, results=results, json_output=json_output, columns=columns,
         title=title, notes=list(dict.fromkeys(notes)))
