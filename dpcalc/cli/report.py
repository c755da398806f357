"""``dpcalc report``: the DP statement of a training run for a model card — from the sidecar
``dpcalc train --save-model FILE`` writes (``--run FILE.json``) or from options — as Markdown
(default), JSON or one HTML page (the trade-off plot embedded when matplotlib is installed).
The statement is built by :mod:`dpcalc.claims.statement`; this module parses and writes."""

from __future__ import annotations

import json

import click

from dpcalc.claims.schema import NEIGHBORINGS
from dpcalc.cli.options import (
    RANGES,
    OnlyWith,
    StrictCommand,
    check_only_with,
    example_epilog,
    noise_multiplier_option,
    number_option,
    sampler_options,
    sampling_options,
    tuning_options,
)

__all__ = ["report_command", "statement_text", "write_statement"]

#: the largest --run file read (a sidecar is ~2 KB)
MAX_RUN_BYTES = 1_000_000
_RUN_FIELDS = ("noise_multiplier", "delta", "sample_rate", "steps", "batch_size", "dataset_size", "epochs",
               "sampling", "max_batch_size", "neighboring", "max_grad_norm")
_NOT_WITH_RUN = OnlyWith("without --run (the run's file states its setting)", lambda p: p["run"] is None)
#: the option table (docs/design.md §5), checked by the command itself (tests/claims/test_claims_report.py
#: exercises every entry)
ONLY_WITH = {name: _NOT_WITH_RUN for name in _RUN_FIELDS}


def statement_text(statement: dict, fmt: str, curve=None) -> str:
    """The statement in ``fmt`` (``markdown``, ``json`` or ``html``; HTML embeds the trade-off plot
    of ``curve`` when matplotlib is installed)."""
    from dpcalc.claims.statement import render_html, render_markdown
    from dpcalc.results import jsonable

    if fmt == "json":
        return json.dumps({"command": "report", "results": [jsonable(statement)]}, allow_nan=False,
                          ensure_ascii=False, indent=2) + "\n"
    if fmt == "html":
        return render_html(statement, png=_plot_png(curve, statement))
    return render_markdown(statement)


def _plot_png(curve, statement: dict) -> bytes | None:
    """The ``dpcalc risk --plot`` picture of ``curve`` as PNG bytes; None without matplotlib."""
    if curve is None:
        return None
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return None
    import os
    import tempfile

    from dpcalc.cli.risk_plot import plot_risk

    g = statement["guarantee"]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "tradeoff.png")
        plot_risk(curve, (g["epsilon"], g["delta"]), path)
        with open(path, "rb") as fh:
            return fh.read()


def write_statement(path: str, text: str, *, option: str = "--output") -> None:
    """Write ``text`` to ``path`` atomically (nothing half-written; a non-regular target refused)."""
    from dpcalc._files import atomic_write_bytes

    atomic_write_bytes(path, text.encode("utf-8"), option=option)


@click.command("report", cls=StrictCommand, epilog=example_epilog(
    "dpcalc report --sigma 1.9572187 --batch-size 2048 --dataset-size 60000 --epochs 40 --delta 1e-5 "
    "--max-grad-norm 0.1",
    "dpcalc report --run runs/fmnist27_model.pt.json --format html --output model-card-dp.html",
))
@click.option("--run", type=click.Path(dir_okay=False), default=None,
              help="The FILE.json sidecar that dpcalc train --save-model FILE writes.")
@noise_multiplier_option(default=None,
               help="σ: noise std / clipping norm.")
@number_option("--delta", kind=RANGES["delta"], default=None, help="δ, in (0, 1).")
@sampling_options
@sampler_options
@click.option("--neighboring", type=click.Choice(list(NEIGHBORINGS)), default=None,
              help="Adjacency [default: add-remove; zero-out for shuffle / balls-in-bins].")
@number_option("--max-grad-norm", kind=RANGES["max_grad_norm"], default=None, help="C: per-example clipping norm.")
@tuning_options
@click.option("--unit-description", "privacy_unit", default=None,
              help="What one protected unit is, in words, for the statement (e.g. \"one user's messages\") "
                   "[default: one training example (example-level DP)]. The accounting's unit is "
                   "--privacy-unit record|user of epsilon/sigma.")
@click.option("--released", default=None, help="What is released (the final mechanism output), for the checklist.")
@click.option("--data-covered", default=None, help="Which data accesses the guarantee covers, for the checklist.")
@click.option("--format", "fmt", type=click.Choice(["markdown", "json", "html"]), default="markdown",
              show_default=True, help="Output format (html: the trade-off plot embedded if matplotlib is installed).")
@click.option("--output", type=click.Path(dir_okay=False), default=None,
              help="Write the statement to this file (atomically) instead of standard output.")
@click.pass_context
def report_command(ctx: click.Context, run, fmt, output, tuning_runs, tuning_accounted, privacy_unit, released,
                   data_covered, **options):
    """A DP statement for a model card: privacy unit, adjacency, sampler, clipping and noise,
    steps, accounting (method, dpcalc version, source), the certified ε at δ with its bracket,
    δ against 1/N, tuning, attack bounds (TPR at FPR 10⁻³, advantage), the audit, and the
    reporting checklist of Ponomareva et al. 2023 §5.3 (items answered or "not recorded").

    The certified ε is recomputed from the run's σ, q, T, sampler and adjacency (never stated
    below the ε the run recorded).
    """
    from dpcalc.claims.statement import run_from_sidecar, statement_and_curve
    from dpcalc.errors import ParameterError

    check_only_with(ctx.command, ctx, ONLY_WITH)

    if output is not None:
        from dpcalc._files import check_output_target

        check_output_target(output, option="--output")
    if run is not None:
        from dpcalc._files import read_input_file

        raw = read_input_file(run, option="run", max_bytes=MAX_RUN_BYTES)
        try:
            meta = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
            raise ParameterError("run", "", run, message=f"--run {run!r} is not a JSON file: {e}") from None
        fields = run_from_sidecar(meta)
        source = f"the run file {run}"
    else:
        fields = {k: options.get(k) for k in _RUN_FIELDS}
        if fields["sampling"] == "poisson":
            fields["sampling"] = None
        for name, flag in (("noise_multiplier", "--sigma"), ("delta", "--delta")):
            if fields[name] is None:
                raise ParameterError(name, "", None, message=f"give {flag} (and the schedule), or --run FILE.json")
        fields = {k: v for k, v in fields.items() if v is not None}
        source = "command-line options"
    fields.update({k: v for k, v in (("tuning_runs", tuning_runs), ("tuning_accounted", tuning_accounted),
                                     ("privacy_unit", privacy_unit), ("released", released),
                                     ("data_covered", data_covered)) if v is not None})
    statement, curve = statement_and_curve(fields, source=source)
    text = statement_text(statement, fmt, curve)
    if output is None:
        click.echo(text, nl=False)
    else:
        write_statement(output, text)
        click.echo(f"Statement written to {output} ({fmt}).", err=True)
