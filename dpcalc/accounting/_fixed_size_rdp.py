r"""Rényi-DP of the Gaussian mechanism (one DP-SGD step) on fixed-size batches under
**add/remove** adjacency: without replacement (FSwoR) and with replacement (FSwR), after
Birrell, Ebrahimi, Behnia, Pacheco, "Differentially Private Stochastic Gradient Descent with
Fixed-Size Minibatches: Tighter RDP Guarantees with or without Replacement", NeurIPS 2024
(arXiv:2408.10456; docs/references.md; docs/design.md §3, glossary "sampler"; issue 12).

Units: σ is the noise standard deviation divided by the clipping norm C (one record's
contribution bound, the add/remove sensitivity); B the batch size, N the dataset size the
user states. Two neighbours differ in one record x: D and D′ = D ∪ {x}, |D′| = L. The
user's dataset is either of the two, so L ∈ {N, N + 1}; every bound below is taken at the
worse of the two (FSwoR: q = B/L is largest at L = N; FSwR: both are computed, the larger
kept).

**FSwoR, add/remove** (Birrell et al. Thm 3.1 at integer α, Thm 3.3 — a Taylor expansion
with remainder — at real α; the same quantity). Couple the two samplers: the batch of D′ is
the batch S of D, except that with probability q = B/L one uniformly random member y_j of S
is replaced by x. The noisy sums are E_S[N(s_S, σ²)] and
E_{S,j}[(1−q)N(s_S, σ²) + qN(s_S − y_j + x, σ²)], a shift of norm ≤ 2C. By the joint
convexity of e^{(α−1)D_α} each (S, j) pair is bounded by the Poisson-sampled Gaussian at rate
q and shift 2 (noise multiplier σ/2), in both orders (Mironov, Talwar, Zhang 2019 Thm 5: the
base ‖ mixture order is the smaller one):

    ε(α) ≤ ε_Poisson(α; q = B/N, σ/2) = log Σ_k C(α,k)(1−q)^{α−k} q^k e^{2k(k−1)/σ²} / (α−1)   (integer α),

evaluated by :func:`dpcalc.accounting.sampled_gaussian_rdp.log_a_sampled_gaussian` (integer orders exactly,
fractional orders by its certified two-series bound), capped by the unsampled replace-one
2α/σ² (each coupled pair is a replace-one pair or identical). The bound is attained: with
x = +C·e and every other record −C·e the pair is exactly (1−q)N(0) + qN(2C) vs N(0) at
q = B/L. ε_Poisson is non-decreasing in q (E[(1 + q(L−1))^α] is convex in q with zero slope
at q = 0), so q = B/N covers both neighbours.

**FSwR, add/remove** (Birrell et al. Thm 3.6; lower bound Thm 3.7). Each of the B draws from
D′ is x with probability p = 1/L, else a uniform draw from D (the draws of D): the number of
copies of x is n ~ Bin(B, p) with weights a_n, and n copies shift the sum by ≤ 2nC. So
P/Q = a_0 + Σ_{n≥1} a_n L_n, L_n the likelihood ratio of a Gaussian mixture with shifts of
norm ≤ 2n. For K ≤ B let S_K = a_1 + … + a_K and q̃ ≥ S_K/(a_0 + S_K) (any such q̃; the
leftover a_0 − S_K(1/q̃ − 1) ≥ 0 is a point mass at ratio 1). Then P/Q is the convex
combination Σ_{n≤K} (a_n/q̃)·[(1−q̃) + q̃L_n] + r·1 + Σ_{n>K} a_n L_n, and convexity of t^α
gives

    e^{(α−1)ε(α)} ≤ 1 + Σ_{n=1}^{K} min{(a_n/q̃)(A_n − 1), a_n(e^{c_n} − 1)}
                      + Σ_{n=K+1}^{B} a_n·(e^{c_n} − 1),      c_n = 2α(α−1)n²/σ²,

A_n = e^{(α−1)ε_Poisson(α; q̃, σ/(2n))} (the sampled Gaussian with shift 2n), the second
branch of each min from A_n ≤ 1 − q̃ + q̃e^{c_n} (convexity; e^{c_n} is the unsampled
Gaussian's moment at shift 2n) — Birrell et al.'s code bounds that branch by
(a_n/q̃)(e^{c_n} − 1), 1/q̃ times more. The
same sum bounds the other order: t^{1−α} is convex too, E_Q[((1−q̃)+q̃L)^{1−α}] is the
base ‖ mixture order of the sampled Gaussian (≤ A_n, Mironov, Talwar, Zhang 2019 Thm 5) and
E_Q[L_v^{1−α}] = e^{α(α−1)‖v‖²/(2σ²)}. This is the bound of Birrell et al. Thm 3.6 (their
FSwR_RDP_ar), with A_n evaluated exactly at integer orders instead of by their Taylor
expansion; dpcalc uses K = min(B, 4) (beyond, the weights a_n ≈ (B/N)^n/n! are negligible
against a_1). Every order is also capped by 2αB²/σ² (x drawn B times: shift ≤ 2BC).

The sampled mechanism's RDP grows fast with α here: the event "x drawn n times" has
probability ≈ (B/N)^n/n! but a Rényi divergence e^{2α(α−1)n²/σ²}, so for large B only orders
close to 1 stay finite and ε is much larger than under sampling without replacement. That is
not slack of the bound: at integer α the exact divergence of the explicit pair (x = +C·e,
all others −C·e) is E[exp((4/σ²)Σ_{i<j} n_i n_j)] over iid n_i ~ Bin(B, p) (Birrell et al.
Thm 3.7), and by Cauchy–Schwarz (⟨v_i, v_j⟩ ≤ ‖v_i‖‖v_j‖) it is also the largest divergence
in the mixture ‖ base order (tests/accounting/test_fixed_size_rdp.py checks the bound above
against it).

Replace-one adjacency for FSwR is not proven by Birrell et al. and is refused
(dpcalc/accounting/_sampling.py). pld accounts for both samplers under add/remove with the
same dominating pairs (dpcalc/accounting/_sampling_pld.py; issue 32).
"""

