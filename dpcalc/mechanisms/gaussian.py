r"""The Gaussian mechanism: exact privacy curve, calibration and accuracy.

Adding N(0, σ²) noise to a query of L2 sensitivity Δ₂ is, for every ε ≥ 0,
(ε, δ(ε))-DP with (Balle & Wang 2018, Thm 8; Dong, Roth, Su 2019 Cor 2.13)

.. math::

    δ(ε) = Φ\Big(\frac{μ}{2} - \frac{ε}{μ}\Big) - e^{ε}\,Φ\Big(-\frac{μ}{2} - \frac{ε}{μ}\Big),
    \qquad μ = Δ₂/σ,

and this is tight: it is the privacy curve of μ-GDP. :func:`gaussian_delta` and
:func:`gaussian_epsilon` evaluate it (and its inverse) stably down to tiny δ, and
are the exact reference other accountants are tested against (T-fold composition
of the unsampled Gaussian is μ-GDP with μ = √T·Δ₂/σ).

Calibration: the *analytic* σ (Balle & Wang 2018) is the smallest σ meeting the
curve at the target; the *classical* σ = Δ₂·√(2 ln(1.25/δ))/ε (Dwork & Roth 2014
Thm A.1) is a theorem only for ε < 1 and is refused otherwise.
"""

from __future__ import annotations

import math

from dpcalc import _validate as v
from dpcalc._numerics import UNIT_ROUNDOFF, brentq, log_expm1, round_down, round_up
from dpcalc.errors import ParameterError
from dpcalc.results import MechanismResult

__all__ = [
    "gaussian_delta",
    "gaussian_log_delta",
    "gaussian_epsilon",
    "analytic_noise_std",
    "classical_noise_std",
    "calibrate_gaussian",
    "gaussian_accuracy",
    "gaussian_epsilon_for_accuracy",
    "METHODS",
]

METHODS = ("analytic", "classical")

#: relative safety margin on δ when verifying a calibration: the δ formula is accurate to
#: ~1e-13 relative for δ ≥ 1e-300 (checked against mpmath), so aiming 1e-12 below the target
#: keeps every returned σ/ε on the safe side of rounding.
_SAFETY = math.log1p(-1e-12)

SOURCE_ANALYTIC = "Balle & Wang 2018, Thm 8 (exact)"
SOURCE_CLASSICAL = "Dwork & Roth 2014, Thm A.1 (ε < 1)"


_U = UNIT_ROUNDOFF


def _log_delta(epsilon: float, mu: float) -> float:
    """ln δ(ε) of μ-GDP, rounded up: the remaining subtraction is evaluated with a bound
    on its rounding error added (its cancellation factor is known at run time), so the
    value is ≥ the exact ln δ even for tiny μ, where the two terms nearly cancel."""
    from scipy.special import erf, erfcx, log_ndtr

    a = mu / 2 - epsilon / mu
    b = -mu / 2 - epsilon / mu
    if a < 0:
        # Tail form: Φ(-x) = ½·erfcx(x/√2)·exp(-x²/2) and e^ε·φ(b) = φ(a) (because b² = a² + 2ε),
        # so δ = ½·exp(-a²/2)·(erfcx(-a/√2) - erfcx(-b/√2)): no cancellation of two tiny terms.
        # The difference still cancels when μ ≪ |a| (relative error ~u·|a|/μ): add a bound on
        # its rounding error (erfcx and its argument accurate to a few ulps) and on that of a².
        ea, eb = float(erfcx(-a / math.sqrt(2))), float(erfcx(-b / math.sqrt(2)))
        diff = ea - eb + 32 * _U * (ea + eb)
        return -round_down(a * a / 2, 8) + math.log(diff / 2)  # a²/2: 2 roundings, budget 8u
    # Φ(a) − e^ε Φ(b) = [Φ(a) − Φ(b)] − (e^ε − 1)Φ(b), with Φ(a) − Φ(b) = ½(erf(a/√2) + erf(−b/√2))
    # a sum of positive terms (b < 0 ≤ a); the last subtraction gets a rounding-error bound.
    first = 0.5 * (float(erf(a / math.sqrt(2))) + float(erf(-b / math.sqrt(2))))
    log_em1 = log_expm1(epsilon)
    second = math.exp(log_em1 + float(log_ndtr(b)))
    d = first - second + 32 * _U * (first + second)
    return math.log(d) if d > 0 else -math.inf


def gaussian_log_delta(*, epsilon: float, mu: float) -> float:
    r"""Natural log of :func:`gaussian_delta` (finite far below the smallest double δ).

    Args:
        epsilon: ε ≥ 0.
        mu: μ = Δ₂/σ > 0, the GDP parameter (sensitivity over noise std).

    Returns:
        ln δ(ε).

    Raises:
        ParameterError: ε < 0 or not finite; μ ≤ 0 or not finite.
    """
    epsilon = v.nonnegative("epsilon", epsilon)
    mu = v.positive("mu", mu)
    return _log_delta(epsilon, mu)


