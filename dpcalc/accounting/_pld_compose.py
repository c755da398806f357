r"""Composition of discrete privacy-loss distributions and the (ε, δ) read-out.

Composition of independent mechanisms adds their privacy losses, so the composed
PMF is the convolution of the PMFs (Meiser & Mohammadi 2018; Koskela, Jälkö,
Honkela 2020). Mass at +∞ composes as p∞ = 1 − Π(1 − p∞,i), computed with
``-expm1(Σ log1p(-p∞,i))``.

* **Self-composition** of T identical steps: the T-th power of the discrete Fourier
  transform on a window of N points centred on the composed mean. The window
  is sized by a Chernoff bound computed from the discrete PMF itself,
  P(ΣL ≥ t) ≤ exp(T·K(λ) − λt), K(λ) = ln Σ p_i e^{λℓ_i} (and its mirror for the
  lower tail), so that at most η of the composed mass lies outside it. Circular
  convolution preserves mass: the out-of-window mass is aliased into the window.
  For an upper PMF that is bounded by adding η to δ; for a lower PMF by
  subtracting η (Gopi, Lee, Wutschitz 2021 bound the aliasing of their PRV
  accountant the same way, with a tail bound on the composed loss).
  Cost: O(N log N) for any T — N grows with √T, not T.
* **Heterogeneous histories**: segments are self-composed, then convolved (linear
  convolution, fully zero-padded: nothing wraps around), then truncated — the cut
  upper tail goes to +∞ and the cut lower tail up to the first kept point in an
  upper PMF, and both are dropped from a lower PMF (never an under-report).
* **Round-off**: negative entries after the inverse FFT are set to 0, and a
  floating-point error allowance (standard FFT error bound: relative error
  ≲ u·log₂N per transform, amplified T-fold by the power; summed over the
  window through Parseval) is added to the slack, so a target δ near the
  round-off floor yields a larger (still certified) ε or a refusal, never a wrong ε
  (prv_accountant issue #17).
"""

from __future__ import annotations

import math

import numpy as np

from dpcalc._numerics import UNIT_ROUNDOFF
from dpcalc.accounting._pld_grid import DiscretePLD, GridTooLargeError

__all__ = ["self_compose", "composition_window", "convolve", "identity", "epsilon_for_delta", "epsilon_for_delta_both",
           "delta_for_epsilon", "swapped_delta_upper", "Composed"]

_U = UNIT_ROUNDOFF
#: Fourier components whose T-th power is below e^{−75} of the total mass are set to zero
_LOG_NEGLIGIBLE = -75.0
#: work budget (frequencies × support points summed term by term) for the accurate power
_DIRECT_BUDGET = 6e7
#: work budget (frequencies × all support points, in blocks: matrix products) for the accurate power
_BLOCK_BUDGET = 2e9


def _reduced_angles(kk: np.ndarray, d: np.ndarray, n_fft: int) -> np.ndarray:
    """θ = 2π·(k·d mod N)/N reduced exactly in integers to (−π, π], shape (len(kk), len(d)):
    no phase error grows with k·d (|k·d| < 2⁶², exact in int64); the float angle is within 2u of
    its value (an exact integer times 2π/N, two roundings)."""
    r = np.mod(np.outer(kk, d), n_fft).astype(float)
    # in place (the same values as np.where(r > N/2, r − N, r)·(2π/N), without the temporaries)
    np.subtract(r, n_fft, out=r, where=r > n_fft / 2)
    r *= 2.0 * math.pi / n_fft
    return r


def _pairwise_sum(x: np.ndarray) -> np.ndarray:
    """Sum over the last axis by explicit pairwise summation (zero-padded to a power of two):
    |error| ≤ ⌈log₂ n⌉·u·Σ|x_i| whatever numpy's or BLAS's own summation order (Higham 2002 §4.2)."""
    n = x.shape[-1]
    size = 1 << max(0, (n - 1).bit_length())
    if size != n:
        x = np.concatenate((x, np.zeros(x.shape[:-1] + (size - n,), dtype=x.dtype)), axis=-1)
    while x.shape[-1] > 1:
        x = x[..., 0::2] + x[..., 1::2]
    return x[..., 0]


#: the accurate power sums at most this many support points (the heaviest window) term by term
_CORE_POINTS = 1 << 14


def _core_window(p: np.ndarray, width: int) -> int:
    """Start index of the ``width``-point window of ``p`` holding the most mass."""
    if p.size <= width:
        return 0
    cs = np.concatenate(([0.0], np.cumsum(p)))
    return int(np.argmax(cs[width:] - cs[:-width]))


