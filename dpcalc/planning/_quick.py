r"""Quick calibration of a plan grid (``dpcalc plan --quick``; :func:`dpcalc.planning.plan.plan_grid`
with ``quick=True``): every σ certified, its ε within :data:`WINDOW` below the target, in about
1.5 evaluations of one fixed-grid upper bound per cell.

Without --quick, each cell's σ is the one ``dpcalc sigma`` prints: the smallest 8-digit σ whose ε
meets the target on the grid the automatic pld accountant settles on, verified by that accountant
(:mod:`dpcalc.planning._warm`). Finding that grid takes the accountant's refinement rounds at
least once per cell, and that alone costs more than an interactive grid can spend (issue 31:
~2.5 s on 2 cores for the 400 cells of ``benchmarks/bench_plan.py``, before any search). --quick
keeps the certificate and drops the rest:

1. **Certificate.** Each cell's search runs on one stand-in: the accountant's
   :meth:`~dpcalc.accounting.base.Accountant.quick_stand_in` at the search's first point (pld:
   its upper bound on one grid step derived from the event, no refinement, no lower bound),
   chosen again at most :data:`_MAX_STAND_INS` − 1 times where the search moves more than
   :data:`_REPLAN` in ln σ from where it was chosen. It is a
   certified accountant in its own right: the cell's σ is one where its ε is ≤ the target, and
   the ε reported is its ε (``details["discretization"]`` is the grid step;
   ``dpcalc epsilon --accountant pld --discretization <step>`` reproduces the upper bound and
   prints the lower bound beside it).
2. **Tightness.** The search stops at the first 8-digit σ (rounded up) whose ε is in
   [target·(1 − :data:`WINDOW`), target], so σ is at most about WINDOW/|d ln ε/d ln σ| above the
   smallest σ meeting the target on that grid (|slope| ≥ 1 on the benchmark grid: ≤ 0.1%). The
   grid step is not the automatic accountant's, so σ may also sit on either side of
   ``dpcalc sigma``'s by the difference of the two grids' upper bounds (measured by
   ``benchmarks/bench_plan.py``, which prints both).
3. **Guesses.** As in :mod:`dpcalc.planning._warm` (the row's cells extrapolated in ln T, the
   central-limit σ for the first cell), with the row's points at the root estimates
   σ̂ = σ·(target/ε)^{1/slope} (not at the window's lattice points), plus the previous row's
   error at the same column (the extrapolation errs alike along neighbouring rows: on the
   benchmark grid the median error falls from 5e-4 to 1.3e-4 in ln σ). The first point is aimed
   at the middle of the window; secant steps follow (:func:`_window_root`).

A cell with no guess (under ``replace`` a worker's first cell: no central-limit start), no
stand-in, a stand-in whose grid does not fit, a search of more than :data:`MAX_EVALS`
evaluations on one grid step, or more than :data:`_MAX_STAND_INS` grid steps is calibrated by
the exact path
(:func:`dpcalc.planning._warm.calibrate_warm`: ``dpcalc sigma``'s σ; its details carry no
``quick`` flag).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from dpcalc.accounting.calibrate import SIGMA_MAX, SIGMA_MIN, _lattice_step, _round_up
from dpcalc.errors import InfeasibleError
from dpcalc.events import dpsgd_event
from dpcalc.planning._warm import DIGITS, RowStarts, _eps, calibrate_warm, lattice_point
from dpcalc.results import AccountingResult

__all__ = ["WINDOW", "MAX_EVALS", "calibrate_rows_quick"]

#: relative width of the accepted ε window [target·(1 − WINDOW), target]
WINDOW = 1e-3
#: most stand-in evaluations on one grid step (at most :data:`_MAX_STAND_INS` steps a cell)
#: before the cell goes to the exact path
MAX_EVALS = 8
#: the previous row's error at a column is applied only below this (in ln σ)
_MAX_CORRECTION = 0.01
#: a search point this far (in ln σ) from where the grid step was chosen chooses it again there
_REPLAN = 0.1
#: most grid steps chosen for one cell
_MAX_STAND_INS = 3


class _GridRefused(Exception):
    """The stand-in's grid did not fit (it fell back to the automatic accountant)."""


