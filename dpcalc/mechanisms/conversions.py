r"""Conversions every practitioner looks up: group privacy, amplification by Poisson
subsampling, pure DP → zCDP, zCDP → (ε, δ).

* Group privacy: an (ε, δ)-DP mechanism is (kε, δ·(e^{kε} − 1)/(e^ε − 1))-DP for
  datasets differing in k records (Vadhan 2017, "The complexity of differential
  privacy", Lemma 2.2; pure case Dwork & Roth 2014 Thm 2.2). The δ term
  δ·Σ_{i<k} e^{iε} is tighter than the often quoted k·e^{(k−1)ε}·δ.
* Amplification by Poisson subsampling (Balle, Barthe, Gaboardi 2018, Thm 8): if M
  is (ε, δ)-DP under add/remove adjacency, then M run on a Poisson subsample of
  rate q is (ln(1 + q(e^ε − 1)), q·δ)-DP under add/remove adjacency.
* ε-DP ⇒ (ε²/2)-zCDP (Bun & Steinke 2016, Prop 1.4).
* ρ-zCDP ⇒ (ε, δ)-DP with ε = min_{α>1} αρ + ln((α − 1)/α) − (ln δ + ln α)/(α − 1)
  (Canonne, Kamath, Steinke 2020, Prop 12 / Cor 13), any α giving a valid bound;
  compared with the simpler ρ + 2√(ρ ln(1/δ)) (Bun & Steinke 2016, Prop 1.3).
"""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np

from dpcalc import _validate as v
from dpcalc._numerics import UNIT_ROUNDOFF, minimize_bounded, round_up
from dpcalc._numerics import log_expm1 as _log_expm1
from dpcalc.results import MechanismResult

__all__ = ["group_privacy", "poisson_subsampling", "poisson_amplify", "pure_to_zcdp",
           "zcdp_to_epsilon", "zcdp_to_delta", "zcdp_epsilon", "zcdp_delta", "rdp_pure_dp", "rdp_laplace"]


def group_privacy(*, epsilon: float, delta: float = 0.0, group_size: int) -> MechanismResult:
    r"""(ε, δ)-DP for individuals ⇒ guarantee for groups of ``group_size`` records.

    ε_k = kε, δ_k = δ·(e^{kε} − 1)/(e^ε − 1) (= kδ when ε = 0; capped at 1)
    (Vadhan 2017 Lemma 2.2; Dwork & Roth 2014 Thm 2.2).

    Args:
        epsilon: ε ≥ 0.
        delta: δ in [0, 1].
        group_size: k ≥ 1.

    Returns:
        A result with ``epsilon`` = kε, ``delta`` = δ_k, and the inputs.

    Raises:
        ParameterError: bad parameters.
    """
    epsilon = v.nonnegative("epsilon", epsilon)
    delta = v.closed_unit("delta", delta)
    k = v.count("group_size", group_size)
    if delta == 0:
        dk = 0.0
    elif epsilon == 0:
        dk = k * delta
    else:
        log_dk = math.log(delta) + _log_expm1(k * epsilon) - _log_expm1(epsilon)
        dk = math.exp(log_dk) if log_dk < 1 else math.inf
    vacuous = dk >= 1
    return MechanismResult(
        method="group",
        values={"epsilon": k * epsilon, "delta": min(1.0, dk), "group_size": k,
                "epsilon_individual": epsilon, "delta_individual": delta},
        source="Vadhan 2017 Lemma 2.2; Dwork & Roth 2014 Thm 2.2",
        details={"delta_loose": min(1.0, k * math.exp((k - 1) * epsilon) * delta)
                 if (k - 1) * epsilon < 700 else 1.0,
                 **({"note": "δ ≥ 1: the group guarantee is vacuous"} if vacuous else {})})


def _product_decimal(a: float, b: float) -> str:
    """a·b exactly, reading each as the decimal its shortest ``repr`` shows, as a decimal string.

    The exact value behind :func:`_product_up`'s float: a table prints it (rounded up) so that
    q·δ = 0.01 · 1e-5 shows as 1e-07, not as the float just above it (1.00001e-07).
    """
    with localcontext() as ctx:
        ctx.prec = 80  # two ≤ 17-digit decimals: the product is exact
        return str(Decimal(repr(a)) * Decimal(repr(b)))


