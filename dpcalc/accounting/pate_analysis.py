r"""The PATE analyses ``dpcalc pate`` reports, on top of :mod:`dpcalc.accounting.pate`: the
data-independent RDP of one aggregator query, the planning inverses (the largest number of
queries, or the smallest noise, with ε ≤ a target), the cumulative ε of a run, and the private
release of the data-dependent RDP (GNMax, Papernot et al. 2018 App. B–C).

Every ε here is the RDP conversion of :func:`dpcalc.accounting.pate.epsilon_of_curve`
(Canonne, Kamath, Steinke 2020 Prop 12, the order refined). The planning inverses search a
monotone ε with the one root finder, :func:`dpcalc._numerics.brentq`: ε of k queries is the
conversion of k times one query's curve, non-decreasing in k, and non-increasing in the noise.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from dpcalc._numerics import UNIT_ROUNDOFF, brentq, round_up
from dpcalc.accounting.pate import Conversion, PateRun, epsilon_of_curve, independent_rdp
from dpcalc.accounting.rdp_conversion import epsilon_per_order, log_delta_per_order
from dpcalc.mechanisms import pate as pm
from dpcalc.mechanisms import pate_ss as ss

__all__ = ["aggregator_rdp", "Plan", "largest_queries", "smallest_noise",
           "cumulative_cost", "Release", "release_gnmax"]

#: the most queries the planning inverse searches
MAX_QUERIES = 10**12

#: the noise range the planning inverse searches (votes)
NOISE_RANGE = (1e-3, 1e8)

#: relative precision of the smallest noise (the noise returned meets the target; it is within
#: this of the exact threshold)
NOISE_RTOL = 1e-9


def aggregator_rdp(mechanism: str, noise: Mapping[str, float | None], orders) -> np.ndarray:
    """Data-independent RDP of one query of a PATE aggregator at ``orders``, rounded up
    (:func:`dpcalc.accounting.pate.independent_rdp`): LNMax(b), GNMax(σ), or Confident-GNMax
    counted as answered: the threshold check (σ₁) plus GNMax (σ₂) (Papernot et al. 2018 Alg 1).

    Args:
        mechanism: ``"lnmax"``, ``"gnmax"`` or ``"confident-gnmax"``.
        noise: the noise parameters in votes: ``scale``, ``sigma``, or ``sigma1`` and ``sigma2``.
        orders: Rényi orders > 1, shape (n,).

    Returns:
        RDP at ``orders``, shape (n,).
    """
    if mechanism == "lnmax":
        return independent_rdp("lnmax", noise["scale"], orders)
    if mechanism == "gnmax":
        return independent_rdp("gnmax", noise["sigma"], orders)
    return independent_rdp("threshold", noise["sigma1"], orders) + independent_rdp("gnmax", noise["sigma2"], orders)


@dataclass(frozen=True)
class Plan:
    """A planning inverse: the value found and its ε.

    Attributes:
        value: the largest number of queries (an int) or the smallest noise (votes).
        conversion: ε at δ of ``value`` (the order used, warnings).
        feasible: False when even the limit misses the target — one query, or the largest noise
            searched (``value`` is then that limit and ``conversion`` its ε).
    """

    value: float
    conversion: Conversion
    feasible: bool = True


def largest_queries(mechanism: str, noise: Mapping[str, float | None], *, epsilon: float,
                    delta: float, max_queries: int = MAX_QUERIES) -> Plan:
    """The largest number k ≤ ``max_queries`` of data-independent queries (every query answered)
    whose composed RDP converts to ε ≤ ``epsilon`` at ``delta``.

    The real k* with ε(k*) = target is found by :func:`dpcalc._numerics.brentq` on the real
    multiple k of one query's curve; the answer is the largest integer k with ε(k) ≤ target,
    checked at the integers around ⌊k*⌋.

    Args:
        mechanism, noise: as :func:`aggregator_rdp`.
        epsilon: the target ε > 0.
        delta: δ in (0, 1).
        max_queries: the largest k searched.

    Returns:
        :class:`Plan` with ``value`` = k; infeasible (k = 1) when one query exceeds the target.
    """
    def conv(k: float) -> Conversion:
        return epsilon_of_curve(lambda o: k * aggregator_rdp(mechanism, noise, o), delta=delta)

    def ok(k: int) -> bool:
        return conv(k).value <= epsilon

    one = conv(1)
    if one.value > epsilon:
        return Plan(1, one, feasible=False)
    if ok(max_queries):
        return Plan(max_queries, conv(max_queries))
    root = brentq(lambda k: min(conv(k).value, 1e300) - epsilon, 1.0, float(max_queries), xtol=0.25)
    k = min(max(int(math.floor(root)), 1), max_queries - 1)
    while k > 1 and not ok(k):
        k -= 1
    while k + 1 < max_queries and ok(k + 1):
        k += 1
    return Plan(k, conv(k))


def smallest_noise(mechanism: str, name: str, *, queries: int, epsilon: float, delta: float,
                   noise_range: tuple[float, float] = NOISE_RANGE, rtol: float = NOISE_RTOL) -> Plan:
    """The smallest noise parameter ``name`` of a one-noise aggregator (LNMax ``scale``, GNMax
    ``sigma``) with ε ≤ ``epsilon`` at ``delta`` for ``queries`` data-independent queries.

    Brent's method (:func:`dpcalc._numerics.brentq`) on log noise to ``rtol``, then the noise is
    moved up until the target is met (never a noise whose ε exceeds it).

    Args:
        mechanism: ``"lnmax"`` or ``"gnmax"``.
        name: the noise parameter (``"scale"`` or ``"sigma"``).
        queries: k ≥ 1.
        epsilon: the target ε > 0.
        delta: δ in (0, 1).
        noise_range: the noise searched, (lo, hi).
        rtol: relative precision of the noise.

    Returns:
        :class:`Plan` with ``value`` = the noise; infeasible (the largest noise) when even that
        exceeds the target.
    """
    lo, hi = noise_range

    def conv(x: float) -> Conversion:
        return epsilon_of_curve(lambda o: queries * aggregator_rdp(mechanism, {name: x}, o), delta=delta)

    def eps(x: float) -> float:
        return conv(x).value

    at_hi = conv(hi)
    if at_hi.value > epsilon:
        return Plan(hi, at_hi, feasible=False)
    if eps(lo) <= epsilon:
        return Plan(lo, conv(lo))
    x = math.exp(brentq(lambda t: min(eps(math.exp(t)), 1e300) - epsilon, math.log(lo), math.log(hi),
                        xtol=rtol / 4, maxiter=200))
    step = rtol / 4
    while eps(x) > epsilon and x < hi:  # never a noise whose ε exceeds the target
        x = min(x * (1.0 + step), hi)
        step *= 2.0
    return Plan(x, conv(x))


def cumulative_cost(run: PateRun, orders, counts, *, delta: float | None = None,
                    epsilon: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """ε at ``delta`` (or δ at ``epsilon``) of the first c queries of a PATE run for each c in
    ``counts``, minimised over ``orders`` without refinement (a valid bound; the CKS 2020
    conversion of :mod:`dpcalc.accounting.rdp_conversion`).

    Args:
        run: the run (:class:`dpcalc.accounting.pate.PateRun`).
        orders: Rényi orders > 1, shape (n,).
        counts: ascending numbers of queries in [0, k], shape (c,).
        delta: δ in (0, 1) (then ε is returned), or None.
        epsilon: ε ≥ 0 (then δ is returned) when ``delta`` is None.

    Returns:
        (data-dependent, data-independent), shape (c,) each.
    """
    dep, ind = run.cumulative(orders, counts)
    o = np.asarray(orders, dtype=float)[None, :]
    if delta is not None:
        ld = math.log(delta)
        return epsilon_per_order(o, dep, ld).min(axis=1), epsilon_per_order(o, ind, ld).min(axis=1)
    return (np.exp(log_delta_per_order(o, dep, epsilon).min(axis=1)),
            np.exp(log_delta_per_order(o, ind, epsilon).min(axis=1)))


@dataclass(frozen=True)
class Release:
    """The private release of GNMax's data-dependent RDP at one order (Papernot et al. 2018
    App. B–C; :mod:`dpcalc.mechanisms.pate_ss`).

    Attributes:
        rdp_data_dependent: the data-dependent RDP at the order (private), rounded up.
        smooth_sensitivity: its β-smooth sensitivity (private).
        rdp_gnss: the RDP cost of the release at the order.
        rdp_released: the released (noisy) RDP (publishable).
        rdp_data_independent: the data-independent RDP of the run at the order.
        epsilon_released: ε at δ of max(released, 0) + cost (not a certified bound).
        epsilon_data_dependent: ε at δ of the data-dependent RDP + cost (private).
        epsilon_data_independent: ε at δ of the data-independent RDP + cost (publishable).
    """

    rdp_data_dependent: float
    smooth_sensitivity: float
    rdp_gnss: float
    rdp_released: float
    rdp_data_independent: float
    epsilon_released: float
    epsilon_data_dependent: float
    epsilon_data_independent: float


def release_gnmax(run: PateRun, votes, *, sigma: float, order: float, beta: float, sigma_ss: float,
                  delta: float, teachers: int, classes: int, seed: int | None = None) -> Release:
    """Release GNMax's data-dependent RDP at ``order`` with Gaussian noise scaled by its smooth
    sensitivity (GNSS, Papernot et al. 2018 App. C; Thm 23 of arXiv:1802.08908) and convert the
    three RDP totals (released, data-dependent, data-independent, each plus the release's cost)
    to ε at ``delta`` at that one order (CKS 2020 Prop 12).

    Args:
        run: the GNMax run of ``votes``.
        votes: the vote matrix, shape (k, m).
        sigma: GNMax's σ (votes).
        order: the Rényi order λ of the release, chosen in advance, with 2λβ < 1.
        beta: the smoothness β.
        sigma_ss: σ_s, the noise std in units of the smooth sensitivity.
        delta: δ in (0, 1).
        teachers: n; classes: m.
        seed: seed of the release's noise (tests only; default: the OS CSPRNG).

    Returns:
        :class:`Release`.
    """
    lq = pm.log_q_gnmax(votes, sigma)
    # a sum of k non-negative per-query RDPs: rounded up by 1e-12 relative (≈ 4504 unit
    # round-offs), far above the error of the pairwise sum and of each term
    r_dep = round_up(float(np.sum(ss.gnmax_rdp_of_logq(lq, sigma, order))), 1e-12 / UNIT_ROUNDOFF)
    sens = ss.smooth_sensitivity_gnmax(lq, sigma=sigma, order=order, m=classes, n=teachers, beta=beta)
    cost = ss.rdp_gnss(beta, sigma_ss, order)
    r_tilde = ss.release(r_dep, sens, sigma_ss, seed=seed)
    at = np.array([order])

    def conv(value: float) -> float:
        return epsilon_of_curve(lambda o: np.full(np.shape(o), value), delta=delta, orders=at).value

    ind = float(run.rdp_independent(at)[0])
    return Release(rdp_data_dependent=r_dep, smooth_sensitivity=sens, rdp_gnss=cost, rdp_released=r_tilde,
                   rdp_data_independent=ind, epsilon_released=conv(max(r_tilde, 0.0) + cost),
                   epsilon_data_dependent=conv(r_dep + cost), epsilon_data_independent=conv(ind + cost))
