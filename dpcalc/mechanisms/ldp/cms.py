r"""Apple's count-mean sketch (CMS) and Hadamard count-mean sketch (HCMS) (Apple Differential
Privacy Team, "Learning with privacy at scale", Apple Machine Learning Journal 1(8), 2017,
Algorithms 1–4).

Both use k_h public hash functions h_j: [k] → [m] (here H_{a_j,b_j}(x) = ((a_j x + b_j) mod P)
mod m, P = 2³¹ − 1, (a_j, b_j) drawn from a public ``hash_seed``). A client picks j uniformly.

* CMS: the ±1 vector v of length m with +1 only at h_j(x), each coordinate flipped with
  probability 1/(e^{ε/2} + 1); report (j, ṽ): m + ⌈log₂ k_h⌉ bits. Two inputs differ in two
  coordinates: ε-LDP. The server's per-report value Z = (c/2)ṽ[h_j(d)] + 1/2,
  c = (e^{ε/2} + 1)/(e^{ε/2} − 1), has E[Z] = Pr[h_j(x) = h_j(d)].
* HCMS: the column h_j(x) of the m×m Hadamard matrix, one uniformly chosen coordinate l,
  its sign flipped with probability 1/(e^ε + 1); report (j, l, b): 1 + ⌈log₂ k_h⌉ + log₂ m
  bits. ε-LDP (one bit of randomized response). Z = c_H·b·H[l, h_j(d)],
  c_H = (e^ε + 1)/(e^ε − 1).

Debiasing: f̂(d) = Σ_i (Z_i − c_m)/((1 − c_m)n) with c_m the family's exact collision probability
(:func:`dpcalc.mechanisms.ldp.local_hashing.collision_probability`; Apple's m/(m − 1)·(Z − 1/m)
is the same with c_m = 1/m). Unbiased over the draw of the public hash functions (as the
paper's analysis assumes); for one fixed draw the estimate of d carries the bias of d's actual
collisions. Variance (derived here by the law of total variance, over j, the flips and the hash
draw — the paper's Theorem gives the same leading term):

    CMS:  Var[f̂] = [(c² − 1)/4 + (1 − f)·c_m(1 − c_m)] / (n(1 − c_m)²)
    HCMS: Var[f̂] = [c_H² − f − (1 − f)c_m²] / (n(1 − c_m)²)

Sampler: flips are exact Bernoulli draws with the flip probability rounded up (more noise: the
realised ε is at most the stated one); c and c_H use the realised probability.
"""

from __future__ import annotations

import math

import numpy as np

from dpcalc import _validate as v
from dpcalc.errors import ParameterError
from dpcalc.mechanisms.ldp._core import (
    GRID,
    MAX_DOMAIN,
    FrequencyEstimate,
    FrequencyOracle,
    bernoulli,
    ceil_grid,
    check_values,
    project_simplex,
)
from dpcalc.mechanisms.ldp.hadamard import fwht, parity
from dpcalc.mechanisms.ldp.local_hashing import PRIME, collision_probability

__all__ = ["CountMeanSketch", "APPLE_EMOJI"]

#: Apple 2017 §"Emojis": CMS with m = 1024, k_h = 65,536, ε = 4 (a 128-byte privatized vector)
APPLE_EMOJI = {"width": 1024, "hashes": 65536, "epsilon": 4.0}
_SOURCE = "Apple Differential Privacy Team 2017, Algorithms 1–4"


