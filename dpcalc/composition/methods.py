r"""The methods of ``dpcalc compose`` and their rows for one sequence: :func:`evaluate`.

A method is a generic theorem (:data:`~dpcalc.composition.generic.THEOREMS`, each seeing the
mechanisms through their (ε, δ) view) or a registered accountant (seeing the events
themselves). :func:`available_methods` lists both, reading the registry at call time, so an
accountant registered later is a row (and a ``--method`` choice) at once. Both
:mod:`.compose` (the sorted report) and :mod:`.curves` (the privacy curves) evaluate rows here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from dpcalc.accounting.base import isolated
from dpcalc.accounting.registry import available, get_accountant, get_class
from dpcalc.composition.generic import (
    THEOREM_SHORT,
    THEOREM_SOURCES,
    THEOREMS,
    GenericView,
    has_bounded_range,
    theorem_na,
    theorem_rows,
)
from dpcalc.composition.spec import MechanismSpec, sequence_event
from dpcalc.errors import DpcalcError, ParameterError, UnsupportedEventError
from dpcalc.results import MethodResult

__all__ = ["available_methods", "source_of", "short_source_of", "evaluate"]


def available_methods() -> tuple[str, ...]:
    """Every method of :func:`dpcalc.composition.compose.compose`: the generic theorems, then
    the registered accountants (read from the registry at call time)."""
    return THEOREMS + tuple(n for n in available() if n not in THEOREMS)


def source_of(method: str) -> str:
    """The full citation of a method (a theorem's, or the accountant class's ``source``)."""
    if method in THEOREM_SOURCES:
        return THEOREM_SOURCES[method]
    try:
        return get_class(method).source
    except (ParameterError, ImportError, AttributeError):
        return ""


def short_source_of(method: str) -> str:
    """The short citation for table columns (the accountant's ``short_source``, else its ``source``)."""
    if method in THEOREM_SHORT:
        return THEOREM_SHORT[method]
    try:
        cls = get_class(method)
    except (ParameterError, ImportError, AttributeError):
        return ""
    return cls.short_source or cls.source


def _accountant_na(name: str, reason: str, source: str = "") -> MethodResult:
    return MethodResult(name, None, None, False, applicable=False, reason=reason, source=source or source_of(name),
                        accountant=True)


def _accountant_row(name: str, event, *, delta: float | None, epsilon: float | None) -> tuple[MethodResult, Any]:
    """One registered accountant's row (and the instance, for the grid)."""
    try:
        acc = get_accountant(name)
    except ImportError as e:  # an accountant module that cannot be loaded
        return _accountant_na(name, f"accountant '{name}' could not be loaded ({e})"), None

    def run(a):
        a.check(event)
        return a.epsilon(event, delta=delta) if delta is not None else a.delta(event, epsilon=epsilon)

    res = isolated(acc, run, also=(DpcalcError, MemoryError))
    if not res.applicable:
        return _accountant_na(name, res.reason or "not applicable", acc.source), acc
    eps_val = res.epsilon if res.epsilon is not None else math.inf
    return MethodResult(name, float(eps_val), None if res.delta is None else float(res.delta), bool(res.certified),
                        reason=res.reason, source=res.source or acc.source, details=dict(res.details),
                        accountant=True), acc


def _too_many_distinct(name: str, distinct: int) -> MethodResult | None:
    """The skipped row of an accountant whose time grows with the number of distinct mechanisms
    (:attr:`~dpcalc.accounting.base.Accountant.max_distinct`), or None when it is evaluated."""
    try:
        cls = get_class(name)
    except ImportError:  # reported by its row
        return None
    if cls.max_distinct is None or distinct <= cls.max_distinct:
        return None
    return _accountant_na(name, f"not evaluated by default for {distinct:,} distinct mechanisms (more than "
                                f"{cls.max_distinct}): {cls.distinct_cost}; ask for it with --method {name} "
                                "(optimal gives a certified bracket)")


def evaluate(sequence: Sequence[MechanismSpec], *, delta: float | None, epsilon: float | None,
             methods: Sequence[str], rtol: float = 0.01, guard: bool = False
             ) -> tuple[list[MethodResult], dict]:
    """The unsorted rows of ``methods`` for a merged, validated ``sequence``.

    Args:
        sequence: the items (already merged).
        delta, epsilon: the target (exactly one is not None; validated by the caller).
        methods: which methods.
        rtol: relative accuracy of the numeric optimal composition.
        guard: the default rows (no explicit methods): accountants too costly for this
            sequence are skipped with the reason (more distinct mechanisms than their
            :attr:`~dpcalc.accounting.base.Accountant.max_distinct`), and ``br`` is left out
            without an exponential mechanism (it cannot apply).

    Returns:
        (rows, accountant instances by name).
    """
    steps = [m.event() for m in sequence]
    counts = [m.count for m in sequence]
    rows: list[MethodResult] = []
    wanted = [m for m in methods if m in THEOREMS]
    if guard and not has_bounded_range(steps):
        wanted = [m for m in wanted if m != "br"]
    if wanted:
        try:
            view = GenericView(steps, counts)
        except UnsupportedEventError as e:
            rows += [theorem_na(m, str(e)) for m in wanted]
        else:
            rows += theorem_rows(view, delta=delta, epsilon=epsilon, rtol=rtol, wanted=wanted)
    event = sequence_event(sequence)
    instances: dict = {}
    for name in methods:
        if name in THEOREMS:
            continue
        skipped = _too_many_distinct(name, len(sequence)) if guard else None
        if skipped is not None:
            rows.append(skipped)
            continue
        row, acc = _accountant_row(name, event, delta=delta, epsilon=epsilon)
        rows.append(row)
        if acc is not None:
            instances[name] = acc
    return rows, instances
