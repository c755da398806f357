r"""Discretisation of a privacy-loss pair on the uniform grid ℓ_i = i·h (certified both ways).

Given a :class:`~dpcalc.accounting._pld_mechanisms.LossPair` (the loss L = ln dP/dQ
known through its distribution functions under P and Q) and a grid step h, build two
discrete privacy-loss distributions (PMFs of L under P on the grid, plus mass at +∞):

**Upper (pessimistic) — "connect the dots"** (Doroshenko, Ghazi, Kamath, Kumar,
Manurangsi 2022, PETS, §3: the pessimistic estimate). Every outcome with loss ℓ ∈ (g_i, g_{i+1}] is split into
two outcomes with losses g_i and g_{i+1}, preserving both its P- and Q-mass:
a fraction w = (e^{−g_i} − e^{−ℓ})/(e^{−g_i} − e^{−g_{i+1}}) goes up. Integrated over the
interval I this moves (P(I) − e^{g_i}Q(I))/(1 − e^{−h}) of P-mass to g_{i+1}.
The split pair's hockey-stick curve is the chord interpolation of the true curve
δ(ε) in e^ε between grid points (δ is convex in e^ε), so it dominates the true
pair for every ε ∈ ℝ; domination is preserved by composition (hockey-stick
dominance for all ε is Blackwell dominance of the pairs, which composition keeps;
Dong, Roth, Su 2019 §2–3 for trade-off functions; Doroshenko et al. 2022 §2). Its bias is second order
in h — no T·h/2 drift (docs/numerical-accounting.md §3). Mass below the grid is moved *up* to the first
point; mass above the grid is moved to +∞ (both only increase every δ(ε)).
A round-off cushion moves a few ulps of extra mass upward.

**Lower (optimistic) — merge, pool, round down.** Merging all outcomes whose loss
lies in the bin (g_j − h/2, g_j + h/2] is a post-processing of (P, Q), so the merged
pair is dominated by the true pair (data processing). A merged atom has loss
ℓ*_j = ln(P_j/Q_j) = g_j + O(h²). If ℓ*_j < g_j, the output is pooled (a further
post-processing) with the fraction θ_j of the next atom that brings the pooled
likelihood ratio back to at least e^{g_j}; each output is then labelled with a grid
value ≤ its true loss, which only lowers every δ(ε) of every composition
(pointwise coupling). Mass below the grid is dropped (also only lowers δ).
The bias is again second order in h.

Both PMFs are returned with total mass (finite + ∞) equal to 1 up to round-off
(the lower one less its dropped lower tail).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from dpcalc._numerics import _NDTR_LIBM_MAX, NDTR_VECTOR_ERROR_UNITS, UNIT_ROUNDOFF
from dpcalc.accounting._pld_mechanisms import LossPair

__all__ = ["DiscretePLD", "GridTooLargeError", "discretize", "tail_points"]

_U = UNIT_ROUNDOFF
#: largest finite grid loss (e^ℓ must stay finite in double precision)
_MAX_LOSS = 700.0


class GridTooLargeError(Exception):
    """The grid needed exceeds the memory cap (``points`` says how many were needed)."""

    def __init__(self, points: int):
        super().__init__(f"grid of {points} points needed")
        self.points = points


@dataclass
class DiscretePLD:
    """A privacy-loss PMF on the grid ℓ = offset + (start + i)·h, with mass at +∞.

    Attributes:
        h: grid step of the loss (nats).
        start: grid index of ``probs[0]``.
        probs: P-masses at the grid points, shape (n,), nonnegative.
        p_inf: P-mass at loss +∞ (counts fully in δ).
        slack: extra δ allowance from truncation/aliasing/round-off: the true δ(ε)
            is ≤ δ_PMF(ε) + slack for an upper PMF and ≥ δ_PMF(ε) − slack for a lower one.
        upper: True for a pessimistic (upper-bound) PMF.
        offset: shift of the whole grid (nats, |offset| < h/2 for one step; composition adds
            the offsets). 0 except for the lower PMF of a rarely sampled Gaussian, whose grid
            is shifted so that the atom holding the bulk of the mass sits on a grid value.
    """

    h: float
    start: int
    probs: np.ndarray
    p_inf: float
    slack: float
    upper: bool
    offset: float = 0.0

    def __post_init__(self) -> None:
        # a NaN allowance (0·∞ in an error estimate, an overflow) must never read as "no error":
        # every comparison with NaN is false, and δ ≤ target would pass. NaN or negative → ∞.
        if not self.slack >= 0.0:
            self.slack = math.inf
        if not self.p_inf >= 0.0:
            self.p_inf = 1.0 if self.upper else 0.0

    @property
    def losses(self) -> np.ndarray:
        return self.offset + (self.start + np.arange(self.probs.size)) * self.h

    def losses_from(self, i0: int) -> np.ndarray:
        """``losses[i0:]``, computed for those points only (bitwise the same values)."""
        return self.offset + (self.start + np.arange(i0, self.probs.size)) * self.h

    def first_above(self, x: float) -> int:
        """The first index whose loss exceeds ``x`` (``probs.size`` if none): what
        ``np.searchsorted(losses, x, side="right")`` returns (the losses are nondecreasing in
        floating point too), from a guess checked on the same float expression, without
        building the array."""
        n = self.probs.size

        def loss(i: int) -> float:
            return float((self.offset + (self.start + np.arange(i, i + 1)) * self.h)[0])

        g = (x - self.offset) / self.h - self.start
        i = min(max(math.floor(g) + 1, 0), n) if math.isfinite(g) else (0 if g < 0 else n)
        while i > 0 and loss(i - 1) > x:
            i -= 1
        while i < n and not loss(i) > x:
            i += 1
        return i

    def total_mass(self) -> float:
        return float(self.probs.sum() + self.p_inf)


def _zoom(fun, lo: float, hi: float, tail: float, upper: bool) -> float:
    """A point ℓ in [lo, hi] with fun(ℓ) ≤ tail (fun monotone), close to the boundary."""
    for _ in range(3):
        xs = np.linspace(lo, hi, 65)
        vals = fun(xs)
        ok = vals <= tail
        if upper:  # fun decreasing: first ok point
            k = int(np.argmax(ok)) if ok.any() else 64
            lo, hi = xs[max(k - 1, 0)], xs[k]
        else:  # fun increasing: last ok point
            k = int(np.nonzero(ok)[0][-1]) if ok.any() else 0
            lo, hi = xs[k], xs[min(k + 1, 64)]
    return float(hi if upper else lo)


@functools.lru_cache(maxsize=256)
def tail_points(pair: LossPair, tail: float) -> tuple[float, float]:
    """(ℓ_lo, ℓ_hi) with P(L ≤ ℓ_lo) ≤ tail and P(ℓ_hi < L < ∞) ≤ tail, clipped to the support
    (cached: pairs are immutable)."""
    s_lo, s_hi = pair.support
    powers = 2.0 ** np.arange(-12, 21)
    if math.isfinite(s_hi):
        hi = s_hi
    else:
        base = max(s_lo, 0.0) if math.isfinite(s_lo) else 0.0
        cand = base + powers
        ok = pair.P_gt(cand) <= tail
        k = int(np.argmax(ok)) if ok.any() else cand.size - 1
        hi = _zoom(pair.P_gt, base if k == 0 else float(cand[k - 1]), float(cand[k]), tail, upper=True)
    if math.isfinite(s_lo):
        lo = s_lo
    else:
        base = min(s_hi, 0.0) if math.isfinite(s_hi) else 0.0
        cand = base - powers
        ok = pair.P_le(cand) <= tail
        k = int(np.argmax(ok)) if ok.any() else cand.size - 1
        lo = _zoom(pair.P_le, float(cand[k]), base if k == 0 else float(cand[k - 1]), tail, upper=False)
    return lo, max(hi, lo)


def _smallest_ok(pred, lo: float, hi: float) -> float:
    """Smallest c in [lo, hi] (to ~1e-9 of the range) with pred(c) true, pred monotone false→true."""
    for _ in range(5):
        xs = np.linspace(lo, hi, 65)
        ok = pred(xs)
        k = int(np.argmax(ok)) if ok.any() else 64
        lo, hi = xs[max(k - 1, 0)], xs[k]
    return float(hi)


class _Remembered:
    """A pair's ``le_pair`` or ``gt_pair`` remembering the arrays it was evaluated on: an array
    seen before, or a point in one, is read back instead of evaluated again. The functions are
    elementwise (:meth:`LossPair.le_pair`: bitwise the values of a one-point call), so the
    values are the same; :func:`_fix_edge_bins` evaluates 5 arrays instead of 7 (issue 31)."""

    def __init__(self, fn) -> None:
        self.fn, self.seen = fn, []

    def __call__(self, cs: np.ndarray):
        for xs, v1, v2 in self.seen:
            if xs.shape == cs.shape and np.array_equal(xs, cs):
                return v1, v2
        v1, v2 = self.fn(cs)
        self.seen.append((cs, v1, v2))
        return v1, v2

    def at(self, c: float):
        """The two values at the point ``c``."""
        for xs, v1, v2 in reversed(self.seen):
            i = np.flatnonzero(xs == c)
            if i.size:
                return v1[i[0]], v2[i[0]]
        v1, v2 = self.fn(np.array([c]))
        return v1[0], v2[0]


#: the most bins a low edge bin may take in from above (:func:`_fix_edge_bins`)
_EDGE_BINS = 16
#: relative margin above its target ratio the regrown low edge bin is given: its masses are new
#: differences of distribution-function values (errors ≤ 16u absolute, added to the bins' error
#: allowance afterwards, which raises their targets by ≤ 16·16u/mass ≪ this margin)
_EDGE_HAIR = 1e-12


def _fix_edge_bins(pair: LossPair, g: np.ndarray, h: float, Pj: np.ndarray, Qj: np.ndarray,  # noqa: N803
                   x: np.ndarray, fix_first: bool = True) -> list[int]:
    """Move the inner boundary of the outermost non-empty bins so that their merged ratio is
    exactly (a hair above) the grid value.

    Where the loss has a hard edge (the sampled Gaussian's ln(1−q)), the edge bin has no
    neighbour on the far side to pool with; its merged loss may sit up to h/2 off its grid
    value, a first-order bias repeated T times. Any partition of the losses is a valid
    merge, so the first non-empty bin becomes (a, c] with c the smallest boundary whose
    merged ratio reaches the target (ratio of (a, c] increases with c), the rest (c, b]
    joining the next bin; symmetrically at the top. Modifies ``Pj``/``Qj`` in place.
    """
    n = g.size
    changed: list[int] = []
    nz = np.nonzero(Pj[:n] > 1e-9 * Pj[:n].max())[0]  # ignore round-off slivers beyond a hard edge
    if nz.size < 2:
        return changed
    first, last = int(nz[0]), int(nz[-1])
    below_usable = first > 0 and Pj[first - 1] > 1e-3 * Pj[first]
    if fix_first and Pj[first] > x[first] * Qj[first] and not below_usable:  # high, nothing below
        a, b = g[first] - h / 2, g[first] + h / 2
        le = _Remembered(pair.le_pair)
        le(np.linspace(a, b, 65))  # _smallest_ok's first round, whose first point is a
        pa, qa = le.at(a)
        xf = x[first]

        def pred_lo(cs):
            pl, ql = le(cs)
            dp = pl - pa
            return (dp > 0) & (dp - xf * (ql - qa) >= 0)

        c = _smallest_ok(pred_lo, a, b)
        p_in, q_in = (v - w for v, w in zip(le.at(c), (pa, qa), strict=True))
        if 0 < p_in <= Pj[first] and 0 <= q_in <= Qj[first]:
            Pj[first + 1] += Pj[first] - p_in
            Qj[first + 1] += Qj[first] - q_in
            Pj[first], Qj[first] = p_in, q_in
    elif (fix_first and first + 1 < n and Pj[first] < x[first] * Qj[first] and not below_usable
          and Pj[first + 1] > 0):
        # low, nothing below: pooling asks the bin above for θ = (x·Q_f − P_f)/(P_{f+1} − x·Q_{f+1});
        # beyond ½ it fails and the whole edge bin — for a sampled Gaussian with q ~ h, most of the
        # mass (it piles up at the edge ln(1−q)) — would be labelled a grid step lower: a bias of
        # ~h per step, T·h after T steps (the lower bound 0 of issue 17 at T = 10⁸). Instead the
        # edge bin grows upward to (a, c], c the smallest boundary in the next bin whose merged
        # ratio reaches the target: P(a, c] − x·Q(a, c] increases with c there (the loss exceeds
        # the target), so the search is monotone; (c, b'] stays the next bin.
        den = Pj[first + 1] - x[first] * Qj[first + 1]
        theta = (x[first] * Qj[first] - Pj[first]) / den if den > 0 else math.inf
        if theta > 0.5:
            a, b = g[first] - h / 2, g[first] + h / 2
            le = _Remembered(pair.le_pair)
            pa, qa = le.at(a)
            xf = x[first] * (1 + _EDGE_HAIR)  # see _EDGE_HAIR

            def pred_up(cs):
                pl, ql = le(cs)
                return (pl - pa) - xf * (ql - qa) >= 0

            # (a, c] may have to take in several bins: c in bin first + j, the bins between emptied
            for j in range(1, min(_EDGE_BINS, n - 1 - first) + 1):
                if pred_up(np.array([b + j * h]))[0]:
                    break
            else:
                j = 0
            if j:
                c = _smallest_ok(pred_up, b + (j - 1) * h, b + j * h)
                p_in, q_in = (v - w for v, w in zip(le.at(c), (pa, qa), strict=True))
                # what (c, b + j·h] keeps: the bins' total minus the new edge bin
                p_rest = float(Pj[first: first + j + 1].sum()) - p_in
                q_rest = float(Qj[first: first + j + 1].sum()) - q_in
                if p_in > 0 and q_in > 0 and 0 <= p_rest <= Pj[first + j] and 0 <= q_rest <= Qj[first + j]:
                    Pj[first + 1: first + j] = 0.0
                    Qj[first + 1: first + j] = 0.0
                    Pj[first], Qj[first] = p_in, q_in
                    Pj[first + j], Qj[first + j] = p_rest, q_rest
                    changed = [first, first + j]
                    if p_rest > x[first + j] * q_rest and first + j + 1 < n:
                        # what is left of that bin lies above its grid value with nothing below to
                        # pool with: it joins the bin above (whose merged loss it lowers; that bin
                        # then pools upward as usual)
                        Pj[first + j + 1] += p_rest
                        Qj[first + j + 1] += q_rest
                        Pj[first + j] = Qj[first + j] = 0.0
                        changed.append(first + j + 1)
    tail_usable = Pj[last + 1] > x[last] * Qj[last + 1] and Pj[last + 1] > 1e-3 * Pj[last]
    if last > first and Pj[last] < x[last] * Qj[last] and not tail_usable:  # low, nothing above
        a, b = g[last] - h / 2, g[last] + h / 2
        gt = _Remembered(pair.gt_pair)
        gt(np.linspace(a, b, 65))  # _smallest_ok's first round, whose last point is b
        pb, qb = gt.at(b)
        xl = x[last]

        def pred_hi(cs):
            pg, qg = gt(cs)
            return (pg - pb) - xl * (qg - qb) >= 0

        c = _smallest_ok(pred_hi, a, b)
        p_in, q_in = (v - w for v, w in zip(gt.at(c), (pb, qb), strict=True))
        if 0 < p_in <= Pj[last] and 0 <= q_in <= Qj[last]:
            Pj[last - 1] += Pj[last] - p_in
            Qj[last - 1] += Qj[last] - q_in
            Pj[last], Qj[last] = p_in, q_in
    return changed


def _lump_offset(pair: LossPair, h: float) -> float:
    """Grid offset for the lower PMF that puts the atom holding most of the mass on a grid value.

    When one bin (g = 0, the bulk of a rarely sampled mechanism: the steps that do not sample
    the record, loss within ~q of 0) holds most of the mass, its merged loss ℓ* is ≈ ∓q·c,
    off the grid by far more than h² but by less than h; the lower PMF must label it with a
    grid value ≤ ℓ*, i.e. −h when ℓ* < 0: a bias of ~h per step, T·h after T steps. Shifting
    the lower grid by s ≈ ℓ* (slightly below it) removes that bias. Returns 0 when no bin holds
    half the mass. Any offset gives a valid lower PMF (labels are verified in ``discretize``).
    """
    def merged(s):
        e = np.array([s - h / 2, s + h / 2])
        pl, pg, ql, qg = pair.functions(e)
        p0 = float(pl[1] - pl[0]) if pl[1] <= 0.5 else float(pg[0] - pg[1])
        q0 = float(ql[1] - ql[0]) if ql[1] <= 0.5 else float(qg[0] - qg[1])
        # P0 − Q0 without cancellation in the ratio: both differences of the same edges
        d = float((pl[1] - ql[1]) - (pl[0] - ql[0]))
        return p0, (math.log1p(d / q0) if q0 > 0 and d / q0 > -1 else -math.inf)

    p0, shift = merged(0.0)
    if p0 < 0.5:
        return 0.0
    # the merged loss of the bin centred on s moves with s (it gains or loses the outcomes at
    # its edges): iterate s ← ℓ*(s) to the fixed point (a contraction: the edges hold little
    # mass), then step a hair below it so that the atom's loss is ≥ its grid value
    for _ in range(12):
        if not math.isfinite(shift) or abs(shift) > 0.25 * h:
            return 0.0
        _, nxt = merged(shift)
        done = abs(nxt - shift) <= 1e-7 * abs(shift) + 1e-15
        shift = nxt
        if done:
            break
    if not math.isfinite(shift) or abs(shift) > 0.25 * h:
        return 0.0
    return shift - 1e-3 * abs(shift) - 1e-9 * h


def discretize(pair: LossPair, h: float, *, tail: float, max_points: int, lower: bool = True,
               shift_lower: bool = False, upper: bool = True,
               memo: dict | None = None) -> tuple[DiscretePLD | None, DiscretePLD | None]:
    """Upper (connect-the-dots) and lower (merge-pool-round-down) PMFs of ``pair`` with step ``h``.

    Args:
        pair: the privacy-loss pair of one mechanism in one neighbouring ordering.
        h: grid step of the loss, > 0 (nats).
        tail: P-mass allowed outside the grid at each end (upper tail → +∞ in the upper
            PMF; lower tail dropped from the lower PMF).
        max_points: cap on the number of grid points.
        lower: also build the lower PMF (False: ``lower`` is returned as None).
        shift_lower: build the lower PMF on a grid shifted by :func:`_lump_offset` (for a
            rarely sampled mechanism whose bulk is one atom near 0).
        upper: also build the upper PMF (False: ``upper`` is returned as None; the lower PMF
            is the same either way).
        memo: a dict shared by the discretisations of one composition on one grid step: the
            distribution-function values it holds are reused (bitwise the same values,
            :meth:`LossPair.grid_functions`; the sampled Gaussian's two orderings share them).

    Returns:
        ``(upper, lower)`` :class:`DiscretePLD` objects with ``slack = 0``.

    Raises:
        GridTooLargeError: more than ``max_points`` grid points would be needed.
    """
    lo, hi = tail_points(pair, tail)
    # Losses above _MAX_LOSS are not representable through e^ℓ: that mass goes to +∞ in the
    # upper PMF (pessimistic) and is dropped from the lower one (optimistic).
    hi = min(hi, _MAX_LOSS)
    lo = min(lo, hi - h)
    i_lo = math.floor(lo / h) - 1  # one empty point below: the lower PMF may round down into it
    i_hi = max(math.ceil(hi / h), i_lo + 1)
    if i_hi * h < hi:
        # ceil(hi/h)·h can round below hi (hi/h = k − 1e-16): the top of the support (e.g. an
        # atom at ε) would then lie above the grid and be sent to +∞ in the upper PMF
        i_hi += 1
    n = i_hi - i_lo + 1
    if n > max_points:
        raise GridTooLargeError(n)
    # The upper PMF needs the distribution functions at the grid points g_i only, the lower one
    # at the bin edges g_j ± h/2 only: two arrays (the upper-only calls of a calibration search
    # evaluate half as many points).
    g = (i_lo + np.arange(n)) * h

    def halves(edges_, le, gt):
        # mass of (e_k, e_{k+1}], from the side where the distribution function is small.
        # Relative error allowed per distribution-function value: 4u (every pair's functions are
        # accurate to that, Φ via dpcalc._numerics.ndtr's libm path), except where an array this
        # large gets Φ from the vectorised erfc (dpcalc._erfc, certified: NDTR_VECTOR_ERROR_UNITS),
        # plus an absolute 1e-318 for subnormal values; a pair whose values carry more rounding
        # (a mixture of pairs) declares the excess in extra_error_units. The allowance is
        # relative to the two values each mass is the difference of: in the bin where the
        # distribution function passes ½, the gt value at its lower edge is the large side.
        # Returns (masses, their errors, the error of one value v: units·u·v + abs).
        units = (4 if edges_.size <= _NDTR_LIBM_MAX else NDTR_VECTOR_ERROR_UNITS) + pair.extra_error_units
        small = le[1:] <= 0.5
        m = np.maximum(np.where(small, le[1:] - le[:-1], gt[:-1] - gt[1:]), 0.0)
        absolute = 0.0 if units == 4 else 1e-318
        used = np.where(small, le[:-1], gt[:-1]) + np.where(small, le[1:], gt[1:])
        err = units * _U * used + (2 * absolute) + 2 * _U * m
        return m, err, lambda v: units * _U * v + absolute

    upper_pmf = _upper_pmf(pair, g, h, n, i_lo, halves, memo) if upper else None
    if not lower:
        return upper_pmf, None
    return upper_pmf, _lower_pmf(pair, g, h, n, i_lo, halves, shift_lower, memo)


def _upper_pmf(pair: LossPair, g: np.ndarray, h: float, n: int, i_lo: int, halves,
               memo: dict | None = None) -> DiscretePLD:
    """The connect-the-dots PMF of :func:`discretize` on the grid ``g`` (n points from i_lo)."""
    # ---- upper: connect the dots over (g_i, g_{i+1}]
    pl, pg, ql, qg = pair.grid_functions(i_lo, n, h, False, memo)  # at g
    PI, errPI, _ = halves(g, pl, pg)  # noqa: N806
    QI, errQI, _ = halves(g, ql, qg)  # noqa: N806
    ga = np.exp(g[:-1])
    denom = -math.expm1(-h)
    to_b = (PI - ga * QI + errPI + ga * errQI + 4 * _U * PI) / denom
    to_b = np.clip(to_b, 0.0, PI)
    to_a = PI - to_b
    up = np.zeros(n)
    up[:-1] += to_a
    up[1:] += to_b
    up[0] += pl[0]  # mass with L ≤ g_0 moved up to g_0
    return DiscretePLD(h, i_lo, up, float(pair.p_inf + pg[-1]), 0.0, True)


def _lower_pmf(pair: LossPair, g: np.ndarray, h: float, n: int, i_lo: int, halves,
               shift_lower: bool, memo: dict | None = None) -> DiscretePLD:
    """The merge-pool-round-down PMF of :func:`discretize` (grid ``g``, n points from i_lo)."""
    # ---- lower: bins (g_j − h/2, g_j + h/2]; merged atom j has
    # P-mass P_j, Q-mass Q_j and loss ℓ*_j = ln(P_j/Q_j) ∈ [g_j − h/2, g_j + h/2].
    # A shifted grid (g_j = offset + j·h) for a rarely sampled mechanism (_lump_offset).
    offset = _lump_offset(pair, h) if shift_lower else 0.0
    if offset != 0.0:
        g = g + offset
    edges = offset + (i_lo - 0.5 + np.arange(n + 1)) * h
    if offset == 0.0:
        pl2, pg2, ql2, qg2 = pair.grid_functions(i_lo, n + 1, h, True, memo)  # at edges
    else:
        pl2, pg2, ql2, qg2 = pair.functions(edges)
    bp, ebp, value_err = halves(edges, pl2, pg2)
    bq, ebq, _ = halves(edges, ql2, qg2)
    top_p, top_q = pg2[-1], qg2[-1]
    Pj = np.append(bp, top_p)  # noqa: N806  (last: atom above the grid)
    Qj = np.append(bq, top_q)  # noqa: N806
    errP = np.append(ebp, value_err(top_p)) + 4 * _U * Pj  # noqa: N806
    errQ = np.append(ebq, value_err(top_q)) + 4 * _U * Qj  # noqa: N806
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(Pj > 0, errP / Pj, 0.0) + np.where(Qj > 0, errQ / Qj, 0.0)
    target = np.append(g, g[-1]) + 16 * rel + 64 * _U * np.abs(np.append(g, g[-1])) + 1e-9 * h  # a hair above
    with np.errstate(over="ignore"):  # a loss above ~709 (a mixture's far atom): x = inf, never pooled
        x = np.exp(target)
    # a shifted grid already puts the first (bulk) atom a hair below its merged loss: shrinking
    # that bin would push part of the bulk into the next bin and bias it down by h instead
    changed = _fix_edge_bins(pair, g, h, Pj, Qj, x, fix_first=offset == 0.0)
    if changed:
        # regrouped bins: their masses are new differences of values ≤ 1 (≤ 16u absolute each)
        errP[changed] += 16 * _U  # noqa: N806
        errQ[changed] += 16 * _U  # noqa: N806
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.where(Pj > 0, errP / Pj, 0.0) + np.where(Qj > 0, errQ / Qj, 0.0)
        target = np.append(g, g[-1]) + 16 * rel + 64 * _U * np.abs(np.append(g, g[-1])) + 1e-9 * h
        with np.errstate(over="ignore"):
            x = np.exp(target)
    # Pool atom j with a fraction θ_j (per unit of atom j) of the neighbouring atom on the
    # other side of its target, so that the pooled likelihood ratio is e^{target_j}.
    with np.errstate(divide="ignore", invalid="ignore"):
        log_ratio = np.log(Pj) - np.log(Qj)
        on_grid = np.abs(log_ratio - np.append(g, g[-1])) <= 16 * rel + 64 * _U * np.abs(
            np.append(g, g[-1])) + 1e-12 * h  # e.g. an atom exactly at a grid value: no pooling
    on_grid[-1] = False
    with np.errstate(invalid="ignore"):  # x = inf against Q_j = 0 gives NaN: θ not finite, dropped below
        high = Pj > x * Qj  # ratio above target: mix in some of atom j−1
        donor = np.where(high, np.arange(n + 1) - 1, np.arange(n + 1) + 1)
        valid = (donor >= 0) & (donor <= n) & (np.arange(n + 1) < n) & (Pj > 0) & ~on_grid
        dclip = np.clip(donor, 0, n)
        num = x * Qj - Pj
        den = Pj[dclip] - x * Qj[dclip]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # θ = ±inf is dropped below
        theta = np.where(valid & (den != 0), num / np.where(den != 0, den, 1.0), 0.0)
    # a donor feeds at most two outputs (its neighbours): θ ≤ ½ each keeps its kept fraction
    # r ≥ 0; a donor asked by one neighbour only may give up to all of itself (θ ≤ 1)
    cand = valid & (theta >= 0) & (theta <= 1.0) & np.isfinite(theta)
    asked = np.bincount(dclip[cand], minlength=n + 1)
    ok = cand & (theta <= np.where(asked[dclip] == 1, 1.0, 0.5))
    theta = np.where(ok, theta, 0.0)
    # r_k: fraction of atom k kept for its own output, after feeding its neighbours' outputs.
    # Only the few atoms with θ ≠ 0 give anything (124 of 1.5 M at T = 10⁸): the fixed point is
    # iterated on them alone — the same sums in the same order as a bincount over every atom
    # (the terms with θ = 0 add exact zeros), so r is bitwise what the full iteration gives.
    r = np.ones(n + 1)
    nz = np.flatnonzero(theta)
    if nz.size:
        donors = dclip[nz]
        theta_nz = theta[nz]
        if np.all(donors[1:] > donors[:-1]):
            # every donor feeds one output (the common case, e.g. all 29k pooled atoms at T = 10⁵):
            # the bincount below would add each weight to 0.0 alone, so 1 − weight directly is
            # bitwise the same (1 − (−0) = 1 − 0), without the sort and the bincounts (issue 31)
            takers = donors
            last = r[takers]  # r[takers] at each step: the r_new assigned by the step before (distinct takers)
            for _ in range(60):
                r_new = 1.0 - theta_nz * r[nz]
                moved = np.abs(r_new - last).max()
                r[takers] = last = r_new
                if moved <= 1e-15:
                    break
        else:
            takers, slot = np.unique(donors, return_inverse=True)
            for _ in range(60):
                r_new = 1.0 - np.bincount(slot, weights=theta_nz * r[nz], minlength=takers.size)
                moved = np.max(np.abs(r_new - r[takers]))
                r[takers] = r_new
                if moved <= 1e-15:
                    break
    # consistency whether or not the iteration converged: atom k is used r_k (own output) plus
    # Σ θ_j r_j (given to its neighbours' outputs) times its mass, at most all of it. Lowering r_k
    # only shrinks output k (its ratio is unchanged) and what k asks from its donor.
    given = np.bincount(dclip, weights=theta * np.clip(r, 0.0, 1.0), minlength=n + 1)
    r = np.clip(np.minimum(r, 1.0 - given), 0.0, 1.0)
    outP = r * Pj + theta * r * Pj[dclip]  # noqa: N806
    outQ = r * Qj + theta * r * Qj[dclip]  # noqa: N806
    # Label every output with the largest grid value ≤ its (verified) loss: within
    # [g_j − h/2 − ..., ...] so the label is g_j or g_{j−1}; the atom above the grid gets g_{n−1}.
    # an atom that neither gives (r = 1) nor takes (θ = 0) is its own output, bitwise
    # (1·P + 0·P' = P): its loss is the log ratio above; only the few others are recomputed
    mixed = np.flatnonzero((r != 1.0) | (theta != 0.0))
    lact = log_ratio
    with np.errstate(divide="ignore", invalid="ignore"):
        lact[mixed] = np.log(outP[mixed]) - np.log(outQ[mixed])
    own = np.append(g, g[-1])
    at_j = (np.isfinite(lact) & (lact - 8 * rel - 64 * _U * np.abs(own) >= own)) | (on_grid & (theta == 0))
    at_j[-1] = True  # ratio ≥ e^{g_{n−1} + h/2}
    idx = np.minimum(np.arange(n + 1), n - 1) - np.where(at_j, 0, 1)
    keep = (idx >= 0) & (outP > 0)
    low = np.bincount(idx[keep], weights=outP[keep], minlength=n)[:n]
    return DiscretePLD(h, i_lo, low, float(pair.p_inf), 0.0, False, offset)