class _Replan(Exception):
    """The search left the neighbourhood of the σ the stand-in's grid step was chosen at:
    ``sigma`` the point it was going to evaluate, ``points`` and ``slope`` what the search had
    learned so far (:func:`_window_root` attaches them; they steer the search on the next step)."""

    def __init__(self, sigma: float) -> None:
        super().__init__(sigma)
        self.sigma = sigma
        self.points: list[tuple[float, float]] = []
        self.slope = -1.0


def _window_root(f: Callable[[float], float], target: float, window: float, x0: float, slope: float,
                 steer: list[tuple[float, float]] | None = None) -> tuple[float, float, float, int] | None:
    """An 8-digit lattice σ (rounded up) with f(σ) in [target·(1 − window), target] — the first
    one the search evaluates, not the smallest — f non-increasing, searched from ln σ = x0 with
    the slope d ln f/d ln σ ≈ ``slope`` < 0 (``steer``: earlier points (ln σ, ln f − ln target)
    of a nearby function, the last of which joins the first secant step).

    A :class:`_Replan` raised by f leaves with the points and slope so far attached.

    Each step is a secant step on (ln σ, ln f − ln target) through the last two finite points
    (from one: with ``slope``), aimed at ln(1 − window/2), at most ×4 up and ÷1.5 down, kept
    strictly inside the lattice bracket of the points so far (bisected once a step leaves it).
    When the bracket closes on two neighbouring lattice points without a point in the window
    (f jumps there), the upper one is returned: its f is ≤ target.

    Returns (σ, f(σ), slope near σ, evaluations), or None after :data:`MAX_EVALS` evaluations
    or outside [SIGMA_MIN, SIGMA_MAX].
    """
    log_t, aim = math.log(target), math.log1p(-window / 2.0)
    x_min, x_max = math.log(SIGMA_MIN), math.log(SIGMA_MAX)
    seen: dict[float, float] = {}
    lo: float | None = None  # the largest σ evaluated with f > target
    hi: float | None = None  # the smallest σ evaluated with f ≤ target (below the window)
    pts: list[tuple[float, float]] = list(steer or [])[-1:]
    x = x0
    for n in range(1, MAX_EVALS + 1):
        if not x_min < x < x_max:
            return None
        s = lattice_point(x, lo, hi)
        if s in seen:  # pragma: no cover - the bracket check below returns first
            return None
        try:
            e = seen[s] = f(s)
        except _Replan as far:
            far.points, far.slope = pts, slope
            raise
        if 0.0 < e < math.inf:
            pts = [*pts[-1:], (math.log(s), math.log(e) - log_t)]
            if len(pts) == 2 and pts[1][0] != pts[0][0]:
                s2 = (pts[1][1] - pts[0][1]) / (pts[1][0] - pts[0][0])
                if s2 < 0:
                    slope = s2
        if target * (1.0 - window) <= e <= target:
            return s, e, slope, n
        if e > target:
            lo = s if lo is None else max(lo, s)
        else:
            hi = s if hi is None else min(hi, s)
        if lo is not None and hi is not None and _lattice_step(hi, DIGITS, up=False) <= lo:
            return hi, seen[hi], slope, n
        if 0.0 < e < math.inf:
            xk, gk = pts[-1]
            nxt = min(max(xk + (aim - gk) / slope, xk - math.log(1.5)), xk + math.log(4.0))
        else:  # ε = ∞ (σ far too small) or 0: no slope to use
            nxt = math.log(s) + (math.log(4.0) if e > target else -math.log(1.5))
        if lo is not None and hi is not None and not math.log(lo) < nxt < math.log(hi):
            nxt = 0.5 * (math.log(lo) + math.log(hi))
        x = nxt
    return None


