"""``dpcalc compose``: every composition bound for one sequence of mechanisms.

Display rule (docs/design.md, "Output contract"): an upper bound is printed rounded up to
the shown digits — except a value that is exact: a target δ (or ε) that a method meets is
the target itself and prints as given (``1e-05``, not ``1.001e-05``), and a value that is
exactly a short decimal (basic composition of 200 × (0.1, 0) is exactly 20) prints as that
decimal. A method that spends a different δ prints its own δ, rounded up.
"""

from __future__ import annotations

import math

import click

from dpcalc._files import read_input_file
from dpcalc.cli.options import (
    RANGES,
    StrictCommand,
    example_epilog,
    json_option,
    number_option,
    parse_number_text,
)
from dpcalc.cli.render import Column, emit, fmt
from dpcalc.errors import DpcalcError, InfeasibleError, ParameterError

#: flags that build the sequence, in the order they appear on the command line
_MECH_FLAGS = {"--dp": "dp", "--gaussian": "gaussian", "--laplace": "laplace", "--exponential": "exponential"}
_ATTR_FLAGS = {"--count": "count", "--sample-rate": "sample_rate", "-q": "sample_rate", "--sampling": "sampling",
               "--batch-size": "batch_size", "--dataset-size": "dataset_size", "--max-batch-size": "max_batch_size",
               "--group-size": "group_size"}
#: sequence flags that apply to the preceding --gaussian only (its batch sampler, its group)
_GAUSSIAN_ONLY = ("sample_rate", "sampling", "batch_size", "dataset_size", "max_batch_size", "group_size")
#: options that take a value but do not build the sequence
_VALUE_OPTIONS = ("--spec", "--delta", "--eps", "--epsilon", "--plot", "--plot-curve", "--steps-grid", "--method")

#: the largest --spec file read (bytes)
SPEC_MAX_BYTES = 16 * 2**20


class _OrderedCommand(StrictCommand):
    """Records the order of --dp/--gaussian/--laplace/--exponential/--count/--sample-rate tokens, so that
    each --count and --sample-rate attaches to the mechanism given just before it.

    Accepts ``--flag value``, ``--flag=value`` and the attached short form ``-q0.01``."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        order = []
        i = 0
        while i < len(args):
            tok = args[i]
            i += 1
            if tok == "--":
                break
            name, eq, val = tok.partition("=") if tok.startswith("--") else (tok, "", "")
            if not eq and tok.startswith("-q") and len(tok) > 2:
                name, eq, val = "-q", "=", tok[2:]  # attached short value: -q0.01
            if name in _MECH_FLAGS or name in _ATTR_FLAGS:
                if not eq:
                    if i >= len(args):
                        break  # click reports the missing value
                    val = args[i]
                    i += 1
                order.append((name, val))
            elif tok in _VALUE_OPTIONS:
                i += 1
        ctx.meta["compose_order"] = order
        return super().parse_args(ctx, args)


#: the supported range (cli/options.py RANGES) of each sequence flag's value
_KINDS = {"--dp": "epsilon_dp", "--dp δ": "delta_closed", "--gaussian": "noise_multiplier", "--laplace": "epsilon_mech",
          "--exponential": "epsilon_mech", "--count": "count", "--sample-rate": "sample_rate", "-q": "sample_rate",
          "--batch-size": "batch_size", "--dataset-size": "dataset_size", "--max-batch-size": "batch_size",
          "--group-size": "group_size"}


def _number(flag: str, text: str, kind: str | None = None) -> float:
    """A sequence flag's value, parsed strictly with its supported range (one-line error)."""
    return parse_number_text(RANGES[kind or _KINDS[flag]], flag.split()[0], text)


