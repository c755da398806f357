r"""Rényi-DP accountant: RDP curves of the (Poisson-sampled) Gaussian, composition, conversion.

Mathematics and sources
-----------------------
* Rényi divergence of order α > 1, RDP (Mironov 2017, Def. 3 and Prop. 1): composition
  adds RDP curves order by order.
* Gaussian mechanism with noise multiplier σ (std / L2 sensitivity): ε(α) = α/(2σ²)
  (Mironov 2017, Prop. 7).
* Poisson-sampled Gaussian, add/remove adjacency (Mironov, Talwar, Zhang 2019, §3.3):
  ε(α) = log(A_α)/(α − 1) with

  .. math:: A_α = E_{z∼N(0,σ²)}\big[((1−q) + q\,e^{(2z−1)/(2σ²)})^α\big].

  Integer α: binomial expansion. We evaluate
  :math:`A_α − 1 = Σ_{k≥2} \binom{α}{k}(1−q)^{α−k}q^k\,\mathrm{expm1}((k²−k)/(2σ²))`
  (every term positive, so no cancellation even at σ = 10⁴) and ``log1p``.
  Fractional α: the two-series formula of §3.3 with log-erfc (``log_ndtr``) terms,
  summed in signed log space, as A_α − 1 (no cancellation against the 1) unless q is
  near ½. Past index α + 1 both series alternate with decreasing magnitudes, so the
  truncation error is bounded by the last terms, which we add (pessimistic), with a
  round-off margin. An order whose series does not reach a remainder of
  ``_FRAC_ACCEPT`` within ``_FRAC_MAX_TERMS`` terms falls back to the unsampled bound
  α/(2σ²), with a warning. Checked against mpmath quadrature (tests/accounting/test_rdp.py).
* Laplace mechanism with scale b (Mironov 2017, Table 2):
  ε(α) = log(α/(2α−1)·e^{(α−1)/b} + (α−1)/(2α−1)·e^{−α/b})/(α−1).
* Pure ε-DP mechanism (``EpsilonDeltaEvent`` with δ = 0): the RDP of randomized
  response with p = e^ε/(1+e^ε) (Mironov 2017, Table 2), valid for every ε-DP mechanism
  because randomized response dominates it (Kairouz, Oh, Viswanath 2015, Thm 2.1) and
  Rényi divergence obeys data processing. It is ≤ min(ε, αε²/2) (Bun & Steinke 2016, Prop. 3.3).
* ε-bounded-range mechanism (``ExponentialMechanismEvent``, e.g. the exponential
  mechanism): ε(α) = min(αε²/8, the randomized-response curve above) — αε²/8 from its
  (ε²/8)-zCDP (Cesar & Rogers 2021; Hoeffding's lemma on a loss of range ε, see
  :mod:`dpcalc.accounting.zcdp`), and ε-BR ⇒ ε-DP (Dong, Durfee, Rogers 2020 §2) for the
  second. The ε is the mechanism's stated guarantee under either adjacency.
* RDP → (ε, δ) (Canonne, Kamath, Steinke 2020, Prop. 12; Balle et al. 2020, Thm 21):
  ε = ε(α) + log((α−1)/α) − (log δ + log α)/(α − 1), minimised over orders; and ε = 0
  when δ ≥ √(1 − e^{−ε(α)}) (total variation ≤ √(1 − e^{−KL}), Bretagnolle–Huber, with
  KL ≤ ε(α)), as in TF Privacy / dp_accounting.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

from dpcalc import _validate as v
from dpcalc._numerics import (
    UNIT_ROUNDOFF,
    gamma_sign,
    log_abs_gamma,
    log_expm1,
    log_factorials,
    log_ndtr,
    logsumexp,
    minimize_bounded,
    minimize_bounded_steps,
    signed_logsumexp,
)
from dpcalc._numerics import log_abs_expm1 as _log_abs_expm1
from dpcalc.accounting._sampling import check_rdp_sampler, is_sampler_event
from dpcalc.accounting._sampling_rdp import rdp_sampler_step
from dpcalc.accounting.base import Accountant, GridResult, additive_totals
from dpcalc.errors import ParameterError, UnsupportedEventError
from dpcalc.events import (
    ComposedEvent,
    EpochSampledEvent,
    EpsilonDeltaEvent,
    Event,
    ExponentialMechanismEvent,
    GaussianEvent,
    LaplaceEvent,
    PoissonSampledEvent,
    SelfComposedEvent,
    TuningEvent,
)
from dpcalc.results import AccountingResult

__all__ = [
    "DEFAULT_ORDERS",
    "MAX_ORDER",
    "RdpAccountant",
    "log_a_sampled_gaussian",
    "rdp_gaussian",
    "rdp_sampled_gaussian",
    "rdp_laplace",
    "rdp_pure_dp",
    "rdp_bounded_range",
    "rdp_of_event",
    "epsilon_from_rdp",
    "delta_from_rdp",
    "check_event",
]


def _default_orders() -> tuple[float, ...]:
    frac = 1.0 + np.geomspace(0.01, 1.0, 17)[:-1]  # 1.01 ... 1.75, denser near 1
    ints = [*range(2, 33), *range(34, 65, 2), *range(68, 129, 4), *range(136, 257, 8)]
    return tuple(float(x) for x in frac) + tuple(float(x) for x in ints)


#: Default Rényi orders: 16 fractional orders in [1.01, 1.75] and integer orders
#: 2…256 (every integer to 32, then steps of 2, 4, 8). The optimum is then refined
#: between its neighbours, so results do not depend on this grid's spacing.
DEFAULT_ORDERS: tuple[float, ...] = _default_orders()

#: largest Rényi order accepted (bounds the memory of the integer-order tables)
MAX_ORDER = 10_000

#: remainder (relative to max(A − 1, 1e-4)) at which a fractional-order series stops
_FRAC_TOL = 1e-13
#: remainder still accepted (pessimistically, same scale) when the term cap is hit
_FRAC_ACCEPT = 1e-8
#: q ≤ this (or ≥ 1 − this) sums A − 1 directly; otherwise the series sum A itself
_SUBTRACT_Q = 0.45
#: cap on the number of terms of each fractional-order series
_FRAC_MAX_TERMS = 1 << 15
#: round-off margin added to A − 1 for fractional orders, relative to Σ|terms|: 451 unit
#: round-offs (≥ 1e-13), far above the ~(terms summed)·u error of the signed log-space sum
_ROUNDOFF = 451 * UNIT_ROUNDOFF
#: margin added to log(A − 1) for integer orders (all terms positive, relative error of the
#: log-space sum ~ a few u): 4504 unit round-offs (≥ 1e-12), i.e. A − 1 inflated by e^{4504u}
_INT_LOG_MARGIN = 4504 * UNIT_ROUNDOFF
#: absolute error of the computed log of one series term, per unit of the sum of the
#: magnitudes of its pieces (+8): each piece (ln|Γ|, ln k!, ln Φ, products like i·ln q) is
#: within 2u·max(1, |piece|) (tests/test_special_functions.py, against mpmath) and each of the ≤ 8
#: additions rounds by ≤ u/2 of the partial sum: 8u covers both with room. A term e^{t} is
#: then within a relative e^{η} − 1 of its value; these errors are added to the bound (they
#: matter where ln-pieces of size ~10³ cancel to a tiny A − 1, e.g. q ≈ ½ at large σ).
_TERM_ERR = 8 * UNIT_ROUNDOFF

SOURCE = ("Mironov 2017; Mironov, Talwar, Zhang 2019; conversion: Canonne, Kamath, "
          "Steinke 2020 Prop 12")


# ---------------------------------------------------------------------------
# RDP of single mechanisms
# ---------------------------------------------------------------------------

def _as_orders(orders, name: str = "orders") -> np.ndarray:
    try:
        a = np.atleast_1d(np.asarray(orders, dtype=float))
    except (TypeError, ValueError):
        raise ParameterError(name, "a sequence of numbers > 1", orders) from None
    if a.ndim != 1 or a.size == 0 or not np.all(a > 1) or not np.all(a <= MAX_ORDER):
        raise ParameterError(name, f"a non-empty sequence of numbers in (1, {MAX_ORDER}]", orders)
    return a


def rdp_gaussian(*, noise_multiplier: float, orders) -> np.ndarray:
    r"""RDP of the Gaussian mechanism: ε(α) = α/(2σ²) (Mironov 2017, Prop. 7).

    Args:
        noise_multiplier: σ, noise std divided by the L2 sensitivity; > 0.
        orders: Rényi orders α > 1, shape (m,).

    Returns:
        ε(α) for each order, shape (m,).

    Raises:
        ParameterError: σ ≤ 0 or an order ≤ 1.
    """
    sigma = v.positive("noise_multiplier", noise_multiplier)
    a = _as_orders(orders)
    return a / (2.0 * sigma * sigma)


@functools.lru_cache(maxsize=32)
def _int_tables(alphas: tuple[int, ...]):
    """σ- and q-independent pieces of the integer-order binomial sum (cached).

    Returns ``(k, log_binom, alpha_minus_k)`` with k = 2..max α, shapes (K,), (m, K), (m, K);
    ``log_binom`` is ``-inf`` where k > α. ln C(α, k) = ln α! − ln k! − ln(α−k)! from one table
    of log-factorials (:func:`dpcalc._numerics.log_factorials`, as accurate as scipy's gammaln).
    """
    amax = int(max(alphas))
    lf = log_factorials(amax)
    ai = np.asarray(alphas, dtype=np.int64)[:, None]
    ki = np.arange(2, amax + 1, dtype=np.int64)
    lb = lf[ai] - lf[ki] - lf[np.maximum(ai - ki, 0)]
    lb = np.where(ki <= ai, lb, -np.inf)
    return ki.astype(float), lb, (ai - ki).astype(float)


def _log_a_int(q: float, sigma: float, alphas: np.ndarray) -> np.ndarray:
    """log A_α for integer orders α ≥ 2 and q in (0, 1) (all positive terms, see module doc)."""
    return _log_a_int_rows([q], [sigma], alphas)[0]


def _log_a_int_rows(qs: Sequence[float], sigmas: Sequence[float], alphas: np.ndarray) -> np.ndarray:
    """:func:`_log_a_int` for many (q, σ) at the same integer orders, shape (n, m); row r is
    the same floats as ``_log_a_int(qs[r], sigmas[r], alphas)`` (elementwise arithmetic and
    sums along the last axis only)."""
    k, lb, amk = _int_tables(tuple(int(x) for x in alphas))
    n = len(qs)
    out = np.empty((n, lb.shape[0]))
    step = max(1, 2_000_000 // max(lb.size, 1))  # rows per block (bounded memory)
    for r0 in range(0, n, step):
        qb, sb = qs[r0:r0 + step], np.asarray(sigmas[r0:r0 + step], dtype=float)[:, None, None]
        l1q = np.array([math.log1p(-q) for q in qb])[:, None, None]
        lq = np.array([math.log(q) for q in qb])[:, None, None]
        x = k * (k - 1) / (2.0 * sb * sb)
        p1, p2, p3 = amk * l1q, k * lq, log_expm1(x)
        terms = lb + p1 + p2 + p3
        lse = logsumexp(terms, axis=-1)
        # each term e^{t} carries the absolute error of t, ≤ _TERM_ERR·(Σ|pieces| + 8): its
        # relative error; all terms positive, so A − 1's relative error is their weighted mean
        eta = np.where(np.isfinite(lb), _TERM_ERR * (np.abs(lb) + np.abs(p1) + np.abs(p2)
                                                     + np.abs(p3) + 8.0), 0.0)
        w = np.sum(np.exp(terms - lse[..., None]) * np.expm1(eta), axis=-1)
        # and the log-space sum itself (relative error ~ a few u): _INT_LOG_MARGIN (pessimistic)
        log_a_minus_1 = lse + np.log1p(w) + _INT_LOG_MARGIN
        out[r0:r0 + step] = np.logaddexp(0.0, log_a_minus_1)
    return out


def _err_log(t: np.ndarray, eta: np.ndarray) -> np.ndarray:
    """log of the error bound e^{t}·(e^{η} − 1) of a term e^{t} whose log carries an absolute
    error ≤ η (``-inf`` where the term is 0)."""
    eta = np.broadcast_to(eta, np.shape(t))
    with np.errstate(invalid="ignore", over="ignore"):
        return np.where(t == -np.inf, -np.inf, t + log_expm1(np.ascontiguousarray(eta)))


def _dlog_ndtr_bound(b: np.ndarray) -> np.ndarray:
    """An upper bound on (ln Φ)'(b) = φ(b)/Φ(b): 3 − b for b < 0 (≤ 2.51 on [−1, 0], and
    1/R(−b) ≤ −b + 1/(−b) below, R the Mills ratio), and 2φ(b) ≤ e^{−b²/2} for b ≥ 0."""
    with np.errstate(under="ignore"):
        return np.where(b < 0, 3.0 - b, np.exp(-0.5 * np.minimum(b * b, 1e4)))


def _finite_abs(x: np.ndarray) -> np.ndarray:
    return np.where(np.isfinite(x), np.abs(x), 0.0)


def _signed_diff(lx: np.ndarray, sx: np.ndarray, ly: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``sx·e^{lx} − e^{ly}`` elementwise as (log |·|, sign); ``lx``/``ly`` may be ``-inf``."""
    m = np.maximum(lx, ly)
    m = np.where(np.isfinite(m), m, 0.0)
    d = sx * np.exp(lx - m) - np.exp(ly - m)
    with np.errstate(divide="ignore"):
        return np.log(np.abs(d)) + m, np.sign(d)


