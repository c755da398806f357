"""dpcalc: differential-privacy accounting and mechanism calibration.

Importing dpcalc is cheap: it never imports torch, scipy.stats or matplotlib.
The public API is re-exported lazily from its modules.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "ParameterError": "dpcalc.errors",
    "InfeasibleError": "dpcalc.errors",
    "UnsupportedEventError": "dpcalc.errors",
    "GaussianEvent": "dpcalc.events",
    "LaplaceEvent": "dpcalc.events",
    "EpsilonDeltaEvent": "dpcalc.events",
    "PoissonSampledEvent": "dpcalc.events",
    "SelfComposedEvent": "dpcalc.events",
    "ComposedEvent": "dpcalc.events",
    "dpsgd_event": "dpcalc.events",
    "resolve_schedule": "dpcalc.schedule",
    "AccountingResult": "dpcalc.results",
    "get_accountant": "dpcalc.accounting.registry",
    "calibrate_noise_multiplier": "dpcalc.accounting.calibrate",
    "calibrate_dpsgd": "dpcalc.accounting.calibrate",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'dpcalc' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
