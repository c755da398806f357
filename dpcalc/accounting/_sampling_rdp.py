r"""Rényi-DP of the Gaussian mechanism under the batch samplers other than Poisson
(docs/design.md §3, glossary "sampler"; issue 12).

* **Fixed-size sampling without replacement** (a uniformly random batch of exactly B of the
  N records each step, γ = B/N), **replace-one adjacency**: the general upper bound of
  Wang, Balle, Kasiviswanathan 2019 ("Subsampled Rényi differential privacy and analytical
  moments accountant", AISTATS), Theorem 9, for integer α ≥ 2,

      ε′(α) ≤ 1/(α−1)·log(1 + γ²·C(α,2)·min{4(e^{ε(2)}−1), e^{ε(2)}·min{2, (e^{ε(∞)}−1)²}}
                         + Σ_{j=3}^{α} γ^j·C(α,j)·e^{(j−1)ε(j)}·min{2, (e^{ε(∞)}−1)^j}),

  with ε(j) the RDP of the Gaussian on the batch under replace-one: a record's contribution
  has norm ≤ C, so replacing it moves the sum by ≤ 2C and ε(j) = j·2²/(2σ²) = 2j/σ²
  (ε(∞) = ∞, so the min{2, ·} are 2). Non-integer α: Corollary 10 of the same paper (the
  cumulant (α−1)ε′(α) is convex in α; linear interpolation between ⌊α⌋ and ⌈α⌉ bounds it).
  Every order is also capped by the unsubsampled 2α/σ² (quasi-convexity of the Rényi
  divergence: each batch pair is a replace-one pair or identical). dp_accounting's
  ``SampledWithoutReplacementDpEvent`` implements the same theorem (with its Theorem 27
  refinement for α ≤ 256, so its numbers are ≤ these; tests/accounting/test_sampling.py); its
  noise multiplier is relative to the replace-one sensitivity, i.e. dp_accounting at σ/2 is
  dpcalc at σ.

* **Truncated Poisson sampling** (each record joins with probability q, at most B_max kept,
  a uniformly random B_max when more joined), **add/remove adjacency**: the decomposition
  of the analysis dp_accounting ships for ``TruncatedSubsampledGaussianDpEvent`` (its
  docstring cites arXiv:2508.15089; ``from_truncated_subsampled_gaussian_mechanism``).
  Fix the differing record x and let K be the number of the *other* M records that join
  (K ~ Bin(M, q), the same law under both datasets):

  - K ≤ B_max − 1 (probability 1 − p, p = P[K ≥ B_max]): no truncation with or without x:
    the Poisson-sampled Gaussian (Mironov, Talwar, Zhang 2019 §3.3), rate q, noise σ.
  - K ≥ B_max (probability p): without x the batch is a uniformly random B_max-subset S of
    the others (exchangeability); with x it is, with probability γ = P[x kept | K ≥ B_max]
    = B_max·P[Bin(M+1, q) ≥ B_max+1]/((M+1)·p), x plus a uniformly random (B_max−1)-subset,
    else a uniformly random B_max-subset. Couple the two by S and a uniformly random j ∈ S:
    the outputs are E_S[(1−γ)N(s_S, σ²) + γN(s_S − y_j + x, σ²)] against E_S[N(s_S, σ²)],
    a shift of norm ≤ 2C. By joint convexity of e^{(α−1)D_α} each pair is bounded by the
    Poisson-sampled Gaussian at rate γ and noise σ/2 (shift 2 in units of σ), in both
    orders (Mironov, Talwar, Zhang 2019 Thm 5: the add order is the smaller one).

  Revealing the branch (its probability does not depend on x) only adds information, and
  E_Q[(P/Q)^α] of a branch-revealing mixture is the weighted sum, so

      e^{(α−1)ε′(α)} ≤ (1−p)·e^{(α−1)ε_P(α; q, σ)} + p·e^{(α−1)ε_P(α; γ, σ/2)}.

  dp_accounting bounds the second branch by the symmetric replace-one pair at σ/2 instead
  ("slightly loose", its comment); the one-sided pair above is the coupling made explicit.
  M is taken as both N − 1 and N (the neighbour with one more record) and the larger curve
  kept, so the bound holds whichever of the two neighbours has x.

* **Fixed-size sampling under add/remove adjacency**, without replacement and with
  replacement: Birrell, Ebrahimi, Behnia, Pacheco 2024 (NeurIPS), in
  dpcalc/accounting/_fixed_size_rdp.py; :func:`rdp_sampler_step` dispatches on the adjacency.

Nothing here imports scipy.stats (the binomial tails come from :func:`scipy.special.betainc`).
"""

