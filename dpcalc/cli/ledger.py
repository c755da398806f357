"""``dpcalc ledger``: a privacy budget kept in an SQLite file (docs/design.md §11), and the
``--ledger FILE --dataset NAME`` options of the commands that release or train."""

from __future__ import annotations

import json

import click

from dpcalc.cli.options import (
    RANGES,
    Number,
    NumberList,
    StrictGroup,
    example_epilog,
    json_option,
    number_option,
)
from dpcalc.cli.render import Column, emit, fmt, print_json

#: how long a release that has printed its value retries marking it released on a locked ledger
RELEASE_RETRY_SECONDS = 5.0
#: largest JSON-lines file ``ledger import`` reads
MAX_IMPORT_BYTES = 256 * 1024 * 1024
#: ``ledger init --orders``: the filter's Rényi orders (``a,b,c`` or ``lo:hi:count``, log-spaced)
FILTER_ORDER = Number("(1, inf)", "(1, 1e6]", domain_text="a Rényi order > 1")
FILTER_ORDER_COUNT = Number("[1, inf)", "[1, 64]", whole=True, domain_text="a whole number >= 1")
ORDERS = NumberList(FILTER_ORDER, FILTER_ORDER_COUNT, default_points=8)


# ---- options of the releasing commands -------------------------------------------------------

def ledger_file_option(f):
    return click.option("--ledger", "ledger_path", type=str, default=None, metavar="FILE",
                        help="Record the release in this ledger (dpcalc ledger init) before any noise is "
                             "drawn; refused (exit 1) if it would exceed the dataset's budget.")(f)


def release_ledger_options(f):
    """``--ledger FILE`` and ``--dataset NAME`` (alias ``--ledger-dataset``)."""
    f = click.option("--dataset", "--ledger-dataset", "ledger_dataset", type=str, default=None,
                     metavar="NAME", help="The ledger's dataset this release is about (with --ledger).")(f)
    return ledger_file_option(f)


def train_ledger_options(f):
    """``--ledger FILE`` and ``--ledger-dataset NAME`` (train's --dataset names the images)."""
    f = click.option("--ledger-dataset", "ledger_dataset", type=str, default=None, metavar="NAME",
                     help="The ledger's dataset the run trains on (with --ledger).")(f)
    return click.option("--ledger", "ledger_path", type=str, default=None, metavar="FILE",
                        help="Reserve the planned steps in this ledger before the first step (refused, "
                             "exit 1, past the budget) and record the steps as they are taken.")(f)


def _both(ledger_path: str | None, ledger_dataset: str | None, dataset_flag: str) -> bool:
    from dpcalc.errors import ParameterError

    if ledger_path is None and ledger_dataset is None:
        return False
    if ledger_path is None:
        raise ParameterError("ledger", "", None, message=f"{dataset_flag} needs --ledger FILE")
    if ledger_dataset is None:
        raise ParameterError("dataset", "", None, message=f"--ledger needs {dataset_flag} NAME")
    return True


class ReleaseGuard:
    """Reserve-then-release for one command: open the ledger (every file check before any
    work), :meth:`reserve` before the noise is drawn, :meth:`released` after printing."""

    def __init__(self, path: str, dataset: str) -> None:
        from dpcalc.ledger import Ledger

        self.ledger = Ledger(path)
        self.dataset = self.ledger.dataset(dataset).name
        self.event_id: int | None = None

    def reserve(self, *, mechanism: str, params: dict, event, dp_event=None) -> None:
        self.event_id = self.ledger.reserve(self.dataset, mechanism=mechanism, params=params, event=event,
                                            dp_event=dp_event)

    def summary(self) -> dict:
        ds = self.ledger.dataset(self.dataset)
        eps, left = self.ledger.epsilon_now(ds)  # O(1) in the ledger's size
        return {"file": str(self.ledger.path), "dataset": self.dataset, "event": self.event_id,
                "filter_epsilon": eps, "budget_epsilon": ds.budget_epsilon,
                "delta": ds.delta, "left": left, "filter": "rdp-filter"}

    def note(self, info: dict) -> str:
        return (f"Recorded in ledger {info['file']} (dataset {info['dataset']!r}, event #{info['event']}) "
                f"before the noise was drawn: ε spent {fmt(info['filter_epsilon'], rounding='up')} of "
                f"{fmt(info['budget_epsilon'])} at δ = {fmt(info['delta'])} (RDP filter, valid under "
                f"adaptive composition), {fmt(info['left'], rounding='down')} left.")

    def released(self) -> None:
        """Mark the reservation released. The value is printed already, so this never fails the
        command: a locked ledger is retried for up to :data:`RELEASE_RETRY_SECONDS` (whatever
        ``DPCALC_LEDGER_TIMEOUT`` says), then the update is left undone with a one-line warning
        — the event stays ``reserved``, which the filter counts exactly as a released one."""
        from dpcalc.ledger import set_status_retrying

        try:
            done = set_status_retrying(self.ledger, self.event_id, "released", seconds=RELEASE_RETRY_SECONDS)
        finally:
            self.ledger.close()
        if not done:
            click.echo(f"Warning: ledger {self.ledger.path} stayed locked, so event #{self.event_id} is left "
                       "'reserved' (counted in full, as a released event is); the value above was released.",
                       err=True)


