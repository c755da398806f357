r"""The moments accountant of Abadi et al. 2016 (Thm 2), on top of the RDP computation.

The log-moment of the privacy loss at integer λ is α_M(λ) = λ·ε_RDP(λ + 1) for one step
(the RDP curve of :mod:`dpcalc.accounting.rdp` at integer order λ + 1, Mironov 2017
Prop. 10 / Mironov, Talwar, Zhang 2019 §3.3 for the sampled Gaussian), and log-moments
add up over steps (Abadi et al. 2016, Thm 2.1). The tail bound (Thm 2.2) gives

.. math:: δ = \min_λ \exp(α(λ) − λε), \qquad ε = \min_λ (α(λ) + \ln(1/δ))/λ.

This is the "old" conversion (equal to Mironov 2017 Prop. 3 at integer orders); it is
looser than the ``rdp`` accountant and kept to reproduce published moments-accountant
numbers (ε ≈ 1.26 for q = 0.01, σ = 4, T = 10⁴, δ = 10⁻⁵; Abadi et al. 2016 §5).
"""

from __future__ import annotations

import math

import numpy as np

from dpcalc import _validate as v
from dpcalc.accounting.additive import AdditiveAccountant
from dpcalc.accounting.base import data_dependent_label
from dpcalc.accounting.rdp import check_event, rdp_of_event
from dpcalc.accounting.tuning import refuse_tuning
from dpcalc.events import Event
from dpcalc.results import AccountingResult

__all__ = ["MomentsAccountant", "DEFAULT_MAX_LAMBDA"]

#: default largest moment λ (orders λ + 1 up to 256, as the ``rdp`` grid)
DEFAULT_MAX_LAMBDA = 255