def _sequence_from_flags(order) -> list:
    from dpcalc.composition.spec import MechanismSpec

    items: list[dict] = []
    for flag, text in order:
        if flag in _MECH_FLAGS:
            kind = _MECH_FLAGS[flag]
            item: dict = {"mechanism": kind, "count": 1, "_flag": flag}
            if kind == "dp":
                parts = [p.strip() for p in text.split(",")]
                if len(parts) not in (1, 2) or not all(parts):
                    raise ParameterError("dp", "", text, message=f"--dp must be ε or ε,δ (e.g. --dp 0.1,1e-6), got {text!r}")
                item["epsilon"] = _number("--dp", parts[0])
                item["delta"] = _number("--dp", parts[1], "delta_closed") if len(parts) == 2 else 0.0
            elif kind in ("laplace", "exponential"):
                item["epsilon"] = _number(flag, text)
            else:
                item["noise_multiplier"] = _number("--gaussian", text)
            items.append(item)
        else:
            attr = _ATTR_FLAGS[flag]
            if not items:
                raise ParameterError(attr, "", text, message=f"{flag} must follow the mechanism it applies to "
                                     "(--dp, --gaussian, --laplace or --exponential)")
            if attr in _GAUSSIAN_ONLY and items[-1]["mechanism"] != "gaussian":
                raise ParameterError(attr, "", text, message=f"{flag} applies to --gaussian only")
            if attr in items[-1].setdefault("_set", set()):  # never keep only the last value silently
                raise ParameterError(attr, "", text, message=f"{flag} given more than once for one "
                                     f"{items[-1]['_flag']} mechanism: give it once, right after its mechanism")
            items[-1]["_set"].add(attr)
            if attr == "sampling":
                from dpcalc.events import SAMPLINGS

                if text not in SAMPLINGS:
                    raise ParameterError("sampling", "one of " + ", ".join(SAMPLINGS), text)
                items[-1][attr] = text
            elif attr == "group_size":
                items[-1][attr] = int(_number(flag, text))
            else:
                items[-1][attr] = _number(flag, text)
    out = []
    for item in items:
        flag = item.pop("_flag")
        item.pop("_set", None)
        try:
            out.append(MechanismSpec(**item))
        except ParameterError as e:
            if e.name == "count":
                raise ParameterError("count", "", e.value, message=f"--{e.message}") from None
            raise ParameterError(e.name, "", e.value, message=f"{flag}: {e.message}") from None
    return out


def _check_order(order, dp, gaussian, laplace, count, sample_rate, exponential=(), sampler=None) -> None:
    """Refuse a command line whose sequence flags could not all be placed (never drop one).
    ``sampler``: the values of --sampling/--batch-size/--dataset-size/--max-batch-size by flag."""
    sampler = sampler or {}
    seen = {"--dp": 0, "--gaussian": 0, "--laplace": 0, "--exponential": 0, "--count": 0, "sample_rate": 0,
            **{f: 0 for f in sampler}}
    for flag, _ in order:
        seen["sample_rate" if flag in ("-q", "--sample-rate") else flag] += 1
    parsed = {"--dp": len(dp), "--gaussian": len(gaussian), "--laplace": len(laplace),
              "--exponential": len(exponential), "--count": len(count), "sample_rate": len(sample_rate),
              **{f: len(vals) for f, vals in sampler.items()}}
    if seen != parsed:
        bad = next(k for k in seen if seen[k] != parsed[k])
        name = "--sample-rate/-q" if bad == "sample_rate" else bad
        raise ParameterError(name.lstrip("-"), "", None, message=f"could not tell which mechanism each {name} "
                             f"belongs to; write each as '{name.split('/')[0]} VALUE' right after its mechanism")


def _method_help() -> str:
    from dpcalc.composition.compose import THEOREMS, available_methods

    acc = [m for m in available_methods() if m not in THEOREMS]
    return (f"Only these methods (repeatable; default all): {', '.join(THEOREMS)} or a registered "
            f"accountant: {', '.join(acc)}.")


class _MethodOption(click.Option):
    """--method: the choices are read from the registry when help is shown (not at import)."""

    def get_help_record(self, ctx):
        self.help = _method_help()
        return super().get_help_record(ctx)


def _certified_cell(res) -> str:
    if res.get("applicable") is False:
        return "—"
    if not res["certified"] and res.get("details", {}).get("validity") == "non-adaptive":
        return "non-adaptive"  # exact, but only for mechanisms fixed in advance (DDR20 §3.3)
    if res.get("details", {}).get("data_dependent"):
        return "data-dep."  # a number about the private PATE votes, not a guarantee
    return "yes" if res["certified"] else "approx."


def _approximation_note(name: str) -> str:
    """What an uncertified row of the accountant ``name`` is (its declared
    :attr:`~dpcalc.accounting.base.Accountant.approximation_note`; "" if none)."""
    from dpcalc.accounting.registry import get_class

    try:
        return get_class(name).approximation_note
    except (ImportError, DpcalcError):
        return ""


