"""``dpcalc ldp``: local DP — which frequency oracle, what error, what ε (and after shuffling);
``randomize`` (client side) and ``estimate`` (server side) stream CSV; ``rappor`` and ``mean``
are the RAPPOR ε calculator and the mean-estimation table.

Click structure: ``ldp`` is a group that runs the comparison calculator when no sub-command is
named (``invoke_without_command``), so ``dpcalc ldp --eps 1 --domain-size 1024 --users 100000``
works and ``dpcalc ldp randomize …`` too; the calculator's options given before a sub-command
are refused."""

from __future__ import annotations

import shutil
import sys
import tempfile

import click

from dpcalc.cli.options import (
    Number,
    StrictCommand,
    StrictGroup,
    _duplicate_check,
    example_epilog,
    json_option,
    number_option,
)
from dpcalc.cli.render import Column, emit, fmt
from dpcalc.errors import ParameterError

EPS = Number("(0, inf)", "[1e-4, 20]", domain_text="a finite number > 0")
DOMAIN = Number("[2, inf)", "[2, 2147483646]", whole=True, domain_text="a whole number >= 2")
USERS = Number("[1, inf)", "[1, 1e10]", whole=True, domain_text="a whole number >= 1")
SE = Number("(0, inf)", "[1e-9, 1]", domain_text="a finite number > 0")
DELTA = Number("(0, 1)", "[1e-300, 1)")
SEED = Number("[0, inf)", f"[0, {2**63 - 1}]", whole=True, domain_text="a whole number >= 0")
PROB = Number("[0, 1]", "[0, 1]")
HASHES = Number("[1, inf)", "[1, 1e6]", whole=True, domain_text="a whole number >= 1")
WIDTH = Number("[2, inf)", "[2, 1048576]", whole=True, domain_text="a whole number >= 2")
KH = Number("[1, inf)", "[1, 65536]", whole=True, domain_text="a whole number >= 1")
MAXV = Number("(0, inf)", "[1e-100, 1e100]", domain_text="a finite number > 0")
PROTOCOLS = ("grr", "sue", "oue", "olh", "blh", "hr", "ss", "rappor", "cms", "hcms", "duchi", "piecewise", "onebit")
_CALC = ("epsilon", "domain_size", "users", "target_se", "protocol", "shuffle", "delta", "simulate",
         "distribution", "seed", "json_output")


