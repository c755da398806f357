"""One calibration helper for every accountant: the noise multiplier for a target ε.

Bracket by expansion, then Brent's method (:func:`dpcalc._numerics.brentq`, the algorithm of
``scipy.optimize.brentq`` without its import cost) on log σ to a relative tolerance in σ,
then verify: the returned σ satisfies ε(σ) ≤ target under the same accountant, nudged up if
root-finding tolerance left it short (docs/design.md §1; docs/contributing.md §8; dp_accounting
``mechanism_calibration.py`` does the same check).

Two accountant hooks (declared on :class:`~dpcalc.accounting.base.Accountant`, default none):
``calibration_hint`` (a cheap first guess of σ) and ``calibration_search`` (a smooth, monotone
stand-in for ε(σ) to run the root finder on, e.g. pld with its grid fixed; the search is
repeated until the accountant's own plan at the σ found is the one searched, so the answer
does not depend on the search path). With a stand-in, the search is secant steps from the
accountant's result at the first guess (:func:`_secant_calibration`; the CLT's slope for the
first step, :func:`clt_log_slope`), falling back to bracket + Brent when they do not settle:
for the README quick start under pld, 2 evaluations of the accountant (the guess's grid and the
certificate) and about 3 of its fixed-grid copy, where bracket + Brent took 2 and 5, after a
first guess from an rdp search (6 evaluations) and a coarse pld search (4) (issue 17). The
returned σ is rounded *up* to 8 significant digits
(more for rtol < 1e-7; tables print 7, also rounded up) and verified there with the
accountant as a user would call it, so copying the printed σ into ``dpcalc epsilon``
reproduces ε ≤ target.

A history whose ε is unbounded at the first σ tried is checked at ``SIGMA_MAX`` at once, so
an unreachable target is refused after two evaluations instead of a bracket search.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from dpcalc import _validate as v
from dpcalc._numerics import brentq
from dpcalc.accounting.base import Accountant
from dpcalc.errors import InfeasibleError
from dpcalc.events import Event, dpsgd_event
from dpcalc.results import AccountingResult

__all__ = ["calibrate_noise_multiplier", "calibrate_dpsgd", "rough_noise_multiplier", "clt_noise_multiplier",
           "clt_log_slope", "SIGMA_MIN", "SIGMA_MAX"]

#: search range of the noise multiplier
SIGMA_MIN = 1e-2
SIGMA_MAX = 1e6


def calibrate_noise_multiplier(
    accountant: Accountant,
    *,
    target_epsilon: float,
    delta: float,
    make_event: Callable[[float], Event],
    rtol: float = 1e-6,
) -> AccountingResult:
    """The smallest noise multiplier σ (to ``rtol`` relative) whose ε under ``accountant``
    is at most ``target_epsilon`` at ``delta``.

    Args:
        accountant: any registered accountant (its ε must decrease in σ).
        target_epsilon: ε target, > 0.
        delta: δ in (0, 1).
        make_event: maps σ to the mechanism history to account for.
        rtol: relative tolerance on σ (the returned σ errs high, never low; it is rounded up
            to max(8, ⌈−log₁₀ rtol⌉ + 2) significant digits, so rounding adds at most rtol/10;
            tables print 7 digits, also rounded up).

    Returns:
        The accountant's result at the returned σ, with ``noise_multiplier`` set and
        ``details`` extended by ``target_epsilon`` and ``evaluations``.
        Its ``epsilon`` is ≤ ``target_epsilon`` (verified).

    Raises:
        ParameterError: bad ``target_epsilon``/``delta``/``rtol``.
        InfeasibleError: no σ up to ``SIGMA_MAX`` meets the target under this accountant.
        UnsupportedEventError: the accountant cannot account for the event.
    """
    target = v.positive("epsilon", target_epsilon)
    delta = v.open_unit("delta", delta)
    rtol = v.positive("rtol", rtol)
    digits = max(8, math.ceil(-math.log10(rtol)) + 2)
    caches: dict[int, dict[float, AccountingResult]] = {}
    held: list[Accountant] = []  # every accountant evaluated stays alive: its id keys its cache
    probes: dict[float, AccountingResult] = {}  # the accountant's calibration_probe results

    def result(acc: Accountant, sigma: float, probe: bool = False) -> AccountingResult:
        cache = caches.get(id(acc))
        if cache is None:
            cache = caches[id(acc)] = {}
            held.append(acc)
        if sigma not in cache:
            if probe:  # ε and key only (never returned: the answer is verified with epsilon())
                if sigma not in probes:
                    probes[sigma] = acc.calibration_probe(make_event(sigma), delta=delta)
                return probes[sigma]
            cache[sigma] = acc.epsilon(make_event(sigma), delta=delta)
        return cache[sigma]

    def evaluations() -> int:
        return sum(len(c) for c in caches.values()) + len(probes)

    # Hook: an accountant may offer a cheap first guess of σ (e.g. pld: the CLT's σ corrected
    # by one coarse evaluation); the search then starts there.
    start, grow = 1.0, 4.0
    guess = accountant.calibration_hint(target_epsilon=target, delta=delta, make_event=make_event)
    if guess is not None and SIGMA_MIN < guess < SIGMA_MAX:
        start, grow = guess, 1.05

    first = result(accountant, start, probe=True)
    if not math.isfinite(_eps(first)):
        # unbounded at the first σ: is the target reachable at all? (one evaluation, not a search)
        _check_reachable(lambda s: result(accountant, s), target, delta, accountant)

    # Hook: the function to search. An accountant whose ε(σ) is only piecewise smooth (pld
    # picks its grid per σ) returns (key, stand-in) with a stand-in whose ε is smooth and
    # monotone in σ (pld: its grid fixed) and never below its own ε where it computes with
    # the same key.
    note = None
    sigma = None
    plan = accountant.calibration_search(first)
    if plan is None:
        # the accountant itself is searched: its probe there is its epsilon() (pld's differs only
        # by the polish round's lower bound, and pld has no polish round without a stand-in)
        caches[id(accountant)].setdefault(start, first)
    if plan is not None:
        # secant steps on the stand-in from the first evaluation (a few evaluations, all near
        # the root), re-planned until the key at the σ found is the key searched
        slope = clt_log_slope(start, delta=delta, make_event=make_event, neighboring=accountant.neighboring)
        sigma = _secant_calibration(accountant, result, start, target, rtol, digits, slope=slope)
    if sigma is None:  # no stand-in, or the secant search did not settle: bracket, then Brent
        search, key = accountant, None
        if plan is not None:
            key, search = plan
        found = _search(lambda s: result(search, s), target, start, grow, rtol, delta, accountant)
        if isinstance(found, AccountingResult):  # target met at SIGMA_MIN
            note = f"the target is met at the smallest noise multiplier searched ({SIGMA_MIN:g})"
            found = SIGMA_MIN
        sigma = found
        for _ in range(3):
            if search is accountant or note:
                break
            # the search used the accountant's plan at `start`: is it its plan at the σ found?
            plan = accountant.calibration_search(result(accountant, _round_up(sigma, digits)))
            if plan is None or plan[0] == key:
                break
            key, search = plan
            found = _search(lambda s, acc=search: result(acc, s), target, sigma, 1.002, rtol, delta, accountant)
            if isinstance(found, AccountingResult):
                break
            sigma = found

    # Verify with the accountant as the user calls it, at σ rounded up to the digits printed
    # (so that copying the printed σ reproduces the guarantee); nudge up if it is short.
    sigma = _round_up(sigma, digits)
    res = result(accountant, sigma)
    step = max(rtol / 4, 10.0 ** (1 - digits))
    while _eps(res) > target:
        sigma = _round_up(sigma * (1 + step), digits)
        step *= 2
        if sigma > SIGMA_MAX:
            raise InfeasibleError(
                f"no noise multiplier up to {SIGMA_MAX:g} reaches epsilon <= {target:g} at "
                f"delta={delta:g} under accountant '{accountant.name}'; " + accountant.infeasible_hint(target, delta=delta))
        res = result(accountant, sigma)
        note = None
    return _finish(res, sigma, target, evaluations(), note=note)


def rough_noise_multiplier(
    accountant: Accountant,
    *,
    target_epsilon: float,
    delta: float,
    make_event: Callable[[float], Event],
    rtol: float = 1e-3,
    start: float | None = None,
    cache: dict[float, AccountingResult] | None = None,
) -> float | None:
    """An unverified first guess of σ for a ``calibration_hint``: the same bracket and Brent
    search on ``accountant`` itself (no hooks), to ``rtol``, without the final verification.

    Args:
        accountant: the accountant to search (e.g. rdp, or a coarse copy of pld).
        target_epsilon, delta, make_event: as for :func:`calibrate_noise_multiplier`.
        rtol: relative tolerance on σ.
        start: where the bracket starts (then grows by 5%, 10%, 21%, ...); default σ = 1
            (then by factors of 4).
        cache: the caller's memo σ → result (filled here), e.g. to read ε(SIGMA_MAX) after a
            None.

    Returns:
        σ, or None when the target is out of reach or the history is not supported. Never
        use it without verifying: it may be on either side of the root.
    """
    from dpcalc.errors import UnsupportedEventError

    memo: dict[float, AccountingResult] = {} if cache is None else cache

    def result(sigma: float) -> AccountingResult:
        if sigma not in memo:
            memo[sigma] = accountant.epsilon(make_event(sigma), delta=delta)
        return memo[sigma]

    begin, grow = (1.0, 4.0) if start is None or not SIGMA_MIN < start < SIGMA_MAX else (start, 1.05)
    try:
        found = _search(result, target_epsilon, begin, grow, rtol, delta, accountant)
    except (InfeasibleError, UnsupportedEventError):
        return None
    return SIGMA_MIN if isinstance(found, AccountingResult) else found


def clt_noise_multiplier(*, target_epsilon: float, delta: float, make_event: Callable[[float], Event],
                         neighboring: str = "add-remove") -> float | None:
    r"""The noise multiplier at which the GDP/central-limit approximation of ``make_event(σ)``
    meets (``target_epsilon``, ``delta``): a first guess for a calibration, never an answer.

    T steps of the Poisson-sampled Gaussian (rate q) are approximately μ-GDP with
    μ(σ) = q·√(T·(e^{1/σ²} − 1)) (Bu, Dong, Long, Su 2020 eq. (6); segments add μ², unsampled
    Gaussians μ = √T/σ exactly: :func:`dpcalc.accounting.gdp.gdp_mu`), and μ-GDP meets (ε, δ)
    iff μ ≤ μ* with 1/μ* the analytic-Gaussian noise of (ε, δ) at sensitivity 1 (Balle & Wang
    2018 Thm 8; Dong, Roth, Su 2019 Cor 2.13; :func:`dpcalc.mechanisms.gaussian.analytic_noise_std`).
    The σ solving μ(σ) = μ* (Brent on ln σ, ~1e-6 relative) costs about a millisecond and no
    accountant evaluation. The CLT may under-report ε (docs/design.md §4: the ``gdp``
    accountant is labelled approximate), so this σ tends to be below the certified one; e.g.
    the README quick start (q = 256/60000, T = 14,063, ε = 3, δ = 1e-5): 0.9512 against pld's
    0.9686.

    Args:
        target_epsilon: ε > 0.
        delta: δ in (0, 1).
        make_event: maps σ to the history (a composition of Gaussian and Poisson-sampled
            Gaussian steps; anything else gives None).
        neighboring: ``"add-remove"`` or ``"replace"`` (sampled steps under ``replace``: None).

    Returns:
        σ in (SIGMA_MIN, SIGMA_MAX), or None when the history is not of that kind or no σ in
        the search range matches.
    """
    from dpcalc.accounting.gdp import gdp_mu
    from dpcalc.errors import DpcalcError
    from dpcalc.mechanisms.gaussian import analytic_noise_std

    try:
        log_mu_star = -math.log(analytic_noise_std(epsilon=target_epsilon, delta=delta))

        def g(x: float) -> float:  # decreasing in x = ln σ
            mu = gdp_mu(make_event(math.exp(x)), neighboring=neighboring)[0]
            return max(min((math.log(mu) if mu > 0 else -math.inf) - log_mu_star, 1e300), -1e300)

        lo, hi = math.log(SIGMA_MIN), math.log(SIGMA_MAX)
        if not g(lo) > 0 > g(hi):
            return None
        return math.exp(brentq(g, lo, hi, xtol=1e-7))
    except (DpcalcError, ArithmeticError, ValueError, RuntimeError):
        return None


def clt_log_slope(sigma: float, *, delta: float, make_event: Callable[[float], Event],
                  neighboring: str = "add-remove") -> float | None:
    r"""d ln ε / d ln σ at ``sigma`` under the GDP/central-limit approximation (see
    :func:`clt_noise_multiplier`; ε(σ) = ε of μ(σ)-GDP at ``delta``, Dong, Roth, Su 2019 Cor
    2.13): the first secant step of a calibration, e.g. −1.98 for the README quick start
    (pld's own slope there: −1.96). A central difference over σ·e^{±10⁻³}.

    Returns:
        The slope (< 0), or None when the history is not a Gaussian one or ε is 0 or
        unbounded there.
    """
    from dpcalc.accounting.gdp import gdp_mu
    from dpcalc.errors import DpcalcError
    from dpcalc.mechanisms.gaussian import gaussian_epsilon

    h = 1e-3
    try:
        e = [gaussian_epsilon(delta=delta, mu=gdp_mu(make_event(sigma * math.exp(t)), neighboring=neighboring)[0])
             for t in (-h, h)]
    except (DpcalcError, ArithmeticError, ValueError, RuntimeError):
        return None
    if not (0 < e[1] < e[0] < math.inf):
        return None
    return (math.log(e[1]) - math.log(e[0])) / (2 * h)


#: most loop steps (evaluations) of :func:`_secant_calibration` before bracket + Brent take over
_SECANT_MAX_STEPS = 30
#: re-plans of :func:`_secant_calibration` when the accountant settles on another key at the σ found
_SECANT_MAX_REPLANS = 3
#: relative change of σ below which a stand-in's ε is not resolved (pld's fixed-grid ε moves by
#: ~1e-8 relative at random from one σ to the next within 1e-8: FFT round-off and the read-out)
_SECANT_NOISE = 1e-8
#: relative difference allowed for between the accountant's ε and its stand-in's at the same σ
#: when the accountant's result serves as a secant point (pld: equal where its last round is the
#: tightest, as in the README quick start) — only for the error estimate of a root guess
_SECANT_GUIDE_BIAS = 1e-7


def _secant_calibration(accountant: Accountant, result, start: float, target: float, rtol: float,
                        digits: int, *, slope: float | None) -> float | None:
    r"""The σ of :func:`calibrate_noise_multiplier` for an accountant with a stand-in
    (``calibration_search``), in few evaluations near the root; None when not settled (the
    caller then brackets and runs Brent's method, reusing every evaluation through ``result``).

    On x = ln σ and f = ln ε − ln target (ε of the stand-in, decreasing in σ): secant steps,
    the first from the accountant's own result at ``start`` with slope ``slope`` (the CLT's,
    :func:`clt_log_slope`; −1 without), kept inside the bracket of the points evaluated (else
    bisection), at most ×4 up and ÷1.5 down per step (below the root ε grows fast and pld's grid
    with it). Each step aims just *below* the secant root, by twice its error estimate (at most
    0.45·``rtol``) and by at least 3·:data:`_SECANT_NOISE` (the stand-in's ε is not resolved
    below that), so that the next point usually exceeds the target within ``rtol``/2 of the
    root. Settled when either

    * two stand-in points bracket the root within ``rtol``/2: σ = e^{r + 2e} (at most the upper
      one), or
    * a point exceeding the target lies within ``rtol``/2 below a secant root r
      (:func:`_secant_root`) whose error estimate e is below a tenth of the lattice spacing or
      half the stand-in's noise level: σ = e^{r + 2e}.

    σ is then rounded up to ``digits`` significant digits and evaluated with the accountant (the
    certificate, as the caller verifies it); if the accountant settles there on another key
    (pld: another grid) the search restarts on that key from there (at most 3 times); if its ε
    exceeds the target there (the stand-in's noise), the next points of the lattice are tried
    (at most 3; the smallest that passes is returned, so σ stays as small as the lattice allows), then that
    point bounds the root from below (the stand-in is never below the accountant on the same
    key) and the search goes on. The returned σ therefore is a
    lattice point whose accountant ε is verified (or None), within ``rtol`` of a σ whose
    stand-in ε exceeds the target.
    """
    log_t = math.log(target)
    tol = 0.5 * rtol
    # a tenth of the lattice spacing, or the stand-in's noise level if above
    settle = max(0.1 * 10.0 ** (1 - digits), 0.5 * _SECANT_NOISE)
    log_min, log_max = math.log(SIGMA_MIN), math.log(SIGMA_MAX)
    s0 = slope if slope is not None and slope < 0 else -1.0

    def restart(x: float, res: AccountingResult):
        """Points, lower end after the accountant's result ``res`` at e^x (its ε ≤ the
        stand-in's: a lower end when above the target; a secant point, not a stand-in one)."""
        eps = _eps(res)
        pts = [(x, math.log(eps) - log_t, False)] if 0 < eps < math.inf else []
        return pts, (x if eps > target else None)

    x = math.log(start)
    res = result(accountant, start, probe=True)
    plan = accountant.calibration_search(res)
    if plan is None:
        return None
    key, search = plan
    pts, lo = restart(x, res)
    hi: float | None = None
    replans = 0
    for _ in range(_SECANT_MAX_STEPS):
        if pts:
            r, err = _secant_root(pts, s0)
        elif lo is not None or hi is not None:  # ε = ∞ or 0 only so far: expand or bisect
            r, err = (lo + math.log(4.0) if hi is None else hi - math.log(1.5) if lo is None
                      else 0.5 * (lo + hi)), math.inf
        else:
            return None
        if lo is not None and hi is not None and not lo < r < hi:
            r, err = 0.5 * (lo + hi), math.inf
        cand = None
        if lo is not None and err <= settle and 0 < r - lo <= tol and (hi is None or r < hi):
            cand = r + 2 * err if hi is None else min(r + 2 * err, hi)
        elif lo is not None and hi is not None and hi - lo <= tol:
            # bracketed within rtol/2: the secant root inside it, or its upper end
            cand = min(r + 2 * err, hi) if math.isfinite(err) else hi
        if cand is not None:
            sigma = _round_up(math.exp(cand), digits)
            for _ in range(3):
                # the stand-in first (pld: a fraction of the accountant's cost): short by its noise,
                # σ is below the stand-in's root, so the next lattice point is tried instead
                if _eps(result(search, sigma)) <= target:
                    break
                lo = max(lo, math.log(sigma))
                sigma = _lattice_step(sigma, digits, up=True)
            res = result(accountant, sigma)
            plan = accountant.calibration_search(res)
            if plan is not None and plan[0] != key and replans < _SECANT_MAX_REPLANS:
                replans += 1
                key, search = plan
                pts, lo = restart(math.log(sigma), res)
                hi = None
                continue
            for _ in range(3):  # short by the stand-in's noise: the next points of the lattice
                if plan is None or plan[0] != key or _eps(res) <= target:
                    return sigma  # the caller verifies (and nudges up should ε exceed the target)
                # ε(σ) > target on the key searched: σ is below the root of the stand-in too
                lo = max(lo, math.log(sigma))
                sigma = _lattice_step(sigma, digits, up=True)
                res = result(accountant, sigma)
                plan = accountant.calibration_search(res)
            if plan is None or plan[0] != key or _eps(res) <= target:
                return sigma
            lo = max(lo, math.log(sigma))
            continue
        # aim below the root: by the estimated error, and by more than the stand-in's noise
        margin = max(min(2 * err, 0.45 * tol), min(3 * _SECANT_NOISE, 0.45 * tol))
        nxt = r - margin if math.isfinite(err) else r
        if pts:
            last = pts[-1][0]
            nxt = min(max(nxt, last - math.log(1.5)), last + math.log(4.0))
        if lo is not None and hi is not None and not lo < nxt < hi:
            nxt = 0.5 * (lo + hi)
        elif lo is not None and nxt <= lo:  # the secant disagrees with a known lower end
            nxt = lo + 0.5 * tol
        elif hi is not None and nxt >= hi:
            nxt = hi - 0.5 * tol
        if not log_min < nxt < log_max:
            return None  # the target is met at SIGMA_MIN or out of reach: the bracket search says which
        eps = _eps(result(search, math.exp(nxt)))
        if eps > target:
            lo = nxt if lo is None else max(lo, nxt)
        else:
            hi = nxt if hi is None else min(hi, nxt)
        if 0 < eps < math.inf:
            pts = (pts + [(nxt, math.log(eps) - log_t, True)])[-4:]
    return None


def _secant_root(pts: list[tuple[float, float, bool]], slope: float) -> tuple[float, float]:
    """The next root estimate of :func:`_secant_calibration` from its points (x, f, stand-in?),
    the last one evaluated last: the secant through the last point xₙ and the partner xₚ whose
    estimated error is smallest; one point: a step with ``slope``.

    The estimate of the error of r is e = 3·|r − xₙ|·|r − xₚ| (the secant's error is
    ≈ f''/(2f')·(r − xₙ)(r − xₚ); |f''/f'| ≤ 6 taken for these smooth log-log curves) plus
    (2ν + b)·|r − xₙ| / (|s|·|xₙ − xₚ|), the effect on the slope s of a noise ν =
    :data:`_SECANT_NOISE` in each f, and of b = :data:`_SECANT_GUIDE_BIAS` when xₚ is the
    accountant's own result rather than a stand-in point (close partners magnify both).

    Returns:
        (r, e); e is inf without a partner of negative slope.
    """
    xn, fn, _ = pts[-1]
    best = (xn - fn / slope, math.inf)
    for xp, fp, stand_p in pts[:-1]:
        if xp == xn:
            continue
        s = (fn - fp) / (xn - xp)
        if not s < 0:
            continue
        r = xn - fn / s
        noise = 2.0 * _SECANT_NOISE + (0.0 if stand_p else _SECANT_GUIDE_BIAS)
        err = 3.0 * abs(r - xn) * abs(r - xp) + noise * abs(r - xn) / (abs(s) * abs(xn - xp))
        if err < best[1]:
            best = (r, err)
    return best


def _eps(res: AccountingResult) -> float:
    return math.inf if res.epsilon is None else res.epsilon


def _round_up(sigma: float, digits: int) -> float:
    """σ rounded up to ``digits`` significant decimal digits: the smallest k/10^m ≥ σ (never below
    σ; a σ that is such a number already is returned unchanged — σ·10^m may round above the
    integer k, so the nearest integer is tried first, not the ceiling)."""
    if sigma <= 0 or not math.isfinite(sigma):
        return sigma
    scale = 10.0 ** (digits - 1 - math.floor(math.log10(sigma)))
    out = math.floor(sigma * scale + 0.5) / scale
    while out < sigma:
        out = (math.floor(out * scale + 0.5) + 1) / scale
    return out


def _search(result, target: float, start: float, grow: float, rtol: float, delta: float,
            accountant: Accountant):
    """Smallest σ (to rtol) with ε(σ) ≤ target for ``result(σ)``: bracket by expansion from
    ``start``, Brent on log σ, then nudge up until the target is met. Returns σ, or the
    result at SIGMA_MIN when the target is met there already.

    Raises:
        InfeasibleError: ε(SIGMA_MAX) > target.
    """
    def eps(sigma: float) -> float:
        return _eps(result(sigma))

    lo, hi = start, start
    if eps(start) > target:
        if not math.isfinite(eps(start)):
            _check_reachable(result, target, delta, accountant)
        while eps(hi) > target:
            lo, hi = hi, hi * grow
            grow = min(grow * grow, 4.0)  # a poor guess costs few extra steps
            if hi > SIGMA_MAX:
                at_max = eps(SIGMA_MAX)
                if at_max <= target:
                    hi = SIGMA_MAX
                    break
                raise InfeasibleError(
                    f"no noise multiplier up to {SIGMA_MAX:g} reaches epsilon <= {target:g} at "
                    f"delta={delta:g} under accountant '{accountant.name}' (epsilon at sigma="
                    f"{SIGMA_MAX:g} is {at_max:.6g}); "
                    + accountant.infeasible_hint(target, delta=delta)
                )
    else:
        while eps(lo) <= target:
            if lo <= SIGMA_MIN:
                return result(SIGMA_MIN)
            hi, lo = lo, max(lo / grow, SIGMA_MIN)
            grow = min(grow * grow, 4.0)

    if hi <= lo * (1 + rtol):
        return hi

    def g(log_sigma: float) -> float:
        return min(eps(math.exp(log_sigma)), 1e300) - target

    sigma = math.exp(brentq(g, math.log(lo), math.log(hi), xtol=rtol / 4, maxiter=200))
    # never return a σ whose ε exceeds the target
    step = max(rtol / 4, 1e-12)
    while eps(sigma) > target and sigma < hi:
        sigma = min(sigma * (1 + step), hi)
        step *= 2
    return sigma if eps(sigma) <= target else hi


def _check_reachable(eps_result, target: float, delta: float, accountant: Accountant) -> None:
    """Raise :class:`InfeasibleError` unless ε(SIGMA_MAX) ≤ target (``eps_result(σ)`` gives the result)."""
    res = eps_result(SIGMA_MAX)
    at_max = _eps(res)
    if at_max > target:
        why = f": {res.reason}" if res.reason else ""
        raise InfeasibleError(
            f"no noise multiplier up to {SIGMA_MAX:g} reaches epsilon <= {target:g} at "
            f"delta={delta:g} under accountant '{accountant.name}' (epsilon at sigma="
            f"{SIGMA_MAX:g} is {at_max:.6g}{why}); " + accountant.infeasible_hint(target, delta=delta))


def _finish(res: AccountingResult, sigma: float, target: float, evaluations: int,
            note: str | None = None) -> AccountingResult:
    details = dict(res.details)
    details["target_epsilon"] = target
    details["evaluations"] = evaluations
    if note:
        details["note"] = note
    return AccountingResult(
        accountant=res.accountant, epsilon=res.epsilon, delta=res.delta, certified=res.certified,
        details=details, noise_multiplier=sigma, applicable=res.applicable, reason=res.reason,
        source=res.source,
    )


def calibrate_dpsgd(
    accountant: Accountant,
    *,
    target_epsilon: float,
    delta: float,
    sample_rate: float,
    steps: int,
    rtol: float = 1e-6,
    sampler: Mapping[str, Any] | None = None,
) -> AccountingResult:
    """The DP-SGD noise multiplier σ for a target (ε, δ) (Poisson sampling rate q, T steps).

    Same contract as :func:`calibrate_noise_multiplier` with the history
    :func:`dpcalc.events.dpsgd_event` (σ, q, T). ``sampler``: the batch sampler as keyword
    arguments of :func:`~dpcalc.events.dpsgd_event` (``sampling``, ``batch_size``,
    ``dataset_size``, ``max_batch_size``; :meth:`dpcalc.schedule.Schedule.sampler_args`);
    default Poisson at rate ``sample_rate``.

    Raises:
        ParameterError: bad q or T (as well as bad ε/δ).
        InfeasibleError: the target is not attainable under this accountant.
    """
    v.half_open_unit("sample_rate", sample_rate)
    steps = v.count("steps", steps, minimum=1)
    extra = {**dict(sampler or {}), "sample_rate": sample_rate}
    return calibrate_noise_multiplier(
        accountant, target_epsilon=target_epsilon, delta=delta, rtol=rtol,
        make_event=lambda s: dpsgd_event(noise_multiplier=s, steps=steps, **extra),
    )


def calibrate_dpsgd_many(
    accountant: Accountant,
    *,
    target_epsilon: float,
    delta: float,
    runs: list[tuple[float, int]],
    rtol: float = 1e-6,
) -> list[AccountingResult | InfeasibleError]:
    """:func:`calibrate_dpsgd` for many runs (sample rate q, steps T) at once.

    Same contract per run: the returned σ is within ``rtol`` (relative) of a σ whose ε exceeds
    the target, rounded up to 8 significant digits, and ε(σ) ≤ target is verified there by the
    accountant exactly as ``accountant.epsilon`` computes it. With an accountant declaring
    :attr:`~dpcalc.accounting.base.Accountant.vectorised_dpsgd` (rdp) all runs are searched in
    step (:meth:`~dpcalc.accounting.base.Accountant.epsilon_dpsgd_many`: one vectorised
    evaluation per step of the search, whose results equal the one-run ones); a run the joint
    search does not settle (and every run under another accountant) is calibrated alone by
    :func:`calibrate_dpsgd`. The σ may differ from :func:`calibrate_dpsgd`'s within
    ``rtol`` (another search path to the same root).

    Args:
        accountant: any registered accountant.
        target_epsilon, delta, rtol: as for :func:`calibrate_noise_multiplier`.
        runs: ``(q, T)`` pairs, q in (0, 1], T ≥ 1.

    Returns:
        One entry per run, in order: the result (``noise_multiplier`` set, ``details`` with
        ``target_epsilon`` and ``evaluations``), or the :class:`InfeasibleError` that
        :func:`calibrate_dpsgd` raised for it.

    Raises:
        ParameterError: bad ε, δ, rtol, q or T.
    """
    target = v.positive("epsilon", target_epsilon)
    delta = v.open_unit("delta", delta)
    rtol = v.positive("rtol", rtol)
    runs = [(v.half_open_unit("sample_rate", q), v.count("steps", t, minimum=1)) for q, t in runs]
    out: list[AccountingResult | InfeasibleError | None] = [None] * len(runs)
    if accountant.vectorised_dpsgd and runs:
        joint = _lockstep(accountant, target, delta, runs, rtol)
        for k, res in enumerate(joint):
            out[k] = res
    for k, (q, t) in enumerate(runs):
        if out[k] is None:
            try:
                out[k] = calibrate_dpsgd(accountant, target_epsilon=target, delta=delta,
                                         sample_rate=q, steps=t, rtol=rtol)
            except InfeasibleError as e:
                out[k] = e
    return out  # type: ignore[return-value]


#: most evaluations per run of the joint search before a run is handed to calibrate_dpsgd
_LOCKSTEP_MAX_EVALS = 40


def _lattice_step(s: float, digits: int, up: bool) -> float:
    """The neighbouring point of the ``digits``-significant-digit lattice above (``up``) or
    below the lattice point ``s``, formed as :func:`_round_up` forms its points (integer/scale)."""
    if up:
        scale = 10.0 ** (digits - 1 - math.floor(math.log10(s)))
        return (math.floor(s * scale + 0.5) + 1) / scale
    scale = 10.0 ** (digits - 1 - math.floor(math.log10(s * (1 - 1e-12))))
    return (math.floor(s * scale + 0.5) - 1) / scale


def _lockstep(acc, target: float, delta: float, runs: list[tuple[float, int]],
                  rtol: float) -> list[AccountingResult | None]:
    """The joint search of :func:`calibrate_dpsgd_many` under an accountant with a vectorised
    :meth:`~dpcalc.accounting.base.Accountant.epsilon_dpsgd_many` (None: not settled).

    Per run, on x = ln σ: a bracket [lo, hi] (ε(e^lo) > target ≥ ε(e^hi)) and secant steps on
    ln ε − ln target (bisection when a step leaves the bracket) until the root is located to
    1e-10; then the answer is settled on the lattice of σ rounded up to 8 significant digits
    (more for rtol < 1e-7): the lattice point σ with ε(σ) ≤ target verified and ε > target at
    the lattice point just below (both evaluated), i.e. the smallest such σ where ε decreases
    in σ — never above what :func:`calibrate_dpsgd` returns, which is a verified lattice point
    within rtol of the root.
    """
    digits = max(8, math.ceil(-math.log10(rtol)) + 2)
    log_t = math.log(target)
    n = len(runs)
    lo: list[float | None] = [None] * n
    hi: list[float | None] = [None] * n
    pts: list[list[tuple[float, float]]] = [[] for _ in range(n)]
    memo: list[dict[float, AccountingResult]] = [{} for _ in range(n)]
    results: list[AccountingResult | None] = [None] * n
    lattice: dict[int, tuple[float, float]] = {}  # run → (candidate σ, the lattice point below)
    log_min, log_max = math.log(SIGMA_MIN), math.log(SIGMA_MAX)
    ln_l = math.log(1.0 / delta)
    x: dict[int, float] = {}
    for k, (q, t) in enumerate(runs):
        # first guess: the Gaussian mechanism of the CLT picture, μ = q√T/σ (Bu et al. 2020),
        # with ε ≈ μ√(2 ln(1/δ)) + μ²/2
        # — only a starting point, taken high (×1.5, ≥ 0.8): below the root ε can be large and
        # costly (rdp then needs its fractional orders), above it ε is small and cheap
        mu = -math.sqrt(2 * ln_l) + math.sqrt(2 * ln_l + 2 * target)
        guess = max(1.5 * q * math.sqrt(t) / mu, 0.8) if mu > 0 else 1.0
        x[k] = min(max(math.log(guess), log_min + 1.0), log_max - 1.0)
    active = set(range(n))

    def eps_of(r: AccountingResult) -> float:
        return math.inf if r.epsilon is None else r.epsilon

    while active:
        want = []
        for k in sorted(active):
            sigmas = lattice[k] if k in lattice else (math.exp(x[k]),)
            want += [(k, sg) for sg in sigmas if sg not in memo[k]]
        if want:
            res = acc.epsilon_dpsgd_many(sample_rates=[runs[k][0] for k, _ in want],
                                         noise_multipliers=[sg for _, sg in want],
                                         steps=[runs[k][1] for k, _ in want], delta=delta)
            for (k, sg), r in zip(want, res, strict=True):
                memo[k][sg] = r
        for k in sorted(active):
            if len(memo[k]) > _LOCKSTEP_MAX_EVALS:
                active.discard(k)  # leave it to calibrate_dpsgd
                continue
            if k in lattice:
                cand, below = lattice[k]
                if eps_of(memo[k][cand]) > target:
                    lattice[k] = (_lattice_step(cand, digits, up=True), cand)
                elif eps_of(memo[k][below]) <= target:
                    lattice[k] = (below, _lattice_step(below, digits, up=False))
                else:
                    results[k] = _finish(memo[k][cand], cand, target, len(memo[k]))
                    active.discard(k)
                    continue
                if lattice[k][0] > SIGMA_MAX or lattice[k][1] < SIGMA_MIN:
                    active.discard(k)
                continue
            s = math.exp(x[k])
            eps = eps_of(memo[k][s])
            if eps > target:
                lo[k] = x[k] if lo[k] is None else max(lo[k], x[k])
            else:
                hi[k] = x[k] if hi[k] is None else min(hi[k], x[k])
            if eps > 0 and math.isfinite(eps):
                pts[k] = (pts[k] + [(x[k], math.log(eps) - log_t)])[-2:]
            nxt = _next_point(lo[k], hi[k], pts[k])
            if nxt is None or not log_min < nxt < log_max:
                active.discard(k)  # e.g. the target is met at SIGMA_MIN or out of reach
                continue
            settled = lo[k] is not None and hi[k] is not None and hi[k] - lo[k] <= 1e-9
            if settled or abs(nxt - x[k]) <= 1e-7:  # the secant then has ~1e-11 left
                cand = _round_up(math.exp(min(nxt, hi[k]) if hi[k] is not None else nxt), digits)
                lattice[k] = (cand, _lattice_step(cand, digits, up=False))
            x[k] = nxt
    return results


def _next_point(lo: float | None, hi: float | None, pts: list[tuple[float, float]]) -> float | None:
    """The next ln σ of one run of :func:`_lockstep`: a secant step on the last two
    points (slope −1, i.e. ε ∝ 1/σ, from one point), at most a factor 4 in σ, kept inside
    the bracket (else bisection)."""
    if not pts:  # ε = 0 or ∞ only so far: expand or bisect
        if lo is not None and hi is not None:
            return 0.5 * (lo + hi)
        return (hi - math.log(4.0)) if hi is not None else (lo + math.log(4.0) if lo is not None else None)
    xk, fk = pts[-1]
    slope = -1.0
    if len(pts) == 2:
        (x0, f0), (x1, f1) = pts
        if x1 != x0 and (f1 - f0) / (x1 - x0) < 0:
            slope = (f1 - f0) / (x1 - x0)
    r = xk - fk / slope
    # at most ×4 up, ÷1.5 down (below the root ε grows fast, see _lockstep)
    r = min(max(r, xk - math.log(1.5)), xk + math.log(4.0))
    if lo is not None and hi is not None and not lo < r < hi:
        r = 0.5 * (lo + hi)
    return r