def _product_up(a: float, b: float) -> float:
    """a·b exactly, reading each as the decimal its shortest ``repr`` shows (stated parameters,
    docs/design.md §8.2), as the smallest float ≥ the product (at most 1)."""
    exact = Fraction(repr(a)) * Fraction(repr(b))
    x = float(exact)
    if Fraction(x) < exact:
        x = math.nextafter(x, math.inf)
    return min(1.0, x)


def poisson_subsampling(*, epsilon: float, delta: float = 0.0, sample_rate: float) -> MechanismResult:
    r"""Amplification by Poisson subsampling (Balle, Barthe, Gaboardi 2018, Thm 8).

    (ε, δ)-DP ⇒ (ln(1 + q(e^ε − 1)), q·δ)-DP for the mechanism run on a subsample that
    includes each record independently with probability q (add/remove adjacency).

    Args:
        epsilon: ε ≥ 0 of the mechanism on its input.
        delta: δ in [0, 1].
        sample_rate: q in (0, 1].

    Returns:
        A result with the amplified ``epsilon`` and ``delta``.

    Raises:
        ParameterError: bad parameters.
    """
    epsilon = v.nonnegative("epsilon", epsilon)
    delta = v.closed_unit("delta", delta)
    q = v.half_open_unit("sample_rate", sample_rate)
    eps_q = float(poisson_amplify(epsilon, q))
    return MechanismResult(
        method="subsample",
        values={"epsilon": eps_q, "delta": _product_up(q, delta), "sample_rate": q,
                "epsilon_base": epsilon, "delta_base": delta},
        source="Balle, Barthe, Gaboardi 2018, Thm 8 (Poisson, add/remove)",
        details={"delta_decimal": _product_decimal(q, delta)})


def poisson_amplify(epsilon, sample_rate: float):
    r"""ε of a mechanism run on a Poisson subsample: ln(1 + q(e^ε − 1)) (Balle, Barthe,
    Gaboardi 2018, Thm 8; add/remove adjacency), elementwise, rounded up.

    The one implementation of the formula (``poisson_subsampling`` and the generic view of
    ``dpcalc compose`` call it). For ε ≤ 700 it is evaluated as log1p(q·expm1(ε)) (each step
    within u relative, no cancellation — the form ε + ln(q + (1 − q)e^{−ε}) cancels badly
    when q·e^ε is small); beyond, where e^ε overflows, as ε + ln(q + (1 − q)e^{−ε}) with its
    absolute error (≤ 4u·ε) added. The result is rounded up by 16 u
    (``_numerics.round_up``). q = 1 returns ε unchanged (exact).

    Args:
        epsilon: ε ≥ 0 of the mechanism on its input, scalar or array (any shape).
        sample_rate: q in (0, 1] (not validated here; callers validate once).

    Returns:
        The amplified ε, same shape as ``epsilon`` (a float for a scalar input).
    """
    eps = np.asarray(epsilon, dtype=float)
    q = float(sample_rate)
    if q == 1.0:
        return eps if eps.ndim else float(eps)
    with np.errstate(over="ignore"):
        small = np.log1p(q * np.expm1(np.minimum(eps, 700.0)))
        big = eps + np.log(q + (1.0 - q) * np.exp(-np.maximum(eps, 700.0))) + 4 * UNIT_ROUNDOFF * eps
    out = round_up(np.where(eps > 700.0, big, small), 16)
    return out if out.ndim else float(out)


def pure_to_zcdp(*, epsilon: float) -> MechanismResult:
    r"""ε-DP ⇒ ρ-zCDP with ρ = ε²/2 (Bun & Steinke 2016, Prop 1.4).

    Args:
        epsilon: ε ≥ 0 of a pure-DP mechanism.

    Returns:
        A result with ``rho``.

    Raises:
        ParameterError: ε < 0 or not finite.
    """
    epsilon = v.nonnegative("epsilon", epsilon)
    return MechanismResult(method="pure-to-zcdp", values={"epsilon": epsilon, "rho": epsilon * epsilon / 2},
                           source="Bun & Steinke 2016, Prop 1.4")


