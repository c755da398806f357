r"""Exact discrete Laplace and discrete Gaussian samplers, and the safe release of a value.

Floating-point Laplace sampling leaks the input through the low-order bits of the
output (Mironov 2012, "On significance of the least significant bits for
differential privacy"). dpcalc therefore releases values only with the *exact*
samplers of Canonne, Kamath, Steinke 2020 ("The discrete Gaussian for differential
privacy", Algorithms 1–3): integer and rational arithmetic (:class:`fractions.Fraction`),
driven by the operating system's CSPRNG (:class:`secrets.SystemRandom`); no
floating point touches the sample.

Guarantees (for an integer-valued query q with |q(x) − q(x')| ≤ Δ, Δ a whole number):

* Discrete Laplace Lap_Z(t), Pr[Y = y] ∝ e^{−|y|/t}, with t = Δ/ε: ε-DP (pure), since
  the pmf ratio at any shift |d| ≤ Δ is at most e^{|d|/t} ≤ e^ε (CKS20 §2.1; Ghosh,
  Roughgarden, Sundararajan 2009 for the geometric mechanism).
* Discrete Gaussian N_Z(0, σ²), Pr[Y = y] ∝ e^{−y²/(2σ²)}: (Δ²/(2σ²))-zCDP (CKS20
  Thm 4) and (ε, δ)-DP with δ = max_{1≤d≤Δ} Pr[Y > εσ²/d − d/2] − e^ε·Pr[Y > εσ²/d + d/2]
  (CKS20 Thm 7; this is tight for shift d, and dpcalc takes the max over all shifts up to
  Δ). dpcalc *computes* this δ by summing the pmf (not the continuous formula, which
  differs slightly), rounding every part pessimistically, and picks σ so it is ≤ the target.

Real-valued queries are first rounded (half up) to a multiple of a granularity g;
the rounded query, in units of g, is integer-valued with sensitivity ⌈Δ/g⌉ (rounding
can move two values closer or further by less than one unit), which is what the noise
is calibrated to.
"""

from __future__ import annotations

import math
import numbers
import random
import secrets
from decimal import Decimal, localcontext
from fractions import Fraction
from typing import Any

from dpcalc import _validate as v
from dpcalc.errors import ParameterError
from dpcalc.results import MechanismResult

__all__ = [
    "bernoulli_exp",
    "sample_discrete_laplace",
    "sample_discrete_gaussian",
    "discrete_gaussian_delta",
    "discrete_gaussian_sigma",
    "release_laplace",
    "release_gaussian",
    "MAX_SHIFT",
]

#: largest sensitivity (in units of the granularity) for the discrete Gaussian δ computation
MAX_SHIFT = 100
#: largest number of pmf terms one discrete Gaussian δ evaluation may sum (~20 ms of numpy)
MAX_TERMS = 4_000_000
#: terms are summed until they fall below e^{-_CUTOFF} of the first (the rest is bounded)
_CUTOFF = 40.0


def _system_rng() -> random.Random:
    return secrets.SystemRandom()


def _bernoulli(p: Fraction, rng: random.Random) -> bool:
    """Exact Bernoulli(p) for rational p in [0, 1]."""
    return rng.randrange(p.denominator) < p.numerator


def bernoulli_exp(gamma: Fraction | int, rng: random.Random | None = None) -> bool:
    r"""Exact Bernoulli(exp(−γ)) for rational γ ≥ 0 (Canonne, Kamath, Steinke 2020, Algorithm 1).

    Args:
        gamma: γ ≥ 0, an int or :class:`~fractions.Fraction`.
        rng: source of uniform integers (``randrange``); default the OS CSPRNG.
            Pass a seeded :class:`random.Random` in tests only.

    Returns:
        True with probability exactly e^{−γ}.

    Raises:
        ParameterError: γ < 0 or not rational.
    """
    rng = rng or _system_rng()
    if not isinstance(gamma, (int, Fraction)) or gamma < 0:
        raise ParameterError("gamma", "a rational number >= 0", gamma)
    gamma = Fraction(gamma)
    while gamma > 1:  # e^{−γ} = e^{−1}·…·e^{−1}·e^{−(γ − ⌊γ⌋)}
        if not _bernoulli_exp_unit(Fraction(1), rng):
            return False
        gamma -= 1
    return _bernoulli_exp_unit(gamma, rng)


