r"""RDP of the Poisson-sampled Gaussian mechanism: the numerics of log A_α (Mironov, Talwar,
Zhang 2019, §3.3), add/remove adjacency.

.. math:: A_α = E_{z∼N(0,σ²)}\big[((1−q) + q\,e^{(2z−1)/(2σ²)})^α\big],
   \qquad ε(α) = \log(A_α)/(α − 1).

* Integer α: binomial expansion. We evaluate
  :math:`A_α − 1 = Σ_{k≥2} \binom{α}{k}(1−q)^{α−k}q^k\,\mathrm{expm1}((k²−k)/(2σ²))`
  (every term positive, so no cancellation even at σ = 10⁴) and ``log1p``.
* Fractional α: the two-series formula of §3.3 with log-erfc (``log_ndtr``) terms,
  summed in signed log space, as A_α − 1 (no cancellation against the 1) unless q is
  near ½. Past index α + 1 both series alternate with decreasing magnitudes, so the
  truncation error is bounded by the last terms, which we add (pessimistic), with a
  round-off margin. An order whose series does not reach a remainder of
  ``_FRAC_ACCEPT`` within ``_FRAC_MAX_TERMS`` terms falls back to the unsampled bound
  α/(2σ²), with a warning. Checked against mpmath quadrature (tests/accounting/test_rdp.py).

:func:`rdp_sampled_gaussian` is one step; :func:`rdp_sampled_gaussian_rows` the same floats for
many (q, σ) runs at once (``dpcalc plan``), and :func:`fractional_floor` tells which fractional
orders cannot win the conversion for a T-fold composition (so they need not be computed).
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
    signed_logsumexp,
)
from dpcalc._numerics import log_abs_expm1 as _log_abs_expm1
from dpcalc.accounting.rdp_conversion import as_orders, conversion_floor

__all__ = [
    "log_a_sampled_gaussian",
    "rdp_sampled_gaussian",
    "rdp_sampled_gaussian_rows",
    "log_a_int",
    "log_a_int_rows",
    "log_a_frac",
    "fractional_floor",
]

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


def log_a_int(q: float, sigma: float, alphas: np.ndarray) -> np.ndarray:
    """log A_α for integer orders α ≥ 2 and q in (0, 1) (all positive terms, see module doc)."""
    return log_a_int_rows([q], [sigma], alphas)[0]


def log_a_int_rows(qs: Sequence[float], sigmas: Sequence[float], alphas: np.ndarray) -> np.ndarray:
    """:func:`log_a_int` for many (q, σ) at the same integer orders, shape (n, m); row r is
    the same floats as ``log_a_int(qs[r], sigmas[r], alphas)`` (elementwise arithmetic and
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


def log_a_frac(q, sigma, alphas: np.ndarray, warnings: list | None) -> np.ndarray:
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
        out = log_a_frac(float(qa[0]), float(sa[0]), alphas, flat)
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
    """:func:`log_a_frac` for rows (qa[k], sa[k], alphas[k]) that share ``mode``; ``shared``:
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
    a = as_orders(orders)
    if q == 1.0:
        return a * (a - 1.0) / (2.0 * sigma * sigma)
    out = np.empty_like(a)
    is_int = a == np.round(a)
    if is_int.any():
        out[is_int] = log_a_int(q, sigma, a[is_int])
    if (~is_int).any():
        out[~is_int] = log_a_frac(q, sigma, a[~is_int], warnings)
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
    a = as_orders(orders)
    gauss = a / (2.0 * float(noise_multiplier) ** 2)
    return np.maximum(np.minimum(la / (a - 1.0), gauss), 0.0)


def rdp_sampled_gaussian_rows(sample_rates: Sequence[float], noise_multipliers: Sequence[float],
                              orders_rows: np.ndarray, warnings_rows: list | None = None) -> np.ndarray:
    r"""RDP of one step of the Poisson-sampled Gaussian for many runs at once: row r is run
    (q_r, σ_r) at the orders ``orders_rows[r]``, the same floats as
    :func:`rdp_sampled_gaussian` gives for that run (tests/accounting/test_rdp_batch.py), with
    one vectorised fractional-order series for all rows (:func:`log_a_frac` row by row).

    Args:
        sample_rates: q_r in (0, 1), length n (not validated: the caller's events are).
        noise_multipliers: σ_r > 0, length n.
        orders_rows: Rényi orders, shape (n, m).
        warnings_rows: optional list of n lists, row r collecting run r's messages about
            orders whose series did not converge.

    Returns:
        ε(α), shape (n, m).
    """
    qs, sigmas = list(sample_rates), list(noise_multipliers)
    q_arr, s_arr = np.array(qs), np.array(sigmas)
    gauss_den = np.array([2.0 * float(s) ** 2 for s in sigmas])[:, None]
    la = np.empty(orders_rows.shape)
    is_int = orders_rows == np.round(orders_rows)
    cols = is_int.all(axis=0)
    if cols.any() and is_int[:, cols].all():  # the same integer orders in every row
        la[:, cols] = log_a_int_rows(qs, sigmas, orders_rows[0, cols])
        rest = is_int & ~cols
    else:
        rest = is_int
    for r in range(len(qs)):  # other integer orders: run by run
        if rest[r].any():
            la[r, rest[r]] = log_a_int(qs[r], sigmas[r], orders_rows[r, rest[r]])
    fr = np.nonzero(~is_int)
    if fr[0].size:
        rk = fr[0]
        wl = None if warnings_rows is None else [[] for _ in range(rk.size)]
        la[fr] = log_a_frac(q_arr[rk], s_arr[rk], orders_rows[fr], wl)
        if wl is not None:
            for r, msgs in zip(fr[0], wl, strict=True):
                warnings_rows[r].extend(msgs)
    gauss = orders_rows / gauss_den
    return np.maximum(np.minimum(la / (orders_rows - 1.0), gauss), 0.0)


def fractional_floor(af: np.ndarray, best_int: np.ndarray, q: np.ndarray, sigma: np.ndarray,
                      count: np.ndarray, log_delta: float) -> np.ndarray:
    r"""For T-fold Poisson-sampled Gaussians (one per row): a value certainly below the CKS ε
    (:func:`~dpcalc.accounting.rdp_conversion.epsilon_per_order`) of every fractional order in ``af`` and certainly above the best
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
    c = np.min(conversion_floor(af, log_delta))
    floor = c + r_low
    tv_impossible = np.minimum(0.5 * r_low, 0.6) > 2.0 * math.exp(2.0 * log_delta)
    ok = (np.isfinite(best_int) & tv_impossible
          & (floor > best_int + 1e-9 * (1.0 + np.abs(best_int))))
    return np.where(ok, floor, np.nan)
