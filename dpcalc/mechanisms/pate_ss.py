r"""Private release of PATE's data-dependent RDP: smooth sensitivity of GNMax's data-dependent
bound and the Gaussian-noise-with-smooth-sensitivity (GNSS) release (Papernot et al. 2018 App. B–C).

The data-dependent RDP of a GNMax run at a fixed order λ, R(x) = Σ_i G(q̃_i(x)), is a function of
the private votes x (one vote histogram per query). Publishing it leaks. The 2018 paper releases
R̃ = R(x) + SS_β(x)·N(0, σ_s²) instead, where SS_β is a β-smooth upper bound on the local
sensitivity of R, and pays the GNSS mechanism's RDP on top.

Per query (n teachers, m classes, noise σ), with G(q) = min(λ/σ², 2018 Thm 6 at q) (0 at q = 0; the
per-query value dpcalc composes, :mod:`dpcalc.mechanisms.pate`) and q̃ the union bound of 2018 Prop 7,
q̃ = Σ_{j≠i*} Φ(−Δ_j/(√2σ)) capped at 1 − 1/m:

* **One step** (2018 App. B.4, the functions B_U and B_L): when one teacher changes its vote every gap
  Δ_j moves by at most 2, so every term's argument moves by at most √2/σ; for m − 1 terms of a given
  sum q the extreme sums are reached with equal terms (the paper's concavity argument), giving
  q̃(y) ∈ [B_L(q̃), B_U(q̃)] for every neighbour y, with
  B_{U/L}(q) = (m − 1)·Φ(−z ± √2/σ), z = −Φ⁻¹(q/(m − 1)) (≡ (m−1)/2·erfc(erfc⁻¹(2q/(m−1)) ∓ 1/σ)).
  Why the equal-terms extreme: u ↦ Φ(Φ⁻¹(u) + c) is concave for c > 0 (it is 1 − T(u) with T the
  convex Gaussian trade-off function α ↦ Φ(Φ⁻¹(1 − α) − c)), so Jensen's inequality bounds the
  sum. An argmax that switches to class b at the neighbour does not break it: the union bound with
  the neighbour's argmax is ≤ the one with x's argmax a as reference (every other gap is larger,
  and Φ(−t) ≤ Φ(t) for the a–b pair), and that one moves by the same shift. The lower end follows
  by symmetry (x is a neighbour of y; B_L inverts B_U).
* **Distance d** (the ball of histograms within d teacher changes): B_U and B_L are increasing, so
  iterating them bounds the ball: q̃ ∈ [lo_d, hi_d] with hi_d = (m − 1)Φ(−z + d√2/σ) and
  lo_d = (m − 1)Φ(−z − d√2/σ).
* **Local sensitivity at distance d** (2018 App. B.4, Alg. 3–5 compute it with the conditions C5–C6;
  we use only C5, that G is non-decreasing in q, which :func:`check_c5` verifies numerically like the
  authors' ``check_conditions``): for y in the ball and y' a neighbour of y,
  |G(q̃(y')) − G(q̃(y))| ≤ max(G(hi_{d+1}) − G(lo_d), G(hi_d) − G(lo_{d+1})) =: LS_d, also ≤ λ/σ²
  (0 ≤ G ≤ λ/σ²). This is at least the paper's Alg. 3 value (which maximises the one-step change
  over the interval using C6); looser, never smaller.
* **The run**: d teacher changes change every query's histogram by ≤ d changes, so the run's local
  sensitivity at distance d is ≤ Σ_i LS_d(q̃_i). Beyond d = n the ball holds every histogram, so
  SS_β = max_{0 ≤ d ≤ n} e^{−βd} Σ_i LS_d(q̃_i) is a β-smooth upper bound on the local sensitivity
  (Nissim, Raskhodnikova, Smith 2007 Def. 2.1, Prop. 2.2 form; 2018 App. C).

* **GNSS release** (2018 App. C, Theorem 23 of arXiv:1802.08908, the theorem the authors' code
  ``compute_rdp_of_smooth_sensitivity_gaussian`` implements): releasing f(x) + SS_β(x)·N(0, σ_s²)
  with SS_β a β-smooth upper bound on the local sensitivity of f is (λ, ε)-RDP for 1 < λ < 1/(2β), with

  .. math:: ε = \frac{λ e^{2β}}{σ_s^2} + \frac{βλ − \tfrac12\ln(1 − 2λβ)}{λ − 1}.

Rounding: hi_d moves up and lo_d down by a margin covering their evaluation; G at hi is the
(upward-rounded) dpcalc value, G at lo is moved down by 10⁻⁹ relative; the sums and SS_β are moved
up by 10⁻⁹ relative; the GNSS cost is moved up. Never smaller than the exact bound.

Scope: GNMax (all queries answered). Confident-GNMax's threshold check and LNMax are not covered
(the CLI refuses them with ``--release-epsilon``). docs/design.md §4 has the paragraph.
"""

