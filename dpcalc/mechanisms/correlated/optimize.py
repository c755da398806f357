r"""``--optimize banded --bands b``: the banded Toeplitz strategy with the least prefix-sum error.

Objective (McKenna 2024, "Scaling up the banded matrix factorization mechanism", §3; the loss
of jax_privacy ``toeplitz.optimize_banded_toeplitz`` for the mean error): over b-banded
lower-triangular Toeplitz C with first column c (c_0 = 1: the product is scale invariant),

.. math::

    \min_c\; Δ(c)² · ‖A C^{-1}‖_F², \qquad Δ(c)² = k'·‖c‖², \qquad
    ‖A C^{-1}‖_F² = \sum_{j<n} (n − j)\, β_j², \quad β = C^{-1}·1,

with k' = the number of participations (Δ² is exact when b ≤ the min-separation: the columns
of one record's steps are orthogonal). Minimised in log form by L-BFGS-B
(``scipy.optimize``) with the exact gradient and each c_m in [−1, 1] (an adjoint solve: ∂‖·‖²/∂c_m =
−2 Σ_t λ_t β_{t−m}, λ = C^{−T}(w∘β), w_j = n − j), started at the banded square root. The
optimiser only chooses C; its privacy is then computed like any other strategy's, so a poor
optimum costs error, never privacy.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize

from dpcalc import _validate as v
from dpcalc.errors import ParameterError
from dpcalc.mechanisms.correlated.error import causal_filter
from dpcalc.mechanisms.correlated.strategies import (
    Participation,
    ToeplitzStrategy,
    banded_strategy,
    sqrt_coefficients,
)

__all__ = ["optimize_banded", "banded_objective"]

_ONE = np.ones(1)  # the numerator of 1/C(x)


def banded_objective(coefs, steps: int) -> tuple[float, np.ndarray]:
    """‖A C⁻¹‖_F² of the Toeplitz C with first column ``coefs`` and its gradient.

    Args:
        coefs: c, shape (b,), c_0 ≠ 0.
        steps: n.

    Returns:
        (value, gradient of shape (b,)); value inf when the decoder overflows.
    """
    c = np.asarray(coefs, dtype=np.float64)
    n = int(steps)
    with np.errstate(over="ignore", invalid="ignore"):
        beta = causal_filter(_ONE, c, np.ones(n))
        w = n - np.arange(n, dtype=np.float64)
        value = float(np.sum(w * beta * beta))
        if not np.isfinite(value):
            return np.inf, np.zeros_like(c)
        lam = causal_filter(_ONE, c, (w * beta)[::-1])[::-1]
        grad = np.array([-2.0 * float(lam[m:] @ beta[:n - m]) for m in range(c.size)])
    return value, grad


def optimize_banded(participation: Participation, bands: int, *, max_iterations: int = 500) -> ToeplitzStrategy:
    """The optimized b-banded Toeplitz strategy (module docstring).

    Args:
        participation: steps n, epochs k, min-separation b_sep.
        bands: b in [1, n]; b ≤ b_sep when k > 1.
        max_iterations: L-BFGS-B iterations.

    Returns:
        A :class:`ToeplitzStrategy` named ``banded:b (optimized)``.

    Raises:
        ParameterError: b outside [1, n], or b > the min-separation with k > 1.
    """
    n = participation.steps
    b = v.count("bands", bands, minimum=1)
    if b > n:
        raise ParameterError("bands", f"a whole number in [1, steps = {n}]", b)
    if participation.epochs > 1 and b > participation.min_separation:
        raise ParameterError("bands", f"<= min_separation = {participation.min_separation} (the "
                             "objective's sensitivity is exact only then)", b)
    if b == 1:
        return banded_strategy(n, [1.0], name="banded:1 (optimized)")

    def fun(x: np.ndarray) -> tuple[float, np.ndarray]:
        c = np.concatenate([[1.0], x])
        err, grad = banded_objective(c, n)
        if not np.isfinite(err) or err <= 0:  # an unstable decoder: steer back to the start
            d = x - x0
            return 1e6 + float(d @ d), 2 * d
        norm = float(c @ c)
        value = np.log(err) + np.log(norm)
        g = grad[1:] / err + 2 * c[1:] / norm
        return float(value), g

    x0 = sqrt_coefficients(b)[1:]
    res = minimize(fun, x0, jac=True, method="L-BFGS-B", bounds=[(-1.0, 1.0)] * (b - 1),
                   options={"maxiter": max_iterations, "ftol": 1e-13, "gtol": 1e-10})
    x = res.x if np.isfinite(res.fun) and res.fun <= fun(x0)[0] else x0
    return banded_strategy(n, np.concatenate([[1.0], x]), name=f"banded:{b} (optimized)")