def release_guard(ledger_path: str | None, ledger_dataset: str | None, *, releasing: bool,
                  dataset_flag: str = "--dataset", release_flag: str = "--release") -> ReleaseGuard | None:
    """The guard of a releasing command, or None without --ledger.

    Raises:
        ParameterError: only one of the two options, --ledger without a release, a bad ledger
            or an unknown dataset (exit 2, before any work).
    """
    from dpcalc.errors import ParameterError

    if not _both(ledger_path, ledger_dataset, dataset_flag):
        return None
    if not releasing:
        raise ParameterError("ledger", "", ledger_path,
                             message=f"--ledger records releases: use it with {release_flag}")
    return ReleaseGuard(ledger_path, ledger_dataset)


# ---- the ledger group --------------------------------------------------------------------------

@click.group("ledger", cls=StrictGroup, epilog=example_epilog(
    "dpcalc ledger init budget.db --dataset census --budget-eps 1 --delta 1e-6",
    "dpcalc laplace --eps 0.25 --release 1234 --ledger budget.db --dataset census",
    "dpcalc ledger show budget.db",
    "dpcalc ledger export budget.db > audit.jsonl",
))
def ledger_group():
    """A privacy budget that survives: every release and training run recorded in an SQLite file.

    Each dataset has a budget (ε, δ). Commands given --ledger FILE --dataset NAME
    record their mechanism before drawing noise and are refused (exit 1) when the
    privacy filter (Rényi filter, Feldman & Zrnic 2021: valid when each release is
    chosen after seeing the earlier ones) would exceed the budget.
    """


@ledger_group.command("init", epilog=example_epilog(
    "dpcalc ledger init budget.db --dataset census --budget-eps 1 --delta 1e-6",
    "dpcalc ledger init budget.db --dataset mnist --budget-eps 8 --delta 1e-5 --adjacency add-remove"))
@click.argument("file", type=str)
@click.option("--dataset", "dataset", type=str, required=True, help="Name of the dataset (1–100 characters).")
@number_option("--budget-eps", "budget_epsilon", kind=RANGES["epsilon_target"], required=True,
               help="ε of the budget: the filter keeps the dataset's history (ε, δ)-DP.")
@number_option("--delta", kind=RANGES["delta"], required=True, help="δ of the budget, in (0, 1).")
@click.option("--adjacency", type=click.Choice(["add-remove", "replace"]), default="add-remove",
              show_default=True, help="Neighbouring relation the budget and every sensitivity are stated for.")
@click.option("--orders", "orders", type=ORDERS, default=None, metavar="LIST",
              help="The filter's Rényi orders for this dataset (a,b,c or lo:hi:count; 1 to 64 orders > 1), "
                   "fixed now. Default: 21 orders from 1.25 to 256. Fewer orders cost less (ln of their "
                   "number), e.g. 6:16:4 for a planned DP-SGD run whose best order is near 10.")