#: the orders α of the vectorised zCDP conversions: α − 1 = e^t for 4001 t in [−20, 30]
#: (the optimum α ≈ 1 + √(ln(1/δ)/ρ) stays inside for ρ from ~1e-22 to ~1e8)
_ZCDP_ALPHAS = 1.0 + np.exp(np.linspace(-20.0, 30.0, 4001))


def _cks_epsilon(alpha, rho, log_delta):
    """CKS 2020 Prop 12 with ε(α) = αρ (broadcasting)."""
    return alpha * rho + np.log1p(-1.0 / alpha) - (log_delta + np.log(alpha)) / (alpha - 1.0)


def _cks_log_delta(alpha, rho, epsilon):
    """CKS 2020 Prop 12 solved for ln δ with ε(α) = αρ (broadcasting)."""
    return (alpha - 1.0) * (alpha * rho - epsilon) + (alpha - 1.0) * np.log1p(-1.0 / alpha) - np.log(alpha)


def _min_over_orders(vals, rho, f, refine: bool):
    """Per row of ``vals`` (shape (m, len(_ZCDP_ALPHAS)): ``f`` at every order for each ρ), the
    minimum over the grid of orders, then — with ``refine`` — Brent's bounded minimisation of
    ``f(α, ρ)`` in ln(α − 1) between the grid neighbours of each minimum (every α gives a valid
    bound, so any minimum found is certified). Returns ``(values, orders)``, shapes (m,)."""
    a = _ZCDP_ALPHAS
    i = np.argmin(vals, axis=1)
    best = vals[np.arange(rho.size), i]
    order = a[i].copy()
    if refine:
        for j in range(rho.size):
            if not (rho[j] > 0 and math.isfinite(best[j])):
                continue
            lo, hi = math.log(a[max(i[j] - 1, 0)] - 1.0), math.log(a[min(i[j] + 1, a.size - 1)] - 1.0)
            t, ft = minimize_bounded(lambda t, rj=float(rho[j]): float(f(1.0 + math.exp(t), rj)), lo, hi,
                                     xatol=1e-10)
            if ft < best[j]:
                best[j], order[j] = ft, 1.0 + math.exp(t)
    return best, order


def zcdp_epsilon(rho, delta: float, *, refine: bool = True) -> tuple[np.ndarray, np.ndarray]:
    r"""ρ-zCDP ⇒ (ε, δ)-DP for many ρ at once (Canonne, Kamath, Steinke 2020, Prop 12):
    ε = min_{α>1} αρ + ln(1 − 1/α) − (ln δ + ln α)/(α − 1), floored at 0, rounded up.

    Every α gives a valid bound, so the minimum over any set of orders is certified: first
    over :data:`_ZCDP_ALPHAS` (α − 1 from e⁻²⁰ to e³⁰, log-spaced), then — with ``refine``
    — by Brent's bounded method (``_numerics.minimize_bounded``) between the grid neighbours
    of each minimum. The result is rounded up by 64 u (a handful of operations on terms of
    size ≤ the result plus ln(1/δ)/(α − 1)). ρ = 0 gives ε = 0 (order ``nan``).

    Args:
        rho: ρ ≥ 0, scalar or array of shape (m,).
        delta: δ in (0, 1) (not validated here).
        refine: refine each minimum between grid orders (scalar loop; False for many ρ).

    Returns:
        ``(epsilon, order)``, each of shape (m,) (ε ≥ 0; the order attaining it).
    """
    r = np.atleast_1d(np.asarray(rho, dtype=float))
    ld = math.log(delta)
    a = _ZCDP_ALPHAS
    with np.errstate(over="ignore", invalid="ignore"):
        vals = _cks_epsilon(a[None, :], r[:, None], ld)
    eps, order = _min_over_orders(vals, r, lambda al, rj: _cks_epsilon(al, rj, ld), refine)
    eps = round_up(np.maximum(eps, 0.0), 64)
    zero = r == 0
    return np.where(zero, 0.0, eps), np.where(zero, np.nan, order)


