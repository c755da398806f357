"""The one steps-grid implementation for accountants whose privacy quantity adds up over
compositions (RDP curves, log-moments, zCDP's ρ, GDP's μ²).

``dpcalc compose --steps-grid`` asks for ε (or δ) at every row of a count matrix (row i runs
``steps[j]`` ``counts[i, j]`` times). When the quantity of a history is the sum of its steps'
quantities (Mironov 2017 Prop 1 for RDP; Abadi et al. 2016 Thm 2.1 for log-moments; Bun &
Steinke 2016 Lemma 2.3 for ρ; Dong, Roth, Su 2019 Cor 3.3 for μ²), each step's quantity is
computed once and the grid is one matrix product (:func:`~dpcalc.accounting.base.additive_totals`)
followed by the accountant's own conversion, vectorised over rows. An accountant subclasses
:class:`AdditiveAccountant` and supplies the two pieces: :meth:`~AdditiveAccountant.step_cost`
and the conversions :meth:`~AdditiveAccountant.epsilons_of_costs` /
:meth:`~AdditiveAccountant.deltas_of_costs`.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from dpcalc import _validate as v
from dpcalc.accounting.base import Accountant, GridResult, additive_totals
from dpcalc.events import Event

__all__ = ["AdditiveAccountant"]


class AdditiveAccountant(Accountant):
    """An accountant whose per-step quantity ("cost") adds up over compositions; its
    :meth:`epsilon_grid` and :meth:`delta_grid` are one vectorised pass over the grid.

    Subclasses implement :meth:`step_cost`, :meth:`epsilons_of_costs` and
    :meth:`deltas_of_costs` (and may override :meth:`composed_costs`, e.g. to round the sums up).
    """

    #: the grid below is one vectorised pass (the capability declared in base.Accountant)
    vectorised_grid: ClassVar[bool] = True
    #: the :class:`~dpcalc.accounting.base.GridResult` note of a grid (None: the grid gives the
    #: numbers :meth:`epsilon`/:meth:`delta` give at each row)
    grid_note: ClassVar[str | None] = None

    @abstractmethod
    def step_cost(self, step: Event) -> np.ndarray:
        """The additive quantity of one run of ``step``: a float or an array of shape (k,)
        (e.g. an RDP curve at this accountant's orders).

        Raises:
            UnsupportedEventError: ``step`` is not supported.
        """

    def composed_costs(self, steps: Sequence[Event], counts) -> np.ndarray:
        """The quantity of every row of ``counts``: ``counts @ [step_cost(s) for s in steps]``,
        shape (m,) or (m, k).

        Raises:
            UnsupportedEventError: a step is not supported.
        """
        return additive_totals(counts, [self.step_cost(s) for s in steps])

    @abstractmethod
    def epsilons_of_costs(self, costs: np.ndarray, delta: float) -> np.ndarray:
        """ε at ``delta`` (validated, in (0, 1)) of each row of :meth:`composed_costs`, shape (m,)."""

    @abstractmethod
    def deltas_of_costs(self, costs: np.ndarray, epsilon: float) -> np.ndarray:
        """δ at ``epsilon`` (validated, ≥ 0) of each row of :meth:`composed_costs`, shape (m,)."""

    def epsilon_grid(self, steps: Sequence[Event], counts, *, delta: float) -> GridResult:
        """ε at ``delta`` for every row of ``counts`` in one pass (module docstring).

        Args:
            steps: one-run mechanisms, length n.
            counts: integer array of shape (m, n), entries ≥ 0.
            delta: δ in (0, 1).

        Returns:
            :class:`~dpcalc.accounting.base.GridResult` at every row, with :attr:`grid_note`.

        Raises:
            ParameterError: bad ``delta``.
            UnsupportedEventError: a step is not supported.
        """
        d = v.open_unit("delta", delta)
        return GridResult.every_row(self.epsilons_of_costs(self.composed_costs(steps, counts), d),
                                    self.grid_note)

    def delta_grid(self, steps: Sequence[Event], counts, *, epsilon: float) -> GridResult:
        """δ at ``epsilon`` for every row of ``counts`` in one pass (see :meth:`epsilon_grid`).

        Raises:
            ParameterError: ``epsilon`` negative or not finite.
            UnsupportedEventError: a step is not supported.
        """
        e = v.nonnegative("epsilon", epsilon)
        return GridResult.every_row(self.deltas_of_costs(self.composed_costs(steps, counts), e),
                                    self.grid_note)
