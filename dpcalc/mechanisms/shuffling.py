r"""Amplification by shuffling: n users each apply an ε₀-LDP randomizer to their record, a
trusted shuffler releases the outputs in random order; the released multiset is (ε, δ)-DP
in the central model (replace-one adjacency of the n records).

Feldman, McMillan, Talwar, "Hiding among the clones: a simple and nearly optimal analysis
of privacy amplification by shuffling", FOCS 2021 (arXiv:2012.12803):

* **Closed form** (Thm 3.1): for ε₀ ≤ ln(n / (16 ln(2/δ))) the shuffled output is (ε, δ)-DP with
  ε = ln(1 + (e^{ε₀} − 1)/(e^{ε₀} + 1)·(8√(e^{ε₀} ln(4/δ))/√n + 8e^{ε₀}/n)).
  We print the authors' reference implementation of the bound (apple/ml-shuffling-amplification,
  ``closedformanalysis``), whose factor (1 − e^{−ε₀})/(1 + e^{−ε₀−ε′}) with
  ε′ = ln(1 + a + c) is ≥ (e^{ε₀} − 1)/(e^{ε₀} + 1): never the smaller of the two; and we check
  the range with ln(4/δ) (as that implementation does), which is the stricter of the two.
  Outside the range the closed form is refused with the reason.
* **Numerical bound** (§4 of the same paper, the reduction of Thm 3.2 evaluated exactly): the
  output is a post-processing of a pair of distributions on (A, C): C ~ Bin(n − 1, e^{−ε₀})
  clones, A ~ Bin(C, ½), and P = A + Bern(1 − α), Q = A + Bern(α) with α = e^{ε₀}/(e^{ε₀} + 1).
  For each c the likelihood ratio is monotone in a, so D_{e^ε}(P‖Q) = Σ_c Pr[C = c]·
  [αF_c(k) + (1 − α)F_c(k − 1) − e^ε(αF_c(k − 1) + (1 − α)F_c(k))], F_c the Bin(c, ½) CDF and
  k = ⌊(c + 1)(α − e^ε(1 − α))/((2α − 1)(1 + e^ε))⌋; by the symmetry a ↦ c + 1 − a the other
  direction is equal. We sum every c holding the mass of Bin(n − 1, e^{−ε₀}) (the rest is added
  to δ), add a round-off allowance to each term, and bisect for the smallest ε with δ(ε) ≤ δ:
  an upper bound, valid for every n ≥ 1 and ε₀ > 0.

  The stronger clone of Feldman, McMillan, Talwar SODA 2023 (clone probability 2/(e^{ε₀} + 1))
  is not used: its erratum restricts its general upper bounds (their Lemma 3.5) to a class of
  local randomizers, and this command takes any ε₀-LDP randomizer.
"""

from __future__ import annotations

import math

import numpy as np

from dpcalc import _validate as v
from dpcalc._numerics import UNIT_ROUNDOFF, log_binomial_pmf, round_up
from dpcalc.errors import ParameterError
from dpcalc.results import MechanismResult

__all__ = ["shuffle_closed_form", "shuffle_numerical", "shuffle_delta", "shuffle_amplification",
           "SOURCE_CLOSED", "SOURCE_NUMERICAL"]

SOURCE_CLOSED = "Feldman, McMillan, Talwar FOCS 2021, Thm 3.1"
SOURCE_NUMERICAL = "Feldman, McMillan, Talwar FOCS 2021, §4 (clone reduction, evaluated exactly)"
#: largest number of reports accepted (the sum over c has ~80·√n terms per evaluation)
MAX_REPORTS = 10**10


def _check(eps0, n, delta) -> tuple[float, int, float]:
    eps0 = v.positive("eps0", eps0)
    if eps0 > 700:
        raise ParameterError("eps0", "at most 700", eps0)
    n = v.count("n", n)
    if n > MAX_REPORTS:
        raise ParameterError("n", f"at most {MAX_REPORTS:.0e}", n)
    delta = v.open_unit("delta", delta)
    return eps0, n, delta


def closed_form_range(*, n: int, delta: float) -> float:
    """The largest ε₀ the closed form accepts: ln(n / (16 ln(4/δ))) (−inf when n ≤ 16 ln(4/δ))."""
    r = n / (16.0 * math.log(4.0 / delta))
    return math.log(r) if r > 0 else -math.inf


def shuffle_closed_form(*, eps0: float, n: int, delta: float) -> MechanismResult:
    r"""Central ε of n shuffled ε₀-LDP reports by the closed form of FMT21 Thm 3.1.

    Args:
        eps0: ε₀ > 0, the local randomizer's pure LDP parameter.
        n: number of reports ≥ 1.
        delta: δ in (0, 1).

    Returns:
        A result with ``epsilon`` (rounded up), ``delta``; not applicable (with the reason) when
        ε₀ > ln(n/(16 ln(4/δ))).

    Raises:
        ParameterError: out of range.
    """
    eps0, n, delta = _check(eps0, n, delta)
    limit = closed_form_range(n=n, delta=delta)
    values = {"epsilon": None, "delta": delta, "eps0": eps0, "n": n}
    if eps0 > limit:
        why = (f"the closed form holds for ε₀ ≤ ln(n/(16 ln(4/δ))) = {limit:.6g} only "
               f"(n = {n:,}, δ = {delta:g}; FMT21 Thm 3.1); use the numerical bound")
        if not math.isfinite(limit):
            why = (f"the closed form needs n > 16 ln(4/δ) = {16 * math.log(4 / delta):.6g} reports "
                   f"(FMT21 Thm 3.1); use the numerical bound")
        return MechanismResult(method="closed-form", values=values, applicable=False, reason=why,
                               source=SOURCE_CLOSED)
    a = 8.0 * math.sqrt(math.exp(eps0) * math.log(4.0 / delta)) / math.sqrt(n)
    c = 8.0 * math.exp(eps0) / n
    eprime = math.log1p(a + c)
    factor = -math.expm1(-eps0) / (1.0 + math.exp(-eps0 - eprime))
    eps = min(eps0, float(round_up(math.log1p(factor * (a + c)), 64)))
    values["epsilon"] = eps
    return MechanismResult(method="closed-form", values=values, source=SOURCE_CLOSED,
                           details={"valid_eps0_max": limit})