class _CalculatorGroup(StrictGroup):
    """The ``ldp`` group: its own (calculator) options are refused when given twice, like a
    :class:`StrictCommand`'s."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:  # noqa: D102
        _duplicate_check(self, ctx, args)
        return super().parse_args(ctx, args)


@click.group("ldp", cls=_CalculatorGroup, invoke_without_command=True, epilog=example_epilog(
    "dpcalc ldp --eps 1 --domain-size 1024 --users 100000",
    "dpcalc ldp --target-se 0.005 --domain-size 1024 --users 100000",
    "dpcalc ldp --eps 2 --domain-size 1024 --users 1000000 --shuffle --delta 1e-8",
    "dpcalc ldp rappor --f 0.5 --p 0.5 --q 0.75 --hashes 2",
))
@number_option("--eps", "--epsilon", "epsilon", kind=EPS, default=None, help="ε of one report (local DP).")
@number_option("--domain-size", "domain_size", kind=DOMAIN, default=None, help="k: values 0..k−1.")
@number_option("--users", kind=USERS, default=None, help="n: users, one report each.")
@number_option("--target-se", "target_se", kind=SE, default=None,
               help="Inverse: the ε each protocol needs for this standard error (instead of --eps).")
@click.option("--shuffle", is_flag=True, help="Also the central (ε, δ) after shuffling the n reports (FMT 2021).")
@number_option("--delta", kind=DELTA, default=None, help="δ of the central guarantee (with --shuffle).")
@click.option("--simulate", is_flag=True, help="Also run each protocol on synthetic data: empirical error.")
@click.option("--distribution", type=click.Choice(["zipf", "uniform"]), default="zipf", show_default=True,
              help="Synthetic data of --simulate.")
@number_option("--seed", kind=SEED, default=None, help="Seed of --simulate (default: OS randomness).")
@json_option
@click.pass_context
def ldp_group(ctx, epsilon, domain_size, users, target_se, shuffle, delta, simulate, distribution, seed,
              json_output):
    """Local DP frequency oracles: variance, standard error and bits of each protocol at (ε, k, n).

    Protocols: generalized randomized response (grr), unary encoding (sue = basic one-time
    RAPPOR, oue), local hashing (olh, blh), Hadamard response (hr), subset selection (ss),
    Apple's count-mean sketch (cms, hcms). The variance is that of one estimated frequency
    (f → 0, Wang et al. 2017); the recommended protocol has the smallest (ties: fewest bits).
    Sub-commands: randomize, estimate (a real pipeline), rappor (ε₁, ε_∞), mean (mean estimation).
    """
    if ctx.invoked_subcommand is not None:
        given = [p for p in ctx.command.params if p.name in _CALC and ctx.get_parameter_source(p.name).name
                 == "COMMANDLINE"]
        if given:
            flag = next(o for o in given[0].opts if o.startswith("--"))
            raise ParameterError("ldp", "", None, message=(
                f"{flag} belongs to the calculator `dpcalc ldp`, not to `dpcalc ldp {ctx.invoked_subcommand}`: "
                "give the sub-command's options after its name"))
        return
    from dpcalc.cli.ldp_calc import run_calculator

    run_calculator(epsilon=epsilon, domain_size=domain_size, users=users, target_se=target_se,
                   shuffle=shuffle, delta=delta, simulate=simulate, distribution=distribution, seed=seed,
                   json_output=json_output)


def _progress(chunks, what: str):
    """``chunks`` (arrays) passed through, with a progress line on standard error when it is a
    terminal (rich, imported only then)."""
    if not sys.stderr.isatty():
        yield from chunks
        return
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(SpinnerColumn(), TextColumn("{task.description}: {task.completed:,} " + what),
                  TimeElapsedColumn(), console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("dpcalc ldp", total=None)
        for chunk in chunks:
            yield chunk
            bar.update(task, advance=len(chunk))


def _spool():
    """Output held until the whole input is processed (memory up to 64 MB, then a temporary file):
    an error leaves nothing half-written on stdout either."""
    return tempfile.SpooledTemporaryFile(max_size=64 << 20)


def _finish(spool, output: str | None) -> None:
    from dpcalc._files import atomic_write

    spool.seek(0)
    if output is None:
        out = sys.stdout.buffer
        shutil.copyfileobj(spool, out)
        out.flush()
    else:
        atomic_write(output, lambda f: shutil.copyfileobj(spool, f), option="output")


def _protocol_options(f):
    f = number_option("--sketch-hashes", kind=KH, default=256, show_default=True,
                      help="cms/hcms: k_h public hash functions.")(f)
    f = number_option("--sketch-width", kind=WIDTH, default=1024, show_default=True,
                      help="cms/hcms: m, the sketch width (a power of 2 for hcms).")(f)
    f = number_option("--rappor-q", kind=PROB, default=None, help="rappor: q (instantaneous, bit 1).")(f)
    f = number_option("--rappor-p", kind=PROB, default=None, help="rappor: p (instantaneous, bit 0).")(f)
    f = number_option("--rappor-f", kind=PROB, default=None, help="rappor: f (permanent randomized response).")(f)
    f = number_option("--max-value", kind=MAXV, default=1.0, show_default=True,
                      help="onebit: values in [0, M].")(f)
    f = number_option("--domain-size", "domain_size", kind=DOMAIN, default=None,
                      help="k (frequency protocols): values 0..k−1.")(f)
    f = number_option("--eps", "--epsilon", "epsilon", kind=EPS, default=None,
                      help="ε of one report (not for rappor: from f, p, q).")(f)
    return click.option("--protocol", type=click.Choice(PROTOCOLS), required=True, help="The protocol.")(f)


def _setup(protocol, epsilon, domain_size, max_value, rappor_f, rappor_p, rappor_q, sketch_width, sketch_hashes):
    from dpcalc.mechanisms.ldp import make_oracle
    from dpcalc.mechanisms.ldp.mean import MEAN_PROTOCOLS

    if protocol in MEAN_PROTOCOLS:
        if epsilon is None:
            raise ParameterError("epsilon", "given", None, message="--eps is required")
        return None, {"protocol": protocol, "epsilon": repr(float(epsilon)), "max_value": repr(float(max_value))}
    if domain_size is None:
        raise ParameterError("domain_size", "given", None, message=f"--domain-size is required for {protocol}")
    if protocol != "rappor" and epsilon is None:
        raise ParameterError("epsilon", "given", None, message="--eps is required")
    o = make_oracle(protocol, epsilon, domain_size, rappor_f=rappor_f, rappor_p=rappor_p, rappor_q=rappor_q,
                    sketch_width=sketch_width, sketch_hashes=sketch_hashes)
    params = {"protocol": protocol, "epsilon": repr(float(o.epsilon)), "domain_size": o.k}
    if protocol == "rappor":
        params.update({"f": rappor_f, "p": rappor_p, "q": rappor_q})
    if protocol in ("cms", "hcms"):
        params.update({"sketch_width": sketch_width, "sketch_hashes": sketch_hashes})
    return o, params


@ldp_group.command("randomize", epilog=example_epilog(
    "dpcalc ldp randomize --protocol olh --eps 1 --domain-size 1024 < values.csv > reports.csv"))
@_protocol_options
@number_option("--seed", kind=SEED, default=None, help="Seed (tests only; default: the OS CSPRNG).")
@click.option("--output", type=click.Path(dir_okay=False), default=None,
              help="Write the reports here (atomically) instead of standard output.")
def randomize_command(protocol, epsilon, domain_size, max_value, rappor_f, rappor_p, rappor_q, sketch_width,
                      sketch_hashes, seed, output):
    """Client side: read values (one a line) on standard input, write one ε-LDP report a line.

    The input is streamed in chunks; the reports are written only when all of it was read
    without error (nothing half-written). Randomness: numpy's PCG64 seeded from the OS CSPRNG
    (exact Bernoulli draws on a 2⁻⁵³ grid), or --seed for reproducible tests.
    """
    from dpcalc._files import check_output_target
    from dpcalc.mechanisms.ldp import make_rng
    from dpcalc.mechanisms.ldp.io import format_reports, header, read_values
    from dpcalc.mechanisms.ldp.mean import randomize_mean

    o, params = _setup(protocol, epsilon, domain_size, max_value, rappor_f, rappor_p, rappor_q, sketch_width,
                       sketch_hashes)
    if output is not None:
        check_output_target(output, option="output")
    rng = make_rng(seed)
    rows = max(1, (1 << 22) // max(1, o.bits if o is not None else 1))
    with _spool() as spool:
        spool.write(header(params))
        for chunk in _progress(read_values(sys.stdin.buffer, k=None if o is None else o.k,
                                           rows=min(rows, 1 << 16)), "values"):
            if o is None:
                spool.write(format_reports(None, randomize_mean(protocol, epsilon, chunk, rng, max_value=max_value)))
            else:
                spool.write(format_reports(o, o.randomize(chunk, rng)))
        _finish(spool, output)


@ldp_group.command("estimate", epilog=example_epilog(
    "dpcalc ldp estimate --protocol olh --eps 1 --domain-size 1024 < reports.csv"))
@_protocol_options
@click.option("--project", is_flag=True, help="Also the estimates projected onto the simplex (post-processing; biased).")
@click.option("--output", type=click.Path(dir_okay=False), default=None,
              help="Write the estimates as CSV here (atomically) instead of a table.")
@json_option
def estimate_command(protocol, epsilon, domain_size, max_value, rappor_f, rappor_p, rappor_q, sketch_width,
                     sketch_hashes, project, output, json_output):
    """Server side: read reports on standard input, print unbiased estimates with standard errors.

    The reports' header line (written by randomize) must agree with the options given.
    """
    from dpcalc.cli.ldp_calc import emit_estimates

    emit_estimates(progress=lambda chunks: _progress(chunks, "reports"), protocol=protocol, setup=_setup(protocol, epsilon, domain_size, max_value, rappor_f, rappor_p,
                                                   rappor_q, sketch_width, sketch_hashes),
                   epsilon=epsilon, max_value=max_value, project=project, output=output, json_output=json_output)


@ldp_group.command("rappor", cls=StrictCommand, epilog=example_epilog(
    "dpcalc ldp rappor --f 0.5 --p 0.5 --q 0.75 --hashes 2"))
@number_option("--f", "f", kind=PROB, required=True, help="f: permanent randomized response, in (0, 1].")
@number_option("--p", "p", kind=PROB, required=True, help="p: Pr[report 1 | permanent bit 0].")
@number_option("--q", "q", kind=PROB, required=True, help="q: Pr[report 1 | permanent bit 1].")
@number_option("--hashes", kind=HASHES, default=1, show_default=True, help="h: Bloom filter hash functions.")
@json_option
def rappor_command(f, p, q, hashes, json_output):
    """RAPPOR's ε as Erlingsson, Pihur, Korolova 2014 define it: one report ε₁ and longitudinal ε_∞.

    ε_∞ = 2h·ln((1 − f/2)/(f/2)) bounds any number of reports of one value (memoized permanent
    response); ε₁ = h·ln(q*(1 − p*)/(p*(1 − q*))) one report.
    """
    from dpcalc.mechanisms.ldp.rappor import SOURCE, rappor_epsilon

    r = rappor_epsilon(f=f, p=p, q=q, hashes=hashes)
    emit(command="ldp rappor", inputs={"f": f, "p": p, "q": q, "hashes": hashes},
         results=[{"method": "rappor", "epsilon_one": r["epsilon_one"], "epsilon_inf": r["epsilon_inf"],
                   "q_star": r["q_star"], "p_star": r["p_star"], "certified": True, "source": SOURCE}],
         json_output=json_output, title="RAPPOR privacy",
         columns=[Column("ε₁ (one report)", lambda x: fmt(x["epsilon_one"], rounding="up")),
                  Column("ε_∞ (longitudinal)", lambda x: fmt(x["epsilon_inf"], rounding="up")),
                  Column("q* = Pr[1 | bit 1]", lambda x: fmt(x["q_star"], 6)),
                  Column("p* = Pr[1 | bit 0]", lambda x: fmt(x["p_star"], 6))],
         notes=["Source: " + SOURCE + "."])


@ldp_group.command("mean", cls=StrictCommand, epilog=example_epilog("dpcalc ldp mean --eps 1 --users 100000"))
@number_option("--eps", "--epsilon", "epsilon", kind=EPS, required=True, help="ε of one report.")
@number_option("--users", kind=USERS, required=True, help="n: users, one report each.")
@json_option
def mean_command(epsilon, users, json_output):
    """Mean of values in [−1, 1] (onebit: [0, 1]) under ε-LDP: worst-case variance and standard error.

    Duchi et al. 2013/2018, the piecewise mechanism (Wang et al. 2019), Microsoft's 1BitMean
    (Ding, Kulkarni, Yekhanin 2017).
    """
    from dpcalc.cli.ldp_calc import emit_mean_table

    emit_mean_table(epsilon=epsilon, users=users, json_output=json_output)