def _chunk_rows(q, sigma, z0, start: int, size: int, mode):
    """α-independent pieces of terms ``start … start+size−1`` of the fractional series.

    ``q``, ``sigma``, ``z0`` (z₀ = σ² ln((1−q)/q) + ½) are floats, or arrays of shape (r, 1) with
    one (q, σ) per row; the pieces then have shape (size,), or (r, size) (``r0``: a float, or
    shape (r,)). Every piece is elementwise, so a row's values do not depend on the other rows.
    """
    i = np.arange(start, start + size, dtype=float)
    s2 = 2.0 * sigma * sigma
    c0, b0 = (i * i - i) / s2, (z0 - i) / sigma
    lnd0 = log_ndtr(b0)
    # error scale of ln(e^{c}Φ(b)): c and ln Φ(b) to a few u each, and b = (z₀ − i)/σ to
    # u·(|z₀| + i)/σ, scaled by (ln Φ)'(b) (see _dlog_ndtr_bound); see _TERM_ERR
    db = (np.abs(z0) + i) / sigma
    k_e0 = np.abs(c0) + np.abs(lnd0) + _dlog_ndtr_bound(b0) * db
    lg = sgg = r0 = lx = lndm = k_x = k_y = None
    if mode == 0:
        with np.errstate(divide="ignore"):
            le = np.where(c0 > 0, log_expm1(np.maximum(c0, 0.0)), -np.inf)
        lx, lndm = le + lnd0, log_ndtr(-b0)
        lg, sgg = _signed_diff(lx, np.ones_like(lx), lndm)
        r0 = np.logaddexp(c0[..., -1] + lnd0[..., -1], 0.0)
        # expm1(c)Φ(b) − Φ(−b) may cancel: each of the two carries its own error
        k_x = k_e0 + _finite_abs(le)
        k_y = np.abs(lndm) + _dlog_ndtr_bound(-b0) * db
    return (i, log_factorials(start + size - 1)[start:], c0 + lnd0, lg, sgg, r0, k_e0,
            lx, lndm, k_x, k_y)


def _z0(q: float, sigma: float) -> float:
    """z₀ = σ² ln((1−q)/q) + ½, the split point of the two series (MTZ 2019 §3.3)."""
    return sigma * sigma * (math.log1p(-q) - math.log(q)) + 0.5


@functools.lru_cache(maxsize=256)
def _chunk_consts(q: float, sigma: float, start: int, size: int, mode):
    """:func:`_chunk_rows` for one (q, σ), cached (the refinement between orders and the σ
    search ask for the same (q, σ) many times)."""
    out = _chunk_rows(q, sigma, _z0(q, sigma), start, size, mode)
    return out[:5] + (None if out[5] is None else float(out[5]),) + out[6:]


def _frac_mode(q: float):
    """Which series has the 1 subtracted (its binomial series must converge fast): 0, 1, or
    None (plain)."""
    return 0 if q <= _SUBTRACT_Q else (1 if q >= 1.0 - _SUBTRACT_Q else None)


