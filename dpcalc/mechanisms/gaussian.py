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
import struct

from dpcalc import _validate as v
from dpcalc._numerics import UNIT_ROUNDOFF, log_expm1, log_ndtr, round_down, round_up
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


def _key(x: float) -> int:
    """The IEEE-754 bit pattern of a float ≥ 0 as an integer (ordered like the floats)."""
    return struct.unpack("<q", struct.pack("<d", x))[0]


def _unkey(k: int) -> float:
    return struct.unpack("<d", struct.pack("<q", k))[0]


def _smallest_true(pred, lo: float, hi: float) -> float:
    """The smallest double x in (lo, hi] with ``pred(x)``, for ``pred`` false at ``lo``, true at
    ``hi`` and monotone (false then true): bisection on the bit patterns, so at most 64
    evaluations and an exact answer. Where rounding makes ``pred`` non-monotone, the returned
    x still satisfies ``pred`` (it is always the upper end of the final bracket)."""
    a, b = _key(lo), _key(hi)
    while b - a > 1:
        m = (a + b) // 2
        if pred(_unkey(m)):
            b = m
        else:
            a = m
    return _unkey(b)


def _largest_true(pred, lo: float, hi: float) -> float:
    """The largest double x in [lo, hi) with ``pred(x)``, for ``pred`` true at ``lo`` and false at
    ``hi`` (true then false); the returned x satisfies ``pred``."""
    a, b = _key(lo), _key(hi)
    while b - a > 1:
        m = (a + b) // 2
        if pred(_unkey(m)):
            a = m
        else:
            b = m
    return _unkey(a)


def _square(x: float) -> tuple[float, float]:
    """x² = hi + lo exactly (Dekker's splitting; no overflow for |x| < 1e150)."""
    c = 134217729.0 * x  # 2^27 + 1
    xh = c - (c - x)
    xl = x - xh
    hi = x * x
    return hi, ((xh * xh - hi) + 2 * xh * xl) + xl * xl


def _erfcx(x: float) -> float:
    """erfcx(x) = e^{x²}·erfc(x) for x ≥ 0.

    On [0, 26] from ``math``: e^{hi}·erfc(x)·(1 + lo) with x² = hi + lo exact; checked against
    mpmath (200 bits) on 2·10⁴ points: max error 2.5 ulp, against 4.0 ulp for
    ``scipy.special.erfcx`` on the same points — at least as accurate, and it keeps scipy.special
    (~0.2 s to import) off the start-up path of ``dpcalc gaussian``. Beyond 26 (erfc underflows
    near 26.5) and for x < 0: ``scipy.special.erfcx``.
    """
    if 0.0 <= x <= 26.0:
        hi, lo = _square(x)
        return math.exp(hi) * math.erfc(x) * (1.0 + lo)
    from scipy.special import erfcx

    return float(erfcx(x))


