"""The result object shared by the mechanism calculators."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dpcalc.results import jsonable

__all__ = ["MechanismResult"]


@dataclass(frozen=True)
class MechanismResult:
    """What one mechanism calculation says (one row of a table, one JSON result).

    Attributes:
        method: what produced the numbers (``laplace``, ``analytic``, ``classical``,
            ``exponential``, ``rr``, ``group``, ...; docs/design.md §5).
        values: the headline numbers under glossary names (``epsilon``, ``delta``,
            ``scale``, ``noise_std``, ``noise_multiplier``, ``p_truth``, ...), in display order.
        certified: True iff the privacy numbers are proven bounds (never optimistic).
        source: paper and theorem of the formula.
        applicable: False when the method does not apply (``reason`` says why).
        reason: why the method does not apply or a value is missing.
        details: further diagnostics.
    """

    method: str
    values: Mapping[str, Any]
    certified: bool = True
    source: str = ""
    applicable: bool = True
    reason: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def get(self, key: str, default: Any = None) -> Any:
        """A headline value, or a detail, or ``default``."""
        if key in self.values:
            return self.values[key]
        return self.details.get(key, default)

    def to_json(self) -> dict:
        """The result as a docs/design.md §5 JSON object (non-finite numbers become null)."""
        out: dict[str, Any] = {"method": self.method}
        out.update(self.values)
        out["certified"] = self.certified
        if not self.applicable:
            out["applicable"] = False
        if self.reason is not None:
            out["reason"] = self.reason
        out["source"] = self.source
        out["details"] = dict(self.details)
        return jsonable(out)