def _note_cell(res) -> str:
    if res.get("reason"):
        return str(res["reason"])
    d = res.get("details", {})
    bits = []
    if "evaluation" in d:
        bits.append(d["evaluation"])
    if d.get("validity") == "non-adaptive":
        bits.append("mechanisms fixed in advance only (adaptive choice can cost more)")
    for key in ("epsilon_lower", "delta_lower"):
        if key in d:
            bits.append(f"lower {fmt(d[key], 5, 'down')}")
    if "per_step_delta" in d:
        bits.append(f"δ₀={fmt(d['per_step_delta'], 3)}")
    if d.get("capped_at_basic"):
        bits.append("= basic (DRV larger)")
    if "order" in d and d["order"] is not None and not (isinstance(d["order"], float) and math.isnan(d["order"])):
        bits.append(f"order {fmt(d['order'], 4)}")
    if "mu" in d:
        bits.append(f"μ={fmt(d['mu'], 4)}")
    note = ""
    if d.get("data_dependent"):
        note = "data-dependent: about the private votes, not publishable"
    elif res.get("accountant") and not res["certified"]:
        note = _approximation_note(res["accountant"])
    if note:
        bits.append(note)
    if "grid_error" in d:
        bits.append(d["grid_error"])
    return ", ".join(bits)


def bound_cell(x, digits: int, target: float | None) -> str:
    """An upper bound for a table cell: the target itself prints as given (it is exact);
    anything else is rounded up to ``digits`` significant digits (exact short decimals, such
    as 20.0, print as they are, since rounding them up changes nothing)."""
    if isinstance(x, float) and target is not None and x == target:
        return fmt(x, digits)
    return fmt(x, digits, "up")


@click.command(
    "compose",
    cls=_OrderedCommand,
    epilog=example_epilog(
        "dpcalc compose --dp 0.1 --count 100 --delta 1e-5",
        "dpcalc compose --gaussian 4 --sample-rate 0.01 --count 10000 --delta 1e-5",
        "dpcalc compose --dp 0.5,1e-7 --count 20 --laplace 0.1 --count 50 --eps 3 --json",
        "dpcalc compose --exponential 0.1 --count 100 --delta 1e-6",
    ),
)
@click.option("--dp", "dp", multiple=True, metavar="ε[,δ]",
              help="A generic (ε, δ)-DP mechanism (repeatable; --count after it sets how many).")
@click.option("--gaussian", multiple=True, type=str, metavar="σ",
              help="Gaussian mechanism with noise multiplier σ (std / L2 sensitivity); repeatable.")
@click.option("-q", "--sample-rate", multiple=True, type=str, metavar="q",
              help="Poisson sample rate of the preceding --gaussian, in (0, 1].")
@click.option("--sampling", "sampling", multiple=True, type=str, metavar="NAME",
              help="Batch sampler of the preceding --gaussian: poisson (default), truncated-poisson (with "
                   "--sample-rate, --dataset-size, --max-batch-size), without-replacement / with-replacement (with "
                   "--batch-size, --dataset-size; refused here: compose accounts under add/remove adjacency).")
@click.option("--batch-size", "batch_size", multiple=True, type=str, metavar="B",
              help="Batch size B of the preceding --gaussian's fixed-size sampler.")
@click.option("--dataset-size", "dataset_size", multiple=True, type=str, metavar="N",
              help="Dataset size N of the preceding --gaussian's sampler.")
@click.option("--max-batch-size", "max_batch_size", multiple=True, type=str, metavar="B_max",
              help="Cap B_max of the preceding --gaussian's truncated-poisson sampler.")
@click.option("--group-size", "group_size", multiple=True, type=str, metavar="k",
              help="k ≥ 1: account the preceding Poisson-sampled --gaussian for a group of k records added or "
                   "removed together (the binomial mixture of Gaussians, as `dpcalc epsilon --group-size`).")
@click.option("--laplace", multiple=True, type=str, metavar="ε",
              help="Laplace mechanism with ε = Δ₁/b (pure ε-DP); repeatable.")
@click.option("--exponential", multiple=True, type=str, metavar="ε",
              help="Exponential mechanism (ε-bounded range: probabilities ∝ exp(ε·u/(2Δu))), ε in (0, 700]; "
                   "repeatable. Adds the br row (Dong, Durfee, Rogers 2020).")
@click.option("--count", multiple=True, type=str, metavar="k",
              help="How many times the preceding mechanism runs (default 1; 1e6 notation accepted; at most 1e15).")
@click.option("--spec", type=str, default=None,
              help="JSON or TOML file (a regular file of at most 16 MiB): a list of {mechanism, parameters, "
                   "count} (mechanism: dp | gaussian | laplace | exponential); identical entries are merged.")