def _bernoulli_exp_unit(gamma: Fraction, rng: random.Random) -> bool:
    """Bernoulli(exp(−γ)) for γ in [0, 1] (CKS20 Algorithm 1, first branch)."""
    k = 1
    while _bernoulli(gamma / k, rng):
        k += 1
    return k % 2 == 1


def _as_fraction(name: str, x: Any) -> Fraction:
    """An exact rational from an int, Fraction, decimal string or float (via its shortest repr)."""
    if isinstance(x, bool):
        raise ParameterError(name, "a number", x)
    if isinstance(x, (int, Fraction)):
        return Fraction(x)
    if isinstance(x, numbers.Real):
        if not math.isfinite(float(x)):
            raise ParameterError(name, "a finite number", x)
        return Fraction(repr(float(x)))
    try:
        f = Fraction(str(x).strip())
    except (ValueError, ZeroDivisionError):
        raise ParameterError(name, "a number", str(x)) from None
    return f


def sample_discrete_laplace(scale: Fraction | int, rng: random.Random | None = None) -> int:
    r"""One exact sample of the discrete Laplace Lap_Z(t): Pr[Y = y] ∝ exp(−|y|/t), y ∈ Z.

    Canonne, Kamath, Steinke 2020, Algorithm 2 (with t = scale = T/S in lowest terms).

    Args:
        scale: t > 0, rational.
        rng: uniform-integer source (default OS CSPRNG; seeded ``random.Random`` in tests only).

    Returns:
        The sample (an int).

    Raises:
        ParameterError: t ≤ 0 or not rational.
    """
    rng = rng or _system_rng()
    if not isinstance(scale, (int, Fraction)) or scale <= 0:
        raise ParameterError("scale", "a rational number > 0", scale)
    scale = Fraction(scale)
    t, s = scale.numerator, scale.denominator  # Lap_Z(t/s) in CKS20's notation
    while True:
        u = rng.randrange(t)
        if not bernoulli_exp(Fraction(u, t), rng):
            continue
        n = 0
        while bernoulli_exp(1, rng):
            n += 1
        y = (u + t * n) // s
        b = rng.randrange(2)
        if b == 1 and y == 0:
            continue
        return -y if b else y


def sample_discrete_gaussian(sigma2: Fraction | int, rng: random.Random | None = None) -> int:
    r"""One exact sample of the discrete Gaussian N_Z(0, σ²): Pr[Y = y] ∝ exp(−y²/(2σ²)).

    Canonne, Kamath, Steinke 2020, Algorithm 3: propose from Lap_Z(t), t = ⌊σ⌋ + 1,
    accept with probability exp(−(|Y| − σ²/t)²/(2σ²)).

    Args:
        sigma2: σ² > 0, rational (the *parameter*; the variance is slightly below it).
        rng: uniform-integer source (default OS CSPRNG; seeded ``random.Random`` in tests only).

    Returns:
        The sample (an int).

    Raises:
        ParameterError: σ² ≤ 0 or not rational.
    """
    rng = rng or _system_rng()
    if not isinstance(sigma2, (int, Fraction)) or sigma2 <= 0:
        raise ParameterError("sigma2", "a rational number > 0", sigma2)
    sigma2 = Fraction(sigma2)
    t = math.isqrt(sigma2.numerator * sigma2.denominator) // sigma2.denominator + 1  # ⌊σ⌋ + 1
    while True:
        y = sample_discrete_laplace(t, rng)
        gamma = (abs(y) - sigma2 / t) ** 2 / (2 * sigma2)
        if bernoulli_exp(gamma, rng):
            return y


# ---------------------------------------------------------------------------------------------
# Privacy of the discrete Gaussian (CKS20 Thm 7), computed by summing the pmf in log space.


def _terms(m: int, sigma: float) -> int:
    """How many terms of Σ_{y ≥ m} e^{−y²/(2σ²)} are summed explicitly."""
    return int(math.ceil(-m + math.sqrt(m * m + 2 * _CUTOFF * 2.0 * sigma * sigma))) + 2