def zcdp_delta(rho, epsilon: float, *, refine: bool = True) -> tuple[np.ndarray, np.ndarray]:
    r"""ρ-zCDP ⇒ δ at ε for many ρ at once (CKS 2020 Prop 12 solved for δ):
    ln δ = min_{α>1} (α − 1)(αρ − ε) + (α − 1) ln(1 − 1/α) − ln α, capped at δ = 1.

    Same orders, refinement and validity argument as :func:`zcdp_epsilon`; ln δ is rounded
    up by 64 u of its terms' size and δ by 16 u more. ρ = 0 gives δ = 0.

    Args:
        rho: ρ ≥ 0, scalar or array of shape (m,).
        epsilon: ε ≥ 0 (not validated here).
        refine: refine each minimum between grid orders.

    Returns:
        ``(delta, order)``, each of shape (m,) (δ in [0, 1]).
    """
    r = np.atleast_1d(np.asarray(rho, dtype=float))
    e = float(epsilon)
    a = _ZCDP_ALPHAS
    with np.errstate(over="ignore", invalid="ignore"):
        vals = _cks_log_delta(a[None, :], r[:, None], e)
    vals = np.where(np.isnan(vals), np.inf, vals)
    logd, order = _min_over_orders(vals, r, lambda al, rj: _cks_log_delta(al, rj, e), refine)
    # error of ln δ: 64 u of the size of its terms ((α−1)(αρ + ε) + ln α)
    scale = (order - 1.0) * (order * r + e) + np.log(order)
    with np.errstate(over="ignore", invalid="ignore"):
        logd = logd + 64 * 2.0 ** -52 * np.where(np.isfinite(scale), scale, 0.0)
        d = np.minimum(1.0, round_up(np.exp(np.minimum(logd, 0.0)), 16))
    zero = r == 0
    return np.where(zero, 0.0, d), np.where(zero, np.nan, order)


def zcdp_to_epsilon(*, rho: float, delta: float) -> MechanismResult:
    r"""ρ-zCDP ⇒ (ε, δ)-DP by the conversion of Canonne, Kamath, Steinke 2020 (Prop 12/Cor 13).

    ε = min_{α>1} αρ + ln(1 − 1/α) − (ln δ + ln α)/(α − 1) (:func:`zcdp_epsilon`). Every α
    gives a valid bound, so the numerically minimised value is certified; the minimising α
    is reported. ``details.epsilon_bun_steinke`` = ρ + 2√(ρ ln(1/δ)) (Bun & Steinke 2016
    Prop 1.3), never smaller.

    Args:
        rho: ρ > 0.
        delta: δ in (0, 1).

    Returns:
        A result with ``epsilon``, ``delta``, ``rho`` and ``details.order``.

    Raises:
        ParameterError: bad parameters.
    """
    rho = v.positive("rho", rho)
    delta = v.open_unit("delta", delta)
    eps, order = zcdp_epsilon(rho, delta)
    bs = rho + 2 * math.sqrt(rho * math.log(1 / delta))
    return MechanismResult(
        method="zcdp-to-dp", values={"rho": rho, "delta": delta, "epsilon": float(eps[0])},
        source="Canonne, Kamath, Steinke 2020, Prop 12 / Cor 13",
        details={"order": float(order[0]), "epsilon_bun_steinke": bs})


def zcdp_to_delta(*, rho: float, epsilon: float) -> MechanismResult:
    r"""ρ-zCDP ⇒ δ at ε (Canonne, Kamath, Steinke 2020, Prop 12 solved for δ; :func:`zcdp_delta`).

    Args:
        rho: ρ > 0.
        epsilon: ε ≥ 0.

    Returns:
        A result with ``delta``, ``epsilon``, ``rho`` and ``details.order``.

    Raises:
        ParameterError: bad parameters.
    """
    rho = v.positive("rho", rho)
    epsilon = v.nonnegative("epsilon", epsilon)
    d, order = zcdp_delta(rho, epsilon)
    return MechanismResult(
        method="zcdp-to-dp", values={"rho": rho, "epsilon": epsilon, "delta": float(d[0])},
        source="Canonne, Kamath, Steinke 2020, Prop 12 / Cor 13",
        details={"order": float(order[0])})


