"""The tables of ``dpcalc ldp`` (the calculator, ``estimate`` and ``mean``): library calls and
rendering only (the mathematics is in :mod:`dpcalc.mechanisms.ldp`)."""

from __future__ import annotations

import sys

from dpcalc.cli.render import Column, emit, fmt
from dpcalc.errors import ParameterError

__all__ = ["run_calculator", "emit_estimates", "emit_mean_table"]


def _need(value, flag: str, why: str = "") -> None:
    if value is None:
        raise ParameterError(flag.lstrip("-").replace("-", "_"), "given", None,
                             message=f"{flag} is required{why}")


def run_calculator(*, epsilon, domain_size, users, target_se, shuffle, delta, simulate, distribution, seed,
                   json_output) -> None:
    """``dpcalc ldp`` without a sub-command."""
    from dpcalc.mechanisms.ldp import (
        compare_protocols,
        inverse_table,
        make_oracle,
        make_rng,
    )
    from dpcalc.mechanisms.ldp import simulate as run_simulation
    from dpcalc.mechanisms.shuffling import shuffle_amplification

    _need(domain_size, "--domain-size")
    _need(users, "--users")
    if (epsilon is None) == (target_se is None):
        raise ParameterError("epsilon", "given", None, message="give exactly one of --eps and --target-se")
    if shuffle and delta is None:
        raise ParameterError("delta", "given", None, message="--delta is required with --shuffle")
    if delta is not None and not shuffle:
        raise ParameterError("delta", "", delta, message=f"--delta is used only with --shuffle (got --delta {delta}): "
                             "leave it out")
    if (seed is not None or distribution != "zipf") and not simulate:
        raise ParameterError("seed", "", seed, message="--seed and --distribution are used only with --simulate")
    inputs = {"epsilon": epsilon, "domain_size": domain_size, "users": users, "target_se": target_se,
              "shuffle": shuffle, "delta": delta, "simulate": simulate}
    notes = []
    if target_se is None:
        rows, best = compare_protocols(epsilon=epsilon, k=domain_size, n=users)
        results = [r.to_json() for r in rows]
        for r in results:
            r["recommended"] = r["method"] == best
    else:
        rows, best = inverse_table(target=target_se, k=domain_size, n=users)
        results = [r.to_json() for r in rows]
        for r in results:
            r["recommended"] = r["method"] == best
        notes.append(f"ε: the smallest ε (rounded up) at which the standard error is ≤ {target_se:g} at n = "
                     f"{users:,}.")
    if shuffle:
        central: dict[float, float] = {}  # one bound per distinct local ε
        for r in results:
            if r.get("epsilon") is None:
                continue
            if r["epsilon"] not in central:
                central[r["epsilon"]] = shuffle_amplification(eps0=r["epsilon"], n=users, delta=delta)[0]["epsilon"]
            r["central_epsilon"], r["central_delta"] = central[r["epsilon"]], delta
        notes.append(f"Central ε after shuffling the n reports (δ = {delta:g}, replace-one): Feldman, McMillan, "
                     "Talwar 2021 §4 (numerical bound, as `dpcalc convert shuffle`).")
    if simulate:
        rng = make_rng(seed)
        for r in results:
            if r.get("epsilon") is None:
                continue
            o = make_oracle(r["method"], r["epsilon"], domain_size)
            s = run_simulation(o, n=users, distribution=distribution, rng=rng)
            r["simulated_mse"], r["formula_mean_variance"] = s["empirical_mse"], s["formula_mean_variance"]
        notes.append(f"Simulation: {users:,} synthetic {distribution} values; empirical mean squared error over the "
                     "k categories beside the formula's mean variance at the true frequencies.")
    notes.append("Variance: of one estimated frequency at f → 0 (Wang, Blocki, Li, Jha 2017); standard error = "
                 "√variance. cms/hcms: unbiased over the public hash draw.")
    if best is not None and target_se is None:
        notes.append(f"Recommended: {best} (smallest variance; ties within 1 % broken by fewer bits).")
    elif best is not None:
        notes.append(f"Recommended: {best} (the smallest ε for the target; ties within 1 % broken by fewer bits).")
    cols = [Column("protocol", lambda r: r["method"] + (" ★" if r.get("recommended") else ""), "left"),
            Column("ε (local)", lambda r: fmt(r.get("epsilon"), rounding="up")),
            Column("variance", lambda r: fmt(r.get("variance"), 4)),
            Column("std. error", lambda r: fmt(r.get("standard_error"), 4)),
            Column("bits/report", lambda r: fmt(r.get("bits")))]
    if shuffle:
        cols.append(Column("ε (central, shuffled)", lambda r: fmt(r.get("central_epsilon"), rounding="up")))
    if simulate:
        cols.append(Column("simulated MSE", lambda r: fmt(r.get("simulated_mse"), 4)))
        cols.append(Column("formula", lambda r: fmt(r.get("formula_mean_variance"), 4)))
    for r in results:
        if r.get("reason") and r.get("epsilon") is None or r.get("applicable") is False:
            notes.append(f"{r['method']}: not applicable — {r.get('reason')}.")
    emit(command="ldp", inputs=inputs, results=results, json_output=json_output,
         title="local DP frequency oracles", columns=cols, notes=notes,
         input_labels={"domain_size": "k", "users": "n"})


