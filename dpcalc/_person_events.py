r"""Events of privacy per person (issue 28): the mixture-of-Gaussians mechanism and a group of
records added or removed together. :mod:`dpcalc.events` re-exports both; events describe, the
accountants decide what they can account for (docs/design.md §2.2).

* :class:`MixtureOfGaussiansEvent` — on one dataset N(0, σ²), on its neighbour
  Σ_i p_i N(c_i, σ²) (Choquette-Choo, Ganesh, Steinke, Thakurta 2023, "Privacy amplification
  for matrix mechanisms", arXiv:2310.15526; the fields are those of dp_accounting's
  ``MixtureOfGaussiansDpEvent``, which is accepted as a name:
  :data:`MixtureOfGaussiansDpEvent`). Both orderings are accounted (add and remove).
* :class:`GroupEvent` — ``event`` as seen by a group of ``group_size`` records that join or
  leave the dataset together (group privacy). A Poisson-sampled Gaussian step becomes the
  binomial mixture of Gaussians of :mod:`dpcalc.accounting.group` (Ganesh 2024).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dpcalc import _validate as v
from dpcalc._events_base import Event
from dpcalc.errors import ParameterError

__all__ = ["MixtureOfGaussiansEvent", "MixtureOfGaussiansDpEvent", "GroupEvent"]

#: how far the probabilities may sum from 1 (they are read as given; the accountants take the
#: pessimistic reading of the difference, dpcalc/accounting/group.py)
PROBABILITY_SUM_TOLERANCE = 1e-9


@dataclass(frozen=True)
class MixtureOfGaussiansEvent(Event):
    r"""The mixture-of-Gaussians (MoG) mechanism: N(0, σ²) on D, Σ_i p_i N(c_i, σ²) on D′.

    A vector-valued MoG whose shift vectors have norms ≤ c_i is dominated (both orderings) by
    this scalar one (Choquette-Choo, Ganesh, Steinke, Thakurta 2023, arXiv:2310.15526,
    Cor. 4.7), so ``sensitivities`` are norms.

    Args:
        standard_deviation: σ, the std of the Gaussian noise, in the units of the
            sensitivities; > 0.
        sensitivities: the shifts c_i ≥ 0 (finite), one per component; at least one of
            positive probability is > 0.
        sampling_probs: p_i ≥ 0, the same length, summing to 1 (within
            :data:`PROBABILITY_SUM_TOLERANCE`).

    Raises:
        ParameterError: a field outside its range.
    """

    standard_deviation: float
    sensitivities: tuple[float, ...]
    sampling_probs: tuple[float, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "standard_deviation",
                           v.positive("standard_deviation", self.standard_deviation))
        try:
            c = tuple(float(x) for x in self.sensitivities)
            p = tuple(float(x) for x in self.sampling_probs)
        except (TypeError, ValueError):
            raise ParameterError("sensitivities/sampling_probs", "sequences of numbers",
                                 (self.sensitivities, self.sampling_probs)) from None
        if not c or len(c) != len(p):
            raise ParameterError("sampling_probs", f"one probability per sensitivity ({len(c)})", len(p))
        for x in c:
            if not (math.isfinite(x) and x >= 0):
                raise ParameterError("sensitivities", "finite numbers ≥ 0", x)
        for x in p:
            if not (math.isfinite(x) and 0 <= x <= 1):
                raise ParameterError("sampling_probs", "numbers in [0, 1]", x)
        total = math.fsum(p)
        if abs(total - 1.0) > PROBABILITY_SUM_TOLERANCE:
            raise ParameterError("sampling_probs", "probabilities summing to 1", total)
        if not any(ci > 0 and pi > 0 for ci, pi in zip(c, p, strict=True)):
            raise ParameterError("sensitivities", "at least one > 0 with a probability > 0", c)
        object.__setattr__(self, "sensitivities", c)
        object.__setattr__(self, "sampling_probs", p)


#: dp_accounting's name of the same event (a user porting code types it)
MixtureOfGaussiansDpEvent = MixtureOfGaussiansEvent


@dataclass(frozen=True)
class GroupEvent(Event):
    r"""``event`` as seen by a group of ``group_size`` records added or removed together.

    The neighbouring datasets differ in k = ``group_size`` records (of one person, say). For
    the Gaussian mechanism (sensitivity k·Δ) this is the Gaussian with noise multiplier σ/k;
    for a Poisson-sampled Gaussian it is the binomial mixture of Gaussians
    (:mod:`dpcalc.accounting.group`, Ganesh 2024). :func:`dpcalc.events.flatten` replaces a
    group of one by ``event`` and a group of an unsampled Gaussian or Laplace mechanism by the
    mechanism at k times the sensitivity (both exact).

    Args:
        group_size: k ≥ 1, the number of records of the group.
        event: the mechanism one record sees (a dpcalc Event).

    Raises:
        ParameterError: k < 1 or not whole, or ``event`` not an Event.
    """

    group_size: int
    event: Event

    def __post_init__(self) -> None:
        object.__setattr__(self, "group_size", v.count("group_size", self.group_size, minimum=1))
        if not isinstance(self.event, Event):
            raise ParameterError("event", "a dpcalc Event", self.event)