from __future__ import annotations

import math

import numpy as np

from dpcalc import _validate as v
from dpcalc._numerics import log_factorials, round_up
from dpcalc.accounting._fixed_size_rdp import (
    fixed_size_arguments,
    rdp_fswor_add_remove_gaussian,
    rdp_fswr_add_remove_gaussian,
)
from dpcalc.accounting.sampled_gaussian_rdp import rdp_sampled_gaussian
from dpcalc.events import FixedSizeSampledEvent

__all__ = ["rdp_without_replacement_gaussian", "rdp_truncated_poisson_gaussian", "rdp_sampler_step",
           "truncation_branch", "TAIL_REL_ERROR"]

#: relative allowance on the binomial tails of :func:`truncation_branch` (betainc's measured error
#: is ≤ 5.4e-12 for up to 1e12 records: a factor ~2000 of room)
TAIL_REL_ERROR = 1e-8


def _log_binom(n: int, k: np.ndarray) -> np.ndarray:
    lf = log_factorials(n)
    return lf[n] - lf[k] - lf[n - k]


def _wbk_log_moment_int(gamma: float, eps: callable, alpha: int) -> float:
    """log of the bracket of WBK 2019 Thm 9 at integer α ≥ 2 (i.e. (α−1)·ε′(α)); ``eps(j)`` is
    the base mechanism's RDP at order j (arrays allowed), with ε(∞) = ∞."""
    log_g = math.log(gamma)
    e2 = float(eps(2.0))
    # j = 2: γ²·C(α,2)·min{4(e^{ε(2)} − 1), 2·e^{ε(2)}}
    log_e2m1 = math.log(math.expm1(e2)) if e2 <= 1.0 else e2 + math.log(-math.expm1(-e2))
    terms = [2.0 * log_g + float(_log_binom(alpha, np.array([2]))[0])
             + min(math.log(4.0) + log_e2m1, math.log(2.0) + e2)]
    if alpha >= 3:
        j = np.arange(3, alpha + 1)
        terms_j = (j * log_g + _log_binom(alpha, j) + (j - 1) * eps(j.astype(float)) + math.log(2.0))
        terms.extend(terms_j.tolist())
    t = np.array(terms)
    m = float(t.max())
    if m < 0.0:  # log(1 + Σ): log1p keeps the relative accuracy of a small sum
        return math.log1p(float(np.exp(t).sum()))
    return m + math.log(math.exp(-m) + float(np.exp(t - m).sum()))