def _log_a_frac(q, sigma, alphas: np.ndarray, warnings: list | None) -> np.ndarray:
    r"""Upper bound on log A_α for fractional orders (two-series formula, MTZ 2019 §3.3).

    With u_i = C(α,i)(1−q)^{α−i}q^i, c_i = (i²−i)/(2σ²), b_i = (z₀−i)/σ and
    z₀ = σ² ln((1−q)/q) + ½, the first series is Σ u_i e^{c_i} Φ(b_i) and the second
    Σ C(α,i)(1−q)^i q^{α−i} e^{c'_i} Φ(b'_i) with j = α−i, c'_i = (j²−j)/(2σ²),
    b'_i = (j−z₀)/σ. For q ≤ ``_SUBTRACT_Q`` the binomial series Σ u_i = 1 converges
    geometrically, so we sum A − 1 = Σ u_i (expm1(c_i)Φ(b_i) − Φ(−b_i)) + (second series),
    whose terms are of the size of A − 1 when q is small or σ large (no cancellation
    against the 1); for q ≥ 1 − ``_SUBTRACT_Q`` the roles of the two series are swapped,
    and in between (where that binomial series converges slowly) both series are summed
    as they are, giving A. Past index α + 1 the series alternate with decreasing
    magnitudes (ratio ≤ |α−i|/(i+1) by the Mills-ratio bound), so the remainder is at
    most the last term(s) summed, which we add, together with a round-off margin.

    Orders whose series do not converge get ``+inf`` and a warning (the caller then caps
    them at the unsampled α/(2σ²)).

    ln|Γ|, sign Γ and ln Φ come from :mod:`dpcalc._numerics` (``log_abs_gamma``,
    ``gamma_sign``, ``log_ndtr``): at least as accurate as scipy.special's (checked against
    mpmath in tests/test_special_functions.py), so the round-off margin sized for scipy still holds.

    ``q`` and ``sigma`` are floats, or arrays of the shape of ``alphas`` (one (q, σ, α) per row,
    e.g. many DP-SGD runs at once): each row's value is the same float as the scalar call gives
    (tests/accounting/test_rdp_batch.py); ``warnings`` is then a list of lists, one per row.
    """
    if np.ndim(q) == 0 and np.ndim(sigma) == 0:
        q, sigma = float(q), float(sigma)
        warn = None if warnings is None else (lambda k, msg: warnings.append(msg))
        return _log_a_frac_core(np.full(alphas.size, q), np.full(alphas.size, sigma), alphas,
                                _frac_mode(q), warn, shared=True)
    qa = np.broadcast_to(np.asarray(q, dtype=float), alphas.shape)
    sa = np.broadcast_to(np.asarray(sigma, dtype=float), alphas.shape)
    if alphas.size and np.all(qa == qa[0]) and np.all(sa == sa[0]):  # one (q, σ): cached pieces
        flat = None if warnings is None else []
        out = _log_a_frac(float(qa[0]), float(sa[0]), alphas, flat)
        if warnings is not None:  # the scalar path's messages name their order
            for k, a_k in enumerate(alphas.tolist()):
                warnings[k].extend(msg for msg in flat if msg.startswith(f"fractional order {a_k:.6g}:"))
        return out
    modes = np.array([{0: 0, 1: 1, None: 2}[_frac_mode(x)] for x in qa.tolist()])
    out = np.empty(alphas.size)
    for code, mode in ((0, 0), (1, 1), (2, None)):
        rows = np.flatnonzero(modes == code)
        if rows.size:
            warn = None if warnings is None else (
                lambda k, msg, rows=rows: warnings[int(rows[k])].append(msg))
            out[rows] = _log_a_frac_core(qa[rows], sa[rows], alphas[rows], mode, warn,
                                         shared=False)
    return out


def _log_a_frac_core(qa: np.ndarray, sa: np.ndarray, alphas: np.ndarray, mode,
                     warn, *, shared: bool) -> np.ndarray:
    """:func:`_log_a_frac` for rows (qa[k], sa[k], alphas[k]) that share ``mode``; ``shared``:
    every row has the same (q, σ) (its chunk pieces are then cached); ``warn(k, message)``
    (or None) receives the non-convergence message of row k."""
    m = alphas.size
    out = np.full(m, np.inf)
    # per-row scalars, with math's functions (the same floats for one row or many)
    q_list, s_list = qa.tolist(), sa.tolist()
    lqa = np.array([math.log(x) for x in q_list])
    l1qa = np.array([math.log1p(-x) for x in q_list])
    z0a = np.array([_z0(x, y) for x, y in zip(q_list, s_list, strict=True)])
    s2a = 2.0 * sa * sa
    ls = np.full(m, -np.inf)   # log |running sum of A − 1| (of A in plain mode)
    sg = np.zeros(m)           # its sign
    lt = np.full(m, -np.inf)   # log Σ|terms| (round-off scale)
    lr = np.full(m, -np.inf)   # log of the remainder bound after the last chunk
    lerr = np.full(m, -np.inf)  # log Σ (error bound of each term), see _TERM_ERR
    active = np.arange(m)
    start, size = 0, 32
    gla = log_abs_gamma(alphas + 1.0)
    log_tol, log_accept = math.log(_FRAC_TOL), math.log(_FRAC_ACCEPT)
    while active.size:
        a = alphas[active][:, None]
        lq, l1q = lqa[active][:, None], l1qa[active][:, None]
        z0, s2, sigma = z0a[active][:, None], s2a[active][:, None], sa[active][:, None]
        if shared:
            consts = _chunk_consts(q_list[0], s_list[0], start, size, mode)
        else:
            # the pieces depend on (q, σ) only: computed once per distinct pair, then indexed
            pairs, first, inv = np.unique(np.stack([qa[active], sa[active]], axis=1), axis=0,
                                          return_index=True, return_inverse=True)
            rows_u = active[first][:, None]
            consts = _chunk_rows(pairs[:, :1], pairs[:, 1:], z0a[rows_u], start, size, mode)
            inv = inv.reshape(-1)
            consts = tuple(c if c is None or k < 2 else c[inv] for k, c in enumerate(consts))
        i, gli, e0, lg, sgg, r0, k_e0, lx0, lndm0, k_x0, k_y0 = consts
        j = a - i
        lgj = log_abs_gamma(j + 1.0)
        logc = gla[active][:, None] - gli - lgj
        sgn = gamma_sign(j + 1.0)
        c1, b1 = (j * j - j) / s2, (j - z0) / sigma           # shape (m_active, n)
        lu0 = logc + i * lq + j * l1q
        lu1 = logc + j * lq + i * l1q
        lnd1 = log_ndtr(b1)
        # absolute error scales of the logs of the terms (see _TERM_ERR): the pieces of ln|u|
        # and of the Gaussian factor, e.g. ln C(α, i) = ln Γ(α+1) − ln i! − ln|Γ(α−i+1)|
        g_abs = np.abs(gla[active])[:, None] + gli + np.abs(lgj)
        m0 = g_abs + np.abs(i * lq) + np.abs(j * l1q) + 8.0
        m1 = g_abs + np.abs(j * lq) + np.abs(i * l1q) + 8.0
        db1 = (np.abs(z0) + np.abs(j)) / sigma
        k_e1 = np.abs(c1) + np.abs(lnd1) + _dlog_ndtr_bound(b1) * db1
        if mode == 0:
            t_mod, s_mod = lu0 + lg, sgn * sgg
            t_pl = lu1 + c1 + lnd1
            e_mod = np.logaddexp(_err_log(lu0 + lx0, _TERM_ERR * (m0 + k_x0)),
                                 _err_log(lu0 + lndm0, _TERM_ERR * (m0 + k_y0)))
            e_pl = _err_log(t_pl, _TERM_ERR * (m1 + k_e1))
            # remainder: |u_n|(e^{c}Φ(b) + 1) for the modified series, |t_n| for the plain one
            r_mod = lu0[:, -1] + r0
        elif mode == 1:
            lnd1m = log_ndtr(-b1)
            with np.errstate(divide="ignore"):
                le1 = _log_abs_expm1(c1)
            lx = le1 + lnd1
            lg1, sg1 = _signed_diff(lx, np.sign(c1), lnd1m)
            t_mod, s_mod = lu1 + lg1, sgn * sg1
            t_pl = lu0 + e0
            e_mod = np.logaddexp(
                _err_log(lu1 + lx, _TERM_ERR * (m1 + k_e1 + _finite_abs(le1))),
                _err_log(lu1 + lnd1m, _TERM_ERR * (m1 + np.abs(lnd1m)
                                                   + _dlog_ndtr_bound(-b1) * db1)))
            e_pl = _err_log(t_pl, _TERM_ERR * (m0 + k_e0))
            r_mod = lu1[:, -1] + np.logaddexp(c1[:, -1] + lnd1[:, -1], 0.0)
        else:  # plain: both series as they are, summing A itself
            t_mod, s_mod = lu0 + e0, sgn
            t_pl = lu1 + c1 + lnd1
            e_mod = _err_log(t_mod, _TERM_ERR * (m0 + k_e0))
            e_pl = _err_log(t_pl, _TERM_ERR * (m1 + k_e1))
            r_mod = t_mod[:, -1]
        lerr[active] = np.logaddexp(lerr[active],
                                    logsumexp(np.concatenate([e_mod, e_pl], axis=1), axis=1))
        la, sgn_sum, ltot = signed_logsumexp(
            np.concatenate([ls[active][:, None], t_mod, t_pl], axis=1),
            np.concatenate([sg[active][:, None], s_mod, sgn], axis=1), axis=1)
        ls[active], sg[active] = la, sgn_sum
        lt[active] = np.logaddexp(lt[active], ltot)
        lr[active] = np.logaddexp(r_mod, t_pl[:, -1])
        end = start + size - 1  # index of the last term summed
        alternating = end >= alphas[active] + 2
        # remainder relative to max(|A − 1|, 1e-4), or to A in plain mode
        scale = la if mode is None else np.maximum(la, math.log(1e-4))
        done = alternating & (lr[active] - scale <= log_tol)
        capped = start + size >= _FRAC_MAX_TERMS
        if capped:
            ok = alternating & (lr[active] - scale <= log_accept)
            if warn is not None:
                for idx in active[~ok]:
                    warn(int(idx),
                        f"fractional order {alphas[idx]:.6g}: RDP series did not converge within "
                        f"{_FRAC_MAX_TERMS} terms (sample_rate={qa[idx]:.6g}, "
                        f"noise_multiplier={sa[idx]:.6g}); the unsampled bound alpha/(2 sigma^2) "
                        "is used for it")
            done = ok
        fin = active[done]
        if fin.size:
            # A − 1 (or A) ≤ max(S, 0) + remainder + round-off margin + the terms' own errors
            s_pos = np.where(sg[fin] > 0, ls[fin], -np.inf)
            up = np.logaddexp(np.logaddexp(s_pos, lr[fin]), lt[fin] + math.log(_ROUNDOFF))
            up = np.logaddexp(up, lerr[fin])
            out[fin] = up if mode is None else np.logaddexp(0.0, up)
        if capped:
            break
        active = active[~done]
        start += size
        size = min(size * 2, _FRAC_MAX_TERMS - start)
    return out