def emit_estimates(*, progress, protocol, setup, epsilon, max_value, project, output, json_output) -> None:
    """``dpcalc ldp estimate``: stream the reports, estimate, print or write."""
    from dpcalc._files import atomic_write, check_output_target
    from dpcalc.mechanisms.ldp.io import parse_header, read_reports
    from dpcalc.mechanisms.ldp.mean import MeanAccumulator

    o, params = setup
    if output is not None:
        check_output_target(output, option="output")
    stream = sys.stdin.buffer
    first = stream.readline()
    got = parse_header(first)
    if not got:
        raise ParameterError("input", "", None, message="input line 1: expected the header "
                             "'# dpcalc-ldp protocol=...' written by `dpcalc ldp randomize`")
    for key, want in params.items():
        if key in got and got[key] != str(want):
            raise ParameterError(key, "", got[key], message=(
                f"the reports were made with {key}={got[key]}, but {key}={want} was given"))
    if o is None:
        acc = MeanAccumulator(protocol, epsilon, max_value=max_value)
        for chunk in progress(read_reports(stream, None, start=2)):
            acc.add(chunk)
        mean, se, n = acc.result()
        emit(command="ldp estimate", inputs=params, results=[{"method": protocol, "mean": mean,
                                                              "standard_error": se, "n": n}],
             json_output=json_output, title="LDP mean estimate",
             columns=[Column("protocol", lambda r: r["method"], "left"), Column("n", lambda r: fmt(r["n"])),
                      Column("mean (unbiased)", lambda r: fmt(r["mean"], 6)),
                      Column("std. error", lambda r: fmt(r["standard_error"], 4))],
             notes=["Standard error: the reports' empirical standard deviation over √n."])
        return
    est, n = o.estimate_stream(progress(read_reports(stream, o, start=2)), project=project)
    rows = [{"value": i, "estimate": float(est.estimates[i]), "standard_error": float(est.standard_errors[i]),
             "count": float(est.estimates[i] * n)}
            | ({"projected": float(est.projected[i])} if project else {}) for i in range(o.k)]
    notes = [f"n = {n:,} reports; {o.name}, ε = {fmt(o.epsilon, rounding='up')} per report. Estimates are unbiased "
             "and may fall outside [0, 1]; standard errors are plug-in (Wang et al. 2017 Thm 2).",
             "Source: " + o.source + "."]
    if project:
        notes.append("projected: the estimates projected onto the probability simplex — post-processing (no "
                     "privacy cost), biased.")
    if o.name == "rappor":
        notes.append(f"rappor: randomize draws the permanent response afresh for every report (no client state), "
                     f"so each collection costs ε₁ = {fmt(o.epsilon, rounding='up')}; clients that memoize it are "
                     f"bounded by ε_∞ = {fmt(o.epsilon_inf, rounding='up')} over any number of collections.")
    if o.name in ("cms", "hcms"):
        notes.append("cms/hcms: unbiased over the public hash draw; for the fixed hashes an estimate also carries "
                     "the collisions of its value.")
    if output is not None:
        head = "value,estimate,standard_error" + (",projected" if project else "") + "\n"
        body = "".join(f"{r['value']},{r['estimate']!r},{r['standard_error']!r}"
                       + (f",{r['projected']!r}" if project else "") + "\n" for r in rows)
        atomic_write(output, lambda f: f.write((head + body).encode()), option="output")
        return
    cols = [Column("value", lambda r: fmt(r["value"])), Column("estimate", lambda r: fmt(r["estimate"], 5)),
            Column("std. error", lambda r: fmt(r["standard_error"], 3)),
            Column("estimated count", lambda r: fmt(r["count"], 6))]
    if project:
        cols.append(Column("projected (post-proc.)", lambda r: fmt(r["projected"], 5)))
    emit(command="ldp estimate", inputs=params | {"n": n}, results=rows, json_output=json_output,
         title="LDP frequency estimates", columns=cols, notes=notes)


def emit_mean_table(*, epsilon, users, json_output) -> None:
    """``dpcalc ldp mean``."""
    from dpcalc.mechanisms.ldp.mean import MEAN_SOURCES, mean_table

    rows = [r.to_json() for r in mean_table(epsilon=epsilon, n=users)]
    emit(command="ldp mean", inputs={"epsilon": epsilon, "users": users}, results=rows, json_output=json_output,
         title="LDP mean estimation (worst case over the domain)",
         columns=[Column("protocol", lambda r: r["method"], "left"),
                  Column("ε", lambda r: fmt(r["epsilon"], rounding="up")),
                  Column("variance of the mean", lambda r: fmt(r["variance"], 4)),
                  Column("std. error", lambda r: fmt(r["standard_error"], 4)),
                  Column("bits/report", lambda r: fmt(r["bits"]))],
         notes=["duchi, piecewise: values in [−1, 1]; onebit: values in [0, 1] (scale by M for [0, M]).",
                "Sources: " + "; ".join(f"{p}: {s}" for p, s in MEAN_SOURCES.items()) + "."])
