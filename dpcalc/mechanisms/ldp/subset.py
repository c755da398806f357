r"""Subset selection (Ye & Barg, "Optimal schemes for discrete distribution estimation under
locally differential privacy", IEEE Trans. Inf. Theory 2018; Wang, Wu, Hu, "Mutual
information optimally local private discrete distribution estimation", 2016).

The user reports a subset S of [k] of size d: with probability p_in = d·e^ε/(d·e^ε + k − d) the
subset contains x plus d − 1 values drawn uniformly from the others, otherwise d values drawn
uniformly from the others. Every subset containing x has probability e^ε/Z, every other 1/Z
(Z = C(k−1, d−1)e^ε + C(k−1, d)): ε-LDP. A report supports the values it contains:
p* = p_in and q* = p_in(d − 1)/(k − 1) + (1 − p_in)d/(k − 1) (Wang et al. 2016 §IV); the
variance is the pure-protocol variance (Wang et al. 2017 Thm 2). d = max(1, round(k/(e^ε + 1)))
(Ye & Barg's optimum). A report is d values of ⌈log₂ k⌉ bits.

Sampler: p_in is an exact Bernoulli with p̃ ≤ p_in (rounded down: fewer subsets containing x,
ratio ≤ e^ε); the d other values are an exactly uniform d-subset (Floyd's algorithm with exact
bounded integers), one of which, chosen uniformly, is replaced by x when x is included.
"""

from __future__ import annotations

import math

import numpy as np

from dpcalc import _validate as v
from dpcalc.errors import ParameterError
from dpcalc.mechanisms.ldp._core import GRID, FrequencyOracle, bernoulli, check_values, floor_grid

__all__ = ["SubsetSelection", "MAX_SUBSET_CELLS"]

#: the largest k·(reports per block) a randomizer block holds; k itself is capped at 2^20
MAX_SUBSET_CELLS = 1 << 22
_MAX_K = 2**20


class SubsetSelection(FrequencyOracle):
    """Subset selection.

    Args:
        epsilon: ε > 0 of one report.
        k: domain size, 2 ≤ k ≤ 2²⁰.
        d: subset size in [1, k − 1]; None: max(1, round(k/(e^ε + 1))).

    Raises:
        ParameterError: ε ≤ 0 or not finite, k or d out of range.
    """

    name = "ss"
    source = "Ye & Barg 2018; Wang, Wu, Hu 2016 §IV; variance: Wang et al. 2017 Thm 2"

    def __init__(self, epsilon: float, k: int, *, d: int | None = None) -> None:
        self.epsilon = v.positive("epsilon", epsilon)
        self.k = v.count("domain_size", k, minimum=2)
        if self.k > _MAX_K:
            raise ParameterError("domain_size", f"at most {_MAX_K} for subset selection", self.k)
        if d is None:
            d = max(1, min(self.k - 1, round(self.k / (math.exp(min(self.epsilon, 700.0)) + 1))))
        d = v.count("d", d, minimum=1)
        if d > self.k - 1:
            raise ParameterError("d", f"in [1, {self.k - 1}]", d)
        self.d = d
        ed = d / (d + (self.k - d) * math.exp(-self.epsilon))
        self._threshold = floor_grid(ed)
        p = self._threshold / GRID
        self.p_star = p
        self.q_star = (p * (d - 1) + (1 - p) * d) / (self.k - 1)
        self.bits = d * max(1, math.ceil(math.log2(self.k)))
        self.fields = tuple(f"v{i + 1}" for i in range(d))

    def randomize(self, values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Reports (shape (n, d)): the subset's values, each row sorted (a set carries no order)."""
        x = check_values(values, self.k)
        n, k1, d = len(x), self.k - 1, self.d
        out = np.empty((n, d), dtype=np.int64)
        step = max(1, MAX_SUBSET_CELLS // k1)
        for s in range(0, n, step):
            m = min(step, n - s)
            rows = np.arange(m)
            chosen = np.zeros((m, k1), dtype=bool)
            for t in range(k1 - d, k1):  # Floyd's algorithm: an exactly uniform d-subset of [0, k1)
                r = rng.integers(0, t + 1, size=m, dtype=np.int64)
                r = np.where(chosen[rows, r], t, r)
                chosen[rows, r] = True
            picked = np.nonzero(chosen)[1].reshape(m, d)
            out[s:s + m] = picked + (picked >= x[s:s + m, None])  # indices of the k − 1 others → values
        include = bernoulli(rng, self._threshold, n)
        # x and d − 1 others: drop a uniformly chosen one of the d others (a uniform (d − 1)-subset)
        drop = rng.integers(0, d, size=n, dtype=np.int64)
        out[include, drop[include]] = x[include]
        # a report is a SET: release it in a fixed (sorted) order — the position where x was written
        # would otherwise single it out (an unsorted row names x: likelihood ratio ∞, not e^ε)
        out.sort(axis=1)
        return out

    def check_reports(self, reports: np.ndarray) -> np.ndarray:  # noqa: D102
        r = np.asarray(reports, dtype=np.int64)
        if r.ndim != 2 or r.shape[1] != self.d:
            raise ParameterError("reports", f"rows of d = {self.d} values", r.shape)
        check_values(r.reshape(-1), self.k, name="reports")
        s = np.sort(r, axis=1)
        if (s[:, 1:] == s[:, :-1]).any():
            i = int(np.argmax((s[:, 1:] == s[:, :-1]).any(axis=1)))
            raise ParameterError("reports", "d distinct values", i + 1,
                                 message=f"report {i + 1} repeats a value (a subset has d distinct values)")
        return r

    def support(self, reports: np.ndarray) -> np.ndarray:
        """C(v) = number of reported subsets containing v."""
        return np.bincount(reports.reshape(-1), minlength=self.k).astype(np.int64)