def _log_tail(m: int, sigma: float, *, upper: bool) -> float:
    """ln Σ_{y ≥ m} exp(−y²/(2σ²)) for an integer m ≥ 1.

    Sums until the terms fall below e^{−40} of the first; with ``upper`` adds a geometric
    bound on the remainder (so the value is an upper bound), otherwise returns the partial
    sum (a lower bound).
    """
    import numpy as np

    two_s2 = 2.0 * sigma * sigma
    k_max = _terms(m, sigma)
    total = 0.0
    chunk = 1 << 20
    for start in range(0, k_max, chunk):
        j = np.arange(start, min(k_max, start + chunk), dtype=np.float64)
        total += float(np.exp(-(j * (2.0 * m + j)) / two_s2).sum())  # (m+j)² − m² = j(2m+j)
    if upper:  # remainder Σ_{y ≥ m+k_max}: first term / (1 − r), r = largest ratio of consecutive terms
        first = math.exp(-(float(k_max) * (2.0 * m + k_max)) / two_s2)
        total += first / -math.expm1(-(2.0 * (m + k_max) + 1) / two_s2)
    return -(m * m) / two_s2 + math.log(total)


def _log_sum_above(c: float, sigma: float, log_z_half: float, *, upper: bool) -> float:
    """ln Σ_{y > c} exp(−y²/(2σ²)) (unnormalised)."""
    m = math.floor(c) + 1
    if m >= 1:
        return _log_tail(m, sigma, upper=upper)
    # Σ_{y ≥ m} = Z − Σ_{y ≥ 1−m}, with Z = 1 + 2·Σ_{y ≥ 1}
    z = 1 + 2 * math.exp(log_z_half)
    rest = math.exp(_log_tail(1 - m, sigma, upper=not upper))
    return math.log(max(z - rest, 1e-300))


def discrete_gaussian_delta(*, epsilon: float, sigma: float, sensitivity: int = 1) -> float:
    r"""δ of the discrete Gaussian mechanism N_Z(0, σ²) on an integer query (CKS20 Thm 7).

    δ = max_{1≤d≤Δ} Pr[Y > εσ²/d − d/2] − e^ε·Pr[Y > εσ²/d + d/2], Y ~ N_Z(0, σ²),
    computed by summing the pmf in log space. Certified: the positive tail is an upper
    bound (with a geometric bound on the truncated remainder), the subtracted tail and
    the normaliser are partial sums (lower bounds).

    Args:
        epsilon: ε ≥ 0.
        sigma: σ > 0, the discrete Gaussian's parameter (in units of the integer grid).
        sensitivity: Δ, a whole number in [1, MAX_SHIFT].

    Returns:
        δ (an upper bound, tight to ~1e-12 relative).

    Raises:
        ParameterError: bad parameters, Δ > MAX_SHIFT, or more than MAX_TERMS pmf terms
            to sum (σ too many grid units: choose a coarser granularity).
    """
    epsilon = v.nonnegative("epsilon", epsilon)
    sigma = v.positive("sigma", sigma)
    delta_max = v.count("sensitivity", sensitivity)
    if delta_max > MAX_SHIFT:
        raise ParameterError("sensitivity", f"at most {MAX_SHIFT} steps of the granularity for the discrete "
                             "Gaussian (choose a coarser --granularity)", delta_max)
    s2 = sigma * sigma
    work = _terms(1, sigma) + sum(
        _terms(max(1, math.floor(epsilon * s2 / d + sign * d / 2) + 1), sigma)
        for d in range(1, delta_max + 1) for sign in (-1, 1))
    if work > MAX_TERMS:
        raise ParameterError(
            "granularity", "coarser", sigma, message=(
                f"granularity is too fine: σ = {sigma:.4g} steps of it would need {work:.3g} pmf terms "
                f"for the discrete Gaussian's δ (limit {MAX_TERMS:.0e}); choose a coarser --granularity"))
    log_half = _log_tail(1, sigma, upper=False)
    log_z = math.log1p(2 * math.exp(log_half))  # lower bound of the normaliser
    worst = 0.0
    for d in range(1, delta_max + 1):
        c = epsilon * s2 / d
        l1 = _log_sum_above(c - d / 2, sigma, log_half, upper=True)
        l2 = _log_sum_above(c + d / 2, sigma, log_half, upper=False)
        x = epsilon + l2 - l1
        if x >= 0:
            continue
        worst = max(worst, math.exp(l1 - log_z) * -math.expm1(x))
    return min(1.0, worst * (1 + 1e-10))  # floating-point sums are accurate to ~1e-14: pad


