r"""PATE aggregators (Private Aggregation of Teacher Ensembles): per-query privacy formulas,
vectorised over queries × Rényi orders.

Setting and adjacency. n teachers, trained on disjoint partitions of the private data, each
vote for one of m classes; a query's vote histogram is (n_1, …, n_m), Σ n_j = n. Adding or
removing one record changes one partition, hence at most one teacher's vote: one count goes
down by one and another up by one. So the histogram has L1 sensitivity 2 and L2 sensitivity
√2 (Papernot et al. 2017 §3.1; Papernot et al. 2018 §4.1). All noise parameters here are
absolute (in votes), not relative to a sensitivity.

Aggregators (i* = argmax_j n_j, the plurality; ties: the first):

* **LNMax** (2017 §3.1): argmax_j n_j + Lap(b). Pure ε₀ = 2/b per query: it is a
  post-processing of the histogram released with Laplace noise of scale b per count, whose
  L1 sensitivity is 2 (Dwork & Roth 2014 Thm 3.6). The 2017 paper writes γ = 1/b, so
  ε₀ = 2γ ("(2γ, 0)-DP", 2017 §3.1 / Thm 3).
* **GNMax** (2018 §4.1): argmax_j n_j + N(0, σ²). Data-independent RDP λ/σ² at every order
  λ > 1 (2018 Prop 8: the Gaussian mechanism with L2 sensitivity √2, Mironov 2017 Prop 7).
* **Threshold check** of Confident-GNMax (2018 Alg 1): releases whether
  max_j n_j + N(0, σ₁²) ≥ T. The max count has sensitivity 1, so its data-independent RDP is
  λ/(2σ₁²).

Data-dependent bounds (for the actual votes; each is used only where its conditions hold,
otherwise the data-independent bound stands; the caller takes the minimum per order):

* q̃ ≥ Pr[answer ≠ i*]:
  LNMax (2017 Thm 3's q, via the union bound and the exact tail of a difference of two
  Laplace variables): q̃ = Σ_{j≠i*} (2 + Δ_j/b)/(4 e^{Δ_j/b}), Δ_j = n_{i*} − n_j;
  GNMax (2018 Prop 7): q̃ = Σ_{j≠i*} Φ(−Δ_j/(√2σ)) = ½ Σ erfc(Δ_j/(2σ));
  both capped at 1 − 1/m (the plurality is the likeliest answer, so Pr[answer = i*] ≥ 1/m).
  Threshold check: q̃ = min(p, 1 − p), p = Pr[answered] = Φ((max_j n_j − T)/σ₁) (exact).
* LNMax, 2017 Thm 3 (a bound on the log-moment α(l) of the moments accountant; RDP of order
  λ = l + 1 is α(l)/l): for q̃ < (e^{2γ} − 1)/(e^{4γ} − 1) = 1/(e^{ε₀} + 1),

  .. math:: α(l) ≤ \log\big((1−q̃)\,((1−q̃)/(1 − e^{ε₀} q̃))^{l} + q̃\,e^{ε₀ l}\big).

* Gaussian-noise mechanisms (GNMax; the threshold check with s = √2σ₁), 2018 Thm 6 with
  the higher orders of Prop 10: a mechanism that is (μ, μ/s²)-RDP for every μ. With
  μ₂ = s·√(ln(1/q̃)), μ₁ = μ₂ + 1, ε_i = μ_i/s², if μ₂ > 1, λ < μ₁ (the theorem asks λ ≤ μ₁;
  we keep the reference code's strict inequality), q̃·e^{ε₂} < 1 and
  q̃ ≤ e^{(μ₂−1)ε₂}/((μ₁/(μ₁−1))·(μ₂/(μ₂−1)))^{μ₂} (the range where the bound increases with q̃,
  so an upper bound on q may be used), then

  .. math:: ε(λ) ≤ \frac{1}{λ−1}\log\big((1−q̃)A^{λ−1} + q̃B^{λ−1}\big),\quad
     A = \frac{1−q̃}{1 − (q̃e^{ε₂})^{(μ₂−1)/μ₂}},\quad B = \frac{e^{ε₁}}{q̃^{1/(μ₁−1)}}.

Floating point: q̃ is computed in log space and moved up by a margin covering its evaluation
error (the bounds increase with q̃ where they apply, and the conditions are checked at the
moved value); every returned RDP value is moved up by a margin covering its own evaluation
(``_ERR``, relative to the magnitudes of the logs it is made of). Nothing is rounded down.

Sources: Papernot, Abadi, Erlingsson, Goodfellow, Talwar 2017 ("Semi-supervised knowledge
transfer for deep learning from private training data", ICLR) §3, Thm 3; Papernot, Song,
Mironov, Raghunathan, Talwar, Erlingsson 2018 ("Scalable private learning with PATE", ICLR)
§4, Thm 6, Prop 7, 8, 10, Alg 1. docs/design.md §4 states the parameterisation.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from dpcalc import _validate as v
from dpcalc._numerics import UNIT_ROUNDOFF, log_ndtr, logsumexp
from dpcalc.errors import ParameterError
from dpcalc.events import PateVotesEvent
from dpcalc.mechanisms.conversions import rdp_laplace as rdp_laplace_shift
from dpcalc.mechanisms.conversions import rdp_pure_dp as rdp_pure_rr

__all__ = [
    "SOURCE_2017",
    "SOURCE_2018",
    "lnmax_epsilon",
    "gaps",
    "log_q_lnmax",
    "log_q_gnmax",
    "log_pr_answered",
    "log_q_threshold",
    "rdp_gnmax_independent",
    "rdp_threshold_independent",
    "rdp_lnmax_independent",
    "rdp_pure_rr",
    "rdp_laplace_shift",
    "Thm6",
    "Thm3",
    "kernel",
    "kernel_sum",
    "read_votes_file",
    "pate_votes_event",
    "MAX_VOTES_BYTES",
]

SOURCE_2017 = "Papernot et al. 2017 (PATE) §3, Thm 3"
SOURCE_2018 = "Papernot et al. 2018 (scalable PATE) Thm 6, Prop 7, 8, 10, Alg 1"

#: relative margin on log q̃ (≥ the ~3u error of log Φ / log of the Laplace tail plus the
#: logsumexp over ≤ m terms, m < 2^20)
_LOGQ_ERR = 256 * UNIT_ROUNDOFF
_U = UNIT_ROUNDOFF
#: error factor of one elementary operation (libm's log/exp/log1p/expm1 are within 1 ulp; we
#: allow 4 per step)
_K = 4.0 * _U


def lnmax_epsilon(scale: float) -> float:
    """ε₀ = 2/b of one LNMax query (one teacher's vote moves two counts by one: L1
    sensitivity 2; 2017 §3.1 with γ = 1/b), rounded up.

    Args:
        scale: b > 0, the Laplace scale in votes.

    Raises:
        ParameterError: b not a positive finite number.
    """
    b = v.positive("scale", scale)
    return (2.0 / b) * (1.0 + 2 * UNIT_ROUNDOFF)


def _votes(votes) -> np.ndarray:
    a = np.asarray(votes, dtype=float)
    if a.ndim == 1:
        a = a[None, :]
    if a.ndim != 2 or a.shape[1] < 1:
        raise ParameterError("votes", "a (queries, classes) array", a.shape)
    if a.size and not (np.all(np.isfinite(a)) and np.all(a >= 0)):
        raise ParameterError("votes", "non-negative finite counts", "a negative or non-finite count")
    return a


def gaps(votes) -> tuple[np.ndarray, np.ndarray]:
    """Gaps Δ_j = n_{i*} − n_j of each query to its plurality i* (the first maximum).

    Args:
        votes: counts, shape (k, m) (or (m,) for one query).

    Returns:
        ``(gaps, top)``: gaps of shape (k, m) with the plurality's own entry set to ``inf``
        (so that it drops out of every union bound), and the plurality index, shape (k,).
    """
    a = _votes(votes)
    top = np.argmax(a, axis=1)
    mx = a[np.arange(a.shape[0]), top]
    g = mx[:, None] - a
    g[np.arange(a.shape[0]), top] = np.inf
    return g, top


def _finish_logq(logq: np.ndarray, m: int) -> np.ndarray:
    """Move log q̃ up by its error margin and cap it at log(1 − 1/m) (−inf for m = 1).

    Margin: 256u·(1 + |log q̃|) for the terms (each within ~4u·(1 + |its log|) of its value) and
    8mu for the sum of ≤ m positive terms and its log."""
    out = logq + (_LOGQ_ERR * (1.0 + np.abs(logq)) + 8.0 * m * UNIT_ROUNDOFF)
    cap = math.log1p(-1.0 / m) if m > 1 else -math.inf
    return np.minimum(np.where(np.isfinite(logq), out, logq), cap)


def _log_union(votes, log_term) -> np.ndarray:
    """ln Σ_{j≠i*} e^{log_term(Δ_j)} per query, shape (k,), with its margin and cap
    (:func:`_finish_logq`); ``log_term`` maps an array of gaps ≥ 0 to the log of each tail term.

    Whole-number gaps up to 4·10⁶ (the usual case: vote counts) use a table of the terms over
    0…max gap, summed in linear space; rows whose sum underflows (every other class far behind)
    are redone in log space. Other gaps go through :func:`gaps` and a log-space sum."""
    a = _votes(votes)
    k, m = a.shape
    if m == 1:
        return np.full(k, -np.inf)
    top = np.argmax(a, axis=1)
    rows = np.arange(k)
    g = a[rows, top][:, None] - a
    gi = g.astype(np.int64)
    if k and np.array_equal(gi, g) and int(gi.max()) <= 4_000_000:
        log_table = log_term(np.arange(int(gi.max()) + 1, dtype=float))
        terms = np.exp(log_table)[gi]
        terms[rows, top] = 0.0
        s = terms.sum(axis=1)
        with np.errstate(divide="ignore"):
            lq = np.log(s)
        small = np.flatnonzero(s < 1e-280)
        if small.size:
            lt = log_table[gi[small]]
            lt[np.arange(small.size), top[small]] = -np.inf
            lq[small] = logsumexp(lt, axis=1)
        return _finish_logq(lq, m)
    gg, _ = gaps(a)
    finite = np.isfinite(gg)
    terms = np.full(gg.shape, -np.inf)
    uniq, inv = np.unique(gg[finite], return_inverse=True)
    terms[finite] = log_term(uniq)[inv.reshape(-1)]
    return _finish_logq(logsumexp(terms, axis=1), m)


def log_q_lnmax(votes, scale: float) -> np.ndarray:
    r"""log q̃ for LNMax: ln Σ_{j≠i*} (2 + Δ_j/b)/(4e^{Δ_j/b}), capped at ln(1 − 1/m) (2017 §3.3,
    the bound inside Thm 3's analysis; Pr[Lap(b) − Lap(b) ≥ Δ] = (2 + Δ/b)/(4e^{Δ/b}) exactly).

    Args:
        votes: counts, shape (k, m).
        scale: b > 0 (votes).

    Returns:
        log q̃, shape (k,), moved up by its error margin (−inf when m = 1).
    """
    b = v.positive("scale", scale)
    return _log_union(votes, lambda d: np.log((2.0 + d / b) / 4.0) - d / b)


def log_q_gnmax(votes, sigma: float) -> np.ndarray:
    r"""log q̃ for GNMax: ln Σ_{j≠i*} Φ(−Δ_j/(√2σ)), capped at ln(1 − 1/m) (2018 Prop 7).

    Args:
        votes: counts, shape (k, m).
        sigma: σ > 0 (votes).

    Returns:
        log q̃, shape (k,), moved up by its error margin (−inf when m = 1).
    """
    s = v.positive("sigma", sigma)
    return _log_union(votes, lambda d: log_ndtr(-d / (math.sqrt(2.0) * s)))


def log_pr_answered(votes, threshold: float, sigma1: float) -> tuple[np.ndarray, np.ndarray]:
    r"""(ln p, ln(1 − p)) with p = Pr[max_j n_j + N(0, σ₁²) ≥ T] = Φ((max_j n_j − T)/σ₁)
    (2018 Alg 1, step 1), shape (k,) each (nearest values; see :func:`log_q_threshold`).
    """
    s = v.positive("sigma1", sigma1)
    t = v.finite("threshold", threshold)
    a = _votes(votes)
    mx = a.max(axis=1)
    uniq, inv = np.unique(mx, return_inverse=True)
    inv = inv.reshape(-1)
    return log_ndtr((uniq - t) / s)[inv], log_ndtr((t - uniq) / s)[inv]


def log_q_threshold(votes, threshold: float, sigma1: float) -> np.ndarray:
    """log q̃ = ln min(p, 1 − p) of the threshold check (its likelier outcome is i*), moved up
    by its error margin and capped at ln ½. Shape (k,)."""
    lp, l1p = log_pr_answered(votes, threshold, sigma1)
    lq = np.minimum(lp, l1p)
    return np.minimum(lq + _LOGQ_ERR * np.maximum(1.0, np.abs(lq)), -math.log(2.0))


def rdp_gnmax_independent(sigma: float, orders) -> np.ndarray:
    """λ/σ² (2018 Prop 8), rounded up; shape of ``orders``."""
    s = v.positive("sigma", sigma)
    a = np.asarray(orders, dtype=float)
    return (a / (s * s)) * (1.0 + 4 * UNIT_ROUNDOFF)


def rdp_threshold_independent(sigma1: float, orders) -> np.ndarray:
    """λ/(2σ₁²) (the Gaussian mechanism on the max count, sensitivity 1), rounded up."""
    s = v.positive("sigma1", sigma1)
    a = np.asarray(orders, dtype=float)
    return (a / (2.0 * s * s)) * (1.0 + 4 * UNIT_ROUNDOFF)


def rdp_lnmax_independent(scale: float, orders, sensitivity: float = 1.0) -> np.ndarray:
    r"""Data-independent RDP of one LNMax query: min(RR(2s/b), 2·Laplace(b/s)), s the number of
    changed votes (1; 2 under replace-one). The noisy histogram with one vote changed moves by
    +1 in one count and −1 in another: two Laplace mechanisms of sensitivity 1, composed (Mironov
    2017 Prop 1), and the argmax post-processes it; and the query is ε₀ = 2/b pure DP (module
    docstring). For s = 2 the counts move by at most 2 each in two counts or by 1 in four: the
    Laplace RDP is convex in the shift, so 2·Laplace(b/2) covers both. Shape of ``orders``."""
    b = v.positive("scale", scale)
    s = float(sensitivity)
    return np.minimum(rdp_pure_rr(lnmax_epsilon(b) * s, orders), 2.0 * rdp_laplace_shift(b / s, orders))


def _log1mexp(x: np.ndarray) -> np.ndarray:
    """log(1 − e^x) for x ≤ 0 (−inf at 0)."""
    x = np.asarray(x, dtype=float)
    with np.errstate(divide="ignore"):
        return np.where(x < -math.log(2.0), np.log1p(-np.exp(x)), np.log(-np.expm1(x)))


def kernel(lm1: float | np.ndarray, l1q, lq, ca, cb, e1, ea, eb) -> np.ndarray:
    r"""ln((1−q̃)·A^{λ−1} + q̃·B^{λ−1})/(λ−1), moved up by a bound on its evaluation error: the
    common form of 2017 Thm 3 and 2018 Thm 6 with ln A = ``ca``, ln B = ``cb`` per unit of λ − 1.

    Error analysis (u the unit round-off, K = 4u per elementary operation; e1, ea, eb bound the
    absolute errors of ln(1−q̃), ``ca`` and ``cb``, computed by the callers): t₁ = ln(1−q̃) +
    (λ−1)·ln A and t₂ = ln q̃ + (λ−1)·ln B are within Δ₁ = e₁ + K|ln(1−q̃)| + (λ−1)(e_a + K|ln A|)
    and Δ₂ = K|ln q̃| + (λ−1)(e_b + K|ln B|) (the products and sums rounding once each);
    s = ln(e^{t₁} + e^{t₂}) then moves by at most w₁Δ₁ + w₂Δ₂ with weights w_i = e^{t_i − s} ≤ 1
    (we take w₁ ≤ 1), plus its own rounding (K|s|, covered by the final factor). The margin added
    is twice that bound. (q̃ itself is the certified input: the bounds increase with q̃ where
    they apply.)

    Args:
        lm1: λ − 1 > 0, a float or an array broadcasting with the rest.
        l1q, lq, ca, cb, e1, ea, eb: per-query constants (arrays of one shape).

    Returns:
        The bound, moved up (NaN where an input is not finite: callers mask those).
    """
    with np.errstate(over="ignore", invalid="ignore"):
        t2 = lq + lm1 * cb
        ls = np.logaddexp(l1q + lm1 * ca, t2)
        w2 = np.exp(np.minimum(t2 - ls, 0.0))
        err = (e1 + _K * np.abs(l1q)) + lm1 * (ea + _K * np.abs(ca)) \
            + w2 * (_K * np.abs(lq) + lm1 * (eb + _K * np.abs(cb)))
        return ((ls + 2.0 * err) / lm1) * (1.0 + 4.0 * _K)


def kernel_sum(lm1: float, c, base: float) -> float:
    """Σ_i min(:func:`kernel` (λ−1, row i), base) over 1-D per-row constants ``c`` = (l1q, lq,
    ca, cb, E1, EA, EB0, EB1) where E1 = e1 + K|l1q|, EA = ea + K|ca|, EB0 = K|lq|,
    EB1 = eb + K|cb| (precomputed: the same numbers as :func:`kernel`, fewer passes);
    NaN rows count as ``base``."""
    l1q, lq, ca, cb, e1, ea, eb0, eb1 = c
    with np.errstate(over="ignore", invalid="ignore"):
        t2 = lm1 * cb
        t2 += lq
        t1 = lm1 * ca
        t1 += l1q
        ls = np.logaddexp(t1, t2)
        np.subtract(t2, ls, out=t2)
        np.minimum(t2, 0.0, out=t2)
        np.exp(t2, out=t2)           # w2
        np.multiply(eb1, lm1, out=t1)
        t1 += eb0
        t1 *= t2                     # w2·Δ₂
        np.multiply(ea, lm1, out=t2)
        t2 += e1
        t1 += t2                     # err
        t1 *= 2.0
        ls += t1
        ls *= (1.0 + 4.0 * _K) / lm1
        np.minimum(ls, base, out=ls)
        np.maximum(ls, 0.0, out=ls)
        bad = np.isnan(ls)
        if bad.any():
            ls[bad] = base
        return float(ls.sum())


class Thm6:
    r"""2018 Thm 6 with Prop 10's orders for a mechanism with RDP λ/s² at every order, per query.

    Built once from the queries' log q̃ (the per-query constants are kept), evaluated at any
    orders by :meth:`rdp`.

    Args:
        logq: log q̃, shape (k,) (already an upper bound, e.g. :func:`log_q_gnmax`).
        s: the noise scale in units of the sensitivity: σ for GNMax (RDP λ/σ²), √2σ₁ for the
            threshold check (RDP λ/(2σ₁²)).

    Attributes:
        applies: bool (k,): the theorem's conditions on q̃ hold (μ₂ > 1, q̃e^{ε₂} < 1, the
            monotone range); each order must also satisfy λ < μ₁.
        zero: bool (k,): q̃ = 0 (the answer is certain: RDP 0 at every order).
        mu1: μ₁ per query (k,).
    """

    def __init__(self, logq, s: float) -> None:
        lq = np.asarray(logq, dtype=float)
        self.s = v.positive("s", s)
        var = self.s * self.s
        self.zero = np.isneginf(lq)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            mu2 = self.s * np.sqrt(np.where(self.zero, 1.0, -lq))
            mu1 = mu2 + 1.0
            eps2 = mu2 / var
            eps1 = mu1 / var
            ok = (~self.zero) & (mu2 > 1.0) & (-lq > eps2)
            log_a2 = (mu2 - 1.0) * eps2
            bound = log_a2 - mu2 * (np.log1p(1.0 / (mu1 - 1.0)) + np.log1p(1.0 / (mu2 - 1.0)))
            ok &= lq <= bound
            self.applies = ok
            self.mu1 = np.where(ok, mu1, 0.0)
            lqo = np.where(ok, lq, -1.0)
            self.logq = lqo
            self.log1q = _log1mexp(lqo)
            inner = (lqo + np.where(ok, eps2, 0.0)) * (1.0 - 1.0 / np.where(ok, mu2, 2.0))
            l1mx = _log1mexp(inner)
            # per unit of (λ − 1): ln A and ln B
            self.ca = self.log1q - l1mx
            e1m = np.where(ok, eps1, 0.0)
            cbq = lqo / np.where(ok, mu1 - 1.0, 1.0)
            self.cb = e1m - cbq
            # absolute error bounds: ln(1−q̃); ln A (two logs, the inner exponent's error
            # amplified by d/dx ln(1 − e^x) = −e^x/(1 − e^x)); ln B
            self.e1 = _K * np.abs(self.log1q)
            xr = np.exp(inner - l1mx)  # e^x/(1 − e^x)
            # the inner exponent (ln q̃ + ε₂)(1 − 1/μ₂) may cancel: its error is ~u(|ln q̃| + ε₂)
            self.ea = _K * (2 * np.abs(self.log1q) + 2 * np.abs(l1mx)
                            + 4 * (np.abs(lqo) + np.where(ok, eps2, 0.0) + np.abs(inner)) * xr + np.abs(self.ca))
            self.eb = _K * (2 * np.abs(e1m) + 2 * np.abs(cbq) + np.abs(self.cb))

    def rdp(self, orders, rows=None) -> np.ndarray:
        """The data-dependent bound at ``orders`` (shape (n,)) for the queries ``rows``
        (an index or slice; default all): shape (k, n), ``inf`` where the theorem does not
        apply (conditions or λ ≥ μ₁), 0 where q̃ = 0.

        Raises:
            ParameterError: an order ≤ 1.
        """
        a = np.asarray(orders, dtype=float)
        if np.any(~(a > 1.0)):
            raise ParameterError("orders", "> 1", a)
        sl = slice(None) if rows is None else rows
        lm1 = (a - 1.0)[None, :]
        out = kernel(lm1, *(x[sl][:, None] for x in (self.log1q, self.logq, self.ca, self.cb,
                                                      self.e1, self.ea, self.eb)))
        valid = self.applies[sl][:, None] & (a[None, :] < self.mu1[sl][:, None]) & np.isfinite(out)
        out = np.where(valid, np.maximum(out, 0.0), np.inf)
        return np.where(self.zero[sl][:, None], 0.0, out)


class Thm3:
    r"""2017 Thm 3 for LNMax (a pure ε₀-DP mechanism with a likely answer), per query, as RDP:
    ε(λ) ≤ α(λ − 1)/(λ − 1) with α the bound of the module docstring, where
    q̃ < 1/(e^{ε₀} + 1); ``inf`` elsewhere.

    Args:
        logq: log q̃, shape (k,) (:func:`log_q_lnmax`).
        epsilon0: ε₀ = 2/b (:func:`lnmax_epsilon`).
    """

    def __init__(self, logq, epsilon0: float) -> None:
        lq = np.asarray(logq, dtype=float)
        e0 = v.positive("epsilon0", epsilon0)
        self.zero = np.isneginf(lq)
        # q̃ < 1/(e^{ε₀} + 1)  ⇔  ln q̃ < −ln(1 + e^{ε₀})
        self.applies = (~self.zero) & (lq < -np.logaddexp(0.0, e0))
        lqo = np.where(self.applies, lq, -1.0)
        self.logq = lqo
        self.log1q = _log1mexp(lqo)
        # ln((1 − q̃)/(1 − e^{ε₀} q̃)) per unit of l
        inner = np.minimum(lqo + e0, 0.0)
        l1mx = _log1mexp(inner)
        self.ca = self.log1q - l1mx
        self.e0 = e0
        self.cb = np.full(lqo.shape, e0)
        self.e1 = _K * np.abs(self.log1q)
        xr = np.exp(inner - l1mx)
        self.ea = _K * (2 * np.abs(self.log1q) + 2 * np.abs(l1mx) + 4 * (np.abs(lqo) + e0) * xr
                        + np.abs(self.ca))
        self.eb = np.zeros(lqo.shape)

    def rdp(self, orders, rows=None) -> np.ndarray:
        """Shape (k, n) for orders (n,), ``inf`` where the theorem does not apply."""
        a = np.asarray(orders, dtype=float)
        if np.any(~(a > 1.0)):
            raise ParameterError("orders", "> 1", a)
        sl = slice(None) if rows is None else rows
        lm1 = (a - 1.0)[None, :]
        out = kernel(lm1, *(x[sl][:, None] for x in (self.log1q, self.logq, self.ca, self.cb,
                                                      self.e1, self.ea, self.eb)))
        out = np.where(self.applies[sl][:, None] & np.isfinite(out), np.maximum(out, 0.0), np.inf)
        return np.where(self.zero[sl][:, None], 0.0, out)


# ---------------------------------------------------------------------------
# Reading a vote file (CSV with or without a header, or .npy), streamed
# ---------------------------------------------------------------------------

#: the largest vote file read (bytes): 10⁶ × 10 counts take ~30 MB as CSV
MAX_VOTES_BYTES = 4 * 10**9
#: the most counts (rows × columns) held in memory (8 bytes each: 400 MB)
MAX_VOTES_ENTRIES = 5 * 10**7
#: bytes read per chunk of a CSV file; the longest line accepted
_CHUNK_BYTES = 1 << 22
_MAX_LINE = 1 << 20


def _bad(path: str, row: int, col: int, what: str, line: int | None = None) -> ParameterError:
    where = f"row {row}" + (f" (line {line})" if line is not None and line != row else "") + f", column {col}"
    return ParameterError(path.split()[0].lstrip("-"), "", None, message=f"{path}: {where}: {what}")


def _short(s: str) -> str:
    """A cell as echoed in a one-line error: cut when long."""
    return s if len(s) <= 40 else f"{s[:20]}... ({len(s):,} characters)"


def _cell(text: bytes, path: str, row: int, col: int, line: int, *, binary: bool) -> float:
    t = text.strip()
    try:
        s = t.decode("ascii")
        x = float(s)
    except (UnicodeDecodeError, ValueError):
        shown = t[:20].decode("utf-8", "replace")
        raise _bad(path, row, col, f"not a number: {shown!r}", line) from None
    if math.isnan(x) or math.isinf(x):
        raise _bad(path, row, col, f"a vote count must be a whole number >= 0, got {_short(s)}", line)
    if binary and x not in (0.0, 1.0):
        raise _bad(path, row, col, f"must be 0 or 1, got {_short(s)}", line)
    if x < 0 or x != math.floor(x) or x > 2.0**53:
        raise _bad(path, row, col, f"a vote count must be a whole number in [0, 2^53], got {_short(s)}", line)
    return x


def _parse_lines(lines: list[bytes], path: str, first_row: int, first_line: int, ncols: int,
                 *, binary: bool) -> np.ndarray:
    """The slow, exact parse of some lines (used to name the first bad row and column)."""
    out = np.empty((len(lines), ncols))
    for i, ln in enumerate(lines):
        row, line = first_row + i, first_line + i
        cells = ln.rstrip(b"\r").split(b",")
        if len(cells) != ncols:
            raise _bad(path, row, min(len(cells), ncols) + 1 if len(cells) < ncols else ncols + 1,
                       f"has {len(cells)} columns, expected {ncols} (a ragged file)", line)
        for j, c in enumerate(cells):
            out[i, j] = _cell(c, path, row, j + 1, line, binary=binary)
    return out


def _is_number(tok: bytes) -> bool:
    try:
        float(tok.strip().decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        return False
    return True


def read_votes_file(path: str, *, option: str = "votes", binary: bool = False) -> np.ndarray:
    """Read a vote matrix: CSV (one query per line, one count per column, comma-separated; an
    optional header line of column names) or a NumPy ``.npy`` array of shape (queries, classes).

    Streams CSV files in 4 MB chunks (10⁶ × 10 counts read in about a second) through numpy's
    C parser; a chunk it refuses is re-read line by line to name the first bad row and column.

    Args:
        path: the file name.
        option: the option named in messages (``votes``; ``answered`` for a 0/1 column).
        binary: every entry must be 0 or 1 (the ``--answered`` file).

    Returns:
        float64 array of shape (k, m) of whole numbers ≥ 0 (row totals are checked by
        :func:`pate_votes_event`).

    Raises:
        ParameterError: one line naming the row and column: not a number, negative, fractional,
            NaN/inf, ragged rows; an empty file; too large; not a regular file; a read error.
    """
    from dpcalc._files import open_input_file

    fh, _size = open_input_file(path, option=option, max_bytes=MAX_VOTES_BYTES)
    try:
        with fh:
            return _read_votes(fh, path, option=option, binary=binary)
    except OSError as e:  # a read that fails after the open (EIO: /proc/self/mem, a failing disk, ...)
        raise ParameterError(option, "a readable regular file", path,
                             message=f"--{option} {path!r} cannot be read: {e.strerror or e}") from None


def _read_votes(fh, path: str, *, option: str, binary: bool) -> np.ndarray:
    """The body of :func:`read_votes_file` on the opened file ``fh`` (OSError propagates)."""
    import io

    msg = f"--{option} {path}"
    head = fh.read(6)
    if head == b"\x93NUMPY":
        fh.seek(0)
        return _read_npy(fh, path, binary=binary, option=option)
    fh.seek(0)
    pieces: list[np.ndarray] = []
    ncols = None
    rows = 0
    line_no = 0
    header_done = False
    rest = b""
    eof = False
    while not eof:
        chunk = fh.read(_CHUNK_BYTES)
        eof = not chunk
        data = rest + chunk
        if eof:
            lines_blob, rest = data, b""
        else:
            cut = data.rfind(b"\n")
            if cut < 0:
                if len(data) > _MAX_LINE:
                    raise _bad(msg, rows + 1, 1, f"a line longer than {_MAX_LINE:,} bytes: not a vote file",
                               line_no + 1)
                rest = data
                continue
            lines_blob, rest = data[:cut + 1], data[cut + 1:]
        if not lines_blob:
            continue
        lines = lines_blob.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        if not header_done and lines:
            first = lines[0].rstrip(b"\r")
            toks = first.split(b",")
            ncols = len(toks)
            header_done = True
            try:
                texty = first.decode("utf-8").isprintable()
            except UnicodeDecodeError:
                texty = False
            # a header names the columns: printable text, no token a number (a first line
            # mixing numbers and text is a row with a bad cell)
            if texty and not any(_is_number(t) for t in toks):
                lines = lines[1:]
                line_no += 1
        if not lines:
            continue
        if any(not ln.strip() for ln in lines):
            k = next(i for i, ln in enumerate(lines) if not ln.strip())
            raise _bad(msg, rows + k + 1, 1, "an empty line (every row needs one count per column)",
                       line_no + k + 1)
        blob = b"\n".join(lines)
        arr = None
        try:
            arr = np.loadtxt(io.BytesIO(blob), delimiter=",", dtype=np.float64, ndmin=2, comments=None,
                             encoding="latin-1")
        except (ValueError, IndexError):
            arr = None
        ok = (arr is not None and arr.shape == (len(lines), ncols)
              and bool(np.all(np.isfinite(arr) & (arr >= 0) & (arr == np.floor(arr)) & (arr <= 2.0**53)))
              and (not binary or bool(np.all((arr == 0) | (arr == 1)))))
        if not ok:
            arr = _parse_lines(lines, msg, rows + 1, line_no + 1, ncols, binary=binary)
        pieces.append(arr)
        rows += len(lines)
        line_no += len(lines)
        if rows * ncols > MAX_VOTES_ENTRIES:
            raise ParameterError(option, "", None, message=f"{msg}: more than "
                                 f"{MAX_VOTES_ENTRIES:,} counts (the limit held in memory)")
    if not pieces or rows == 0:
        raise ParameterError(option, "", None, message=f"{msg} is empty: no rows of counts")
    return np.vstack(pieces) if len(pieces) > 1 else pieces[0]


def _read_npy(fh, path: str, *, binary: bool, option: str) -> np.ndarray:
    from numpy.lib import format as npf

    try:
        version = npf.read_magic(fh)
        shape, fortran, dtype = (npf.read_array_header_1_0(fh) if version == (1, 0)
                                 else npf.read_array_header_2_0(fh))
    except (ValueError, OSError, SyntaxError) as e:
        raise ParameterError(option, "", None, message=f"--{option} {path}: not a valid .npy file ({e})") from None
    if dtype.kind not in "iuf" or dtype.hasobject:
        raise ParameterError(option, "", None, message=f"--{option} {path}: the array must hold numbers "
                             f"(integers or floats), got dtype {dtype}")
    if len(shape) == 1 and binary:
        shape = (shape[0], 1)
    if len(shape) != 2 or shape[1] < 1:
        raise ParameterError(option, "", None, message=f"--{option} {path}: the array must have shape "
                             f"(queries, classes), got {shape}")
    if shape[0] * shape[1] > MAX_VOTES_ENTRIES:
        raise ParameterError(option, "", None, message=f"--{option} {path}: more than {MAX_VOTES_ENTRIES:,} "
                             "counts (the limit held in memory)")
    if shape[0] == 0:
        raise ParameterError(option, "", None, message=f"--{option} {path} is empty: no rows of counts")
    try:
        fh.seek(0)
        arr = np.load(fh, allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise ParameterError(option, "", None, message=f"--{option} {path}: not a valid .npy file ({e})") from None
    a = np.asarray(arr, dtype=np.float64).reshape(shape)
    bad = ~(np.isfinite(a) & (a >= 0) & (a == np.floor(a)) & (a <= 2.0**53))
    if binary:
        bad |= ~((a == 0) | (a == 1))
    if bad.any():
        r, c = (int(x) for x in np.argwhere(bad)[0])
        what = "must be 0 or 1" if binary else "a vote count must be a whole number >= 0"
        raise ParameterError(option, "", None, message=f"--{option} {path}: row {r + 1}, column {c + 1}: "
                             f"{what}, got {a[r, c]!r}")
    return a


def pate_votes_event(votes: ArrayLike, *, mechanism: str, noise: float, sigma1: float | None = None,
                     threshold: float | None = None, answered: ArrayLike | None = None) -> PateVotesEvent:
    """Validate a (k, m) array of vote counts and describe the PATE run over it.

    Args:
        votes: array-like (k queries × m classes) of whole numbers in [0, 2^53], every row
            the same total ≥ 1 (the number of teachers).
        mechanism: ``"lnmax"``, ``"gnmax"`` or ``"confident-gnmax"``.
        noise: b (lnmax), σ (gnmax) or σ₂ (confident-gnmax), in votes; > 0.
        sigma1: σ₁ of the threshold check (confident-gnmax only), in votes.
        threshold: T of the threshold check (confident-gnmax only), in votes.
        answered: array-like of k entries 0/1, the queries that passed the check
            (confident-gnmax only); None: every query.

    Returns:
        The :class:`dpcalc.events.PateVotesEvent` (Papernot et al. 2017 Thm 3; 2018 Thm 6, Alg 1).

    Raises:
        ParameterError: naming the first bad row/column, or rows with different totals; a bad
            ``answered`` array or noise parameter.
    """
    raw = np.asarray(votes)
    if raw.dtype.kind in "iub":  # whole numbers already: only the range to check
        a = raw.astype(float)
        bad = None if raw.size == 0 or (raw.min() >= 0 and raw.max() <= 2**53) else (raw < 0) | (raw > 2**53)
    else:
        a = np.asarray(raw, dtype=float)
        bad = ~(np.isfinite(a) & (a >= 0) & (a == np.floor(a)) & (a <= 2.0**53))
        bad = bad if bad.any() else None
    if a.ndim != 2 or a.shape[1] < 1:
        raise ParameterError("votes", "a 2-D (queries, classes) array", getattr(a, "shape", None))
    if bad is not None:
        r, c = (int(x) for x in np.argwhere(bad)[0])
        raise ParameterError("votes", "", a[r, c], message=f"votes row {r + 1}, column {c + 1}: "
                             f"a vote count must be a whole number >= 0, got {a[r, c]!r}")
    if a.shape[0]:
        tot = a.sum(axis=1)
        diff = np.flatnonzero(tot != tot[0])
        if diff.size:
            i = int(diff[0])
            raise ParameterError("votes", "", None, message=f"votes rows have different totals: row 1 "
                                 f"sums to {tot[0]:.0f}, row {i + 1} to {tot[i]:.0f} (every row must sum "
                                 "to the number of teachers)")
        if tot[0] < 1:
            raise ParameterError("votes", "", None, message="votes rows sum to 0: no teacher voted "
                                 "(zero teachers)")
    ans = None
    if answered is not None:
        b = np.asarray(answered)
        if b.shape != (a.shape[0],) or not np.all((b == 0) | (b == 1)):
            raise ParameterError("answered", f"one 0/1 entry per query ({a.shape[0]})", b.shape)
        ans = b.astype(np.uint8).tobytes()
    return PateVotesEvent(mechanism, noise, (int(a.shape[0]), int(a.shape[1])),
                          np.ascontiguousarray(a, dtype="<f8").tobytes(), sigma1, threshold, ans)