def _tail_sum(p: np.ndarray, d0: int, kk: np.ndarray, n_fft: int) -> tuple[np.ndarray, np.ndarray, float]:
    r"""(Re S_k, Im S_k, error bound) of S_k = Σ_j p_j e^{−iθ_k(d0 + j)} for consecutive indices,
    without a sine per term (docs/numerical-accounting.md §4, "Accurate power").

    Blocks of B ≈ √n: d0 + bB + r with e^{−iθ(d0 + bB + r)} = e^{−iθ(d0 + bB)}·e^{−iθ(r)} (the
    angles are reduced mod N exactly, so the identity is exact), hence S = Σ_b A_b·(P E)_b with
    P the (n/B × B) block matrix of masses, E_{r,k} = e^{−iθ_k(r)}, A_{b,k} = e^{−iθ_k(d0 + bB)}:
    (n/B + B)·K sines and cosines and two real matrix products instead of n·K of each. Every
    factor has modulus ≤ 1 and is within 9u of its value (angle within 2πu, plus the sine's
    rounding), so whatever the summation order of the products (inner length B, outer n/B:
    Higham's γ bound) |error| ≤ u·Σp·(3B + 3n/B + 100) per component.
    """
    n = p.size
    if n == 0:
        z = np.zeros(kk.size)
        return z, z.copy(), 0.0
    b = 1 << max(0, math.ceil(0.5 * math.log2(n)))
    nb = -(-n // b)
    pm = np.zeros(nb * b)
    pm[:n] = p
    pm = pm.reshape(nb, b)
    th_r = _reduced_angles(np.arange(b, dtype=np.int64), kk, n_fft)  # (B, K)
    th_a = _reduced_angles(kk, d0 + b * np.arange(nb, dtype=np.int64), n_fft)  # (K, nb)
    mc, ms = pm @ np.cos(th_r), pm @ np.sin(th_r)  # (nb, K)
    ac, as_ = np.cos(th_a).T, np.sin(th_a).T  # (nb, K)
    # (ac − i·as)(mc − i·ms) = ac·mc − as·ms − i·(ac·ms + as·mc)
    re = np.sum(ac * mc - as_ * ms, axis=0)
    im = -np.sum(ac * ms + as_ * mc, axis=0)
    return re, im, _U * float(p.sum()) * (3 * b + 3 * nb + 100) * 1.01


class _Residues:
    """The residues k·(d0 + i) mod N (i < width, k in ``kk``) as an index into a table of N values:
    ``take(table)`` gives table[(k·(d0 + i)) mod N], shape (len(kk), width), the values
    ``table.take(np.mod(np.outer(kk, d), N))`` gives. Row k is the arithmetic progression
    r_k + k·i (mod N): copied as strided slices of the table between its wrap-arounds (no
    index array), unless the slices would be short (then by the index array)."""

    def __init__(self, kk: np.ndarray, d0: int, width: int, n_fft: int) -> None:
        self.kk, self.width, self.n = kk, width, n_fft
        self.r0 = np.mod(kk * d0, n_fft)
        pieces = float(np.sum(kk)) * width / n_fft + kk.size
        self.index = None if pieces * 64 <= kk.size * width else np.mod(np.outer(kk, d0 + np.arange(width)), n_fft)

    def take(self, table: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        if self.index is not None:
            return table.take(self.index, out=out)
        if out is None:
            out = np.empty((self.kk.size, self.width))
        n, width = self.n, self.width
        for j, (k, r) in enumerate(zip(self.kk.tolist(), self.r0.tolist(), strict=True)):
            if k == 0:
                out[j] = table[r]
                continue
            i = 0
            while i < width:  # r + k·c < N for the c terms of this piece
                c = min(width - i, (n - r + k - 1) // k)
                out[j, i: i + c] = table[r: r + k * (c - 1) + 1: k]
                i += c
                r = (r + k * c) % n
        return out


def _accurate_power(p: np.ndarray, d: np.ndarray, ks: np.ndarray, n_fft: int, count: int,
                    upper: bool = True):
    """(Z_k^T for k in ks, error bound) with Z_k = Σ_i p_i e^{−2πi k d_i / N}, computed in log space;
    ``d`` consecutive integers (d_i = d_0 + i).

    Writes Z_k = m (1 + w_k/m), w_k = Σ p_i (e^{−iθ_i} − 1) with θ_i = 2πk d_i/N, and
    e^{−iθ} − 1 = −2 sin²(θ/2) − i sin θ (no cancellation), so T·log Z_k keeps full relative accuracy.
    The heaviest window of ``_CORE_POINTS`` support points is summed term by term in that form
    (pairwise); the rest — for a rarely sampled mechanism, ~10⁶ points of tiny total mass — by
    blocks (:func:`_tail_sum`), whose error is relative to that small mass
    (docs/numerical-accounting.md §4, "Accurate power"). :func:`_accurate_power_direct` is the
    term-by-term reference.
    """
    m, m_units = _mass_bound(p, upper)
    d_int = np.asarray(d, dtype=np.int64)
    n = p.size
    width = min(n, _CORE_POINTS)
    i0 = _core_window(p, width)
    pc, dc = p[i0: i0 + width], d_int[i0: i0 + width]
    lg = math.ceil(math.log2(max(width, 2))) + 6
    out = np.empty(ks.size, dtype=complex)
    err = 0.0
    chunk = max(1, int(2_000_000 // max(width, 1)))
    tables = None
    for s in range(0, ks.size, chunk):
        kk = ks[s: s + chunk].astype(np.int64)
        # sin(θ/2), sin θ and min(|θ|, 2) depend on θ only through the residue k·d mod N: when
        # there are fewer residues than (k, d) pairs they are tabulated once per residue and
        # gathered (bitwise the same values: the same float θ goes into the same functions;
        # issue 31: 6x fewer sines at T = 10⁵)
        if 2 * n_fft <= kk.size * width:
            if tables is None:
                th_all = _reduced_angles(np.ones(1, dtype=np.int64), np.arange(n_fft, dtype=np.int64), n_fft)[0]
                tables = (np.sin(0.5 * th_all), np.sin(th_all), np.minimum(np.abs(th_all), 2.0))
            idx = _Residues(kk, int(dc[0]), width, n_fft)
            half_t, sin_t, abs_t = tables
            work = idx.take(half_t)
        else:
            idx = None
            theta = _reduced_angles(kk, dc, n_fft)
            work = np.sin(0.5 * theta)
        # the products below are formed in place, in the order of half·half·p, sin θ·p and
        # min(|θ|, 2)·p (the same values, without the temporaries)
        np.multiply(work, work, out=work)
        work *= pc
        re = -2.0 * _pairwise_sum(work)
        if idx is None:
            np.sin(theta, out=work)
        else:
            idx.take(sin_t, out=work)
        work *= pc
        im = -_pairwise_sum(work)
        # Σ p_i |e^{−iθ_i} − 1| ≤ Σ p_i min(2, |θ_i|): the core's error is (⌈log₂n⌉ + 6)·u of it
        if idx is None:
            np.abs(theta, out=work)
            np.minimum(work, 2.0, out=work)
            del theta
        else:
            idx.take(abs_t, out=work)
            del idx
        work *= pc
        absterm = _pairwise_sum(work) * (1 + 2 * lg * _U)
        del work
        err_w = _U * lg * absterm
        for lo_, hi_ in ((0, i0), (i0 + width, n)):
            if hi_ > lo_:
                # Σ p (e^{−iθ} − 1) = S − mass: u·(|S| + mass) more for the subtraction
                tr, ti, terr = _tail_sum(p[lo_:hi_], int(d_int[lo_]), kk, n_fft)
                mass = float(p[lo_:hi_].sum())
                re = re + (tr - mass)
                im = im + ti
                err_w = err_w + terr + _U * (np.abs(tr) + np.abs(ti) + mass) * 1.01 \
                    + 4 * _U * (np.abs(re) + np.abs(im))
        zt, contrib = _w_to_power(re, im, err_w, m, count, m_units)
        out[s: s + chunk] = zt
        err += float(np.sum(contrib ** 2))
    return out, math.sqrt(2 * err)


def _accurate_power_direct(p: np.ndarray, d: np.ndarray, ks: np.ndarray, n_fft: int, count: int,
                           upper: bool = True):
    """Term-by-term reference for :func:`_accurate_power` (every support point, one sine per
    point and frequency, pairwise sums): n·K work. Used by the tests."""
    m, m_units = _mass_bound(p, upper)
    d_int = np.asarray(d, dtype=np.int64)
    lg = math.ceil(math.log2(max(p.size, 2))) + 6
    theta = _reduced_angles(ks.astype(np.int64), d_int, n_fft)
    half = np.sin(0.5 * theta)
    re = -2.0 * _pairwise_sum(half * half * p)
    im = -_pairwise_sum(np.sin(theta) * p)
    absterm = _pairwise_sum(np.minimum(np.abs(theta), 2.0) * p) * (1 + 2 * lg * _U)
    zt, contrib = _w_to_power(re, im, _U * lg * absterm, m, count, m_units)
    return zt, math.sqrt(2 * float(np.sum(contrib ** 2)))


def _mass_bound(p: np.ndarray, upper: bool) -> tuple[float, float]:
    """(m, units): Σp as a float on the pessimistic side — ≥ the exact sum for an upper PMF, ≤ for
    a lower one — and a bound ``units`` with |m − Σp| ≤ units·u·m (explicit pairwise sum of
    nonnegative terms: relative error ≤ ⌈log₂n⌉·u, then moved out by that much again).

    Its error must not be left out of the allowance: T·log m multiplies it by T (10⁸: a relative
    error of ~10⁻⁷ in every Z_k^T). With m on the pessimistic side, (m + w_k)^T is the exact
    (Σp + w_k)^T times (m/Σp)^T — a uniform scaling of the composed PMF, ≥ 1 for an upper PMF
    and ≤ 1 for a lower one, which only moves every δ(ε) the safe way — times
    1 + O(T·units·u·|w_k|/|m + w_k|), which ``_w_to_power`` adds to the allowance
    (docs/numerical-accounting.md §4, "Accurate power").
    """
    lg = math.ceil(math.log2(max(p.size, 2)))
    m = float(_pairwise_sum(p))
    m = m * (1 + 1.01 * lg * _U) if upper else m * (1 - 1.01 * lg * _U)
    direction = math.inf if upper else -math.inf
    return float(np.nextafter(m, direction)), 2.1 * lg + 2


def _w_to_power(re: np.ndarray, im: np.ndarray, err_w: np.ndarray, m: float, count: int,
                m_units: float = 0.0):
    """(Z_k^T, |error|) from w_k = Z_k − m = re + i·im known to within ``err_w`` (absolute).

    T·log Z_k = T·(log m + ½·log1p(2w_r + w_r² + w_i²) + i·arg(1 + w/m)) with w/m = w_r + i·w_i:
    its error is ≲ T·err_w/|m + w| (the error of w) + u·|T log Z| + T·u·|log m| (the logarithms
    and the exponential), times |Z_k^T|.
    """
    wr, wi = re / m, im / m
    sq = 2 * wr + wr * wr + wi * wi  # |1 + w/m|² − 1
    with np.errstate(divide="ignore", invalid="ignore"):
        log_mod = 0.5 * np.log1p(sq)
    arg = np.arctan2(wi, 1.0 + wr)
    logz = count * (math.log(m) + log_mod) + 1j * (count * arg)
    with np.errstate(invalid="ignore"):
        zt = np.exp(logz)
    denom = np.maximum(np.abs(1.0 + wr + 1j * wi), 1e-300)
    with np.errstate(invalid="ignore", over="ignore"):
        rel = (count * err_w / m / denom + _U * (2 * np.abs(logz) + 2 * count * abs(math.log(m)))
               + count * m_units * _U * np.abs(wr + 1j * wi) / denom)
        contrib = np.abs(zt) * rel
    bad = ~np.isfinite(log_mod) | ~np.isfinite(contrib)
    if bad.any():
        # |1 + w/m|² rounded to ≤ 0 (an exact zero of Z_k, e.g. two equal atoms): log Z_k is −∞ or
        # NaN and 0·∞ would poison the bound. |Z_k| ≤ m·√(max(1 + sq, 0) + 64u) + err_w (the
        # rounding of 1 + sq: a few u of 2|w_r| + w_r² + w_i² ≤ 8, with |w/m| ≤ 2; and the error
        # of w), so Z_k^T is taken as 0 with that bound to the T.
        zt[bad] = 0.0
        bound = m * np.sqrt(np.maximum(1.0 + sq[bad], 0.0) + 64 * _U) + err_w[bad]
        with np.errstate(over="ignore", under="ignore"):
            contrib[bad] = bound ** count
    return zt, contrib


def identity(h: float, upper: bool) -> DiscretePLD:
    """The PMF of a mechanism that reveals nothing (loss 0 with probability 1)."""
    return DiscretePLD(h, 0, np.ones(1), 0.0, 0.0, upper)


def _next_fast_len(n: int) -> int:
    """The smallest 5-smooth integer 2^a·3^b·5^c ≥ n (n ≥ 1): a fast length for a real FFT —
    the value ``scipy.fft.next_fast_len(n, real=True)`` returns (tests/test_ndtr.py checks), without
    importing scipy (issue 17). The transforms are ``numpy.fft`` (pocketfft, the same library
    as ``scipy.fft``; the round-off allowance below is the standard bound for any FFT)."""
    n = int(n)
    best = 1 << (n - 1).bit_length()
    p5 = 1
    while p5 < best:
        p35 = p5
        while p35 < best:
            m = p35
            while m < n:
                m *= 2
            best = min(best, m)
            p35 *= 3
        p5 *= 5
    return best


def _trimmed(pld: DiscretePLD) -> tuple[np.ndarray, np.ndarray]:
    """(positive masses, their absolute grid indices) of a PMF."""
    nz = np.nonzero(pld.probs > 0)[0]
    return pld.probs[nz], (pld.start + nz).astype(float)


#: atoms of the summary on which :func:`_chernoff_window` searches its λ's
_CHERNOFF_SUMMARY = 512


def _chernoff_t(logp: np.ndarray, kc: np.ndarray, count: int, log_term: float, lam: float,
                sign: float) -> float:
    a = sign * lam * kc + logp
    m = float(a.max())
    return (count * (m + math.log(float(np.exp(a - m).sum()))) + log_term) / lam


#: Newton steps of :func:`_best_log_lambda` at most, the largest step on ln λ, and the step
#: below which it stops (t is flat at its minimum: a step of 1e-3 on ln λ moves t by ~1e-6·t)
_LAMBDA_STEPS, _LAMBDA_MAX_STEP, _LAMBDA_XTOL = 60, 2.5, 1e-3


def _best_log_lambda(logp: np.ndarray, y: np.ndarray, c: float, x: float) -> float:
    r"""ln λ of the smallest Chernoff bound t(λ) = (T·K(λ) + ln(2/η))/λ, K(λ) = ln Σ p_i e^{λ y_i},
    for λ > 0, from x = ln λ₀: the root of g(λ) = λK'(λ) − K(λ) − c (c = ln(2/η)/T), which has
    the sign of t'(λ) and increases with λ (g' = λK'' ≥ 0), so t is unimodal. Newton's method on
    x = ln λ (dg/dx = λ²K''), each step at most ``_LAMBDA_MAX_STEP`` and kept inside the bracket
    of the signs seen (else bisection). One exponential per step: K, K' and K'' come from the
    same weights. Any λ > 0 gives a valid bound: this only makes it small.
    """
    lo_x, hi_x = -math.inf, math.inf
    for _ in range(_LAMBDA_STEPS):
        lam = math.exp(x)
        a = lam * y + logp
        m = float(a.max())
        w = np.exp(a - m)
        s = float(w.sum())
        k1 = float(np.sum(w * y)) / s
        k2 = float(np.sum(w * (y - k1) ** 2)) / s
        g = lam * k1 - (m + math.log(s)) - c
        d = lam * lam * k2
        if not (math.isfinite(g) and math.isfinite(d)):
            break
        if g > 0:
            hi_x = x
        else:
            lo_x = x
        step = -g / d if d > 0 else (-_LAMBDA_MAX_STEP if g > 0 else _LAMBDA_MAX_STEP)
        nxt = x + max(min(step, _LAMBDA_MAX_STEP), -_LAMBDA_MAX_STEP)
        if not lo_x < nxt < hi_x and math.isfinite(lo_x) and math.isfinite(hi_x):
            nxt = 0.5 * (lo_x + hi_x)
        if abs(nxt - x) <= _LAMBDA_XTOL:
            return nxt
        x = nxt
    return x


def _chernoff_window(p: np.ndarray, k: np.ndarray, count: int, eta: float,
                     lams: tuple[float, float] | None = None) -> tuple[int, int, tuple[float, float]]:
    """Index range [lo, hi] of the ``count``-fold sum of k ~ p (a sub-probability measure on
    integer indices k) outside which the composed mass is ≤ η/2 on each side.

    Chernoff: mass(Σk ≥ t) ≤ exp(T·K(λ) − λt) for every λ > 0, K(λ) = ln Σ p_i e^{λ k_i};
    likewise for the lower tail with λ < 0. t(λ) = (T·K(λ) + ln(2/η))/λ is unimodal in
    λ > 0 (its derivative has the sign of λK'(λ) − K(λ) − const, which increases with λ): it is
    minimised on ln λ by bracketing around the Gaussian guess λ₀ = √(2 ln(2/η)/T)/sd (moving
    the bracket when an end is lower: for a rarely sampled mechanism the loss is ≈ 0 except
    for rare large values and the best λ is far from λ₀) and golden-section search — unless
    ``lams`` gives the two λ's to use (any λ > 0 gives a valid bound). Returns (lo, hi, (λ_upper, λ_lower)).
    """
    mass = float(p.sum())
    # np.sum of products, not np.dot: BLAS ddot spawns threads above 10⁴ points, which costs
    # several times the arithmetic on a busy machine (issue 12 benchmark); pairwise summation
    mean = float(np.sum(p * k)) / mass
    var = float(np.sum(p * (k - mean) ** 2)) / mass
    sd = math.sqrt(max(var, 1e-12))
    log_term = math.log(2.0 / eta)
    lam0 = math.sqrt(2 * log_term / count) / sd
    kc = k - mean
    with np.errstate(divide="ignore"):
        logp = np.log(p)
    # the search for λ runs on a summary: the heaviest _CHERNOFF_SUMMARY points as they are and
    # the rest in ≤ _CHERNOFF_SUMMARY blocks, each block's mass at its mean (K only approximated,
    # from below by Jensen); the bound itself is then evaluated on the full PMF at the λ found
    # (any λ > 0 gives a valid bound)
    if p.size > 4 * _CHERNOFF_SUMMARY:
        i0 = _core_window(p, _CHERNOFF_SUMMARY)
        parts_p, parts_k = [p[i0: i0 + _CHERNOFF_SUMMARY]], [(p * kc)[i0: i0 + _CHERNOFF_SUMMARY]]
        b = -(-p.size // _CHERNOFF_SUMMARY)
        for lo_, hi_ in ((0, i0), (i0 + _CHERNOFF_SUMMARY, p.size)):
            if hi_ > lo_:
                nb = -(-(hi_ - lo_) // b)
                pad = nb * b - (hi_ - lo_)
                parts_p.append(np.concatenate((p[lo_:hi_], np.zeros(pad))).reshape(nb, b).sum(axis=1))
                parts_k.append(np.concatenate((p[lo_:hi_] * kc[lo_:hi_], np.zeros(pad))).reshape(nb, b).sum(axis=1))
        bm, bk = np.concatenate(parts_p), np.concatenate(parts_k)
        keep = bm > 0
        s_kc, s_logp = bk[keep] / bm[keep], np.log(bm[keep])
    else:
        s_kc, s_logp = kc, logp
    out, used = [], []
    for side, sign in enumerate((1.0, -1.0)):
        if lams is not None:
            out.append(_chernoff_t(logp, kc, count, log_term, lams[side], sign))
            used.append(lams[side])
            continue
        lam = math.exp(_best_log_lambda(s_logp, sign * s_kc, log_term / count, math.log(lam0)))
        out.append(_chernoff_t(logp, kc, count, log_term, lam, sign))  # the bound, on the full PMF
        used.append(lam)
    return (math.floor(count * mean - out[1]), math.ceil(count * mean + out[0]),
            (used[0], used[1]))


def composition_window(plds: list[DiscretePLD], count: int, eta: float) -> tuple[int, int]:
    """Absolute grid-index range holding all but ≤ η/2 per side of the ``count``-fold
    composition of each of ``plds``: the union of their Chernoff windows, with the λ's
    optimised for the first PMF and reused for the others (still valid bounds)."""
    lo, hi, lams = math.inf, -math.inf, None
    for pld in plds:
        p, k = _trimmed(pld)
        if p.size == 0:  # all mass at +∞: nothing to window
            continue
        lo2, hi2, found = _chernoff_window(p, k, count, eta, lams)
        lams = lams or found
        lo, hi = min(lo, lo2), max(hi, hi2)
    return (0, 0) if lams is None else (lo, hi)


def self_compose(pld: DiscretePLD, count: int, *, eta: float, max_points: int,
                 window: tuple[int, int] | None = None, lams: list | None = None) -> DiscretePLD:
    """The ``count``-fold composition of ``pld`` by exponentiation in the Fourier domain.

    Args:
        pld: one step's PMF (upper or lower); its slack must be 0.
        count: T ≥ 0.
        eta: mass allowed outside the window (added to / subtracted from δ as slack).
        max_points: cap on the FFT length.
        window: absolute composed grid-index range from :func:`composition_window` (computed
            here when omitted); it must hold all but ≤ η of this PMF's composition.
        lams: list shared by one step's upper and lower compositions: the upper fills it (if
            empty) with its Chernoff λ's, the lower uses them (any λ > 0 gives a valid window).

    Raises:
        GridTooLargeError: the window needs more than ``max_points`` points.
    """
    if count == 0:
        return identity(pld.h, pld.upper)
    if count == 1:
        return pld
    p = pld.probs
    nz = np.nonzero(p > 0)[0]
    if nz.size == 0:  # everything at +∞
        return DiscretePLD(pld.h, 0, np.zeros(1), 1.0, pld.slack * count, pld.upper, pld.offset * count)
    p = p[nz[0]: nz[-1] + 1]
    start = pld.start + int(nz[0])
    k = np.arange(p.size, dtype=float)
    mass = float(p.sum())
    c = int(round(float(np.sum(p * k)) / mass))  # centre index (relative; np.sum: see _chernoff_window)
    nat_lo, nat_hi = -c * count, (p.size - 1 - c) * count
    if window is None:
        pos = p > 0  # interior zeros (e.g. a two-atom PMF) carry no mass
        lo, hi, found = _chernoff_window(p[pos], start + k[pos], count, eta,
                                         None if pld.upper or not lams else (lams[0], lams[1]))
        window = (lo, hi)
        if pld.upper and lams is not None and not lams:
            lams.extend(found)
    lo, hi = window[0] - count * (start + c), window[1] - count * (start + c)
    truncated = lo > nat_lo or hi < nat_hi
    lo, hi = max(lo, nat_lo), min(hi, nat_hi)
    length = hi - lo + 1
    if length > max_points:
        raise GridTooLargeError(length)
    n_fft = _next_fast_len(max(length, 2))
    if n_fft > max_points:
        n_fft = length
    from numpy import fft as sfft

    if p.size <= n_fft:  # index i at (i − c) mod n_fft, one atom per slot: the values themselves
        a = np.zeros(n_fft)
        a[: p.size - c] = p[c:]
        a[n_fft - c:] = p[:c]
    else:  # several atoms per slot (aliasing): summed
        a = np.bincount(np.mod(np.arange(p.size) - c, n_fft), weights=p, minlength=n_fft)
    spec = sfft.rfft(a)
    del a
    lg = 3 * math.log2(n_fft) + 2
    with np.errstate(divide="ignore", under="ignore"):
        la = np.log(np.maximum(np.abs(spec), 1e-300))
    sig = np.nonzero(count * la > _LOG_NEGLIGIBLE)[0]
    # Raising the FFT to the T-th power: error ~ T·u per component (Parseval L1 bound).
    with np.errstate(under="ignore"):
        s1 = math.sqrt(2 * float(np.exp((2 * count - 2) * la[sig]).sum()))
        s2 = math.sqrt(2 * float(np.exp(2 * count * la[sig]).sum()))
    roundoff = _U * (count * lg * s1 + lg * s2)
    spec_t = np.zeros(spec.size, dtype=complex)
    with np.errstate(divide="ignore", invalid="ignore"):
        spec_t[sig] = np.exp(count * np.log(spec[sig]))
    if (roundoff > 100 * eta and sig.size * min(p.size, _CORE_POINTS) <= _DIRECT_BUDGET
            and sig.size * p.size <= _BLOCK_BUDGET):
        # Large T: accurate powers, log Z_k = log m + log1p(Σ p_i (e^{−iω_k d_i} − 1)/m) for the
        # few frequencies whose T-th power is not negligible; relative accuracy ~u, so T·log Z_k
        # is accurate to ~u·|T log Z_k| instead of T·u. Kept only where its proven error is the
        # smaller one (both are valid allowances).
        acc, err = _accurate_power(p, np.arange(p.size) - c, sig, n_fft, count, pld.upper)
        acc_roundoff = _U * lg * math.sqrt(2 * float(np.sum(np.abs(acc) ** 2))) + err
        if acc_roundoff < roundoff:
            spec_t[sig], roundoff = acc, acc_roundoff
    # components dropped as negligible: |Z_k|^T ≤ e^{_LOG_NEGLIGIBLE} each (Parseval L1 bound)
    roundoff += math.sqrt(2 * spec.size) * math.exp(_LOG_NEGLIGIBLE) * 2
    del spec
    r = sfft.irfft(spec_t, n=n_fft)
    del spec_t
    s0 = lo % n_fft  # the window is r[(s0 + i) mod n_fft], i < length (np.roll's values, fewer copied)
    window = r[s0: s0 + length] if s0 + length <= n_fft else np.concatenate((r[s0:], r[: length - (n_fft - s0)]))
    np.maximum(window, 0.0, out=window)
    p_inf = -math.expm1(count * math.log1p(-pld.p_inf)) if pld.p_inf < 1 else 1.0
    slack = pld.slack * count + (eta if truncated else 0.0) + roundoff
    if not math.isfinite(slack):  # a NaN error estimate (e.g. 0·∞ at an exact zero of Z_k) must never read as 0
        slack = math.inf
    return DiscretePLD(pld.h, start * count + c * count + lo, window, p_inf, slack, pld.upper, pld.offset * count)


def convolve(a: DiscretePLD, b: DiscretePLD, *, eta: float, max_points: int) -> DiscretePLD:
    """Composition of two PMFs on the same grid (linear convolution), then truncation of
    at most ``eta`` mass per tail (upper PMF: upper tail → +∞, lower tail → first kept
    point; lower PMF: both dropped)."""
    if a.h != b.h or a.upper != b.upper:
        raise ValueError("PMFs on different grids")  # pragma: no cover - internal
    n = a.probs.size + b.probs.size - 1
    if n > 4 * max_points:
        raise GridTooLargeError(n)
    from numpy import fft as sfft

    m = _next_fast_len(n)
    fa, fb = sfft.rfft(a.probs, m), sfft.rfft(b.probs, m)
    prod = fa * fb
    r = sfft.irfft(prod, m)[:n]
    roundoff = _U * (3 * math.log2(m) + 2) * math.sqrt(2 * float(np.sum(np.abs(fa) ** 2 * np.abs(fb) ** 2)))
    np.maximum(r, 0.0, out=r)
    p_inf = -math.expm1(math.log1p(-min(a.p_inf, 1 - 1e-300)) + math.log1p(-min(b.p_inf, 1 - 1e-300)))
    start = a.start + b.start
    cum = np.cumsum(r)
    total = cum[-1]
    i0 = int(np.searchsorted(cum, eta, side="right"))  # r[:i0] has mass ≤ η
    tail = total - cum
    i1 = int(np.searchsorted(-tail, -eta, side="left"))  # first index whose upper tail (after it) ≤ η
    i1 = max(min(i1, n - 1), i0)
    kept = r[i0: i1 + 1].copy()
    below = float(cum[i0 - 1]) if i0 > 0 else 0.0
    above = float(total - cum[i1])
    if a.upper:
        kept[0] += below
        p_inf = min(1.0, p_inf + above)
    if kept.size > max_points:
        raise GridTooLargeError(kept.size)
    return DiscretePLD(a.h, start + i0, kept, p_inf, a.slack + b.slack + roundoff, a.upper, a.offset + b.offset)


def delta_for_epsilon(pld: DiscretePLD, epsilon: float) -> float:
    r"""δ(ε) = Σ_{ℓ_j > ε} p_j (1 − e^{ε − ℓ_j}) + p∞, then ± slack, clipped to [0, 1]."""
    i0 = pld.first_above(epsilon)  # the losses > ε: a tail of the grid
    with np.errstate(under="ignore"):
        val = float(np.sum(pld.probs[i0:] * -np.expm1(epsilon - pld.losses_from(i0)))) + pld.p_inf
    val = val + pld.slack if pld.upper else val - pld.slack
    if math.isnan(val):  # never a NaN δ: the upper curve is then 1, the lower one 0
        return 1.0 if pld.upper else 0.0
    return min(max(val, 0.0), 1.0)


def swapped_delta_upper(pld: DiscretePLD, epsilon: float) -> float:
    r"""Certified upper bound on δ(ε) of the SWAPPED pair (Q, P), read off an upper PMF of (P, Q).

    For any two probability measures, δ_{Q‖P}(ε) = 1 − e^ε + e^ε·δ_{P‖Q}(−ε) (the hockey-stick
    divergence's duality: sup_S Q(S) − e^ε P(S), written with the complement S^c). An upper PMF
    bounds δ_{P‖Q} at EVERY ε ∈ ℝ, negative ones included (connect-the-dots dominates the pair
    for all ε, and composition, truncation upward and the slack keep that: each acts on hockey-
    stick functions (1 − e^{ε−ℓ})₊, nondecreasing in ℓ with values in [0, 1], for any ε):
    δ_{P‖Q}(ε') ≤ D(ε') = Σ_{ℓ>ε'} p (1 − e^{ε'−ℓ}) + p∞ + slack. Substituting ε' = −ε and
    regrouping (no term overflows: e^{−ℓ} < e^ε on ℓ > −ε):

        δ_{Q‖P}(ε) ≤ 1 − A + e^ε·(B + p∞ − 1 + slack),  A = Σ_{ℓ>−ε} p e^{−ℓ},  B = Σ_{ℓ>−ε} p,

    plus a floating-point allowance for A and B (pairwise sums with ≤ ⌈log₂n⌉ + 128 roundings
    per term, e^{−ℓ} within (|ℓ| + 4)·u) and the cancellation. The add/remove orderings of a
    Poisson-sampled Gaussian are such a swap, and so are their compositions (the composition
    of the swapped pairs is the swapped composition), so one composed remove-ordering PMF
    bounds both orderings. The bound is looser than a direct composition by about e^ε·slack:
    callers use it only to show that the other ordering is below the one they read out.

    Args:
        pld: an upper (pessimistic) composed PMF of (P, Q).
        epsilon: ε ≥ 0 (nats).

    Returns:
        the bound in [0, 1] (1.0 when it cannot be evaluated: e^ε overflows, NaN).

    Raises:
        ValueError: ``pld`` is a lower PMF (internal misuse).
    """
    if not pld.upper:
        raise ValueError("swapped_delta_upper needs an upper PMF")  # pragma: no cover - internal
    if not (epsilon >= 0.0 and epsilon < 700.0):
        return 1.0
    i0 = pld.first_above(-epsilon)
    p = pld.probs[i0:]
    lm = pld.losses_from(i0)
    e = math.exp(epsilon)
    np.negative(lm, out=lm)
    with np.errstate(under="ignore", over="ignore"):
        np.exp(lm, out=lm)
    a = float(np.sum(np.multiply(p, lm, out=lm)))
    b = float(np.sum(p))
    val = 1.0 - a + e * (b + pld.p_inf - 1.0 + pld.slack)
    # the losses are nondecreasing: the largest |ℓ| is at an end
    big = max(epsilon, abs(pld.offset + (pld.start + pld.probs.size - 1) * pld.h)) + pld.h if p.size else 0.0
    units = math.ceil(math.log2(max(p.size, 2))) + 140 + big
    val += _U * (units * (a + e * b) + 8 * (1.0 + a + e * (b + pld.p_inf + 1.0 + pld.slack)))
    if not math.isfinite(val):
        return 1.0
    return min(max(val, 0.0), 1.0)


class Composed(dict):
    """Neighbouring ordering → (composed upper PMF, composed lower PMF or None), as made by
    ``PldAccountant._compose``.

    When every step's add pair is its remove pair swapped (a Poisson-sampled Gaussian;
    symmetric pairs), the composed add pair is the composed remove pair swapped, and only the
    remove ordering is composed: ``pending`` (None when every ordering needed is present) then
    composes the add ordering on demand. A read-out first shows with :meth:`covers` that the add
    ordering is below the value it read off the remove ordering (:func:`swapped_delta_upper`,
    from the remove upper PMF alone), and calls :meth:`complete` only when it cannot; the lower
    bound of one ordering is a lower bound of the maximum over the orderings. Half the
    compositions for DP-SGD histories (issue 31)."""

    def __init__(self, parts: dict, pending=None) -> None:
        super().__init__(parts)
        self.pending = pending

    def covers(self, epsilon: float, delta: float) -> bool:
        """True when every ordering not composed has δ(``epsilon``) ≤ ``delta`` (certified).

        On a large grid a cheap lower estimate of the swapped bound comes first (blocks of 16
        points, each at its largest e^{−ℓ}: ≥ the exact A, so the estimate is ≤ the bound): when
        it is already above ``delta`` the exact bound is not computed (an exponential per point;
        e.g. at T = 10⁸ the remove PMF's Q-mass deficit, T times the one-step cushions', is
        ~1e-3 and the bound cannot succeed). False only means "compose the add ordering"."""
        if self.pending is None:
            return True
        if not math.isfinite(epsilon):
            return False
        up = self["remove"][0]
        if up.probs.size >= 1 << 16 and _swapped_lower_estimate(up, epsilon) > delta:
            return False
        return swapped_delta_upper(up, epsilon) <= delta

    def read_uppers(self, fn, covered) -> list:
        """``[fn(upper) for each ordering]``; when an ordering is pending and ``covered(values)``
        is False it is composed (:meth:`complete`) and ``fn`` applied to it alone."""
        vals = {d: fn(up) for d, (up, _) in self.items()}
        if self.pending is not None and not covered(list(vals.values())):
            self.complete()
            vals.update({d: fn(up) for d, (up, _) in self.items() if d not in vals})
        return list(vals.values())

    def complete(self) -> None:
        """Compose the orderings still missing (the add ordering), in place."""
        if self.pending is not None:
            more, self.pending = self.pending(), None
            self.update(more)


def _swapped_lower_estimate(pld: DiscretePLD, epsilon: float, block: int = 16) -> float:
    """:func:`swapped_delta_upper` without its rounding allowance and with A replaced by an
    upper bound (each block of ``block`` points at its smallest loss): a value below that bound,
    for :meth:`Composed.covers` to skip the exact bound when this is already above δ."""
    i0 = pld.first_above(-epsilon)
    p = pld.probs[i0:]
    nb = p.size // block
    b = float(np.sum(p))
    heads = pld.offset + (pld.start + i0 + block * np.arange(nb)) * pld.h  # each block's smallest loss
    a = float(np.sum(p[: nb * block].reshape(nb, block).sum(axis=1) * np.exp(-heads)))
    if nb * block < p.size:
        a += float(np.sum(p[nb * block:])) * math.exp(-(pld.offset + (pld.start + i0 + nb * block) * pld.h))
    return 1.0 - a + math.exp(epsilon) * (b + pld.p_inf - 1.0 + pld.slack)


def epsilon_for_delta(pld: DiscretePLD, delta: float) -> float:
    r"""The smallest ε ≥ 0 with δ_PMF(ε) ± slack ≤ ``delta`` (``inf`` if none).

    On [ℓ_{m−1}, ℓ_m] the PMF's curve is S_P(m) − e^ε S_Q(m) + p∞ with the suffix sums
    S_P(m) = Σ_{j≥m} p_j, S_Q(m) = Σ_{j≥m} p_j e^{−ℓ_j}; the root is solved in closed form.
    """
    return epsilon_for_delta_both(pld, delta)[0]


#: largest grid loss up to which :func:`epsilon_for_delta_both` sums S_Q = Σ p·e^{−ℓ} directly
#: (beyond, in log space: the terms would underflow)
_DIRECT_SQ_MAX_LOSS = 30.0


def epsilon_for_delta_both(pld: DiscretePLD, delta: float) -> tuple[float, float]:
    """(ε with the slack applied, ε without it) — the second says what a finer grid could reach.

    The δ values at the grid losses are computed from the top of the grid down to a guessed
    index m only (:func:`_readout_start`; issue 31), bitwise the values of the full arrays:
    when the first of them exceeds the largest target by twice their rounding allowance, no
    index below m can be the first to reach a target (the PMF's δ(ε) is nonincreasing; each
    computed value is within (2n + 12)·u·(Σp + 1) of it: sequential sums of ≤ n terms, e^x
    within 4u, e^{prev}·S_Q ≤ S_P), so the ε's are those of the full read-out; otherwise the
    slice is doubled."""
    sign = 1.0 if pld.upper else -1.0
    targets = (delta - pld.p_inf - sign * pld.slack, delta - pld.p_inf)
    first = pld.first_above(0.0)  # first index with loss > 0
    p = pld.probs[first:]
    if p.size == 0:
        return tuple(0.0 if t > 0 else math.inf for t in targets)
    if not any(t > 0 for t in targets):  # NaN included: never read as reachable
        return math.inf, math.inf
    top = max(t for t in targets if t > 0)
    sp = np.cumsum(p[::-1])[::-1]
    direct = pld.offset + (pld.start + pld.probs.size - 1) * pld.h <= _DIRECT_SQ_MAX_LOSS  # the last loss
    m = _readout_start(sp, top) if direct else 0
    allowance = 2 * (4 * p.size + 24) * _U * max(1.0, 2.0 * float(sp[0]))
    while True:
        d_at, sq, lsq, prev = _delta_at_grid(pld, first, p, sp, m, direct)
        if m == 0 or d_at[0] > top + allowance:
            break
        m = max(0, 2 * m - p.size)  # a slice twice as long
    out = []
    for target in targets:
        if not target > 0:  # NaN included: never read as reachable
            out.append(math.inf)
            continue
        j = int(np.argmax(d_at <= target)) + m  # first j with δ(prev[j]) ≤ target (d_at[-1] = 0)
        if j == 0:
            out.append(0.0)
            continue
        # j > m when m > 0 (d_at[m] > target): index j − 1 is in the slice
        s_p = float(sp[j - 1])  # losses > ε on [prev[j−1], prev[j]]: indices ≥ j−1
        if lsq is None:
            with np.errstate(divide="ignore"):
                l_q = float(np.log(sq[j - 1 - m: j - m])[0])
        else:
            l_q = float(lsq[j - 1])
        lo_b, hi_b = float(prev[j - 1 - m]), float(prev[j - m])
        eps = math.log(s_p - target) - l_q if math.isfinite(l_q) and s_p > target else hi_b
        out.append(min(max(eps, lo_b), hi_b))
    return out[0], out[1]


def _readout_start(sp: np.ndarray, target: float) -> int:
    """A first index for :func:`_delta_at_grid`'s slice: 64 points below the last one whose P-tail
    ``sp`` exceeds 30·``target`` (δ(ε) ≥ (1 − e^{ε − ℓ_i})·P(L ≥ ℓ_i) for ℓ_i > ε); only a
    guess, checked by :func:`epsilon_for_delta_both`."""
    k = int(np.searchsorted(-sp, -30.0 * target, side="left"))  # sp[:k] > 30·target
    return max(k - 64, 0) if k < sp.size else 0


def _delta_at_grid(pld: DiscretePLD, first: int, p: np.ndarray, sp: np.ndarray, m: int, direct: bool):
    """δ of the PMF at ε = prev[j] (prev[0] = 0, prev[j] = ℓ_{first+j−1}) for j ≥ ``m`` (> 0 only
    if ``direct``): (d_at, S_Q or None, ln S_Q or None, prev), each from index m, bitwise the
    full arrays' values (suffix sums run from the top down; the rest is elementwise)."""
    prev = pld.losses_from(first + m - 1) if m else np.concatenate(([0.0], pld.losses_from(first)))
    lp = prev[1:]  # prev[m:] = ℓ from index first + m − 1
    if direct:
        # S_Q by a plain suffix sum: a term p·e^{−ℓ} that underflows moves δ (≤ e^ε of it) by
        # less than e^30·2.3e-308 < 1e-294
        with np.errstate(under="ignore"):
            sq = np.cumsum((p[m:] * np.exp(-lp))[::-1])[::-1]
        # δ at ε = prev[j]; at ε = ℓ_last nothing is left: δ = 0.
        return np.concatenate((sp[m:] - np.exp(prev[:-1]) * sq, [0.0])), sq, None, prev
    # ln S_Q by a log-space suffix sum: p·e^{−ℓ} underflows for ℓ > 745 (large ε), which would
    # make a lower PMF's δ too large (an invalid lower bound)
    with np.errstate(divide="ignore"):
        lsq = np.logaddexp.accumulate((np.log(p) - lp)[::-1])[::-1]
    with np.errstate(over="ignore"):
        d_at = np.concatenate((sp - np.exp(prev[:-1] + lsq), [0.0]))
    return d_at, None, lsq, prev