def _quick_cell(acc, q: float, t: int, target: float, delta: float, guess: float | None, slope: float,
                window: float) -> tuple[AccountingResult, float | None, float | None]:
    """One cell (module docstring): (result, root estimate σ̂ for the row's guesses, slope
    found); through :func:`calibrate_warm` when the quick path cannot answer.

    Raises:
        InfeasibleError: from the exact path (the target is out of reach).
    """
    def make(s: float):
        return dpsgd_event(noise_multiplier=s, sample_rate=q, steps=t)

    def exact(start: float | None, slope_now: float) -> tuple[AccountingResult, float | None, float | None]:
        # from the best estimate so far (the guess, or where the quick search got to)
        res, found, warm = calibrate_warm(acc, q, t, target, delta, start, slope_now)
        return res, res.noise_multiplier, (found if warm and found < 0 else None)

    if guess is None or not SIGMA_MIN < guess < SIGMA_MAX:
        return exact(guess, slope)
    slope = slope if slope < 0 else -1.0
    x0 = math.log(guess) + math.log1p(-window / 2.0) / slope  # aimed at the middle of the window
    results: dict[float, AccountingResult] = {}
    found = None
    steer: list[tuple[float, float]] = []
    for _ in range(_MAX_STAND_INS):
        # at the search's first point (pld: its one-step tail points are then computed once)
        chosen = acc.quick_stand_in(make(_round_up(math.exp(x0), DIGITS)), delta=delta)
        if chosen is None:
            return exact(math.exp(x0), slope)
        key, stand_in = chosen

        def f(s: float, x_key: float = x0, key=key, stand_in=stand_in) -> float:
            if abs(math.log(s) - x_key) > _REPLAN:
                raise _Replan(s)
            res = results[s] = stand_in.epsilon(make(s), delta=delta)
            if not res.details.get("fixed_grid") or res.details.get("discretization") != key:
                raise _GridRefused  # the grid did not fit: the automatic accountant answered
            return _eps(res)

        try:
            found = _window_root(f, target, window, x0, slope, steer)
            break
        except _Replan as far:  # the guess was far off: the step is chosen again there
            x0, slope, steer = math.log(far.sigma), far.slope, far.points
        except _GridRefused:
            break
    if found is None:
        return exact(math.exp(x0), slope)
    sigma, eps, slope_found, _ = found
    res = results[sigma]
    sigma_hat = sigma
    if 0.0 < eps < math.inf:
        sigma_hat = sigma * math.exp((math.log(target) - math.log(eps)) / slope_found)
    details = dict(res.details)
    details.update(target_epsilon=target, evaluations=len(results), quick=True, quick_window=window)
    out = AccountingResult(accountant=res.accountant, epsilon=res.epsilon, delta=res.delta,
                           certified=res.certified, details=details, noise_multiplier=sigma,
                           applicable=res.applicable, reason=res.reason, source=res.source)
    return out, sigma_hat, slope_found


def calibrate_rows_quick(acc, keys: list[tuple[float, int]], target: float, delta: float,
                         window: float = WINDOW) -> list[AccountingResult | InfeasibleError]:
    """σ for each (q, T) of ``keys`` (any order) by the quick path (module docstring): keys are
    solved by increasing q, then T, each cell guessed from the cells solved before it.

    Args:
        acc: the accountant (one with :meth:`~dpcalc.accounting.base.Accountant.quick_stand_in`:
            pld; any other accountant's cells take the exact path).
        keys: (sample rate q, steps T) pairs.
        target, delta: the ε target and δ.
        window: relative width of the accepted ε window, in (0, 0.1].

    Returns:
        One entry per key, in the order of ``keys``: the result (``noise_multiplier`` set, ε ≤
        target; ``details["quick"]`` True when the quick path answered) or the InfeasibleError.
    """
    order = sorted(range(len(keys)), key=lambda k: keys[k])
    out: list[AccountingResult | InfeasibleError | None] = [None] * len(keys)
    rows = RowStarts(acc, target, delta)  # the row's points are the root estimates σ̂
    errors: list[float | None] = []  # this row's ln(σ̂ / guess) by column
    prev_errors: list[float | None] = []
    for k in order:
        q, t = keys[k]
        raw, slope, new_row = rows.start(q, t)
        if new_row:
            prev_errors, errors = errors, []
        column = len(errors)
        guess = raw
        if raw is not None and column < len(prev_errors):
            err = prev_errors[column]
            if err is not None and abs(err) < _MAX_CORRECTION:
                guess = raw * math.exp(err)
        try:
            res, sigma_hat, found = _quick_cell(acc, q, t, target, delta, guess, slope, window)
        except InfeasibleError as e:
            out[k] = e
            errors.append(None)
            continue
        out[k] = res
        errors.append(None if raw is None or sigma_hat is None else math.log(sigma_hat / raw))
        if sigma_hat is not None:
            rows.solved(t, sigma_hat, found)
    return out  # type: ignore[return-value]
