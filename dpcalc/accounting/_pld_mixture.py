r"""Privacy-loss pair of a mixture-of-Gaussians (MoG) mechanism, one-dimensional, with its
certified upper (pessimistic) and lower (optimistic) forms (issue 32; reusable for issue 28's
user-level DP-SGD).

The mechanism (Choquette-Choo, Ganesh, Steinke, Thakurta 2023, "Privacy amplification for
matrix mechanisms", arXiv:2310.15526; dp_accounting's ``MixtureOfGaussiansDpEvent``): on D it
outputs N(0, σ²), on D′ a sample of Σ_j p_j N(c_j, σ²), shifts c_j ≥ 0 (units of the
clipping norm), weights p_j ≥ 0 summing to 1. A vector-valued MoG with ‖v_j‖ ≤ c_j (same
weights) is dominated, in both orders, by this scalar one (their Corollary 4.7, as
dp_accounting's ``MixtureGaussianPrivacyLoss`` docstring cites it; the statement was not
checked against the paper's text offline). Two consequences used below (both are that
corollary with some shifts lowered): moving weight from a component j ≥ 1 to the component
c = 0, or lowering a shift, gives a *dominated* pair.

Loss (``direction="remove"``: P = the mixture, Q = N(0, σ²))::

    L(y) = log Σ_j p_j exp((2 c_j y − c_j²)/(2σ²)) = logsumexp_j(a_j + b_j y),
    a_j = log p_j − c_j²/(2σ²),  b_j = c_j/σ²,

convex and increasing in y (a log-sum-exp of affine functions with slopes b_j ≥ 0), with
inf L = log p_0 when c_0 = 0 (−∞ otherwise). ``direction="add"``: P = N(0, σ²), Q = the
mixture, loss −L(y). The inverse y(ℓ) is found by Newton's method from the right: each line
a_j + b_j y lies below L, so y₀ = min_j (ℓ − a_j)/b_j is ≥ the root, and Newton's iterates of
a convex increasing function started right of its root decrease monotonically to it.

Tails. Only components j ≤ K are kept. **Upper** pair (:class:`MixtureOfGaussiansLoss` as
built by :func:`mixture_pairs`): the weights of j = 1..K rounded up, the mass τ of the
dropped components (plus rounding) on an outcome ⊥ that Q never produces (loss +∞ under
"remove", −∞ under "add"), component 0 the remainder (≤ its true weight). It dominates the
true pair: the true pair is a post-processing of it (⊥ ↦ the dropped components, and the
excess weight of components 1..K thinned to component 0 — Corollary 4.7 above). **Lower**
pair (``optimistic``): weights of 1..K rounded down, component 0 the remainder (so the dropped
components and the rounding are moved to the shift 0): dominated by the true pair. pld discretises the upper pair for its certified PMF and the lower one for its
optimistic PMF (:func:`discretize_pair`), so both ends of its bracket stay proven.

Numerics: every distribution-function value is a sum of K + 1 nonnegative terms
p_j·Φ(±(y − c_j)/σ), accumulated in ``numpy.longdouble`` (the summation adds ≪ u where it
is the x87 80-bit type), each Φ from :func:`dpcalc._numerics.ndtr_pair` on a grid-sized array
(so ``_pld_grid``'s choice of its error allowance by array size stays right).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from dpcalc._numerics import log_binomial_pmf, round_down, round_up
from dpcalc.accounting._pld_grid import DiscretePLD, discretize
from dpcalc.accounting._pld_mechanisms import JointLossPair, LossPair

__all__ = ["MixtureOfGaussiansLoss", "mixture_pairs", "binomial_mixture", "discretize_pair",
           "MIXTURE_TAIL"]

#: the largest total weight of the components dropped from a binomial mixture (sent to +∞ in the
#: upper pair, with the float remainder of the kept weights, at most one ulp of p_0: a T-step
#: composition's δ moves by at most T·(1e-30 + 2⁻⁵³))
MIXTURE_TAIL = 1e-30


#: the rounding a mixture's distribution function carries beyond the discretisation's default
#: allowance (MixtureOfGaussiansLoss.extra_error_units)
_SUM_ERROR_UNITS = 2.0 if np.finfo(np.longdouble).eps < np.finfo(np.float64).eps else 2.0 + 64.0


def _float_down(x: Fraction) -> float:
    """The largest float ≤ the exact rational ``x``."""
    f = float(x)
    return math.nextafter(f, -math.inf) if Fraction(f) > x else f


def _float_up(x: Fraction) -> float:
    """The smallest float ≥ the exact rational ``x``."""
    f = float(x)
    return math.nextafter(f, math.inf) if Fraction(f) < x else f


@dataclass(frozen=True)
class MixtureOfGaussiansLoss(JointLossPair):
    r"""The loss pair of N(0, σ²) against Σ_j p_j N(c_j, σ²) plus mass ``tail`` on ⊥ (module
    docstring), in one ordering.

    Args:
        sigma: σ, the noise standard deviation in units of the shifts; > 0.
        shifts: c_j ≥ 0, increasing, c_0 may be 0; tuple of floats.
        weights: p_j ≥ 0 (tuple, same length); with ``tail`` they sum to 1.
        direction: ``"remove"`` (P = the mixture) or ``"add"`` (P = N(0, σ²)).
        tail: mass of ⊥ (loss +∞ under "remove", −∞ under "add").
        optimistic: a pair dominated by the true one, used for pld's lower PMF (None: this one).
    """

    sigma: float
    shifts: tuple
    weights: tuple
    direction: str
    tail: float = 0.0
    optimistic: LossPair | None = field(default=None, compare=False)

    #: each value is Σ_j p_j Φ(·): the terms within the 4u of Φ plus 1u, summed in long double
    #: and cast once (0.5u), i.e. within 6u: 2u above the 4u per value ``_pld_grid.discretize``
    #: allows; where long double is no wider than double the sum of up to K+1 terms adds K·u
    #: (K ≤ 64 components kept at MIXTURE_TAIL), allowed in full
    extra_error_units = _SUM_ERROR_UNITS

    def __post_init__(self):
        c = np.asarray(self.shifts, dtype=float)
        p = np.asarray(self.weights, dtype=float)
        if c.ndim != 1 or c.shape != p.shape or c.size == 0 or np.any(c < 0) or np.any(p < 0):
            raise ValueError("shifts and weights: equal-length 1-D sequences of nonnegative numbers")
        if not np.any((c > 0) & (p > 0)):
            raise ValueError("a mixture with no positive shift of positive weight has no privacy loss")
        s2 = self.sigma * self.sigma
        with np.errstate(divide="ignore"):
            a = np.log(p) - c * c / (2.0 * s2)
        object.__setattr__(self, "_c", c)
        object.__setattr__(self, "_p", p)
        object.__setattr__(self, "_a", a)
        object.__setattr__(self, "_b", c / s2)
        p0 = float(p[c == 0].sum())
        floor = math.log(p0) if p0 > 0 else -math.inf
        object.__setattr__(self, "_floor", floor)
        object.__setattr__(self, "symmetric", False)
        if self.direction == "remove":
            object.__setattr__(self, "p_inf", float(self.tail))
            object.__setattr__(self, "support", (floor, math.inf))
        elif self.direction == "add":
            object.__setattr__(self, "support", (-math.inf, -floor))
        else:
            raise ValueError(f"direction must be 'remove' or 'add', got {self.direction!r}")

    def loss(self, y):
        """L(y) of the remove ordering (the add ordering's loss is −L), elementwise."""
        y = np.asarray(y, dtype=float)
        z = self._a[:, None] + self._b[:, None] * y.reshape(1, -1)
        m = np.max(z, axis=0)
        with np.errstate(invalid="ignore"):
            out = m + np.log(np.sum(np.exp(z - m), axis=0))
        return out.reshape(y.shape)

    def inverse(self, ell):
        """y(ℓ) with L(y) = ℓ for the remove ordering (−∞ for ℓ ≤ inf L), elementwise (Newton's
        method from the right, module docstring)."""
        ell = np.asarray(ell, dtype=float)
        flat = ell.reshape(-1)
        pos = self._b > 0
        a, b = self._a[pos], self._b[pos]
        with np.errstate(invalid="ignore"):
            y = np.min((flat[None, :] - a[:, None]) / b[:, None], axis=0)
        live = flat > self._floor
        y = np.where(live, y, -np.inf)
        act = np.nonzero(live & np.isfinite(y))[0]
        aa, bb = self._a[:, None], self._b[:, None]
        for _ in range(200):
            if act.size == 0:
                break
            ya = y[act]
            z = aa + bb * ya[None, :]
            m = np.max(z, axis=0)
            w = np.exp(z - m)
            sw = np.sum(w, axis=0)
            f = m + np.log(sw) - flat[act]
            slope = np.sum(w * bb, axis=0) / sw
            step = np.where(slope > 0, f / np.where(slope > 0, slope, 1.0), 0.0)
            step = np.maximum(step, 0.0)  # right of the root: f ≥ 0 (round-off aside)
            y[act] = ya - step
            done = step <= 4e-16 * np.maximum(np.abs(ya), 1.0)
            act = act[~done]
        return y.reshape(ell.shape)

    def _sums(self, y):
        """(Σ p_j Φ((y − c_j)/σ), Σ p_j Φ((c_j − y)/σ)) accumulated in long double."""
        from dpcalc._numerics import ndtr_pair

        le = np.zeros(y.shape, dtype=np.longdouble)
        gt = np.zeros(y.shape, dtype=np.longdouble)
        for cj, pj in zip(self._c, self._p, strict=True):
            if pj == 0.0:
                continue
            lo, hi = ndtr_pair((y - cj) / self.sigma)
            le += np.longdouble(pj) * lo
            gt += np.longdouble(pj) * hi
        return le.astype(float), gt.astype(float)

    def functions(self, ell):
        from dpcalc._numerics import ndtr_pair

        ell = np.asarray(ell, dtype=float)
        if self.direction == "remove":
            y = self.inverse(ell)
            mix_le, mix_gt = self._sums(y)
            n_le, n_gt = ndtr_pair(y / self.sigma)
            return mix_le, mix_gt, n_le, n_gt
        # add: {−L ≤ ℓ} = {L ≥ −ℓ} = {Y ≥ y(−ℓ)}; Q's ⊥ (loss −∞) counts in Q(L ≤ ℓ)
        y = self.inverse(-ell)
        mix_le, mix_gt = self._sums(y)
        n_le, n_gt = ndtr_pair(y / self.sigma)
        return n_gt, n_le, mix_gt + self.tail, mix_le


def binomial_mixture(draws: int, rate: float, *, tail: float = MIXTURE_TAIL) -> tuple[np.ndarray, float, int]:
    r"""Weights of j ~ Binomial(draws, rate) for j = 0..K, the smallest K whose tail P(j > K) is
    ≤ ``tail`` (certified bound: the pmf ratio p_{j+1}/p_j = (n−j)/(j+1)·r/(1−r) decreases in j,
    so P(j > K) ≤ p_{K+1}/(1 − ratio_{K+1})).

    Args:
        draws: n ≥ 1.
        rate: r in (0, 1).
        tail: the mass allowed beyond K, > 0.

    Returns:
        ``(log_pmf, err, K)``: log p_j for j = 0..K (shape (K+1,)), the absolute error bound of
        those logs (:func:`dpcalc._numerics.log_binomial_pmf`), and K.
    """
    lp, l1p = math.log(rate), math.log1p(-rate)
    k = 0
    while True:
        j = float(k + 1)
        lw, err = log_binomial_pmf(np.array([j]), draws, lp, l1p)
        ratio = (draws - j) / (j + 1.0) * rate / (1.0 - rate)
        bound = math.exp(float(lw[0]) + err) / (1.0 - ratio) if ratio < 1.0 else math.inf
        if k + 1 > draws or bound <= tail:
            break
        k += 1
    js = np.arange(k + 1, dtype=float)
    lw, err = log_binomial_pmf(js, draws, lp, l1p)
    return lw, err, k


def mixture_pairs(sigma: float, shifts, log_weights, log_err: float, *, tail_bound: float,
                  direction: str) -> MixtureOfGaussiansLoss:
    """The upper pair of a truncated mixture with its optimistic (lower) pair attached (module
    docstring, "Tails").

    Args:
        sigma: σ > 0 (units of the shifts).
        shifts: c_0 = 0 < c_1 < ... < c_K (array-like).
        log_weights: log p_j of the kept components, each within ``log_err`` of the truth.
        log_err: absolute error bound of ``log_weights``.
        tail_bound: a certified upper bound on the total weight of the dropped components.
        direction: ``"remove"`` or ``"add"``.

    Returns:
        the upper :class:`MixtureOfGaussiansLoss`, its ``optimistic`` attribute the lower one.
    """
    c = tuple(float(x) for x in shifts)
    lw = np.asarray(log_weights, dtype=float)
    if c[0] != 0.0:
        raise ValueError("the first shift must be 0 (the component that does not contain the record)")
    up = [float(round_up(math.exp(x + log_err))) for x in lw[1:]]
    lo = [float(round_down(math.exp(x - log_err))) for x in lw[1:]]
    # upper: component 0 the exact remainder rounded down, ⊥ the exact rest rounded up (≥ the
    # dropped tail), so that the weights and ⊥ sum to at least 1 exactly (in rationals)
    kept = sum((Fraction(u) for u in up), Fraction(0))
    p0_up = max(_float_down(1 - kept - Fraction(tail_bound)), 0.0)
    tail_up = _float_up(1 - kept - Fraction(p0_up))
    # lower: component 0 takes the remainder (≥ its true weight: the dropped tail included)
    p0_lo = float(round_down(1.0 - math.fsum(lo)))
    lower = MixtureOfGaussiansLoss(sigma, c, (p0_lo, *lo), direction, 0.0)
    return MixtureOfGaussiansLoss(sigma, c, (p0_up, *up), direction, max(tail_up, 0.0), optimistic=lower)


def discretize_pair(pair: LossPair, h: float, *, tail: float, max_points: int, lower: bool = True,
                    shift_lower: bool = False, upper: bool = True, memo: dict | None = None
                    ) -> tuple[DiscretePLD | None, DiscretePLD | None]:
    """:func:`dpcalc.accounting._pld_grid.discretize`, with the lower PMF built from the pair's
    ``optimistic`` pair when it has one (a pair dominated by the true one: module docstring);
    ``upper=False`` skips the upper PMF (returned as None); ``memo`` as for ``discretize``."""
    low = getattr(pair, "optimistic", None)
    if low is None or not lower:
        return discretize(pair, h, tail=tail, max_points=max_points, lower=lower, shift_lower=shift_lower,
                          upper=upper, memo=memo)
    upper_pmf = discretize(pair, h, tail=tail, max_points=max_points, lower=False)[0] if upper else None
    _, lower_pmf = discretize(low, h, tail=tail, max_points=max_points, lower=True, shift_lower=shift_lower,
                              upper=False)
    return upper_pmf, lower_pmf
