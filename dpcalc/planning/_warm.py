r"""Warm-started calibration of many DP-SGD runs under an accountant with a search stand-in
(pld), for :func:`dpcalc.planning.plan.plan_grid`.

``dpcalc sigma`` (:func:`dpcalc.accounting.calibrate.calibrate_noise_multiplier`) spends most
of a pld calibration finding where to look: an rdp search and a coarse-pld search for a first
guess (``calibration_hint``), then a bracket grown from it. In a grid the neighbouring cell
already knows: its σ (σ*(q, T) is non-decreasing in T and q, docs/design.md §4 and the module
docstring of :mod:`dpcalc.planning.plan`, so the neighbour's σ extrapolated in log T is within
a few percent), its grid step and the local slope of log ε against log σ. This module keeps
the rest of the contract of ``dpcalc sigma`` and changes only the search path:

1. **Search function.** As in ``dpcalc sigma``: the accountant's ``calibration_search``
   stand-in (pld: its upper bound with the grid step fixed, smooth and non-increasing in σ)
   for the grid step the accountant settles on, read off its own evaluation at the guess
   (``calibration_probe``) and checked at the answer (step 3).
2. **Root, on the σ lattice.** Secant steps on (log σ, log ε) from the extrapolated σ (the
   slope extrapolated along the row for the first step, :func:`_slope`), every point on the
   lattice of σ rounded up to 8 significant digits
   (:func:`dpcalc.accounting.calibrate._round_up`) and inside the bracket
   of the points so far, until the lattice point σ whose stand-in ε is ≤ target and the
   lattice point just below it, whose stand-in ε is > target, are both evaluated
   (:func:`_lattice_root`; typically three evaluations: one near the root, then these two).
   The stand-in being non-increasing, this is the smallest lattice σ meeting the target on
   that grid; ``dpcalc sigma`` returns a lattice point where the same stand-in meets the
   target, hence never a smaller one (same grid step: checked in step 3).
3. **Verification** with the accountant at that σ: its ``calibration_probe``, i.e. its
   ``epsilon()`` without the lower bound of the last (polish) round — bitwise the same ε and
   grid step as ``dpcalc sigma``'s verification computes, its polish round's upper PMFs those
   the stand-in has just composed at σ (reused from pld's cache); the ``epsilon_lower`` in the
   result is the previous round's, still a proven lower bound. Its ε ≤ target, and the grid
   step it settles on there is the one searched (else search again
   on that grid, at most 3 times; when the steps alternate — the accountant picks grid A at
   the root of grid B and B at the root of A — the cell goes to ``dpcalc sigma``'s own path,
   which settles such cells by stepping σ up until verified).

The first cell (no neighbour) starts from the central-limit σ and slope
(:func:`~dpcalc.accounting.calibrate.clt_noise_multiplier`, ~2% off). Anything else — a
history the central limit does not model, a σ outside the search range, ε above the target at the
verified σ, no stand-in, more than :data:`MAX_EVALS` stand-in evaluations — hands the cell to
:func:`~dpcalc.accounting.calibrate.calibrate_dpsgd` itself. So every σ returned is verified
by the accountant (ε ≤ target) and is never above the σ ``dpcalc sigma`` prints for the cell
when both settle on the same grid step.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from dpcalc.accounting.calibrate import (
    SIGMA_MAX,
    SIGMA_MIN,
    _lattice_step,
    _round_up,
    calibrate_dpsgd,
    clt_log_slope,
    clt_noise_multiplier,
)
from dpcalc.errors import InfeasibleError
from dpcalc.events import dpsgd_event
from dpcalc.results import AccountingResult

__all__ = ["calibrate_warm", "MAX_EVALS", "RowStarts", "lattice_point"]

#: significant digits of the σ lattice (those of ``dpcalc sigma`` at its rtol 1e-6)
DIGITS = 8
#: most stand-in evaluations per cell before the cell is handed to calibrate_dpsgd
MAX_EVALS = 30
#: secant steps inside a lattice bracket before it is bisected instead
_SECANT_TRIES = 6
#: a secant step this far (in ln σ) beyond an end of the bracket is replaced (bisection or
#: expansion); closer, it is only moved onto the lattice point next to that end
_OUTSIDE = 1e-6


def _eps(res: AccountingResult) -> float:
    return math.inf if res.epsilon is None else res.epsilon


def lattice_point(x: float, lo: float | None, hi: float | None) -> float:
    """The σ lattice point (σ = e^x rounded up to :data:`DIGITS` significant digits) kept inside
    the bracket (lo, hi) of the points evaluated so far: the lattice point just below ``hi`` when
    it would reach ``hi``, just above ``lo`` when it would reach ``lo`` (None: no such end)."""
    s = _round_up(math.exp(x), DIGITS)
    if hi is not None and s >= hi:
        s = _lattice_step(hi, DIGITS, up=False)
    if lo is not None and s <= lo:
        s = _lattice_step(lo, DIGITS, up=True)
    return s


def _lattice_root(f: Callable[[float], float], target: float, x0: float, slope0: float,
                  seed: float | None = None) -> tuple[float, float] | None:
    """The smallest σ of the lattice (σ rounded up to :data:`DIGITS` significant digits) with
    f(σ) ≤ target, f non-increasing, searched from ln σ = x0: the lattice point σ with
    f(σ) ≤ target and f(σ⁻) > target at the lattice point σ⁻ just below it, both evaluated.

    f is evaluated at lattice points only, so that the points of the search double as the
    two of the answer: each step is a secant step on (ln σ, ln f − ln target) through the last
    two points (from one point: a step with ``slope0``, the slope expected from the row), at
    most ×4 up and ÷1.5 down, rounded up to the lattice and kept strictly inside the lattice bracket
    (σ⁻_best, σ_best) of the points evaluated so far (bisection of the bracket once the secant
    has had :data:`_SECANT_TRIES` steps without closing it). Near the root the secant's error
    (~ the product of the last two distances to the root) falls below the lattice spacing
    (1e-8 to 1e-7 relative) after two steps from a guess within ~1e-3, so a typical cell
    costs three evaluations: one near the root, then the two lattice points around it.

    ``seed``: an estimate of f(e^x0) (the accountant's own ε at the guess, which pld computes on
    the grid searched): the first secant point (it only steers the search; the bracket and the
    answer rest on f's own values).

    Returns (σ, slope of ln f against ln σ near the root), or None when the search leaves
    [SIGMA_MIN, SIGMA_MAX] or takes more than MAX_EVALS evaluations.
    """
    log_t = math.log(target)
    x_min, x_max = math.log(SIGMA_MIN), math.log(SIGMA_MAX)
    seen: dict[float, float] = {}
    lo: float | None = None  # the largest lattice σ evaluated with f > target
    hi: float | None = None  # the smallest lattice σ evaluated with f ≤ target
    pts: list[tuple[float, float]] = []  # (ln σ, ln f − ln target), the last evaluated last
    if seed is not None and 0 < seed < math.inf:
        pts.append((x0, math.log(seed) - log_t))
    slope = slope0
    x = x0
    steps = 0
    while True:
        if lo is not None and hi is not None and _lattice_step(hi, DIGITS, up=False) <= lo:
            return hi, slope
        if len(pts) >= 2 and pts[-1][0] != pts[-2][0]:
            s2 = (pts[-1][1] - pts[-2][1]) / (pts[-1][0] - pts[-2][0])
            if s2 < 0:
                slope = s2
        if pts:
            xk, gk = pts[-1]
            nxt = xk - gk / slope
            nxt = min(max(nxt, xk - math.log(1.5)), xk + math.log(4.0))
        elif lo is not None and hi is not None:  # ε = 0 or ∞ only so far: bisect or expand
            nxt = 0.5 * (math.log(lo) + math.log(hi))
        else:
            nxt = x - math.log(4.0) if hi is not None else x + math.log(4.0)
        # a step clearly outside the bracket (e.g. an infinite ε left the secant's points
        # behind): bisect, or expand from the bracket's one end
        below_lo = lo is not None and nxt < math.log(lo) - _OUTSIDE
        above_hi = hi is not None and nxt > math.log(hi) + _OUTSIDE
        if lo is not None and hi is not None and (steps >= _SECANT_TRIES or below_lo or above_hi):
            nxt = 0.5 * (math.log(lo) + math.log(hi))  # the secant does not close the bracket
        elif below_lo:
            nxt = math.log(lo) + math.log(1.5)
        elif above_hi:
            nxt = math.log(hi) - math.log(1.5)
        if not x_min < nxt < x_max:
            return None
        s = lattice_point(nxt, lo, hi)
        if len(seen) >= MAX_EVALS or s in seen:
            return None
        e = seen[s] = f(s)
        steps += 1
        x = math.log(s)
        if e > target:
            lo = s if lo is None else max(lo, s)
        else:
            hi = s if hi is None else min(hi, s)
        if 0 < e < math.inf:
            pts.append((x, math.log(e) - log_t))
            pts = pts[-2:]


def calibrate_warm(acc, q: float, t: int, target: float, delta: float, guess: float | None,
                   slope: float) -> tuple[AccountingResult, float, bool]:
    """σ for one run (q, T) under ``acc``, warm-started at ``guess`` (module docstring).

    Args:
        acc: the accountant (pld; any accountant with a ``calibration_search`` stand-in).
        q, t: the run's sampling rate and steps.
        target, delta: the ε target and δ.
        guess: the extrapolated σ (None: calibrate with :func:`calibrate_dpsgd`).
        slope: d ln ε / d ln σ near the neighbour's root (first secant step).

    Returns:
        (result with ``noise_multiplier`` set and ``details`` extended by ``target_epsilon``,
        ``evaluations``, ``warm_start`` and the counts ``warm_searches`` (grids searched),
        ``warm_full`` (accountant evaluations) and ``warm_stand_in`` (stand-in evaluations);
        the slope found; whether the warm path answered).

    Raises:
        InfeasibleError: from :func:`calibrate_dpsgd` (the target is out of reach).
    """
    def make(s: float):
        return dpsgd_event(noise_multiplier=s, sample_rate=q, steps=t)

    full: dict[float, AccountingResult] = {}
    n_search = 0

    def run_full(s: float) -> AccountingResult:
        # the accountant's calibration_probe: its epsilon() without the lower bound of a last
        # (polish) round — the same ε bitwise and the same grid; that round's upper PMFs are
        # the stand-in's at σ, just computed and kept (pld's _pld_cache)
        if s not in full:
            full[s] = acc.calibration_probe(make(s), delta=delta)
        return full[s]

    def fallback() -> tuple[AccountingResult, float, bool]:
        res = calibrate_dpsgd(acc, target_epsilon=target, delta=delta, sample_rate=q, steps=t)
        return res, slope, False

    if guess is None or not SIGMA_MIN < guess < SIGMA_MAX:
        return fallback()
    x0 = math.log(guess)
    # the grid step the accountant settles on near the answer: from its own evaluation at the
    # guess (the step changes between neighbouring cells, rarely within 1% of σ)
    first = acc.calibration_probe(make(guess), delta=delta)  # ε and grid only (pld: no polish bound)
    plan = acc.calibration_search(first)
    if plan is None:
        return fallback()
    key, search = plan
    seed = _eps(first)
    searches = 1
    tried: set = set()
    for _ in range(4):

        def f(s: float, search=search) -> float:
            nonlocal n_search
            n_search += 1
            return _eps(search.epsilon(make(s), delta=delta))

        found = _lattice_root(f, target, x0, slope, seed)
        if found is None:
            return fallback()
        sigma, slope_found = found
        res = run_full(sigma)
        plan = acc.calibration_search(res)
        if plan is None:
            return fallback()
        if plan[0] != key:  # the accountant settles on another grid here: search that one
            if plan[0] in tried:  # the grids alternate around the root: dpcalc sigma's way
                return fallback()
            tried.add(key)
            key, search = plan
            x0, seed = math.log(sigma), _eps(res)
            searches += 1
            continue
        for _ in range(3):  # the lattice point above the root estimate may be one short
            if _eps(res) <= target:
                break
            sigma = _lattice_step(sigma, DIGITS, up=True)
            res = run_full(sigma)
            plan = acc.calibration_search(res)
            if plan is None or plan[0] != key:
                return fallback()
        if not _eps(res) <= target:
            return fallback()
        details = dict(res.details)
        details.update(target_epsilon=target, evaluations=1 + len(full) + n_search, warm_start=True,
                       warm_searches=searches, warm_full=1 + len(full), warm_stand_in=n_search)
        out = AccountingResult(accountant=res.accountant, epsilon=res.epsilon, delta=res.delta,
                               certified=res.certified, details=details, noise_multiplier=sigma,
                               applicable=res.applicable, reason=res.reason, source=res.source)
        return out, slope_found, True
    return fallback()


def _guess(row: list[tuple[int, float]], prev: list[list[tuple[float, int, float]]], q: float, t: int
           ) -> float | None:
    """The extrapolated σ of the next cell (q, T) of a row: ``row`` the row's solved (T, σ) so
    far (increasing T), ``prev`` the solved rows before it, each a list of (q, T, σ) by
    increasing T. Only a starting point (verified later), so any rule will do; these are
    accurate to about 1% on the benchmark grid.

    * third cell on: quadratic (two cells: linear) extrapolation of ln σ in ln T along the row;
    * second cell: the slope in ln T of the previous row between its first two cells
      (none: σ ∝ T^{1/4});
    * first cell: along the column of first cells, linear in ln q from the two previous rows
      (one: σ ∝ q^{1/4}).

    Along a row the guess is kept between the last σ (σ*(q, T) is non-decreasing in T) and
    that σ times (T/T_last)^{3/4}; a first cell within a factor 4 of the previous row's.
    """
    lt = math.log(t)
    if row:  # σ*(q, T) is non-decreasing in T; growth faster than T^{3/4} is not seen
        t_last, s_last = row[-1]
        lo, hi = s_last, s_last * max(t / t_last, 1.0) ** 0.75
        return min(max(_extrapolate(row, prev, t, lt), lo), hi)
    if not prev:
        return None
    q1, _, s1 = prev[-1][0]
    if len(prev) >= 2 and prev[-2][0][0] != q1:
        q0, _, s0 = prev[-2][0]
        g = math.exp(math.log(s1) + math.log(s1 / s0) / math.log(q1 / q0) * math.log(q / q1))
        return min(max(g, s1 / 4.0), s1 * 4.0)
    return s1 * (q / q1) ** 0.25


def _extrapolate(row: list[tuple[int, float]], prev: list[list[tuple[float, int, float]]], t: int,
                 lt: float) -> float:
    """Along a row with at least one solved cell (:func:`_guess`)."""
    if len(row) >= 2:
        pts = [(math.log(tt), math.log(ss)) for tt, ss in row[-3:]]
        if len(pts) == 3 and len({x for x, _ in pts}) == 3:
            (x0, y0), (x1, y1), (x2, y2) = pts
            d01, d12 = (y1 - y0) / (x1 - x0), (y2 - y1) / (x2 - x1)
            curv = (d12 - d01) / (x2 - x0)
            return math.exp(y2 + d12 * (lt - x2) + curv * (lt - x2) * (lt - x1))
        (x1, y1), (x2, y2) = pts[-2:]
        return math.exp(y2 + (y2 - y1) / (x2 - x1) * (lt - x2)) if x2 != x1 else math.exp(y2)
    t0, s0 = row[0]
    p = 0.25
    if prev and len(prev[-1]) >= 2 and prev[-1][1][1] != prev[-1][0][1]:
        (_, ta, sa), (_, tb, sb) = prev[-1][:2]
        p = math.log(sb / sa) / math.log(tb / ta)
    return s0 * (t / t0) ** min(max(p, 0.0), 1.0)


def _slope(slopes: list[tuple[float, float]], lt: float, first: float) -> float:
    """The slope d ln ε / d ln σ expected at the root of the next cell of a row (ln T = ``lt``):
    linear in ln T through the row's last two (``slopes``: (ln T, slope) found at the roots of
    the row's cells; it drifts by ~7% from cell to cell on the benchmark grid), kept within a
    factor 2 of the last; the last one alone; or ``first`` (the previous row's first cell).
    Only the first secant step uses it."""
    if len(slopes) >= 2 and slopes[-1][0] != slopes[-2][0]:
        (x1, s1), (x2, s2) = slopes[-2:]
        s = s2 + (s2 - s1) / (x2 - x1) * (lt - x2)
        return min(max(s, 2.0 * s2), 0.5 * s2)
    return slopes[-1][1] if slopes else first


def _clt_start(acc, q: float, t: int, target: float, delta: float, slope: float
               ) -> tuple[float | None, float]:
    """A first cell's start without a neighbour: the σ of the central-limit (μ-GDP)
    approximation and its d ln ε / d ln σ (:func:`~dpcalc.accounting.calibrate.clt_noise_multiplier`,
    :func:`~dpcalc.accounting.calibrate.clt_log_slope`; about 2% below pld's σ on the benchmark
    grid, a millisecond and no accountant evaluation), or (None, ``slope``) when the approximation
    does not apply (then :func:`calibrate_dpsgd` calibrates the cell)."""
    def make(s: float):
        return dpsgd_event(noise_multiplier=s, sample_rate=q, steps=t)

    guess = clt_noise_multiplier(target_epsilon=target, delta=delta, make_event=make,
                                 neighboring=acc.neighboring)
    if guess is None:
        return None, slope
    s0 = clt_log_slope(guess, delta=delta, make_event=make, neighboring=acc.neighboring)
    return guess, (s0 if s0 is not None and s0 < 0 else slope)


class RowStarts:
    """Where each cell of a grid starts, from the cells solved before it (fed by increasing q,
    then T): :func:`_guess` and :func:`_slope` along the row and down the column of first
    cells, the central-limit start (:func:`_clt_start`) for a cell with none. Shared by
    :func:`calibrate_rows` and :func:`dpcalc.planning._quick.calibrate_rows_quick`."""

    def __init__(self, acc, target: float, delta: float) -> None:
        self.acc, self.target, self.delta = acc, target, delta
        self.row_q: float | None = None
        self.row: list[tuple[int, float]] = []  # the row's (T, σ) so far
        self.prev: list[list[tuple[float, int, float]]] = []  # the rows before, (q, T, σ)
        self.slopes: list[tuple[float, float]] = []  # (ln T, d ln ε / d ln σ at the root) along the row
        self.first_slope = -1.0  # at the first cell of the last row

    def start(self, q: float, t: int) -> tuple[float | None, float, bool]:
        """(guess σ or None, slope d ln ε / d ln σ for the first step, whether (q, T) opens a new
        row)."""
        new_row = q != self.row_q
        if new_row:
            if self.row:
                self.prev.append([(self.row_q, tt, ss) for tt, ss in self.row])
            if self.slopes:
                self.first_slope = self.slopes[0][1]
            self.row_q, self.row, self.slopes = q, [], []
        guess = _guess(self.row, self.prev, q, t)
        slope = _slope(self.slopes, math.log(t), self.first_slope)
        if guess is None:  # no solved cell yet: the central-limit σ and its slope
            guess, slope = _clt_start(self.acc, q, t, self.target, self.delta, slope)
        return guess, slope, new_row

    def solved(self, t: int, sigma: float, slope: float | None) -> None:
        """Record the cell (T, σ) of the current row, and the slope found at its root (None:
        none found)."""
        self.row.append((t, sigma))
        if slope is not None:
            self.slopes.append((math.log(t), slope))


def calibrate_rows(acc, keys: list[tuple[float, int]], target: float, delta: float
                   ) -> list[AccountingResult | InfeasibleError]:
    """σ for each (q, T) of ``keys`` (any order), each cell warm-started from the cells solved
    before it (:func:`_guess`): keys are solved by increasing q, then T. The first cell starts
    from the central-limit σ (:func:`_clt_start`); a cell the warm path refuses is calibrated
    by :func:`calibrate_dpsgd`.

    Returns:
        One entry per key, in the order of ``keys``: the result or the InfeasibleError.
    """
    order = sorted(range(len(keys)), key=lambda k: keys[k])
    out: list[AccountingResult | InfeasibleError | None] = [None] * len(keys)
    rows = RowStarts(acc, target, delta)
    for k in order:
        q, t = keys[k]
        guess, slope, _ = rows.start(q, t)
        try:
            res, found, warm = calibrate_warm(acc, q, t, target, delta, guess, slope)
        except InfeasibleError as e:
            out[k] = e
            continue
        out[k] = res
        if res.noise_multiplier is not None:
            rows.solved(t, res.noise_multiplier, found if warm and found < 0 else None)
    return out  # type: ignore[return-value]