class MomentsAccountant(AdditiveAccountant):
    r"""Moments accountant (Abadi et al. 2016, Thm 2) at integer moments λ = 1 … ``max_lambda``.

    ``details`` carries ``lambda`` (the optimal moment) and ``order`` = λ + 1 (the Rényi
    order), plus ``warnings`` when λ is the largest one searched.

    Args:
        neighboring: ``"add-remove"`` (default) or ``"replace"`` (sampled mechanisms are
            then unsupported).
        max_lambda: the largest moment λ searched (default 255, i.e. orders up to 256).

    Raises:
        ParameterError: bad ``neighboring`` or ``max_lambda``.
    """

    name = "ma"
    certified = True
    source = "Abadi et al. 2016, Thm 2"
    short_source = "Abadi+16 Thm 2"
    description = "moments accountant (integer moments, Abadi et al. 2016 tail bound)"

    def __init__(self, *, neighboring: str = "add-remove",
                 max_lambda: int = DEFAULT_MAX_LAMBDA) -> None:
        super().__init__(neighboring=neighboring)
        self.max_lambda = v.count("max_lambda", max_lambda, minimum=1)
        self.lambdas = np.arange(1, self.max_lambda + 1, dtype=float)

    def check(self, event: Event) -> None:
        refuse_tuning(event, self.name)  # the rdp accountant has the repeat-and-select bound
        check_event(event, neighboring=self.neighboring)

    def log_moments(self, event: Event) -> np.ndarray:
        """α(λ) = λ·ε_RDP(λ + 1) of the whole history, shape (max_lambda,)."""
        refuse_tuning(event, self.name)
        rdp = rdp_of_event(event, self.lambdas + 1.0, neighboring=self.neighboring)
        return self.lambdas * rdp

    def rdp_curve(self, event: Event) -> tuple[np.ndarray, np.ndarray]:
        """``(orders, rdp)``: the Rényi orders λ + 1 of the moments searched, shape
        (max_lambda,), and the composed RDP curve there, α(λ)/λ, shape (max_lambda,).

        Raises:
            UnsupportedEventError: the event is not supported.
        """
        refuse_tuning(event, self.name)
        return self.lambdas + 1.0, rdp_of_event(event, self.lambdas + 1.0, neighboring=self.neighboring)

    def _warnings(self, i: int) -> list[str]:
        if i == self.lambdas.size - 1 and self.lambdas.size > 1:
            return [f"the optimal moment lambda={int(self.lambdas[i])} is the largest searched; "
                    "a larger max_lambda might give a tighter bound"]
        return []

    def epsilon(self, event: Event, *, delta: float) -> AccountingResult:
        """ε = min_λ (α(λ) + ln(1/δ))/λ (Abadi et al. 2016, Thm 2.2), ≥ 0.

        Raises:
            ParameterError: ``delta`` not in (0, 1).
            UnsupportedEventError: the event is not supported (the message says why).
        """
        d = v.open_unit("delta", delta)
        self.check(event)
        moments = self.log_moments(event)
        eps = (moments - math.log(d)) / self.lambdas
        i = int(np.argmin(eps))
        # a history with no privacy cost (e.g. zero steps) is 0-DP outright
        e = 0.0 if not np.any(moments) else max(float(eps[i]), 0.0)
        details: dict = {"lambda": int(self.lambdas[i]), "order": float(self.lambdas[i] + 1)}
        w = self._warnings(i)
        if w:
            details["warnings"] = w
        return data_dependent_label(AccountingResult(
            self.name, e, d, self.certified, details=details,
            reason=None if math.isfinite(e) else "no finite log-moment", source=self.source), event)

    def delta(self, event: Event, *, epsilon: float) -> AccountingResult:
        """δ = min(1, min_λ exp(α(λ) − λε)) (Abadi et al. 2016, Thm 2.2).

        Raises:
            ParameterError: ``epsilon`` negative or not finite.
            UnsupportedEventError: the event is not supported.
        """
        e = v.nonnegative("epsilon", epsilon)
        self.check(event)
        moments = self.log_moments(event)
        log_d = moments - self.lambdas * e if np.any(moments) else np.full_like(moments, -np.inf)
        i = int(np.argmin(log_d))
        details: dict = {"lambda": int(self.lambdas[i]), "order": float(self.lambdas[i] + 1)}
        w = self._warnings(i)
        if w:
            details["warnings"] = w
        return data_dependent_label(AccountingResult(self.name, e, math.exp(min(float(log_d[i]), 0.0)),
                                                     self.certified, details=details, source=self.source),
                                    event)

    def infeasible_hint(self, target_epsilon: float, *, delta: float) -> str:
        """Why ``target_epsilon`` at ``delta`` may be out of reach: ε ≥ ln(1/δ)/max_lambda
        even with zero cost (Abadi et al. 2016, Thm 2.2 at the largest moment)."""
        d = v.open_unit("delta", delta)
        lam = self.max_lambda
        floor = math.log(1 / d) / lam
        advice = "raise epsilon or delta, take fewer steps, or use a tighter accountant (rdp, pld)"
        if target_epsilon <= floor:
            return (f"with moments up to lambda={lam} the moments accountant cannot certify "
                    f"epsilon below ln(1/delta)/{lam} = {floor:.4g} at delta={d:g} "
                    f"(target {target_epsilon:g}); {advice}")
        return (f"the log-moments of this many compositions stay too large even at the largest "
                f"noise multiplier (with moments up to lambda={lam} the tail bound alone costs "
                f"ln(1/delta)/{lam} = {floor:.4g} at delta={d:g}); {advice}")

    # --- many numbers of compositions at once (dpcalc compose --steps-grid, AdditiveAccountant)
    def step_cost(self, step: Event) -> np.ndarray:
        """One run's log-moments α(λ), shape (max_lambda,): they add up over compositions
        (Abadi et al. 2016, Thm 2.1), so the grid gives the numbers of :meth:`epsilon` at every row."""
        return self.log_moments(step)

    def epsilons_of_costs(self, costs: np.ndarray, delta: float) -> np.ndarray:
        """ε of each row of composed log-moments at δ (the tail bound, Thm 2.2)."""
        vals = np.maximum(((costs - math.log(delta)) / self.lambdas).min(axis=1), 0.0)
        return np.where(np.any(costs != 0, axis=1), vals, 0.0)

    def deltas_of_costs(self, costs: np.ndarray, epsilon: float) -> np.ndarray:
        """δ of each row of composed log-moments at ε (the tail bound, Thm 2.2)."""
        vals = np.exp(np.minimum((costs - self.lambdas * epsilon).min(axis=1), 0.0))
        return np.where(np.any(costs != 0, axis=1), vals, 0.0)
