r"""RDP curves of single (unsampled) mechanisms: Gaussian, Laplace, pure ε-DP, ε-bounded range.

* Gaussian mechanism with noise multiplier σ (std / L2 sensitivity): ε(α) = α/(2σ²)
  (Mironov 2017, Prop. 7).
* Laplace mechanism with scale b (Mironov 2017, Table 2):
  ε(α) = log(α/(2α−1)·e^{(α−1)/b} + (α−1)/(2α−1)·e^{−α/b})/(α−1).
* Pure ε-DP mechanism (``EpsilonDeltaEvent`` with δ = 0): the RDP of randomized
  response with p = e^ε/(1+e^ε) (Mironov 2017, Table 2), valid for every ε-DP mechanism
  because randomized response dominates it (Kairouz, Oh, Viswanath 2015, Thm 2.1) and
  Rényi divergence obeys data processing. It is ≤ min(ε, αε²/2) (Bun & Steinke 2016, Prop. 3.3).
* ε-bounded-range mechanism (``ExponentialMechanismEvent``, e.g. the exponential
  mechanism): ε(α) = min(αε²/8, the randomized-response curve above) — αε²/8 from its
  (ε²/8)-zCDP (Cesar & Rogers 2021; Hoeffding's lemma on a loss of range ε, see
  :mod:`dpcalc.accounting.zcdp`), and ε-BR ⇒ ε-DP (Dong, Durfee, Rogers 2020 §2) for the
  second. The ε is the mechanism's stated guarantee under either adjacency.

The Poisson-sampled Gaussian is in :mod:`dpcalc.accounting.sampled_gaussian_rdp`, the other
batch samplers in :mod:`dpcalc.accounting._sampling_rdp`.
"""

from __future__ import annotations

import numpy as np

from dpcalc import _validate as v
from dpcalc.accounting.rdp_conversion import as_orders
from dpcalc.mechanisms.conversions import rdp_laplace as _rdp_laplace
from dpcalc.mechanisms.conversions import rdp_pure_dp as _rdp_pure_dp

__all__ = ["rdp_gaussian", "rdp_laplace", "rdp_pure_dp", "rdp_bounded_range"]


def rdp_gaussian(*, noise_multiplier: float, orders) -> np.ndarray:
    r"""RDP of the Gaussian mechanism: ε(α) = α/(2σ²) (Mironov 2017, Prop. 7).

    Args:
        noise_multiplier: σ, noise std divided by the L2 sensitivity; > 0.
        orders: Rényi orders α > 1, shape (m,).

    Returns:
        ε(α) for each order, shape (m,).

    Raises:
        ParameterError: σ ≤ 0 or an order ≤ 1.
    """
    sigma = v.positive("noise_multiplier", noise_multiplier)
    a = as_orders(orders)
    return a / (2.0 * sigma * sigma)


def rdp_laplace(*, scale: float, orders) -> np.ndarray:
    r"""RDP of the Laplace mechanism with scale b (in units of the L1 sensitivity).

    ε(α) = log(α/(2α−1)·e^{(α−1)/b} + (α−1)/(2α−1)·e^{−α/b})/(α − 1)
    (Mironov 2017, Table 2 / Prop. 6), capped at the pure ε = 1/b; evaluated without
    cancellation and rounded up (:func:`dpcalc.mechanisms.conversions.rdp_laplace`).

    Args:
        scale: b/Δ₁ > 0.
        orders: Rényi orders α > 1, shape (m,).

    Returns:
        ε(α), shape (m,).
    """
    return _rdp_laplace(v.positive("scale", scale), as_orders(orders))


def rdp_pure_dp(*, epsilon: float, orders) -> np.ndarray:
    r"""RDP of any ε-DP mechanism: that of randomized response, p = e^ε/(1+e^ε).

    ε(α) = log(p^α(1−p)^{1−α} + (1−p)^α p^{1−α})/(α − 1) (Mironov 2017, Table 2);
    valid for every ε-DP mechanism since randomized response dominates it (Kairouz, Oh,
    Viswanath 2015, Thm 2.1) and Rényi divergence satisfies data processing. Capped at
    min(ε, αε²/2) (Bun & Steinke 2016, Prop. 3.3); evaluated without cancellation and rounded
    up (:func:`dpcalc.mechanisms.conversions.rdp_pure_dp`).

    Args:
        epsilon: ε ≥ 0.
        orders: Rényi orders α > 1, shape (m,).

    Returns:
        ε(α), shape (m,).
    """
    return _rdp_pure_dp(v.nonnegative("epsilon", epsilon), as_orders(orders))


def rdp_bounded_range(*, epsilon: float, orders) -> np.ndarray:
    r"""RDP of any ε-bounded-range mechanism (e.g. the exponential mechanism).

    ε(α) = min(αε²/8, :func:`rdp_pure_dp` (ε)): an ε-BR mechanism is (ε²/8)-zCDP (Cesar &
    Rogers 2021: Hoeffding's lemma on a privacy loss of range ε) and ε-DP (Dong, Durfee,
    Rogers 2020 §2).

    Args:
        epsilon: ε > 0, the width of the privacy-loss range.
        orders: Rényi orders α > 1, shape (m,).

    Returns:
        ε(α), shape (m,).
    """
    eps = v.positive("epsilon", epsilon)
    a = as_orders(orders)
    return np.minimum(a * (eps * eps / 8.0), rdp_pure_dp(epsilon=eps, orders=a))

