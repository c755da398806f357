"""dpcalc: differential-privacy accounting and mechanism calibration.

Importing dpcalc is cheap: it never imports torch, scipy.stats or matplotlib.
The public API is re-exported lazily from its modules: a name's module is imported on first
use. Type checkers see every name with its type (the ``TYPE_CHECKING`` imports below; the
package ships ``py.typed``); ``.ci/run`` checks the surface with strict mypy.

* errors: :class:`DpcalcError` and its subclasses;
* events (what a mechanism did): :mod:`dpcalc.events`; schedules: :mod:`dpcalc.schedule`;
* accountants and calibration: :mod:`dpcalc.accounting` (registry, the five accountants, σ
  for a target ε);
* composition theorems and :func:`compose`: :mod:`dpcalc.composition`;
* mechanism calculators (Laplace, Gaussian, exponential, randomized response, PATE votes):
  :mod:`dpcalc.mechanisms`;
* risk (trade-off curves, TPR bounds): :mod:`dpcalc.risk`; planning: :mod:`dpcalc.planning`;
  the privacy ledger: :mod:`dpcalc.ledger`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from dpcalc._version import __version__

if TYPE_CHECKING:
    from dpcalc.accounting.base import Accountant
    from dpcalc.accounting.calibrate import calibrate_dpsgd, calibrate_noise_multiplier
    from dpcalc.accounting.gdp import GdpAccountant
    from dpcalc.accounting.moments import MomentsAccountant
    from dpcalc.accounting.pld import PldAccountant
    from dpcalc.accounting.rdp import RdpAccountant
    from dpcalc.accounting.registry import available, get_accountant, register, unregister
    from dpcalc.accounting.zcdp import ZcdpAccountant
    from dpcalc.composition.advanced import drv_delta, drv_epsilon, kov_delta, kov_epsilon
    from dpcalc.composition.basic import basic_composition
    from dpcalc.composition.bounded_range import br_nonadaptive_delta, br_nonadaptive_epsilon
    from dpcalc.composition.compose import ComposeReport, compose
    from dpcalc.composition.optimal import (
        homogeneous_delta,
        homogeneous_epsilon,
        optimal_delta,
        optimal_epsilon,
    )
    from dpcalc.composition.spec import MechanismSpec
    from dpcalc.errors import DpcalcError, InfeasibleError, ParameterError, UnsupportedEventError
    from dpcalc.events import (
        ComposedEvent,
        EpochSampledEvent,
        EpsilonDeltaEvent,
        Event,
        ExponentialMechanismEvent,
        FixedSizeSampledEvent,
        GaussianEvent,
        GNMaxEvent,
        LaplaceEvent,
        LNMaxEvent,
        PateThresholdEvent,
        PateVotesEvent,
        PoissonSampledEvent,
        SelfComposedEvent,
        TruncatedPoissonSampledEvent,
        TuningEvent,
        children,
        dpsgd_event,
        flatten,
        sampled_step,
        walk,
    )
    from dpcalc.ledger import BudgetExceededError, Ledger, LedgerFileError, open_ledger
    from dpcalc.mechanisms.exponential import exponential_mechanism, exponential_probabilities
    from dpcalc.mechanisms.gaussian import (
        analytic_noise_std,
        calibrate_gaussian,
        classical_noise_std,
        gaussian_accuracy,
        gaussian_delta,
        gaussian_epsilon,
        gaussian_epsilon_for_accuracy,
    )
    from dpcalc.mechanisms.laplace import (
        calibrate_laplace,
        laplace_accuracy,
        laplace_epsilon_for_accuracy,
        laplace_scale,
    )
    from dpcalc.mechanisms.pate import pate_votes_event
    from dpcalc.mechanisms.randomized_response import randomized_response, rr_probabilities
    from dpcalc.planning import (
        Plan,
        PlanCell,
        max_batch_size_for_sigma,
        max_steps_for_sigma,
        pareto_front,
        plan_grid,
        total_amount_of_noise,
    )
    from dpcalc.results import AccountingResult, MechanismResult, MethodResult
    from dpcalc.risk import RiskCurve, curve_from_accountant, gdp_curve, pair_curve, tpr_bound_at
    from dpcalc.schedule import Schedule, resolve_schedule

#: module → the public names it provides (imported on first use). Keep in step with the
#: ``TYPE_CHECKING`` imports above and ``__all__`` below (tests/test_public_api.py checks all three).
_MODULES: dict[str, tuple[str, ...]] = {
    "dpcalc.errors": ("DpcalcError", "ParameterError", "InfeasibleError", "UnsupportedEventError"),
    "dpcalc.events": (
        "Event", "GaussianEvent", "LaplaceEvent", "EpsilonDeltaEvent", "ExponentialMechanismEvent",
        "PoissonSampledEvent", "FixedSizeSampledEvent", "TruncatedPoissonSampledEvent",
        "EpochSampledEvent", "SelfComposedEvent", "ComposedEvent", "TuningEvent", "LNMaxEvent",
        "GNMaxEvent", "PateThresholdEvent", "PateVotesEvent", "dpsgd_event", "sampled_step",
        "flatten", "children", "walk",
    ),
    "dpcalc.schedule": ("Schedule", "resolve_schedule"),
    "dpcalc.results": ("AccountingResult", "MechanismResult", "MethodResult"),
    "dpcalc.accounting.base": ("Accountant",),
    "dpcalc.accounting.registry": ("get_accountant", "available", "register", "unregister"),
    "dpcalc.accounting.pld": ("PldAccountant",),
    "dpcalc.accounting.rdp": ("RdpAccountant",),
    "dpcalc.accounting.zcdp": ("ZcdpAccountant",),
    "dpcalc.accounting.moments": ("MomentsAccountant",),
    "dpcalc.accounting.gdp": ("GdpAccountant",),
    "dpcalc.accounting.calibrate": ("calibrate_noise_multiplier", "calibrate_dpsgd"),
    "dpcalc.composition.compose": ("compose", "ComposeReport"),
    "dpcalc.composition.spec": ("MechanismSpec",),
    "dpcalc.composition.basic": ("basic_composition",),
    "dpcalc.composition.advanced": ("drv_epsilon", "drv_delta", "kov_epsilon", "kov_delta"),
    "dpcalc.composition.optimal": ("optimal_epsilon", "optimal_delta", "homogeneous_epsilon",
                                   "homogeneous_delta"),
    "dpcalc.composition.bounded_range": ("br_nonadaptive_epsilon", "br_nonadaptive_delta"),
    "dpcalc.mechanisms.laplace": ("laplace_scale", "laplace_accuracy", "calibrate_laplace",
                                  "laplace_epsilon_for_accuracy"),
    "dpcalc.mechanisms.gaussian": ("gaussian_delta", "gaussian_epsilon", "analytic_noise_std",
                                   "classical_noise_std", "calibrate_gaussian", "gaussian_accuracy",
                                   "gaussian_epsilon_for_accuracy"),
    "dpcalc.mechanisms.exponential": ("exponential_probabilities", "exponential_mechanism"),
    "dpcalc.mechanisms.randomized_response": ("rr_probabilities", "randomized_response"),
    "dpcalc.mechanisms.pate": ("pate_votes_event",),
    "dpcalc.risk": ("RiskCurve", "curve_from_accountant", "gdp_curve", "pair_curve", "tpr_bound_at"),
    "dpcalc.planning": ("Plan", "PlanCell", "plan_grid", "max_steps_for_sigma", "max_batch_size_for_sigma",
                        "pareto_front", "total_amount_of_noise"),
    "dpcalc.ledger": ("Ledger", "open_ledger", "BudgetExceededError", "LedgerFileError"),
}

#: public name → its module
_EXPORTS: dict[str, str] = {name: module for module, names in _MODULES.items() for name in names}

# A literal list, so that type checkers know what is exported.
__all__ = [
    "__version__",
    # errors
    "DpcalcError", "ParameterError", "InfeasibleError", "UnsupportedEventError",
    # events
    "Event", "GaussianEvent", "LaplaceEvent", "EpsilonDeltaEvent", "ExponentialMechanismEvent",
    "PoissonSampledEvent", "FixedSizeSampledEvent", "TruncatedPoissonSampledEvent", "EpochSampledEvent",
    "SelfComposedEvent", "ComposedEvent", "TuningEvent", "LNMaxEvent", "GNMaxEvent", "PateThresholdEvent",
    "PateVotesEvent", "dpsgd_event", "sampled_step", "flatten", "children", "walk",
    # schedule
    "Schedule", "resolve_schedule",
    # results
    "AccountingResult", "MechanismResult", "MethodResult",
    # accountants
    "Accountant", "get_accountant", "available", "register", "unregister",
    "PldAccountant", "RdpAccountant", "ZcdpAccountant", "MomentsAccountant", "GdpAccountant",
    # calibration
    "calibrate_noise_multiplier", "calibrate_dpsgd",
    # composition
    "compose", "ComposeReport", "MechanismSpec", "basic_composition", "drv_epsilon", "drv_delta",
    "kov_epsilon", "kov_delta", "optimal_epsilon", "optimal_delta", "homogeneous_epsilon",
    "homogeneous_delta", "br_nonadaptive_epsilon", "br_nonadaptive_delta",
    # mechanisms
    "laplace_scale", "laplace_accuracy", "calibrate_laplace", "laplace_epsilon_for_accuracy",
    "gaussian_delta", "gaussian_epsilon", "analytic_noise_std", "classical_noise_std",
    "calibrate_gaussian", "gaussian_accuracy", "gaussian_epsilon_for_accuracy",
    "exponential_probabilities", "exponential_mechanism", "rr_probabilities", "randomized_response",
    "pate_votes_event",
    # risk
    "RiskCurve", "curve_from_accountant", "gdp_curve", "pair_curve", "tpr_bound_at",
    # planning
    "Plan", "PlanCell", "plan_grid", "max_steps_for_sigma", "max_batch_size_for_sigma", "pareto_front",
    "total_amount_of_noise",
    # ledger
    "Ledger", "open_ledger", "BudgetExceededError", "LedgerFileError",
]

if not TYPE_CHECKING:  # hidden from type checkers: an unknown name is an error there, not Any

    def __getattr__(name: str) -> Any:
        if name in _EXPORTS:
            return getattr(importlib.import_module(_EXPORTS[name]), name)
        raise AttributeError(f"module 'dpcalc' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
