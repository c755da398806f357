r"""Zero-concentrated differential privacy (zCDP) accountant.

Mathematics and sources
-----------------------
* ρ-zCDP: D_α(M(x) ‖ M(x')) ≤ αρ for every α > 1 (Bun & Steinke 2016, Def 1.1); ρ adds up
  under (adaptive) composition (Bun & Steinke 2016, Lemma 2.3).
* Gaussian mechanism with noise multiplier σ and sensitivity Δ: ρ = Δ²/(2σ²) (Bun &
  Steinke 2016, Prop 1.6). Δ = 1 under add/remove; Δ = 2 under replace-one, because
  dpcalc's noise multipliers and Laplace scales are relative to one record's contribution
  bound (the same convention as the ``rdp`` and ``pld`` accountants, tests/accounting/test_neighboring.py).
* ε-DP (Laplace with ε = Δ/b, or an (ε, 0)-DP guarantee) ⇒ (ε²/2)-zCDP (Bun & Steinke
  2016, Prop 1.4).
* ε-bounded range (an exponential mechanism, :class:`~dpcalc.events.ExponentialMechanismEvent`)
  ⇒ (ε²/8)-zCDP (Cesar & Rogers 2021, bounded range ⇒ zCDP). Proof: the loss L lies in an
  interval of width ε, so by Hoeffding's lemma ln E_P[e^{λ(L − E_P L)}] ≤ λ²ε²/8; λ = −1 with
  E_P[e^{−L}] = 1 gives KL = E_P L ≤ ε²/8, and λ = α − 1 gives
  (α − 1)·D_α = ln E_P[e^{(α−1)L}] ≤ (α − 1)ε²/8 + (α − 1)²ε²/8, i.e. D_α ≤ αε²/8. The ε is
  taken as given under either adjacency (the mechanism's stated guarantee).
* ρ-zCDP ⇒ (ε, δ)-DP by Canonne, Kamath, Steinke 2020, Prop 12 (both directions,
  :func:`dpcalc.mechanisms.conversions.zcdp_epsilon` / ``zcdp_delta``).

Not applicable: Poisson-sampled Gaussians (subsampling does not amplify zCDP: Bun &
Steinke 2016 §1; use ``rdp``) and (ε, δ) guarantees with δ > 0 (no zCDP bound).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from dpcalc import _validate as v
from dpcalc._numerics import round_up
from dpcalc.accounting._sampling import refuse_sampler
from dpcalc.accounting.additive import AdditiveAccountant
from dpcalc.accounting.base import additive_totals
from dpcalc.accounting.tuning import refuse_tuning
from dpcalc.errors import UnsupportedEventError
from dpcalc.events import (
    EpsilonDeltaEvent,
    Event,
    ExponentialMechanismEvent,
    GaussianEvent,
    LaplaceEvent,
    PoissonSampledEvent,
    flatten,
)
from dpcalc.mechanisms.conversions import zcdp_delta, zcdp_epsilon
from dpcalc.results import AccountingResult

__all__ = ["ZcdpAccountant", "rho_of_step"]

_BR_SOURCE = "Cesar & Rogers 2021 (ε-bounded range ⇒ ε²/8-zCDP)"
_SAMPLED_REASON = ("zCDP gives no useful bound for Poisson-sampled Gaussians "
                   "(subsampling does not amplify zCDP); see rdp")


def rho_of_step(step: Event, *, neighboring: str = "add-remove") -> float:
    """ρ of one run of a mechanism (Bun & Steinke 2016, Prop 1.4 and 1.6; Cesar & Rogers 2021
    for ε-bounded range).

    Args:
        step: a GaussianEvent, LaplaceEvent, EpsilonDeltaEvent with δ = 0 or
            ExponentialMechanismEvent (ρ = ε²/8) (a PoissonSampledEvent with sample rate 1 is
            its inner mechanism).
        neighboring: ``"add-remove"`` (sensitivity 1) or ``"replace"`` (sensitivity 2 for
            Gaussian and Laplace; an (ε, 0) guarantee is taken as given).

    Returns:
        ρ ≥ 0 (computed in a few floating-point operations; callers round the sum up).

    Raises:
        UnsupportedEventError: a Poisson-sampled mechanism (q < 1), δ > 0, or an unknown event.
    """
    sens = 2.0 if neighboring == "replace" else 1.0
    if isinstance(step, PoissonSampledEvent) and step.sample_rate == 1.0:
        step = step.event
    if isinstance(step, GaussianEvent):
        return sens * sens / (2.0 * step.noise_multiplier ** 2)
    if isinstance(step, LaplaceEvent):
        eps = sens / step.scale
        return eps * eps / 2.0
    if isinstance(step, EpsilonDeltaEvent):
        if step.delta > 0:
            raise UnsupportedEventError(f"an (ε, δ) guarantee with δ = {step.delta:g} > 0 has no zCDP bound")
        return step.epsilon ** 2 / 2.0
    if isinstance(step, ExponentialMechanismEvent):
        return step.epsilon ** 2 / 8.0
    if isinstance(step, PoissonSampledEvent):
        raise UnsupportedEventError(_SAMPLED_REASON)
    refuse_tuning(step, ZcdpAccountant.name)
    refuse_sampler(step, ZcdpAccountant.name)
    raise UnsupportedEventError(f"the zCDP accountant does not know the ρ of {type(step).__name__}")


class ZcdpAccountant(AdditiveAccountant):
    r"""zCDP accountant: ρ of Gaussian, Laplace and pure-DP steps added up (Bun & Steinke 2016),
    converted with Canonne, Kamath, Steinke 2020 Prop 12 (order refined).

    ``details`` carries ``rho`` (the composed ρ) and ``order`` (the α of the conversion).

    Args:
        neighboring: ``"add-remove"`` (default) or ``"replace"``.

    Raises:
        ParameterError: bad ``neighboring``.
    """

    name: ClassVar[str] = "zcdp"
    certified: ClassVar[bool] = True
    source: ClassVar[str] = "Bun & Steinke 2016, Prop 1.4/1.6, Lemma 2.3; Canonne, Kamath, Steinke 2020, Prop 12"
    short_source: ClassVar[str] = "BS16; CKS20"
    description: ClassVar[str] = "zero-concentrated DP (Gaussian, Laplace, pure DP; no subsampling)"

    def check(self, event: Event) -> None:
        for step, _ in flatten(event):
            rho_of_step(step, neighboring=self.neighboring)

    def _source(self, event: Event) -> str:
        """The class source, plus Cesar & Rogers 2021 when an ε-BR step is in the history."""
        if any(isinstance(s, ExponentialMechanismEvent) for s, _ in flatten(event)):
            return self.source + "; " + _BR_SOURCE
        return self.source

    def _step_rhos(self, steps: Sequence[Event]) -> np.ndarray:
        return np.array([rho_of_step(s, neighboring=self.neighboring) for s in steps], dtype=float)

    def rho(self, event: Event) -> float:
        """The composed ρ of ``event`` (Bun & Steinke 2016 Lemma 2.3), rounded up.

        The sum of n products count·ρ_i has a relative error below (n + 4)·u (each ρ_i is
        itself within 4 u); it is rounded up by 2(n + 4) u. An exact 0 stays 0.

        Raises:
            UnsupportedEventError: see :func:`rho_of_step`.
        """
        pairs = flatten(event)
        if not pairs:
            return 0.0
        rhos = self._step_rhos([s for s, _ in pairs])
        counts = np.array([c for _, c in pairs], dtype=float)
        return float(round_up(float(np.dot(counts, rhos)), 2 * (len(pairs) + 4)))

    def epsilon(self, event: Event, *, delta: float) -> AccountingResult:
        """ε at ``delta`` (CKS 2020 Prop 12 with ε(α) = αρ, minimised over α, rounded up).

        Raises:
            ParameterError: ``delta`` not in (0, 1).
            UnsupportedEventError: the event is not supported (the message says why).
        """
        d = v.open_unit("delta", delta)
        rho = self.rho(event)
        if rho == 0:
            return AccountingResult(self.name, 0.0, d, self.certified, details={"rho": 0.0}, source=self._source(event))
        eps, order = zcdp_epsilon(rho, d)
        e = float(eps[0])
        return AccountingResult(self.name, e, d, self.certified, details={"rho": rho, "order": float(order[0])},
                                reason=None if math.isfinite(e) else "epsilon is unbounded", source=self._source(event))

    def delta(self, event: Event, *, epsilon: float) -> AccountingResult:
        """δ at ``epsilon`` (CKS 2020 Prop 12 solved for δ, minimised over α, rounded up).

        Raises:
            ParameterError: ``epsilon`` negative or not finite.
            UnsupportedEventError: the event is not supported.
        """
        e = v.nonnegative("epsilon", epsilon)
        rho = self.rho(event)
        if rho == 0:
            return AccountingResult(self.name, e, 0.0, self.certified, details={"rho": 0.0}, source=self._source(event))
        d, order = zcdp_delta(rho, e)
        return AccountingResult(self.name, e, float(d[0]), self.certified,
                                details={"rho": rho, "order": float(order[0])}, source=self._source(event))

    # --- many numbers of compositions at once (dpcalc compose --steps-grid, AdditiveAccountant)
    def step_cost(self, step: Event) -> float:
        """One run's ρ: ρ adds up over compositions (Bun & Steinke 2016 Lemma 2.3)."""
        return float(self._step_rhos([step])[0])

    def composed_costs(self, steps: Sequence[Event], counts) -> np.ndarray:
        """The composed ρ of every row of ``counts``, rounded up: a dot product of n terms,
        2(n + 4) u covers its rounding (as :meth:`rho`)."""
        return round_up(additive_totals(counts, self._step_rhos(steps)), 2 * (len(steps) + 4))

    def epsilons_of_costs(self, costs: np.ndarray, delta: float) -> np.ndarray:
        """ε at δ of each composed ρ: the vectorised CKS conversion (α on the fixed grid of
        orders of :func:`~dpcalc.mechanisms.conversions.zcdp_epsilon`, not refined between
        them: a valid bound, slightly above the refined one)."""
        eps, _ = zcdp_epsilon(costs, delta, refine=False)
        return eps

    def deltas_of_costs(self, costs: np.ndarray, epsilon: float) -> np.ndarray:
        """δ at ε of each composed ρ (see :meth:`epsilons_of_costs`)."""
        d, _ = zcdp_delta(costs, epsilon, refine=False)
        return d

    def infeasible_hint(self, target_epsilon: float, *, delta: float) -> str:
        """Why a target ε is out of reach under zCDP."""
        return ("the composed ρ stays too large for this target even at the largest noise multiplier; "
                "raise epsilon or delta, take fewer steps, or use a tighter accountant (pld, rdp)")