@json_option
def init_command(file, dataset, budget_epsilon, delta, adjacency, orders, json_output):
    """Create a ledger (or add a dataset to one) with the dataset's budget (ε, δ)."""
    from dpcalc.ledger import Ledger
    from dpcalc.ledger import filter as flt
    from dpcalc.ledger.api import check_name

    check_name(dataset)  # every input checked before the file is created
    if orders is not None:
        orders = flt.check_orders(orders)
    with Ledger(file, create=True) as led:
        ds = led.add_dataset(dataset, budget_epsilon=budget_epsilon, delta=delta, adjacency=adjacency,
                             orders=orders)
        names = [d.name for d in led.datasets()]
    res = {"file": file, **ds.to_json(), "datasets": names}
    emit(command="ledger init", inputs={"file": file}, results=[res], json_output=json_output,
         title="ledger dataset added",
         columns=[Column("dataset", lambda r: r["name"], "left"),
                  Column("budget ε", lambda r: fmt(r["budget_epsilon"])),
                  Column("δ", lambda r: fmt(r["delta"])),
                  Column("adjacency", lambda r: r["adjacency"], "left")],
         notes=[f"The ledger holds {len(names)} dataset(s): {', '.join(names)}."]
         + ([f"Filter: {flt.source(ds.orders)}."] if orders is not None else []))


def _params_text(rec: dict) -> str:
    p = rec["params"]
    keys = ("epsilon", "delta", "sensitivity", "noise_multiplier", "sample_rate", "steps", "top", "noise",
            "scale", "sigma", "sigma1", "sigma2", "queries", "sampling", "max_batch_size")
    return ", ".join(f"{k}={fmt(p[k]) if isinstance(p[k], float) else p[k]}" for k in keys if k in p)


def _dataset_report(led, ds) -> dict:
    """One dataset: its events with the filter's cumulative ε, and the accountants' totals."""
    from fractions import Fraction

    import numpy as np

    from dpcalc._numerics import round_up
    from dpcalc.ledger import filter as flt
    from dpcalc.ledger.api import composed

    s = led.spent(ds)
    events, cum_eps = [], []
    if s.records:
        rdp = np.cumsum(np.array([c.rdp for c in s.charges]), axis=0)
        rdp = round_up(rdp, 16.0 + len(s.records))  # a running sum of n terms: n ulps of round-off
        conv = flt.conversion(ds.delta, ds.orders)
        pure: Fraction | None = Fraction(0)
        for i, c in enumerate(s.charges):
            pure = None if pure is None or c.pure is None else pure + c.pure
            with np.errstate(invalid="ignore"):
                e = max(0.0, float(np.nanmin(flt.add_up(rdp[i], conv))))
            if pure is not None:
                e = min(e, flt._float_up(pure))
            cum_eps.append(e)
    for r, e in zip(s.records, cum_eps, strict=True):
        events.append({**r.to_json(), "filter_epsilon_after": e,
                       "counted_steps": r.counted_steps})
    totals = [{"method": "rdp-filter", "epsilon": s.filter_epsilon, "adaptive": True, "certified": True,
               "enforced": True, "source": flt.source(ds.orders)}]
    if s.records:
        from dpcalc.accounting.registry import available, get_accountant

        history = composed(s.records)
        for name in available():
            acc = get_accountant(name)
            if not acc.supports(history):
                continue
            try:
                res = acc.epsilon(history, delta=ds.delta)
            except Exception as exc:  # noqa: BLE001 - a reporting column; the filter decides
                totals.append({"method": name, "epsilon": None, "adaptive": False, "certified": False,
                               "enforced": False, "source": f"n/a: {str(exc).splitlines()[0][:80]}"})
                continue
            totals.append({"method": name, "epsilon": res.epsilon, "adaptive": False,
                           "certified": bool(res.certified), "enforced": False, "source": res.source})
    return {**ds.to_json(), "filter_epsilon": s.filter_epsilon, "left": s.left, "events": events,
            "totals": totals}