from __future__ import annotations

import math

import numpy as np

from dpcalc import _validate as v
from dpcalc._numerics import UNIT_ROUNDOFF, log_ndtr
from dpcalc.errors import InfeasibleError, ParameterError
from dpcalc.mechanisms import pate as pm

__all__ = [
    "SOURCE_SS",
    "gnmax_rdp_of_logq",
    "check_c5",
    "ball_logq",
    "local_sensitivity_gnmax",
    "smooth_sensitivity_gnmax",
    "rdp_gnss",
    "release",
]

SOURCE_SS = ("Papernot et al. 2018 App. B–C (smooth sensitivity of GNMax's data-dependent RDP; "
             "GNSS release, Thm 23 of arXiv:1802.08908)")

_REL = 1e-9          # relative margin on G at the low end, on sums and on SS_β
_ZERR = 1e-12        # relative margin on z = −Φ⁻¹(q/(m−1))


def gnmax_rdp_of_logq(logq, sigma: float, order: float) -> np.ndarray:
    """G(q̃) = min(λ/σ², 2018 Thm 6 at q̃) per query at one order (0 where q̃ = 0): the per-query
    data-dependent RDP dpcalc composes for GNMax.

    Args:
        logq: ln q̃, any shape (−inf allowed).
        sigma: σ > 0 (votes).
        order: λ > 1.

    Returns:
        float array of the shape of ``logq`` (rounded up, as :class:`dpcalc.mechanisms.pate.Thm6`).
    """
    lq = np.asarray(logq, dtype=float)
    flat = lq.reshape(-1)
    base = float(pm.rdp_gnmax_independent(sigma, np.array([order]))[0])
    dep = pm.Thm6(flat, sigma).rdp(np.array([order]))[:, 0]
    return np.minimum(dep, base).reshape(lq.shape)


def check_c5(sigma: float, order: float, m: int, points: int = 4001) -> None:
    """Condition C5 of 2018 App. B.4: G(q) non-decreasing on (0, 1 − 1/m], checked on a grid of
    ``points`` values of ln q from −10⁶ to ln(1 − 1/m) (geometric in −ln q), as the authors check
    it numerically.

    Raises:
        InfeasibleError: G decreases somewhere on the grid (the smooth-sensitivity bound relies on C5).
    """
    if m < 2:
        return
    cap = math.log1p(-1.0 / m)
    t = np.geomspace(-cap, 1e6, points)[::-1]
    g = gnmax_rdp_of_logq(-t, sigma, order)
    d = np.diff(g)
    tol = 1e-9 * np.maximum(g[1:], g[:-1]) + 1e-300
    if np.any(d < -tol):
        i = int(np.argmax(d < -tol))
        raise InfeasibleError(f"smooth sensitivity: the data-dependent bound at order {order:g} (σ = {sigma:g}) "
                              f"is not non-decreasing in q near ln q = {-t[i]:.6g} (condition C5 of Papernot "
                              "et al. 2018 App. B.4 fails); choose another --order")


