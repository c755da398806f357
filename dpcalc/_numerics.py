r"""The numerics every layer shares: log-space helpers, the one root finder and the one bounded
minimiser, the one round-up policy (docs/design.md, "Rounding policy").

**Round-up policy.** A computed upper bound (ε, δ, a noise scale) is inflated by a stated
number of unit round-offs ``u = 2⁻⁵²`` to cover the rounding error of the floating-point
evaluation that produced it (:func:`round_up`), and a lower bound deflated
(:func:`round_down`); each call site states the error budget it covers (e.g. "a sum of
n terms: n·u"). Exact values are never inflated.

**Log-space helpers.** Everything here works on numpy arrays and never returns NaN for
finite or ``-inf`` inputs: an empty sum is ``-inf`` (the log of 0). They are thin, fast
replacements for ``scipy.special.logsumexp`` (including its ``b=signs, return_sign=True``
form) on the hot path of calibration, where the overhead of the general scipy function
dominates for small arrays.

**Root finding and minimisation (one policy).** Every one-dimensional root finder and
minimiser on a CLI path lives here, hand-written: :func:`brentq` (Brent's root finder, the
algorithm of ``scipy.optimize.brentq`` step for step: the same floats) and
:func:`minimize_bounded` (Brent's bounded minimiser, the algorithm of
``scipy.optimize.minimize_scalar(method="bounded")``). Reason, measured with
``python -X importtime`` on the shared 2-core development machine (median of 5): importing
scipy.optimize costs 0.12–0.16 s *on top of* scipy.special (0.16–0.22 s; numpy alone
0.07 s), i.e. a third of the import time of ``dpcalc sigma`` / ``dpcalc gaussian``, against
~1 ms for these two functions. So the calculator commands never import scipy.optimize;
it remains a dependency only where no CLI hot path goes (the zCDP conversion's
``minimize_scalar`` in mechanisms/conversions.py and the compose bracket in composition/, to be
moved here by their owners). scipy.special stays where its special functions are needed; ln Φ and
ln|Γ| (the RDP accountant, the Gaussian mechanism) are here, at least as accurate (see below). numpy itself is imported inside the array helpers, so that importing
this module is free (``dpcalc laplace`` never loads numpy).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from dpcalc._erfc import ERFC_ERROR_UNITS, erfc_abs_scaled

if TYPE_CHECKING:  # numpy is imported inside the array helpers: `dpcalc laplace` never loads it
    import numpy as np

__all__ = ["UNIT_ROUNDOFF", "round_up", "round_down", "log_expm1", "log_abs_expm1", "logsumexp",
           "signed_logsumexp", "log_add_signed", "log_binomial_pmf", "minimize_bounded", "brentq",
           "log_ndtr", "ndtr", "ndtr_pair", "NDTR_VECTOR_ERROR_UNITS", "log_abs_gamma", "gamma_sign", "log_factorials"]

#: the unit round-off of IEEE double precision, 2⁻⁵² ≈ 2.2e-16
UNIT_ROUNDOFF = 2.0 ** -52


def round_up(x, ulps: float = 16.0):
    """``x·(1 + ulps·u)``: an upper bound computed in floating point, moved up by ``ulps``
    unit round-offs to cover its evaluation error (scalar or array; 0, ±inf unchanged).

    Args:
        x: the computed value(s) (≥ 0 for a meaningful bound).
        ulps: the error budget in units of u = 2⁻⁵² (the caller states why it suffices).
    """
    return x * (1.0 + ulps * UNIT_ROUNDOFF)


def round_down(x, ulps: float = 16.0):
    """``x·(1 − ulps·u)``: a lower bound moved down by ``ulps`` unit round-offs (see :func:`round_up`)."""
    return x * (1.0 - ulps * UNIT_ROUNDOFF)


def log_expm1(x):
    r"""``log(exp(x) − 1)`` for x > 0, accurate for tiny and huge x.

    Uses ``log(expm1(x))`` for x ≤ 1 (no cancellation, exact down to subnormal x) and
    ``x + log(−expm1(−x))`` for x > 1 (no overflow for x up to the float range).
    Returns ``-inf`` where x == 0.

    Args:
        x: a Python float (then a float is returned, computed with :mod:`math` only) or an
            array of non-negative floats, any shape.

    Returns:
        A float, or an array of the same shape.
    """
    if isinstance(x, (float, int)):
        if x > 1.0:
            return x + math.log(-math.expm1(-x))
        return math.log(math.expm1(x)) if x > 0 else -math.inf
    import numpy as np

    x = np.asarray(x, dtype=float)
    out = np.empty_like(x)
    small = x <= 1.0
    with np.errstate(divide="ignore"):
        out[small] = np.log(np.expm1(x[small]))
    big = ~small
    out[big] = x[big] + np.log(-np.expm1(-x[big]))
    return out


def logsumexp(a: np.ndarray, axis: int = -1) -> np.ndarray:
    r"""``log Σ exp(a)`` along ``axis`` (``-inf`` for an all ``-inf`` slice).

    Args:
        a: array of floats (entries may be ``-inf``; never ``+inf`` or NaN).
        axis: axis to reduce.

    Returns:
        ``a`` reduced along ``axis``.
    """
    import numpy as np

    m = np.max(a, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore"):
        s = np.log(np.sum(np.exp(a - m), axis=axis, keepdims=True)) + m
    return np.squeeze(s, axis=axis)


def signed_logsumexp(log_abs: np.ndarray, signs: np.ndarray, axis: int = -1
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""Signed log-sum: ``Σ signs·exp(log_abs)`` as (log |sum|, sign of sum, log Σ|terms|).

    The third output, ``log Σ exp(log_abs)``, bounds the round-off of the signed sum:
    the absolute error of the sum is at most about ``n·u·Σ|terms|`` (u = 2⁻⁵³).

    Args:
        log_abs: log of the absolute values of the terms (``-inf`` for 0).
        signs: +1/−1 (or 0), same shape as ``log_abs``.
        axis: axis to reduce.

    Returns:
        ``(log_abs_sum, sign, log_abs_total)``, each reduced along ``axis``; a zero sum
        has ``log_abs_sum = -inf`` and sign 0.
    """
    import numpy as np

    m = np.max(log_abs, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(log_abs - m)
    s = np.sum(signs * e, axis=axis, keepdims=True)
    tot = np.sum(e, axis=axis, keepdims=True)
    with np.errstate(divide="ignore"):
        log_s = np.log(np.abs(s)) + m
        log_tot = np.log(tot) + m
    return (np.squeeze(log_s, axis=axis), np.squeeze(np.sign(s), axis=axis),
            np.squeeze(log_tot, axis=axis))


def log_add_signed(log_a: np.ndarray, sign_a: np.ndarray, log_b: np.ndarray, sign_b: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Signed log-space addition of two arrays: ``sign_a·e^{log_a} + sign_b·e^{log_b}``.

    Returns:
        ``(log |sum|, sign of sum)`` elementwise.
    """
    import numpy as np

    la, sa, _ = signed_logsumexp(np.stack([log_a, log_b]), np.stack([sign_a, sign_b]), axis=0)
    return la, sa


def log_abs_expm1(x: np.ndarray) -> np.ndarray:
    r"""``log |exp(x) − 1|`` for any real x (``-inf`` at 0); accurate for tiny and huge |x|."""
    import numpy as np

    x = np.asarray(x, dtype=float)
    pos = x > 0
    out = np.empty_like(x)
    out[pos] = log_expm1(x[pos])
    with np.errstate(divide="ignore"):
        out[~pos] = np.log(-np.expm1(x[~pos]))
    return out


def minimize_bounded(f, lo: float, hi: float, xatol: float, maxiter: int = 60
                      ) -> tuple[float, float]:
    """Minimise ``f`` on [lo, hi] by Brent's bounded method (Brent 1973, ch. 5; the algorithm
    of ``scipy.optimize.minimize_scalar(method="bounded")``), written out so that the CLI
    does not pay for importing scipy.optimize (module docstring).

    Args:
        f: a scalar function of one float.
        lo, hi: the interval, lo < hi.
        xatol: absolute tolerance on x.
        maxiter: the most evaluations after the first.

    Returns:
        ``(x, f(x))`` at the best point found (a local minimum to ``xatol`` when f is unimodal).
    """
    steps = minimize_bounded_steps(lo, hi, xatol, maxiter)
    x = next(steps)
    while True:
        try:
            x = steps.send(f(x))
        except StopIteration as done:
            return done.value


def minimize_bounded_steps(lo: float, hi: float, xatol: float, maxiter: int = 60):
    """:func:`minimize_bounded` as a generator: it yields each point x to evaluate, is sent
    f(x), and returns ``(x, f(x))`` (``StopIteration.value``). Driving many of them in step
    lets a caller evaluate one point of each of many minimisations in one vectorised call,
    with the same arithmetic, hence the same points and result, as :func:`minimize_bounded`.
    """
    sqrt_eps = math.sqrt(2.2e-16)
    golden_mean = 0.5 * (3.0 - math.sqrt(5.0))
    a, b = lo, hi
    fulc = a + golden_mean * (b - a)
    nfc = xf = fulc
    rat = e = 0.0
    fx = yield xf
    ffulc = fnfc = fx
    xm = 0.5 * (a + b)
    tol1 = sqrt_eps * abs(xf) + xatol / 3.0
    tol2 = 2.0 * tol1
    for _ in range(maxiter):
        if abs(xf - xm) <= tol2 - 0.5 * (b - a):
            break
        golden = True
        if abs(e) > tol1:  # try a parabolic step
            golden = False
            r = (xf - nfc) * (fx - ffulc)
            qq = (xf - fulc) * (fx - fnfc)
            p = (xf - fulc) * qq - (xf - nfc) * r
            qq = 2.0 * (qq - r)
            if qq > 0.0:
                p = -p
            qq = abs(qq)
            r, e = e, rat
            if abs(p) < abs(0.5 * qq * r) and _q_between(p, qq, a - xf, b - xf):
                rat = p / qq
                x = xf + rat
                if (x - a) < tol2 or (b - x) < tol2:
                    rat = tol1 if xm >= xf else -tol1
            else:
                golden = True
        if golden:
            e = (a - xf) if xf >= xm else (b - xf)
            rat = golden_mean * e
        x = xf + (1.0 if rat >= 0 else -1.0) * max(abs(rat), tol1)
        fu = yield x
        if fu <= fx:
            if x >= xf:
                a = xf
            else:
                b = xf
            fulc, ffulc = nfc, fnfc
            nfc, fnfc = xf, fx
            xf, fx = x, fu
        else:
            if x < xf:
                a = x
            else:
                b = x
            if fu <= fnfc or nfc == xf:
                fulc, ffulc = nfc, fnfc
                nfc, fnfc = x, fu
            elif fu <= ffulc or fulc == xf or fulc == nfc:
                fulc, ffulc = x, fu
        xm = 0.5 * (a + b)
        tol1 = sqrt_eps * abs(xf) + xatol / 3.0
        tol2 = 2.0 * tol1
    return xf, fx


def _q_between(p: float, qq: float, lo: float, hi: float) -> bool:
    """Brent's acceptability test of a parabolic step: q·lo < p < q·hi."""
    return qq * lo < p < qq * hi


def log_binomial_pmf(j, n, log_p, log_1mp, log_scale: float = 0.0):
    r"""``log(scale · C(n, j) p^j (1−p)^{n−j})`` elementwise, with a bound on its absolute error.

    Evaluated as ``lgamma(n+1) − lgamma(j+1) − lgamma(n−j+1) + j·log p + (n−j)·log(1−p) + log scale``
    (``scipy.special.gammaln``, accurate to a few ulps; each sum adds one rounding). The one
    binomial pmf of the project: pld's randomized-response steps and the optimal composition's
    atoms both use it.

    Args:
        j: outcomes, integers in [0, n] (as floats), array of shape (m,).
        n: number of trials ≥ 0, a scalar or an array broadcasting with ``j``.
        log_p, log_1mp: log p and log(1 − p) (passed separately so neither is recomputed), scalars
            or arrays broadcasting with ``j``.
        log_scale: log of a common factor (default 0).

    Returns:
        ``(log_pmf, err)``: shape of the broadcast, and ``err`` (a float for scalar n, log_p,
        log_1mp; else an array) with ``|computed − exact| ≤ err`` for every entry:
        err = 16u·(3·lgamma(n+1) + n(|log p| + |log(1−p)|) + 3|log scale| + 10), i.e. 16 unit
        round-offs per unit of magnitude of the terms summed (an error of log p itself, at most
        u·|log p| relative, enters j times and is covered by the n·|log p| term).
    """
    import numpy as np
    from scipy.special import gammaln

    n = np.asarray(n, dtype=float)
    lg = gammaln(n + 1.0)
    log_w = (lg - gammaln(j + 1.0) - gammaln(n - j + 1.0) + (n - j) * log_1mp + j * log_p + log_scale)
    err = 16 * UNIT_ROUNDOFF * (3 * lg + n * (np.abs(log_p) + np.abs(log_1mp)) + 3 * abs(log_scale) + 10)
    return log_w, (float(err) if np.ndim(err) == 0 else err)


def brentq(f, a: float, b: float, *, xtol: float = 2e-12, rtol: float = 4 * 2.0 ** -52,
           maxiter: int = 100) -> float:
    """A root of ``f`` in the bracket [a, b] by Brent's method (Brent 1973, ch. 4): the
    algorithm of ``scipy.optimize.brentq`` (its ``Zeros/brentq.c``) step for step, so both
    return the same float; written out so that the CLI does not import scipy.optimize
    (see the module docstring for the measured cost).

    Args:
        f: a scalar function of one float, with f(a), f(b) of opposite signs (or one zero).
        a, b: the bracket.
        xtol, rtol: the root is found to within ``xtol + rtol·|x|`` (scipy's defaults).
        maxiter: the most iterations.

    Returns:
        The root x.

    Raises:
        ValueError: f(a) and f(b) have the same sign.
        RuntimeError: not converged within ``maxiter`` iterations.
    """
    xpre, xcur = float(a), float(b)
    xblk = fblk = spre = scur = 0.0
    fpre, fcur = f(xpre), f(xcur)
    if fpre == 0:
        return xpre
    if fcur == 0:
        return xcur
    if math.copysign(1.0, fpre) == math.copysign(1.0, fcur):
        raise ValueError("f(a) and f(b) must have different signs")
    for _ in range(maxiter):
        if fpre != 0 and fcur != 0 and math.copysign(1.0, fpre) != math.copysign(1.0, fcur):
            xblk, fblk = xpre, fpre
            spre = scur = xcur - xpre
        if abs(fblk) < abs(fcur):
            xpre, xcur, xblk = xcur, xblk, xcur
            fpre, fcur, fblk = fcur, fblk, fcur
        delta = (xtol + rtol * abs(xcur)) / 2
        sbis = (xblk - xcur) / 2
        if fcur == 0 or abs(sbis) < delta:
            return xcur
        if abs(spre) > delta and abs(fcur) < abs(fpre):
            if xpre == xblk:  # interpolate
                stry = -fcur * (xcur - xpre) / (fcur - fpre)
            else:  # extrapolate (inverse quadratic)
                dpre = (fpre - fcur) / (xpre - xcur)
                dblk = (fblk - fcur) / (xblk - xcur)
                stry = -fcur * (fblk * dblk - fpre * dpre) / (dblk * dpre * (fblk - fpre))
            if 2 * abs(stry) < min(abs(spre), 3 * abs(sbis) - delta):  # good short step
                spre, scur = scur, stry
            else:
                spre = scur = sbis
        else:
            spre = scur = sbis
        xpre, fpre = xcur, fcur
        xcur += scur if abs(scur) > delta else (delta if sbis > 0 else -delta)
        fcur = f(xcur)
    raise RuntimeError(f"brentq did not converge within {maxiter} iterations")


# ---------------------------------------------------------------------------
# Special functions: ln Φ and ln|Γ| from math + numpy (no scipy.special on start-up paths)
# ---------------------------------------------------------------------------
#
# ``scipy.special`` costs ~0.4 s to import (its __init__ pulls scipy._lib.array_api_compat and
# numpy.f2py), more than the whole of ``dpcalc epsilon --accountant rdp`` otherwise. The RDP
# accountant and the Gaussian mechanism need only ln Φ and ln|Γ|, built here from ``math``
# (libm's erfc and CPython's lgamma) where those are accurate and from classical expansions
# with proven remainders where they are not. Accuracy, measured against mpmath (tests/
# test_special_functions.py) in units of u·max(1, |f|) — absolute where |f| < 1, relative beyond,
# which is what an RDP term e^{... + f} needs: is stated with each function; it is never
# worse than ``scipy.special``'s on the same points.

#: ln √(2π) = ½ ln(2π) (mpmath, 30 digits: 0.918938533204672741780329736406), nearest double
_LN_SQRT_2PI = 0.9189385332046728
#: ln π (mpmath: 1.14472988584940017414342735135), nearest double
_LN_PI = 1.1447298858494002
#: |x| at and beyond which ln Φ(x) uses the asymptotic (Mills-ratio) series
_NDTR_ASY = 10.0
#: terms of that series: the first omitted one, 49!!/x^50 ≤ 49!!/10^50 ≈ 5.8e-19 < u/7000
_NDTR_TERMS = 25


def _two_square(x):
    """x² = hi + lo exactly (Dekker's splitting), elementwise; ``lo = 0`` where |x| > 1e150
    (the splitting would overflow; there hi's rounding is far below the result's ulp)."""
    import numpy as np

    x = np.asarray(x, dtype=float)
    xs = np.where(np.abs(x) <= 1e150, x, 0.0)
    c = 134217729.0 * xs  # 2^27 + 1
    xh = c - (c - xs)
    xl = xs - xh
    with np.errstate(over="ignore", invalid="ignore"):
        hi = x * x
        lo = ((xh * xh - xs * xs) + 2 * xh * xl) + xl * xl  # xs·xs = hi where |x| ≤ 1e150
    return hi, np.where(np.isfinite(lo), lo, 0.0)


def _log_phi_tail(x):
    r"""ln Φ(−x) for x ≥ ``_NDTR_ASY`` (array), from the asymptotic series of the Mills ratio
    (Abramowitz & Stegun 26.2.12; A&S 7.1.23 for erfc):

    .. math:: Φ(−x) = \frac{φ(x)}{x}\Big[\sum_{n=0}^{N-1} (−1)^n\frac{(2n−1)!!}{x^{2n}} + R_N\Big],
              \quad |R_N| ≤ \frac{(2N−1)!!}{x^{2N}},

    (the remainder has the sign of the first omitted term and is bounded by it: repeated
    integration by parts of ∫_x^∞ e^{−t²/2} dt). With N = ``_NDTR_TERMS`` = 25 and x ≥ 10,
    |R_N| ≤ 5.8e-19 < u/7000. x² is split exactly (Dekker), so the only errors are the final
    additions and the short Horner sum: ≤ 1.3 u·|ln Φ| measured.
    """
    import numpy as np

    x = np.asarray(x, dtype=float)
    with np.errstate(over="ignore", under="ignore", divide="ignore"):
        y = 1.0 / (x * x)
    # S − 1 = −y(1 − 3y(1 − 5y(1 − …))): every bracket in (0.5, 1], no cancellation
    h = np.ones_like(x)
    for k in range(_NDTR_TERMS - 1, 1, -1):
        h = 1.0 - (2 * k - 1) * y * h
    log_s = np.log1p(-y * h)
    hi, lo = _two_square(x)
    return -0.5 * hi + ((-0.5 * lo - np.log(x) - _LN_SQRT_2PI) + log_s)


def _log_phi_tail_scalar(x: float) -> float:
    """:func:`_log_phi_tail` for one float, with :mod:`math` (same operations, same order)."""
    y = 1.0 / (x * x) if x < 1e154 else 0.0
    h = 1.0
    for k in range(_NDTR_TERMS - 1, 1, -1):
        h = 1.0 - (2 * k - 1) * y * h
    log_s = math.log1p(-y * h)
    if x <= 1e150:
        c = 134217729.0 * x  # Dekker: x² = hi + lo exactly
        xh = c - (c - x)
        xl = x - xh
        hi = x * x
        lo = ((xh * xh - hi) + 2 * xh * xl) + xl * xl
    else:
        hi, lo = (x * x if x < 1e154 else math.inf), 0.0
    return -0.5 * hi + ((-0.5 * lo - math.log(x) - _LN_SQRT_2PI) + log_s)


def log_ndtr(x):
    r"""ln Φ(x), Φ the standard normal distribution function, for any real x (scalar or array).

    * |x| < 10: from libm's erfc: ln(½·erfc(−x/√2)) for x < 0 and ln1p(−½·erfc(x/√2)) for
      x ≥ 0 (no cancellation on either side).
    * x ≤ −10: the Mills-ratio asymptotic series with a proven remainder (see
      :func:`_log_phi_tail`); x ≥ 10: ln1p(−Φ(−x)) with Φ(−x) from that series.

    Accuracy against mpmath (tests/test_special_functions.py and a 1.2·10⁴-point check over
    [−3e9, 3e9], the range of the arguments the RDP accountant passes over the CLI's (σ, q)
    ranges): error ≤ 1.6 u·max(1, |ln Φ(x)|), against 2.2 u for ``scipy.special.log_ndtr`` on
    the same points (which rounds x²; we split it exactly).

    Args:
        x: a float (then a float is returned, computed with :mod:`math` only: ``dpcalc
            gaussian`` never imports numpy for it) or an array of floats, any shape.

    Returns:
        ln Φ(x), ≤ 0; same shape as ``x``; NaN for NaN.
    """
    if isinstance(x, (float, int)):
        x = float(x)
        if -_NDTR_ASY < x < 0.0:
            return math.log(0.5 * math.erfc(-x / math.sqrt(2)))
        if 0.0 <= x < _NDTR_ASY:
            return math.log1p(-0.5 * math.erfc(x / math.sqrt(2)))
        if x <= -_NDTR_ASY:
            return _log_phi_tail_scalar(-x)
        if x >= _NDTR_ASY:
            return math.log1p(-math.exp(_log_phi_tail_scalar(x)))
        return x  # NaN
    import numpy as np

    x = np.asarray(x, dtype=float)
    out = np.empty_like(x)
    lo_tail = x <= -_NDTR_ASY
    hi_tail = x >= _NDTR_ASY
    mid = ~(lo_tail | hi_tail)
    if lo_tail.any():
        out[lo_tail] = _log_phi_tail(-x[lo_tail])
    if hi_tail.any():
        with np.errstate(under="ignore"):
            out[hi_tail] = np.log1p(-np.exp(_log_phi_tail(x[hi_tail])))
    if mid.any():
        xm = x[mid]
        neg = xm < 0
        r2 = math.sqrt(2)
        e = np.fromiter(map(math.erfc, (np.abs(xm) / r2).tolist()), float, xm.size)
        with np.errstate(divide="ignore"):
            out[mid] = np.where(neg, np.log(0.5 * e), np.log1p(-0.5 * e))
        out[mid & np.isnan(x)] = np.nan
    return out


#: 1/√2 = _SQRT_HALF + _SQRT_HALF_LO (mpmath, 50 digits: 0.70710678118654752440084436210484903928…)
_SQRT_HALF = 0.7071067811865476
_SQRT_HALF_LO = -4.833646656726457e-17
#: 2/√π (mpmath), nearest double
_TWO_OVER_SQRT_PI = 1.1283791670955126
#: :func:`ndtr` calls libm's erfc point by point up to this many points (~0.1–0.2 µs a point,
#: accurate to 4u) and the vectorised :func:`dpcalc._erfc.erfc_abs_scaled` beyond (~35 ns a
#: point at 32k points, ~60 µs a call whatever the size, within ``NDTR_VECTOR_ERROR_UNITS``).
#: The crossover, measured with benchmarks/bench_erfc.py on the shared 2-core machine: equal
#: time at ~512 points, the vector 1.5× faster at 1024, 5× at 32k.
_NDTR_LIBM_MAX = 512
#: relative error allowance, in units of u, of Φ on the vectorised path (arrays of more than
#: ``_NDTR_LIBM_MAX`` points): certified in :mod:`dpcalc._erfc` (≤ 6u relative to the value,
#: ≤ 8.3u relative to the smaller side for |x| ≤ 1). ``_pld_grid`` allows it per value on grids
#: whose Φ takes that path (4u on the libm path).
NDTR_VECTOR_ERROR_UNITS = ERFC_ERROR_UNITS


def ndtr(x, vector: bool | None = None):
    r"""Φ(x), the standard normal distribution function, elementwise (numpy arrays, any shape).

    Φ(x) = ½·erfc(|x|/√2) for x < 0 and 1 − ½·erfc(|x|/√2) for x ≥ 0.

    Arrays of at most ``_NDTR_LIBM_MAX`` points: libm's erfc (:func:`math.erfc`, as in
    :func:`log_ndtr`) at z = fl(|x|·fl(1/√2)). The rounding of that argument (|r| ≤ u·z,
    r = |x|/√2 − z) alone would cost a relative error ≈ z²·u·2/2 in erfc — ~17 u at |x| = 5,
    ~250 u at |x| = 20 (u = 2⁻⁵², ``UNIT_ROUNDOFF``), which ``scipy.special.ndtr`` (same formula)
    shows. Here r is computed exactly (Dekker's two-product, 1/√2 split into two doubles) and
    corrected to first order: erfc(z + r) = erfc(z) − r·(2/√π)e^{−z²} + O(r²·z·e^{−z²}), the
    neglected term < 4(z²u)² relative (< 1e-24 for z ≤ 27). Accuracy against mpmath
    (tests/test_ndtr.py, 7·10³ points over [−37.5, 37.5]): relative error ≤ 4 u of the smaller
    of Φ(x), 1 − Φ(x) wherever that is a normal double (|x| ≤ 37.5; measured ≤ 2 u for x < 0,
    ≤ 3.2 u for 0 ≤ x < 1) — the 4 u per value that ``dpcalc.accounting._pld_grid`` allows —
    against up to ~250 u for ``scipy.special.ndtr`` at |x| = 20 and ~1000 u near x = −37. Below
    Φ ≈ 2.2e-308 (x < −37.5) the value is subnormal and its error absolute, < 1e-320.

    Larger arrays (pld's grids): :func:`dpcalc._erfc.erfc_abs_scaled`, numpy operations only
    (exp(−x²/2) with x² exact, times a piecewise-polynomial erfcx), certified within
    ``NDTR_VECTOR_ERROR_UNITS`` = 12u (≤ 6u relative to the value; measured ≤ 3u), ~5× faster
    than the loop at 32k points. Neither path imports scipy (importing scipy.special costs
    ~0.2 s CPU, more than half the start-up of ``dpcalc sigma``: issue 17).

    Args:
        x: array of floats, any shape (a scalar is accepted and returned as a 0-d array).
        vector: which path (True: vectorised, False: libm); None (default) chooses by the
            array's size. A caller that evaluates a grid's values on arrays of other sizes
            passes the grid's choice, so that every value is bitwise the same.

    Returns:
        Φ(x) in [0, 1], same shape; NaN for NaN.
    """
    import numpy as np

    x = np.asarray(x, dtype=float)
    e = _erfc_for(x, vector)
    return np.where(x < 0, 0.5 * e, 1.0 - 0.5 * e)


def ndtr_pair(x, vector: bool | None = None):
    """(Φ(x), Φ(−x)) elementwise: the same values as ``(ndtr(x), ndtr(-x))`` (bitwise), from one
    erfc evaluation per point (both use erfc(|x|/√2)).

    Args:
        x: array of floats, any shape.
        vector: the path, as in :func:`ndtr` (None: by the array's size).

    Returns:
        Two arrays of the shape of ``x``.
    """
    import numpy as np

    x = np.asarray(x, dtype=float)
    e = _erfc_for(x, vector)
    small, large = 0.5 * e, 1.0 - 0.5 * e
    neg = x < 0
    return np.where(neg, small, large), np.where(neg, large, small)


def _erfc_for(x, vector: bool | None):
    """erfc(|x|/√2) by the path :func:`ndtr` takes (``vector``, or by x's size if None)."""
    if vector is None:
        vector = x.size > _NDTR_LIBM_MAX
    return erfc_abs_scaled(x) if vector else _erfc_abs_scaled(x)


def _erfc_abs_scaled(x):
    """erfc(|x|/√2) elementwise from libm, with the argument's rounding corrected (see :func:`ndtr`)."""
    import numpy as np

    ax = np.abs(x).ravel()
    ok = ax <= 1e300  # beyond, erfc is 0 and the splitting below would overflow
    a = np.where(ok, ax, 0.0)
    z = a * _SQRT_HALF
    # Dekker: a·_SQRT_HALF − z exactly, from the splits a = a_h + a_l, _SQRT_HALF = c_h + c_l
    c = 134217729.0 * _SQRT_HALF  # 2^27 + 1
    c_h = c - (c - _SQRT_HALF)
    c_l = _SQRT_HALF - c_h
    t = 134217729.0 * a
    a_h = t - (t - a)
    a_l = a - a_h
    prod_err = ((a_h * c_h - z) + a_h * c_l + a_l * c_h) + a_l * c_l
    r = np.where(ok, prod_err + a * _SQRT_HALF_LO, 0.0)
    z = np.where(ok, z, ax * _SQRT_HALF)
    e = np.fromiter(map(math.erfc, z.tolist()), float, z.size)
    with np.errstate(under="ignore", over="ignore"):
        e = np.maximum(e - r * (_TWO_OVER_SQRT_PI * np.exp(-z * z)), 0.0)
    return e.reshape(np.shape(x))


#: Stirling-series coefficients B_{2k}/(2k(2k−1)), k = 1…8 (Bernoulli numbers B_{2k})
_STIRLING = (1 / 12, -1 / 360, 1 / 1260, -1 / 1680, 1 / 1188, -691 / 360360, 1 / 156,
             -3617 / 122400)
#: x at and beyond which ln Γ(x) uses the Stirling series; first omitted term
#: (43867/798)/(18·17·x¹⁷) ≤ 1.8e-18 < u/100 there
_LGAMMA_ASY = 10.0


def _lgamma_stirling(x):
    r"""ln Γ(x) for x ≥ ``_LGAMMA_ASY`` (array): Stirling's series
    (x − ½)(ln x − 1) − ½ + ½ln(2π) + Σ_{k=1}^{8} B_{2k}/(2k(2k−1)x^{2k−1}) (DLMF 5.11.1); for
    real x > 0 the remainder is bounded by the first omitted term (DLMF 5.11.ii), here
    ≤ 1.8e-18."""
    import numpy as np

    z = 1.0 / (x * x)
    s = np.full_like(x, _STIRLING[-1])
    for c in _STIRLING[-2::-1]:
        s = s * z + c
    return ((x - 0.5) * (np.log(x) - 1.0) + (_LN_SQRT_2PI - 0.5)) + s / x


#: 1 − γ (Euler's constant γ; mpmath), and (ζ(k) − 1)/k for k = 2…27 (mpmath, nearest doubles):
#: ln Γ(2 + z) = (1 − γ)z + Σ_{k≥2} (−1)^k (ζ(k) − 1)/k · z^k for |z| < 2 (DLMF 5.7.3 with
#: ln Γ(2 + z) = ln Γ(1 + z) + ln1p(z), DLMF 5.7.3/4.6.1)
_LGAMMA2_C1 = 0.42278433509846713
_LGAMMA2_ZETA = (
    0.3224670334241132, 0.0673523010531981, 0.020580808427784546, 0.007385551028673986,
    0.0028905103307415234, 0.001192753911703261, 0.0005096695247430425, 0.00022315475845357939,
    9.945751278180853e-05, 4.492623673813314e-05, 2.050721277567069e-05, 9.439488275268397e-06,
    4.374866789907488e-06, 2.039215753801366e-06, 9.55141213040742e-07, 4.492469198764566e-07,
    2.1207184805554665e-07, 1.0043224823968099e-07, 4.7698101693639804e-08,
    2.2711094608943164e-08, 1.0838659214896955e-08, 5.183475041970047e-09,
    2.4836745438024785e-09, 1.1921401405860912e-09, 5.731367241678862e-10,
    2.7595228851242334e-10)


def _lgamma_small(x):
    r"""ln Γ(x) for 0 < x < 11 (array). With m = round(x) − 2 and z = x − round(x) ∈ [−½, ½]
    (exact), ln Γ(2 + z) from its Taylor series at 2 (coefficients above; 26 terms, remainder
    ≤ Σ_{k≥28} 2^{1−k}2^{−k}/28 < 1.5e-18 since ζ(k) − 1 ≤ 2^{1−k}), then
    Γ(x) = (x − 1)(x − 2)…(x − m)·Γ(2 + z) for m > 0 and Γ(x) = Γ(2 + z)/(x(x+1)…(x + |m| − 1))
    for m < 0 (at most 8 factors: relative error ≤ 9u of the product)."""
    import numpy as np

    rx = np.round(x)
    z = x - rx
    s = np.full_like(x, _LGAMMA2_ZETA[-1])
    for k in range(len(_LGAMMA2_ZETA) - 2, -1, -1):
        s = _LGAMMA2_ZETA[k] - z * s
    t = z * (_LGAMMA2_C1 + z * s)
    m = rx - 2.0
    prod = np.ones_like(x)
    for k in range(1, int(m.max(initial=0.0)) + 1):
        prod = np.where(m >= k, prod * (x - k), prod)
    den = np.ones_like(x)
    for k in range(0, int(-m.min(initial=0.0))):
        den = np.where(-m > k, den * (x + k), den)
    with np.errstate(divide="ignore"):
        return t + (np.log(prod) - np.log(den))


def log_abs_gamma(x):
    r"""ln|Γ(x)| elementwise, for any real x (``+inf`` at the poles 0, −1, −2, …).

    * x ≥ 10: Stirling's series (:func:`_lgamma_stirling`, remainder ≤ 1.8e-18);
    * x ≤ −10: the reflection formula ln π − ln|sin(πx)| − ln Γ(1 − x), with sin(πx) taken
      at the exact reduced argument x − round(x);
    * 0 < x < 10: the Taylor series at 2 and the recurrence (:func:`_lgamma_small`);
      −10 < x ≤ 0: Γ(x) = Γ(2 + z)/(x(x+1)…(1 + z)), z = x − round(x), with that series.

    Accuracy against mpmath (tests/test_special_functions.py; 10⁴ points over [−4e4, 4e4]):
    error ≤ 2 u·max(1, |ln|Γ(x)||), against up to 2.7 u for ``scipy.special.gammaln``.

    Args:
        x: array of floats, any shape.

    Returns:
        Same shape as ``x``.
    """
    import numpy as np

    x = np.asarray(x, dtype=float)
    out = np.empty_like(x)
    big = x >= _LGAMMA_ASY
    neg = x <= -_LGAMMA_ASY
    mid = ~(big | neg)
    if big.any():
        out[big] = _lgamma_stirling(x[big])
    if neg.any():
        xn = x[neg]
        r = xn - np.round(xn)  # exact (Sterbenz): the distance to the nearest integer
        with np.errstate(divide="ignore"):
            out[neg] = (_LN_PI - np.log(np.abs(np.sin(np.pi * r)))) - _lgamma_stirling(1.0 - xn)
    if mid.any():
        xm = x[mid]
        pos = xm > 0
        res = np.empty_like(xm)
        res[pos] = _lgamma_small(xm[pos])
        xn = xm[~pos]
        # Γ(x) = Γ(2 + z)/(x(x+1)…(x+n−1)) with x + n = 2 + z, z = x − round(x): every factor
        # is exact (|x + k| ≤ |x| keeps x's last bit), ≤ 11 roundings in the product
        rx = np.round(xn)
        n = 2.0 - rx
        prod = np.ones_like(xn)
        for k in range(int(n.max(initial=0.0))):
            prod = np.where(n > k, prod * (xn + k), prod)
        with np.errstate(divide="ignore"):
            res[~pos] = _lgamma_small(2.0 + (xn - rx)) - np.log(np.abs(prod))
        out[mid] = res
    return out


def gamma_sign(x):
    """The sign of Γ(x) elementwise: +1 for x > 0; (−1)^⌈−x⌉ for negative non-integer x (Γ
    changes sign at each pole); 0 at the poles. The closed form of
    ``scipy.special.gammasgn``.

    Args:
        x: array of floats, any shape.
    """
    import numpy as np

    x = np.asarray(x, dtype=float)
    odd = np.mod(np.ceil(-x), 2.0) == 1.0
    pole = (x <= 0) & (x == np.round(x))
    return np.where(x > 0, 1.0, np.where(pole, 0.0, np.where(odd, -1.0, 1.0)))


_LOG_FACTORIALS: list = []  # [array of ln k!, k = 0…len − 1], grown on demand


def log_factorials(n: int):
    """ln k! for k = 0…n, shape (n + 1,): :func:`log_abs_gamma` at k + 1 (exact products and
    logs below 10, Stirling beyond; ≤ 2 u·max(1, ln k!) against mpmath, tests/test_special_functions.py).
    The table is kept and extended on demand; do not modify the returned array."""
    import numpy as np

    have = _LOG_FACTORIALS[0] if _LOG_FACTORIALS else np.zeros(0)
    if n >= have.size:
        size = max(n + 1, 2 * have.size)
        new = log_abs_gamma(np.arange(have.size, size, dtype=float) + 1.0)
        have = np.concatenate([have, new])
        _LOG_FACTORIALS[:] = [have]
    return have[: n + 1]
