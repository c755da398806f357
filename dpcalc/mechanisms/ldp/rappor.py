r"""RAPPOR (Erlingsson, Pihur, Korolova, "RAPPOR: randomized aggregatable privacy-preserving
ordinal response", CCS 2014).

A client hashes its value into a Bloom filter B of m bits with h hash functions, then
* the *permanent* randomized response (memoized per value): B'_i = 1 w.p. f/2, 0 w.p. f/2,
  B_i w.p. 1 − f;
* the *instantaneous* randomized response of each report: S_i = 1 w.p. q if B'_i = 1, w.p. p if
  B'_i = 0.

Privacy as the paper defines it (§3, Theorems 1 and 2):
* longitudinal ε_∞ = 2h·ln((1 − f/2)/(f/2)) — the bound for any number of reports of the same
  value (the permanent response is reused);
* one report ε₁ = h·ln(q*(1 − p*)/(p*(1 − q*))), q* = Pr[S_i = 1 | B_i = 1] = f(p + q)/2 + (1 − f)q,
  p* = Pr[S_i = 1 | B_i = 0] = f(p + q)/2 + (1 − f)p.
Their example f = 1/2, p = 1/2, q = 3/4, h = 2 gives ε_∞ = 4 ln 3 ≈ 4.394 and ε₁ ≈ 1.0743.

The randomize/estimate pipeline implements *basic* RAPPOR (h = 1, m = k: a one-hot encoding,
no Bloom filter collisions, so the unbiased count estimate is the pure-protocol one with the
support probabilities q*, p*; the Bloom-filter decoding by regression of the full system is
not implemented). Its ε₁ covers one collection; with memoization across collections, ε_∞.

Sampler: exact Bernoulli draws on the 2⁻⁵³ grid with f/2 rounded up and (for q > p) q rounded
down and p rounded up: the realised ε_∞ and ε₁ are at most the stated ones.
"""

from __future__ import annotations

import math

import numpy as np

from dpcalc import _validate as v
from dpcalc.errors import ParameterError
from dpcalc.mechanisms.ldp._core import GRID, ceil_grid, check_values, floor_grid
from dpcalc.mechanisms.ldp.unary import MAX_UNARY_BITS, BitVectorOracle

__all__ = ["rappor_epsilon", "BasicRappor", "SOURCE"]

SOURCE = "Erlingsson, Pihur, Korolova CCS 2014, §3 (Thms 1, 2)"


def _check(f: float, p: float, q: float, hashes: int) -> tuple[float, float, float, int]:
    f = v.positive("f", f)
    if f > 1:
        raise ParameterError("f", "in (0, 1]", f)
    p, q = v.closed_unit("p", p), v.closed_unit("q", q)
    if p == q:
        raise ParameterError("q", f"different from p = {p} (else the reports carry nothing)", q)
    return f, p, q, v.count("hashes", hashes)


def rappor_epsilon(*, f: float, p: float, q: float, hashes: int = 1) -> dict[str, float]:
    """ε₁ (one report) and ε_∞ (longitudinal) of RAPPOR as Erlingsson et al. 2014 define them.

    Args:
        f: permanent randomized-response probability, in (0, 1].
        p, q: instantaneous probabilities of reporting 1 for a permanent bit 0 and 1, in [0, 1],
            p ≠ q.
        hashes: h ≥ 1 Bloom-filter hash functions (bits set per value).

    Returns:
        ``{"epsilon_one": ε₁, "epsilon_inf": ε_∞, "q_star": q*, "p_star": p*}``; ε₁ = ∞ when a
        one-sided report is possible (p* or q* in {0, 1}).

    Raises:
        ParameterError: out of range.
    """
    f, p, q, h = _check(f, p, q, hashes)
    qs = 0.5 * f * (p + q) + (1 - f) * q
    ps = 0.5 * f * (p + q) + (1 - f) * p
    if min(qs, ps) <= 0 or max(qs, ps) >= 1:
        e1 = math.inf
    else:
        e1 = h * abs(math.log(qs) + math.log1p(-ps) - math.log(ps) - math.log1p(-qs))
    einf = 2 * h * math.log((1 - f / 2) / (f / 2)) if f < 1 else 0.0
    # ε₁ can never exceed ε_∞ (one report is a post-processing of the permanent response)
    return {"epsilon_one": min(e1, einf), "epsilon_inf": einf, "q_star": qs, "p_star": ps}


class BasicRappor(BitVectorOracle):
    """Basic RAPPOR (h = 1, a one-hot encoding of k bits) with permanent and instantaneous
    randomized response. ``epsilon`` is ε₁ of one report; ``epsilon_inf`` the longitudinal bound.

    Args:
        k: domain size, 2 ≤ k ≤ 2²⁰ (k bits per report).
        f, p, q: as :func:`rappor_epsilon`, with p < q.

    Raises:
        ParameterError: out of range, or p ≥ q.
    """

    name = "rappor"
    source = SOURCE + "; basic RAPPOR (h = 1), variance: Wang et al. 2017 Thm 2"
    fields = ("bits",)

    def __init__(self, k: int, *, f: float, p: float, q: float) -> None:
        eps = rappor_epsilon(f=f, p=p, q=q, hashes=1)
        if not p < q:
            raise ParameterError("q", f"greater than p = {p}", q)
        self.k = v.count("domain_size", k, minimum=2)
        if self.k > MAX_UNARY_BITS:
            raise ParameterError("domain_size", f"at most {MAX_UNARY_BITS} for basic RAPPOR (k bits a "
                                 "report)", self.k)
        self.f, self.p, self.q = float(f), float(p), float(q)
        self.epsilon, self.epsilon_inf = eps["epsilon_one"], eps["epsilon_inf"]
        self._th = min(ceil_grid(f / 2), GRID // 2)
        self._tp, self._tq = ceil_grid(p), floor_grid(q)
        fh, pt, qt = self._th / GRID, self._tp / GRID, self._tq / GRID
        self.p_star = fh * (pt + qt) + (1 - 2 * fh) * qt  # Pr[S = 1 | B = 1]
        self.q_star = fh * (pt + qt) + (1 - 2 * fh) * pt  # Pr[S = 1 | B = 0]
        self.bits = self.k

    def randomize(self, values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Reports (shape (n, k), 0/1 uint8): permanent then instantaneous randomized response."""
        x = check_values(values, self.k)
        n = len(x)
        b = np.zeros((n, self.k), dtype=bool)
        b[np.arange(n), x] = True
        u = rng.integers(0, GRID, size=(n, self.k), dtype=np.int64)
        perm = np.where(u < self._th, True, np.where(u < 2 * self._th, False, b))
        w = rng.integers(0, GRID, size=(n, self.k), dtype=np.int64)
        return np.where(perm, w < self._tq, w < self._tp).astype(np.uint8)

