r"""Rényi orders and the one RDP → (ε, δ) conversion (public: every module converting an RDP
curve uses these names).

* Orders: :data:`DEFAULT_ORDERS` (16 fractional orders in [1.01, 1.75], integers 2…256) and
  :func:`as_orders`, the validation of a user's orders (each in (1, :data:`MAX_ORDER`]).
* RDP → (ε, δ) (Canonne, Kamath, Steinke 2020, Prop. 12; Balle et al. 2020, Thm 21):
  ε = ε(α) + log((α−1)/α) − (log δ + log α)/(α − 1), minimised over orders; and ε = 0
  when δ ≥ √(1 − e^{−ε(α)}) (total variation ≤ √(1 − e^{−KL}), Bretagnolle–Huber, with
  KL ≤ ε(α)), as in TF Privacy / dp_accounting. :func:`epsilon_per_order` and
  :func:`log_delta_per_order` give the bound at each order (vectorised, for callers that
  minimise themselves, e.g. over a refined order); :func:`epsilon_from_rdp` and
  :func:`delta_from_rdp` the minimum over the orders given.
"""

from __future__ import annotations

import math

import numpy as np

from dpcalc import _validate as v
from dpcalc.errors import ParameterError

__all__ = [
    "DEFAULT_ORDERS",
    "MAX_ORDER",
    "CONVERSION_SOURCE",
    "as_orders",
    "epsilon_per_order",
    "log_delta_per_order",
    "conversion_floor",
    "epsilon_from_rdp",
    "delta_from_rdp",
]


def _default_orders() -> tuple[float, ...]:
    frac = 1.0 + np.geomspace(0.01, 1.0, 17)[:-1]  # 1.01 ... 1.75, denser near 1
    ints = [*range(2, 33), *range(34, 65, 2), *range(68, 129, 4), *range(136, 257, 8)]
    return tuple(float(x) for x in frac) + tuple(float(x) for x in ints)


#: Default Rényi orders: 16 fractional orders in [1.01, 1.75] and integer orders
#: 2…256 (every integer to 32, then steps of 2, 4, 8). The optimum is then refined
#: between its neighbours, so results do not depend on this grid's spacing.
DEFAULT_ORDERS: tuple[float, ...] = _default_orders()

#: largest Rényi order accepted (bounds the memory of the integer-order tables)
MAX_ORDER = 10_000

#: the citation of the conversion
CONVERSION_SOURCE = "Canonne, Kamath, Steinke 2020 Prop 12"


def as_orders(orders, name: str = "orders") -> np.ndarray:
    """Rényi orders as a float array, validated.

    Args:
        orders: a number or a sequence of numbers, each in (1, :data:`MAX_ORDER`].
        name: the parameter's name in the error message.

    Returns:
        The orders, shape (m,), m ≥ 1 (in the order given).

    Raises:
        ParameterError: not numbers, empty, or an order outside (1, MAX_ORDER].
    """
    try:
        a = np.atleast_1d(np.asarray(orders, dtype=float))
    except (TypeError, ValueError):
        raise ParameterError(name, "a sequence of numbers > 1", orders) from None
    if a.ndim != 1 or a.size == 0 or not np.all(a > 1) or not np.all(a <= MAX_ORDER):
        raise ParameterError(name, f"a non-empty sequence of numbers in (1, {MAX_ORDER}]", orders)
    return a


def epsilon_per_order(orders: np.ndarray, rdp: np.ndarray, log_delta: float) -> np.ndarray:
    """ε at δ for each order (CKS 2020 Prop 12, with the total-variation shortcut), floored at 0.

    Args:
        orders: Rényi orders α > 1 (not validated), any shape broadcasting with ``rdp``.
        rdp: ε(α) ≥ 0 (``inf`` allowed).
        log_delta: ln δ, δ in (0, 1).

    Returns:
        ε per order, the broadcast shape; ``inf`` where ``rdp`` is ``inf``, never NaN.
    """
    a = orders
    with np.errstate(invalid="ignore", over="ignore"):
        eps = rdp + np.log1p(-1.0 / a) - (log_delta + np.log(a)) / (a - 1.0)
        # total variation ≤ sqrt(1 − exp(−KL)) ≤ δ  ⇒  ε = 0 (KL ≤ D_α)
        tv_ok = math.exp(2.0 * log_delta) + np.expm1(-rdp) >= 0
    eps = np.where(tv_ok, 0.0, eps)
    eps = np.where(np.isnan(eps), np.inf, eps)
    return np.maximum(eps, 0.0)