# ----------------------------------------------------------------------------- RDP of pure mechanisms
def _log1p_sum(t1: np.ndarray, t2: np.ndarray, lm1: np.ndarray) -> np.ndarray:
    """ln(1 + t₁ + t₂)/(λ−1) moved up by the rounding of t₁ + t₂ (which may cancel: 4u(|t₁|+|t₂|)
    absolute, each tᵢ within 2u of its value) and of log1p and the division (factor 1 + 4u·2)."""
    s = t1 + t2 + 4.0 * UNIT_ROUNDOFF * (np.abs(t1) + np.abs(t2))
    return np.log1p(np.maximum(s, 0.0)) / lm1 * (1.0 + 8.0 * UNIT_ROUNDOFF)


def rdp_pure_dp(epsilon: float, orders) -> np.ndarray:
    r"""RDP of randomized response with p = e^ε/(1+e^ε) — the largest RDP of any ε-DP mechanism
    (Kairouz, Oh, Viswanath 2015 Thm 2.1 and data processing; Mironov 2017 Table 2) — capped at
    min(ε, λε²/2) (Bun & Steinke 2016 Prop 3.3), evaluated without cancellation:
    e^{(λ−1)ε(λ)} − 1 = p·expm1(ε(λ−1)) + (1−p)·expm1(−ε(λ−1)), then ``log1p``; rounded up.

    Args:
        epsilon: ε ≥ 0.
        orders: λ > 1, shape (n,).

    Returns:
        An upper bound on ε(λ), shape (n,) (0 for ε = 0).

    Raises:
        ParameterError: ε negative or not finite.
    """
    e = v.nonnegative("epsilon", epsilon)
    a = np.asarray(orders, dtype=float)
    if e == 0.0:
        return np.zeros_like(a)
    lm1 = a - 1.0
    p = 1.0 / (1.0 + math.exp(-e)) if e < 700 else 1.0
    with np.errstate(over="ignore", invalid="ignore"):
        rr = _log1p_sum(p * np.expm1(e * lm1), (1.0 - p) * np.expm1(-e * lm1), lm1)
        # large ε(λ−1): ln S = logaddexp(ln p + ε(λ−1), ln(1−p) − ε(λ−1)) (no cancellation, no overflow)
        big = np.logaddexp(-np.logaddexp(0.0, -e) + e * lm1, -np.logaddexp(0.0, e) - e * lm1)
        big = (big + 4.0 * UNIT_ROUNDOFF * (np.abs(e * lm1) + 2.0)) / lm1 * (1.0 + 4 * UNIT_ROUNDOFF)
        rr = np.where(e * lm1 > 1.0, big, rr)
    return np.minimum(np.minimum(rr, e * (1.0 + 2 * UNIT_ROUNDOFF)), a * (e * e / 2.0) * (1.0 + 4 * UNIT_ROUNDOFF))


def rdp_laplace(scale: float, orders) -> np.ndarray:
    r"""RDP of the Laplace mechanism of scale b with a shift of 1 (Mironov 2017 Table 2):
    e^{(λ−1)ε(λ)} − 1 = [λ·expm1((λ−1)/b) + (λ−1)·expm1(−λ/b)]/(2λ−1) (the leading terms cancel
    for b ≫ λ; the rounding is covered), then ``log1p``; capped at 1/b; rounded up.

    Args:
        scale: b > 0 (in units of the L1 sensitivity).
        orders: λ > 1, shape (n,).

    Returns:
        An upper bound on ε(λ), shape (n,).

    Raises:
        ParameterError: b not positive and finite.
    """
    b = v.positive("scale", scale)
    a = np.asarray(orders, dtype=float)
    lm1 = a - 1.0
    d = 2.0 * a - 1.0
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        lap = _log1p_sum(a * np.expm1(lm1 / b) / d, lm1 * np.expm1(-a / b) / d, lm1)
        big = np.logaddexp(np.log(a / d) + lm1 / b, np.log(lm1 / d) - a / b)
        big = (big + 4.0 * UNIT_ROUNDOFF * (np.abs(lm1 / b) + np.abs(a / b) + np.abs(np.log(lm1 / d)) + 2.0)) / lm1 \
            * (1.0 + 4 * UNIT_ROUNDOFF)
        lap = np.where(lm1 / b > 1.0, big, lap)
    return np.minimum(lap, (1.0 / b) * (1.0 + 2 * UNIT_ROUNDOFF))
