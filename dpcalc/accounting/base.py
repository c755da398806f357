"""The one accountant interface (docs/contributing.md §2).

An accountant takes a mechanism history (a :class:`dpcalc.events.Event`) and
answers "ε at δ" or "δ at ε". It is stateless: the same history always gives the
same answer, which is what calibration by root finding needs.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from dpcalc import _validate as v
from dpcalc.errors import UnsupportedEventError
from dpcalc.events import Event
from dpcalc.results import AccountingResult

__all__ = ["Accountant", "NEIGHBORING_RELATIONS"]

#: ``add-remove``: neighbours differ by adding or removing one record (Opacus, TF
#: Privacy, dp_accounting default). ``replace``: neighbours differ in one record's value.
NEIGHBORING_RELATIONS = ("add-remove", "replace")


class Accountant(ABC):
    """Base class: subclasses set ``name``, ``certified``, ``source`` and implement
    :meth:`epsilon` and :meth:`delta`.

    Args:
        neighboring: the adjacency relation, ``"add-remove"`` (default) or ``"replace"``.
    """

    name: ClassVar[str]
    certified: ClassVar[bool] = True
    #: short citation shown in tables
    source: ClassVar[str] = ""
    #: one-line description for --help and the README
    description: ClassVar[str] = ""

    def __init__(self, *, neighboring: str = "add-remove") -> None:
        self.neighboring = v.choice("neighboring", neighboring, NEIGHBORING_RELATIONS)

    @abstractmethod
    def epsilon(self, event: Event, *, delta: float) -> AccountingResult:
        """The smallest ε this accountant certifies for ``event`` at ``delta``.

        Raises:
            ParameterError: ``delta`` not in (0, 1).
            UnsupportedEventError: the accountant cannot handle ``event``.
        """

    @abstractmethod
    def delta(self, event: Event, *, epsilon: float) -> AccountingResult:
        """The smallest δ this accountant certifies for ``event`` at ``epsilon`` (ε ≥ 0).

        Raises:
            ParameterError: ``epsilon`` negative or not finite.
            UnsupportedEventError: the accountant cannot handle ``event``.
        """

    @abstractmethod
    def check(self, event: Event) -> None:
        """Raise :class:`UnsupportedEventError` (with the reason) if ``event`` is not supported."""

    def supports(self, event: Event) -> bool:
        """True iff :meth:`check` passes."""
        try:
            self.check(event)
        except UnsupportedEventError:
            return False
        return True

    def not_applicable(self, reason: str) -> AccountingResult:
        """A result row saying this accountant does not apply, and why."""
        return AccountingResult(self.name, None, None, self.certified, applicable=False,
                                reason=reason, source=self.source)