def discrete_gaussian_sigma(*, epsilon: float, delta: float, sensitivity: int = 1) -> float:
    r"""A σ (grid units) for which the discrete Gaussian is (ε, δ)-DP (CKS20 Thm 7), verified.

    Starts at the continuous analytic σ (Balle & Wang 2018); if the discrete δ exceeds the
    target there (it can, slightly, for small Δ: CKS20 §4 and Fig. 1), brackets and bisects
    to 1e-7 relative, always returning a σ verified by :func:`discrete_gaussian_delta` ≤ δ.

    Args:
        epsilon: ε > 0.
        delta: δ in (0, 1).
        sensitivity: Δ, whole number ≥ 1.

    Returns:
        σ, a float whose square is the sampler's exact rational parameter.

    Raises:
        ParameterError: bad parameters.
    """
    from dpcalc.mechanisms.gaussian import analytic_noise_std

    epsilon = v.positive("epsilon", epsilon)
    delta = v.open_unit("delta", delta)
    d = v.count("sensitivity", sensitivity)
    def ok(sigma: float) -> bool:
        return discrete_gaussian_delta(epsilon=epsilon, sigma=sigma, sensitivity=d) <= delta

    lo = analytic_noise_std(epsilon=epsilon, delta=delta, sensitivity=d)
    if ok(lo):
        return lo
    step, hi = 1e-3, lo * (1 + 1e-3)
    while not ok(hi):
        lo, step = hi, step * 2
        hi = hi * (1 + step)
    while hi / lo - 1 > 1e-7:  # bisection keeping the invariant "hi is verified"
        mid = math.sqrt(lo * hi)
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


# ---------------------------------------------------------------------------------------------
# Release


def _decimal_text(x: Fraction) -> str:
    if x.denominator == 1:
        return str(x.numerator)
    with localcontext() as ctx:
        ctx.prec = 60
        d = Decimal(x.numerator) / Decimal(x.denominator)
    text = format(d.normalize(), "f")
    return text


def _grid(value: Any, sensitivity: Any, granularity: Any) -> tuple[Fraction, Fraction, int, int]:
    """(value, g, value in grid units rounded half up, sensitivity in grid units ⌈Δ/g⌉)."""
    x = _as_fraction("release", value)
    delta1 = _as_fraction("sensitivity", sensitivity)
    if delta1 <= 0:
        raise ParameterError("sensitivity", "a finite number > 0", float(delta1))
    if granularity is None:
        if x.denominator != 1:
            raise ParameterError("release", "an integer (or give --granularity g to round to "
                                 "multiples of g)", str(value))
        g = Fraction(1)
    else:
        g = _as_fraction("granularity", granularity)
        if g <= 0:
            raise ParameterError("granularity", "a finite number > 0", float(g))
    n = math.floor(x / g + Fraction(1, 2))
    units = math.ceil(delta1 / g)
    return x, g, n, units


def release_laplace(
    *,
    value: Any,
    epsilon: Any,
    sensitivity: Any = 1,
    granularity: Any = None,
    rng: random.Random | None = None,
) -> MechanismResult:
    r"""Release value + exact discrete Laplace noise: ε-DP (pure) for the stated sensitivity.

    The value (rounded half up to a multiple of g, if ``granularity`` is given) is released
    as g·(⌊x/g⌉ + Y), Y ~ Lap_Z(Δ'/ε) sampled exactly (CKS20 Algorithm 2) with the OS CSPRNG,
    where Δ' = ⌈Δ₁/g⌉ is the sensitivity in grid units. ε and the other numbers are taken
    as exact decimals (strings) or via a float's shortest repr.

    Args:
        value: the true query answer: an integer, or any number when ``granularity`` is given.
        epsilon: ε > 0.
        sensitivity: Δ₁ > 0 in the value's units.
        granularity: g > 0, or None for integer-valued queries (g = 1).
        rng: uniform-integer source; None = :class:`secrets.SystemRandom` (tests pass a seeded one).

    Returns:
        A result with ``released`` (float), ``details.released_exact`` (decimal text), the
        ``granularity``, the grid ``sensitivity_units``, ``scale`` (t in value units) and the
        ``guarantee`` sentence.

    Raises:
        ParameterError: non-numeric value, non-integer value without granularity, ε ≤ 0, Δ ≤ 0, g ≤ 0.
    """
    x, g, n, units = _grid(value, sensitivity, granularity)
    eps = _as_fraction("epsilon", epsilon)
    if not eps > 0:
        raise ParameterError("epsilon", "a finite number > 0", float(eps))
    t = Fraction(units) / eps
    noise = sample_discrete_laplace(t, rng)
    released = (n + noise) * g
    guarantee = (f"ε = {float(eps):g} pure DP (δ = 0) for a query whose value changes by at most "
                 f"{float(g * units):g} ({units} step(s) of {_decimal_text(g)}) between neighbouring datasets")
    return MechanismResult(
        method="discrete-laplace",
        values={"epsilon": float(eps), "delta": 0.0, "sensitivity": float(_as_fraction('sensitivity', sensitivity)),
                "granularity": float(g), "sensitivity_units": units, "scale": float(t * g),
                "released": float(released)},
        source="Canonne, Kamath, Steinke 2020, Alg. 1–2 (exact discrete Laplace, OS CSPRNG)",
        details={"released_exact": _decimal_text(released), "rounded_value": _decimal_text(n * g),
                 "guarantee": guarantee,
                 "note": ("value rounded half up to a multiple of the granularity; sensitivity "
                          "in grid units rounded up")})


