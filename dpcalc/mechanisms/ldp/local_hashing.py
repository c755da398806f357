r"""Local hashing: optimized (OLH) and binary (BLH) (Wang, Blocki, Li, Jha 2017 §4.4).

Each user draws a hash function H: [k] → [g] from a universal family, and reports H together
with generalized randomized response of H(x) over [g] (p = e^ε/(e^ε + g − 1)). A report (H, y)
supports every v with H(v) = y. BLH takes g = 2; OLH the integer g ∈ {⌊e^ε⌋ + 1, ⌈e^ε⌉ + 1} of
smaller variance (Wang et al.'s optimum is g = e^ε + 1, their Eq. (8)). With a perfectly
uniform family q* = 1/g and Var[f̂] = q*(1 − q*)/(n(p − 1/g)²) at f → 0, which is
4e^ε/(n(e^ε − 1)²) at g = e^ε + 1 (Wang et al. 2017 Eq. (9)).

The family here is H_{a,b}(x) = ((a·x + b) mod P) mod g with P = 2³¹ − 1 (prime), a uniform on
[1, P), b uniform on [0, P) (Carter & Wegman 1979): for x ≠ v the pair (H's inner values) is
uniform over ordered pairs of distinct residues, so the collision probability
c = Pr[H(x) = H(v)] is computed exactly from the sizes of the residue classes mod g
(:func:`collision_probability`; |c − 1/g| < 1/P), and the estimator uses the exact
q* = p̃·c + (1 − p̃)(1 − c)/(g − 1) — unbiased, not merely close. A report is (a, b, y):
62 + ⌈log₂ g⌉ bits. The server's support count costs n·k hash evaluations (Wang et al.'s
O(nk) aggregation), done in vectorised blocks.

Sampler: y = H(x) with the exact probability p̃ = ⌊p·2⁵³⌋/2⁵³ ≤ p, else a uniform other value of
[g]; the realised ratio p̃(g − 1)/(1 − p̃) ≤ e^ε.
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
    pure_variance,
)

__all__ = ["LocalHashing", "collision_probability", "PRIME"]

#: the prime modulus of the hash family
PRIME = 2**31 - 1
#: the largest hash range
MAX_G = 2**30
#: reports × domain values hashed per block on the server
_BLOCK = 1 << 18


def collision_probability(g: int) -> float:
    """Pr[H(x) = H(v)] for x ≠ v under H_{a,b}(x) = ((ax + b) mod P) mod g, P = 2³¹ − 1: the pair
    ((ax + b) mod P, (av + b) mod P) is uniform over the P(P − 1) ordered pairs of distinct
    residues, so c = Σ_i s_i(s_i − 1)/(P(P − 1)) over the sizes s_i of the classes mod g."""
    m, t = divmod(PRIME, g)
    same = t * (m + 1) * m + (g - t) * m * (m - 1)
    return same / (PRIME * (PRIME - 1))


def _probs(epsilon: float, g: int) -> tuple[int, float, float]:
    p = 1.0 / (1.0 + (g - 1) * math.exp(-epsilon))
    thr = floor_grid(p)
    pt = thr / GRID
    c = collision_probability(g)
    return thr, pt, pt * c + (1 - pt) * (1 - c) / (g - 1)


class LocalHashing(FrequencyOracle):
    """Local hashing.

    Args:
        epsilon: ε > 0 of one report.
        k: domain size, 2 ≤ k ≤ 2³¹ − 2.
        g: hash range; None: OLH's optimum (see the module docstring); 2: BLH.

    Raises:
        ParameterError: ε ≤ 0 or not finite, k out of range, g < 2 or > 2³⁰.
    """

    fields = ("a", "b", "y")

    def __init__(self, epsilon: float, k: int, *, g: int | None = None) -> None:
        self.epsilon = v.positive("epsilon", epsilon)
        self.k = v.count("domain_size", k, minimum=2)
        if self.k > MAX_DOMAIN:
            raise ParameterError("domain_size", f"at most {MAX_DOMAIN}", self.k)
        if g is None:
            e = math.exp(min(self.epsilon, 30.0))
            cands = sorted({max(2, min(MAX_G, math.floor(e) + 1)), max(2, min(MAX_G, math.ceil(e) + 1))})
            g = min(cands, key=lambda gg: pure_variance(*_probs(self.epsilon, gg)[1:], 1.0))
            self.name, self.source = "olh", "Wang et al. 2017 §4.4 (OLH), Eq. (9)"
        else:
            g = v.count("g", g, minimum=2)
            if g > MAX_G:
                raise ParameterError("g", f"at most {MAX_G}", g)
            self.name = "blh" if g == 2 else f"lh(g={g})"
            self.source = "Wang et al. 2017 §4.4 (BLH: g = 2)"
        self.g = g
        self._threshold, self.p_star, self.q_star = _probs(self.epsilon, g)
        self.bits = 62 + max(1, math.ceil(math.log2(g)))

    def hash(self, a: np.ndarray, b: np.ndarray, x: np.ndarray) -> np.ndarray:
        """H_{a,b}(x) (broadcasting; int64 throughout: a·x < 2⁶²)."""
        return ((a * x + b) % PRIME) % self.g

    def randomize(self, values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Reports (shape (n, 3)): columns a, b, y."""
        x = check_values(values, self.k)
        a = rng.integers(1, PRIME, size=x.shape, dtype=np.int64)
        b = rng.integers(0, PRIME, size=x.shape, dtype=np.int64)
        h = self.hash(a, b, x)
        keep = bernoulli(rng, self._threshold, x.shape)
        other = rng.integers(0, self.g - 1, size=x.shape, dtype=np.int64)
        other += other >= h
        return np.stack([a, b, np.where(keep, h, other)], axis=1)

    def check_reports(self, reports: np.ndarray) -> np.ndarray:  # noqa: D102
        r = np.asarray(reports, dtype=np.int64)
        if r.ndim != 2 or r.shape[1] != 3:
            raise ParameterError("reports", "rows a,b,y", r.shape)
        for col, lo, hi, name in ((0, 1, PRIME - 1, "a"), (1, 0, PRIME - 1, "b"), (2, 0, self.g - 1, "y")):
            bad = (r[:, col] < lo) | (r[:, col] > hi)
            if bad.any():
                i = int(np.argmax(bad))
                raise ParameterError("reports", f"{name} in [{lo}, {hi}]", int(r[i, col]),
                                     message=f"report {i + 1}: {name} must be in [{lo}, {hi}], "
                                     f"got {int(r[i, col])}")
        return r

    def support(self, reports: np.ndarray) -> np.ndarray:
        """C(v) = #{reports (a, b, y) with H_{a,b}(v) = y}, in blocks of reports × values. The
        reduction mod P = 2³¹ − 1 folds the high bits onto the low ones (2³¹ ≡ 1 mod P) instead of
        dividing; mod g is a mask when g is a power of 2."""
        out = np.zeros(self.k, dtype=np.int64)
        vals = np.arange(self.k, dtype=np.int64)
        rows = max(1, _BLOCK // self.k)
        pow2 = self.g & (self.g - 1) == 0
        for i in range(0, len(reports), rows):
            r = reports[i:i + rows]
            t = r[:, 0:1] * vals[None, :]  # < 2^62
            t += r[:, 1:2]
            t = (t & PRIME) + (t >> 31)
            t = (t & PRIME) + (t >> 31)
            t[t >= PRIME] -= PRIME
            if pow2:
                t &= self.g - 1
            else:
                t %= self.g
            out += (t == r[:, 2:3]).sum(axis=0)
        return out