def _kl(x: float, p: float) -> float:
    """KL(Bern(x) ‖ Bern(p)) in nats (0·ln 0 = 0)."""
    out = 0.0
    if x > 0:
        out += x * math.log(x / p)
    if x < 1:
        out += (1 - x) * math.log((1 - x) / (1 - p))
    return out


def _c_range(n: int, p: float, tail: float) -> tuple[np.ndarray, float]:
    """The c values of C ~ Bin(n − 1, p) summed, and a proven bound on the mass outside them
    (Chernoff: Pr[C ≥ k] ≤ e^{−m·KL(k/m ‖ p)} for k ≥ mp, likewise below), widened until the
    bound is ≤ ``tail``."""
    m = n - 1
    mean = m * p
    sd = math.sqrt(max(m * p * (1 - p), 0.0))
    width = sd * (math.sqrt(2.0 * math.log(2.0 / tail)) + 2.0) + 10.0
    while True:
        lo = max(0, int(math.floor(mean - width)))
        hi = min(m, int(math.ceil(mean + width)))
        out = 0.0
        if lo > 0:
            out += math.exp(-m * _kl((lo - 1) / m, p)) if (lo - 1) / m < p else 1.0
        if hi < m:
            out += math.exp(-m * _kl((hi + 1) / m, p)) if (hi + 1) / m > p else 1.0
        if out <= tail or (lo == 0 and hi == m):
            return np.arange(lo, hi + 1, dtype=float), out
        width *= 1.5


def shuffle_delta(*, eps0: float, n: int, epsilon: float) -> float:
    r"""δ(ε) of the FMT21 clone pair for n shuffled ε₀-LDP reports (an upper bound on the true δ).

    Args:
        eps0: ε₀ > 0.
        n: reports ≥ 1.
        epsilon: ε ≥ 0.

    Returns:
        δ in [0, 1], rounded up (tail mass of C and round-off added).
    """
    from scipy.special import bdtr

    eps0 = v.positive("eps0", eps0)
    n = v.count("n", n)
    epsilon = v.nonnegative("epsilon", epsilon)
    if epsilon >= eps0:
        return 0.0
    alpha = 1.0 / (1.0 + math.exp(-eps0))
    p = math.exp(-eps0)
    cs, tail = _c_range(n, p, 1e-18)
    if n > 1:
        lw, lerr = log_binomial_pmf(cs, float(n - 1), math.log(p), math.log1p(-p))
        w = np.exp(lw + lerr)  # each weight rounded up
    else:
        w = np.ones(1)
    ee = math.exp(epsilon)
    num = alpha - ee * (1.0 - alpha)
    a_star = (cs + 1.0) * num / ((2.0 * alpha - 1.0) * (1.0 + ee))
    k = np.floor(a_star)

    def cdf(kk: np.ndarray) -> np.ndarray:
        out = np.zeros_like(kk)
        full = kk >= cs
        mid = (kk >= 0) & ~full
        out[full] = 1.0
        if np.any(mid):
            out[mid] = bdtr(kk[mid].astype(np.int64), cs[mid].astype(np.int64), 0.5)
        return out

    f_k, f_k1 = cdf(k), cdf(k - 1.0)
    c1, c2 = num, (1.0 - alpha) - ee * alpha
    d = f_k * c1 + f_k1 * c2
    allowance = 1e-12 * (f_k * abs(c1) + f_k1 * abs(c2))  # bdtr is accurate to ~1e-14 relative
    d = np.maximum(d, 0.0) + allowance
    total = float(np.sum(w * d)) * (1.0 + 64 * UNIT_ROUNDOFF) + tail
    return min(1.0, total)


def shuffle_numerical(*, eps0: float, n: int, delta: float) -> MechanismResult:
    r"""Central ε of n shuffled ε₀-LDP reports by the numerical bound of FMT21 §4: the
    smallest ε (bisection to 1e-6 relative, rounded up) with :func:`shuffle_delta` ≤ δ.

    Args:
        eps0: ε₀ > 0.
        n: reports ≥ 1.
        delta: δ in (0, 1).

    Raises:
        ParameterError: out of range.
    """
    eps0, n, delta = _check(eps0, n, delta)

    def ok(e: float) -> bool:
        return shuffle_delta(eps0=eps0, n=n, epsilon=e) <= delta

    if ok(0.0):
        eps = 0.0
    else:
        lo, hi = 0.0, eps0  # δ(ε₀) = 0: shuffling never costs more than ε₀
        while hi - lo > 1e-6 * max(hi, 1e-3):
            mid = 0.5 * (lo + hi)
            lo, hi = (lo, mid) if ok(mid) else (mid, hi)
        eps = hi
    return MechanismResult(method="numerical", values={"epsilon": eps, "delta": delta, "eps0": eps0, "n": n},
                           source=SOURCE_NUMERICAL)


def shuffle_amplification(*, eps0: float, n: int, delta: float) -> list[MechanismResult]:
    """Both bounds, numerical first (the tighter; never larger than ε₀)."""
    return [shuffle_numerical(eps0=eps0, n=n, delta=delta), shuffle_closed_form(eps0=eps0, n=n, delta=delta)]