class CountMeanSketch(FrequencyOracle):
    """CMS (``hadamard=False``) or HCMS (``hadamard=True``).

    Args:
        epsilon: ε > 0 of one report.
        k: domain size, 2 ≤ k ≤ 2³¹ − 2.
        width: m, the sketch width, 2 ≤ m ≤ 2²⁰ (a power of 2 for HCMS).
        hashes: k_h ≥ 1 hash functions, at most 2¹⁶.
        hash_seed: seed of the public hash functions (client and server must agree).

    Raises:
        ParameterError: out of range.
    """

    def __init__(self, epsilon: float, k: int, *, width: int = 1024, hashes: int = 256,
                 hadamard: bool = False, hash_seed: int = 0) -> None:
        self.epsilon = v.positive("epsilon", epsilon)
        self.k = v.count("domain_size", k, minimum=2)
        if self.k > MAX_DOMAIN:
            raise ParameterError("domain_size", f"at most {MAX_DOMAIN}", self.k)
        m = v.count("sketch_width", width, minimum=2)
        if m > 2**20 or (hadamard and m & (m - 1)):
            raise ParameterError("sketch_width", "at most 2^20" + (" and a power of 2" if hadamard else ""), m)
        kh = v.count("sketch_hashes", hashes)
        if kh > 2**16:
            raise ParameterError("sketch_hashes", "at most 65536", kh)
        self.m, self.kh, self.hadamard = m, kh, bool(hadamard)
        g = np.random.Generator(np.random.PCG64(v.count("hash_seed", hash_seed, minimum=0)))
        self._a = g.integers(1, PRIME, size=kh, dtype=np.int64)
        self._b = g.integers(0, PRIME, size=kh, dtype=np.int64)
        self.c_m = collision_probability(m)
        e = self.epsilon if hadamard else self.epsilon / 2
        self._tflip = ceil_grid(1 / (math.exp(e) + 1))
        phi = self._tflip / GRID
        self.c = 1 / (1 - 2 * phi)
        jb = max(1, math.ceil(math.log2(kh)))
        if hadamard:
            self.name, self.source = "hcms", _SOURCE + " (HCMS)"
            self.bits = 1 + jb + int(math.log2(m))
            self.fields = ("j", "l", "b")
        else:
            self.name, self.source = "cms", _SOURCE + " (CMS)"
            self.bits = m + jb
            self.fields = ("j", "bits")
        # for the pure-protocol helpers (tables): the estimator's per-report variances
        self.p_star, self.q_star = math.nan, math.nan

    def hash(self, j: np.ndarray, x: np.ndarray) -> np.ndarray:
        """h_j(x)."""
        return ((self._a[j] * x + self._b[j]) % PRIME) % self.m

    def report_variances(self) -> tuple[float, float]:  # noqa: D102
        d2 = (1 - self.c_m) ** 2
        if self.hadamard:
            return (self.c**2 - 1) / d2, (self.c**2 - self.c_m**2) / d2
        return (self.c**2 - 1) / 4 / d2, ((self.c**2 - 1) / 4 + self.c_m * (1 - self.c_m)) / d2

    def variance(self, n: float, f: float = 0.0) -> float:  # noqa: D102
        hold, other = self.report_variances()
        return (f * hold + (1 - f) * other) / n

    def randomize(self, values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Reports: CMS rows (j, m bits); HCMS rows (j, l, b) with b ∈ {0, 1} for −1/+1."""
        x = check_values(values, self.k)
        n = len(x)
        j = rng.integers(0, self.kh, size=n, dtype=np.int64)
        pos = self.hash(j, x)
        if self.hadamard:
            l_ = rng.integers(0, self.m, size=n, dtype=np.int64)
            sign = parity(l_ & pos) == 0  # H[l, pos] = +1
            flip = bernoulli(rng, self._tflip, n)
            return np.stack([j, l_, (sign ^ flip).astype(np.int64)], axis=1)
        bits = np.zeros((n, self.m), dtype=bool)
        bits[np.arange(n), pos] = True
        bits ^= bernoulli(rng, self._tflip, (n, self.m))
        return np.concatenate([j[:, None], bits.astype(np.int64)], axis=1)

    def check_reports(self, reports: np.ndarray) -> np.ndarray:  # noqa: D102
        r = np.asarray(reports, dtype=np.int64)
        want = 3 if self.hadamard else self.m + 1
        if r.ndim != 2 or r.shape[1] != want:
            raise ParameterError("reports", f"rows of {want} fields", r.shape)
        bad = (r[:, 0] < 0) | (r[:, 0] >= self.kh)
        bad |= ((r[:, 1] < 0) | (r[:, 1] >= self.m)) if self.hadamard else False
        bad |= ((r[:, -1] != 0) & (r[:, -1] != 1)) if self.hadamard else ((r[:, 1:] != 0) & (r[:, 1:] != 1)).any(axis=1)
        if bad.any():
            raise ParameterError("reports", "j in [0, k_h), l in [0, m), bits 0/1", int(np.argmax(bad)) + 1,
                                 message=f"report {int(np.argmax(bad)) + 1} is out of range for {self.name} "
                                 f"(m = {self.m}, k_h = {self.kh})")
        return r

    def support(self, reports: np.ndarray) -> np.ndarray:
        """The sketch aggregate (shape (k_h, m + 1), int64): CMS — per hash index, the count of
        1-bits at each position and (last column) the number of reports; HCMS — per (j, l) the
        sum of the ±1 bits and (last column) the number of reports with that j."""
        out = np.zeros((self.kh, self.m + 1), dtype=np.int64)
        j = reports[:, 0]
        out[:, self.m] = np.bincount(j, minlength=self.kh)
        if self.hadamard:
            np.add.at(out, (j, reports[:, 1]), 2 * reports[:, 2] - 1)
        else:
            rows, cols = np.nonzero(reports[:, 1:])
            out[:, :self.m] += np.bincount(j[rows] * self.m + cols, minlength=self.kh * self.m).reshape(self.kh, self.m)
        return out

    def estimate(self, support: np.ndarray, n: int, *, project: bool = False) -> FrequencyEstimate:
        """Unbiased (over the hash draw) estimates of every value's fraction, with plug-in errors."""
        n = v.count("n", n)
        agg = np.asarray(support, dtype=np.int64)
        nj = agg[:, self.m].astype(float)
        vals = np.arange(self.k, dtype=np.int64)
        total = np.zeros(self.k)
        if self.hadamard:
            t = np.stack([fwht(agg[j, :self.m]) for j in range(self.kh)]).astype(float)
            for j in range(self.kh):
                total += self.c * t[j, self.hash(np.full(self.k, j), vals)]
        else:
            for j in range(self.kh):
                ones = agg[j, self.hash(np.full(self.k, j), vals)].astype(float)
                total += self.c / 2 * (2 * ones - nj[j]) + nj[j] / 2
        est = (total / n - self.c_m) / (1 - self.c_m)
        f = np.clip(est, 0.0, 1.0)
        se = np.sqrt(np.array([self.variance(n, fi) for fi in f]))
        return FrequencyEstimate(est, se, n, project_simplex(est) if project else None)
