"""Composition theorems: basic, advanced (DRV), Kairouz–Oh–Viswanath closed form and
optimal composition (KOV 2015 Thm 3.3 / Murtagh–Vadhan 2016), and :func:`compose`,
which evaluates every applicable bound for one sequence of mechanisms.

One concern per module: ``basic``, ``advanced``, ``optimal`` (the theorems), ``slack`` (the
δ̃ bookkeeping they share), ``spec`` (flags/spec file → events), ``generic`` (the (ε, δ) view
of known mechanisms and the theorem rows), ``compose`` (orchestration: theorem rows + the
registered accountants, sorting), ``methods`` (the methods and their rows), ``grid``
(``--steps-grid``), ``curves`` (privacy curves).

Submodules are imported lazily (no scipy at ``import dpcalc.composition``).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "basic_composition": "dpcalc.composition.basic",
    "drv_epsilon": "dpcalc.composition.advanced",
    "drv_delta": "dpcalc.composition.advanced",
    "kov_epsilon": "dpcalc.composition.advanced",
    "kov_delta": "dpcalc.composition.advanced",
    "optimal_epsilon": "dpcalc.composition.optimal",
    "optimal_delta": "dpcalc.composition.optimal",
    "homogeneous_epsilon": "dpcalc.composition.optimal",
    "homogeneous_delta": "dpcalc.composition.optimal",
    "compose": "dpcalc.composition.compose",
    "MechanismSpec": "dpcalc.composition.spec",
    "parse_spec": "dpcalc.composition.spec",
    "load_spec_file": "dpcalc.composition.spec",
    "privacy_curves": "dpcalc.composition.curves",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'dpcalc.composition' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
