r"""Privacy-loss random variables of single mechanisms (one neighbouring ordering each).

For a pair of output distributions (P, Q) — P = M(D), Q = M(D') — the privacy loss
is L = ln(dP/dQ). A :class:`LossPair` describes L under *both* P and Q through its
distribution functions; that is all the discretisation layer (``_pld_grid``) needs:

* ``P_le(ℓ) = P(L ≤ ℓ)``, ``P_gt(ℓ) = P(ℓ < L < ∞)`` (finite part only),
* ``Q_le(ℓ)``, ``Q_gt(ℓ)`` likewise under Q,
* ``p_inf = P(L = +∞)`` (mass where Q vanishes),
* ``support = (lo, hi)``: the finite losses lie in [lo, hi] (may be ±∞).

Each function is evaluated on the side where it is small (survival functions for
upper tails), so interval masses keep their relative precision in the tails.

Pairs (all with sensitivity 1; "remove" means P = M(D), Q = M(D \ {x})):

* Gaussian, noise multiplier σ: L ~ N(μ²/2, μ²) under P and N(−μ²/2, μ²) under Q,
  μ = Δ/σ (Balle & Wang 2018; Dong, Roth, Su 2019, μ-GDP). Symmetric.
* Poisson-sampled Gaussian, add/remove (Mironov, Talwar, Zhang 2019 §3.3;
  Koskela, Jälkö, Honkela 2020; Zhu, Dong, Wang 2022):
  remove: P = (1−q)N(0,σ²) + qN(1,σ²), Q = N(0,σ²); add: the reverse ordering.
* Poisson-sampled Gaussian, replace-one (Koskela, Jälkö, Honkela 2020,
  "substitute relation"; dp_accounting ``privacy_loss_mechanism`` REPLACE):
  P = (1−q)N(0,σ²) + qN(1,σ²), Q = (1−q)N(0,σ²) + qN(−1,σ²). Symmetric (x ↦ −x).
  With q = 1 it is the Gaussian with sensitivity 2.
* Laplace, scale b (in units of Δ₁): L = (|x−Δ| − |x|)/b ∈ [−1/b, 1/b] with atoms at
  ±1/b (Koskela et al. 2020; dp_accounting ``LaplacePrivacyLoss``). Symmetric.
* (ε, δ)-DP mechanism: its dominating pair is the generalised randomized response
  (Kairouz, Oh, Viswanath 2015 §2–3; Murtagh & Vadhan 2016):
  P = (δ, (1−δ)e^ε/(1+e^ε), (1−δ)/(1+e^ε), 0), Q = (0, (1−δ)/(1+e^ε), (1−δ)e^ε/(1+e^ε), δ):
  L ∈ {+∞, ε, −ε, −∞}. Symmetric.
* ε-bounded-range mechanism (the exponential mechanism): the dominating pair of the whole
  ε-BR class, L with density e^{(ε+ℓ)/2}/(2(e^ε − 1)) on [−ε, ε] under P
  (:class:`BoundedRangeLoss`, derived there from Dong, Durfee, Rogers 2020 §4). Symmetric.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = [
    "LossPair",
    "JointLossPair",
    "GaussianLoss",
    "SampledGaussianLoss",
    "SampledGaussianReplaceLoss",
    "LaplaceLoss",
    "RandomizedResponseLoss",
    "BoundedRangeLoss",
]


class LossPair:
    """Distribution of the privacy loss L = ln(dP/dQ) under P and under Q."""

    #: P(L = +∞)
    p_inf: float = 0.0
    #: (lo, hi): every finite loss lies in [lo, hi]
    support: tuple[float, float] = (-math.inf, math.inf)
    #: True when the pair for the other ordering is the same (then one direction suffices)
    symmetric: bool = True
    #: relative error of each distribution-function value, in unit round-offs, beyond the
    #: allowance ``_pld_grid.discretize`` makes by default (4u; ``NDTR_VECTOR_ERROR_UNITS`` where
    #: Φ takes the vectorised path)
    extra_error_units: float = 0.0

    def P_le(self, ell: np.ndarray) -> np.ndarray:  # noqa: N802 (P and Q are the paper's names)
        raise NotImplementedError

    def P_gt(self, ell: np.ndarray) -> np.ndarray:  # noqa: N802
        raise NotImplementedError

    def Q_le(self, ell: np.ndarray) -> np.ndarray:  # noqa: N802
        raise NotImplementedError

    def Q_gt(self, ell: np.ndarray) -> np.ndarray:  # noqa: N802
        raise NotImplementedError

    def functions(self, ell: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(P_le, P_gt, Q_le, Q_gt) at ``ell`` (subclasses may share work between them)."""
        return self.P_le(ell), self.P_gt(ell), self.Q_le(ell), self.Q_gt(ell)

    def grid_functions(self, k0: int, n: int, h: float, half: bool,
                       memo: dict | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`functions` at the n grid losses ℓ_k = k·h (``half``: the bin edges (k − ½)·h),
        k = k0, …, k0 + n − 1 — bitwise the values ``functions`` gives on that array.

        ``memo`` (a dict owned by the caller, e.g. one composition) lets a pair share values
        with the pair of the other neighbouring ordering on the same grid (the sampled
        Gaussian: :meth:`SampledGaussianLoss.grid_functions`); the default ignores it.
        """
        ks = (k0 - 0.5 + np.arange(n)) if half else (k0 + np.arange(n))
        return self.functions(ks * h)

    def le_pair(self, ell: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(P_le, Q_le) at ``ell`` (bitwise the single functions' values; pairs whose
        :meth:`functions` shares work return its values)."""
        return self.P_le(ell), self.Q_le(ell)

    def gt_pair(self, ell: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(P_gt, Q_gt) at ``ell``, as :meth:`le_pair`."""
        return self.P_gt(ell), self.Q_gt(ell)

    def delta(self, epsilon: float) -> float:
        """Exact hockey-stick divergence δ(ε) = P(L > ε) − e^ε Q(L > ε) + P(L = ∞) of this pair."""
        e = np.array([epsilon], dtype=float)
        return float(self.P_gt(e)[0] - math.exp(epsilon) * self.Q_gt(e)[0] + self.p_inf)


class JointLossPair(LossPair):
    """A pair whose four distribution functions are computed together by :meth:`functions`
    (mixtures, whose components serve all four at once); the single functions read from it."""

    def functions(self, ell: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        raise NotImplementedError

    def P_le(self, ell: np.ndarray) -> np.ndarray:  # noqa: N802
        return self.functions(ell)[0]

    def P_gt(self, ell: np.ndarray) -> np.ndarray:  # noqa: N802
        return self.functions(ell)[1]

    def Q_le(self, ell: np.ndarray) -> np.ndarray:  # noqa: N802
        return self.functions(ell)[2]

    def Q_gt(self, ell: np.ndarray) -> np.ndarray:  # noqa: N802
        return self.functions(ell)[3]

    def le_pair(self, ell: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        pl, _, ql, _ = self.functions(ell)
        return pl, ql

    def gt_pair(self, ell: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        _, pg, _, qg = self.functions(ell)
        return pg, qg


def _ndtr():
    """Φ, vectorised: :func:`dpcalc._numerics.ndtr` (libm's erfc up to ``_NDTR_LIBM_MAX`` points,
    within the 4u per value that ``_pld_grid`` allows; beyond, dpcalc._erfc's vectorised erfc,
    within ``NDTR_VECTOR_ERROR_UNITS``; scipy.special.ndtr's error grows to ~10³u at |x| = 20,
    and importing it costs ~0.2 s: issue 17)."""
    from dpcalc._numerics import ndtr

    return ndtr


@dataclass(frozen=True)
class GaussianLoss(LossPair):
    """Gaussian mechanism with μ = sensitivity/σ: L ~ N(±μ²/2, μ²) under P / Q."""

    mu: float

    def _z(self, ell, sign):
        mu = self.mu
        return (np.asarray(ell, dtype=float) - sign * mu * mu / 2) / mu

    def P_le(self, ell):  # noqa: N802
        return _ndtr()(self._z(ell, 1))

    def P_gt(self, ell):  # noqa: N802
        return _ndtr()(-self._z(ell, 1))

    def Q_le(self, ell):  # noqa: N802
        return _ndtr()(self._z(ell, -1))

    def Q_gt(self, ell):  # noqa: N802
        return _ndtr()(-self._z(ell, -1))


@dataclass(frozen=True)
class SampledGaussianLoss(LossPair):
    r"""Poisson-sampled Gaussian (noise multiplier σ, sample rate q < 1), add or remove ordering.

    remove: L(x) = ln(1 − q + q e^{(2x−1)/(2σ²)}), x ~ P = (1−q)N(0,σ²) + qN(1,σ²), Q = N(0,σ²);
    increasing in x, inverse x(ℓ) = σ² ln((e^ℓ − (1−q))/q) + 1/2 on ℓ > ln(1−q).
    add: P = N(0,σ²), Q = the mixture, L_add(x) = −L_remove(x) (docs/numerical-accounting.md §2; Zhu, Dong, Wang 2022).
    """

    sigma: float
    q: float
    direction: str  # "remove" or "add"

    def __post_init__(self):
        lo = math.log1p(-self.q)
        object.__setattr__(self, "symmetric", False)
        object.__setattr__(self, "support", (lo, math.inf) if self.direction == "remove" else (-math.inf, -lo))

    def _x(self, ell):
        """x(ℓ) for the remove loss; −inf below the support."""
        ell = np.asarray(ell, dtype=float)
        q, s2 = self.q, self.sigma * self.sigma
        with np.errstate(divide="ignore", invalid="ignore"):
            # ln((e^ℓ − 1 + q)/q) = ln(expm1(ℓ) + q) − ln q; for large ℓ: ℓ + ln(1 + (q−1)e^{−ℓ}) − ln q
            # (each branch evaluated on its own points only: elementwise, the same values)
            big = ell > 30
            if big.any():
                inner = np.empty(ell.shape)
                eb = ell[big]
                inner[big] = eb + np.log1p((q - 1) * np.exp(-eb))
                inner[~big] = np.log(np.expm1(ell[~big]) + q)
            else:  # the common case (a grid below 30 nats): no gathers
                inner = np.log(np.expm1(ell) + q)
            x = s2 * (inner - math.log(q)) + 0.5
        return np.where(ell <= math.log1p(-q), -np.inf, x)

    def _mix_le(self, x):
        nd = _ndtr()
        s = self.sigma
        return (1 - self.q) * nd(x / s) + self.q * nd((x - 1) / s)

    def _mix_gt(self, x):
        nd = _ndtr()
        s = self.sigma
        return (1 - self.q) * nd(-x / s) + self.q * nd((1 - x) / s)

    def _n0_le(self, x):
        return _ndtr()(x / self.sigma)

    def _n0_gt(self, x):
        return _ndtr()(-x / self.sigma)

    def _remove_functions(self, u, vector: bool | None = None):
        """(mix_le, mix_gt, n0_le, n0_gt) at x(u): the remove ordering's four functions at the
        losses ``u`` (the add ordering's at −u, in another order). Φ as ``ndtr_pair`` computes it
        for an array of u's size, or of a grid of another size when ``vector`` says which way
        (``ndtr_pair`` takes the vectorised erfc above ``_NDTR_LIBM_MAX`` points)."""
        from dpcalc._numerics import _NDTR_LIBM_MAX, ndtr_pair

        s, q = self.sigma, self.q
        x = self._x(u)
        if vector is None:
            vector = x.size > _NDTR_LIBM_MAX
        # Φ(±x/s) and Φ(±(x−1)/s): two erfc evaluations per point serve all four functions
        # (the same values as four ndtr calls)
        n0_le, n0_gt = ndtr_pair(x / s, vector)
        n1_le, n1_gt = ndtr_pair((x - 1) / s, vector)
        mix_le = (1 - q) * n0_le + q * n1_le
        mix_gt = (1 - q) * n0_gt + q * n1_gt
        return mix_le, mix_gt, n0_le, n0_gt

    def functions(self, ell, vector: bool | None = None):
        """:meth:`LossPair.functions`; ``vector`` chooses Φ's path (:func:`dpcalc._numerics.ndtr`)
        for a caller that evaluates part of a grid (None: by the array's size)."""
        if self.direction == "remove":
            return self._remove_functions(np.asarray(ell, dtype=float), vector)
        mix_le, mix_gt, n0_le, n0_gt = self._remove_functions(-np.asarray(ell, dtype=float), vector)
        return n0_gt, n0_le, mix_gt, mix_le

    def le_pair(self, ell):
        pl, _, ql, _ = self.functions(ell)
        return pl, ql

    def gt_pair(self, ell):
        _, pg, _, qg = self.functions(ell)
        return pg, qg

    def grid_functions(self, k0, n, h, half, memo=None):
        """:meth:`LossPair.grid_functions`, sharing through ``memo`` the values of the remove
        ordering at the losses u_j = j·h (or (j − ½)·h) with the add ordering, whose loss ℓ is
        the remove loss at u = −ℓ: ℓ_k = k·h ↔ j = −k, ℓ_k = (k − ½)·h ↔ j = 1 − k (negation and
        these products are exact, so x(u) and every Φ are bitwise the same). Only the indices
        not yet in ``memo`` are evaluated; the two orderings' grids mostly overlap, so an
        upper-and-lower discretisation of both costs about half the erfc calls."""
        if memo is None:
            return super().grid_functions(k0, n, h, half)
        from dpcalc._numerics import _NDTR_LIBM_MAX

        vector = n > _NDTR_LIBM_MAX  # the Φ that functions() would use on this array
        if self.direction == "remove":
            j0 = k0
        else:
            j0 = (1 if half else 0) - (k0 + n - 1)
        j1 = j0 + n - 1
        key = ("sampled-gaussian", self.sigma, self.q, h, half, vector)
        have = memo.get(key)

        def values(a: int, b: int):  # indices a..b (inclusive)
            js = (a - 0.5 + np.arange(b - a + 1)) if half else (a + np.arange(b - a + 1))
            return self._remove_functions(js * h, vector)

        if have is None:
            lo, arrs = j0, values(j0, j1)
        else:
            lo, arrs = have
            hi = lo + arrs[0].size - 1
            if j0 < lo:
                arrs = tuple(np.concatenate((a, b)) for a, b in zip(values(j0, lo - 1), arrs, strict=True))
                lo = j0
            if j1 > hi:
                arrs = tuple(np.concatenate((a, b)) for a, b in zip(arrs, values(hi + 1, j1), strict=True))
        memo[key] = (lo, arrs)
        mix_le, mix_gt, n0_le, n0_gt = (a[j0 - lo: j1 - lo + 1] for a in arrs)
        if self.direction == "remove":
            return mix_le, mix_gt, n0_le, n0_gt
        return n0_gt[::-1], n0_le[::-1], mix_gt[::-1], mix_le[::-1]

    # remove: L increasing in x, so {L ≤ ℓ} = {X ≤ x(ℓ)}.
    # add: L_add = −L_rem, so {L_add ≤ ℓ} = {L_rem ≥ −ℓ} = {X ≥ x(−ℓ)}.
    def P_le(self, ell):  # noqa: N802
        if self.direction == "remove":
            return self._mix_le(self._x(ell))
        return self._n0_gt(self._x(-np.asarray(ell, dtype=float)))

    def P_gt(self, ell):  # noqa: N802
        if self.direction == "remove":
            return self._mix_gt(self._x(ell))
        return self._n0_le(self._x(-np.asarray(ell, dtype=float)))

    def Q_le(self, ell):  # noqa: N802
        if self.direction == "remove":
            return self._n0_le(self._x(ell))
        return self._mix_gt(self._x(-np.asarray(ell, dtype=float)))

    def Q_gt(self, ell):  # noqa: N802
        if self.direction == "remove":
            return self._n0_gt(self._x(ell))
        return self._mix_le(self._x(-np.asarray(ell, dtype=float)))


@dataclass(frozen=True)
class SampledGaussianReplaceLoss(LossPair):
    r"""Poisson-sampled Gaussian under replace-one adjacency (Koskela, Jälkö, Honkela 2020, substitute relation).

    P = (1−q)N(0,σ²) + qN(1,σ²), Q = (1−q)N(0,σ²) + qN(−1,σ²);
    L(x) = ln(1−q + q e^{(2x−1)/(2σ²)}) − ln(1−q + q e^{(−2x−1)/(2σ²)}), increasing in x and odd-symmetric,
    inverted numerically (vectorised bisection to float precision).
    """

    sigma: float
    q: float

    def loss(self, x):
        x = np.asarray(x, dtype=float)
        s2 = self.sigma ** 2
        q = self.q
        a = (2 * x - 1) / (2 * s2)
        b = (-2 * x - 1) / (2 * s2)
        return np.logaddexp(math.log1p(-q), math.log(q) + a) - np.logaddexp(math.log1p(-q), math.log(q) + b)

    def _x(self, ell):
        ell = np.asarray(ell, dtype=float)
        s2, q = self.sigma ** 2, self.q
        # For large |x|, L(x) ≈ ±((2|x|−1)/(2σ²) + ln q − ln(1−q)): bracket generously around it.
        guess = np.abs(ell) * s2 + 0.5 + s2 * abs(math.log(q / (1 - q))) + 10 * s2 + 10
        lo = -guess
        hi = guess.copy()
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            go_up = self.loss(mid) < ell
            lo = np.where(go_up, mid, lo)
            hi = np.where(go_up, hi, mid)
            if np.all(hi - lo <= 4e-16 * np.maximum(1.0, np.abs(hi))):
                break
        return hi  # smallest float x with L(x) ≥ ℓ, to float precision

    def functions(self, ell):
        x = self._x(ell)
        return self._mix_le(x, 1.0), self._mix_gt(x, 1.0), self._mix_le(x, -1.0), self._mix_gt(x, -1.0)

    def _mix_le(self, x, shift):
        nd = _ndtr()
        s = self.sigma
        return (1 - self.q) * nd(x / s) + self.q * nd((x - shift) / s)

    def _mix_gt(self, x, shift):
        nd = _ndtr()
        s = self.sigma
        return (1 - self.q) * nd(-x / s) + self.q * nd((shift - x) / s)

    def P_le(self, ell):  # noqa: N802
        return self._mix_le(self._x(ell), 1.0)

    def P_gt(self, ell):  # noqa: N802
        return self._mix_gt(self._x(ell), 1.0)

    def Q_le(self, ell):  # noqa: N802
        return self._mix_le(self._x(ell), -1.0)

    def Q_gt(self, ell):  # noqa: N802
        return self._mix_gt(self._x(ell), -1.0)


@dataclass(frozen=True)
class LaplaceLoss(LossPair):
    r"""Laplace mechanism, scale b (units of Δ₁): P = Lap(0, b), Q = Lap(1, b).

    L(x) = (|x − 1| − |x|)/b: = ε for x ≤ 0, = −ε for x ≥ 1, = (1 − 2x)/b between (ε = 1/b).
    For ℓ ∈ [−ε, ε): {L ≤ ℓ} = {X ≥ x(ℓ)}, x(ℓ) = (1 − bℓ)/2 ∈ (0, 1].
    P(X ≥ x) = ½e^{−x/b} (x ≥ 0); Q(X ≥ x) = 1 − ½e^{(x−1)/b} (x ≤ 1).
    """

    scale: float

    def __post_init__(self):
        object.__setattr__(self, "support", (-1.0 / self.scale, 1.0 / self.scale))

    def _xl(self, ell):
        ell = np.asarray(ell, dtype=float)
        eps = 1.0 / self.scale
        return np.clip(ell, -eps, eps), eps

    def P_le(self, ell):  # noqa: N802
        e, eps = self._xl(ell)
        x = (1 - self.scale * e) / 2
        val = 0.5 * np.exp(-x / self.scale)
        return np.where(np.asarray(ell) >= eps, 1.0, np.where(np.asarray(ell) < -eps, 0.0, val))

    def P_gt(self, ell):  # noqa: N802
        e, eps = self._xl(ell)
        x = (1 - self.scale * e) / 2
        val = 1 - 0.5 * np.exp(-x / self.scale)  # P(X < x) = 1 − ½e^{−x/b}
        return np.where(np.asarray(ell) >= eps, 0.0, np.where(np.asarray(ell) < -eps, 1.0, val))

    def Q_le(self, ell):  # noqa: N802
        e, eps = self._xl(ell)
        x = (1 - self.scale * e) / 2
        val = 1 - 0.5 * np.exp((x - 1) / self.scale)
        return np.where(np.asarray(ell) >= eps, 1.0, np.where(np.asarray(ell) < -eps, 0.0, val))

    def Q_gt(self, ell):  # noqa: N802
        e, eps = self._xl(ell)
        x = (1 - self.scale * e) / 2
        val = 0.5 * np.exp((x - 1) / self.scale)
        return np.where(np.asarray(ell) >= eps, 0.0, np.where(np.asarray(ell) < -eps, 1.0, val))


@dataclass(frozen=True)
class RandomizedResponseLoss(LossPair):
    r"""Dominating pair of an (ε, δ)-DP mechanism (Kairouz, Oh, Viswanath 2015 §2–3):
    L = +∞ w.p. δ, ε w.p. (1−δ)e^ε/(1+e^ε), −ε w.p. (1−δ)/(1+e^ε) under P."""

    epsilon: float
    delta_: float = 0.0

    def __post_init__(self):
        object.__setattr__(self, "p_inf", self.delta_)
        object.__setattr__(self, "support", (-self.epsilon, self.epsilon))

    def _masses(self):
        eps, d = self.epsilon, self.delta_
        hi = (1 - d) / (1 + math.exp(-eps))  # P(L = ε) = Q(L = −ε)
        lo = (1 - d) / (1 + math.exp(eps))  # P(L = −ε) = Q(L = ε)
        return hi, lo

    def _le(self, ell, at_plus, at_minus):
        ell = np.asarray(ell, dtype=float)
        eps = self.epsilon
        return np.where(ell >= eps, at_minus + at_plus, np.where(ell >= -eps, at_minus, 0.0))

    def _gt(self, ell, at_plus, at_minus):
        ell = np.asarray(ell, dtype=float)
        eps = self.epsilon
        return np.where(ell >= eps, 0.0, np.where(ell >= -eps, at_plus, at_plus + at_minus))

    def P_le(self, ell):  # noqa: N802
        hi, lo = self._masses()
        return self._le(ell, hi, lo)

    def P_gt(self, ell):  # noqa: N802
        hi, lo = self._masses()
        return self._gt(ell, hi, lo)

    def Q_le(self, ell):  # noqa: N802
        hi, lo = self._masses()
        return self._le(ell, lo, hi)

    def Q_gt(self, ell):  # noqa: N802
        hi, lo = self._masses()
        return self._gt(ell, lo, hi)


@dataclass(frozen=True)
class BoundedRangeLoss(LossPair):
    r"""The dominating pair of every ε-bounded-range mechanism (e.g. the exponential mechanism).

    Derivation. For fixed neighbours an ε-BR mechanism is dominated by the binary pair RR_t
    with losses t and t − ε, P(L = t) = p_t = (e^ε − e^t)/(e^ε − 1), for some t ∈ [0, ε]
    (Dong, Durfee, Rogers 2020 §4: the curve E_Q[(e^L − e^{ε′})₊] is convex in e^L, whose
    Q-mean is 1 and range [e^{t−ε}, e^t]). Its curve is
    δ_t(ε′) = ((e^ε − e^t) − e^{ε′}(e^{ε−t} − 1))/(e^ε − 1) for 0 ≤ ε′ ≤ t, maximised over t at
    t = (ε + ε′)/2:

        δ*(ε′) = sup_t δ_t(ε′) = (e^{ε/2} − e^{ε′/2})²/(e^ε − 1),   0 ≤ ε′ ≤ ε.

    δ* is the curve of the pair below (−e^{−ε′}·dδ*/dε′ = Q(L > ε′) = (e^{(ε−ε′)/2} − 1)/(e^ε − 1)
    gives the law of L under Q; P = e^ℓ·Q), which is symmetric (the class is closed under
    swapping x and x′, RR_t ↔ RR_{ε−t}), so it dominates every RR_t, hence every ε-BR
    mechanism, in both orderings; and no pair with a smaller curve dominates them all (its
    curve is the supremum of theirs). Under adaptive composition each step, whatever its t,
    is dominated by this same pair, so the composed pair dominates the composition (Zhu,
    Dong, Wang 2022): a certified adaptive bound. It is not itself ε-BR (its loss spans
    [−ε, ε]), so for many steps the zCDP bound kε²/8 can be tighter than its mean k·KL
    (≈ kε²/6).

    Law of L (no atoms), for ℓ ∈ [−ε, ε]:

    * P: density e^{(ε+ℓ)/2}/(2(e^ε − 1)); P(L ≤ ℓ) = expm1((ε+ℓ)/2)/expm1(ε),
      P(L > ℓ) = e^{(ε+ℓ)/2}·expm1((ε−ℓ)/2)/expm1(ε);
    * Q: density e^{(ε−ℓ)/2}/(2(e^ε − 1)); Q(L ≤ ℓ) = e^{(ε−ℓ)/2}·expm1((ε+ℓ)/2)/expm1(ε),
      Q(L > ℓ) = expm1((ε−ℓ)/2)/expm1(ε).

    Args:
        epsilon: ε in (0, 700] (the width of the loss range).
    """

    epsilon: float

    def __post_init__(self):
        object.__setattr__(self, "support", (-self.epsilon, self.epsilon))

    def _parts(self, ell):
        from dpcalc._numerics import log_expm1

        eps = self.epsilon
        ell = np.clip(np.asarray(ell, dtype=float), -eps, eps)
        lme = log_expm1(eps)
        with np.errstate(divide="ignore"):
            lo = log_expm1(np.maximum((eps + ell) / 2.0, 0.0)) - lme  # log expm1((ε+ℓ)/2)/expm1(ε)
            hi = log_expm1(np.maximum((eps - ell) / 2.0, 0.0)) - lme  # log expm1((ε−ℓ)/2)/expm1(ε)
        return ell, lo, hi

    def P_le(self, ell):  # noqa: N802
        _, lo, _ = self._parts(ell)
        return np.minimum(np.exp(lo), 1.0)

    def P_gt(self, ell):  # noqa: N802
        x, _, hi = self._parts(ell)
        return np.minimum(np.exp((self.epsilon + x) / 2.0 + hi), 1.0)

    def Q_le(self, ell):  # noqa: N802
        x, lo, _ = self._parts(ell)
        return np.minimum(np.exp((self.epsilon - x) / 2.0 + lo), 1.0)

    def Q_gt(self, ell):  # noqa: N802
        _, _, hi = self._parts(ell)
        return np.minimum(np.exp(hi), 1.0)