def gaussian_delta(*, epsilon: float, mu: float) -> float:
    r"""Exact δ(ε) of the Gaussian mechanism / μ-GDP (Balle & Wang 2018, Thm 8).

    δ(ε) = Φ(μ/2 − ε/μ) − e^ε·Φ(−μ/2 − ε/μ): the smallest δ for which adding
    N(0, σ²) to a query of L2 sensitivity Δ₂ = μσ is (ε, δ)-DP (tight, both
    neighbouring orders give the same curve). Computed in log/erfcx form, accurate
    to ~1e-14 relative for moderate μ even when δ is 1e-300.

    Args:
        epsilon: ε ≥ 0.
        mu: μ = Δ₂/σ > 0 (for T-fold composition use μ = √T·Δ₂/σ).

    Returns:
        δ in (0, 1) (may underflow to 0.0 for astronomically small δ; use
        :func:`gaussian_log_delta` then).

    Raises:
        ParameterError: ε < 0 or not finite; μ ≤ 0 or not finite.
    """
    return math.exp(gaussian_log_delta(epsilon=epsilon, mu=mu))


def gaussian_epsilon(*, delta: float, mu: float) -> float:
    r"""Exact ε(δ) of the Gaussian mechanism / μ-GDP: the smallest ε with δ(ε) ≤ ``delta``.

    Inverse of :func:`gaussian_delta` in ε (Balle & Wang 2018, Thm 8), by Brent's
    method on ln δ; the returned ε is verified to satisfy δ(ε) ≤ ``delta`` (it errs
    high by at most a few ulps, never low). Returns 0.0 when already δ(0) ≤ ``delta``.

    Args:
        delta: δ in (0, 1).
        mu: μ = Δ₂/σ > 0.

    Returns:
        ε ≥ 0.

    Raises:
        ParameterError: δ ∉ (0, 1); μ ≤ 0 or not finite.
    """
    delta = v.open_unit("delta", delta)
    mu = v.positive("mu", mu)
    target = math.log(delta) + _SAFETY
    if _log_delta(0.0, mu) <= target:
        return 0.0
    hi = max(1.0, mu * mu)
    while _log_delta(hi, mu) > target:
        hi *= 2
    lo = 0.0
    eps = brentq(lambda e: _log_delta(e, mu) - target, lo, hi, xtol=1e-15, rtol=4 * 2.2205e-16, maxiter=500)
    while _log_delta(eps, mu) > target:  # verify: never report an ε that does not hold
        eps = round_up(eps, 16) + 1e-300  # 16u steps up
    return float(eps)


def _max_mu(epsilon: float, delta: float) -> float:
    """Largest μ with δ(ε; μ) ≤ δ (δ(ε; μ) increases with μ), verified."""
    target = math.log(delta) + _SAFETY
    lo, hi = 1.0, 1.0
    while _log_delta(epsilon, lo) > target:
        lo /= 2
    while _log_delta(epsilon, hi) <= target:
        hi *= 2
    if lo == hi:
        lo = hi / 2
    x = brentq(lambda t: _log_delta(epsilon, math.exp(t)) - target, math.log(lo), math.log(hi),
               xtol=1e-15, rtol=4 * 2.2205e-16, maxiter=500)
    mu = math.exp(x)
    while _log_delta(epsilon, mu) > target:
        mu = round_down(mu, 4)  # 4u steps down
    return mu


