r"""Generalized randomized response (direct encoding) as a frequency oracle.

The probabilities are those of :func:`dpcalc.mechanisms.randomized_response.rr_probabilities`
(p = e^ε/(e^ε + k − 1) for the truth, q = 1/(e^ε + k − 1) for each other value; Kairouz, Oh,
Viswanath 2016; Wang, Blocki, Li, Jha 2017 §4.1 "direct encoding"): a report supports only the
value it names, so p* = p, q* = q and Var[f̂] = (e^ε + k − 2)/(n (e^ε − 1)²) at f → 0 (Wang et
al. 2017 Eq. (2)). Bits per report: ⌈log₂ k⌉.

Sampler: the truth is kept with the exact probability ⌊p·2⁵³⌋/2⁵³ ≤ p, otherwise one of the
k − 1 other values is drawn uniformly (exact bounded integers); the realised ratio
p̃(k − 1)/(1 − p̃) ≤ e^ε, so the report is ε-LDP as stated.
"""

from __future__ import annotations

import math

import numpy as np

from dpcalc import _validate as v
from dpcalc.errors import ParameterError
from dpcalc.mechanisms.ldp._core import (
    GRID,
    MAX_DOMAIN,
    FrequencyOracle,
    bernoulli,
    check_values,
    floor_grid,
)
from dpcalc.mechanisms.randomized_response import rr_probabilities

__all__ = ["GRR"]


class GRR(FrequencyOracle):
    """Generalized (k-ary) randomized response.

    Args:
        epsilon: ε > 0 of one report.
        k: domain size, 2 ≤ k ≤ 2³¹ − 2.

    Raises:
        ParameterError: ε ≤ 0 or not finite, k out of range.
    """

    name = "grr"
    source = "Kairouz, Oh, Viswanath 2016; Wang et al. 2017 §4.1 (direct encoding), Eq. (2)"

    def __init__(self, epsilon: float, k: int) -> None:
        self.epsilon = v.positive("epsilon", epsilon)
        self.k = v.count("domain_size", k, minimum=2)
        if self.k > MAX_DOMAIN:
            raise ParameterError("domain_size", f"at most {MAX_DOMAIN}", self.k)
        p, _ = rr_probabilities(epsilon=self.epsilon, categories=self.k)
        self._threshold = floor_grid(p)
        self.p_star = self._threshold / GRID
        self.q_star = (1 - self.p_star) / (self.k - 1)
        self.bits = max(1, math.ceil(math.log2(self.k)))

    def randomize(self, values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Reports (shape (n, 1)): the value itself or a uniform other value."""
        x = check_values(values, self.k)
        keep = bernoulli(rng, self._threshold, x.shape)
        other = rng.integers(0, self.k - 1, size=x.shape, dtype=np.int64)
        other += other >= x  # uniform on the k − 1 values other than x
        return np.where(keep, x, other)[:, None]

    def check_reports(self, reports: np.ndarray) -> np.ndarray:  # noqa: D102
        r = np.asarray(reports, dtype=np.int64).reshape(-1, 1)
        check_values(r[:, 0], self.k, name="reports")
        return r

    def support(self, reports: np.ndarray) -> np.ndarray:
        """C(v) = number of reports naming v."""
        return np.bincount(reports[:, 0], minlength=self.k).astype(np.int64)
