r"""The pld accountant's dominating pair for one step of the Gaussian on a **truncated Poisson**
batch (each of the records joins with probability q; if more than B_max joined, a uniformly
random B_max of them are kept), **add/remove adjacency** (issue 32; docs/design.md §9).

Theorem (branch decomposition; the analysis dp_accounting ships for
``TruncatedSubsampledGaussianDpEvent``, arXiv:2508.15089, made one-sided). Write PSG(r, s)_d for
the Poisson-sampled Gaussian pair at rate r with noise multiplier s and shift 1 in ordering d
(remove: ((1−r)N(0, s²) + rN(1, s²), N(0, s²)); add: the reverse; r = 1: the Gaussian with
μ = 1/s). Fix the differing record x, let M be the number of the other records and
K ~ Bin(M, q) the number of them that join; put

    p_M = P[K ≥ B_max],   γ_M = P[x kept | K ≥ B_max] = B_max·P[Bin(M+1, q) ≥ B_max+1]/((M+1)·p_M).

1. On {K ≤ B_max − 1} nothing is truncated with or without x: the outputs are the mixture over
   the joined set S of ((1−q)N(s_S, σ²) + qN(s_S + x, σ²), N(s_S, σ²)), every component a
   shift of norm ≤ C, dominated by PSG(q, σ) (Mironov, Talwar, Zhang 2019 §3.3; Zhu, Dong,
   Wang 2022).
2. On {K ≥ B_max}, without x the batch is a uniformly random B_max-subset S of the others
   (exchangeability, given K); with x it is x plus a uniformly random (B_max−1)-subset with
   probability q·B_max/(K+1), else a uniformly random B_max-subset. These subset laws do not
   depend on K, so averaging over K ≥ B_max gives the weight γ_M (the formula above:
   q/(k+1)·C(M,k) = C(M+1,k+1)/(M+1)). Coupling S with a uniformly random j ∈ S (S∖{j} is a
   uniform (B_max−1)-subset), the outputs are the mixture over (S, j) of
   ((1−γ_M)N(s_S, σ²) + γ_M N(s_S − y_j + x, σ²), N(s_S, σ²)): shifts of norm ≤ 2C, each
   dominated by PSG(γ_M, σ/2).
3. The branch {K ≥ B_max} has the same probability on both datasets (it depends on the other
   records only), and the hockey-stick divergence H_α (α = e^ε ≥ 0) is jointly convex; so the
   step is dominated, for every ε ∈ ℝ, by the branch-revealing mixture
   T_M = (1 − p_M)·PSG(q, σ) ⊕ p_M·PSG(γ_M, σ/2), whose H_α is the weighted sum (mixing
   components with common weights never increases H_α; revealing the branch attains the sum).
   Dominance of a pair for every ε is Blackwell dominance, which composition keeps, so T
   composed T times dominates T steps (adaptively chosen or not).
4. The neighbour considered has M = N − 1 others (the dataset with x has N records) or M = N
   (the dataset without x has N records); both are covered by one pair. Let p_lo ≤ min_M p_M,
   p_hi ≥ max_M p_M and γ̄ ≥ max_M γ_M. PSG is monotone (in the dominance order) in its rate
   ((1−r)Q + rP = (1−t)Q + t((1−r′)Q + r′P) with t = r/r′ ≤ 1, joint convexity, both
   orderings) and in its shift (the Gaussian pair with shift 1 is a post-processing of the one
   with shift 2, and the kernel commutes with mixing with N(0, ·)). With
   C_d = PSG(max(q, γ̄), σ/2)_d, which dominates both PSG(q, σ) and PSG(γ̄, σ/2), and
   w_A ≤ 1 − p_hi, w_B ≤ p_lo, w_C = 1 − w_A − w_B:

       T_M = w_A·A + (1 − p_M − w_A)·A + w_B·B_{γ_M} + (p_M − w_B)·B_{γ_M}
           ≼ w_A·PSG(q, σ) ⊕ w_B·PSG(γ̄, σ/2) ⊕ w_C·PSG(max(q, γ̄), σ/2)

   for both M, in each ordering (:func:`truncated_poisson_pair`). Here γ_M ≤ q·B_max/(B_max+1)
   < q (it averages q·B_max/(K+1) over K ≥ B_max), so the C branch is the B branch at rate q,
   and its weight p_hi − p_lo ≈ q·P[Bin(N−1, q) = B_max − 1] (plus the 1e-8 relative widening
   of the binomial tails, :data:`_P_WIDEN`) is tiny.

dp_accounting bounds branch 2 by the symmetric replace-one pair at σ/2 ("slightly loose", its
comment) and takes M = N − 1 only; the one-sided pair here is the coupling made explicit, so at
a cap that truncates often (B_max = B) this pair's ε is below dp_accounting's.

Floating point: the weights are floats chosen so that w_A + w_B + w_C = 1 exactly
(:func:`truncation_weights`); the distribution functions are weighted sums of the components'
(each within 5.5u: Φ within the 4u that dpcalc._numerics.ndtr's libm path promises, plus the
component's own arithmetic; within 7.6u on grids whose Φ comes from the vectorised erfc, certified
to 6.1u), i.e. within 8u (9.1u) with the weighting and the sum, so the mixture declares
:attr:`MixtureLoss.extra_error_units` = 4 on top of the 4u (12u) the discretisation allows per value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dpcalc.accounting._pld_mechanisms import (
    GaussianLoss,
    JointLossPair,
    LossPair,
    SampledGaussianLoss,
)
from dpcalc.accounting._sampling import TRUNCATED_REPLACE_REASON
from dpcalc.errors import UnsupportedEventError
from dpcalc.events import Event, GaussianEvent, TruncatedPoissonSampledEvent

__all__ = ["MixtureLoss", "truncation_weights", "truncated_poisson_pair", "check_truncated_step",
           "truncated_spread"]

#: relative widening of the binomial tails both ways. They come from scipy.special.betainc (Boost's
#: ibeta): within 5.4e-12 relative of mpmath over N ≤ 1e12 (tests/accounting/test_truncated_pld.py);
#: scipy.special.bdtrc is not used: its error reaches 2e-7 at N = 1e8, 0.2% at N = 1e9 and its
#: integer argument overflows beyond 2³¹ records
_P_WIDEN = 1e-8
#: a tail p_M that underflows to 0 although M ≥ B_max is taken as at most this
_P_FLOOR = 1e-280
_GRID = 2.0 ** 53


def _branch(q: float, m: int, bmax: int) -> tuple[float, float, float]:
    """(p_lo, p_hi, γ) of the neighbour with M = ``m`` other records (module docstring):
    p_lo ≤ p_M ≤ p_hi and γ ≥ γ_M; (0, 0, 0) if M < B_max.
    P[Bin(M, q) ≥ B] = I_q(B, M − B + 1), the regularised incomplete beta function."""
    from scipy.special import betainc

    if m < bmax:
        return 0.0, 0.0, 0.0
    p = float(betainc(bmax, m - bmax + 1, q))
    if not p > 0.0:
        return 0.0, _P_FLOOR, q  # underflowed: at most the floor, the rate at most q (γ_M < q)
    kept = float(betainc(bmax + 1, m - bmax + 1, q)) if m + 1 > bmax else 0.0
    gamma = bmax * (kept * (1.0 + _P_WIDEN)) / ((m + 1) * (p * (1.0 - _P_WIDEN)))
    # 1e-12: the roundings of the quotient; γ_M ≤ q·B/(B+1) < q
    return p * (1.0 - _P_WIDEN), min(1.0, p * (1.0 + _P_WIDEN)), min(q, gamma * (1.0 + 1e-12))


@dataclass(frozen=True)
class MixtureLoss(JointLossPair):
    """Branch-revealing mixture of privacy-loss pairs: with probability ``weights[i]`` (the same
    under P and Q) the output is branch i's, labelled. The loss of a labelled output is its
    branch's loss, so each distribution function is the weighted sum of the branches'.

    Args:
        weights: nonnegative floats summing to 1 exactly.
        pairs: the branches' pairs (each in the same neighbouring ordering).
    """

    weights: tuple[float, ...]
    pairs: tuple[LossPair, ...]

    #: a weighted sum of ≤ 3 values each within 5.5u (7.6u) is within 8u (9.1u): 4u above the 4u
    #: (12u) per value that ``_pld_grid.discretize`` allows on the libm (vectorised) path (module docstring)
    extra_error_units = 4.0

    def __post_init__(self):
        if len(self.weights) != len(self.pairs) or not self.pairs:
            raise ValueError("one weight per pair")
        if any(not w >= 0.0 for w in self.weights) or sum(map(Fraction, self.weights)) != 1:
            raise ValueError(f"mixture weights must be nonnegative and sum to 1 exactly, got {self.weights}")
        live = [(w, p) for w, p in zip(self.weights, self.pairs, strict=True) if w > 0.0]
        object.__setattr__(self, "p_inf", math.fsum(w * p.p_inf for w, p in live))
        object.__setattr__(self, "support", (min(p.support[0] for _, p in live),
                                             max(p.support[1] for _, p in live)))
        object.__setattr__(self, "symmetric", all(p.symmetric for _, p in live))

    def functions(self, ell):
        ell = np.asarray(ell, dtype=float)
        out = [np.zeros(ell.shape) for _ in range(4)]
        for w, pair in zip(self.weights, self.pairs, strict=True):
            if w > 0.0:
                for acc, f in zip(out, pair.functions(ell), strict=True):
                    acc += w * f
        return tuple(np.minimum(f, 1.0) for f in out)


def _floor_grid(x: Fraction) -> float:
    """The largest multiple of 2⁻⁵³ that is ≤ x (x in [0, 1]): exactly a float, and so is 1 − it."""
    return math.floor(x * int(_GRID)) / _GRID


def truncation_weights(*, sample_rate: float, dataset_size: int,
                       max_batch_size: int) -> tuple[float, float, float, float]:
    """(w_A, w_B, w_C, γ̄) of the pair of :func:`truncated_poisson_pair` (module docstring, 4.):
    w_A ≤ 1 − p_M and w_B ≤ p_M for M = N − 1 and N, w_C = 1 − w_A − w_B exactly (floats),
    γ̄ ≥ γ_M for both (0 when no neighbour is ever truncated).

    Args:
        sample_rate: q in (0, 1].
        dataset_size: N ≥ 1.
        max_batch_size: B_max ≥ 1.
    """
    branches = [_branch(sample_rate, m, max_batch_size) for m in sorted({max(dataset_size - 1, 0), dataset_size})]
    p_lo = min(b[0] for b in branches)
    p_hi = max(b[1] for b in branches)
    gamma = max(b[2] for b in branches)
    if p_hi == 0.0:
        return 1.0, 0.0, 0.0, 0.0
    w_a = _floor_grid(1 - Fraction(p_hi))
    rest = 1.0 - w_a  # exact: a multiple of 2⁻⁵³ in [0, 1]
    w_b = min(p_lo, rest)
    if Fraction(rest) - Fraction(w_b) != Fraction(rest - w_b):
        w_b = _floor_grid(Fraction(w_b))  # then rest − w_b is a multiple of 2⁻⁵³: exact
    w_c = rest - w_b
    return w_a, w_b, w_c, gamma


def _psg(rate: float, sigma: float, direction: str) -> LossPair:
    """PSG(rate, σ) in ``direction`` (shift 1): the Gaussian μ = 1/σ at rate 1."""
    if rate >= 1.0:
        return GaussianLoss(1.0 / sigma)
    return SampledGaussianLoss(sigma, rate, direction)


def truncated_poisson_pair(step: TruncatedPoissonSampledEvent, direction: str) -> LossPair:
    r"""The dominating pair of one truncated-Poisson step of a Gaussian under add/remove, in
    ``direction`` (module docstring, the theorem): the mixture
    w_A·PSG(q, σ) ⊕ w_B·PSG(γ̄, σ/2) ⊕ w_C·PSG(max(q, γ̄), σ/2), or PSG(q, σ) alone when no
    neighbour is ever truncated.

    Args:
        step: the step (checked by :func:`check_truncated_step`); σ is the noise std divided by
            the clipping norm C.
        direction: ``"remove"`` (P has the differing record) or ``"add"``.
    """
    q, sigma = step.sample_rate, step.event.noise_multiplier
    w_a, w_b, w_c, gamma = truncation_weights(sample_rate=q, dataset_size=step.dataset_size,
                                              max_batch_size=step.max_batch_size)
    base = _psg(q, sigma, direction)
    if w_a == 1.0:
        return base
    weights, pairs = [w_a], [base]
    if w_b > 0.0:
        weights.append(w_b)
        pairs.append(_psg(gamma, sigma / 2.0, direction))
    if w_c > 0.0:
        weights.append(w_c)
        pairs.append(_psg(max(q, gamma), sigma / 2.0, direction))
    return MixtureLoss(tuple(weights), tuple(pairs))


def truncated_spread(step: TruncatedPoissonSampledEvent) -> float:
    """Rough std of one step's privacy loss (pld's first grid step): the branches' spreads
    mixed by their weights (the Poisson-sampled Gaussian's q·√(e^{1/s²} − 1), capped at 1/s)."""
    q, sigma = step.sample_rate, step.event.noise_multiplier
    w_a, w_b, w_c, gamma = truncation_weights(sample_rate=q, dataset_size=step.dataset_size,
                                              max_batch_size=step.max_batch_size)

    def spread(rate, s):
        return min(1.0 / s, rate * math.sqrt(math.expm1(min(1.0 / s ** 2, 700.0))))

    var = w_a * spread(q, sigma) ** 2 + (w_b + w_c) * spread(max(q, gamma), sigma / 2.0) ** 2
    return math.sqrt(var)


def check_truncated_step(event: Event, neighboring: str) -> None:
    """pld's check of a truncated-Poisson step: add/remove adjacency, a Gaussian on the batch.

    Raises:
        UnsupportedEventError: replace-one adjacency (no proof) or another sampled mechanism.
    """
    if neighboring != "add-remove":
        raise UnsupportedEventError(f"pld: {TRUNCATED_REPLACE_REASON}")
    if not isinstance(event.event, GaussianEvent):
        raise UnsupportedEventError(
            "pld: truncated Poisson sampling is accounted for the Gaussian mechanism only, "
            f"got a sampled {type(event.event).__name__}")