def analytic_noise_std(*, epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    r"""The smallest Gaussian noise std σ giving (ε, δ)-DP (Balle & Wang 2018, Thm 8, exact).

    σ solves Φ(Δ/(2σ) − εσ/Δ) − e^ε·Φ(−Δ/(2σ) − εσ/Δ) = δ (Brent's method on ln μ,
    μ = Δ/σ, to machine precision); the returned σ is verified to satisfy the
    condition with δ(σ) ≤ δ — it errs high, never low.

    Args:
        epsilon: ε > 0.
        delta: δ in (0, 1).
        sensitivity: Δ₂ > 0, the L2 sensitivity (same units as the noise).

    Returns:
        σ, the noise standard deviation (absolute units).

    Raises:
        ParameterError: ε ≤ 0, δ ∉ (0, 1), Δ₂ ≤ 0 (or not finite).
    """
    epsilon = v.positive("epsilon", epsilon)
    delta = v.open_unit("delta", delta)
    sensitivity = v.positive("sensitivity", sensitivity)
    mu = _max_mu(epsilon, delta)
    sigma = sensitivity / mu
    while _log_delta(epsilon, sensitivity / sigma) > math.log(delta) + _SAFETY:  # rounding of Δ/μ
        sigma = round_up(sigma, 4)  # 4u steps up
    return sigma


def classical_noise_std(*, epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    r"""σ = Δ₂·√(2 ln(1.25/δ))/ε (Dwork & Roth 2014, Thm A.1), a theorem only for ε < 1.

    Args:
        epsilon: ε in (0, 1).
        delta: δ in (0, 1).
        sensitivity: Δ₂ > 0.

    Returns:
        σ, the noise standard deviation.

    Raises:
        ParameterError: ε ≥ 1 (the bound is not a theorem there: use the analytic
            calibration), ε ≤ 0, δ ∉ (0, 1), Δ₂ ≤ 0.
    """
    epsilon = v.positive("epsilon", epsilon)
    delta = v.open_unit("delta", delta)
    sensitivity = v.positive("sensitivity", sensitivity)
    if epsilon >= 1:
        raise ParameterError(
            "epsilon", "< 1 for the classical Gaussian", epsilon,
            message=(f"epsilon must be < 1 for the classical Gaussian, got {epsilon:g}: Dwork & Roth "
                     "Thm A.1 is not a theorem for ε ≥ 1; use the analytic calibration (--method analytic)"))
    return sensitivity * math.sqrt(2 * math.log(1.25 / delta)) / epsilon


def _z_two_sided(beta: float) -> float:
    """z with Pr[|N(0,1)| ≥ z] = β."""
    from scipy.special import ndtri

    return -float(ndtri(beta / 2))


def gaussian_accuracy(*, noise_std: float, beta: float, dims: int = 1) -> dict:
    r"""Error bounds of Gaussian noise N(0, σ²·I_k) at confidence 1 − β (exact, not union bounds).

    * per coordinate: Pr[|Z_i| ≥ α] = β for α = σ·Φ⁻¹(1 − β/2);
    * ℓ∞: Pr[‖Z‖∞ ≥ α] = β for α = σ·Φ⁻¹(1 − p/2), p = 1 − (1 − β)^{1/k}
      (independent coordinates; ≤ the union bound σ·Φ⁻¹(1 − β/(2k)));
    * ℓ2: Pr[‖Z‖₂ ≥ α] = β for α = σ·√(χ²_k quantile at 1 − β).

    Args:
        noise_std: σ > 0.
        beta: β in (0, 1), the failure probability.
        dims: k ≥ 1, the number of noisy coordinates.

    Returns:
        dict with ``per_coordinate``, ``linf``, ``l2`` (error bounds, units of the query)
        and ``linf_union_bound``.

    Raises:
        ParameterError: bad σ, β or k.
    """
    from scipy.special import chdtri, ndtri

    sigma = v.positive("noise_std", noise_std)
    beta = v.open_unit("beta", beta)
    k = v.count("dims", dims)
    p = -math.expm1(math.log1p(-beta) / k)
    return {
        "per_coordinate": sigma * _z_two_sided(beta),
        "linf": sigma * -float(ndtri(p / 2)),
        "linf_union_bound": sigma * -float(ndtri(beta / (2 * k))),
        "l2": sigma * math.sqrt(float(chdtri(k, beta))),
    }


def _sigma_for_accuracy(accuracy: float, beta: float, dims: int, norm: str) -> float:
    unit = gaussian_accuracy(noise_std=1.0, beta=beta, dims=dims)
    return accuracy / unit["l2" if norm == "l2" else "linf"]


def calibrate_gaussian(
    *,
    epsilon: float,
    delta: float,
    sensitivity: float = 1.0,
    method: str = "analytic",
    beta: float | None = None,
    dims: int = 1,
) -> list[MechanismResult]:
    r"""σ for (ε, δ)-DP by the analytic and the classical calibration, side by side.

    The chosen ``method`` comes first; the other follows for comparison (the
    classical row is marked not applicable for ε ≥ 1). Each result carries
    ``noise_std`` (σ), ``noise_multiplier`` (σ/Δ₂), the zCDP ``rho`` = Δ₂²/(2σ²)
    (Bun & Steinke 2016 Prop 1.6) and the GDP ``mu`` = Δ₂/σ (Dong, Roth, Su 2019)
    of the calibrated mechanism, and — with ``beta`` — error bounds
    (:func:`gaussian_accuracy`).

    Args:
        epsilon: ε > 0.
        delta: δ in (0, 1).
        sensitivity: Δ₂ > 0.
        method: ``analytic`` (Balle & Wang 2018 Thm 8) or ``classical`` (DR14 Thm A.1).
        beta: optional failure probability for the accuracy bounds.
        dims: k, number of noisy coordinates (accuracy only).

    Returns:
        [chosen method's result, other method's result].

    Raises:
        ParameterError: bad parameters, or ``method="classical"`` with ε ≥ 1.
    """
    epsilon = v.positive("epsilon", epsilon)
    delta = v.open_unit("delta", delta)
    sensitivity = v.positive("sensitivity", sensitivity)
    method = v.choice("method", method, METHODS)
    if beta is not None:
        beta = v.open_unit("beta", beta)
    dims = v.count("dims", dims)
    if method == "classical":
        classical_noise_std(epsilon=epsilon, delta=delta, sensitivity=sensitivity)  # refuses ε ≥ 1

    analytic = analytic_noise_std(epsilon=epsilon, delta=delta, sensitivity=sensitivity)
    classical = (classical_noise_std(epsilon=epsilon, delta=delta, sensitivity=sensitivity)
                 if epsilon < 1 else None)

    def row(name: str, sigma: float | None) -> MechanismResult:
        base = {"epsilon": epsilon, "delta": delta, "sensitivity": sensitivity}
        if sigma is None:
            return MechanismResult(
                method=name, values={**base, "noise_std": None, "noise_multiplier": None},
                source=SOURCE_CLASSICAL, applicable=False, certified=False,
                reason="classical bound is not a theorem for ε ≥ 1 (use analytic)")
        details: dict = {
            "rho": sensitivity**2 / (2 * sigma**2),
            "mu": sensitivity / sigma,
            "delta_exact": gaussian_delta(epsilon=epsilon, mu=sensitivity / sigma),
        }
        if classical is not None and name == "analytic":
            details["saving_vs_classical"] = 1 - sigma / classical
        if beta is not None:
            details["beta"] = beta
            details["dims"] = dims
            details["accuracy"] = gaussian_accuracy(noise_std=sigma, beta=beta, dims=dims)
        return MechanismResult(
            method=name,
            values={**base, "noise_std": sigma, "noise_multiplier": sigma / sensitivity},
            source=SOURCE_ANALYTIC if name == "analytic" else SOURCE_CLASSICAL,
            details=details)

    rows = {"analytic": row("analytic", analytic), "classical": row("classical", classical)}
    other = "classical" if method == "analytic" else "analytic"
    return [rows[method], rows[other]]


def gaussian_epsilon_for_accuracy(
    *,
    accuracy: float,
    beta: float,
    delta: float,
    sensitivity: float = 1.0,
    dims: int = 1,
    norm: str = "linf",
) -> list[MechanismResult]:
    r"""The ε needed for a Gaussian mechanism to have error ≤ ``accuracy`` w.p. 1 − β.

    The largest σ meeting the accuracy target (:func:`gaussian_accuracy`, exact) is
    σ* = α / quantile; the ε is then the exact ε(δ) of that σ (analytic,
    :func:`gaussian_epsilon`) and the classical ε = Δ₂√(2 ln(1.25/δ))/σ* when that is < 1.

    Args:
        accuracy: α > 0, the error bound (units of the query).
        beta: β in (0, 1).
        delta: δ in (0, 1).
        sensitivity: Δ₂ > 0.
        dims: k ≥ 1 coordinates.
        norm: ``linf`` (max coordinate error; per-coordinate when k = 1) or ``l2``.

    Returns:
        [analytic result, classical result], each with ``epsilon``, ``noise_std``.

    Raises:
        ParameterError: bad parameters.
    """
    accuracy = v.positive("accuracy", accuracy)
    beta = v.open_unit("beta", beta)
    delta = v.open_unit("delta", delta)
    sensitivity = v.positive("sensitivity", sensitivity)
    dims = v.count("dims", dims)
    norm = v.choice("norm", norm, ("linf", "l2"))
    sigma = _sigma_for_accuracy(accuracy, beta, dims, norm)
    eps_a = gaussian_epsilon(delta=delta, mu=sensitivity / sigma)
    eps_c = sensitivity * math.sqrt(2 * math.log(1.25 / delta)) / sigma
    base = {"delta": delta, "sensitivity": sensitivity, "noise_std": sigma,
            "noise_multiplier": sigma / sensitivity, "accuracy": accuracy}
    det = {"beta": beta, "dims": dims, "norm": norm, "rho": sensitivity**2 / (2 * sigma**2),
           "mu": sensitivity / sigma}
    out = [MechanismResult(method="analytic", values={"epsilon": eps_a, **base},
                           source=SOURCE_ANALYTIC, details=det)]
    if eps_c < 1:
        out.append(MechanismResult(method="classical", values={"epsilon": eps_c, **base},
                                   source=SOURCE_CLASSICAL, details=det))
    else:
        out.append(MechanismResult(method="classical", values={"epsilon": None, **base},
                                   source=SOURCE_CLASSICAL, applicable=False, certified=False,
                                   reason=f"classical ε would be {eps_c:.4g} ≥ 1: not a theorem there"))
    return out
