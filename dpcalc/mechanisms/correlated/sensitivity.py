r"""L2 sensitivity of the matrix-factorization mechanism under multi-participation.

A record whose clipped gradients (‖g_i‖ ≤ 1) enter the stream at the steps of a pattern π
changes ``C x`` by ``Σ_{i∈π} C[:, i] g_i``; the sensitivity is

.. math::

    Δ = \max_{π ∈ Π} \max_{‖g_i‖ ≤ 1} \Big\| \sum_{i ∈ π} C_{:, i}\, g_i \Big\|_2,
    \qquad Δ² ≤ \max_{π ∈ Π} \sum_{i, j ∈ π} |(CᵀC)_{ij}|,

where Π holds the patterns of at most k steps, any two at least b apart (b-min-separation,
Choquette-Choo et al. ICML 2023 and NeurIPS 2023 §2). The bound is an equality when
``(CᵀC)_{π×π} ≥ 0`` for the maximising π (all g_i equal). What is computed:

* exact — single participation: the largest column norm; C b-banded with b ≤ the separation
  (columns of two participations are orthogonal): the best pattern of column norms, a dynamic
  programme (Choquette-Choo et al. NeurIPS 2023, Thm 2 and Alg. 3); Toeplitz C with
  non-negative, non-increasing coefficients: the pattern 0, b, 2b, … (Kalinin & Lampert 2024,
  "Banded square root matrix factorization", Thm 2); the tree with one participation per tree.
* an upper bound otherwise, the smaller of: the triangle inequality (Δ ≤ the best pattern of
  column norms) and Choquette-Choo et al. NeurIPS 2023 Alg. 4 (row-wise then column-wise best
  patterns of |CᵀC|); the tree's level-counting bound.

Every result also carries an *achievable* value: an explicit pattern π and equal gradients
g_i = (1, 0, …), for which ‖C 1_π‖ is computed — a lower bound realised by two neighbouring
gradient streams. Reported values are rounded up by an allowance of 4·n·u (sums of n
squares); nothing is ever under-estimated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from dpcalc._numerics import UNIT_ROUNDOFF
from dpcalc.errors import ParameterError
from dpcalc.mechanisms.correlated.strategies import (
    DenseStrategy,
    Participation,
    ToeplitzStrategy,
    TreeStrategy,
    tree_depth,
)

__all__ = [
    "Sensitivity",
    "sensitivity",
    "max_participation_sum",
    "pattern_norm",
    "greedy_pattern",
]

#: the largest n for which the dense |CᵀC| bound (NeurIPS 2023 Alg. 4) is attempted
DENSE_BOUND_MAX_STEPS = 4096
#: the largest k·n² work of that bound
DENSE_BOUND_MAX_WORK = 4 * 10**9

SRC_SINGLE = "single participation: the largest column norm of C (exact)"
SRC_BANDED = "Choquette-Choo et al. NeurIPS 2023, Thm 2 (b-banded C, separation ≥ b; exact)"
SRC_MONOTONE = ("Kalinin & Lampert NeurIPS 2024, Thm 2 (Toeplitz C, coefficients ≥ 0 and "
                "non-increasing: pattern 0, b, 2b, …; exact)")
SRC_TREE = "binary tree, one participation per tree: √(trees · (⌊log₂ n⌋ + 1)) (exact)"
SRC_TREE_BOUND = ("binary tree, levels counted: Δ² ≤ Σ_ℓ k·min(k, ⌈2^ℓ/b⌉) (upper bound; each "
                  "level's Σ count² ≤ max count · Σ count)")
SRC_TRIANGLE = "triangle inequality: Δ ≤ the best pattern of column norms (upper bound)"
SRC_ALG4 = "Choquette-Choo et al. NeurIPS 2023, Alg. 4 on |CᵀC| (upper bound)"
SRC_GREEDY_EXACT = "upper bound met by the pattern 0, b, 2b, … (exact)"


@dataclass(frozen=True)
class Sensitivity:
    """The L2 sensitivity of ``C x`` for a participation pattern set.

    Attributes:
        value: Δ, a certified upper bound (the exact value when ``exact``), per unit clip norm.
        achieved: ‖C 1_π‖ for the explicit pattern ``pattern`` (achievable: ≤ the true Δ).
        exact: True iff a theorem gives Δ exactly (``value`` is then Δ up to the rounding
            allowance).
        method: how ``value`` was obtained, with its source.
        pattern: the steps π (0-based) of the achieving pattern.
    """

    value: float
    achieved: float
    exact: bool
    method: str
    pattern: tuple[int, ...] = field(repr=False)

    def to_json(self) -> dict:
        return {"sensitivity": self.value, "achieved": self.achieved, "exact": self.exact,
                "method": self.method, "pattern_start": list(self.pattern[:5]),
                "pattern_size": len(self.pattern)}


def _up(sq: float, n: int, *, exact_sum: bool = False) -> float:
    """√(sum of squares) with the rounding allowance 4·n·u, rounded up. ``exact_sum``: the sum
    was computed without rounding (integer terms), so a perfect square needs no allowance."""
    root = math.sqrt(sq)
    if exact_sum and root * root == sq:
        return root
    return root * (1 + 4 * (n + 2) * UNIT_ROUNDOFF)


def max_participation_sum(x, min_separation: int, max_participations: int) -> float:
    r"""max Σ_{i∈π} x_i over patterns π of at most k indices, any two at least b apart.

    A dynamic programme, O(n·k) (Choquette-Choo et al. NeurIPS 2023, Alg. 3 "VecSens";
    jax_privacy ``max_participation_for_linear_fn``).

    Args:
        x: shape (n,) or (m, n) (rows solved at once), float.
        min_separation: b ≥ 1.
        max_participations: k ≥ 1.

    Returns:
        The maximum (a float, or an array of m maxima).
    """
    x = np.asarray(x, dtype=np.float64)
    single = x.ndim == 1
    x2 = np.atleast_2d(x)
    m, n = x2.shape
    b = int(min_separation)
    k = min(int(max_participations), -(-n // b))
    f = np.zeros((m, n + b))
    for _ in range(k):
        f[:, :n] = x2 + f[:, b:b + n]
        f = np.maximum.accumulate(f[:, ::-1], axis=1)[:, ::-1]
    return float(f[0, 0]) if single else f[:, 0].copy()


def greedy_pattern(p: Participation) -> tuple[int, ...]:
    """The pattern 0, b, 2b, … with k steps (at most those below n)."""
    k = min(p.epochs, -(-p.steps // p.min_separation))
    return tuple(range(0, k * p.min_separation, p.min_separation))


def _toeplitz_column_sum(c: np.ndarray, n: int, pattern: tuple[int, ...]) -> np.ndarray:
    """C 1_π for a Toeplitz C (first column c) and a pattern π: Σ_{i∈π} c shifted by i
    (O(n) for the pattern 0, b, …, (k−1)b: a strided cumulative sum, as jax_privacy's
    ``toeplitz.minsep_sensitivity_squared``)."""
    if len(pattern) > 2 and pattern[0] == 0 and len(set(np.diff(pattern))) == 1:
        b, k = pattern[1], len(pattern)
        rows = -(-n // b)
        v = np.zeros(rows * b)
        m = min(c.size, n)
        v[:m] = c[:m]
        cs = v.reshape(rows, b).cumsum(axis=0).ravel()[:n]
        out = cs.copy()
        out[k * b:] -= cs[:n - k * b] if n > k * b else 0.0
        return out
    out = np.zeros(n)
    for i in pattern:
        m = min(c.size, n - i)
        out[i:i + m] += c[:m]
    return out


def _tree_pattern_sq(strategy: TreeStrategy, pattern: tuple[int, ...]) -> float:
    """‖C 1_π‖² for the restarted tree: Σ over complete nodes of (count of π in the node)²."""
    m = strategy.tree_steps
    idx = np.asarray(pattern, dtype=np.int64)
    tree, leaf = idx // m, idx % m
    total = 0.0
    for level in range(tree_depth(m)):
        node = leaf >> level
        complete = ((node + 1) << level) <= m
        keys = tree[complete] * (m + 1) + node[complete]
        _, counts = np.unique(keys, return_counts=True)
        total += float(np.sum(counts.astype(np.float64) ** 2))
    return total


def pattern_norm(strategy, pattern) -> float:
    """‖C 1_π‖: the change of ``C x`` when a record's gradient (1, 0, …) enters at the steps
    π (0-based) — achievable by two neighbouring streams, so a lower bound on Δ."""
    pattern = tuple(int(i) for i in pattern)
    if isinstance(strategy, TreeStrategy):
        return math.sqrt(_tree_pattern_sq(strategy, pattern))
    if isinstance(strategy, ToeplitzStrategy):
        return float(np.linalg.norm(_toeplitz_column_sum(strategy.coefs, strategy.steps, pattern)))
    return float(np.linalg.norm(strategy.matrix[:, list(pattern)].sum(axis=1)))


def sensitivity(strategy, participation: Participation) -> Sensitivity:
    """Δ of ``strategy`` under ``participation`` (see the module docstring for the cases).

    Args:
        strategy: a :class:`TreeStrategy`, :class:`ToeplitzStrategy` or :class:`DenseStrategy`.
        participation: steps n (must equal the strategy's), epochs k, min-separation b.

    Returns:
        :class:`Sensitivity` (value per unit clip norm).

    Raises:
        ParameterError: the strategy's steps differ from the participation's.
    """
    from_strategy = strategy.steps
    if from_strategy != participation.steps:
        raise ParameterError("steps", f"the strategy's n = {from_strategy}", participation.steps)
    if isinstance(strategy, TreeStrategy):
        return _tree(strategy, participation)
    if isinstance(strategy, ToeplitzStrategy):
        return _toeplitz(strategy, participation)
    return _dense(strategy, participation)


def _tree(s: TreeStrategy, p: Participation) -> Sensitivity:
    pattern = greedy_pattern(p)
    ach = _tree_pattern_sq(s, pattern)
    k, b, m = p.epochs, p.min_separation, s.tree_steps
    depth = tree_depth(m)
    if k == 1 or b >= m:  # at most one participation per tree: each touches `depth` nodes
        trees = min(k, s.restarts)
        sq = float(trees * depth)
        return Sensitivity(_up(sq, 1, exact_sum=True), math.sqrt(ach), True, SRC_TREE, pattern)
    bound = float(sum(k * min(k, -(-(1 << lv) // b)) for lv in range(depth)))
    exact = ach >= bound
    return Sensitivity(_up(bound, 1), math.sqrt(ach), exact,
                       SRC_GREEDY_EXACT if exact else SRC_TREE_BOUND, pattern)


def _toeplitz(s: ToeplitzStrategy, p: Participation) -> Sensitivity:
    c, n = s.coefs, s.steps
    k, b = p.epochs, p.min_separation
    norm_sq = float(c @ c)
    integral = bool(np.all(c == np.round(c))) and norm_sq < 2.0**50  # e.g. C = I: sums are exact
    if k == 1:  # column 0 holds every coefficient; later columns are truncations
        return Sensitivity(_up(norm_sq, c.size, exact_sum=integral), math.sqrt(norm_sq), True, SRC_SINGLE, (0,))
    pattern = greedy_pattern(p)
    ach_vec = _toeplitz_column_sum(c, n, pattern)
    ach_sq = float(ach_vec @ ach_vec)
    if s.bands <= b:  # columns of a pattern are orthogonal; norms non-increasing in the column
        sq = len(pattern) * norm_sq
        return Sensitivity(_up(sq, c.size, exact_sum=integral), math.sqrt(ach_sq), True, SRC_BANDED, pattern)
    if s.nonnegative_nonincreasing:
        return Sensitivity(_up(ach_sq, n), math.sqrt(ach_sq), True, SRC_MONOTONE, pattern)
    # column norms of Toeplitz C: ‖C_{:,i}‖² = Σ_{t < n−i} c_t²
    col_sq = np.zeros(n)
    m = min(c.size, n)
    tail = np.cumsum(c[:m] ** 2)  # tail[j] = Σ_{t ≤ j} c_t²
    col_sq[:] = tail[np.minimum(n - 1 - np.arange(n), m - 1)]
    return _bounded(lambda: _materialize(s), np.sqrt(col_sq), p, pattern, math.sqrt(ach_sq), toeplitz=True)


def _materialize(s: ToeplitzStrategy) -> np.ndarray:
    n, c = s.steps, s.coefs
    out = np.zeros((n, n))
    for j in range(min(c.size, n)):
        idx = np.arange(n - j)
        out[idx + j, idx] = c[j]
    return out


def _bounded(matrix, col_norms: np.ndarray, p: Participation, pattern, achieved: float, *,
             toeplitz: bool = False) -> Sensitivity:
    """The smaller of the triangle-inequality bound and Alg. 4 (when affordable)."""
    n = col_norms.size
    k, b = p.epochs, p.min_separation
    if toeplitz:  # column norms non-increasing: the earliest pattern 0, b, 2b, … is the best
        tri = float(np.sum(col_norms[list(greedy_pattern(p))]))
    else:
        tri = max_participation_sum(col_norms, b, k)
    best_sq, method = tri * tri, SRC_TRIANGLE
    kk = min(k, -(-n // b))
    if n <= DENSE_BOUND_MAX_STEPS and kk * n * n <= DENSE_BOUND_MAX_WORK:
        c = matrix()
        x = np.abs(c.T @ c)
        rows = max_participation_sum(x, b, k)
        alg4 = max_participation_sum(rows, b, k)
        if alg4 < best_sq:
            best_sq, method = alg4, SRC_ALG4
    value = _up(best_sq, n)
    exact = achieved >= math.sqrt(best_sq) * (1 - 1e-12)
    return Sensitivity(value, achieved, exact, SRC_GREEDY_EXACT if exact else method, pattern)


def _dense(s: DenseStrategy, p: Participation) -> Sensitivity:
    c = s.matrix
    n = c.shape[0]
    k, b = p.epochs, p.min_separation
    col_sq = np.einsum("ij,ij->j", c, c)
    if k == 1:
        i = int(np.argmax(col_sq))
        return Sensitivity(_up(float(col_sq[i]), n), math.sqrt(float(col_sq[i])), True, SRC_SINGLE, (i,))
    pattern = greedy_pattern(p)
    achieved = pattern_norm(s, pattern)
    rows, cols = np.nonzero(c)
    bands = int(np.max(rows - cols)) + 1 if rows.size else 1
    if bands <= b:
        sq = max_participation_sum(col_sq, b, k)
        return Sensitivity(_up(sq, n), achieved, True, SRC_BANDED, pattern)
    return _bounded(lambda: c, np.sqrt(col_sq), p, pattern, achieved)