def _log_delta(epsilon: float, mu: float) -> float:
    """ln δ(ε) of μ-GDP, rounded up: the remaining subtraction is evaluated with a bound
    on its rounding error added (its cancellation factor is known at run time), so the
    value is ≥ the exact ln δ even for tiny μ, where the two terms nearly cancel."""
    # ≥ scipy.special's accuracy: _erfcx above, log_ndtr in dpcalc/_numerics.py (math only)
    erf, erfcx = math.erf, _erfcx

    a = mu / 2 - epsilon / mu
    b = -mu / 2 - epsilon / mu
    if a < 0:
        # Tail form: Φ(-x) = ½·erfcx(x/√2)·exp(-x²/2) and e^ε·φ(b) = φ(a) (because b² = a² + 2ε),
        # so δ = ½·exp(-a²/2)·(erfcx(-a/√2) - erfcx(-b/√2)): no cancellation of two tiny terms.
        # The difference still cancels when μ ≪ |a| (relative error ~u·|a|/μ): add a bound on
        # its rounding error (erfcx and its argument accurate to a few ulps) and on that of a².
        ea, eb = float(erfcx(-a / math.sqrt(2))), float(erfcx(-b / math.sqrt(2)))
        diff = ea - eb + 32 * _U * (ea + eb)
        head = -round_down(a * a / 2, 8)  # a²/2: 2 roundings, budget 8u
        if head == -math.inf:  # δ ≤ ½·exp(−a²/2) (erfcx ≤ 1 here), and a² overflows: δ = 0
            return -math.inf
        if not diff > 0:  # pragma: no cover - erfcx is decreasing and positive; δ ≤ 1 is safe
            return 0.0
        return head + math.log(diff / 2)
    # Φ(a) − e^ε Φ(b) = [Φ(a) − Φ(b)] − (e^ε − 1)Φ(b), with Φ(a) − Φ(b) = ½(erf(a/√2) + erf(−b/√2))
    # a sum of positive terms (b < 0 ≤ a); the last subtraction gets a rounding-error bound.
    first = 0.5 * (float(erf(a / math.sqrt(2))) + float(erf(-b / math.sqrt(2))))
    if mu <= 8:
        log_em1 = log_expm1(epsilon) if epsilon > 0 else -math.inf
        second = math.exp(log_em1 + float(log_ndtr(b)))
        d = first - second + 32 * _U * (first + second)
    else:
        # Large μ (ε up to μ²/2): e^ε and Φ(b) are far out of range, and ln of their product is a
        # difference of huge numbers. As in the tail form, e^ε·Φ(b) = ½·exp(−a²/2)·erfcx(−b/√2)
        # (b² = a² + 2ε), so (e^ε − 1)·Φ(b) = that times (1 − e^{−ε}); exp(−a²/2) carries a
        # relative rounding error ≤ a²·u, added to the bound.
        second = 0.5 * math.exp(-a * a / 2) * float(erfcx(-b / math.sqrt(2))) * -math.expm1(-epsilon)
        d = first - second + 32 * _U * (first + second) + ((a * _U) * (a * second) if second > 0 else 0.0)
    if math.isnan(d):  # never expected; δ ≤ 1 is always a valid bound
        return 0.0
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
    while math.isfinite(hi) and _log_delta(hi, mu) > target:
        hi *= 2
    if not math.isfinite(hi):  # ε ≈ μ²/2 beyond the largest double: unbounded
        return math.inf
    # the smallest double ε with δ(ε) ≤ δ (every returned ε is verified by the predicate)
    return _smallest_true(lambda e: _log_delta(e, mu) <= target, 0.0, hi)


def _max_mu(epsilon: float, delta: float) -> float:
    """Largest μ with δ(ε; μ) ≤ δ (δ(ε; μ) increases with μ), verified."""
    target = math.log(delta) + _SAFETY
    lo, hi = 1.0, 1.0
    while _log_delta(epsilon, lo) > target:
        lo /= 2
        if lo == 0.0:
            raise ParameterError("epsilon", "larger (no noise std meets this target)", epsilon)
    while _log_delta(epsilon, hi) <= target:
        hi *= 2
    # the largest double μ with δ(ε; μ) ≤ δ (verified by the predicate)
    return _largest_true(lambda m: _log_delta(epsilon, m) <= target, lo, hi)


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
            "rho": (sensitivity / sigma) * (sensitivity / sigma) / 2,  # μ²/2 (no ** overflow)
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
    unbounded = None if math.isfinite(eps_a) else "epsilon is unbounded (beyond the largest double)"
    base = {"delta": delta, "sensitivity": sensitivity, "noise_std": sigma,
            "noise_multiplier": sigma / sensitivity, "accuracy": accuracy}
    det = {"beta": beta, "dims": dims, "norm": norm, "rho": (sensitivity / sigma) * (sensitivity / sigma) / 2,
           "mu": sensitivity / sigma}
    out = [MechanismResult(method="analytic", values={"epsilon": eps_a, **base},
                           source=SOURCE_ANALYTIC, details=det, reason=unbounded)]
    if eps_c < 1:
        out.append(MechanismResult(method="classical", values={"epsilon": eps_c, **base},
                                   source=SOURCE_CLASSICAL, details=det))
    else:
        out.append(MechanismResult(method="classical", values={"epsilon": None, **base},
                                   source=SOURCE_CLASSICAL, applicable=False, certified=False,
                                   reason=f"classical ε would be {eps_c:.4g} ≥ 1: not a theorem there"))
    return out