def _plot(reports: list[dict], path: str) -> None:
    import datetime as dt

    from dpcalc.cli.plot_style import finish, new_axes, require_matplotlib, save_figure

    plt = require_matplotlib()
    fig, ax = new_axes(plt)
    end = max((dt.datetime.fromisoformat(e["created"]) for rep in reports for e in rep["events"]), default=None)
    for rep in reports:
        times = [dt.datetime.fromisoformat(e["created"]) for e in rep["events"]]
        eps = [e["filter_epsilon_after"] for e in rep["events"]]
        if times:  # from 0 before the first event to the last event of the ledger
            line = ax.step([times[0], *times, end], [0.0, *eps, eps[-1]], where="post", marker="o",
                           markersize=3, label=f"{rep['name']} (RDP filter)")[0]
            ax.axhline(rep["budget_epsilon"], color=line.get_color(), linestyle=":", linewidth=1)
    finish(ax, title="Privacy spent per dataset", xlabel="time (UTC)", ylabel="cumulative ε (dotted: budget)",
           legend=any(rep["events"] for rep in reports))
    fig.autofmt_xdate()
    save_figure(fig, path)
    plt.close(fig)


@ledger_group.command("show", epilog=example_epilog("dpcalc ledger show budget.db",
                                                    "dpcalc ledger show budget.db --dataset census --json"))
@click.argument("file", type=str)
@click.option("--dataset", "dataset", type=str, default=None, help="Only this dataset.")
@click.option("--plot", "plot_path", type=str, default=None, metavar="FILE",
              help="Also draw the cumulative ε over time (PNG or SVG by the extension; needs matplotlib).")
@json_option
def show_command(file, dataset, plot_path, json_output):
    """Each recorded event, the ε spent (the enforced RDP filter, and each accountant's
    non-adaptive total beside it) and the budget left."""
    from dpcalc.ledger import Ledger

    if plot_path is not None:
        from dpcalc.cli.plot_style import prepare

        prepare(plot_path)
    with Ledger(file, read_only=True) as led:
        datasets = [led.dataset(dataset)] if dataset is not None else led.datasets()
        reports = [_dataset_report(led, ds) for ds in datasets]
        read_only = led.read_only
    if plot_path is not None:
        _plot(reports, plot_path)
    if json_output:
        print_json({"command": "ledger show", "inputs": {"file": file, "dataset": dataset},
                    "results": reports})
        return
    for rep in reports:
        emit(command="ledger show", inputs={}, results=rep["events"], json_output=False,
             title=f"dataset {rep['name']!r}: budget ε = {fmt(rep['budget_epsilon'])}, δ = {fmt(rep['delta'])} "
                   f"({rep['adjacency']})",
             columns=[Column("#", lambda r: str(r["id"])),
                      Column("time (UTC)", lambda r: r["created"][:19].replace("T", " "), "left"),
                      Column("mechanism", lambda r: r["mechanism"], "left"),
                      Column("parameters", _params_text, "left"),
                      Column("status", lambda r: r["status"] + (
                          f" ({r['steps_taken']}/{r['steps_reserved']} steps)" if r["kind"] == "train" else ""),
                          "left"),
                      Column("ε after (filter)", lambda r: fmt(r["filter_epsilon_after"], 4, "up"))])
        emit(command="ledger show", inputs={}, results=rep["totals"], json_output=False,
             title=f"spent on {rep['name']!r}",
             columns=[Column("accounting", lambda r: r["method"], "left"),
                      Column("ε", lambda r: fmt(r["epsilon"], 4, "up") if r["epsilon"] is not None else "n/a"),
                      Column("use", lambda r: "enforced: valid under adaptive composition" if r["enforced"]
                             else "non-adaptive (fixed sequence), reporting only"
                             + ("" if r["certified"] else ", approx."), "left")],
             notes=[f"Left: ε {fmt(rep['left'], 4, 'down')} of {fmt(rep['budget_epsilon'])} at "
                    f"δ = {fmt(rep['delta'])} (RDP filter).",
                    "Unfinished training runs count all their reserved steps."]
             + (["Read-only: the ledger cannot be written here, so it was opened read-only; releases "
                 "recording into it are refused."] if read_only else []))
    if plot_path is not None:
        click.echo(f"Plot written to {plot_path}.")


def _not_the_ledger(output: str, file: str) -> None:
    """Refuse an --output that is the ledger file itself (or its -wal, -shm or -journal file)."""
    import os

    from dpcalc.errors import ParameterError

    out = os.path.realpath(output)
    if any(out == os.path.realpath(file + suffix) for suffix in ("", "-wal", "-shm", "-journal")):
        raise ParameterError("output", "", output, message=(
            f"--output {output!r} is the ledger file (or one of its own files): the report only reads the "
            "ledger; choose another file"))