@number_option("--delta", kind=RANGES["delta"], default=None, help="Target total δ in (0, 1): report ε.")
@number_option("--eps", "--epsilon", "epsilon", kind=RANGES["epsilon_at"], default=None,
               help="Target total ε: report δ.")
@click.option("--method", "methods", multiple=True, cls=_MethodOption, metavar="NAME",
              help="Only these methods (repeatable; default all).")
@number_option("--steps-grid", kind=RANGES["compose_steps_grid"], default=None, metavar="N",
               help="Also evaluate each method at N numbers of compositions (log-spaced up to the counts; "
                   "at most 1,000: larger N is capped, with a note).")
@click.option("--plot", "plot_path", type=str, default=None,
              help="Write a PNG or SVG (by the extension): ε (or δ) against the number of compositions, per method "
                   "(needs dpcalc[plot]).")
@click.option("--plot-curve", "curve_path", type=str, default=None,
              help="Write a PNG or SVG (by the extension): the δ(ε) curve of the composition for the tight methods "
                   "(needs dpcalc[plot]).")
@json_option
def compose_command(dp, gaussian, sample_rate, sampling, batch_size, dataset_size, max_batch_size, group_size, laplace,
                    exponential, count, spec, delta, epsilon, methods, steps_grid, plot_path, curve_path, json_output):
    """How much privacy do k mechanisms cost together? Every composition bound that
    applies, certified ones first, the tightest marked ★, each with its source.

    Give the sequence with --dp/--gaussian/--laplace/--exponential (each followed by
    --count k, and --sample-rate q for a sampled Gaussian) or with --spec FILE, and a
    target: --delta (to get ε) or --eps (to get δ). Generic theorems (basic, advanced,
    kov, optimal) treat a Gaussian step as (ε₀(δ₀), δ₀)-DP on its exact curve with the
    per-step δ₀ chosen optimally, and an exponential mechanism as ε-DP; the registered
    accountants (pld, rdp, zcdp, ma, gdp, ...) use the mechanisms themselves. gdp is a
    central-limit approximation (approx.). br, for exponential mechanisms only, is exact
    when they are fixed in advance (non-adaptive), not certified for adaptive choice.
    Adjacency: add/remove. No usable bound from any method: exit 1 with the reasons.
    """
    from dpcalc.composition.compose import THEOREMS, available_methods, compose, short_source_of
    from dpcalc.composition.spec import parse_spec_text

    ctx = click.get_current_context()
    order = ctx.meta.get("compose_order", [])
    _check_order(order, dp, gaussian, laplace, count, sample_rate, exponential,
                 {"--sampling": sampling, "--batch-size": batch_size, "--dataset-size": dataset_size,
                  "--max-batch-size": max_batch_size, "--group-size": group_size})
    choices = available_methods()
    for m in methods:
        if m not in choices:
            acc = [c for c in choices if c not in THEOREMS]
            raise ParameterError("method", "", m, message=f"--method must be one of {', '.join(THEOREMS)} or a "
                                 f"registered accountant ({', '.join(acc)}), got {m!r}")
    for path, opt in ((plot_path, "--plot"), (curve_path, "--plot-curve")):
        if path is not None:
            from dpcalc.cli.plot import check_target

            check_target(path, opt)
    sequence = _sequence_from_flags(order)
    if spec is not None:
        if not spec:
            raise ParameterError("spec", "", spec, message="--spec needs a file name, got an empty path")
        raw = read_input_file(spec, option="--spec", max_bytes=SPEC_MAX_BYTES)
        sequence += parse_spec_text(raw, name=spec, toml=not spec.lower().endswith(".json"))
    from dpcalc.accounting._sampling import check_sampler_adjacency

    for m in sequence:  # compose accounts under add/remove: refuse a sampler without a proof there
        if m.mechanism == "gaussian" and m.sampling in ("shuffle", "balls-in-bins"):
            raise ParameterError("sampling", "", m.sampling, message=(
                f"compose states its bounds under add/remove adjacency; --sampling {m.sampling} is accounted "
                "under zero-out or replace-one only (under add/remove the batch layout changes with N): use "
                f"dpcalc epsilon --sampling {m.sampling} for the run"))
        if m.mechanism == "gaussian":
            check_sampler_adjacency(m.sampling, "add-remove")
    if steps_grid is None and plot_path is not None:
        steps_grid = 100
    if plot_path is not None or curve_path is not None:
        from dpcalc.cli.plot import require_matplotlib

        require_matplotlib()
    report = compose(sequence, delta=delta, epsilon=epsilon, methods=methods or None, steps_grid=steps_grid)
    why_not = report.no_answer()
    if why_not is not None:
        target = f"delta={report.inputs['delta']:g}" if report.mode == "epsilon" else \
            f"epsilon={report.inputs['epsilon']:g}"
        raise InfeasibleError(f"no method gives a usable bound for this sequence at {target}: {why_not}")
    if curve_path is not None:
        import dataclasses

        from dpcalc.composition.curves import privacy_curves

        report = dataclasses.replace(report, curve=privacy_curves(sequence, report))
    results = [r.to_json() for r in report.results]
    best = report.tightest
    if plot_path is not None:
        from dpcalc.cli.plot import plot_steps

        plot_steps(report, plot_path)
    if curve_path is not None:
        from dpcalc.cli.plot import plot_curve

        plot_curve(report, curve_path)
    value_key = "epsilon" if report.mode == "epsilon" else "delta"
    target_delta = report.inputs.get("delta")
    target_eps = report.inputs.get("epsilon")

    def method_cell(res) -> str:
        name = res["method"]
        if best is not None and name == best.method:
            return f"★ {name}"
        return name

    notes = []
    if best is not None:
        notes.append(f"tightest certified: {best.method}, {value_key} = "
                     f"{bound_cell(getattr(best, value_key), 6, None)}")
    notes += list(report.notes)
    if any(m.mechanism == "gaussian" for m in sequence):
        notes.append("generic theorems treat each Gaussian step as (ε₀(δ₀), δ₀)-DP (exact curve, Poisson "
                     "amplification), δ₀ optimised per method")
    if any(getattr(m, "votes", None) is not None for m in sequence):
        notes.append("PATE queries with votes: the data-dependent ε depends on the private votes; do not publish "
                     "it (docs/design.md §4)")
    groups = sorted({m.group_size for m in sequence if getattr(m, "group_size", 1) > 1})
    if groups:  # review: a group size on one segment does not make the other segments group-level
        notes.append(f"group of {', '.join(map(str, groups))} records on the segments that say so; every other "
                     "segment is accounted for one record of the group (the group holds at most one record in "
                     "its data) — a --dp/--laplace/--exponential value must already be the group's ε, and a "
                     "Gaussian segment where the group has more records needs its own --group-size")
    notes.append("add/remove adjacency")
    if plot_path:
        notes.append(f"plot written to {plot_path}")
    if curve_path:
        notes.append(f"privacy curve written to {curve_path}")
    shown = dict(report.inputs)
    from dpcalc.composition.spec import merge

    merged = merge(sequence)
    labels = [m.label() for m in merged]
    if len(labels) > _ECHO_ITEMS:  # a long --spec: the first few and the total (JSON has them all)
        labels = labels[:3] + [f"… ({len(merged):,} items in all)"]
    shown["mechanisms"] = " + ".join(labels)
    emit(
        command="compose",
        inputs=report.inputs if json_output else shown,
        results=results,
        json_output=json_output,
        columns=[
            Column("method", method_cell, justify="left"),
            Column("ε", lambda r: bound_cell(r.get("epsilon"), 6, target_eps)),
            Column("δ", lambda r: bound_cell(r.get("delta"), 4, target_delta)),
            Column("certified", _certified_cell),
            Column("note", _note_cell, justify="left"),
            Column("source", lambda r: short_source_of(r["method"]) or r.get("source", ""), justify="left"),
        ],
        title="Composition bounds (tightest certified first)",
        notes=notes,
        warnings=_delta_warnings(merged, target_delta, [r.delta for r in report.results]),
    )


def _delta_warnings(sequence, target_delta, deltas) -> list[str]:
    """The δ ≥ 1/N warning when a Gaussian item states its dataset size N."""
    sizes = [m.dataset_size for m in sequence if getattr(m, "dataset_size", None)]
    if not sizes:
        return []
    n = min(sizes)
    candidates = [target_delta] if target_delta is not None else [d for d in deltas if d is not None]
    for d in candidates:
        if d >= 1.0 / n:
            return [f"delta = {d:g} is at least 1/N = {1.0 / n:.3g} (N = {n}): a mechanism that publishes one "
                    "random record in the clear satisfies such a delta; use delta well below 1/N"]
    return []


#: at most this many sequence items are echoed in the table header
_ECHO_ITEMS = 6