def log_a_sampled_gaussian(*, sample_rate: float, noise_multiplier: float, orders,
                           warnings: list | None = None) -> np.ndarray:
    r"""log A_α of the Poisson-sampled Gaussian (Mironov, Talwar, Zhang 2019, §3.3).

    :math:`A_α = E_{z∼N(0,σ²)}[((1−q) + q e^{(2z−1)/(2σ²)})^α]`, so that the RDP of one
    step is log(A_α)/(α−1). Integer orders use the all-positive expansion of A_α − 1;
    fractional orders the two-series formula (an upper bound within ~1e-14 relative).

    Args:
        sample_rate: q, the Poisson sampling probability, in (0, 1].
        noise_multiplier: σ, noise std divided by the L2 sensitivity; > 0.
        orders: Rényi orders α > 1, shape (m,).
        warnings: optional list collecting messages about orders whose series did not converge.

    Returns:
        log A_α, shape (m,); ``+inf`` for an order whose series did not converge.

    Raises:
        ParameterError: q outside (0, 1], σ ≤ 0, or an order ≤ 1.
    """
    q = v.half_open_unit("sample_rate", sample_rate)
    sigma = v.positive("noise_multiplier", noise_multiplier)
    a = _as_orders(orders)
    if q == 1.0:
        return a * (a - 1.0) / (2.0 * sigma * sigma)
    out = np.empty_like(a)
    is_int = a == np.round(a)
    if is_int.any():
        out[is_int] = _log_a_int(q, sigma, a[is_int])
    if (~is_int).any():
        out[~is_int] = _log_a_frac(q, sigma, a[~is_int], warnings)
    return out


def rdp_sampled_gaussian(*, sample_rate: float, noise_multiplier: float, orders,
                         warnings: list | None = None) -> np.ndarray:
    r"""RDP of one step of the Poisson-sampled Gaussian mechanism (add/remove adjacency).

    ε(α) = log(A_α)/(α − 1) (Mironov, Talwar, Zhang 2019, §3.3, Thm 4 for the order of
    the two distributions), capped at the unsampled α/(2σ²) (quasi-convexity of Rényi
    divergence, Mironov 2017) and floored at 0. q = 1 is the Gaussian, α/(2σ²).

    Args:
        sample_rate: q in (0, 1].
        noise_multiplier: σ, noise std divided by the L2 sensitivity (clipping norm); > 0.
        orders: Rényi orders α > 1, shape (m,).
        warnings: optional list collecting messages about orders whose series did not converge.

    Returns:
        ε(α), shape (m,); finite, never NaN (an order whose series did not converge gets
        the unsampled α/(2σ²), with a warning).

    Raises:
        ParameterError: q outside (0, 1], σ ≤ 0, or an order ≤ 1.
    """
    la = log_a_sampled_gaussian(sample_rate=sample_rate, noise_multiplier=noise_multiplier,
                                orders=orders, warnings=warnings)
    a = _as_orders(orders)
    gauss = a / (2.0 * float(noise_multiplier) ** 2)
    return np.maximum(np.minimum(la / (a - 1.0), gauss), 0.0)


def rdp_laplace(*, scale: float, orders) -> np.ndarray:
    r"""RDP of the Laplace mechanism with scale b (in units of the L1 sensitivity).

    ε(α) = log(α/(2α−1)·e^{(α−1)/b} + (α−1)/(2α−1)·e^{−α/b})/(α − 1)
    (Mironov 2017, Table 2 / Prop. 6), capped at the pure ε = 1/b; evaluated without
    cancellation and rounded up (:func:`dpcalc.mechanisms.conversions.rdp_laplace`).

    Args:
        scale: b/Δ₁ > 0.
        orders: Rényi orders α > 1, shape (m,).

    Returns:
        ε(α), shape (m,).
    """
    from dpcalc.mechanisms.conversions import rdp_laplace as _rdp_laplace

    return _rdp_laplace(v.positive("scale", scale), _as_orders(orders))


def rdp_pure_dp(*, epsilon: float, orders) -> np.ndarray:
    r"""RDP of any ε-DP mechanism: that of randomized response, p = e^ε/(1+e^ε).

    ε(α) = log(p^α(1−p)^{1−α} + (1−p)^α p^{1−α})/(α − 1) (Mironov 2017, Table 2);
    valid for every ε-DP mechanism since randomized response dominates it (Kairouz, Oh,
    Viswanath 2015, Thm 2.1) and Rényi divergence satisfies data processing. Capped at
    min(ε, αε²/2) (Bun & Steinke 2016, Prop. 3.3); evaluated without cancellation and rounded
    up (:func:`dpcalc.mechanisms.conversions.rdp_pure_dp`).

    Args:
        epsilon: ε ≥ 0.
        orders: Rényi orders α > 1, shape (m,).

    Returns:
        ε(α), shape (m,).
    """
    from dpcalc.mechanisms.conversions import rdp_pure_dp as _rdp_pure_dp

    return _rdp_pure_dp(v.nonnegative("epsilon", epsilon), _as_orders(orders))


def rdp_bounded_range(*, epsilon: float, orders) -> np.ndarray:
    r"""RDP of any ε-bounded-range mechanism (e.g. the exponential mechanism).

    ε(α) = min(αε²/8, :func:`rdp_pure_dp` (ε)): an ε-BR mechanism is (ε²/8)-zCDP (Cesar &
    Rogers 2021: Hoeffding's lemma on a privacy loss of range ε) and ε-DP (Dong, Durfee,
    Rogers 2020 §2).

    Args:
        epsilon: ε > 0, the width of the privacy-loss range.
        orders: Rényi orders α > 1, shape (m,).

    Returns:
        ε(α), shape (m,).
    """
    eps = v.positive("epsilon", epsilon)
    a = _as_orders(orders)
    return np.minimum(a * (eps * eps / 8.0), rdp_pure_dp(epsilon=eps, orders=a))


# ---------------------------------------------------------------------------
# Events -> composed RDP curve
# ---------------------------------------------------------------------------

