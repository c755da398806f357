r"""Error of the prefix sums released by the matrix-factorization mechanism.

With noise z ~ N(0, s²·I) (per gradient coordinate) added to ``C x`` and the decoder B
(``B C = A``, A the prefix-sum matrix), the released prefix sums are ``A x + B z``; the error of
prefix t has variance s²·‖B_{t,:}‖². This module returns ‖B_{t,:}‖², t = 1..n (the error per
unit noise std), from which the expected total squared error s²·‖B‖_F², the RMSE
s·‖B‖_F/√n and the largest per-step error std s·max_t ‖B_{t,:}‖ follow (Denisov et al. 2022
§2; Choquette-Choo et al. ICML 2023 §2).

* Toeplitz C: B = A C⁻¹ is Toeplitz with first column β = C⁻¹·1 (the prefix sums of C⁻¹'s
  first column); ‖B_{t,:}‖² = Σ_{j<t} β_j². β is computed by a recursive filter (a
  triangular Toeplitz solve, O(n·bands)); for the square root β = c (C² = A); for BLT by the
  rational generating function c(x) = P(x)/Q(x), O(n·buffers).
* Tree: the dyadic decoder uses popcount(t) nodes for prefix t (variance popcount(t)).
  Honaker's least-squares decoder, streaming (what DP-FTRL can release at step t): the nodes
  complete by step t form the forest of t's binary expansion, and each complete tree of size
  2^h estimates its total with variance 2^h/(2^{h+1} − 1), so ‖B_{t,:}‖² = Σ_{h ∈ bits(t)}
  2^h/(2^{h+1} − 1). Offline (all nodes, after the last step; ``offline=True``), on each
  complete tree of size N = 2^h the estimate is exact through the
  Haar basis, which diagonalises CᵀC = Σ_ℓ I ⊗ J_{2^ℓ} (eigenvalue 2^s − 1 on the wavelets of
  support 2^s, 2N − 1 on the constant): ‖B_{t,:}‖² = t²/(N(2N−1)) + Σ_{s=1}^{h}
  tri_s(t)²/(2^s(2^s − 1)), tri_s the prefix sum of the unnormalised wavelet containing t.
  Trees restarted every m steps add the variance of each completed tree's total.
* Dense C: B = A C⁻¹ by a triangular solve (n ≤ 4096).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.linalg import solve_banded, solve_triangular

from dpcalc.errors import ParameterError
from dpcalc.mechanisms.correlated.strategies import DenseStrategy, ToeplitzStrategy, TreeStrategy

__all__ = [
    "PrefixError", "prefix_error", "toeplitz_decoder", "tree_step_variances", "blt_polynomials",
    "MAX_TOEPLITZ_WORK",
]

#: the largest n·(number of coefficients) of a general Toeplitz decoder (about 10 s of work)
MAX_TOEPLITZ_WORK = 5 * 10**9


@dataclass(frozen=True, eq=False)
class PrefixError:
    """Per-step error of the prefix sums, per unit noise std.

    Attributes:
        per_step: shape (n,): ‖B_{t,:}‖², t = 1..n (the variance of prefix t's error for noise
            std 1).
        decoder: the decoder B used.
    """

    per_step: np.ndarray
    decoder: str

    @property
    def total(self) -> float:
        """‖B‖_F²: the expected total squared error of the n prefix sums (noise std 1)."""
        return float(np.sum(self.per_step))

    @property
    def mean(self) -> float:
        """‖B‖_F²/n: the mean squared error per prefix sum."""
        return self.total / self.per_step.size

    @property
    def max(self) -> float:
        """max_t ‖B_{t,:}‖²: the largest per-prefix error variance."""
        return float(np.max(self.per_step))


def blt_polynomials(s: ToeplitzStrategy) -> tuple[np.ndarray, np.ndarray] | None:
    """(P, Q), ascending coefficients, with c(x) = P(x)/Q(x) for a BLT: Q = Π(1 − θ_i x),
    P = Q + x·Σ_i ω_i Π_{j≠i}(1 − θ_j x)."""
    if s.blt_params is None:
        return None
    theta, omega = s.blt_params
    q = np.array([1.0])
    for th in theta:
        q = _mul(q, np.array([1.0, -th]))
    p = q.copy()
    for i in range(theta.size):
        r = np.array([1.0])
        for j, th in enumerate(theta):
            if j != i:
                r = _mul(r, np.array([1.0, -th]))
        term = np.concatenate([[0.0], omega[i] * r])
        p = _add(p, term)
    return p, q


def _mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Product of two power series given by ascending coefficients."""
    return np.convolve(a, b)


def _add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = np.zeros(max(a.size, b.size))
    out[:a.size] += a
    out[:b.size] += b
    return out


