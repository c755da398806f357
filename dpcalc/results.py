"""The one family of immutable result objects shared by every command, and their JSON form.

Every number dpcalc prints comes in a :class:`Result`: what produced it (an accountant, a
composition theorem or a mechanism calculator), whether it is a proven bound
(``certified``), whether the method applies at all (``applicable`` with a ``reason``), the
paper it comes from (``source``) and diagnostics (``details``). Three kinds share that base:

* :class:`AccountingResult` — one accountant on one mechanism history (``dpcalc epsilon``,
  ``delta``, ``sigma`` and the accountant rows of ``dpcalc compose``);
* :class:`MethodResult` — one composition theorem (the basic/advanced/kov/optimal rows of
  ``dpcalc compose``);
* :class:`MechanismResult` — one mechanism calculation (``laplace``, ``gaussian``, ...).

All are frozen: a result is never changed after it is made (:func:`dataclasses.replace`
makes a new one). One renderer (``dpcalc.cli.render``) shows them as a table or as the JSON
object of docs/design.md §5. JSON has no infinity and dpcalc never prints NaN: an unbounded
value becomes ``null`` with a ``reason`` in the same result.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Result", "AccountingResult", "MethodResult", "MechanismResult", "jsonable"]


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


class Result:
    """Base of every result: the fields and the JSON tail they share.

    Subclasses are frozen dataclasses with at least ``certified`` (True iff the privacy
    numbers are proven bounds), ``applicable`` (False when the method does not apply),
    ``reason`` (why not applicable or unbounded), ``source`` (paper and theorem) and
    ``details`` (diagnostics); they implement :meth:`_head`, the leading JSON keys.
    """

    __slots__ = ()
    #: attributes whose non-finite value gets an automatic ``reason`` ("epsilon is unbounded")
    _bounded: tuple[str, ...] = ()

    def _head(self) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def auto_reason(self) -> str | None:
        """``reason``, or "<name> is unbounded" for the first non-finite bounded value."""
        if self.reason is not None:  # type: ignore[attr-defined]
            return self.reason  # type: ignore[attr-defined]
        for key in self._bounded:
            val = getattr(self, key)
            if isinstance(val, float) and not math.isfinite(val):
                return f"{key} is unbounded"
        return None

    def to_json(self) -> dict:
        """The result as a docs/design.md §5 JSON object (non-finite numbers become null)."""
        out = self._head()
        # a row without a number certifies nothing
        out["certified"] = bool(self.certified and self.applicable)  # type: ignore[attr-defined]
        if not self.applicable:  # type: ignore[attr-defined]
            out["applicable"] = False
        reason = self.auto_reason()
        if reason is not None:
            out["reason"] = reason
        self._tail(out)
        out["details"] = dict(self.details)  # type: ignore[attr-defined]
        return jsonable(out)

    def _tail(self, out: dict[str, Any]) -> None:
        """Keys between ``reason`` and ``details`` (default: ``source`` when set)."""
        out["source"] = self.source  # type: ignore[attr-defined]


@dataclass(frozen=True)
class AccountingResult(Result):
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

    _bounded = ("epsilon", "delta", "noise_multiplier")

    def _head(self) -> dict[str, Any]:
        out: dict[str, Any] = {"accountant": self.accountant}
        if self.noise_multiplier is not None:
            out["noise_multiplier"] = self.noise_multiplier
        if self.noise_std is not None:
            out["noise_std"] = self.noise_std
        out["epsilon"] = self.epsilon
        out["delta"] = self.delta
        return out

    def _tail(self, out: dict[str, Any]) -> None:
        pass  # epsilon/delta/sigma JSON rows carry no source (tables show it)


@dataclass(frozen=True)
class MethodResult(Result):
    """One row of ``dpcalc compose``: a composition theorem or an accountant.

    Attributes:
        method: a composition method (``basic``, ``advanced``, ``kov``, ``optimal``) or a
            registered accountant name.
        epsilon, delta: the (ε, δ) guarantee (None when not applicable; ε = inf → null + reason).
        certified: True iff a proven upper bound.
        applicable: False when the method does not apply to this sequence (``reason`` says why).
        reason: why not applicable / unbounded.
        source: paper and theorem.
        details: diagnostics (lower bounds, per-step δ₀, exact/numeric, grid of steps, ...).
        accountant: True iff the row comes from a registered accountant (JSON then also
            carries ``"accountant": method``).
    """

    method: str
    epsilon: float | None
    delta: float | None
    certified: bool
    applicable: bool = True
    reason: str | None = None
    source: str = ""
    details: Mapping[str, Any] = field(default_factory=dict)
    accountant: bool = False

    _bounded = ("epsilon", "delta")

    def _head(self) -> dict[str, Any]:
        out: dict[str, Any] = {"method": self.method, "epsilon": self.epsilon, "delta": self.delta}
        return out

    def to_json(self) -> dict:
        out = super().to_json()
        if self.accountant:  # keep the documented key order: method, ..., certified, accountant
            tail = {k: out.pop(k) for k in list(out) if k not in ("method", "epsilon", "delta", "certified")}
            out["accountant"] = self.method
            out.update(tail)
        return out


@dataclass(frozen=True)
class MechanismResult(Result):
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

    def _head(self) -> dict[str, Any]:
        out: dict[str, Any] = {"method": self.method}
        out.update(self.values)
        return out

    def auto_reason(self) -> str | None:
        return self.reason  # calculators state their reasons explicitly