def rdp_without_replacement_gaussian(*, batch_size: int, dataset_size: int, noise_multiplier: float,
                                     orders) -> np.ndarray:
    r"""RDP of one step of the Gaussian mechanism on a fixed-size batch drawn without
    replacement, replace-one adjacency (Wang, Balle, Kasiviswanathan 2019, Thm 9 and Cor. 10;
    module docstring).

    Args:
        batch_size: B, whole, in [1, N].
        dataset_size: N, whole, ≥ 1.
        noise_multiplier: σ, noise std divided by the clipping norm C (one record's contribution
            bound; replace-one sensitivity 2C); > 0.
        orders: Rényi orders α > 1, shape (m,).

    Returns:
        ε′(α), shape (m,): an upper bound, ≤ the unsubsampled 2α/σ², rounded up.

    Raises:
        ParameterError: B, N, σ or an order out of range.
    """
    b, n, sigma, a = fixed_size_arguments(batch_size, dataset_size, noise_multiplier, orders)
    gamma = b / n
    full = a * 2.0 / sigma ** 2  # the Gaussian under replace-one (sensitivity 2)
    if gamma == 1.0:
        return full

    def eps(j):
        return 2.0 * np.asarray(j, dtype=float) / sigma ** 2

    cache: dict[int, float] = {1: 0.0}

    def cgf(k: int) -> float:
        if k not in cache:
            cache[k] = _wbk_log_moment_int(gamma, eps, k)
        return cache[k]

    out = np.empty_like(a)
    for i, alpha in enumerate(a):
        lo, hi = math.floor(alpha), math.ceil(alpha)
        if lo == hi:
            c = cgf(int(lo))
        else:  # Cor. 10: (α−1)ε′(α) is convex in α
            t = alpha - lo
            c = (1.0 - t) * cgf(int(lo)) + t * cgf(int(hi))
        out[i] = c / (alpha - 1.0)
    # round-off: each term's log carries a few ulps of its magnitude (≤ ~10³ here); 10⁴ ulps
    # (2.2e-12 relative) covers it with room
    return np.minimum(round_up(np.maximum(out, 0.0), 1e4), full)


def truncation_branch(*, sample_rate: float, others: int, max_batch_size: int) -> tuple[float, float]:
    """(p, γ): p = P[Bin(M, q) ≥ B_max], the probability that the other M records alone fill
    the cap, and γ = P[the differing record is kept | that], for truncated Poisson sampling
    (module docstring). γ is rounded up (3e-8 relative, covering the tails' error) and capped at
    1; p is as computed (callers widen it both ways by :data:`TAIL_REL_ERROR`).

    The tails are the regularised incomplete beta function I_q(B, M − B + 1)
    (scipy.special.betainc, Boost's ibeta: within 5.4e-12 relative of mpmath for M ≤ 1e12,
    tests/accounting/test_truncated_pld.py). scipy.special.bdtrc is not used: its relative error
    reaches 2e-7 at M = 1e8 and 0.2% at 1e9, and its integer argument overflows beyond 2³¹ (at
    M = 1e10, q = 1e-8, B_max = 90 it returned 1.6e-41 for 0.854).

    Args:
        sample_rate: q in (0, 1].
        others: M, the number of records other than the differing one, ≥ 0.
        max_batch_size: B_max ≥ 1.
    """
    from scipy.special import betainc  # P[Bin(n, q) ≥ k] = I_q(k, n − k + 1)

    q = v.half_open_unit("sample_rate", sample_rate)
    m = v.count("others", others, minimum=0)
    bmax = v.count("max_batch_size", max_batch_size, minimum=1)
    if m < bmax:
        return 0.0, 0.0
    p = float(betainc(bmax, m - bmax + 1, q))
    if not p > 0.0:
        return 0.0, 0.0
    kept = float(betainc(bmax + 1, m - bmax + 1, q)) * bmax / (m + 1)
    gamma = min(1.0, kept / p * (1.0 + 3.0 * TAIL_REL_ERROR))  # each tail within TAIL_REL_ERROR
    return p, gamma


