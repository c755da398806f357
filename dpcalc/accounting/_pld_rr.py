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

__all__ = ["RR_MAX_POINTS", "rr_parts", "rr_power"]

#: the most grid points of one exact (ε, δ)-DP composition (2²⁴ doubles: 134 MB)
RR_MAX_POINTS = 2**24

#: 4504 unit round-offs ≈ 1.0001e-12 relative: the δ of grouped (ε, δ)-DP steps is moved by this
#: (up for the upper PMF, down for the lower), and ε's within it of a grid value are snapped to it
_SNAP_ULPS = 4504.0


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


def rr_parts(dp_segs, h: float, upper: bool, eta: float) -> tuple[list[tuple[DiscretePLD, int]], float]:
    """One-step PMFs for the (ε, δ)-DP steps, with every ε snapped to the grid and equal
    snapped values grouped: ([(pmf, count), ...], round-off allowance).

    Upper bound: ε_i is rounded *up* to k·h — an (ε_i, δ_i)-DP mechanism is (k·h, δ_i)-DP, so
    RR(k·h, δ_i) dominates it. Lower bound: rounded *down* — RR(k·h, δ_i) with k·h ≤ ε_i is
    (ε_i, δ_i)-DP, hence dominated by RR(ε_i, δ_i) (Kairouz, Oh, Viswanath 2015 §2–3). An
    ε already on the grid up to round-off keeps its grid value; the few ulps it is off by
    (τ, the wrong way) are paid for in δ: RR(ε, δ) is (ε − τ, δ + 2τ)-DP for τ ≤ 1, so the
    composed δ moves by at most Σ 2τ·count (returned, added to the slack).
    Steps with the same grid value are one group: RR(ε, δ) puts mass δ at +∞ and (1 − δ)
    on RR(ε, 0), so the group composes exactly as RR(ε, δ_eff)^count with
    (1 − δ_eff)^count = Π(1 − δ_i) (δ_eff nudged up for the upper, down for the lower PMF),
    composed exactly (binomial, :func:`~dpcalc.accounting._pld_rr.rr_power`) — no FFT and no discretisation error.
    """
    groups: dict[int, list[float]] = {}
    miss = 0.0
    for step, count in dp_segs:
        eps = step.epsilon
        # snap tolerance _SNAP_ULPS (≈ 1e-12 relative): whatever is snapped is paid for in δ
        if upper:
            k = math.ceil(eps / h)
            if k > 0 and (k - 1) * h >= round_down(eps, _SNAP_ULPS):
                k -= 1
            off = eps - k * h
        else:
            k = math.floor(eps / h)
            if (k + 1) * h <= round_up(eps, _SNAP_ULPS):
                k += 1
            off = k * h - eps
        if off > 0:
            miss += count * off
        g = groups.setdefault(k, [0, 0.0])
        g[0] += count
        g[1] += count * math.log1p(-step.delta)
    parts = []
    eta_part = eta / (4.0 * max(len(groups), 1))
    for k, (count, log_keep) in sorted(groups.items()):
        d_eff = -math.expm1(log_keep / count)
        # −expm1(log1p sums / count): a few ulps per step; budget _SNAP_ULPS (≈ 1e-12 relative)
        d_eff = min(1.0, round_up(d_eff, _SNAP_ULPS)) if upper else round_down(d_eff, _SNAP_ULPS)
        parts.append((rr_power(k, h, int(count), d_eff, upper, eta_part), 1))
    return parts, 2.0 * miss