def causal_filter(num: np.ndarray, den: np.ndarray, x: np.ndarray) -> np.ndarray:
    """y with den * y = num * x (truncated convolutions, causal): ``scipy.signal.lfilter(num, den, x)``.

    Solved as the lower-triangular banded Toeplitz system with first column ``den`` by LAPACK's
    banded solver — ``scipy.signal`` is not imported, since it loads ``scipy.stats`` (≈ 3 s of
    start-up for a calculator command; tests/test_imports.py).

    Args:
        num, den: the filter's numerator and denominator coefficients (den[0] ≠ 0), shapes (p,), (m,).
        x: the input series, shape (n,).

    Returns:
        y, shape (n,).
    """
    x = np.asarray(x, dtype=np.float64)
    n = x.size
    den = np.asarray(den, dtype=np.float64)[:n]
    rhs = np.convolve(np.asarray(num, dtype=np.float64), x)[:n]
    m = den.size
    ab = np.zeros((m, n))
    for k in range(m):  # ab[i − j, j] = C[i, j] = den[i − j] (the lower band storage of solve_banded)
        ab[k, :n - k] = den[k]
    return solve_banded((m - 1, 0), ab, rhs, check_finite=False)


def toeplitz_decoder(s: ToeplitzStrategy) -> np.ndarray:
    """β = C⁻¹·1: the first column of the Toeplitz decoder B = A C⁻¹ (shape (n,)).

    Raises:
        ParameterError: n·(number of coefficients) above :data:`MAX_TOEPLITZ_WORK`.
    """
    n = s.steps
    ones = np.ones(n)
    if s.name == "sqrt":  # C² = A, so A C⁻¹ = C
        return np.array(s.coefs[:n], dtype=np.float64)
    poly = blt_polynomials(s)
    if poly is not None:  # 1/((1 − x)·P/Q) = Q/P applied to the series of ones
        p, q = poly
        return causal_filter(q, p, ones)
    bands = s.bands
    if n * bands > MAX_TOEPLITZ_WORK:
        raise ParameterError("steps", f"at most {MAX_TOEPLITZ_WORK:.0e} for steps·bands".replace("+", ""),
                             n * bands)
    return causal_filter(np.ones(1), s.coefs[:bands], ones)


def tree_step_variances(steps: int, *, honaker: bool, offline: bool = False) -> np.ndarray:
    """‖B_{t,:}‖², t = 1..m, for one tree over m steps (complete nodes only).

    Args:
        steps: m ≥ 1, the leaves of the tree.
        honaker: Honaker's least-squares decoder (else the dyadic decoder).
        offline: with ``honaker``, the least-squares estimate from *all* the tree's nodes
            (available only after the last step); default the streaming one, from the nodes
            complete by step t — the forest of t's binary expansion, each complete tree of
            size 2^h estimating its total with variance 2^h/(2^{h+1} − 1).

    Returns:
        float64 array of shape (m,).
    """
    t = np.arange(1, steps + 1, dtype=np.int64)
    if not honaker:
        return _popcount(t)
    if not offline:
        out = np.zeros(steps)
        for h in range(int(steps).bit_length()):
            size = float(1 << h)
            out += ((t >> h) & 1) * (size / (2 * size - 1))
        return out
    out = np.empty(steps)
    offset, carried = 0, 0.0
    for h in range(int(steps).bit_length() - 1, -1, -1):
        size = 1 << h
        if not steps & size:
            continue
        r = np.arange(1, size + 1, dtype=np.float64)
        big = float(size)
        var = r * r / (big * (2 * big - 1))
        for sc in range(1, h + 1):
            w = 1 << sc
            rho = (np.arange(size) % w) + 1
            tri = np.where(rho <= w // 2, rho, w - rho).astype(np.float64)
            var += tri * tri / (w * (w - 1.0))
        out[offset:offset + size] = carried + var
        carried += big / (2 * big - 1)
        offset += size
    return out


def _popcount(t: np.ndarray) -> np.ndarray:
    out = np.zeros(t.shape, dtype=np.float64)
    x = t.copy()
    while np.any(x):
        out += x & 1
        x >>= 1
    return out


def prefix_error(strategy) -> PrefixError:
    """‖B_{t,:}‖², t = 1..n, for a strategy and its decoder (module docstring).

    Args:
        strategy: :class:`TreeStrategy`, :class:`ToeplitzStrategy` or :class:`DenseStrategy`.

    Returns:
        :class:`PrefixError`.
    """
    if isinstance(strategy, TreeStrategy):
        m = strategy.tree_steps
        per_tree = tree_step_variances(m, honaker=strategy.honaker)
        epochs = np.repeat(np.arange(strategy.restarts, dtype=np.float64), m)
        per_step = epochs * per_tree[-1] + np.tile(per_tree, strategy.restarts)
        decoder = ("Honaker least squares on the nodes complete by step t" if strategy.honaker
                   else "dyadic (popcount(t) nodes)")
        return PrefixError(per_step, decoder)
    if isinstance(strategy, ToeplitzStrategy):
        beta = toeplitz_decoder(strategy)
        return PrefixError(np.cumsum(beta * beta), "B = A C⁻¹ (Toeplitz)")
    if isinstance(strategy, DenseStrategy):
        c = strategy.matrix
        inv = solve_triangular(c, np.eye(c.shape[0]), lower=True, check_finite=False)
        b = np.cumsum(inv, axis=0)
        return PrefixError(np.einsum("ij,ij->i", b, b), "B = A C⁻¹ (triangular solve)")
    raise TypeError(f"not a strategy: {type(strategy).__name__}")