def ball_logq(logq, m: int, sigma: float, dmax: int) -> tuple[np.ndarray, np.ndarray]:
    """(ln lo_d, ln hi_d) for d = 0 … dmax: bounds on ln q̃ over every histogram within d teacher
    changes of a query with ln q̃ = ``logq`` (module docstring; lo rounded down, hi up).

    Args:
        logq: ln q̃ per query, shape (k,) (:func:`dpcalc.mechanisms.pate.log_q_gnmax`, an upper bound
            moved up by its margin; the lower end undoes twice that margin first).
        m: classes (≥ 2). sigma: σ > 0. dmax: largest distance (≥ 0).

    Returns:
        two arrays of shape (k, dmax + 1).
    """
    from scipy.special import ndtri_exp

    lq = np.asarray(logq, dtype=float)
    cap = math.log1p(-1.0 / m)
    lm1 = math.log(m - 1)
    margin = 2.0 * (256 * UNIT_ROUNDOFF * (1.0 + np.abs(lq)) + 8.0 * m * UNIT_ROUNDOFF) + 1e-15
    lq_lo = np.where(np.isfinite(lq), lq - margin, lq)
    with np.errstate(divide="ignore", invalid="ignore"):
        z_hi = -ndtri_exp(np.minimum(lq - lm1, 0.0))      # smaller q → larger z
        z_lo = -ndtri_exp(np.minimum(lq_lo - lm1, 0.0))
    z_hi = z_hi - _ZERR * (1.0 + np.abs(z_hi))
    z_lo = z_lo + _ZERR * (1.0 + np.abs(z_lo))
    step = math.sqrt(2.0) / sigma
    d = np.arange(dmax + 1, dtype=float)[None, :]
    hi_arg = -(z_hi[:, None] - d * step * (1.0 + 4 * UNIT_ROUNDOFF))
    lo_arg = -(z_lo[:, None] + d * step * (1.0 - 4 * UNIT_ROUNDOFF))
    with np.errstate(invalid="ignore"):
        lhi = lm1 + log_ndtr(np.where(np.isfinite(hi_arg), hi_arg, 0.0))
        llo = lm1 + log_ndtr(np.where(np.isfinite(lo_arg), lo_arg, 0.0))
    lhi = lhi + 1e-12 * (1.0 + np.abs(lhi))
    llo = llo - 1e-12 * (1.0 + np.abs(llo))
    # q̃ = 0 (−inf) stays 0 only with m = 1 (handled by the caller); an infinite z means q → 0 below
    llo = np.where(np.isposinf(lo_arg) | np.isnan(lo_arg), cap, llo)
    llo = np.where(np.isneginf(lo_arg) | np.isposinf(z_lo[:, None]), -np.inf, llo)
    lhi = np.where(np.isposinf(hi_arg), cap, lhi)
    lhi = np.where(np.isneginf(hi_arg), -np.inf, lhi)
    return np.minimum(llo, cap), np.minimum(lhi, cap)


def local_sensitivity_gnmax(logq, *, sigma: float, order: float, m: int, dmax: int) -> np.ndarray:
    """Upper bounds LS_d on the local sensitivity at distance d = 0 … dmax of one query's
    data-dependent GNMax RDP G(q̃) at order λ (module docstring).

    Args:
        logq: ln q̃ per query, shape (k,). sigma: σ (votes). order: λ > 1. m: classes.
        dmax: the largest distance (the number of teachers n suffices).

    Returns:
        shape (k, dmax + 1), each entry in [0, λ/σ²].

    Raises:
        InfeasibleError: condition C5 fails at (σ, λ) (:func:`check_c5`).
    """
    lq = np.asarray(logq, dtype=float)
    if m < 2:
        return np.zeros((lq.size, dmax + 1))
    check_c5(sigma, order, m)
    base = float(pm.rdp_gnmax_independent(sigma, np.array([order]))[0])
    llo, lhi = ball_logq(lq, m, sigma, dmax + 1)
    g_hi = gnmax_rdp_of_logq(lhi, sigma, order)
    g_lo = np.maximum(gnmax_rdp_of_logq(llo, sigma, order) * (1.0 - _REL) - 1e-300, 0.0)
    up = g_hi[:, 1:] - g_lo[:, :-1]
    down = g_hi[:, :-1] - g_lo[:, 1:]
    return np.minimum(np.maximum(np.maximum(up, down), 0.0) * (1.0 + _REL), base)


