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
moved here by their owners). scipy.special stays (its special functions are the accuracy
these bounds rest on). numpy itself is imported inside the array helpers, so that importing
this module is free (``dpcalc laplace`` never loads numpy).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy is imported inside the array helpers: `dpcalc laplace` never loads it
    import numpy as np

__all__ = ["UNIT_ROUNDOFF", "round_up", "round_down", "log_expm1", "log_abs_expm1", "logsumexp",
           "signed_logsumexp", "log_add_signed", "log_binomial_pmf", "minimize_bounded", "brentq"]

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
    sqrt_eps = math.sqrt(2.2e-16)
    golden_mean = 0.5 * (3.0 - math.sqrt(5.0))
    a, b = lo, hi
    fulc = a + golden_mean * (b - a)
    nfc = xf = fulc
    rat = e = 0.0
    fx = f(xf)
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
        fu = f(x)
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