_REPLACE_REASON = (
    "the RDP of the Poisson-sampled Gaussian implemented here is for add/remove "
    "adjacency (Mironov, Talwar, Zhang 2019); neighboring='replace' is not supported "
    "for sampled mechanisms by this accountant")


def _pate_events() -> tuple[type, ...]:
    from dpcalc import events

    return (events.LNMaxEvent, events.GNMaxEvent, events.PateThresholdEvent, events.PateVotesEvent)


def check_event(event: Event, *, neighboring: str = "add-remove") -> None:
    """Raise :class:`UnsupportedEventError` (with the reason) unless the RDP accountant
    can account for ``event`` under ``neighboring``.

    Supported: Gaussian, Laplace, (ε, 0)-DP events, ε-bounded-range (exponential mechanism)
    events, Poisson-sampled Gaussian (add/remove only), repeat-and-select of any of these
    (:class:`~dpcalc.events.TuningEvent`, Papernot & Steinke 2022), and self-compositions /
    compositions of these.
    """
    if isinstance(event, (SelfComposedEvent, TuningEvent, EpochSampledEvent)):
        # shuffle / balls-in-bins: an epoch is at most one run of the mechanism (dpcalc.events.flatten)
        check_event(event.event, neighboring=neighboring)
    elif isinstance(event, ComposedEvent):
        for e in event.events:
            check_event(e, neighboring=neighboring)
    elif isinstance(event, (GaussianEvent, LaplaceEvent, ExponentialMechanismEvent)):
        return
    elif isinstance(event, EpsilonDeltaEvent):
        if event.delta > 0:
            raise UnsupportedEventError(
                f"an (epsilon, delta)-DP guarantee with delta={event.delta:g} > 0 has no finite "
                "Rényi-DP bound; only pure (delta = 0) guarantees can be converted to RDP")
    elif is_sampler_event(event):  # fixed-size, truncated Poisson: dpcalc/accounting/_sampling.py
        check_rdp_sampler(event, neighboring)
    elif isinstance(event, _pate_events()):
        from dpcalc.accounting import pate
        pate.check_pate_event(event, neighboring=neighboring)
    elif isinstance(event, PoissonSampledEvent):
        if neighboring != "add-remove":
            raise UnsupportedEventError(_REPLACE_REASON)
        if not isinstance(event.event, GaussianEvent):
            raise UnsupportedEventError(
                "RDP amplification by Poisson sampling is implemented for the Gaussian mechanism "
                f"only, got a sampled {type(event.event).__name__}")
    else:
        raise UnsupportedEventError(
            f"the RDP accountant does not know the RDP of {type(event).__name__}")


def _rdp(event: Event, orders: np.ndarray, warnings: list | None,
         sensitivity: float = 1.0) -> np.ndarray:
    # ``sensitivity``: 1 under add/remove; 2 under replace-one, because dpcalc's noise
    # multipliers and Laplace scales are relative to one record's contribution bound
    # (the clipping norm), and replacing a record moves the query by up to twice that
    # (the same convention as the PLD accountant).
    if isinstance(event, SelfComposedEvent) and isinstance(event.event, EpochSampledEvent):
        # shuffle / balls-in-bins: ⌈count/T_e⌉ runs of the mechanism (dpcalc.events.EpochSampledEvent)
        return event.event.epochs(event.count) * _rdp(event.event.event, orders, warnings, sensitivity)
    if isinstance(event, EpochSampledEvent):
        return _rdp(event.event, orders, warnings, sensitivity)
    if isinstance(event, SelfComposedEvent):
        if event.count == 0:
            return np.zeros_like(orders)
        return event.count * _rdp(event.event, orders, warnings, sensitivity)
    if isinstance(event, ComposedEvent):
        total = np.zeros_like(orders)
        for e in event.events:
            total = total + _rdp(e, orders, warnings, sensitivity)
        return total
    if isinstance(event, GaussianEvent):
        return orders * sensitivity ** 2 / (2.0 * event.noise_multiplier ** 2)
    if isinstance(event, TuningEvent):
        return _rdp_tuning(event, orders, warnings, sensitivity)
    if isinstance(event, LaplaceEvent):
        return rdp_laplace(scale=event.scale / sensitivity, orders=orders)
    if isinstance(event, EpsilonDeltaEvent):
        return rdp_pure_dp(epsilon=event.epsilon, orders=orders)
    if isinstance(event, ExponentialMechanismEvent):
        return rdp_bounded_range(epsilon=event.epsilon, orders=orders)
    if is_sampler_event(event):
        return rdp_sampler_step(event, orders, warnings, "replace" if sensitivity == 2.0 else "add-remove")
    if isinstance(event, _pate_events()):  # PATE queries and runs (dpcalc.accounting.pate)
        from dpcalc.accounting import pate
        return pate.rdp_of_pate_event(event, orders, sensitivity)
    if isinstance(event, PoissonSampledEvent):
        g = event.event
        return rdp_sampled_gaussian(sample_rate=event.sample_rate,
                                    noise_multiplier=g.noise_multiplier, orders=orders,
                                    warnings=warnings)
    raise UnsupportedEventError(  # pragma: no cover - check_event runs first
        f"the RDP accountant does not know the RDP of {type(event).__name__}")


#: orders of a repeat-and-select's base curve: the default orders and larger ones up to 1024
#: (the λ̂ of Papernot & Steinke Thm 2 gains from large orders when K is large)
TUNING_ORDERS: tuple[float, ...] = DEFAULT_ORDERS + tuple(float(x) for x in range(320, 1025, 64))


@functools.lru_cache(maxsize=64)
def _base_curve(event: Event, sensitivity: float) -> tuple[np.ndarray, tuple[str, ...]]:
    """One run's RDP at :data:`TUNING_ORDERS` (cached: the order refinement and the σ search
    ask for a repeat-and-select of the same base many times), with its warnings."""
    warnings: list[str] = []
    out = _rdp(event, np.asarray(TUNING_ORDERS), warnings, sensitivity)
    out.setflags(write=False)
    return out, tuple(warnings)


@functools.lru_cache(maxsize=64)
def _hat_term(event: Event, sensitivity: float, gamma: float, pure: float | None) -> float:
    """The λ̂ term of Papernot & Steinke Thm 2 for one run (cached), refined between orders."""
    from dpcalc.accounting import tuning

    base, _ = _base_curve(event, sensitivity)
    return tuning.hat_minimum(
        np.asarray(TUNING_ORDERS), base, gamma, pure=pure,
        rdp_at=lambda x: float(_rdp(event, np.array([x]), None, sensitivity)[0]))


def _rdp_tuning(event: TuningEvent, orders: np.ndarray, warnings: list | None,
                sensitivity: float) -> np.ndarray:
    """RDP of a repeat-and-select at ``orders`` (:mod:`dpcalc.accounting.tuning`): the base's
    curve is computed on ``orders`` ∪ :data:`TUNING_ORDERS` (the λ̂ of Thm 2 and the orders of
    the δ̂ of Thm 6 range over that union; every order gives a valid bound)."""
    from dpcalc.accounting import tuning
    from dpcalc.mechanisms.gaussian import gaussian_delta

    default = np.asarray(TUNING_ORDERS)
    base_default, warns = _base_curve(event.event, sensitivity)
    if warnings is not None:
        warnings.extend(w for w in warns if w not in warnings)
    extra = np.setdiff1d(orders, default)
    union = np.union1d(default, orders)
    base = np.empty_like(union)
    base[np.isin(union, default)] = base_default
    if extra.size:
        base[np.isin(union, extra)] = _rdp(event.event, extra, warnings, sensitivity)
    mu = tuning.gaussian_mu(event.event, sensitivity)
    pure = tuning.pure_epsilon(event.event, sensitivity)
    hat = None
    if event.eta is not None and event.mean_runs > 1.0:
        hat = _hat_term(event.event, sensitivity, tuning.tnb_gamma(event.mean_runs, event.eta), pure)
    out = tuning.repeat_and_select_rdp(
        union, base, distribution=event.distribution, mean_runs=event.mean_runs, eta=event.eta,
        pure=pure, hat=hat,
        delta_hat=None if mu is None else (lambda e: gaussian_delta(epsilon=e, mu=mu)))
    return out[np.searchsorted(union, orders)]


