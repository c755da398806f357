r"""Hadamard response (Acharya, Sun, Zhang, "Hadamard response: estimating distributions
privately, efficiently, and with little communication", AISTATS 2019, §3 — the
high-privacy/symmetric form used in their experiments and in pure-ldp).

Let K be the smallest power of 2 with K ≥ k + 1 and H the K×K Sylvester–Hadamard matrix,
H[i, j] = (−1)^{popcount(i & j)}. The value x owns the set C_x = {j : H[x + 1, j] = +1} of K/2
columns (row 0, all ones, is not used). The user reports j ∈ [0, K): uniform in C_x with
probability e^ε/(e^ε + 1), uniform in its complement otherwise — ε-LDP (the density is
2e^ε/(K(e^ε + 1)) or 2/(K(e^ε + 1))). A report j supports v when j ∈ C_v: p* = e^ε/(e^ε + 1)
and, since |C_x ∩ C_v| = K/4 for x ≠ v, q* = 1/2, so Var[f̂] = (e^ε + 1)²/(n(e^ε − 1)²) at f → 0
(the pure-protocol variance of Wang et al. 2017 Thm 2 with these p*, q*). Bits per report:
log₂ K. Server cost: a histogram and one fast Walsh–Hadamard transform.

Sampler: the side is an exact Bernoulli (p̃ = ⌊p·2⁵³⌋/2⁵³ ≤ p, ratio p̃/(1 − p̃) ≤ e^ε); j is
drawn uniformly on [0, K) and, if on the wrong side, the lowest set bit of x + 1 is flipped
(a bijection between C_x and its complement) — an exactly uniform point of the chosen side.
"""

from __future__ import annotations

import math

import numpy as np

from dpcalc import _validate as v
from dpcalc.errors import ParameterError
from dpcalc.mechanisms.ldp._core import GRID, FrequencyOracle, bernoulli, check_values, floor_grid

__all__ = ["HadamardResponse", "MAX_HADAMARD_DOMAIN", "parity", "fwht"]

#: the largest domain (K ≤ 2^24: the server keeps a histogram of K counts)
MAX_HADAMARD_DOMAIN = 2**24 - 1


def parity(x: np.ndarray) -> np.ndarray:
    """popcount(x) mod 2 of non-negative int64 values (vectorised xor-folding)."""
    x = x.copy()
    for s in (32, 16, 8, 4, 2, 1):
        x ^= x >> s
    return x & 1


class HadamardResponse(FrequencyOracle):
    """Hadamard response.

    Args:
        epsilon: ε > 0 of one report.
        k: domain size, 2 ≤ k ≤ 2²⁴ − 1.

    Raises:
        ParameterError: ε ≤ 0 or not finite, k out of range.
    """

    name = "hr"
    source = "Acharya, Sun, Zhang AISTATS 2019 §3; variance: Wang et al. 2017 Thm 2 with p* = e^ε/(e^ε+1), q* = 1/2"

    def __init__(self, epsilon: float, k: int) -> None:
        self.epsilon = v.positive("epsilon", epsilon)
        self.k = v.count("domain_size", k, minimum=2)
        if self.k > MAX_HADAMARD_DOMAIN:
            raise ParameterError("domain_size", f"at most {MAX_HADAMARD_DOMAIN}", self.k)
        self.K = 1 << math.ceil(math.log2(self.k + 1))
        self._threshold = floor_grid(1.0 / (1.0 + math.exp(-self.epsilon)))
        self.p_star, self.q_star = self._threshold / GRID, 0.5
        self.bits = int(math.log2(self.K))

    def randomize(self, values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Reports (shape (n, 1)): a column index j in [0, K)."""
        x = check_values(values, self.k) + 1
        inside = bernoulli(rng, self._threshold, x.shape)
        j = rng.integers(0, self.K, size=x.shape, dtype=np.int64)
        in_cx = parity(j & x) == 0
        low = x & -x
        return np.where(in_cx == inside, j, j ^ low)[:, None]

    def check_reports(self, reports: np.ndarray) -> np.ndarray:  # noqa: D102
        r = np.asarray(reports, dtype=np.int64).reshape(-1, 1)
        check_values(r[:, 0], self.K, name="reports")
        return r

    def support(self, reports: np.ndarray) -> np.ndarray:
        """C(v) = #{reports j with H[v + 1, j] = +1} = (n + (H·N)[v + 1])/2, N the histogram of the
        reported j (a fast Walsh–Hadamard transform: K log K operations, not n·k)."""
        counts = np.bincount(reports[:, 0], minlength=self.K).astype(np.int64)
        t = fwht(counts)
        return (len(reports) + t[1:self.k + 1]) // 2


def fwht(a: np.ndarray) -> np.ndarray:
    """The unnormalised Walsh–Hadamard transform H·a of a vector of length 2^m (exact in int64)."""
    a = np.array(a, dtype=np.int64)
    h = 1
    while h < len(a):
        a = a.reshape(-1, 2, h)
        a = np.stack([a[:, 0] + a[:, 1], a[:, 0] - a[:, 1]], axis=1).reshape(-1)
        h *= 2
    return a