def release_gaussian(
    *,
    value: Any,
    epsilon: float,
    delta: float,
    sensitivity: Any = 1,
    granularity: Any = None,
    rng: random.Random | None = None,
) -> MechanismResult:
    r"""Release value + exact discrete Gaussian noise: (ε, δ)-DP (CKS20 Thm 7, computed) and ρ-zCDP.

    σ (grid units) is :func:`discrete_gaussian_sigma` for Δ' = ⌈Δ₂/g⌉; the sample is
    N_Z(0, σ²) with σ² the exact square of that float (CKS20 Algorithm 3), OS CSPRNG.

    Args:
        value: the true answer (an integer, or any number with ``granularity``).
        epsilon: ε > 0.
        delta: δ in (0, 1).
        sensitivity: Δ₂ > 0 in the value's units (one-dimensional query: = |q(x) − q(x')|).
        granularity: g > 0, or None (g = 1, integer queries).
        rng: uniform-integer source; None = :class:`secrets.SystemRandom`.

    Returns:
        A result with ``released``, ``noise_std`` (σ·g, the parameter), ``delta_discrete`` (the
        computed δ ≤ target), ``rho`` (= Δ'²/(2σ²), CKS20 Thm 4) and the ``guarantee``.

    Raises:
        ParameterError: bad parameters (as :func:`release_laplace`), δ ∉ (0, 1).
    """
    x, g, n, units = _grid(value, sensitivity, granularity)
    eps = v.positive("epsilon", float(epsilon))
    delta = v.open_unit("delta", delta)
    sigma = discrete_gaussian_sigma(epsilon=eps, delta=delta, sensitivity=units)
    d_disc = discrete_gaussian_delta(epsilon=eps, sigma=sigma, sensitivity=units)
    noise = sample_discrete_gaussian(Fraction(sigma) ** 2, rng)
    released = (n + noise) * g
    rho = units**2 / (2 * sigma**2)
    guarantee = (f"(ε = {eps:g}, δ = {d_disc:.3g})-DP (target δ = {delta:g}) and ρ = {rho:.4g}-zCDP "
                 f"for a query whose value changes by at most {float(g * units):g} "
                 f"({units} step(s) of {_decimal_text(g)}) between neighbouring datasets")
    return MechanismResult(
        method="discrete-gaussian",
        values={"epsilon": eps, "delta": delta, "sensitivity": float(_as_fraction('sensitivity', sensitivity)),
                "granularity": float(g), "sensitivity_units": units, "noise_std": sigma * float(g),
                "noise_multiplier": sigma / units, "delta_discrete": d_disc, "rho": rho,
                "released": float(released)},
        source="Canonne, Kamath, Steinke 2020, Alg. 3, Thm 4 and 7 (exact discrete Gaussian, OS CSPRNG)",
        details={"released_exact": _decimal_text(released), "rounded_value": _decimal_text(n * g),
                 "guarantee": guarantee,
                 "note": ("noise_std is the discrete Gaussian's parameter σ (its variance is "
                          "slightly below σ²); δ computed from the discrete pmf (CKS20 Thm 7), "
                          "not the continuous formula")})
