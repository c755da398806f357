r"""Every composition bound for one sequence of mechanisms (``dpcalc compose``): orchestration.

:func:`compose` takes a sequence (:class:`~dpcalc.composition.spec.MechanismSpec` items,
merged when identical) and a target (total δ to get ε, or ε to get δ) and returns one
:class:`~dpcalc.results.MethodResult` per method, tightest certified first:

=============  ========================================================  ===========
method         what                                                      certified
=============  ========================================================  ===========
basic          Σε_i, Σδ_i (Dwork & Roth 2014 Thm 3.16)                   yes
advanced       Dwork–Rothblum–Vadhan 2010 (DR14 Thm 3.20), identical     yes
               mechanisms only
kov            Kairouz–Oh–Viswanath 2015 Thm 3.4/3.5 closed form         yes
optimal        KOV 2015 Thm 3.3 / Murtagh–Vadhan 2016 (exact or numeric  yes
               certified bracket)
br             Dong–Durfee–Rogers 2020 §5: k exponential (ε-bounded-     no (exact for
               range) mechanisms, optimal; only in sequences with one    non-adaptive
               (they are left out of the default rows otherwise)         choice only)
(registered)   every accountant of :mod:`dpcalc.accounting.registry`     per result
               (pld, rdp, zcdp, ma, gdp, ... — gdp is a CLT approximation)
=============  ========================================================  ===========

The theorems see each mechanism through its (ε, δ) view (:mod:`.generic`); the accountants
see the events themselves. The methods (:func:`available_methods`) are :data:`THEOREMS` + ``registry.available()`` at
call time, so an accountant registered later is a row (and a ``--method`` choice) at once.
A method that does not apply, or whose evaluation fails for these inputs (a count too large
for its numeric grid, an overflow), is a row with ``applicable`` false, ``certified`` false
and the reason — never an error of the whole call. The methods and their rows live in
:mod:`.methods`, the steps grid in :mod:`.grid`, the privacy curves in :mod:`.curves`, the
input spec in :mod:`.spec`.

All mechanisms use add/remove adjacency (sensitivity 1 for the noise multiplier).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dpcalc import _validate as v
from dpcalc.composition.generic import THEOREMS
from dpcalc.composition.methods import available_methods, evaluate, short_source_of, source_of
from dpcalc.composition.spec import MechanismSpec, load_spec_file, merge, parse_spec, sequence_event
from dpcalc.errors import ParameterError
from dpcalc.results import MethodResult

__all__ = [
    "MechanismSpec",
    "MethodResult",
    "ComposeReport",
    "METHODS",  # noqa: F822 - computed by __getattr__ (follows the registry)
    "SOURCES",  # noqa: F822
    "THEOREMS",
    "available_methods",
    "source_of",
    "short_source_of",
    "compose",
    "evaluate",
    "parse_spec",
    "load_spec_file",
    "sequence_event",
    "steps_grid_counts",  # noqa: F822 - lazily imported by __getattr__
    "privacy_curves",  # noqa: F822
]


def __getattr__(name: str) -> Any:
    # METHODS and SOURCES follow the registry: computed when read
    if name == "METHODS":
        return available_methods()
    if name == "SOURCES":
        return {m: source_of(m) for m in available_methods()}
    if name == "steps_grid_counts":
        from dpcalc.composition.grid import steps_grid_counts

        return steps_grid_counts
    if name == "privacy_curves":
        from dpcalc.composition.curves import privacy_curves

        return privacy_curves
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class ComposeReport:
    """What :func:`compose` returns: the rows (sorted, tightest certified first) and inputs.

    Attributes:
        results: the rows.
        inputs: the JSON ``inputs`` echo (merged mechanisms, target, total steps).
        mode: ``"epsilon"`` (ε at a target δ) or ``"delta"`` (δ at a target ε).
        curve: the privacy curves (:func:`dpcalc.composition.curves.privacy_curves`), if asked.
        notes: remarks for the reader (e.g. a capped steps grid).
    """

    results: list[MethodResult]
    inputs: dict
    mode: str
    curve: dict | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def tightest(self) -> MethodResult | None:
        """The tightest certified applicable row (None if there is none)."""
        for r in self.results:
            val = _value(r, self.mode)
            if r.applicable and r.certified and val is not None and math.isfinite(val):
                return r
        return None

    def no_answer(self) -> str | None:
        """None if some row gives a usable bound (a finite ε; a δ below 1), else why not:
        the reasons of the rows, one clause per distinct reason."""
        for r in self.results:
            val = _value(r, self.mode)
            if r.applicable and val is not None and math.isfinite(val) and (self.mode == "epsilon" or val < 1):
                return None
        by_reason: dict[str, list[str]] = {}
        for r in self.results:
            by_reason.setdefault(r.auto_reason() or "no bound", []).append(r.method)
        return "; ".join(f"{', '.join(ms)}: {reason}" for reason, ms in by_reason.items())


def _value(r: MethodResult, mode: str) -> float | None:
    return r.epsilon if mode == "epsilon" else r.delta


def _sort(rows: list[MethodResult], mode: str, order: Sequence[str]) -> list[MethodResult]:
    def key(r: MethodResult):
        val = _value(r, mode)
        finite = val is not None and math.isfinite(val)
        if not r.applicable:
            tier = 3
        elif not finite:
            tier = 2
        elif r.certified:
            tier = 0
        else:
            tier = 1
        rank = order.index(r.method) if r.method in order else len(order)
        return (tier, val if finite else math.inf, rank)

    return sorted(rows, key=key)


def compose(
    sequence: Sequence[MechanismSpec],
    *,
    delta: float | None = None,
    epsilon: float | None = None,
    methods: Sequence[str] | None = None,
    steps_grid: int | None = None,
    rtol: float = 0.01,
) -> ComposeReport:
    r"""Every composition bound that applies to ``sequence``, tightest certified first.

    Args:
        sequence: the mechanisms (:class:`MechanismSpec`), in any order (composition is
            symmetric); identical items are merged (counts added).
        delta: target total δ in (0, 1): each row gives ε. Exactly one of ``delta``/``epsilon``.
        epsilon: target total ε ≥ 0: each row gives δ.
        methods: subset of :func:`available_methods` (default: all; an accountant is then skipped,
            with the reason, for more distinct mechanisms than its declared
            :attr:`~dpcalc.accounting.base.Accountant.max_distinct`: pld beyond 64).
        steps_grid: if given, also evaluate every row at this many numbers of compositions
            (at most :data:`dpcalc.composition.grid.MAX_GRID_POINTS`; larger values are capped
            and ``notes`` says so); stored in ``details["grid"]`` as ``steps`` (total number
            of mechanisms) and ``epsilon`` (or ``delta``) lists; a method evaluated at a
            subset of the points only says so in ``details["grid"]["note"]``. The last point
            is the input itself and carries the row's own value.
        rtol: relative accuracy of the numeric optimal composition (many distinct ε_i).

    Returns:
        :class:`ComposeReport`. A row's δ (ε mode) is the target δ itself when the method
        meets it, so it prints as given.

    Raises:
        ParameterError: empty sequence, both/neither target, bad target, unknown method,
            steps_grid < 2.
    """
    sequence = list(sequence)
    if not sequence:
        raise ParameterError("mechanism", "", None, message="give at least one mechanism "
                             "(--dp, --gaussian, --laplace, --exponential or --spec)")
    if (delta is None) == (epsilon is None):
        raise ParameterError("delta", "", None, message="give exactly one of --delta (to get ε) or --eps (to get δ)")
    if delta is not None:
        delta = v.open_unit("delta", delta)
    else:
        epsilon = v.nonnegative("epsilon", epsilon)
    order = available_methods()
    explicit = methods is not None
    chosen = tuple(order if methods is None else methods)
    for m in chosen:
        v.choice("method", m, order)
    notes: list[str] = []
    if steps_grid is not None:
        from dpcalc.composition.grid import MAX_GRID_POINTS

        steps_grid = v.count("steps_grid", steps_grid, minimum=2)
        if steps_grid > MAX_GRID_POINTS:
            notes.append(f"--steps-grid capped at {MAX_GRID_POINTS:,} points (asked for {steps_grid:,})")
            steps_grid = MAX_GRID_POINTS
    sequence = merge(sequence)
    mode = "epsilon" if delta is not None else "delta"
    rows, instances = evaluate(sequence, delta=delta, epsilon=epsilon, methods=chosen, rtol=rtol,
                               guard=not explicit)
    if steps_grid is not None:
        from dpcalc.composition.grid import add_grid, steps_grid_counts

        grid = steps_grid_counts([m.count for m in sequence], steps_grid)
        rows = add_grid(rows, [m.event() for m in sequence], grid, delta=delta, epsilon=epsilon, rtol=rtol,
                        accountants=instances)
    inputs: dict[str, Any] = {"mechanisms": [m.describe() for m in sequence]}
    if delta is not None:
        inputs["delta"] = delta
    else:
        inputs["epsilon"] = epsilon
    inputs["steps"] = int(sum(m.count for m in sequence))
    if steps_grid is not None:
        inputs["steps_grid"] = steps_grid
    return ComposeReport(_sort(rows, mode, order), inputs, mode, notes=tuple(notes))
