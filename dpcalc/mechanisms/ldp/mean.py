r"""Mean estimation of bounded values under ε-LDP.

* Duchi, Jordan, Wainwright ("Local privacy and statistical minimax rates", FOCS 2013; JASA
  2018, §4.2.3, one dimension): x ∈ [−1, 1] is reported as ±C, C = (e^ε + 1)/(e^ε − 1), +C with
  probability 1/2 + x/(2C). Unbiased; Var = C² − x².
* Piecewise mechanism (Wang, Xiao, Yang, Zhao, Lyu, Yang, Xu, "Collecting and analyzing
  multidimensional data with local differential privacy", ICDE 2019, Alg. 2, Lemma 1):
  C = (e^{ε/2} + 1)/(e^{ε/2} − 1), ℓ(x) = (C + 1)x/2 − (C − 1)/2, r(x) = ℓ(x) + C − 1; with
  probability e^{ε/2}/(e^{ε/2} + 1) uniform on [ℓ(x), r(x)], else uniform on [−C, ℓ(x)) ∪ (r(x), C].
  Unbiased; Var = x²/(e^{ε/2} − 1) + (e^{ε/2} + 3)/(3(e^{ε/2} − 1)²).
* Microsoft's 1BitMean (Ding, Kulkarni, Yekhanin, "Collecting telemetry data privately",
  NeurIPS 2017, §2.1): x ∈ [0, M] is reported as one bit, 1 with probability
  1/(e^ε + 1) + (x/M)(e^ε − 1)/(e^ε + 1); the estimate of x is M(b(e^ε + 1) − 1)/(e^ε − 1).
  Unbiased; Var = M²·π(1 − π)·((e^ε + 1)/(e^ε − 1))², π the probability of a 1.
  α-point rounding (§3, for repeated collection): x is rounded to the grid of s + 1 points
  {0, M/s, …, M} as ⌊xs/M⌋ + 1 if the fractional part exceeds the user's α (uniform in [0, 1),
  fixed once), which is unbiased over α and adds at most (M/s)²/4 to the variance; the
  1-bit responses are memoized per grid point, so repeated collection of a changing value
  costs at most ε per distinct rounded value — the longitudinal accounting is the caller's.

The mean of n reports has variance (1/n²)Σ Var(xᵢ); the worst case over the domain
(:func:`worst_variance`) is what the tables print. The samplers here draw floating-point
uniforms (continuous mechanisms; the float granularity is not modelled, cf. Mironov 2012); the
one-bit mechanism uses an exact Bernoulli on the 2⁻⁵³ grid: the probabilities at x = 0 and
x = M are rounded inwards (their ratios stay ≤ e^ε, so the realised loss is at most ε) and x
interpolates between them to the nearest grid point (a bias below 2⁻⁵³·M(e^ε + 1)/(e^ε − 1),
far below any standard error).
"""

from __future__ import annotations

import math

import numpy as np

from dpcalc import _validate as v
from dpcalc.errors import ParameterError
from dpcalc.mechanisms.ldp._core import GRID, ceil_grid, floor_grid
from dpcalc.results import MechanismResult

__all__ = ["MEAN_PROTOCOLS", "mean_variance", "worst_variance", "randomize_mean", "estimate_mean",
           "alpha_point_round", "MEAN_SOURCES", "MeanAccumulator", "mean_table"]

MEAN_PROTOCOLS = ("duchi", "piecewise", "onebit")
MEAN_SOURCES = {
    "duchi": "Duchi, Jordan, Wainwright 2013/2018 §4.2.3",
    "piecewise": "Wang et al. ICDE 2019, Alg. 2 and Lemma 1",
    "onebit": "Ding, Kulkarni, Yekhanin NeurIPS 2017 §2.1 (1BitMean)",
}


def _eps(epsilon: float) -> float:
    e = v.positive("epsilon", epsilon)
    if e > 700:
        raise ParameterError("epsilon", "at most 700", e)
    return e


def mean_variance(protocol: str, epsilon: float, x: float | np.ndarray, *, max_value: float = 1.0):
    """Variance of one report's unbiased estimate of its value x (duchi, piecewise: x ∈ [−1, 1];
    onebit: x ∈ [0, max_value]). Closed forms of the module docstring."""
    e = _eps(epsilon)
    protocol = v.choice("protocol", protocol, MEAN_PROTOCOLS)
    x = np.asarray(x, dtype=float)
    if protocol == "duchi":
        c = 1 / math.tanh(e / 2)
        return c * c - x * x
    if protocol == "piecewise":
        h = math.expm1(e / 2)
        return x * x / h + (h + 4) / (3 * h * h)
    m = v.positive("max_value", max_value)
    pi = 1 / (math.exp(e) + 1) + (x / m) * math.tanh(e / 2)
    return m * m * pi * (1 - pi) / math.tanh(e / 2) ** 2


def worst_variance(protocol: str, epsilon: float, *, max_value: float = 1.0) -> float:
    """The largest one-report variance over the domain (duchi, piecewise: at |x| = 1; onebit:
    at π = 1/2, i.e. M²(e^ε + 1)²/(4(e^ε − 1)²))."""
    if protocol == "onebit":
        m = v.positive("max_value", max_value)
        return m * m / (4 * math.tanh(_eps(epsilon) / 2) ** 2)
    return float(mean_variance(protocol, epsilon, 1.0))