def rdp_truncated_poisson_gaussian(*, sample_rate: float, dataset_size: int, max_batch_size: int,
                                   noise_multiplier: float, orders, warnings: list | None = None) -> np.ndarray:
    r"""RDP of one step of the Gaussian mechanism on a truncated Poisson sample, add/remove
    adjacency (module docstring: the branch decomposition of dp_accounting's truncated
    subsampled Gaussian, each branch bounded by the Poisson-sampled Gaussian RDP of Mironov,
    Talwar, Zhang 2019).

    Args:
        sample_rate: q in (0, 1].
        dataset_size: N ≥ 1 (the neighbours considered have N − 1 … N + 1 records).
        max_batch_size: B_max ≥ 1.
        noise_multiplier: σ (noise std / clipping norm), > 0.
        orders: Rényi orders α > 1, shape (m,).
        warnings: optional list collecting messages of the Poisson RDP series.

    Returns:
        ε′(α), shape (m,), an upper bound.

    Raises:
        ParameterError: a parameter out of range.
    """
    q = v.half_open_unit("sample_rate", sample_rate)
    n = v.count("dataset_size", dataset_size, minimum=1)
    bmax = v.count("max_batch_size", max_batch_size, minimum=1)
    sigma = v.positive("noise_multiplier", noise_multiplier)
    a = np.asarray(orders, dtype=float).reshape(-1)
    base = rdp_sampled_gaussian(sample_rate=q, noise_multiplier=sigma, orders=a, warnings=warnings)
    out = base
    for m in {max(n - 1, 0), n}:
        p, gamma = truncation_branch(sample_rate=q, others=m, max_batch_size=bmax)
        if p == 0.0:
            continue
        branch = rdp_sampled_gaussian(sample_rate=gamma, noise_multiplier=sigma / 2.0, orders=a,
                                      warnings=warnings)
        # log((1−p)e^x + p·e^y) = x + log1p(p·expm1(y − x)); p widened (TAIL_REL_ERROR relative,
        # past betainc's error) in the direction that increases it
        x, y = (a - 1.0) * base, (a - 1.0) * branch
        with np.errstate(over="ignore"):
            p_side = np.where(y >= x, min(1.0, p * (1.0 + TAIL_REL_ERROR)), p * (1.0 - TAIL_REL_ERROR))
            log_mix = np.where(y - x > 700.0, y + np.log(p_side) + np.log1p((1.0 - p_side) * np.exp(
                np.minimum(x - y, 0.0)) / p_side), x + np.log1p(p_side * np.expm1(np.minimum(y - x, 700.0))))
        out = np.maximum(out, round_up(log_mix / (a - 1.0), 64))
    return np.maximum(out, 0.0)


def rdp_sampler_step(event, orders, warnings: list | None = None, neighboring: str = "replace") -> np.ndarray:
    """RDP of one checked sampler step of a Gaussian (reached from the dispatch of :mod:`dpcalc.accounting.rdp`)
    (``check_rdp_sampler`` in dpcalc/accounting/_sampling.py has refused the unproven pairs):

    * :class:`~dpcalc.events.FixedSizeSampledEvent` without replacement: replace-one → Wang,
      Balle, Kasiviswanathan 2019 Thm 9 (:func:`rdp_without_replacement_gaussian`); add/remove →
      Birrell, Ebrahimi, Behnia, Pacheco 2024 Thm 3.1/3.3
      (:func:`dpcalc.accounting._fixed_size_rdp.rdp_fswor_add_remove_gaussian`);
    * with replacement, add/remove → Birrell et al. 2024 Thm 3.6
      (:func:`dpcalc.accounting._fixed_size_rdp.rdp_fswr_add_remove_gaussian`);
    * :class:`~dpcalc.events.TruncatedPoissonSampledEvent`, add/remove →
      :func:`rdp_truncated_poisson_gaussian`.

    Args:
        event: the step.
        orders: Rényi orders α > 1, shape (m,).
        warnings: optional list collecting messages of the Poisson RDP series.
        neighboring: ``"replace"`` or ``"add-remove"``, the accountant's adjacency.
    """
    sigma = event.event.noise_multiplier
    if isinstance(event, FixedSizeSampledEvent):
        size = {"batch_size": event.batch_size, "dataset_size": event.dataset_size, "noise_multiplier": sigma,
                "orders": orders}
        if event.replacement:
            if neighboring != "add-remove":  # pragma: no cover - check_rdp_sampler refuses it first
                raise ValueError("with-replacement sampling is accounted under add/remove adjacency only")
            return rdp_fswr_add_remove_gaussian(**size)
        if neighboring == "add-remove":
            return rdp_fswor_add_remove_gaussian(**size, warnings=warnings)
        return rdp_without_replacement_gaussian(**size)
    return rdp_truncated_poisson_gaussian(sample_rate=event.sample_rate, dataset_size=event.dataset_size,
                                          max_batch_size=event.max_batch_size, noise_multiplier=sigma,
                                          orders=orders, warnings=warnings)