from __future__ import annotations

import math

import numpy as np

from dpcalc import _validate as v
from dpcalc._numerics import UNIT_ROUNDOFF, log_binomial_pmf, log_expm1, logsumexp
from dpcalc.accounting.sampled_gaussian_rdp import log_a_sampled_gaussian, rdp_sampled_gaussian
from dpcalc.errors import ParameterError

__all__ = ["rdp_fswor_add_remove_gaussian", "rdp_fswr_add_remove_gaussian", "FSWR_DIRECT_TERMS",
           "fixed_size_arguments"]

def fixed_size_arguments(batch_size, dataset_size, noise_multiplier, orders) -> tuple[int, int, float, np.ndarray]:
    """(B, N, σ, orders as a float array of shape (m,)) checked for a fixed-size sampled Gaussian step:
    B and N whole with 1 ≤ B ≤ N, σ > 0, every order finite and > 1 (at least one).

    Raises:
        ParameterError: naming the first argument out of range.
    """
    n = v.count("dataset_size", dataset_size, minimum=1)
    b = v.count("batch_size", batch_size, minimum=1)
    if b > n:
        raise ParameterError("batch_size", f"at most dataset_size ({n})", b)
    sigma = v.positive("noise_multiplier", noise_multiplier)
    a = np.asarray(orders, dtype=float).reshape(-1)
    if a.size == 0 or not np.all(np.isfinite(a)) or not np.all(a > 1.0):
        raise ParameterError("orders", "finite and > 1", a)
    return b, n, sigma, a


#: K of Birrell et al. Thm 3.6: the multiplicities n ≤ K bounded by the sampled Gaussian at q̃
FSWR_DIRECT_TERMS = 4


def rdp_fswor_add_remove_gaussian(*, batch_size: int, dataset_size: int, noise_multiplier: float,
                                  orders, warnings: list | None = None) -> np.ndarray:
    r"""RDP of one step of the Gaussian mechanism on a uniformly random batch of exactly B of
    the N records (without replacement), **add/remove** adjacency (Birrell, Ebrahimi, Behnia,
    Pacheco 2024, Thm 3.1 / Thm 3.3; module docstring).

    ε(α) = ε_Poisson(α; q = B/N, σ/2): the Poisson-sampled Gaussian RDP at rate B/N with a
    shift of 2C (one batch member replaced by the added record), both orders, capped at 2α/σ².

    Args:
        batch_size: B, whole, in [1, N].
        dataset_size: N, whole, ≥ 1 (the neighbours have N − 1 or N + 1 records; q = B/N is the
            larger of the two rates B/L).
        noise_multiplier: σ, noise std divided by the clipping norm C; > 0.
        orders: Rényi orders α > 1, shape (m,).
        warnings: optional list collecting messages of the Poisson RDP series.

    Returns:
        ε(α), shape (m,): an upper bound (rounded up by the Poisson RDP evaluation).

    Raises:
        ParameterError: B, N, σ or an order out of range.
    """
    b, n, sigma, a = fixed_size_arguments(batch_size, dataset_size, noise_multiplier, orders)
    # rdp_sampled_gaussian caps at α/(2(σ/2)²) = 2α/σ², the unsampled replace-one Gaussian
    return rdp_sampled_gaussian(sample_rate=b / n, noise_multiplier=sigma / 2.0, orders=a, warnings=warnings)