def smooth_sensitivity_gnmax(logq, *, sigma: float, order: float, m: int, n: int, beta: float,
                             chunk: int = 4096) -> float:
    """β-smooth upper bound SS_β on the local sensitivity of R = Σ_i G(q̃_i) (GNMax run at order λ):
    max_{0≤d≤n} e^{−βd} Σ_i LS_d(q̃_i) (module docstring), rounded up.

    Args:
        logq: ln q̃ per query, shape (k,) (:func:`dpcalc.mechanisms.pate.log_q_gnmax`).
        sigma: σ > 0 (votes). order: λ > 1. m: classes. n: teachers (≥ 1). beta: β > 0.
        chunk: queries per block (memory: chunk × (n + 2) floats).

    Raises:
        ParameterError: β not positive; InfeasibleError: condition C5 fails.
    """
    b = v.positive("beta", beta)
    lq = np.asarray(logq, dtype=float).reshape(-1)
    uniq, counts = np.unique(lq, return_counts=True)
    total = np.zeros(n + 1)
    for i in range(0, uniq.size, chunk):
        ls = local_sensitivity_gnmax(uniq[i:i + chunk], sigma=sigma, order=order, m=m, dmax=n)
        total += counts[i:i + chunk].astype(float) @ ls
    total *= 1.0 + _REL + 4 * UNIT_ROUNDOFF * max(uniq.size, 1)
    disc = np.exp(-b * np.arange(n + 1, dtype=float)) * (1.0 + 4 * UNIT_ROUNDOFF)
    return float(np.max(total * disc)) * (1.0 + _REL)


def rdp_gnss(beta: float, sigma_ss: float, order: float) -> float:
    r"""RDP at order λ of releasing f(x) + SS_β(x)·N(0, σ_s²) (2018 App. C, Thm 23 of
    arXiv:1802.08908): λe^{2β}/σ_s² + (βλ − ½ ln(1 − 2λβ))/(λ − 1), for 1 < λ < 1/(2β); rounded up,
    and evaluated at β(1 + 10⁻⁹) so that the rounding margins of :func:`smooth_sensitivity_gnmax`
    (≤ 10⁻¹² relative between neighbours) cannot break β-smoothness.

    Raises:
        ParameterError: β or σ_s not positive, λ ≤ 1, or λ ≥ 1/(2β).
    """
    b = v.positive("beta", beta)
    s = v.positive("sigma_ss", sigma_ss)
    lam = float(order)
    if not lam > 1.0 or not math.isfinite(lam):
        raise ParameterError("order", "> 1", order)
    if not 2.0 * lam * b < 1.0:
        raise ParameterError("order", f"< 1/(2β) = {1.0 / (2.0 * b):.6g} (GNSS release, 2018 Thm 23)", order)
    # charged at β' = β(1 + 10⁻⁹): SS_β as computed is β-smooth up to its 10⁻¹² rounding margins,
    # hence β'-smooth exactly (see smooth_sensitivity_gnmax); β' < 1/(2λ) still (checked below)
    b = b * (1.0 + 1e-9)
    if not 2.0 * lam * b < 1.0:
        raise ParameterError("order", f"< 1/(2β) = {1.0 / (2.0 * b):.6g} (GNSS release, 2018 Thm 23)", order)
    val = lam * math.exp(2.0 * b) / (s * s) + (b * lam - 0.5 * math.log1p(-2.0 * lam * b)) / (lam - 1.0)
    return val * (1.0 + 32 * UNIT_ROUNDOFF) + 1e-300


def release(value: float, ss: float, sigma_ss: float, *, seed: int | None = None) -> float:
    """R̃ = value + ss·σ_s·Z, Z ~ N(0, 1) from the operating system's CSPRNG
    (:class:`random.SystemRandom`); ``seed`` (tests only) uses :class:`random.Random` instead.
    Floating-point Gaussian sampling is not hardened against Mironov-2012-style attacks."""
    import random

    rng = random.SystemRandom() if seed is None else random.Random(seed)
    return float(value) + float(ss) * float(sigma_ss) * rng.gauss(0.0, 1.0)
