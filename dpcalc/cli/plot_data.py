"""The series of the ``--plot`` pictures of ``dpcalc epsilon`` and ``dpcalc sigma`` as plain data,
for ``dpcalc serve``'s curves (``GET /api/<page>/plot``).

:func:`plot_series` parses the command's argv with the command's own click parser (so the same
validation and error text as the command), resolves the run exactly as the command does (the same
helpers: :func:`dpcalc.cli.person.resolve_user_unit`, :func:`dpcalc.cli.epsilon.checked_schedule`,
the accountants and their settings) and calls the same series function the command's ``--plot``
calls (:func:`dpcalc.cli.run_plots.epsilon_series`, :func:`~dpcalc.cli.run_plots.sigma_series`).
It returns lists, never a picture: the web layer draws them. No mathematics here.

:func:`run_plot` is what a ``dpcalc serve`` worker runs: :func:`plot_series` with the errors turned
into the CLI's one ``Error: ...`` line and exit status (as :func:`dpcalc.cli.main` does).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import click

from dpcalc.cli import one_line, parameter_message
from dpcalc.cli.epsilon import checked_schedule, epsilon_command
from dpcalc.cli.options import accountant_settings, check_only_with
from dpcalc.cli.person import resolve_user_unit
from dpcalc.cli.run_plots import epsilon_series, schedule_setting, sigma_series
from dpcalc.cli.sigma import calibration_accountants, sigma_command
from dpcalc.errors import DpcalcError, ParameterError

__all__ = ["PLOTTED", "plot_series", "run_plot"]

#: the commands whose ``--plot`` series :func:`plot_series` gives
PLOTTED = ("epsilon", "sigma")


def _num(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def _as_data(series, *, command: str, title: str, where: str, xlabel: str, ylabel: str,
             marker: float | None = None) -> dict[str, Any]:
    """A :class:`~dpcalc.accounting.series.Series` as JSON-ready lists (no value changed)."""
    details = {k: (list(v) if isinstance(v, tuple) else v) for k, v in series.details.items()}
    return {
        "command": command, "title": title, "setting": where, "xlabel": xlabel, "ylabel": ylabel,
        "x": [float(x) for x in series.x], "marker": marker, "details": details,
        "curves": [{"name": c.name, "values": [_num(y) for y in c.values],
                    "lower": None if c.lower is None else [_num(y) for y in c.lower],
                    "certified": bool(c.certified), "reason": c.reason, "drawn": c.drawn}
                   for c in series.curves],
    }


def _epsilon(p: Mapping[str, Any]) -> dict[str, Any]:
    """``dpcalc epsilon --plot``'s series for the parsed options ``p`` (the command's steps, in its order)."""
    from dpcalc.accounting.dpsgd import resolve_accountants

    dataset_size, _, _ = resolve_user_unit(p["privacy_unit"], p["records_per_user"], p["dataset_size"],
                                           p["group_size"])
    schedule = checked_schedule(neighboring=p["neighboring"], sample_rate=p["sample_rate"], steps=p["steps"],
                                batch_size=p["batch_size"], dataset_size=dataset_size, epochs=p["epochs"],
                                sampling=p["sampling"], max_batch_size=p["max_batch_size"],
                                group_size=p["group_size"])
    series = epsilon_series(noise_multiplier=p["noise_multiplier"], schedule=schedule, delta=p["delta"],
                            accountants=resolve_accountants(p["accountant"], default_all=True),
                            neighboring=p["neighboring"],
                            options=accountant_settings(discretization=p["discretization"], accuracy=p["accuracy"]))
    return _as_data(series, command="epsilon", title="ε spent against epochs, per accountant",
                    where=schedule_setting(schedule, sigma=p["noise_multiplier"]),
                    xlabel="epochs (passes over the data)", ylabel=f"ε at δ = {p['delta']:g}",
                    marker=series.x[-1])


def _sigma(p: Mapping[str, Any]) -> dict[str, Any]:
    """``dpcalc sigma --plot``'s series for the parsed options ``p`` (the command's steps, in its order)."""
    dataset_size, _, _ = resolve_user_unit(p["privacy_unit"], p["records_per_user"], p["dataset_size"],
                                           p["group_size"])
    schedule = checked_schedule(sample_rate=p["sample_rate"], steps=p["steps"], batch_size=p["batch_size"],
                                dataset_size=dataset_size, epochs=p["epochs"], sampling=p["sampling"],
                                max_batch_size=p["max_batch_size"], group_size=p["group_size"],
                                neighboring=p["neighboring"])
    series = sigma_series(target_epsilon=p["epsilon"], delta=p["delta"], schedule=schedule,
                          accountants=calibration_accountants(p["accountant"], schedule, p["neighboring"]),
                          neighboring=p["neighboring"], fallback=p["accountant"] is None,
                          options=accountant_settings(discretization=p["discretization"], accuracy=p["accuracy"]))
    return _as_data(series, command="sigma",
                    title=f"Noise multiplier σ for a target ε (δ = {p['delta']:g})", where=schedule_setting(schedule),
                    xlabel="target ε", ylabel="σ (noise std / clipping norm)", marker=p["epsilon"])


_COMMANDS = {"epsilon": (epsilon_command, _epsilon), "sigma": (sigma_command, _sigma)}


def plot_series(name: str, argv: Sequence[str]) -> dict[str, Any]:
    """The series ``dpcalc <name> <argv> --plot FILE`` draws, as lists.

    Args:
        name: the command, one of :data:`PLOTTED`.
        argv: its options (the words after ``dpcalc <name>``; ``--json`` and ``--plot`` are
            ignored: the series does not depend on them).

    Returns:
        ``{"command", "title", "setting", "xlabel", "ylabel", "x", "marker", "details",
        "curves"}``: ``x`` the epochs (epsilon) or the target ε values (sigma), increasing;
        ``marker`` the x of the command's own result (the run's epochs; the requested ε);
        ``curves`` one per accountant: ``{"name", "values", "lower", "certified", "reason",
        "drawn"}`` with ``values`` (ε upper bounds, or σ) and ``lower`` (pld's certified
        bracket's lower end, or None) one per x, None where there is none.

    Raises:
        KeyError: ``name`` has no plot series. click.ClickException: the options do not parse
        (the command's own messages). ParameterError, DpcalcError: as the command raises them.
    """
    command, build = _COMMANDS[name]
    words = [w for w in argv if w != "--json"]
    ctx = command.make_context(name, words)
    with ctx:
        if getattr(command, "only_with", None):  # what StrictCommand.invoke checks before the command runs
            check_only_with(command, ctx, command.only_with)
        params = dict(ctx.params)
        if params.get("plot") is not None:
            raise click.UsageError("--plot is not taken here: the series are returned, not drawn")
        return build(params)


def run_plot(argv: Sequence[str]) -> tuple[int, str, str]:
    """``argv`` = ``[name, *options]``: ``(exit status, JSON text of :func:`plot_series`, stderr)``
    with the command's errors as :func:`dpcalc.cli.main` writes them (``Error: ...``; exit 2 for
    bad input, 1 for an infeasible one)."""
    name, *rest = argv
    if name not in _COMMANDS:
        return 2, "", f"Error: dpcalc {name} has no plot series\n"
    try:
        data = plot_series(name, rest)
    except click.exceptions.Exit as e:  # --help
        return e.exit_code, "", ""
    except click.ClickException as e:
        return (e.exit_code or 2), "", f"Error: {one_line(e.format_message())}\n"
    except ParameterError as e:
        return 2, "", f"Error: {parameter_message(e)}\n"
    except DpcalcError as e:
        return 1, "", f"Error: {e}\n"
    return 0, json.dumps(data, allow_nan=False), ""
