r"""Certified Rényi-DP curve of the mixture-of-Gaussians mechanism (issue 28): N(0, σ²) against
M = Σ_j p_j N(c_j, σ²), both orderings, at any real order α > 1.

In units of σ (t = y/σ, u_j = c_j/σ, φ, Φ the standard normal density and distribution):

    L(t) = log Σ_j p_j e^{u_j t − u_j²/2}  (convex, nondecreasing: the loss of the remove ordering)
    A_rem(α) = E_{N(0,1)}[(dM/dN)^α] = ∫ φ(t) e^{α L(t)} dt,        D_α(M ‖ N) = log A_rem/(α−1)
    A_add(α) = E_M[(dN/dM)^α]      = ∫ φ(t) e^{−(α−1) L(t)} dt,    D_α(N ‖ M) = log A_add/(α−1)

and the curve is max(D_α(M‖N), D_α(N‖M)) (both neighbouring orderings; Mironov 2017 Def. 3).

**The upper bound (proved here, no quadrature error).** The real line is cut into a grid
t_0 < … < t_n; on each interval:

* remove: g = αL is convex, so g lies below its chord; φ(t)e^{a+st} integrates exactly
  (completing the square): ∫_{t_i}^{t_{i+1}} φ(t)e^{a+st} dt = e^{a+s²/2}[Φ(t_{i+1}−s) − Φ(t_i−s)].
* add: g = −(α−1)L is concave, so it lies below its tangent at the midpoint; same integral.
* tails: left of t_0 (remove) and right of t_n (add) the integrand's exponential factor is
  monotone (L nondecreasing): bounded by its value at the grid end, times Φ(t_0) or Φ̄(t_n).
  The other tail by one component alone (add: L ≥ log p_j + u_j t − u_j²/2, so the left tail
  is ≤ p_j^{1−α} e^{α(α−1)u_j²/2} Φ(t_0 + (α−1)u_j) for each j) or by Jensen's inequality, with weights summing to s: (Σ p_j x_j)^α ≤
  s^{α−1} Σ p_j x_j^α (x^α convex), (Σ p_j x_j)^{1−α} ≤ s^{−α} Σ p_j x_j^{1−α} (x^{1−α} convex),
  and ∫_{t_n}^∞ φ e^{α(u t − u²/2)} = e^{α(α−1)u²/2} Φ̄(t_n − αu),
  ∫_{−∞}^{t_0} φ e^{(1−α)(u t − u²/2)} = e^{α(α−1)u²/2} Φ(t_0 + (α−1)u).
* **components split off** (a binomial tail, or any component of negligible weight): with
  M = (1−τ)M_main + τM_off, the joint convexity of (P, Q) ↦ E_Q[(P/Q)^α] (a perspective of
  x^α, α > 1) gives A(M‖N) ≤ (1−τ)A(M_main‖N) + Σ_off p_j e^{α(α−1)u_j²/2} and the same for
  A(N‖M) (N = (1−τ)N + τN); (1−τ)A(M_main‖N) is the integral with the unnormalised main
  weights times (1−τ)^{1−α}, and (1−τ)A(N‖M_main) ≤ the integral with the unnormalised
  weights (M_main ≥ Σ_main p_j N_j pointwise, x^{1−α} decreasing).
* weights: the remove integrand increases with every p_j, the add integrand decreases: the
  remove ordering is evaluated with weights rounded up, the add ordering with weights rounded
  down (so a mixture whose weights do not sum to exactly 1 is covered both ways).

Floating point: every exponent g is moved up by 1e-12·(|g| + 1) before the chord or tangent
is drawn (covering log-sum-exp and the u t products, ~u·|g|), the tangent's slope error by
1e-12·(α−1)·max u·h/2, and the final log A by 1e-9 (log Φ is within 2u relative,
:func:`dpcalc._numerics.log_ndtr`; the Φ differences by log1p of a ratio within ~1e-15; a
sum of ≤ 2·10⁴ positive terms in log-sum-exp). All of these are far below the allowance.

The grid: remove ordering from −12 to α·max u + x (the tilted components sit at α u_j; x ≥ 12
with the Jensen right tail below e^{-40}), 16 points per unit of t, between 512 and 4 096
intervals; add ordering ±12 around the maximum of the concave log-integrand (bracketed on a
grid of its derivative), 256 intervals; both divided by √min(α−1, 1) near α = 1. A coarse grid only
loosens the bound (the chord and the tangent stay valid); the result is also capped by the
all-Jensen bound log(s^{α−1} Σ p_j e^{α(α−1)u_j²/2}), valid for both orderings.

Checked (tests/accounting/test_mixture.py): for two components (1−q, q) at shifts (0, 1/σ)
the curve is within 1e-6 relative above the Poisson-sampled Gaussian's exact RDP (Mironov,
Talwar, Zhang 2019), and above the mpmath integral of a three-component mixture.
"""

