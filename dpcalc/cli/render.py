"""One renderer for every command: a rich table (default) or the JSON object of
docs/design.md §5 (``--json``: exactly one object on stdout, nothing else)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import click

from dpcalc._rounding import round_significant
from dpcalc.results import jsonable

__all__ = ["Column", "emit", "fmt", "print_json", "notes_before_sources", "add_sources"]


def fmt(x: Any, digits: int = 6, rounding: str | None = None, exact: str | None = None) -> str:
    """Format a number for a table: ``digits`` significant digits; ``—`` for missing; ``∞``.

    ``rounding="up"`` rounds towards +∞ and ``"down"`` towards −∞ instead of to nearest, so
    that a printed upper bound (ε, δ, a noise scale a user may copy) is never below the
    computed one, and a printed lower bound never above it. ``exact``: the value's exact
    decimal (a string) when the library knows it (e.g. q·δ of the stated parameters); the
    directed rounding is then applied to it rather than to the float, which may lie one ulp
    beyond it (so 0.01 · 1e-5 prints as 1e-07, not 1.00001e-07).
    """
    if x is None:
        return "—"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        if math.isinf(x):
            return "∞" if x > 0 else "-∞"
        if math.isnan(x):  # never expected; shown rather than hidden
            return "nan"
        if rounding is not None:
            if exact is not None:
                from decimal import Decimal

                x = round_significant(Decimal(exact), digits, rounding)
            else:
                x = round_significant(x, digits, rounding)
        return f"{x:.{digits}g}"
    return str(x)


def notes_before_sources(notes: list[str], new: Sequence[str]) -> None:
    """Insert ``new`` notes into ``notes`` in place, before its closing "Sources — …" note
    (the sources stay last), or at the end when there is none."""
    at = len(notes) - 1 if notes and notes[-1].startswith("Sources") else len(notes)
    notes[at:at] = list(new)


def add_sources(notes: list[str], sources: str) -> None:
    """Append ``sources`` to the closing "Sources — …" note of ``notes`` (in place), or close
    ``notes`` with a new one."""
    if notes and notes[-1].startswith("Sources — "):
        notes[-1] = notes[-1].rstrip(".") + f"; {sources}."
    else:
        notes.append(f"Sources — {sources}.")


@dataclass(frozen=True)
class Column:
    """A table column: header and how to get the cell text from a result's JSON dict."""

    header: str
    get: Callable[[Mapping[str, Any]], str]
    justify: str = "right"


def print_json(obj: Mapping[str, Any]) -> None:
    """Print one JSON object (non-finite numbers already replaced by null)."""
    import json  # only for --json: the tables do not pay for it (docs/design.md §2.3)

    click.echo(json.dumps(jsonable(obj), allow_nan=False))


def emit(
    *,
    command: str,
    inputs: Mapping[str, Any],
    results: Sequence[Mapping[str, Any]],
    json_output: bool,
    columns: Sequence[Column],
    title: str | None = None,
    notes: Iterable[str] = (),
    input_labels: Mapping[str, str] | None = None,
    warnings: Sequence[str] = (),
    extra: Mapping[str, Any] | None = None,
) -> None:
    """Render a command's output.

    Args:
        command: the command name (JSON ``command``).
        inputs: the validated inputs, glossary names (JSON ``inputs``; echoed above the table).
        results: one JSON-ready dict per accountant/method (JSON ``results``).
        json_output: print JSON instead of a table.
        columns: table columns.
        title: table title.
        notes: sentences printed under the table (assumptions, warnings).
        input_labels: optional display labels for the echoed inputs.
        warnings: warnings about the inputs (e.g. δ ≥ 1/N): JSON ``warnings`` (the key only
            when there is one), and "Warning:" lines under the table.
        extra: further top-level JSON keys (e.g. ``sampler``: the shuffle bracket); the table
            shows them through ``notes``.
    """
    if json_output:
        out = {"command": command, "inputs": dict(inputs), "results": list(results)}
        if extra:
            out.update(extra)
        if warnings:
            out["warnings"] = list(warnings)
        print_json(out)
        return
    import sys

    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    # Not a terminal (pipe, file, test runner): a fixed, generous width instead of rich's 80.
    console = Console(highlight=False, soft_wrap=False,
                      width=None if sys.stdout.isatty() else 120)
    labels = input_labels or {}
    echo = ", ".join(f"{labels.get(k, k)}={fmt(val)}" for k, val in inputs.items() if val is not None)
    if echo:  # user text is never parsed as rich markup
        console.print(Text.assemble(("inputs", "bold"), ": " + echo))
    table = Table(title=None if title is None else Text(title), title_justify="left", show_lines=False)
    for col in columns:
        table.add_column(Text(col.header), justify=col.justify, overflow="fold")
    for res in results:
        table.add_row(*[Text(col.get(res)) for col in columns])
    console.print(table)
    for note in notes:
        console.print(Text(f"• {note}"))
    for w in warnings:
        console.print(Text(f"Warning: {w}"))