def _fswr_log_moment(b: int, larger: int, sigma: float, a: np.ndarray, k_direct: int) -> np.ndarray:
    """Upper bound on log E_Q[(P/Q)^α] (= (α−1)ε(α)) of Birrell et al. Thm 3.6 for the pair
    (D, D′) with |D′| = ``larger`` (draw probability p = 1/larger), and an error budget:
    returns (log_moment, eta) with eta a bound on its absolute floating-point error."""
    p = 1.0 / larger
    log_p, log_1mp = math.log(p), math.log1p(-p)
    ns = np.arange(b + 1, dtype=float)
    log_an, err = log_binomial_pmf(ns, b, log_p, log_1mp)
    log_an_up = log_an + err  # each weight rounded up
    k = min(b, k_direct)
    # q̃ ≥ S_K/(a_0 + S_K) = 1/(1 + a_0/S_K): a_0 rounded down, S_K up, then 1e-13 relative margin
    log_sk = float(logsumexp(log_an_up[1:k + 1])) + 8 * UNIT_ROUNDOFF * (1.0 + abs(float(log_an_up[1])))
    log_qt = min(0.0, -math.log1p(math.exp(float(log_an[0] - err) - log_sk)) + 1e-13)
    qt = math.exp(log_qt)
    am1 = a - 1.0
    # c_n = 2α(α−1)n²/σ², the unsampled Gaussian's log E[L^α] at shift 2n; rounded up
    c = (2.0 * a[:, None] * am1[:, None] * ns[None, 1:] ** 2 / sigma ** 2) * (1.0 + 8 * UNIT_ROUNDOFF)
    worst = log_expm1(c)  # log(e^{c_n} − 1), shape (m, B)
    terms = log_an_up[None, 1:] + worst
    # the sampled-Gaussian branch is only worth evaluating at orders where the unsampled branch
    # of the n ≤ K terms is not already negligible (< e^{-40}) against the n > K terms
    tail = logsumexp(terms[:, k:], axis=1) if k < b else np.full_like(a, -np.inf)
    need = logsumexp(terms[:, :k], axis=1) > tail - 40.0
    for j in range(1, k + 1):
        if qt >= 1.0 or not need.any():
            break  # q̃ = 1: the sampled Gaussian is the unsampled one (the worst-case branch)
        la = np.full_like(a, np.inf)
        la[need] = log_a_sampled_gaussian(sample_rate=qt, noise_multiplier=sigma / (2.0 * j), orders=a[need],
                                          warnings=[])
        # log A_n ≥ 0; an order whose series did not converge (+inf) keeps the unsampled branch
        direct = np.full_like(a, np.inf)
        ok = np.isfinite(la) & (la > 0.0)
        direct[ok] = log_an_up[j] - log_qt + log_expm1(la[ok])
        direct[np.isfinite(la) & (la <= 0.0)] = -np.inf
        terms[:, j - 1] = np.minimum(terms[:, j - 1], direct)
    s = logsumexp(terms, axis=1)
    log_moment = np.logaddexp(0.0, s)
    # error budget: each term's log carries ≤ 8u·|term| + err (+ the series' own rounding,
    # covered by 1e-13); logsumexp/logaddexp move the result by at most the largest of these
    eta = 8 * UNIT_ROUNDOFF * np.max(np.abs(np.where(np.isfinite(terms), terms, 0.0)), axis=1) + err + 1e-13
    return log_moment, eta


def rdp_fswr_add_remove_gaussian(*, batch_size: int, dataset_size: int, noise_multiplier: float, orders,
                                 direct_terms: int = FSWR_DIRECT_TERMS) -> np.ndarray:
    r"""RDP of one step of the Gaussian mechanism on a batch of B independent uniform draws
    from the N records (fixed size, with replacement), **add/remove** adjacency (Birrell,
    Ebrahimi, Behnia, Pacheco 2024, Thm 3.6; module docstring).

    Args:
        batch_size: B, whole, in [1, N].
        dataset_size: N, whole, ≥ 1; the pair with |D′| = N and the one with |D′| = N + 1 are
            both bounded and the larger value kept (|D′| = N only when N ≥ 2).
        noise_multiplier: σ, noise std divided by the clipping norm C; > 0.
        orders: Rényi orders α > 1 (integer or not: the bound holds for every real α > 1),
            shape (m,).
        direct_terms: K of Thm 3.6 (multiplicities n ≤ K bounded through the sampled Gaussian
            at q̃, the others by the unsampled Gaussian), ≥ 1.

    Returns:
        ε(α), shape (m,): an upper bound, rounded up past its floating-point error, ≤ 2αB²/σ².
        Large for large B unless α is close to 1 (module docstring).

    Raises:
        ParameterError: B, N, σ, an order or ``direct_terms`` out of range.
    """
    b, n, sigma, a = fixed_size_arguments(batch_size, dataset_size, noise_multiplier, orders)
    k = v.count("direct_terms", direct_terms, minimum=1)
    best = np.full_like(a, -np.inf)
    for larger in (n, n + 1):
        if larger < 2:
            continue  # D = D′ \ {x} would be empty: no batch to draw
        log_m, eta = _fswr_log_moment(b, larger, sigma, a, k)
        # relative error of L = log(1 + S) ≤ 1.5·η·min(1, 1/L) (S ≤ 1: log1p keeps S's relative
        # error e^η − 1; S > 1: absolute η over L ≥ log 2); 64u more for the division
        rel = 1.5 * eta * np.minimum(1.0, 1.0 / np.maximum(log_m, 1e-300))
        eps = log_m / (a - 1.0) * (1.0 + rel + 64 * UNIT_ROUNDOFF)
        best = np.maximum(best, eps)
    cap = 2.0 * a * b * b / sigma ** 2 * (1.0 + 4 * UNIT_ROUNDOFF)
    return np.maximum(np.minimum(best, cap), 0.0)