from __future__ import annotations

import math

import numpy as np

from dpcalc._numerics import log_ndtr, logsumexp

__all__ = ["rdp_mixture", "log_a_mixture"]

#: a component whose Jensen mass log p_j + α(α−1)u_j²/2 is below this is split off
#: (bounded alone, module docstring): at most e^{-40} each against A ≥ 1
_SPLIT_LOG_MASS = -40.0
_POINTS_PER_UNIT = 16
_MIN_INTERVALS, _MAX_INTERVALS = 512, 4096
_ADD_INTERVALS = 256
_G_SLACK = 1e-12
_FINAL_SLACK = 1e-9


def _near_one(alpha: float) -> float:
    """√min(α − 1, 1): near α = 1 the value log A ~ (α−1)·KL is small and the grid is refined
    by its inverse (the chord and tangent errors do not shrink with α − 1)."""
    return math.sqrt(min(alpha - 1.0, 1.0))


def _log_phi_diff(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """log(Φ(b) − Φ(a)) for a < b elementwise, without cancellation (the smaller tail side)."""
    from scipy.special import (
        log_ndtr as fast_log_ndtr,  # C, ≤ 2.2u (docstring of _numerics.log_ndtr)
    )

    right = a >= 0  # both in the upper half: Φ̄(a) − Φ̄(b)
    hi = fast_log_ndtr(np.where(right, -a, b))
    lo = fast_log_ndtr(np.where(right, -b, a))
    with np.errstate(divide="ignore"):
        return hi + np.log(-np.expm1(np.minimum(lo - hi, 0.0)))


def _loss(t: np.ndarray, u: np.ndarray, logp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """L(t) and L′(t) (module docstring) on a grid t, components (u, log p)."""
    z = logp[:, None] + u[:, None] * t[None, :] - 0.5 * (u * u)[:, None]
    m = np.max(z, axis=0)
    w = np.exp(z - m)
    sw = np.sum(w, axis=0)
    return m + np.log(sw), np.sum(w * u[:, None], axis=0) / sw


def _jensen_terms(u: np.ndarray, logp: np.ndarray, alpha: float) -> np.ndarray:
    return logp + alpha * (alpha - 1.0) * u * u / 2.0


def _log_a_remove(u, logp, alpha: float) -> float:
    s_log = float(logsumexp(logp))
    # the right end: far enough that the Jensen tail, ≤ e^{J − x²/2} with J its largest log mass,
    # is below e^{-40} (A ≥ 1), x the distance beyond the last tilted component
    reach = math.sqrt(2.0 * (max(float(np.max(_jensen_terms(u, logp, alpha))), 0.0) + 40.0))
    lo, hi = -12.0, alpha * float(np.max(u)) + max(reach, 12.0)
    n = int(min(_MAX_INTERVALS, max(_MIN_INTERVALS, math.ceil((hi - lo) * _POINTS_PER_UNIT / _near_one(alpha)))))
    t = np.linspace(lo, hi, n + 1)
    g, _ = _loss(t, u, logp)
    g = alpha * g
    g = g + _G_SLACK * (np.abs(g) + 1.0)
    s = np.diff(g) / np.diff(t)
    a = g[:-1] - s * t[:-1]
    parts = a + s * s / 2.0 + _log_phi_diff(t[:-1] - s, t[1:] - s)
    left = g[0] + log_ndtr(t[0])
    right = (alpha - 1.0) * max(s_log, 0.0) + logsumexp(_jensen_terms(u, logp, alpha) + log_ndtr(alpha * u - t[-1]))
    return float(logsumexp(np.concatenate([parts, [left, right]])))


def _log_a_add(u, logp, alpha: float) -> float:
    s_log = float(logsumexp(logp))
    b = alpha - 1.0

    # f(t) = −t²/2 − (α−1)L(t) is concave; its maximum lies in [−(α−1)·max u, 0], where its
    # derivative −t − (α−1)L′(t) changes sign: bracketed on a grid of 1 025 points
    xs = np.linspace(-b * float(np.max(u)) - 1.0, 1.0, 1025)
    d = -xs - b * _loss(xs, u, logp)[1]
    i = int(np.argmax(d <= 0))  # first point right of the maximum (d decreasing; d[-1] < 0)
    lo, hi = float(xs[max(i - 1, 0)]) - 12.0, float(xs[i]) + 12.0
    n = int(min(_MAX_INTERVALS, math.ceil(_ADD_INTERVALS / _near_one(alpha))))
    t = np.linspace(lo, hi, n + 1)
    h = (hi - lo) / n
    mids = 0.5 * (t[:-1] + t[1:])
    lm, dm = _loss(mids, u, logp)
    g = -b * lm
    g = g + _G_SLACK * (np.abs(g) + 1.0) + _G_SLACK * b * float(np.max(u)) * h / 2.0
    s = -b * dm
    a = g - s * mids
    parts = a + s * s / 2.0 + _log_phi_diff(t[:-1] - s, t[1:] - s)
    l_end, _ = _loss(t[-1:], u, logp)
    right = -b * float(l_end[0]) + _G_SLACK * (b * abs(float(l_end[0])) + 1.0) + log_ndtr(-t[-1])
    # left tail: Jensen, or one component alone (L ≥ log p_j + u_j t − u_j²/2), whichever is smaller
    single = np.min((1.0 - alpha) * logp + _jensen_terms(u, 0.0 * logp, alpha) + log_ndtr(t[0] + b * u))
    left = min(-alpha * min(s_log, 0.0) + logsumexp(_jensen_terms(u, logp, alpha) + log_ndtr(t[0] + b * u)),
               float(single))
    return float(logsumexp(np.concatenate([parts, [left, right]])))


def log_a_mixture(u, log_p_up, log_p_down, alpha: float, direction: str) -> float:
    """An upper bound on log A_α of one ordering (module docstring).

    Args:
        u: shifts in units of σ, c_j/σ ≥ 0 (array of shape (m,)).
        log_p_up: log of upper bounds on the weights (remove ordering), shape (m,).
        log_p_down: log of lower bounds on the weights (add ordering), shape (m,).
        alpha: the order, > 1.
        direction: ``"remove"`` (D_α(M ‖ N)) or ``"add"`` (D_α(N ‖ M)).

    Returns:
        a float ≥ the true log A_α (+∞ when it overflows).
    """
    u = np.asarray(u, dtype=float)
    up = np.asarray(log_p_up, dtype=float)
    down = np.asarray(log_p_down, dtype=float)
    jensen = _jensen_terms(u, up, alpha)  # the split-off and the all-Jensen bounds need p_j's upper bounds
    cap = float(logsumexp(jensen[np.isfinite(jensen)]))
    off = (jensen < _SPLIT_LOG_MASS) & (u > 0)
    logp = (up if direction == "remove" else down)[~off]
    main_u = u[~off][np.isfinite(logp)]
    main_p = logp[np.isfinite(logp)]
    if main_u.size == 0:
        base = -math.inf if direction == "remove" else math.inf
    elif not np.any(main_u > 0):
        ls = float(logsumexp(main_p))
        base = alpha * ls if direction == "remove" else (1.0 - alpha) * ls
    elif direction == "remove":
        base = _log_a_remove(main_u, main_p, alpha)
    else:
        base = _log_a_add(main_u, main_p, alpha)
    if off.any():
        tau = math.exp(float(logsumexp(up[off])))
        if direction == "remove":  # (1−τ)^{1−α} on the main part
            base += (alpha - 1.0) * -math.log1p(-min(tau, 0.5)) if tau < 0.5 else math.inf
        base = float(np.logaddexp(base, float(logsumexp(jensen[off]))))
    out = min(base, cap) + _FINAL_SLACK * (abs(min(base, cap)) + 1.0)
    return out if math.isfinite(out) else math.inf


def rdp_mixture(u, log_p_up, log_p_down, orders) -> np.ndarray:
    """The certified RDP curve of the mixture, max over the two orderings (module docstring).

    Args:
        u: shifts c_j/σ ≥ 0, shape (m,), at least one > 0.
        log_p_up, log_p_down: logs of upper and lower bounds on the weights p_j, shape (m,)
            (−inf for a zero weight).
        orders: Rényi orders α > 1, shape (k,).

    Returns:
        ε(α) ≥ max(D_α(M ‖ N), D_α(N ‖ M)) at each order, shape (k,) (+inf where it overflows).
    """
    orders = np.asarray(orders, dtype=float)
    out = np.empty(orders.shape)
    for i, a in enumerate(orders.reshape(-1)):
        la = max(log_a_mixture(u, log_p_up, log_p_down, float(a), "remove"),
                 log_a_mixture(u, log_p_up, log_p_down, float(a), "add"))
        out.reshape(-1)[i] = max(la, 0.0) / (a - 1.0)
    return out
