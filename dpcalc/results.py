"""Small immutable result objects shared by every command, and their JSON form.

One renderer (``dpcalc.cli.render``) shows them as a table or as the JSON object
of docs/design.md §5. JSON has no infinity and dpcalc never prints NaN: an unbounded
value becomes ``null`` with a ``reason`` in the same result.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["AccountingResult", "jsonable"]


def jsonable(value: Any) -> Any:
    """Convert numpy scalars/arrays, tuples and non-finite floats to plain JSON values.

    Non-finite floats become ``None`` (callers add a ``reason``).
    """
    if isinstance(value, Mapping):
        return {str(k): jsonable(x) for k, x in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(x) for x in value]
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):  # numpy scalar / array
        return jsonable(value.tolist())
    if isinstance(value, bool) or value is None or isinstance(value, (str, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return value


@dataclass(frozen=True)
class AccountingResult:
    """What one accountant says about one mechanism history.

    Attributes:
        accountant: registry name (``rdp``, ``ma``, ``pld``, ...).
        epsilon: ε (an upper bound when ``certified``); ``inf`` when unbounded.
        delta: δ.
        certified: True iff ``epsilon``/``delta`` is a proven upper bound.
        details: accountant-specific diagnostics (optimal ``order``, ``epsilon_lower``, ...).
        noise_multiplier: σ, for calibration results.
        noise_std: σ·C, the absolute noise std for a given sensitivity/clipping norm C.
        applicable: False when the accountant does not apply (then ``reason`` says why).
        reason: why the result is missing or unbounded.
        source: the paper and theorem the number comes from (tables show it).
    """

    accountant: str
    epsilon: float | None
    delta: float | None
    certified: bool
    details: Mapping[str, Any] = field(default_factory=dict)
    noise_multiplier: float | None = None
    noise_std: float | None = None
    applicable: bool = True
    reason: str | None = None
    source: str = ""

    def to_json(self) -> dict:
        """The result as a docs/design.md §5 JSON object."""
        out: dict[str, Any] = {"accountant": self.accountant}
        if self.noise_multiplier is not None:
            out["noise_multiplier"] = self.noise_multiplier
        if self.noise_std is not None:
            out["noise_std"] = self.noise_std
        out["epsilon"] = self.epsilon
        out["delta"] = self.delta
        out["certified"] = self.certified
        if not self.applicable:
            out["applicable"] = False
        reason = self.reason
        if reason is None:
            for key in ("epsilon", "delta", "noise_multiplier"):
                val = getattr(self, key)
                if isinstance(val, float) and not math.isfinite(val):
                    reason = f"{key} is unbounded"
        if reason is not None:
            out["reason"] = reason
        out["details"] = dict(self.details)
        return jsonable(out)