@ledger_group.command("report", epilog=example_epilog(
    "dpcalc ledger report budget.db --dataset census",
    "dpcalc ledger report budget.db --dataset census --format json --output census-dp.json"))
@click.argument("file", type=str)
@click.option("--dataset", "dataset", type=str, default=None, help="Only this dataset [default: every dataset].")
@click.option("--format", "fmt", type=click.Choice(["markdown", "json"]), default="markdown", show_default=True,
              help="Output format.")
@click.option("--output", type=str, default=None, metavar="PATH",
              help="Write the statement to this file (atomically) instead of standard output.")
def report_command(file, dataset, fmt, output):
    """A DP statement per dataset: privacy unit and adjacency, the budget (ε, δ), every recorded
    event with its own ε, the total the RDP filter certifies (as ledger show), what is left, and
    the reporting checklist of Ponomareva et al. 2023 §5.3. The ledger is only read."""
    from dpcalc.claims.ledger_statement import ledger_statements, render_ledger_markdown
    from dpcalc.results import jsonable

    if output is not None:
        from dpcalc._files import check_output_target

        check_output_target(output, option="--output")
        _not_the_ledger(output, file)
    statements = ledger_statements(file, dataset)
    if fmt == "json":
        text = json.dumps({"command": "ledger report", "inputs": {"file": file, "dataset": dataset},
                           "results": [jsonable(st) for st in statements]},
                          allow_nan=False, ensure_ascii=False, indent=2) + "\n"
    else:
        text = "\n".join(render_ledger_markdown(st) for st in statements)
    if output is None:
        click.echo(text, nl=False)
    else:
        from dpcalc._files import atomic_write_bytes

        atomic_write_bytes(output, text.encode("utf-8"), option="--output")
        click.echo(f"Statement written to {output} ({fmt}).", err=True)


@ledger_group.command("export", epilog=example_epilog("dpcalc ledger export budget.db > audit.jsonl"))
@click.argument("file", type=str)
@click.option("--dataset", "dataset", type=str, default=None, help="Only this dataset.")
def export_command(file, dataset):
    """Print the ledger as JSON lines (a header, then each dataset and its events) for an audit trail."""
    from dpcalc.ledger import Ledger, export_lines

    with Ledger(file, read_only=True) as led:
        lines = export_lines(led, dataset)
    click.echo("\n".join(lines))


@ledger_group.command("import", epilog=example_epilog("dpcalc ledger import restored.db audit.jsonl"))
@click.argument("file", type=str)
@click.argument("source", type=str)
@json_option
def import_command(file, source, json_output):
    """Add the datasets and events of an export (SOURCE, or - for standard input) to the ledger
    FILE (created if missing). All lines are checked first; nothing is written on an error."""
    from dpcalc._files import read_input_file
    from dpcalc.errors import ParameterError
    from dpcalc.ledger import Ledger
    from dpcalc.ledger.transfer import import_plan, parse_export

    if "\x00" in source:  # read_input_file's os.open raises ValueError on it
        raise ParameterError("source", "", source, message="SOURCE must be a file name, got one with a NUL byte")
    data = read_input_file(source, option="source", max_bytes=MAX_IMPORT_BYTES)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ParameterError("source", "", source, message=f"{source}: not UTF-8 text") from None
    plan = parse_export(text.splitlines())
    with Ledger(file, create=True) as led:
        n_ds, n_ev = import_plan(led, plan)
    emit(command="ledger import", inputs={"file": file, "source": source},
         results=[{"datasets": n_ds, "events": n_ev}], json_output=json_output, title="imported",
         columns=[Column("datasets", lambda r: str(r["datasets"])), Column("events", lambda r: str(r["events"]))])


def with_ledger(res_json: dict, guard: ReleaseGuard | None, notes: list[str]) -> dict:
    """A release's JSON result with a ``ledger`` entry (file, dataset, event id, ε spent and left)
    and the ledger's note appended to ``notes``; unchanged without a guard."""
    if guard is None:
        return res_json
    info = guard.summary()
    notes.append(guard.note(info))
    return {**res_json, "ledger": info}
