r"""The Laplace mechanism: scale for a privacy target, accuracy, and the inverse.

Adding independent Lap(b) noise to each of the k coordinates of a query of L1
sensitivity Δ₁ is ε-DP for b = Δ₁/ε (Dwork, McSherry, Nissim, Smith 2006;
Dwork & Roth 2014 Thm 3.6). Accuracy (DR14 Thm 3.8): Pr[‖f(x) − y‖∞ ≥ ln(k/β)·b] ≤ β.
Since the coordinates are independent and Pr[|Y| ≥ t·b] = e^{−t}, the exact
ℓ∞ quantile is α = b·ln(1/(1 − (1 − β)^{1/k})) (never above the theorem's bound).
"""

from __future__ import annotations

import math

from dpcalc import _validate as v
from dpcalc.results import MechanismResult

__all__ = ["laplace_scale", "laplace_accuracy", "calibrate_laplace", "laplace_epsilon_for_accuracy"]

SOURCE = "Dwork & Roth 2014, Thm 3.6 / 3.8"


def laplace_scale(*, epsilon: float, sensitivity: float = 1.0) -> float:
    r"""b = Δ₁/ε, the Laplace scale giving ε-DP (Dwork & Roth 2014, Thm 3.6).

    Args:
        epsilon: ε > 0.
        sensitivity: Δ₁ > 0, the L1 sensitivity.

    Returns:
        b, the scale (std = √2·b), in the query's units.

    Raises:
        ParameterError: ε ≤ 0 or Δ₁ ≤ 0 (or not finite).
    """
    epsilon = v.positive("epsilon", epsilon)
    sensitivity = v.positive("sensitivity", sensitivity)
    return sensitivity / epsilon


def laplace_accuracy(*, scale: float, beta: float, dims: int = 1) -> dict:
    r"""ℓ∞ error bounds of k independent Lap(b) noises at confidence 1 − β.

    Args:
        scale: b > 0.
        beta: β in (0, 1).
        dims: k ≥ 1.

    Returns:
        dict with ``accuracy`` = b·ln(k/β) (Dwork & Roth 2014 Thm 3.8: Pr[‖Y‖∞ ≥ α] ≤ β) and
        ``accuracy_exact`` = b·ln(1/(1 − (1 − β)^{1/k})) (Pr[‖Y‖∞ ≥ α] = β exactly; equal
        to the theorem's bound for k = 1).

    Raises:
        ParameterError: bad b, β or k.
    """
    b = v.positive("scale", scale)
    beta = v.open_unit("beta", beta)
    k = v.count("dims", dims)
    p = -math.expm1(math.log1p(-beta) / k)  # per-coordinate tail probability
    return {"accuracy": b * math.log(k / beta), "accuracy_exact": b * -math.log(p)}


def calibrate_laplace(
    *, epsilon: float, sensitivity: float = 1.0, beta: float | None = None, dims: int = 1
) -> MechanismResult:
    r"""The Laplace mechanism for ε-DP: scale, noise std and (with β) the ℓ∞ accuracy.

    Args:
        epsilon: ε > 0.
        sensitivity: Δ₁ > 0 (L1 sensitivity of the whole k-dimensional query).
        beta: optional failure probability β in (0, 1) for the accuracy bound.
        dims: k ≥ 1 noisy coordinates (accuracy only).

    Returns:
        A result with ``epsilon``, ``delta`` (0), ``sensitivity``, ``scale`` (b),
        ``noise_std`` (√2·b) and, with β, ``accuracy`` (DR14 Thm 3.8) and
        ``details.accuracy_exact``.

    Raises:
        ParameterError: bad parameters.
    """
    b = laplace_scale(epsilon=epsilon, sensitivity=sensitivity)
    dims = v.count("dims", dims)
    values = {"epsilon": float(epsilon), "delta": 0.0, "sensitivity": float(sensitivity),
              "scale": b, "noise_std": math.sqrt(2) * b}
    details: dict = {}
    if beta is not None:
        acc = laplace_accuracy(scale=b, beta=beta, dims=dims)
        values["accuracy"] = acc["accuracy"]
        values["beta"] = float(beta)
        values["dims"] = dims
        details["accuracy_exact"] = acc["accuracy_exact"]
    return MechanismResult(method="laplace", values=values, source=SOURCE, details=details)


def laplace_epsilon_for_accuracy(
    *, accuracy: float, beta: float, sensitivity: float = 1.0, dims: int = 1
) -> MechanismResult:
    r"""The ε needed for ‖error‖∞ < α with probability ≥ 1 − β: ε = Δ₁·ln(k/β)/α.

    Inverse of Dwork & Roth 2014 Thm 3.8 (b = α/ln(k/β), ε = Δ₁/b). ``details`` also
    gives ``epsilon_exact`` from the exact quantile (smaller for k > 1).

    Args:
        accuracy: α > 0.
        beta: β in (0, 1).
        sensitivity: Δ₁ > 0.
        dims: k ≥ 1.

    Returns:
        A result with ``epsilon``, ``scale``, ``noise_std``, ``accuracy``, ``beta``, ``dims``.

    Raises:
        ParameterError: bad parameters.
    """
    accuracy = v.positive("accuracy", accuracy)
    beta = v.open_unit("beta", beta)
    sensitivity = v.positive("sensitivity", sensitivity)
    k = v.count("dims", dims)
    unit = laplace_accuracy(scale=1.0, beta=beta, dims=k)
    b = accuracy / unit["accuracy"]
    values = {"epsilon": sensitivity / b, "delta": 0.0, "sensitivity": sensitivity, "scale": b,
              "noise_std": math.sqrt(2) * b, "accuracy": accuracy, "beta": beta, "dims": k}
    details = {"epsilon_exact": sensitivity * unit["accuracy_exact"] / accuracy}
    return MechanismResult(method="laplace", values=values, source=SOURCE, details=details)
