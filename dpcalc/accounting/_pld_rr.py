r"""The exact composition of randomized-response steps on pld's grid (an (ε, δ)-DP mechanism's
dominating pair, Kairouz, Oh, Viswanath 2015 §2–3): binomial weights, no FFT and no
discretisation error (:class:`~dpcalc.accounting.pld.PldAccountant` composes (ε, δ)-DP steps
whose ε is on its grid here)."""

from __future__ import annotations

import math

import numpy as np

from dpcalc._numerics import UNIT_ROUNDOFF, log_binomial_pmf, round_down, round_up
from dpcalc.accounting._pld_grid import DiscretePLD
from dpcalc.errors import UnsupportedEventError

__all__ = ["RR_MAX_POINTS", "rr_power"]

#: the most grid points of one exact (ε, δ)-DP composition (2²⁴ doubles: 134 MB)
RR_MAX_POINTS = 2**24


def rr_power(k: int, h: float, count: int, delta: float, upper: bool, eta: float) -> DiscretePLD:
    r"""The ``count``-fold composition of randomized response RR(ε = k·h, δ) on the grid, exactly.

    Under P each step has loss +ε w.p. (1−δ)/(1+e^{−ε}), −ε w.p. (1−δ)e^{−ε}/(1+e^{−ε}), +∞ w.p. δ
    (Kairouz, Oh, Viswanath 2015 §2–3), so the composed finite loss is (count − 2j)·ε with j ~
    Binomial(count, e^{−ε}/(1+e^{−ε})), times (1−δ)^count; +∞ has mass 1 − (1−δ)^count.
    Masses come from log-gamma (relative error ≤ ``rel`` below): scaled by (1 ± rel) for the
    upper / lower PMF. j outside a Hoeffding window (P(|j − count·b| ≥ t) ≤ 2e^{−2t²/count} ≤ η)
    is dropped: from the lower PMF that only lowers δ; for the upper PMF its mass is added to
    the slack.
    """
    keep = math.exp(count * math.log1p(-delta)) if delta < 1 else 0.0
    p_inf = -math.expm1(count * math.log1p(-delta)) if delta < 1 else 1.0
    if k == 0 or keep == 0.0:
        return DiscretePLD(h, 0, np.array([keep]), p_inf, 0.0, upper)
    eps = k * h
    log_a = -math.log1p(math.exp(-eps))  # ln P(+ε | finite)
    log_b = -eps + log_a  # ln P(−ε | finite)
    b = math.exp(log_b)
    t = math.sqrt(count * math.log(2.0 / eta) / 2.0)
    j_lo, j_hi = max(0, math.floor(count * b - t)), min(count, math.ceil(count * b + t))
    truncated = j_lo > 0 or j_hi < count
    points = 2 * k * (j_hi - j_lo) + 1
    if points > RR_MAX_POINTS:  # memory: refuse before allocating (1e15 steps asked for ~24 GB)
        raise UnsupportedEventError(
            f"pld's exact composition of {count:,} (ε, δ)-DP steps with ε = {eps:.4g} needs "
            f"{points:,} grid points (more than {RR_MAX_POINTS:,}); see optimal, kov or rdp")
    js = np.arange(j_lo, j_hi + 1, dtype=float)
    # P(j) = keep·C(count, j)·b^j·a^(count−j); |error of log_w| ≤ rel (log_binomial_pmf's bound)
    log_w, rel = log_binomial_pmf(js, float(count), log_b, log_a, math.log(keep))
    # e^{±rel} ⊂ [1 − 2rel, 1 + 2rel] for rel ≤ ½: budget 2·rel, in unit round-offs
    w = np.exp(log_w)
    w = round_up(w, 2 * rel / UNIT_ROUNDOFF) if upper else round_down(w, 2 * rel / UNIT_ROUNDOFF)
    # loss index (count − 2j)·k, decreasing in j: lay out from the largest j (smallest loss)
    probs = np.zeros(2 * k * (j_hi - j_lo) + 1)
    probs[:: 2 * k] = w[::-1]
    slack = (2.0 * math.exp(-2.0 * t * t / count) if truncated else 0.0) if upper else 0.0
    return DiscretePLD(h, k * (count - 2 * j_hi), probs, p_inf, slack, upper)
