r"""Unary encoding: symmetric (SUE, = basic one-time RAPPOR) and optimized (OUE).

The value v is one-hot encoded as k bits; each bit is reported as 1 with probability p when it
is the user's bit and q otherwise (Wang, Blocki, Li, Jha 2017 §4.2). Two inputs differ in two
bits, so ε = ln(p(1 − q)/((1 − p)q)).

* SUE (Erlingsson, Pihur, Korolova 2014's basic one-time RAPPOR; Wang et al. 2017 §4.2):
  p = e^{ε/2}/(e^{ε/2} + 1), q = 1/(e^{ε/2} + 1); Var[f̂] = e^{ε/2}/(n(e^{ε/2} − 1)²) at f → 0.
* OUE (Wang et al. 2017 §4.2.1, Eq. (5)): p = 1/2, q = 1/(e^ε + 1); Var[f̂] = 4e^ε/(n(e^ε − 1)²)
  at f → 0, the minimum over (p, q) of the unary-encoding variance.

A report supports v when its bit v is 1: p* = p, q* = q. Bits per report: k — hence the cap
:data:`MAX_UNARY_BITS` (a domain of 10¹² would need 10¹² bits per user).

Sampler: every bit is an exact Bernoulli on the 2⁻⁵³ grid with p rounded down and q rounded up,
which lowers p(1 − q)/((1 − p)q): the realised loss is at most the stated ε.
"""

from __future__ import annotations

import math

import numpy as np

from dpcalc import _validate as v
from dpcalc.errors import ParameterError
from dpcalc.mechanisms.ldp._core import GRID, FrequencyOracle, ceil_grid, check_values, floor_grid

__all__ = ["BitVectorOracle", "UnaryEncoding", "MAX_UNARY_BITS"]

#: the largest domain a unary encoding accepts (a report is k bits)
MAX_UNARY_BITS = 2**20


class BitVectorOracle(FrequencyOracle):
    """An oracle whose report is k bits, one per value, and whose support count of v is the number
    of reports with bit v set (unary encoding, basic RAPPOR)."""

    def check_reports(self, reports: np.ndarray) -> np.ndarray:  # noqa: D102
        r = np.asarray(reports)
        if r.ndim != 2 or r.shape[1] != self.k or ((r != 0) & (r != 1)).any():
            raise ParameterError("reports", f"rows of {self.k} bits (0/1)", r.shape)
        return r

    def support(self, reports: np.ndarray) -> np.ndarray:
        """C(v) = number of reports with bit v set."""
        return reports.sum(axis=0, dtype=np.int64)


class UnaryEncoding(BitVectorOracle):
    """Unary encoding with bit probabilities (p, q).

    Args:
        epsilon: ε > 0 of one report.
        k: domain size, 2 ≤ k ≤ :data:`MAX_UNARY_BITS` (a report is k bits).
        optimized: OUE (p = 1/2, q = 1/(e^ε + 1)) instead of SUE.

    Raises:
        ParameterError: ε ≤ 0 or not finite, k out of range.
    """

    fields = ("bits",)

    def __init__(self, epsilon: float, k: int, *, optimized: bool = False) -> None:
        self.epsilon = v.positive("epsilon", epsilon)
        k = v.count("domain_size", k, minimum=2)
        if k > MAX_UNARY_BITS:
            raise ParameterError("domain_size", f"at most {MAX_UNARY_BITS} for a unary encoding (a report "
                                 f"is k bits)", k, message=f"domain_size {k} is too large for a unary "
                                 f"encoding: a report would be {k:,} bits (at most {MAX_UNARY_BITS:,}); "
                                 "use olh or hr")
        self.k = k
        self.optimized = bool(optimized)
        if self.optimized:
            self.name = "oue"
            self.source = "Wang et al. 2017 §4.2.1 (OUE), Eq. (5)"
            p, q = 0.5, 1 / (math.exp(self.epsilon) + 1)
        else:
            self.name = "sue"
            self.source = "Erlingsson et al. 2014 (basic one-time RAPPOR); Wang et al. 2017 §4.2, Eq. (4)"
            h = math.exp(-self.epsilon / 2)
            p, q = 1 / (1 + h), h / (1 + h)
        self._tp, self._tq = floor_grid(p), ceil_grid(q)
        self.p_star, self.q_star = self._tp / GRID, self._tq / GRID
        self.bits = k

    def randomize(self, values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Reports (shape (n, k), entries 0/1, uint8)."""
        x = check_values(values, self.k)
        u = rng.integers(0, GRID, size=(len(x), self.k), dtype=np.int64)
        out = u < self._tq
        rows = np.arange(len(x))
        out[rows, x] = u[rows, x] < self._tp
        return out.astype(np.uint8)


