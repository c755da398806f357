"""Option bundles shared by several commands (decorators), with glossary names."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

__all__ = ["json_option", "sampling_options", "delta_option", "neighboring_option", "pld_options",
           "pld_settings", "example_epilog"]

F = Callable[..., Any]


def json_option(f: F) -> F:
    return click.option("--json", "json_output", is_flag=True,
                        help="Print one JSON object (docs/design.md §5) instead of a table.")(f)


def delta_option(f: F) -> F:
    return click.option("--delta", type=float, required=True, help="δ, in (0, 1).")(f)


def neighboring_option(f: F) -> F:
    return click.option(
        "--neighboring", type=click.Choice(["add-remove", "replace"]), default="add-remove",
        show_default=True,
        help="Adjacency: add/remove one record, or replace one record's value.")(f)


def sampling_options(f: F) -> F:
    """-q/--sample-rate with --steps, or --batch-size --dataset-size --epochs (or --steps)."""
    opts = [
        click.option("-q", "--sample-rate", type=float, default=None,
                     help="q: Poisson sampling probability per step, in (0, 1]. Omit with --steps alone for q = 1 (no subsampling)."),
        click.option("--steps", type=float, default=None,
                     help="T: number of steps (compositions), a whole number; 1e6 notation accepted."),
        click.option("--batch-size", type=float, default=None,
                     help="Expected batch size B (q = B/N)."),
        click.option("--dataset-size", type=float, default=None, help="Dataset size N."),
        click.option("--epochs", type=float, default=None,
                     help="Epochs (T = ceil(epochs·N/B))."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def pld_options(f: F) -> F:
    """--discretization and --accuracy of the PLD accountant."""
    f = click.option("--accuracy", type=float, default=None,
                     help="pld: requested relative gap between its upper and lower ε (default 0.005).")(f)
    return click.option("--discretization", type=float, default=None,
                        help="pld: grid step of the privacy loss in nats (default: chosen from --accuracy).")(f)


def pld_settings(discretization: float | None, accuracy: float | None) -> dict:
    """Per-accountant options for the library from the PLD flags (validated by the accountant)."""
    opts = {k: val for k, val in (("discretization", discretization), ("accuracy", accuracy))
            if val is not None}
    return {"pld": opts} if opts else {}


def example_epilog(*examples: str) -> str:
    """A --help epilog that ends with runnable examples (docs/contributing.md §10)."""
    lines = "\n".join(f"  {e}" for e in examples)
    return f"\b\nExample{'s' if len(examples) > 1 else ''}:\n{lines}"
