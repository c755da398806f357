r"""Trade-off curves (f-DP) and the attack bounds they imply.

The hypothesis-testing view of differential privacy (Wasserman & Zhou 2010; Kairouz, Oh,
Viswanath 2015; Dong, Roth, Su 2022 "Gaussian differential privacy", JRSS-B): an attacker who
sees the output and tests "the record is in" (P) against "it is out" (Q) with false-positive
rate α (FPR) has a true-positive rate (TPR) of at most 1 − f(α), where f = T(P, Q) is the
**trade-off function** (the smallest type-II error at type-I error α).

Facts used (all from Dong, Roth, Su 2022, "DRS" below):

* An (ε, δ)-DP mechanism is f_{ε,δ}-DP with
  f_{ε,δ}(α) = max{0, 1 − δ − e^ε α, e^{−ε}(1 − δ − α)}  (DRS Prop 2.5; KOV 2015 Thm 2.1).
* If a mechanism is (ε_i, δ_i)-DP for several pairs, it is f-DP for f = max_i f_{ε_i,δ_i}
  (each pair constrains every test), and with the whole privacy profile δ(ε), ε ≥ 0, this
  envelope is the symmetric trade-off curve the profile determines (DRS Prop 2.12, the
  primal–dual relation δ(ε) = 1 + f*(−e^ε)). So finitely many **certified** profile points
  (ε_i, δ_i ≥ δ(ε_i)) give a **certified lower envelope** of f: every attack bound computed
  from it is an upper bound on attack success (:func:`envelope`).
* μ-GDP: f(α) = G_μ(α) = Φ(Φ⁻¹(1 − α) − μ) (DRS Def 2.7), evaluated as
  Φ(−Φ⁻¹(α) − μ) with ``scipy.special.ndtr``/``ndtri`` (no cancellation at small α).
* δ(ε), seen as a function of s = e^ε, is convex and non-increasing (a supremum of affine
  functions of s: δ = sup_E P(E) − s·Q(E)). From proven *lower* bounds on δ at the grid
  points this gives a piecewise-linear lower bound of the whole profile, hence an **upper**
  envelope of the profile's trade-off curve (:func:`upper_envelope`); the distance between
  the two envelopes is the stated gap of a curve computed from finitely many points.
* Rényi DP: a test with (FPR, TPR) = (x, y) is a post-processing of the output, so by the
  data-processing inequality D_α(Bern(y) ‖ Bern(x)) ≤ ε(α) and D_α(Bern(x) ‖ Bern(y)) ≤ ε(α)
  for every order α (the region of Balle, Barthe, Gaboardi, Hsu, Sato 2020, "Hypothesis
  testing interpretations and Rényi differential privacy", §3; :func:`rdp_tpr`).

Derived bounds (:func:`attack_bounds`): TPR at FPR α = 1 − f(α); the advantage TPR − FPR
≤ δ(0) (DRS Prop 2.12 at ε = 0: the total-variation distance); balanced accuracy
(1 + advantage)/2; with prior π of membership the Bayes attacker's probability of guessing
right is at most max(π, 1 − π) + min(π, 1 − π)·δ(|ln(π/(1 − π))|) (the same duality at
e^ε = (1 − π)/π); reconstruction robustness with baseline κ (Hayes, Mahloujifar, Balle 2023,
"Bounding training data reconstruction in DP-SGD", NeurIPS: the success probability of any
reconstruction attack is at most the blow-up sup{P(E) : Q(E) ≤ κ} of a dominating pair, which
is 1 − f(κ) in trade-off form, as made explicit by Kaissis, Hayes, Ziller, Rueckert 2023,
arXiv:2307.03928).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from dpcalc import _validate as v
from dpcalc.errors import ParameterError

__all__ = [
    "pair_tradeoff",
    "envelope",
    "envelope_tpr",
    "upper_envelope_points",
    "gdp_tradeoff",
    "gdp_tpr",
    "rdp_tpr",
    "pair_advantage",
    "pair_prior_success",
]


def pair_tradeoff(alpha, epsilon: float, delta: float) -> np.ndarray:
    """f_{ε,δ}(α) = max{0, 1 − δ − e^ε α, e^{−ε}(1 − δ − α)} (DRS Prop 2.5; KOV 2015 Thm 2.1).

    Args:
        alpha: FPR values in [0, 1], any shape.
        epsilon: ε ≥ 0 (``inf`` allowed: then f = 0 for α > 0).
        delta: δ in [0, 1].

    Returns:
        Array of the shape of ``alpha``: the smallest type-II error an (ε, δ)-DP mechanism
        allows at type-I error α.
    """
    a = np.asarray(alpha, dtype=float)
    if math.isinf(epsilon):
        return np.where(a > 0, 0.0, 1.0 - delta)
    if epsilon <= 700.0:
        first = 1.0 - delta - math.exp(epsilon) * a
    else:  # e^ε overflows: e^ε·α = exp(ε + ln α) (α = 0 gives 1 − δ)
        with np.errstate(over="ignore", divide="ignore"):
            first = 1.0 - delta - np.where(a > 0, np.exp(epsilon + np.log(np.where(a > 0, a, 1.0))), 0.0)
    second = math.exp(-epsilon) * (1.0 - delta - a)
    return np.maximum(0.0, np.maximum(first, second))


def _check_points(epsilons, deltas) -> tuple[np.ndarray, np.ndarray]:
    e = np.atleast_1d(np.asarray(epsilons, dtype=float))
    d = np.atleast_1d(np.asarray(deltas, dtype=float))
    if e.shape != d.shape or e.ndim != 1 or e.size == 0:
        raise ParameterError("epsilons", "a non-empty 1-D array the shape of deltas", e.shape)
    if np.any(~(e >= 0)) or np.any(~((d >= 0) & (d <= 1))):
        raise ParameterError("epsilons", "ε ≥ 0 and δ in [0, 1] at every point", None,
                             message="profile points need ε ≥ 0 and δ in [0, 1]")
    return e, d


def envelope_tpr(alpha, epsilons, deltas) -> np.ndarray:
    """1 − max_i f_{ε_i,δ_i}(α): the largest TPR at FPR α allowed by every pair (ε_i, δ_i).

    Args:
        alpha: FPR values, shape (m,) or scalar, in [0, 1].
        epsilons, deltas: the certified profile points, shape (k,) each.

    Returns:
        Shape of ``alpha``: min_i min{1, δ_i + e^{ε_i} α, 1 − e^{−ε_i}(1 − δ_i − α)}.
        With certified δ_i (upper bounds on δ(ε_i)) this is a certified upper bound on the
        TPR of any membership test at FPR α.
    """
    e, d = _check_points(epsilons, deltas)
    a = np.asarray(alpha, dtype=float)
    flat = a.reshape(-1, 1)
    # e^ε·α; past ε = 700 as exp(min(ε + ln α, 700)), never below the true product where it
    # matters (a product above e^700 only says "1 − δ − e^ε α < 0", as the capped one does)
    grow = np.exp(np.minimum(e, 700.0)) * flat
    if np.any(e > 700.0):
        with np.errstate(divide="ignore"):
            grow = np.where(e > 700.0, np.exp(np.minimum(e + np.log(flat), 700.0)), grow)
    f = np.maximum(0.0, np.maximum(1.0 - d - grow, np.exp(-e) * (1.0 - d - flat)))
    return (1.0 - f.max(axis=1)).reshape(a.shape)


def envelope(alpha, epsilons, deltas) -> np.ndarray:
    """max_i f_{ε_i,δ_i}(α), the trade-off lower envelope of finitely many (ε_i, δ_i) pairs
    (convex, non-increasing; DRS Prop 2.12). Shapes as in :func:`envelope_tpr`."""
    return 1.0 - envelope_tpr(alpha, epsilons, deltas)


def upper_envelope_points(epsilons, deltas_lower, deltas_upper) -> tuple[np.ndarray, np.ndarray]:
    """Points (ε_c, δ_c) whose envelope max_c f_{ε_c,δ_c} lies **above** the trade-off curve of
    the true privacy profile, given brackets lo_i ≤ δ(ε_i) ≤ up_i at a grid of ε.

    With s = e^ε, δ(s) is convex and non-increasing (DRS Prop 2.12: δ = 1 + f*(−s) is a
    supremum of affine functions of s). On [s_i, s_{i+1}] it is therefore at least
    lo_{i+1} (monotone), at least the extension of the chord of (s_{i−1}, s_i) and at least
    the extension of the chord of (s_{i+1}, s_{i+2}) (convexity; each chord taken at its
    least favourable bracket ends). The profile curve sup_s f_{ln s, δ(s)} is then at most
    sup_s f_{ln s, δ_L(s)} for that piecewise-linear minorant δ_L, and on each linear piece
    of δ_L the sup is attained at a piece end (1 − δ_L(s) − sα is linear in s there, and
    (1 − δ_L(s) − α)/s monotone), so the breakpoints of δ_L are the returned points. Past
    the last grid point the chord of the last two points is extended to zero.

    Args:
        epsilons: grid ε_0 = 0 < ε_1 < … < ε_K, shape (K+1,), K ≥ 1.
        deltas_lower: proven lower bounds lo_i ≤ δ(ε_i), shape (K+1,).
        deltas_upper: certified upper bounds up_i ≥ δ(ε_i), shape (K+1,).

    Returns:
        ``(eps_c, delta_c)``, 1-D arrays.
    """
    e = np.asarray(epsilons, dtype=float)
    lo = np.maximum(np.asarray(deltas_lower, dtype=float), 0.0)
    up = np.asarray(deltas_upper, dtype=float)
    if e.size < 2 or np.any(np.diff(e) <= 0):
        raise ParameterError("epsilons", "an increasing grid of at least 2 points", e.size)
    # e^ε overflows past ε ≈ 709: brackets at a subset of the grid are still brackets, so the
    # points beyond ε = 700 are dropped (the construction stays a valid minorant of δ). With
    # ε_0 = 0 alone left, (0, lo_0) is returned: f(α) ≤ 1 − α − δ(0) ≤ f_{0,lo_0}(α), as
    # δ(0) = max_α (1 − α − f(α)) is the total variation (DRS Prop 2.12).
    keep = e <= 700.0
    if not keep.all():
        if np.count_nonzero(keep) < 2:
            return e[:1].copy(), lo[:1].copy()
        e, lo, up = e[keep], lo[keep], up[keep]
    s = np.exp(e)
    k = e.size - 1
    cand_s: list[float] = []
    cand_d: list[float] = []

    def lines_at(i: int):
        """Lines (value at s, as (a, b): a + b·s) valid on [s_i, s_{i+1}] (i = k: the tail)."""
        lines = [(0.0, 0.0)]
        if i < k:
            lines.append((lo[i + 1], 0.0))
        if i >= 1:
            slope = (lo[i] - up[i - 1]) / (s[i] - s[i - 1])
            lines.append((lo[i] - slope * s[i], slope))
        if i + 2 <= k:
            # value at s ≤ s_{i+1}: lo_{i+1}(1+u) − up_{i+2}·u, u = (s_{i+1} − s)/(s_{i+2} − s_{i+1})
            b = -(lo[i + 1] - up[i + 2]) / (s[i + 2] - s[i + 1])
            lines.append((lo[i + 1] - b * s[i + 1], b))
        return lines

    for i in range(k + 1):
        lines = lines_at(i)
        left = s[i]
        right = s[i + 1] if i < k else math.inf
        pts = {left}
        if i < k:
            pts.add(right)
        for j in range(len(lines)):
            for m in range(j + 1, len(lines)):
                (a1, b1), (a2, b2) = lines[j], lines[m]
                if b1 != b2:
                    x = (a2 - a1) / (b1 - b2)
                    if left < x < right:
                        pts.add(x)
        for x in sorted(pts):
            # the piece's own lines (not the point bracket lo_i: the sup over the piece
            # is approached from inside it)
            dl = max(a + b * x for a, b in lines)
            cand_s.append(x)
            cand_d.append(min(max(dl, 0.0), 1.0))
    return np.log(np.asarray(cand_s)), np.asarray(cand_d)


def gdp_tradeoff(alpha, mu: float) -> np.ndarray:
    """G_μ(α) = Φ(Φ⁻¹(1 − α) − μ), the exact trade-off function of μ-GDP (DRS Def 2.7),
    computed as Φ(−Φ⁻¹(α) − μ) (accurate for tiny α).

    Args:
        alpha: FPR values in [0, 1], any shape.
        mu: μ ≥ 0.
    """
    from scipy.special import ndtr, ndtri

    mu = v.nonnegative("mu", mu)
    a = np.clip(np.asarray(alpha, dtype=float), 0.0, 1.0)
    return ndtr(-ndtri(a) - mu)


def gdp_tpr(alpha, mu: float) -> np.ndarray:
    """1 − G_μ(α) = Φ(Φ⁻¹(α) + μ): the largest TPR at FPR α under μ-GDP (DRS Def 2.7)."""
    from scipy.special import ndtr, ndtri

    mu = v.nonnegative("mu", mu)
    a = np.clip(np.asarray(alpha, dtype=float), 0.0, 1.0)
    return ndtr(ndtri(a) + mu)


def _log_renyi_bern(y, x, order):
    """(order − 1)·D_order(Bern(y) ‖ Bern(x)), elementwise (broadcast), order > 1."""
    with np.errstate(divide="ignore", invalid="ignore"):
        t1 = order * np.log(y) + (1.0 - order) * np.log(x)
        t2 = order * np.log1p(-y) + (1.0 - order) * np.log1p(-x)
        t1 = np.where(y == 0, -np.inf, t1)
        t2 = np.where(y == 1, -np.inf, t2)
        return np.logaddexp(t1, t2)


def rdp_tpr(alpha, orders: Sequence[float], rdp: Sequence[float], *, iterations: int = 60) -> np.ndarray:
    """The largest TPR y at FPR x consistent with an RDP curve ε(·) for every order:
    D_a(Bern(y) ‖ Bern(x)) ≤ ε(a) and D_a(Bern(x) ‖ Bern(y)) ≤ ε(a) (data processing of the
    Rényi divergence for the binary test, in both neighbouring orders; Balle, Barthe,
    Gaboardi, Hsu, Sato 2020 §3; Mironov 2017 Prop 9).

    The feasible set of (x, y) is convex (exp((a − 1)D_a) is jointly convex), so for fixed x
    the feasible y ≥ x form an interval; bisection keeps its upper end infeasible (or 1) and
    returns it: a certified upper bound. Feasibility is judged with a relative slack of 1e-12
    in the exponent (in the conservative direction: a borderline y counts as feasible).

    Args:
        alpha: FPR values in (0, 1), shape (m,).
        orders: Rényi orders a > 1, shape (k,).
        rdp: ε(a) ≥ 0 at those orders, shape (k,) (inf allowed: no constraint).
        iterations: bisection steps (2⁻⁶⁰ resolution).

    Returns:
        TPR upper bounds, shape (m,).
    """
    x = np.atleast_1d(np.asarray(alpha, dtype=float))[:, None]
    a = np.asarray(orders, dtype=float)[None, :]
    r = np.asarray(rdp, dtype=float)[None, :]
    keep = np.isfinite(r[0])
    a, r = a[:, keep], r[:, keep]
    if a.size == 0:
        return np.ones(x.shape[0])
    limit = (a - 1.0) * r
    limit = limit + 1e-12 * np.maximum(1.0, np.abs(limit))

    def feasible(y):
        yy = y[:, None]
        ok = (_log_renyi_bern(yy, x, a) <= limit) & (_log_renyi_bern(x, yy, a) <= limit)
        return ok.all(axis=1)

    lo = x[:, 0].copy()
    hi = np.ones_like(lo)
    full = feasible(hi)
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        ok = feasible(mid)
        lo = np.where(ok, mid, lo)
        hi = np.where(ok, hi, mid)
    return np.where(full, 1.0, hi)


def pair_advantage(epsilon: float, delta: float) -> float:
    """max_α (1 − α − f_{ε,δ}(α)) = (e^ε − 1 + 2δ)/(e^ε + 1): the largest TPR − FPR under
    (ε, δ)-DP (attained at the kink α* = (1 − δ)/(1 + e^ε) of f_{ε,δ}; KOV 2015 Thm 2.1)."""
    if epsilon > 700.0:  # = 1 − 2(1 − δ)/(e^ε + 1), which is 1.0 in floating point (e^ε overflows past 709.78)
        return 1.0
    return min(1.0, (math.expm1(epsilon) + 2.0 * delta) / (math.exp(epsilon) + 1.0))


def pair_prior_success(prior: float, epsilon: float, delta: float) -> float:
    """max over tests of π·TPR + (1 − π)·(1 − FPR) under (ε, δ)-DP: the Bayes attacker's
    probability of guessing membership right with prior π. 1 − f_{ε,δ} is concave and
    piecewise linear, so the maximum is at a breakpoint α ∈ {0, (1−δ)/(1+e^ε), 1 − δ, 1}."""
    if math.isinf(epsilon):
        return 1.0
    kink = ((1.0 - delta) / (1.0 + math.exp(epsilon)) if epsilon <= 700.0
            else (1.0 - delta) * math.exp(-epsilon) / (1.0 + math.exp(-epsilon)))
    cands = np.array([0.0, kink, 1.0 - delta, 1.0])
    tpr = 1.0 - pair_tradeoff(cands, epsilon, delta)
    return float(np.max(prior * tpr + (1.0 - prior) * (1.0 - cands)))
