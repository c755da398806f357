r"""Randomized response, binary (Warner 1965) and k-ary (generalized RR).

Each respondent reports their true category with probability
p = e^ε/(e^ε + k − 1) and each of the other k − 1 categories with probability
q = 1/(e^ε + k − 1); this is ε-LDP (local DP) since p/q = e^ε (Dwork & Roth 2014
§3.2 for k = 2: p = e^ε/(1 + e^ε), ε = ln 3 gives p = 3/4; Kairouz, Oh,
Viswanath 2016 and Wang et al. 2017 "Locally differentially private protocols for
frequency estimation" §4.1 for k-ary).

Given the observed counts n_j of reported categories (n = Σ n_j), the observed
proportion λ̂_j = n_j/n has expectation λ_j = π_j·p + (1 − π_j)·q, so
π̂_j = (λ̂_j − q)/(p − q) is unbiased for the true proportion π_j, with variance
λ_j(1 − λ_j)/(n(p − q)²) (Wang et al. 2017 Thm 2), estimated by plugging in λ̂_j.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from dpcalc import _validate as v
from dpcalc.errors import ParameterError
from dpcalc.results import MechanismResult

__all__ = ["rr_probabilities", "randomized_response", "parse_counts", "MAX_OBSERVED"]

SOURCE = "Warner 1965; Dwork & Roth 2014 §3.2; Wang et al. 2017 (k-ary)"

#: the largest observed count of one category, and of all together (10¹⁵ respondents): every
#: estimate, standard error and estimated count is then a finite float
MAX_OBSERVED = 10**15
_COUNTS = f"comma-separated whole numbers in [0, {MAX_OBSERVED:.0e}]".replace("+", "")


def rr_probabilities(*, epsilon: float, categories: int = 2) -> tuple[float, float]:
    r"""(p_truth, p_other) of k-ary randomized response at ε.

    p_truth = e^ε/(e^ε + k − 1), p_other = 1/(e^ε + k − 1) (each other category).

    Args:
        epsilon: ε > 0.
        categories: k ≥ 2.

    Returns:
        (p_truth, p_other).

    Raises:
        ParameterError: ε ≤ 0 or not finite; k < 2.
    """
    epsilon = v.positive("epsilon", epsilon)
    k = v.count("categories", categories, minimum=2)
    p_other = math.exp(-epsilon) / (1 + (k - 1) * math.exp(-epsilon))
    p_truth = 1 / (1 + (k - 1) * math.exp(-epsilon))
    return p_truth, p_other


def parse_counts(text: str) -> list[int]:
    """Parse ``"n1,n2,...,nk"`` into whole-number counts.

    Raises:
        ParameterError: (named ``observed``) a part is not a whole number in [0, 1e15]
            (:data:`MAX_OBSERVED`).
    """
    parts = [s.strip() for s in str(text).split(",")]
    out = []
    shown = text if len(str(text)) <= 80 else str(text)[:77] + "..."
    for s in parts:
        try:
            x = v.parse_number(s)
        except ValueError:
            raise ParameterError("observed", _COUNTS, shown) from None
        if not (math.isfinite(x) and 0 <= x <= MAX_OBSERVED and x.is_integer()):
            raise ParameterError("observed", _COUNTS, shown)
        out.append(int(x))
    return out


def randomized_response(
    *, epsilon: float, categories: int = 2, observed: Sequence[int] | None = None
) -> MechanismResult:
    r"""Randomized-response probabilities and, given observed counts, unbiased frequency estimates.

    Args:
        epsilon: ε > 0 (the mechanism is ε-DP for each respondent).
        categories: k ≥ 2 (k = 2: Warner's binary RR).
        observed: optional counts of each *reported* category, length k, total ≥ 1.

    Returns:
        A result with ``epsilon``, ``categories``, ``p_truth``, ``p_other``; with
        ``observed``: ``estimates`` (unbiased estimates of the true proportions; may fall
        outside [0, 1]), ``standard_errors`` (plug-in), ``estimated_counts`` and ``n``.

    Raises:
        ParameterError: bad ε, k, or counts (wrong length, negative, total 0 or above
            :data:`MAX_OBSERVED`).
    """
    p, q = rr_probabilities(epsilon=epsilon, categories=categories)
    k = int(categories)
    # p − q = (1 − e^{−ε})/(1 + (k − 1)e^{−ε}), without the cancellation of p − q (which is 0
    # in floating point for ε ≲ 1e-16)
    gap = -math.expm1(-float(epsilon)) / (1 + (k - 1) * math.exp(-float(epsilon)))
    values: dict = {"epsilon": float(epsilon), "delta": 0.0, "categories": k,
                    "p_truth": p, "p_other": q}
    details: dict = {"variance_factor": 1 / gap**2 if gap > 1e-154 else math.inf}
    if observed is not None:
        counts = [v.count("observed", c, minimum=0) for c in observed]
        if len(counts) != k:
            raise ParameterError("observed", f"{k} counts (one per category)", len(counts))
        n = sum(counts)
        if n < 1 or n > MAX_OBSERVED:
            raise ParameterError("observed", f"counts with a total in [1, {MAX_OBSERVED:.0e}]".replace("+", ""), n)
        lam = [c / n for c in counts]
        est = [(x - q) / gap for x in lam]
        se = [math.sqrt(x * (1 - x) / n) / gap for x in lam]
        values.update({"n": n, "observed": counts, "estimates": est, "standard_errors": se,
                       "estimated_counts": [n * e for e in est]})
        details["note"] = ("unbiased estimates may fall outside [0, 1]; clip or project for "
                           "display only (post-processing is free)")
    return MechanismResult(method="rr", values=values, source=SOURCE, details=details)
