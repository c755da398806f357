r"""What every local-DP frequency oracle shares: the random source, exact Bernoulli draws, the
pure-protocol variance of Wang et al. 2017, the unbiased estimator from support counts and the
non-negativity post-processing.

A *pure* protocol (Wang, Blocki, Li, Jha, "Locally differentially private protocols for
frequency estimation", USENIX Security 2017, Def. 3) has, for every report y, a support set
S(y) of domain values such that Pr[v ∈ S(Y)] = p* when the user holds v and = q* when the user
holds any other value. With C(v) = #{reports supporting v} among n reports,

    f̂(v) = (C(v)/n − q*)/(p* − q*)                                 (unbiased; their Thm 2)
    Var[f̂(v)] = [f·p*(1 − p*) + (1 − f)·q*(1 − q*)] / (n (p* − q*)²),

f the true fraction of users holding v (a fixed population of n users: C(v) is a sum of
independent Bernoulli draws). At f → 0 this is Wang et al.'s approximate variance
q*(1 − q*)/(n (p* − q*)²), the number every comparison table prints.

Randomness: :func:`make_rng` gives a numpy ``Generator`` (PCG64) seeded from the operating
system's CSPRNG (``secrets``) unless a seed is given (tests, ``--seed``). Bernoulli draws with a
real probability p are made *exactly* on a grid of 2⁻⁵³: an integer uniform on [0, 2⁵³) (numpy's
bounded integers are exact) is compared with an integer threshold; the probability realised is
the threshold/2⁵³, and the protocols round their thresholds so that the realised probabilities
give a privacy loss no larger than the ε they state (probabilities that raise the likelihood
ratio are rounded down, those that lower it up) and then estimate with the realised
probabilities, so the estimates stay exactly unbiased.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from dpcalc import _validate as v
from dpcalc.errors import ParameterError

__all__ = ["make_rng", "GRID", "floor_grid", "ceil_grid", "bernoulli", "pure_variance",
           "FrequencyEstimate", "estimate_from_support", "project_simplex", "check_values",
           "MAX_DOMAIN", "FrequencyOracle"]

#: probabilities are realised on the grid k/2^53
GRID = 2**53
#: largest domain size any oracle accepts (the hash families work modulo 2^31 − 1)
MAX_DOMAIN = 2**31 - 2


def make_rng(seed: int | None = None) -> np.random.Generator:
    """A numpy Generator: seeded by ``seed`` (reproducible, for tests) or, when None, by 256 bits
    from the operating system's CSPRNG (:mod:`secrets`).

    Raises:
        ParameterError: ``seed`` negative or not a whole number.
    """
    if seed is None:
        return np.random.Generator(np.random.PCG64(secrets.randbits(256)))
    return np.random.Generator(np.random.PCG64(v.count("seed", seed, minimum=0)))


#: relative allowance for the few roundings in computing a probability p in floating point
_SLACK = 16 * 2.0**-53


def floor_grid(p: float) -> int:
    """⌊p(1 − 2⁻⁴⁹)·2⁵³⌋: the threshold of a Bernoulli whose realised probability is ≤ the exact p
    even when the float p is a few units in the last place above it."""
    return max(0, int(math.floor(float(p) * (1 - _SLACK) * GRID)))


def ceil_grid(p: float) -> int:
    """⌈p(1 + 2⁻⁴⁹)·2⁵³⌉ (at most 2⁵³): the threshold of a Bernoulli whose realised probability is
    ≥ the exact p."""
    return min(GRID, int(math.ceil(float(p) * (1 + _SLACK) * GRID)))


def bernoulli(rng: np.random.Generator, threshold: int, size) -> np.ndarray:
    """Exact Bernoulli(threshold/2⁵³) draws (bool array of shape ``size``)."""
    return rng.integers(0, GRID, size=size, dtype=np.int64) < threshold


def pure_variance(p_star: float, q_star: float, n: float, f: float = 0.0) -> float:
    """Var[f̂] of a pure protocol (Wang et al. 2017 Thm 2, fixed population):
    [f·p*(1 − p*) + (1 − f)·q*(1 − q*)]/(n(p* − q*)²).

    Args:
        p_star, q_star: the support probabilities (p* > q*).
        n: number of reports (> 0).
        f: the true fraction of users holding the value, in [0, 1] (0: the approximate variance).
    """
    return (f * p_star * (1 - p_star) + (1 - f) * q_star * (1 - q_star)) / (n * (p_star - q_star) ** 2)


@dataclass(frozen=True)
class FrequencyEstimate:
    """Estimated frequencies of a domain [0, k).

    Attributes:
        estimates: unbiased estimates of the true fractions (shape (k,); may be < 0 or > 1).
        standard_errors: plug-in standard errors: :func:`pure_variance` at f = clip(f̂, 0, 1).
        n: number of reports.
        projected: the estimates projected onto the probability simplex (post-processing; biased),
            or None when not asked for.
    """

    estimates: np.ndarray
    standard_errors: np.ndarray
    n: int
    projected: np.ndarray | None = None


def project_simplex(x: np.ndarray) -> np.ndarray:
    """The Euclidean projection of ``x`` onto the probability simplex {y ≥ 0, Σy = 1}
    (Duchi, Shalev-Shwartz, Singer, Chandra 2008, Fig. 1; "Norm-Sub" of Wang et al. 2020):
    post-processing of the unbiased estimates; it costs no privacy but makes them biased.
    """
    x = np.asarray(x, dtype=float)
    u = np.sort(x)[::-1]
    css = np.cumsum(u) - 1.0
    idx = np.arange(1, len(u) + 1)
    rho = np.nonzero(u - css / idx > 0)[0][-1]
    theta = css[rho] / (rho + 1)
    return np.maximum(x - theta, 0.0)


def estimate_from_support(support: np.ndarray, n: int, p_star: float, q_star: float, *,
                          project: bool = False) -> FrequencyEstimate:
    """Unbiased frequency estimates from support counts (Wang et al. 2017 Thm 2).

    Args:
        support: C(v) for each v (shape (k,), whole numbers).
        n: number of reports ≥ 1.
        p_star, q_star: the protocol's realised support probabilities.
        project: also return the projection onto the simplex (:func:`project_simplex`).

    Raises:
        ParameterError: n < 1.
    """
    n = v.count("n", n)
    est = (np.asarray(support, dtype=float) / n - q_star) / (p_star - q_star)
    f = np.clip(est, 0.0, 1.0)
    se = np.sqrt(pure_variance(p_star, q_star, n, f))
    return FrequencyEstimate(est, se, n, project_simplex(est) if project else None)


def check_values(values: np.ndarray, k: int, *, name: str = "values") -> np.ndarray:
    """``values`` as an int64 array, every entry in [0, k).

    Raises:
        ParameterError: an entry outside the domain (the first one is named).
    """
    arr = np.asarray(values)
    if arr.dtype.kind not in "iu":
        raise ParameterError(name, f"whole numbers in [0, {k - 1}]", arr.dtype)
    arr = arr.astype(np.int64, copy=False)
    bad = (arr < 0) | (arr >= k)
    if bad.any():
        i = int(np.argmax(bad))
        raise ParameterError(name, f"in [0, {k - 1}] (the domain 0..k−1, k = {k})", int(arr[i]),
                             message=f"{name} must be in [0, {k - 1}] (the domain, k = {k}); "
                             f"entry {i + 1} is {int(arr[i])}")
    return arr


class FrequencyOracle:
    """The interface of every frequency oracle (a pure protocol over the domain [0, k)).

    Subclasses set ``name``, ``source``, ``epsilon`` (the ε-LDP guarantee of one report, an upper
    bound on the privacy loss of the sampler as implemented), ``k``, ``p_star``, ``q_star``
    (realised support probabilities), ``bits`` (size of one report) and implement
    :meth:`randomize` (client side: values → reports, a 2-D int64 array, one row per report)
    and :meth:`support` (server side: reports → support counts of shape (k,)); reports of a
    stream are aggregated chunk by chunk by summing :meth:`support`.
    """

    name: str = ""
    source: str = ""
    epsilon: float
    k: int
    p_star: float
    q_star: float
    bits: int
    #: the column names of a report (CSV header); "bits" marks one 0/1 string of ``width`` chars
    fields: tuple[str, ...] = ("y",)

    def variance(self, n: float, f: float = 0.0) -> float:
        """Var[f̂(v)] at n reports and true fraction f (:func:`pure_variance`)."""
        return pure_variance(self.p_star, self.q_star, n, f)

    def report_variances(self) -> tuple[float, float]:
        """(variance of one report's contribution to f̂(v) when the user holds v, when the user
        holds another value): n·Var[f̂] = f·first + (1 − f)·second."""
        d2 = (self.p_star - self.q_star) ** 2
        return self.p_star * (1 - self.p_star) / d2, self.q_star * (1 - self.q_star) / d2

    def randomize(self, values: np.ndarray, rng: np.random.Generator) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError

    def support(self, reports: np.ndarray) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError

    def check_reports(self, reports: np.ndarray) -> np.ndarray:
        """Reports as a 2-D int64 array with this protocol's columns and ranges (override)."""
        return np.asarray(reports, dtype=np.int64)

    def estimate(self, support: np.ndarray, n: int, *, project: bool = False) -> FrequencyEstimate:
        """Unbiased estimates with standard errors from aggregated support counts."""
        return estimate_from_support(support, n, self.p_star, self.q_star, project=project)

    def estimate_stream(self, chunks: Iterable[np.ndarray], *, project: bool = False
                        ) -> tuple[FrequencyEstimate, int]:
        """Estimates from a stream of report chunks (each a 2-D array as :meth:`randomize`
        returns), aggregated chunk by chunk by summing :meth:`support` (memory: one chunk).

        Returns:
            (the :meth:`estimate` of the summed support counts, the number n of reports).

        Raises:
            ParameterError: no report at all, or a report :meth:`support` refuses.
        """
        agg: np.ndarray | None = None
        n = 0
        for chunk in chunks:
            part = self.support(chunk)
            agg = part if agg is None else agg + part
            n += len(chunk)
        if agg is None or n == 0:
            raise ParameterError("input", "at least one report", 0, message="no reports after the header")
        return self.estimate(agg, n, project=project), n
