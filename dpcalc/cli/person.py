"""Privacy per person on the DP-SGD commands (issue 28): ``--group-size`` and the note comparing
the group-level ε with what ``dpcalc convert group`` certifies (docs/how-to/group-and-user-level.md).
The mathematics is in :mod:`dpcalc.accounting.group`; this module parses and words."""

from __future__ import annotations

import math
from typing import Any

from dpcalc.cli.options import RANGES, number_option
from dpcalc.cli.render import fmt

__all__ = ["group_size_option", "group_notes"]


def group_size_option(f):
    """``--group-size k``: account for a group of k records added or removed together."""
    return number_option(
        "--group-size", kind=RANGES["group_size"], default=1,
        help="k ≥ 1: the guarantee for a group of k records added or removed together (one person's records), "
             "by the binomial mixture of Gaussians (Ganesh 2024; Poisson sampling or none). Printed beside what "
             "`dpcalc convert group` gives from the record-level guarantee.")(f)


def group_notes(schedule, comparison: dict[str, Any] | None, quantity: str) -> list[str]:
    """The lines under a table when ``--group-size`` k > 1: what the numbers are and the
    conversion's value (``comparison``: :func:`dpcalc.accounting.dpsgd.convert_group_comparison`)."""
    k = schedule.group_size
    if k <= 1:
        return []
    lines = [f"Group of k = {k} records added or removed together: each step is the mixture of Gaussians "
             f"Σ_j Bin({k}, q)(j)·N(j·C, σ²C²) (Ganesh 2024; Choquette-Choo et al. 2023 Cor. 4.7), which "
             "dominates the step and is attained: pld brackets its exact curve, rdp bounds it."]
    if comparison is not None:
        key = "convert_group_epsilon" if quantity == "epsilon" else "convert_group_delta"
        value = comparison.get(key)
        what = "ε" if quantity == "epsilon" else "δ"
        shown = "∞" if value is None or not math.isfinite(value) else fmt(value, 4, "up")
        lines.append(f"`dpcalc convert group` from the record-level guarantee ({comparison['accountant']}) would "
                     f"certify {what} = {shown} for the same group (Vadhan 2017 Lemma 2.2).")
    return lines
