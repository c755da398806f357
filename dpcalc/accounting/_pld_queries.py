r"""The pld accountant's δ(ε) queries at many ε (internal): the privacy profile and the
truncation mass of a δ(ε) query (moved out of :mod:`dpcalc.accounting.pld`, issue 31).

Each function takes the accountant (:class:`dpcalc.accounting.pld.PldAccountant`, duck-typed:
``neighboring``, ``name``, ``accuracy``, ``_start_h``, ``_compose``, ``_refine``) as its first
argument; the mathematics is documented in docs/numerical-accounting.md §3–§4.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from dpcalc import _validate as v
from dpcalc.accounting._pld_compose import delta_for_epsilon, swapped_delta_upper
from dpcalc.accounting._pld_grid import GridTooLargeError
from dpcalc.accounting._pld_history import segments
from dpcalc.events import Event

__all__ = ["ETA_REL", "delta_eta", "privacy_profile"]

#: truncation/aliasing mass allowed, relative to the target δ (added to δ, not dropped)
ETA_REL = 1e-5
#: smallest truncation mass used for δ(ε) queries (η is 1e-5 × an estimate of the δ read out)
_ETA_ABS = 1e-14
#: truncation mass of the first δ(ε) estimate pass (:func:`delta_eta`)
_ETA_PILOT = 1e-8


def privacy_profile(acc, event: Event, epsilons) -> tuple[np.ndarray, np.ndarray]:
    """:meth:`dpcalc.accounting.pld.PldAccountant.privacy_profile` (its docstring): certified δ(ε)
    and proven lower bounds at every ε of ``epsilons`` (shape (k,) each), one composition per
    refinement round, the rounds' brackets intersected."""
    eps = np.array([v.nonnegative("epsilon", e) for e in epsilons], dtype=float)
    segs = segments(event, acc.neighboring, acc.name)
    if not segs or eps.size == 0:
        return np.zeros(eps.size), np.zeros(eps.size)
    eta = delta_eta(acc, segs, float(eps.max()))
    h0 = acc._start_h(segs, eta)
    best = {"up": np.full(eps.size, np.inf), "lo": np.zeros(eps.size)}

    def readout(comp):
        du = np.array([max(delta_for_epsilon(up, e) for up, _ in comp.values()) for e in eps])
        if not all(comp.covers(float(e), float(d)) for e, d in zip(eps, du, strict=True)):
            comp.complete()
            du = np.array([max(delta_for_epsilon(up, e) for up, _ in comp.values()) for e in eps])
        dl = np.array([max(delta_for_epsilon(lo, e) for _, lo in comp.values()) for e in eps])
        du0 = np.array([max(delta_for_epsilon(replace(up, slack=0.0), e) for up, _ in comp.values())
                        for e in eps])
        dl0 = np.array([max(delta_for_epsilon(replace(lo, slack=0.0), e) for _, lo in comp.values())
                        for e in eps])
        best["up"] = np.minimum(best["up"], du)
        best["lo"] = np.maximum(best["lo"], dl)
        tol = np.maximum(acc.accuracy * du, 1e-12)
        ratios = (du - dl) / tol
        worst = int(np.argmax(ratios))
        loose = ratios > 1.0
        # refining cannot help where the bracket is set by the allowance, not by the grid
        floor = bool(np.all((du0 - dl0)[loose] <= 0.5 * tol[loose])) if loose.any() else False
        return float(du[worst]), float(dl[worst]), float(ratios[worst]), floor

    acc._refine(segs, h0, eta, readout, aim=0.6)
    return best["up"], np.minimum(best["lo"], best["up"])


def delta_eta(acc, segs, eps: float) -> float:
    """Truncation mass η for a δ(ε) query: 1e-5 × an estimate of δ(ε), at least ``_ETA_ABS``.

    epsilon() scales η with its target δ; a δ(ε) query has no target, so δ(ε) is first
    estimated from the upper PMF on a grid twice as coarse (no lower bound), starting with
    η = ``_ETA_PILOT`` and lowering it while the estimate is not well above it (the estimate
    of an upper PMF is ≥ the true δ − η). η only trades speed for tightness: whatever η is
    used, the truncated/aliased mass is added to the certified δ (and subtracted from the
    lower one), so no choice of η can make a bound invalid. A tiny η (the old fixed 1e-14)
    forces large windows and the slow accurate Fourier power for large T.
    """
    if sum(c for _, c in segs) <= 1:
        return _ETA_ABS  # one step, nothing to compose: η only sets the grid's tail cut
    eta = _ETA_PILOT
    h = 2.0 * acc._start_h(segs, eta)
    for _ in range(8):
        try:
            comp = acc._compose(segs, h, eta, lower=False)
            est = max(delta_for_epsilon(replace(up, slack=0.0), eps) for up, _ in comp.values())
            if comp.pending and swapped_delta_upper(replace(comp["remove"][0], slack=0.0), eps) > est:
                comp.complete()  # the add ordering may set the estimate: compose it
                est = max(delta_for_epsilon(replace(up, slack=0.0), eps) for up, _ in comp.values())
        except GridTooLargeError:
            h *= 4.0
            continue
        # 0.99: at the fixed point η = 1e-3·est, 1e3·η may round above est and the loop would
        # run on to _ETA_ABS (an η 10⁵ times smaller: larger windows, 2x the time)
        if est >= 0.99e3 * eta or eta <= _ETA_ABS:
            return max(ETA_REL * est, _ETA_ABS)
        eta = max(1e-3 * est, _ETA_ABS)
    return _ETA_ABS
