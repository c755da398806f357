"""What an ε means: trade-off curves, membership-inference and reconstruction bounds from any
accounting result (:mod:`dpcalc.risk.curve`, :mod:`dpcalc.risk.tradeoff`), and empirical
privacy audits (:mod:`dpcalc.risk.audit`).

Layer: imports accounting (public API), composition (public API), mechanisms, events,
results, _validate and _numerics; never the CLI, click, rich or torch.
"""

from __future__ import annotations

from dpcalc.risk.curve import (
    DEFAULT_FPRS,
    RISK_FPR,
    RiskCurve,
    curve_from_accountant,
    gdp_curve,
    pair_curve,
    tpr_bound_at,
)

__all__ = ["RiskCurve", "curve_from_accountant", "gdp_curve", "pair_curve", "tpr_bound_at", "DEFAULT_FPRS",
           "RISK_FPR"]