def mean_table(*, epsilon: float, n: int) -> list[MechanismResult]:
    """One row per mean protocol: the worst-case variance of the mean of n reports
    (:func:`worst_variance`/n; onebit with M = 1), its square root and the bits of a report.

    Raises:
        ParameterError: bad ε or n.
    """
    n = v.count("users", n)
    rows = []
    for p in MEAN_PROTOCOLS:
        var = worst_variance(p, epsilon) / n
        rows.append(MechanismResult(method=p, values={"epsilon": float(epsilon), "variance": var,
                                                      "standard_error": math.sqrt(var),
                                                      "bits": 64 if p == "piecewise" else 1},
                                    source=MEAN_SOURCES[p]))
    return rows


def _check_x(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    x = np.asarray(x, dtype=float)
    bad = ~((x >= lo) & (x <= hi))
    if bad.any():
        i = int(np.argmax(bad))
        raise ParameterError("values", f"in [{lo:g}, {hi:g}]", float(x[i]),
                             message=f"values must be in [{lo:g}, {hi:g}]; entry {i + 1} is {x[i]!r}")
    return x


def randomize_mean(protocol: str, epsilon: float, x: np.ndarray, rng: np.random.Generator, *,
                   max_value: float = 1.0) -> np.ndarray:
    """One ε-LDP report per value (float array; onebit: 0/1).

    Raises:
        ParameterError: a value outside the protocol's domain, bad ε or protocol.
    """
    e = _eps(epsilon)
    protocol = v.choice("protocol", protocol, MEAN_PROTOCOLS)
    if protocol == "onebit":
        m = v.positive("max_value", max_value)
        x = _check_x(x, 0.0, m)
        lo, hi = ceil_grid(1 / (math.exp(e) + 1)), floor_grid(1 / (1 + math.exp(-e)))
        thr = lo + np.floor((hi - lo) * (x / m) + 0.5).astype(np.int64)
        return (rng.integers(0, GRID, size=x.shape, dtype=np.int64) < thr).astype(float)
    x = _check_x(x, -1.0, 1.0)
    if protocol == "duchi":
        c = 1 / math.tanh(e / 2)
        up = rng.random(x.shape) < 0.5 + x / (2 * c)
        return np.where(up, c, -c)
    c = 1 / math.tanh(e / 4)
    left = (c + 1) / 2 * x - (c - 1) / 2
    right = left + c - 1
    inside = rng.random(x.shape) < 1 / (1 + math.exp(-e / 2))
    t = rng.random(x.shape)
    mid = left + t * (c - 1)
    # outside: uniform on [−C, ℓ) ∪ (r, C], total length C + 1
    w = t * (c + 1)
    out = np.where(w < left + c, -c + w, right + (w - (left + c)))
    return np.where(inside, mid, out)


def estimate_mean(protocol: str, epsilon: float, reports: np.ndarray, *,
                  max_value: float = 1.0) -> tuple[float, float]:
    """(unbiased mean, plug-in standard error) from the reports (the empirical standard
    deviation of the per-report unbiased values over √n)."""
    e = _eps(epsilon)
    r = np.asarray(reports, dtype=float)
    if r.size < 2:
        raise ParameterError("reports", "at least 2 reports", r.size)
    if protocol == "onebit":
        m = v.positive("max_value", max_value)
        vals = m * (r * (math.exp(e) + 1) - 1) / math.expm1(e)
    else:
        vals = r
    return float(vals.mean()), float(vals.std(ddof=1) / math.sqrt(r.size))


def alpha_point_round(x: np.ndarray, alpha: np.ndarray, *, max_value: float, s: int) -> np.ndarray:
    """α-point rounding of Ding et al. 2017 §3: x ∈ [0, M] to the grid {0, M/s, …, M}, up when the
    fractional part exceeds α (α uniform in [0, 1), one per user, kept across collections).
    Unbiased over α."""
    m = v.positive("max_value", max_value)
    s = v.count("s", s)
    x = _check_x(x, 0.0, m)
    t = x * s / m
    lo = np.floor(t)
    return m * np.minimum(lo + (t - lo > np.asarray(alpha)), s) / s


class MeanAccumulator:
    """Streaming :func:`estimate_mean`: ``add`` chunks of reports, then ``result()`` →
    (mean, standard error, n). Sums are kept in float64 (Welford's update per chunk)."""

    def __init__(self, protocol: str, epsilon: float, *, max_value: float = 1.0) -> None:
        self.protocol = v.choice("protocol", protocol, MEAN_PROTOCOLS)
        self.epsilon, self.max_value = _eps(epsilon), float(max_value)
        self.n, self.mean, self.m2 = 0, 0.0, 0.0

    def add(self, reports: np.ndarray) -> None:
        r = np.asarray(reports, dtype=float)
        if self.protocol == "onebit":
            bad = (r != 0) & (r != 1)
            if bad.any():
                raise ParameterError("reports", "0 or 1", float(r[np.argmax(bad)]))
            vals = self.max_value * (r * (math.exp(self.epsilon) + 1) - 1) / math.expm1(self.epsilon)
        else:
            c = 1 / math.tanh(self.epsilon / (2 if self.protocol == "duchi" else 4))
            bad = ~(np.abs(r) <= c * (1 + 1e-12))
            if bad.any():
                raise ParameterError("reports", f"in [−{c:.6g}, {c:.6g}]", float(r[np.argmax(bad)]))
            vals = r
        if vals.size == 0:
            return
        nb, mb = vals.size, float(vals.mean())
        m2b = float(((vals - mb) ** 2).sum())
        tot = self.n + nb
        d = mb - self.mean
        self.mean += d * nb / tot
        self.m2 += m2b + d * d * self.n * nb / tot
        self.n = tot

    def result(self) -> tuple[float, float, int]:
        """(unbiased mean, plug-in standard error, n)."""
        if self.n < 2:
            raise ParameterError("reports", "at least 2 reports", self.n)
        return self.mean, math.sqrt(self.m2 / (self.n - 1) / self.n), self.n