def rdp_of_event(event: Event, orders, *, neighboring: str = "add-remove",
                 warnings: list | None = None) -> np.ndarray:
    r"""The composed RDP curve of a mechanism history (Mironov 2017, Prop. 1: RDP adds up).

    Args:
        event: the history (e.g. :func:`dpcalc.events.dpsgd_event`, or a
            :class:`~dpcalc.events.ComposedEvent` of such segments).
        orders: Rényi orders α > 1, shape (m,).
        neighboring: ``"add-remove"`` (default) or ``"replace"``. Noise multipliers and
            Laplace scales are relative to one record's contribution bound (the add/remove
            sensitivity, e.g. the clipping norm), so under ``"replace"`` the unsampled
            Gaussian/Laplace have sensitivity 2.
        warnings: optional list collecting messages about orders whose series did not converge.

    Returns:
        ε(α), shape (m,); never NaN (``+inf`` only on overflow, e.g. a vanishing σ).

    Raises:
        ParameterError: an order ≤ 1.
        UnsupportedEventError: ``event`` is not supported (the message says why).
    """
    a = _as_orders(orders)
    check_event(event, neighboring=neighboring)
    return _rdp(event, a, warnings, 2.0 if neighboring == "replace" else 1.0)


# ---------------------------------------------------------------------------
# Conversion to (ε, δ)
# ---------------------------------------------------------------------------

def _eps_per_order(a: np.ndarray, rdp: np.ndarray, log_delta: float) -> np.ndarray:
    """CKS 2020 Prop 12 for each order (``inf`` where rdp is ``inf``), floored at 0."""
    with np.errstate(invalid="ignore", over="ignore"):
        eps = rdp + np.log1p(-1.0 / a) - (log_delta + np.log(a)) / (a - 1.0)
        # total variation ≤ sqrt(1 − exp(−KL)) ≤ δ  ⇒  ε = 0 (KL ≤ D_α)
        tv_ok = math.exp(2.0 * log_delta) + np.expm1(-rdp) >= 0
    eps = np.where(tv_ok, 0.0, eps)
    eps = np.where(np.isnan(eps), np.inf, eps)
    return np.maximum(eps, 0.0)