def log_delta_per_order(orders: np.ndarray, rdp: np.ndarray, epsilon) -> np.ndarray:
    """ln δ at ε for each order: the minimum of CKS 2020 Prop 12 inverted,
    ln δ = (α−1)(ε(α) − ε + ln(1 − 1/α)) − ln α, and the total-variation bound ½ ln(1 − e^{−ε(α)}).

    Args:
        orders: Rényi orders α > 1 (not validated), any shape broadcasting with ``rdp``.
        rdp: ε(α) ≥ 0 (``inf`` allowed).
        epsilon: ε ≥ 0 (a float, or an array broadcasting with the others).

    Returns:
        ln δ per order, ≤ 0, the broadcast shape.
    """
    a = orders
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        cks = (a - 1.0) * (rdp - epsilon + np.log1p(-1.0 / a)) - np.log(a)
        tv = 0.5 * np.log(-np.expm1(-rdp))
        out = np.minimum(cks, tv)
    out = np.where(np.isnan(out), 0.0, out)
    return np.minimum(out, 0.0)


def conversion_floor(orders: np.ndarray, log_delta: float) -> np.ndarray:
    """The cost-free part of the CKS conversion at each order, ln(1 − 1/α) − (ln δ + ln α)/(α − 1):
    :func:`epsilon_per_order` is this plus ε(α) (unless the total-variation shortcut gives 0).

    Args:
        orders: Rényi orders α > 1 (not validated).
        log_delta: ln δ, δ in (0, 1).
    """
    return np.log1p(-1.0 / orders) - (log_delta + np.log(orders)) / (orders - 1.0)


def _curve(orders, rdp) -> tuple[np.ndarray, np.ndarray]:
    """Validated (orders, RDP values) of one curve, both shape (m,)."""
    a = as_orders(orders)
    r = np.asarray(rdp, dtype=float)
    if r.shape != a.shape or np.any(np.isnan(r)) or np.any(r < 0):
        raise ParameterError("rdp", "non-negative, one value per order", rdp)
    return a, r


def epsilon_from_rdp(*, orders, rdp, delta: float) -> tuple[float, float]:
    r"""Smallest ε over the given orders for an RDP curve, at δ.

    ε = min_α ε(α) + log((α−1)/α) − (log δ + log α)/(α − 1) (Canonne, Kamath, Steinke
    2020, Prop. 12; Balle et al. 2020, Thm 21), and 0 when δ ≥ √(1 − e^{−ε(α)}).

    Args:
        orders: Rényi orders α > 1, shape (m,).
        rdp: ε(α), shape (m,) (``inf`` entries are ignored).
        delta: δ in (0, 1).

    Returns:
        ``(epsilon, order)``: the minimum (≥ 0; ``inf`` if every order is ``inf``) and the
        order attaining it.

    Raises:
        ParameterError: bad ``delta``, orders or mismatched shapes.
    """
    a, r = _curve(orders, rdp)
    d = v.open_unit("delta", delta)
    eps = epsilon_per_order(a, r, math.log(d))
    i = int(np.argmin(eps))
    return float(eps[i]), float(a[i])


def delta_from_rdp(*, orders, rdp, epsilon: float) -> tuple[float, float]:
    r"""Smallest δ over the given orders for an RDP curve, at ε (CKS 2020 Prop. 12 inverted):
    log δ = (α−1)(ε(α) − ε + log(1 − 1/α)) − log α, or the TV bound √(1 − e^{−ε(α)}).

    Args:
        orders: Rényi orders α > 1, shape (m,).
        rdp: ε(α), shape (m,).
        epsilon: ε ≥ 0.

    Returns:
        ``(delta, order)`` with δ in [0, 1].

    Raises:
        ParameterError: bad ``epsilon``, orders or mismatched shapes.
    """
    a, r = _curve(orders, rdp)
    e = v.nonnegative("epsilon", epsilon)
    ld = log_delta_per_order(a, r, e)
    i = int(np.argmin(ld))
    return float(math.exp(ld[i])), float(a[i])
