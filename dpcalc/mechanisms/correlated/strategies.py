r"""Strategy matrices C of the matrix-factorization (correlated-noise) mechanism.

The mechanism releases noisy prefix sums of a stream of gradients ``x_1..x_n`` (each of L2
norm at most 1 after clipping): ``A x + B z = B (C x + z)`` with ``A = B C`` the n×n
lower-triangular matrix of ones and ``z ~ N(0, s²)`` per coordinate. Privacy is the Gaussian
mechanism on ``C x`` (:mod:`dpcalc.mechanisms.correlated.sensitivity`); error is ``B z``
(:mod:`dpcalc.mechanisms.correlated.error`). Denisov, McMahan, Rush, Smith, Thakurta 2022
(NeurIPS), "Improved differential privacy for SGD via optimal private linear operators on
data streams", §2.

Strategies (all lower-triangular, streaming):

* :class:`TreeStrategy` — binary-tree aggregation (Dwork et al. 2010; Chan, Shi, Song 2011;
  DP-FTRL, Kairouz et al. 2021), the plain dyadic decoder or Honaker's (2015) least-squares
  decoder, restarted every epoch. Only the *complete* nodes (those whose interval ends at or
  before the last step) are noised: a forest of complete binary trees.
* :class:`ToeplitzStrategy` — C given by its first column ``c`` (C[i, j] = c[i − j]):
  ``sqrt`` (c_k = binom(2k, k)/4^k, C² = A; Fichtenberger, Henzinger, Upadhyay ICML 2023;
  Henzinger, Upadhyay, Upadhyay SODA 2023), ``banded:b`` (its first b coefficients: the banded
  square root of Kalinin & Lampert NeurIPS 2024; any b-banded Toeplitz C as in Choquette-Choo
  et al. NeurIPS 2023 and McKenna 2024), ``blt`` (buffered linear Toeplitz, Dvijotham,
  McMahan, Pillutla, Steinke, Thakurta 2024: c_0 = 1, c_k = Σ_i ω_i θ_i^{k−1}).
* :class:`DenseStrategy` — a user's n×n lower-triangular C.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dpcalc import _validate as v
from dpcalc.errors import ParameterError

__all__ = [
    "TreeStrategy",
    "ToeplitzStrategy",
    "DenseStrategy",
    "Participation",
    "sqrt_coefficients",
    "sqrt_strategy",
    "banded_sqrt_strategy",
    "banded_strategy",
    "blt_strategy",
    "identity_strategy",
    "MAX_STEPS",
    "tree_depth",
]

#: largest number of steps n (a Toeplitz C of n = 10⁶ costs O(n²) for its decoder)
MAX_STEPS = 10**6

SOURCE_TREE = "Kairouz et al. 2021 (DP-FTRL), binary-tree aggregation"
SOURCE_HONAKER = "Honaker 2015, least-squares (BLUE) tree decoder"
SOURCE_SQRT = "Fichtenberger, Henzinger, Upadhyay 2023; Henzinger et al. 2023 (C = A^½)"
SOURCE_BANDED = "Choquette-Choo et al. NeurIPS 2023; Kalinin & Lampert 2024 (banded square root)"
SOURCE_BLT = "Dvijotham, McMahan, Pillutla, Steinke, Thakurta 2024 (BLT)"


def _steps(steps) -> int:
    n = v.count("steps", steps, minimum=1)
    if n > MAX_STEPS:
        raise ParameterError("steps", f"a whole number in [1, {MAX_STEPS:.0e}]".replace("+", ""), n)
    return n


@dataclass(frozen=True)
class Participation:
    """How often one record's gradient enters the stream.

    Attributes:
        steps: n, the number of steps (rows of the stream).
        epochs: k ≥ 1, the largest number of steps a record participates in.
        min_separation: b ≥ 1, the smallest gap j − i between two participations i < j
            (Choquette-Choo et al. ICML 2023, "Multi-epoch matrix factorization mechanisms",
            b-min-separation; b = n/k for a fixed epoch order). Irrelevant when k = 1.

    Raises:
        ParameterError: n, k or b not whole numbers ≥ 1; b > n; k·b > n for k > 1.
    """

    steps: int
    epochs: int = 1
    min_separation: int | None = None

    def __post_init__(self) -> None:
        n = _steps(self.steps)
        k = v.count("epochs", self.epochs, minimum=1)
        if k > n:
            raise ParameterError("epochs", f"a whole number in [1, steps = {n}]", k)
        b = self.min_separation
        if b is None:
            b = n // k
        b = v.count("min_separation", b, minimum=1)
        if b > n:
            raise ParameterError("min_separation", f"a whole number in [1, steps = {n}]", b)
        if k > 1 and k * b > n:
            raise ParameterError("epochs", "", k, message=(
                f"epochs must satisfy epochs·min_separation <= steps = {n}, got {k}·{b} = {k * b}"))
        object.__setattr__(self, "steps", n)
        object.__setattr__(self, "epochs", k)
        object.__setattr__(self, "min_separation", b)


@dataclass(frozen=True, eq=False)
class TreeStrategy:
    """Binary-tree aggregation, restarted every ``steps/restarts`` steps.

    Attributes:
        steps: n.
        honaker: decode with Honaker's least-squares estimator on the nodes complete by each
            step (streaming; else the dyadic sum of
            popcount(t) nodes).
        restarts: the number of trees (1: one tree over all steps; k: one per epoch).
    """

    steps: int
    honaker: bool = False
    restarts: int = 1

    def __post_init__(self) -> None:
        n = _steps(self.steps)
        r = v.count("epochs", self.restarts, minimum=1)
        if n % r:
            raise ParameterError("epochs", f"a divisor of steps = {n} for the tree (restarted "
                                 "every epoch)", r)
        object.__setattr__(self, "steps", n)
        object.__setattr__(self, "restarts", r)

    @property
    def name(self) -> str:
        return "tree-honaker" if self.honaker else "tree"

    @property
    def tree_steps(self) -> int:
        """Steps per tree (between two restarts)."""
        return self.steps // self.restarts

    @property
    def source(self) -> str:
        return SOURCE_HONAKER if self.honaker else SOURCE_TREE


@dataclass(frozen=True, eq=False)
class ToeplitzStrategy:
    """A lower-triangular Toeplitz C given by its first column.

    Attributes:
        name: the strategy's name as printed (``sqrt``, ``banded:8``, ``blt``, ``identity``).
        coefs: c (float64, length 1..n): C[i, j] = c[i − j] for 0 ≤ i − j < len(c), else 0.
            c[0] ≠ 0 (C invertible).
        steps: n.
        source: where the strategy comes from.
        blt_params: (θ, ω) for a BLT (its decoder is then computed from them), else None.
    """

    name: str
    coefs: np.ndarray
    steps: int
    source: str = ""
    blt_params: tuple | None = None
    _monotone: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        n = _steps(self.steps)
        c = np.asarray(self.coefs, dtype=np.float64).ravel()[:n].copy()
        if c.size == 0 or not np.all(np.isfinite(c)):
            raise ParameterError("strategy", "finite Toeplitz coefficients", self.name)
        if c[0] == 0:
            raise ParameterError("strategy", "a first coefficient c_0 ≠ 0 (C invertible)", self.name)
        c.setflags(write=False)
        object.__setattr__(self, "steps", n)
        object.__setattr__(self, "coefs", c)
        monotone = bool(np.all(c >= 0) and np.all(np.diff(c) <= 0))
        object.__setattr__(self, "_monotone", monotone)

    @property
    def bands(self) -> int:
        """Number of non-zero diagonals (len(c) after trailing zeros are dropped)."""
        nz = np.flatnonzero(self.coefs)
        return int(nz[-1]) + 1

    @property
    def nonnegative_nonincreasing(self) -> bool:
        """c ≥ 0 and non-increasing (the condition of Kalinin & Lampert 2024, Thm 2)."""
        return self._monotone


@dataclass(frozen=True, eq=False)
class DenseStrategy:
    """A user's lower-triangular n×n C (checked: square, finite, zero above the diagonal,
    non-zero diagonal).

    Raises:
        ParameterError: for any failed check, naming ``strategy``.
    """

    matrix: np.ndarray
    name: str = "dense"
    source: str = "user-supplied C"

    def __post_init__(self) -> None:
        c = np.asarray(self.matrix)
        if c.ndim != 2 or c.shape[0] != c.shape[1]:
            raise ParameterError("strategy", "a square n×n matrix C", c.shape,
                                 message=f"strategy C must be a square n×n matrix, got shape {c.shape}")
        if c.dtype.kind not in "fiu":
            raise ParameterError("strategy", "a real matrix C", f"dtype {c.dtype}")
        c = np.array(c, dtype=np.float64)
        if not np.all(np.isfinite(c)):
            bad = np.argwhere(~np.isfinite(c))[0]
            raise ParameterError("strategy", "finite entries", float(c[tuple(bad)]),
                                 message=f"strategy C must have finite entries, got C[{bad[0]}, {bad[1]}] = {c[tuple(bad)]}")
        upper = np.triu(c, 1)
        if np.any(upper != 0):
            bad = np.argwhere(upper != 0)[0]
            raise ParameterError("strategy", "a lower-triangular C", float(c[tuple(bad)]), message=(
                f"strategy C must be lower-triangular (zero above the diagonal), got C[{bad[0]}, {bad[1]}] = "
                f"{c[tuple(bad)]:g}"))
        if np.any(np.diag(c) == 0):
            i = int(np.flatnonzero(np.diag(c) == 0)[0])
            raise ParameterError("strategy", "a non-zero diagonal", 0.0,
                                 message=f"strategy C must have a non-zero diagonal (C invertible), got C[{i}, {i}] = 0")
        _steps(c.shape[0])
        c.setflags(write=False)
        object.__setattr__(self, "matrix", c)

    @property
    def steps(self) -> int:
        return int(self.matrix.shape[0])


def sqrt_coefficients(steps: int) -> np.ndarray:
    r"""c_k = binom(2k, k)/4^k, k = 0..n−1: the Toeplitz square root of the prefix-sum matrix A
    (C² = A; the generating function of c is (1 − x)^{−1/2}). Computed as the product
    Π_{j≤k} (2j − 1)/(2j) (each factor exact to one rounding).

    Args:
        steps: n ≥ 1.

    Returns:
        float64 array of length n, c_0 = 1, decreasing like 1/√(πk).
    """
    n = _steps(steps)
    k = np.arange(1, n, dtype=np.float64)
    return np.concatenate([[1.0], np.cumprod((2 * k - 1) / (2 * k))])


def sqrt_strategy(steps: int) -> ToeplitzStrategy:
    """The square-root factorization C = B = A^½ (``--strategy sqrt``)."""
    return ToeplitzStrategy("sqrt", sqrt_coefficients(steps), steps, SOURCE_SQRT)


def banded_sqrt_strategy(steps: int, bands: int) -> ToeplitzStrategy:
    """The banded square root: the first ``bands`` coefficients of :func:`sqrt_coefficients`
    (Kalinin & Lampert 2024) — ``--strategy banded:b``.

    Raises:
        ParameterError: bands not in [1, steps].
    """
    n = _steps(steps)
    b = v.count("bands", bands, minimum=1)
    if b > n:
        raise ParameterError("bands", f"a whole number in [1, steps = {n}]", b)
    return ToeplitzStrategy(f"banded:{b}", sqrt_coefficients(b), n, SOURCE_BANDED)


def banded_strategy(steps: int, coefs, *, name: str | None = None) -> ToeplitzStrategy:
    """A banded Toeplitz C with the given coefficients (c_0 ≠ 0), e.g. an optimized one."""
    c = np.asarray(coefs, dtype=np.float64).ravel()
    return ToeplitzStrategy(name or f"banded:{c.size}", c, steps, SOURCE_BANDED)


def identity_strategy(steps: int) -> ToeplitzStrategy:
    """C = I: the Gaussian mechanism on each step, i.e. DP-SGD without amplification."""
    return ToeplitzStrategy("identity", np.ones(1), steps, "C = I (DP-SGD without amplification)")


def blt_strategy(steps: int, *, decay, scale) -> ToeplitzStrategy:
    r"""Buffered linear Toeplitz C: c_0 = 1, c_k = Σ_i ω_i θ_i^{k−1} (k ≥ 1)
    (Dvijotham et al. 2024, Def. 3.1; jax_privacy ``BufferedToeplitz.toeplitz_coefs``).

    Args:
        steps: n.
        decay: θ_i, the buffer decays, each in [0, 1].
        scale: ω_i, the output scales, one per decay, finite.

    Raises:
        ParameterError: lengths differ or are 0; θ ∉ [0, 1]; non-finite values.
    """
    n = _steps(steps)
    theta = np.asarray(decay, dtype=np.float64).ravel()
    omega = np.asarray(scale, dtype=np.float64).ravel()
    if theta.size == 0 or theta.size != omega.size:
        raise ParameterError("strategy", "as many BLT scales as decays (at least one)",
                             f"{theta.size} decays, {omega.size} scales")
    if not (np.all(np.isfinite(theta)) and np.all(np.isfinite(omega))):
        raise ParameterError("strategy", "finite BLT parameters", "a non-finite value")
    if np.any((theta < 0) | (theta > 1)):
        raise ParameterError("strategy", "BLT decays θ in [0, 1]", float(theta[(theta < 0) | (theta > 1)][0]))
    powers = np.arange(n - 1, dtype=np.float64)
    with np.errstate(under="ignore"):
        tail = (theta[None, :] ** powers[:, None]) @ omega
    return ToeplitzStrategy("blt", np.concatenate([[1.0], tail]), n, SOURCE_BLT, (theta, omega))


def tree_depth(steps: int) -> int:
    """⌊log₂ n⌋ + 1 = ⌈log₂(n + 1)⌉: the number of complete tree nodes above the first leaf."""
    return int(steps).bit_length()