def _log_delta_per_order(a: np.ndarray, rdp: np.ndarray, epsilon: float) -> np.ndarray:
    """log δ for each order: min of CKS 2020 Prop 12 inverted and the TV/KL bound; ≤ 0."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        cks = (a - 1.0) * (rdp - epsilon + np.log1p(-1.0 / a)) - np.log(a)
        tv = 0.5 * np.log(-np.expm1(-rdp))
        out = np.minimum(cks, tv)
    out = np.where(np.isnan(out), 0.0, out)
    return np.minimum(out, 0.0)


def _curve(orders, rdp) -> tuple[np.ndarray, np.ndarray]:
    """Validated (orders, RDP values) of one curve, both shape (m,)."""
    a = _as_orders(orders)
    r = np.asarray(rdp, dtype=float)
    if r.shape != a.shape or np.any(np.isnan(r)) or np.any(r < 0):
        raise ParameterError("rdp", "non-negative, one value per order", rdp)
    return a, r


def epsilon_from_rdp(*, orders, rdp, delta: float) -> tuple[float, float]:
    r"""Smallest ε over the given orders for an RDP curve, at δ.

    ε = min_α ε(α) + log((α−1)/α) − (log δ + log α)/(α − 1) (Canonne, Kamath, Steinke
    2020, Prop. 12; Balle et al. 2020, Thm 21), and 0 when δ ≥ √(1 − e^{−ε(α)}).

    Args:
        orders: Rényi orders α > 1, shape (m,).
        rdp: ε(α), shape (m,) (``inf`` entries are ignored).
        delta: δ in (0, 1).

    Returns:
        ``(epsilon, order)``: the minimum (≥ 0; ``inf`` if every order is ``inf``) and the
        order attaining it.

    Raises:
        ParameterError: bad ``delta``, orders or mismatched shapes.
    """
    a, r = _curve(orders, rdp)
    d = v.open_unit("delta", delta)
    eps = _eps_per_order(a, r, math.log(d))
    i = int(np.argmin(eps))
    return float(eps[i]), float(a[i])


def delta_from_rdp(*, orders, rdp, epsilon: float) -> tuple[float, float]:
    r"""Smallest δ over the given orders for an RDP curve, at ε (CKS 2020 Prop. 12 inverted):
    log δ = (α−1)(ε(α) − ε + log(1 − 1/α)) − log α, or the TV bound √(1 − e^{−ε(α)}).

    Args:
        orders: Rényi orders α > 1, shape (m,).
        rdp: ε(α), shape (m,).
        epsilon: ε ≥ 0.

    Returns:
        ``(delta, order)`` with δ in [0, 1].

    Raises:
        ParameterError: bad ``epsilon``, orders or mismatched shapes.
    """
    a, r = _curve(orders, rdp)
    e = v.nonnegative("epsilon", epsilon)
    ld = _log_delta_per_order(a, r, e)
    i = int(np.argmin(ld))
    return float(math.exp(ld[i])), float(a[i])


# ---------------------------------------------------------------------------
# The accountant
# ---------------------------------------------------------------------------

def _fractional_floor(af: np.ndarray, best_int: np.ndarray, q: np.ndarray, sigma: np.ndarray,
                      count: np.ndarray, log_delta: float) -> np.ndarray:
    r"""For T-fold Poisson-sampled Gaussians (one per row): a value certainly below the CKS ε
    (:func:`_eps_per_order`) of every fractional order in ``af`` and certainly above the best
    integer-order ε ``best_int`` — so those orders cannot be the minimum and need not be
    computed — or NaN where that is not certain.

    The computed RDP r at any order α > 1 is an upper bound on T·D_α(P‖Q) ≥ T·KL(P‖Q) (Rényi
    divergences grow with the order, van Erven & Harremoës 2014, Thm 3) ≥ T·2·TV(P, Q)²
    (Pinsker), and TV((1−q)N(0,σ²) + qN(1,σ²), N(0,σ²)) = q·erf(1/(2√2σ)). With r ≥ R := that
    bound (halved for round-off), an order's ε is r + ln(1 − 1/α) − (ln δ + ln α)/(α − 1)
    ≥ c_α + R, unless the total-variation shortcut gives 0, which needs
    δ² ≥ 1 − e^{−r} ≥ min(r/2, 0.6); we require min(R/2, 0.6) > 2δ² to exclude it.
    """
    r_low = 0.5 * count * 2.0 * q * q * np.array([math.erf(1.0 / (2.0 * math.sqrt(2.0) * x)) ** 2
                                                  for x in sigma.tolist()])
    c = np.min(np.log1p(-1.0 / af) - (log_delta + np.log(af)) / (af - 1.0))
    floor = c + r_low
    tv_impossible = np.minimum(0.5 * r_low, 0.6) > 2.0 * math.exp(2.0 * log_delta)
    ok = (np.isfinite(best_int) & tv_impossible
          & (floor > best_int + 1e-9 * (1.0 + np.abs(best_int))))
    return np.where(ok, floor, np.nan)


class RdpAccountant(Accountant):
    r"""Rényi-DP accountant (Mironov 2017; Mironov, Talwar, Zhang 2019) with the
    Canonne–Kamath–Steinke 2020 (Prop. 12) conversion, minimised over orders.

    The best order of the grid is refined by bounded Brent search between its
    neighbouring grid orders (fractional orders allowed), so the result does not depend
    on the grid spacing; ``details["order"]`` is the order used, and
    ``details["warnings"]`` (when present) says e.g. that it sits at the grid's edge.

    Args:
        neighboring: ``"add-remove"`` (default) or ``"replace"`` (sampled mechanisms are
            then unsupported).
        orders: Rényi orders α > 1 to search (default :data:`DEFAULT_ORDERS`, 1.01…256).
        refine: refine the best order between its grid neighbours (default True).

    Raises:
        ParameterError: bad ``neighboring`` or ``orders``.
    """

    name = "rdp"
    certified = True
    source = SOURCE
    short_source = "Mironov17; MTZ19"
    description = "Rényi DP (sampled Gaussian, CKS 2020 conversion, refined order)"
    vectorised_grid = True
    vectorised_dpsgd = True
    plotted_curve = True
    rdp_tradeoff = True
    all_batch_samplers = True

    def __init__(self, *, neighboring: str = "add-remove", orders: Sequence[float] | None = None,
                 refine: bool = True) -> None:
        super().__init__(neighboring=neighboring)
        a = DEFAULT_ORDERS if orders is None else orders
        # sorted distinct orders (np.unique would import numpy.ma: ~40 ms on every start-up)
        o = np.sort(_as_orders(a))
        self.orders = o[np.concatenate(([True], o[1:] != o[:-1]))] if o.size else o
        self.refine = bool(refine)

    def check(self, event: Event) -> None:
        check_event(event, neighboring=self.neighboring)

    def rdp(self, event: Event, orders=None, warnings: list | None = None) -> np.ndarray:
        """The composed RDP curve of ``event`` at ``orders`` (default: this accountant's grid)."""
        return rdp_of_event(event, self.orders if orders is None else orders,
                            neighboring=self.neighboring, warnings=warnings)

    def rdp_curve(self, event: Event) -> tuple[np.ndarray, np.ndarray]:
        """``(orders, rdp)``: this accountant's order grid, shape (k,), and the composed RDP
        curve of ``event`` at it, shape (k,) (Mironov 2017, Prop. 1).

        Raises:
            UnsupportedEventError: the event is not supported.
        """
        return self.orders.copy(), self.rdp(event)

    # --- shared search: grid, then bounded refinement ---------------------------------
    def _search(self, event: Event, objective, floor: float) -> tuple[float, float, list[str]]:
        """Minimise ``objective(orders, rdp) -> values`` over the grid and refine.

        ``floor`` is the objective's smallest possible value (0 for ε, −inf for log δ):
        an optimum there needs no edge warning.

        Returns ``(best value, best order, warnings)``.
        """
        warnings: list[str] = []
        a = self.orders
        rdp = self.rdp(event, a, warnings)
        vals = objective(a, rdp)
        i = int(np.argmin(vals))
        best, order = float(vals[i]), float(a[i])
        if not math.isfinite(best):
            return best, order, warnings
        finite_idx = np.flatnonzero(np.isfinite(vals))
        if self.refine and a.size > 1 and best > floor:
            lo = a[i - 1] if i > 0 else a[i]
            hi = a[i + 1] if i < a.size - 1 else a[i]
            def f(x: float) -> float:
                xa = np.array([x])
                val = float(objective(xa, self.rdp(event, xa))[0])
                return val if math.isfinite(val) else 1e300

            x, fx = minimize_bounded(f, float(lo), float(hi), xatol=1e-4 * float(a[i]))
            if math.isfinite(fx) and fx < best:
                best, order = float(fx), float(x)
        if i == finite_idx[0] and best > floor and a.size > 1:
            warnings.append(
                f"the optimal order {order:.6g} is at the smallest order searched "
                f"({a[i]:.6g}); smaller orders might give a tighter bound")
        if i == finite_idx[-1] and best > floor and a.size > 1:
            warnings.append(
                f"the optimal order {order:.6g} is at the largest order searched "
                f"({a[i]:.6g}); larger orders (orders=...) might give a tighter bound")
        return best, order, warnings

    def epsilon(self, event: Event, *, delta: float) -> AccountingResult:
        """ε at δ (CKS 2020 Prop. 12, minimised over orders); see the class docstring.

        Raises:
            ParameterError: ``delta`` not in (0, 1).
            UnsupportedEventError: the event is not supported (the message says why).
        """
        d = v.open_unit("delta", delta)
        self.check(event)
        if (isinstance(event, SelfComposedEvent) and isinstance(event.event, PoissonSampledEvent)
                and event.count > 0 and self.neighboring == "add-remove"):
            # DP-SGD: the steps below, through the many-runs code (one code path, so that
            # epsilon_dpsgd_many equals this; it skips the fractional orders that cannot win)
            return self._epsilon_sampled_many([event], d)[0]
        log_d = math.log(d)
        eps, order, warnings = self._search(event, lambda a, r: _eps_per_order(a, r, log_d), 0.0)
        details: dict = {"order": order}
        pure = self._pure_tuning(event)
        if pure is not None and pure <= eps:
            # order ∞: a repeat-and-select of a pure-DP base is (2+η)ε-DP (Papernot & Steinke
            # 2022 Cor 3; geometric: 3ε, Liu & Talwar 2019), at every δ
            eps, warnings = pure, []
            details = {"order": math.inf, "pure_dp": True}
        if warnings:
            details["warnings"] = warnings
        reason = None if math.isfinite(eps) else "no order gives a finite RDP bound"
        return AccountingResult(self.name, eps, d, self.certified, details=details,
                                reason=reason, source=self._source(event))

    def epsilon_dpsgd_many(self, *, sample_rates: Sequence[float], noise_multipliers: Sequence[float],
                           steps: Sequence[int], delta: float) -> list[AccountingResult]:
        """ε at δ of many DP-SGD runs at once: entry k is exactly (the same floats, details and
        warnings) ``self.epsilon(dpsgd_event(noise_multiplier=σ_k, sample_rate=q_k,
        steps=T_k), delta=delta)`` (tests/accounting/test_rdp_batch.py), computed with one
        vectorised fractional-order series for all runs (:func:`_log_a_frac` row by row) and
        the order refinements of all runs in step (:func:`dpcalc._numerics.minimize_bounded_steps`).
        Used by ``dpcalc plan`` to calibrate a whole grid in step.

        Args:
            sample_rates: q_k in (0, 1], length n.
            noise_multipliers: σ_k > 0, length n.
            steps: T_k ≥ 0, length n.
            delta: δ in (0, 1).

        Returns:
            n results, in order.

        Raises:
            ParameterError: a parameter out of range, or lengths that differ.
            UnsupportedEventError: as :meth:`epsilon` (e.g. ``neighboring="replace"``).
        """
        from dpcalc.events import dpsgd_event

        d = v.open_unit("delta", delta)
        n = len(sample_rates)
        if len(noise_multipliers) != n or len(steps) != n:
            raise ParameterError("noise_multipliers", f"of length {n} (one per sample rate)",
                                 len(noise_multipliers))
        events = [dpsgd_event(noise_multiplier=s, sample_rate=q, steps=t)
                  for q, s, t in zip(sample_rates, noise_multipliers, steps, strict=True)]
        out: list[AccountingResult | None] = [None] * n
        batch = []
        for k, ev in enumerate(events):
            inner = ev.event if isinstance(ev, SelfComposedEvent) else None
            if (isinstance(inner, PoissonSampledEvent) and ev.count > 0
                    and self.neighboring == "add-remove"):
                batch.append(k)
            else:  # unsampled, zero steps, or unsupported: the one-run path (same answer)
                out[k] = self.epsilon(ev, delta=d)
        if batch:
            for k, res in zip(batch, self._epsilon_sampled_many([events[k] for k in batch], d),
                              strict=True):
                out[k] = res
        return out  # type: ignore[return-value]

    def _epsilon_sampled_many(self, events: list, d: float) -> list[AccountingResult]:
        """:meth:`epsilon_dpsgd_many` for T-fold Poisson-sampled Gaussians (add/remove): the
        steps of :meth:`_search` and :meth:`epsilon`, each on all runs at once."""
        log_d = math.log(d)
        a = self.orders
        n = len(events)
        qs = [e.event.sample_rate for e in events]
        sigmas = [e.event.event.noise_multiplier for e in events]
        counts = np.array([e.count for e in events], dtype=float)[:, None]
        q_arr, s_arr = np.array(qs), np.array(sigmas)
        gauss_den = np.array([2.0 * float(s) ** 2 for s in sigmas])[:, None]

        def curves(orders_rows: np.ndarray, rows: np.ndarray, warn_rows) -> np.ndarray:
            """T·(one step's RDP) of runs ``rows`` at ``orders_rows`` (shape (len(rows), m)),
            as :func:`rdp_sampled_gaussian` then the self-composition compute it."""
            la = np.empty(orders_rows.shape)
            is_int = orders_rows == np.round(orders_rows)
            cols = is_int.all(axis=0)
            if cols.any() and is_int[:, cols].all():  # the same integer orders in every row
                la[:, cols] = _log_a_int_rows([qs[k] for k in rows], [sigmas[k] for k in rows],
                                              orders_rows[0, cols])
                rest = is_int & ~cols
            else:
                rest = is_int
            for r, k in enumerate(rows):  # other integer orders: run by run
                if rest[r].any():
                    la[r, rest[r]] = _log_a_int(qs[k], sigmas[k], orders_rows[r, rest[r]])
            fr = np.nonzero(~is_int)
            if fr[0].size:
                rk = rows[fr[0]]
                wl = None if warn_rows is None else [[] for _ in range(rk.size)]
                la[fr] = _log_a_frac(q_arr[rk], s_arr[rk], orders_rows[fr], wl)
                if wl is not None:
                    for r, msgs in zip(fr[0], wl, strict=True):
                        warn_rows[r].extend(msgs)
            gauss = orders_rows / gauss_den[rows]
            one = np.maximum(np.minimum(la / (orders_rows - 1.0), gauss), 0.0)
            return counts[rows] * one

        warnings: list[list[str]] = [[] for _ in range(n)]
        rows = np.arange(n)
        is_int = a == np.round(a)
        vals = np.empty((n, a.size))
        if is_int.all() or not is_int.any():
            vals[:] = _eps_per_order(a, curves(np.broadcast_to(a, (n, a.size)).copy(), rows,
                                               warnings), log_d)
        else:
            # integer orders first; the fractional ones only where they can matter
            ai = a[is_int]
            vals[:, is_int] = _eps_per_order(ai, curves(np.broadcast_to(ai, (n, ai.size)).copy(),
                                                        rows, warnings), log_d)
            bound = _fractional_floor(a[~is_int], vals[:, is_int].min(axis=1), q_arr, s_arr,
                                      counts[:, 0], log_d)
            need = np.flatnonzero(np.isnan(bound))
            vals[:, ~is_int] = bound[:, None]
            if need.size:
                af = a[~is_int]
                wf: list[list[str]] = [[] for _ in range(need.size)]
                vals[np.ix_(need, np.flatnonzero(~is_int))] = _eps_per_order(
                    af, curves(np.broadcast_to(af, (need.size, af.size)).copy(), need, wf), log_d)
                for r, k in enumerate(need.tolist()):  # the scalar path's order: fractional first
                    warnings[k][:0] = wf[r]
        best = [0.0] * n
        order = [0.0] * n
        idx = [0] * n
        gens: dict[int, object] = {}
        pending: dict[int, float] = {}
        for k in range(n):
            i = int(np.argmin(vals[k]))
            idx[k], best[k], order[k] = i, float(vals[k, i]), float(a[i])
            if math.isfinite(best[k]) and self.refine and a.size > 1 and best[k] > 0.0:
                lo = a[i - 1] if i > 0 else a[i]
                hi = a[i + 1] if i < a.size - 1 else a[i]
                gen = minimize_bounded_steps(float(lo), float(hi), xatol=1e-4 * float(a[i]))
                gens[k], pending[k] = gen, next(gen)
        while pending:
            ks = np.array(sorted(pending))
            xs = np.array([pending[k] for k in ks])[:, None]
            fx = _eps_per_order(xs, curves(xs, ks, None), log_d)[:, 0]
            for k, val in zip(ks.tolist(), fx.tolist(), strict=True):
                val = val if math.isfinite(val) else 1e300
                try:
                    pending[k] = gens[k].send(val)
                except StopIteration as stop:
                    del pending[k]
                    x, f_x = stop.value
                    if math.isfinite(f_x) and f_x < best[k]:
                        best[k], order[k] = float(f_x), float(x)
        results = []
        for k, event in enumerate(events):
            warns = warnings[k]
            eps = best[k]
            if math.isfinite(eps):
                finite_idx = np.flatnonzero(np.isfinite(vals[k]))
                i = idx[k]
                if i == finite_idx[0] and eps > 0.0 and a.size > 1:
                    warns.append(
                        f"the optimal order {order[k]:.6g} is at the smallest order searched "
                        f"({a[i]:.6g}); smaller orders might give a tighter bound")
                if i == finite_idx[-1] and eps > 0.0 and a.size > 1:
                    warns.append(
                        f"the optimal order {order[k]:.6g} is at the largest order searched "
                        f"({a[i]:.6g}); larger orders (orders=...) might give a tighter bound")
            details: dict = {"order": order[k]}
            if warns:
                details["warnings"] = warns
            reason = None if math.isfinite(eps) else "no order gives a finite RDP bound"
            results.append(AccountingResult(self.name, eps, d, self.certified, details=details,
                                            reason=reason, source=self._source(event)))
        return results

    def delta(self, event: Event, *, epsilon: float) -> AccountingResult:
        """δ at ε (CKS 2020 Prop. 12 inverted, minimised over orders).

        Raises:
            ParameterError: ``epsilon`` negative or not finite.
            UnsupportedEventError: the event is not supported.
        """
        e = v.nonnegative("epsilon", epsilon)
        self.check(event)
        log_d, order, warnings = self._search(event, lambda a, r: _log_delta_per_order(a, r, e),
                                             -math.inf)
        details: dict = {"order": order}
        pure = self._pure_tuning(event)
        if pure is not None and pure <= e and log_d > -math.inf:
            log_d, warnings, details = -math.inf, [], {"order": math.inf, "pure_dp": True}
        if warnings:
            details["warnings"] = warnings
        return AccountingResult(self.name, e, float(math.exp(min(log_d, 0.0))), self.certified,
                                details=details, source=self._source(event))

    def _source(self, event: Event) -> str:
        from dpcalc.accounting import tuning

        return f"{self.source}; repeat-and-select: {tuning.SOURCE}" if tuning.contains_tuning(event) else self.source

    def _pure_tuning(self, event: Event) -> float | None:
        """The pure ε-DP bound of a history containing a repeat-and-select, when every part is
        pure (:func:`dpcalc.accounting.tuning.pure_epsilon`); None otherwise (other histories
        keep their RDP answer unchanged)."""
        from dpcalc.accounting import tuning

        if not tuning.contains_tuning(event):
            return None
        return tuning.pure_epsilon(event, 2.0 if self.neighboring == "replace" else 1.0)

    def epsilon_floor(self, delta: float) -> float:
        """The ε the CKS conversion gives at δ for an RDP cost that is positive but
        negligible, over this accountant's orders: min_α log((α−1)/α) − (log δ + log α)/(α−1)
        (≈ ln(1/δ)/(max order − 1)); only a cost below δ² (the total-variation shortcut)
        certifies less."""
        d = v.open_unit("delta", delta)
        a = self.orders
        return max(float(np.min(np.log1p(-1.0 / a) - (math.log(d) + np.log(a)) / (a - 1.0))), 0.0)

    def infeasible_hint(self, target_epsilon: float, *, delta: float) -> str:
        """Why ``target_epsilon`` at ``delta`` may be out of reach (the tail of an
        :class:`~dpcalc.errors.InfeasibleError` message): the conversion's floor
        :meth:`epsilon_floor` at ``delta`` with this accountant's largest order."""
        d = v.open_unit("delta", delta)
        amax = float(self.orders[-1])
        advice = ("raise epsilon or delta, take fewer steps, pass larger orders (orders=...), or "
                  "use a tighter accountant (pld)")
        floor = self.epsilon_floor(d)
        if target_epsilon <= floor:
            return (f"with Rényi orders up to {amax:g} the RDP conversion cannot certify epsilon "
                    f"below about {floor:.4g} at delta={d:g} (target {target_epsilon:g}) unless the RDP "
                    f"cost is below delta^2; {advice}")
        return (f"the RDP cost of this many compositions stays too large even at the largest "
                f"noise multiplier, and with Rényi orders up to {amax:g} the conversion alone "
                f"costs about {floor:.4g} at delta={d:g}; {advice}")

    # --- many numbers of compositions at once (dpcalc compose --steps-grid) -------------
    def epsilon_grid(self, steps, counts, *, delta: float):
        """ε at ``delta`` for every row of ``counts`` in one pass: RDP curves add up over
        compositions (Mironov 2017, Prop 1), so each step's curve is computed once and the
        grid is one matrix product plus the CKS 2020 conversion per order. Every order gives
        a valid bound, so the minimum over this accountant's orders is certified; unlike
        :meth:`epsilon` it is not refined between orders (slightly above, never below).

        Args:
            steps: one-run mechanisms, length n.
            counts: integer array of shape (m, n), entries ≥ 0.
            delta: δ in (0, 1).

        Raises:
            ParameterError: bad ``delta``.
            UnsupportedEventError: a step is not supported.
        """
        d = v.open_unit("delta", delta)
        total = additive_totals(counts, [self.rdp(s) for s in steps])
        vals = _eps_per_order(self.orders[None, :], total, math.log(d)).min(axis=1)
        return GridResult.every_row(vals,
                          "grid points use the accountant's order grid (not refined between orders)")

    def delta_grid(self, steps, counts, *, epsilon: float):
        """δ at ``epsilon`` for every row of ``counts`` in one pass (see :meth:`epsilon_grid`)."""
        e = v.nonnegative("epsilon", epsilon)
        total = additive_totals(counts, [self.rdp(s) for s in steps])
        vals = np.exp(_log_delta_per_order(self.orders[None, :], total, e).min(axis=1))
        return GridResult.every_row(vals,
                          "grid points use the accountant's order grid (not refined between orders)")
