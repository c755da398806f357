r"""The (ε, δ) view of known mechanisms, and the generic composition theorems applied to it.

The theorems (basic, advanced, kov, optimal) compose (ε_i, δ_i) guarantees. A mechanism
enters as follows:

* an (ε, δ)-DP mechanism (:class:`~dpcalc.events.EpsilonDeltaEvent`) as (ε, δ);
* a Laplace mechanism with scale b (in units of Δ₁) as (1/b, 0) (Dwork & Roth 2014 Thm 3.6);
* an ε-bounded-range mechanism (the exponential mechanism) as (ε, 0) (ε-BR ⇒ ε-DP; Dong,
  Durfee, Rogers 2020 §2) — the ``br`` row (:mod:`.bounded_range`) uses the BR structure;
* a Gaussian with noise multiplier σ as (ε₀(δ₀), δ₀) for a per-step δ₀ of our choosing, on
  its exact curve (Balle & Wang 2018 Thm 8, μ = 1/σ);
* a mechanism on a Poisson subsample at rate q as (ln(1 + q(e^{ε₀} − 1)), q·δ₀) (Balle,
  Barthe, Gaboardi 2018 Thm 8; :func:`dpcalc.mechanisms.conversions.poisson_amplify`).

Every δ₀ yields a valid bound, so δ₀ (one value shared by all Gaussian items) is chosen to
minimise each theorem's result (:meth:`GenericView.best`: a log grid, then Brent's bounded
method, ``_numerics.minimize_bounded``); the minimum is certified. Adjacency: add/remove.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from dpcalc._numerics import minimize_bounded, round_up
from dpcalc.errors import UnsupportedEventError
from dpcalc.events import (
    EpsilonDeltaEvent,
    Event,
    ExponentialMechanismEvent,
    GaussianEvent,
    LaplaceEvent,
    PoissonSampledEvent,
)
from dpcalc.results import MethodResult

__all__ = ["THEOREMS", "THEOREM_SOURCES", "THEOREM_SHORT", "GenericView", "theorem_rows", "theorem_na"]

#: the generic composition theorems, in display order (``br``: exponential mechanisms only;
#: left out of the default rows of a sequence without one)
THEOREMS = ("basic", "advanced", "kov", "optimal", "br")

THEOREM_SOURCES = {
    "basic": "Dwork & Roth 2014, Thm 3.16",
    "advanced": "Dwork, Rothblum, Vadhan 2010; Dwork & Roth 2014, Thm 3.20",
    "kov": "Kairouz, Oh, Viswanath 2015, Thm 3.4/3.5",
    "optimal": "Kairouz, Oh, Viswanath 2015, Thm 3.3; Murtagh & Vadhan 2016, Thm 1.5",
    "br": "Dong, Durfee, Rogers 2020, §4–5 (optimal composition of ε-bounded-range mechanisms, non-adaptive)",
}
#: short citations for table columns
THEOREM_SHORT = {"basic": "DR14 Thm 3.16", "advanced": "DRV10; DR14 Thm 3.20", "kov": "KOV15 Thm 3.4/3.5",
                 "optimal": "KOV15 Thm 3.3; MV16", "br": "DDR20 §5"}

#: the largest per-step δ₀ tried for a Gaussian (δ₀ must stay below 1)
_MAX_DELTA0 = 1.0 - 2.0**-20


def theorem_na(method: str, reason: str) -> MethodResult:
    """A not-applicable theorem row (certifies nothing: ``certified`` False)."""
    return MethodResult(method, None, None, False, applicable=False, reason=reason,
                        source=THEOREM_SOURCES[method])


def _pate_standard(step: Event) -> Event:
    """A data-independent PATE query as the mechanism the theorems see: LNMax(b) is (2/b, 0)-DP;
    GNMax(σ) the Gaussian mechanism with noise multiplier σ/√2 (L2 sensitivity √2); the threshold
    check the Gaussian with σ₁ (docs/design.md §4). Other events unchanged."""
    from dpcalc.events import GNMaxEvent, LNMaxEvent, PateThresholdEvent

    if isinstance(step, (LNMaxEvent, GNMaxEvent, PateThresholdEvent)):
        if step.votes is not None:
            raise UnsupportedEventError("the generic theorems have no (ε, δ) view of a data-dependent PATE "
                                        "query (its bound is a Rényi-DP bound: see rdp)")
        if isinstance(step, LNMaxEvent):
            from dpcalc.mechanisms.pate import lnmax_epsilon

            return EpsilonDeltaEvent(lnmax_epsilon(step.scale))  # 2/b, rounded up
        return GaussianEvent(step.noise_multiplier / (math.sqrt(2.0) if isinstance(step, GNMaxEvent) else 1.0))
    return step


def _fixed(step: Event) -> tuple[float, float] | None:
    """(ε, δ) of a step that has one, None for a Gaussian (a curve)."""
    if isinstance(step, EpsilonDeltaEvent):
        return step.epsilon, step.delta
    if isinstance(step, LaplaceEvent):
        return 1.0 / step.scale, 0.0
    if isinstance(step, ExponentialMechanismEvent):
        return step.epsilon, 0.0
    if isinstance(step, GaussianEvent):
        return None
    raise UnsupportedEventError(f"the generic theorems have no (ε, δ) view of {type(step).__name__}")


class GenericView:
    """The sequence as (ε_i, δ_i, k_i) triples, with Gaussian items at a per-step δ₀.

    Args:
        steps: one-run mechanisms (events), length n: Gaussian, Laplace, (ε, δ) events, or
            any of these on a Poisson subsample.
        counts: how many times each runs, length n.

    Raises:
        UnsupportedEventError: a step has no (ε, δ) view.
    """

    def __init__(self, steps: Sequence[Event], counts: Sequence[int]):
        self.steps = list(steps)
        self.counts = np.array([int(c) for c in counts], dtype=np.int64)
        self._inner: list[tuple[float, Event, tuple[float, float] | None]] = []
        weight = 0.0
        for s, k in zip(self.steps, self.counts.tolist(), strict=True):
            q, inner = (s.sample_rate, s.event) if isinstance(s, PoissonSampledEvent) else (1.0, _pate_standard(s))
            fixed = _fixed(inner)
            self._inner.append((q, inner, fixed))
            if fixed is None:
                weight += k * q
        #: Σ k_i q_i over the Gaussian items: the total δ they spend per unit of δ₀
        self.gauss_weight = weight
        #: which ε_i, δ_i are stated parameters (read as decimals by basic composition)
        self.decimal = np.array([q == 1.0 and f is not None for q, _, f in self._inner])
        self._cache: dict[float, tuple[np.ndarray, np.ndarray]] = {}

    @property
    def has_gaussian(self) -> bool:
        return any(f is None for _, _, f in self._inner)

    def triples(self, delta0: float | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(ε_i, δ_i) per item, shapes (n,), Gaussian items at per-step δ₀ (then amplified)."""
        from dpcalc.mechanisms.conversions import poisson_amplify
        from dpcalc.mechanisms.gaussian import gaussian_epsilon

        key = -1.0 if delta0 is None else delta0
        if key in self._cache:
            return self._cache[key]
        eps, dl = [], []
        for q, inner, fixed in self._inner:
            if fixed is None:
                e0, d0 = gaussian_epsilon(delta=delta0, mu=1.0 / inner.noise_multiplier), delta0
            else:
                e0, d0 = fixed
            if q < 1.0:
                e0 = float(poisson_amplify(e0, q))
                d0 = float(round_up(q * d0, 1))  # one product: within ½ u
            eps.append(e0)
            dl.append(d0)
        out = (np.array(eps, dtype=float), np.array(dl, dtype=float))
        self._cache[key] = out
        return out

    def delta0_range(self, budget: float | None) -> tuple[float, float]:
        """[lo, hi] of ln δ₀ searched: below the target δ spread over the Gaussian steps
        (ε mode, ``budget`` = target δ) or below 0.5/Σk_iq_i (δ mode), and below 1; 20 decades."""
        if budget is not None:
            hi = math.log(budget / self.gauss_weight) + math.log1p(-1e-6)
        else:
            hi = math.log(0.5 / max(self.gauss_weight, 1.0))
        hi = min(hi, math.log(_MAX_DELTA0))
        return hi - 46.0, hi

    def best(self, evaluate: Callable[[np.ndarray, np.ndarray], float], *, budget: float | None,
             ) -> tuple[float, float | None]:
        """min over δ₀ of ``evaluate(ε_i, δ_i)`` (δ₀ is None without Gaussian items).

        ``budget``: the target total δ (ε mode; δ₀ ≤ budget/Σk_iq_i) or None (δ mode).
        Candidates on a log grid, then a bounded Brent refinement around the best one.
        Every candidate is a valid bound, so the minimum is certified.

        Returns:
            (the minimum, inf if no δ₀ gives a finite value; the δ₀ attaining it).
        """
        if not self.has_gaussian:
            return evaluate(*self.triples()), None
        lo, hi = self.delta0_range(budget)
        grid = np.linspace(lo, hi, 24)

        def f(t: float) -> float:
            val = evaluate(*self.triples(math.exp(t)))
            return val if math.isfinite(val) else 1e300

        vals = [f(t) for t in grid]
        i = int(np.argmin(vals))
        best_t, best = float(grid[i]), vals[i]
        if best < 1e300:
            a, b = float(grid[max(i - 1, 0)]), float(grid[min(i + 1, len(grid) - 1)])
            if b > a:
                t, ft = minimize_bounded(f, a, b, xatol=1e-3, maxiter=500)
                if ft < best:
                    best_t, best = t, ft
        return (best if best < 1e300 else math.inf), math.exp(best_t)


def theorem_rows(view: GenericView, *, delta: float | None, epsilon: float | None, rtol: float,
                 wanted: Sequence[str] = THEOREMS) -> list[MethodResult]:
    """The rows of the generic theorems in ``wanted`` for the sequence of ``view``.

    Args:
        view: the (ε, δ) view of the sequence.
        delta: target total δ (ε mode), or None.
        epsilon: target total ε (δ mode), or None.
        rtol: relative accuracy of the numeric optimal composition.
        wanted: a subset of :data:`THEOREMS`.

    Returns:
        One :class:`MethodResult` per wanted theorem (a theorem whose evaluation fails —
        e.g. a count too large for the numeric grid — is a not-applicable row with the reason).
    """
    rows = []
    for method in wanted:
        try:
            rows.append(_ROWS[method](view, delta=delta, epsilon=epsilon, rtol=rtol))
        except (ArithmeticError, ValueError, MemoryError) as e:
            rows.append(theorem_na(method, f"not evaluated for these inputs: {e}"))
    return rows


def _finish(method: str, value: float, delta0: float | None, *, delta, epsilon, extra: dict | None = None
            ) -> MethodResult:
    details = dict(extra or {})
    if delta0 is not None:
        details["per_step_delta"] = delta0
        details["note"] = ("Gaussian steps enter as (ε₀(δ₀), δ₀) on their exact curve, amplified by "
                           "Poisson sampling; δ₀ chosen to minimise this bound")
    src = THEOREM_SOURCES[method]
    if delta is not None:
        if not math.isfinite(value):
            return MethodResult(method, None, delta, True, reason="the mechanisms' own δ already exceed the "
                                "target δ under this theorem", source=src, details=details)
        return MethodResult(method, value, delta, True, source=src, details=details)
    return MethodResult(method, epsilon, value, True, source=src, details=details,
                        reason="no bound below δ = 1 at this ε" if value >= 1 else None)


def _basic(view: GenericView, *, delta, epsilon, rtol) -> MethodResult:
    from dpcalc.composition import basic

    c, dec = view.counts, view.decimal
    if delta is not None:
        val, d0 = view.best(lambda e, d: basic.basic_epsilon(e, d, c, delta=delta, decimal=dec), budget=delta)
    else:
        val, d0 = view.best(lambda e, d: basic.basic_delta(e, d, c, epsilon=epsilon, decimal=dec), budget=None)
    return _finish("basic", val, d0, delta=delta, epsilon=epsilon)


def _advanced(view: GenericView, *, delta, epsilon, rtol) -> MethodResult:
    from dpcalc.composition import advanced, basic

    e_chk, d_chk = view.triples(1e-10 if view.has_gaussian else None)
    identical = len(view.steps) == 1 or (np.all(e_chk == e_chk[0]) and np.all(d_chk == d_chk[0]))
    if not identical:
        return theorem_na("advanced", "advanced composition (DRV) needs identical (ε, δ) for every mechanism; "
                                      "see kov and optimal for heterogeneous sequences")
    c, dec = view.counts, view.decimal
    k = int(c.sum())
    if delta is not None:
        def drv(e, d):
            return float(advanced.drv_epsilon(epsilon=float(e[0]), delta=float(d[0]), count=k, target_delta=delta))
    else:
        def drv(e, d):
            return float(advanced.drv_delta(epsilon=float(e[0]), delta=float(d[0]), count=k, target_epsilon=epsilon))

    def capped(e, d):  # a valid bound stays valid: never report more than basic composition
        b = (basic.basic_epsilon(e, d, c, delta=delta, decimal=dec) if delta is not None
             else basic.basic_delta(e, d, c, epsilon=epsilon, decimal=dec))
        return min(drv(e, d), b)

    val, d0 = view.best(capped, budget=delta)
    extra = {"capped_at_basic": True} if drv(*view.triples(d0)) > val else {}
    return _finish("advanced", val, d0, delta=delta, epsilon=epsilon, extra=extra)


def _kov_value(view: GenericView, delta, epsilon):
    from dpcalc.composition import advanced

    c = view.counts
    if delta is not None:
        return view.best(lambda e, d: float(advanced.kov_epsilon(e, d, c, delta=delta)), budget=delta)
    return view.best(lambda e, d: float(advanced.kov_delta(e, d, c, epsilon=epsilon)), budget=None)


def _kov(view: GenericView, *, delta, epsilon, rtol) -> MethodResult:
    val, d0 = _kov_value(view, delta, epsilon)
    return _finish("kov", val, d0, delta=delta, epsilon=epsilon)


def _optimal(view: GenericView, *, delta, epsilon, rtol) -> MethodResult:
    """For Gaussian items δ₀ is chosen on the KOV closed form (cheap), then the optimal
    composition is evaluated at that δ₀ (any δ₀ gives a valid bound)."""
    from dpcalc.composition import optimal

    c = view.counts
    d0 = _kov_value(view, delta, epsilon)[1] if view.has_gaussian else None
    e, d = view.triples(d0)
    r = (optimal.optimal_epsilon(e, d, c, delta=delta, rtol=rtol) if delta is not None
         else optimal.optimal_delta(e, d, c, epsilon=epsilon, rtol=rtol))
    extra = {"evaluation": r.method}
    if r.method == "numeric":
        extra["epsilon_lower" if delta is not None else "delta_lower"] = r.lower
        extra["note_numeric"] = ("ε_i take many distinct values: numeric composition of the dominating "
                                 "randomized-response pairs with certified lower/upper bounds")
    extra.update({k: val for k, val in r.details.items()
                  if k in ("atoms", "grid_step", "grid_points", "distinct_epsilons")})
    return _finish("optimal", r.value, d0, delta=delta, epsilon=epsilon, extra=extra)


def has_bounded_range(steps: Sequence[Event]) -> bool:
    """True iff some step is an ε-bounded-range (exponential mechanism) event."""
    return any(isinstance(s, ExponentialMechanismEvent) for s in steps)


def br_applies(steps: Sequence[Event]) -> str | None:
    """None if the ``br`` row applies to these (merged) steps, else why not."""
    if len(steps) == 1 and isinstance(steps[0], ExponentialMechanismEvent):
        return None
    if not has_bounded_range(steps):
        return "the bounded-range composition needs exponential mechanisms (--exponential)"
    return ("the optimal bounded-range composition (DDR20 §5) is for k exponential mechanisms with one ε and "
            "nothing else in the sequence; see optimal, pld, rdp, zcdp")


def br_value(epsilon: float, count: int, *, delta, eps_target) -> float:
    """ε at ``delta`` (or δ at ``eps_target``) of ``count`` ε-BR mechanisms, non-adaptive (DDR20 §5)."""
    from dpcalc.composition import bounded_range as br

    if delta is not None:
        return br.br_nonadaptive_epsilon(epsilon, count, delta)
    return br.br_nonadaptive_delta(epsilon, count, eps_target)


def _br(view: GenericView, *, delta, epsilon, rtol) -> MethodResult:
    """Optimal composition of k ε-BR mechanisms chosen non-adaptively (DDR20 §5): exact, but not
    certified for adaptively chosen mechanisms (DDR20 §3.3), hence ``certified`` False."""
    from dpcalc.composition import bounded_range as br

    why = br_applies(view.steps)
    if why is not None:
        return theorem_na("br", why)
    k = int(view.counts.sum())
    if k > br.MAX_BR_COUNT:
        return theorem_na("br", f"evaluated for at most {br.MAX_BR_COUNT:,} mechanisms (O(k²) terms), got "
                                f"{k:,}; see pld, rdp, zcdp")
    val = br_value(view.steps[0].epsilon, k, delta=delta, eps_target=epsilon)
    details = {"evaluation": "exact", "validity": "non-adaptive",
               "note": ("exact when the k mechanisms are fixed before any runs; adaptively chosen "
                        "mechanisms can cost more (DDR20 §3.3): the certified adaptive bounds are "
                        "pld, rdp and zcdp")}
    src = THEOREM_SOURCES["br"]
    if delta is not None:
        return MethodResult("br", val, delta, False, source=src, details=details)
    return MethodResult("br", epsilon, val, False, source=src, details=details,
                        reason="no bound below δ = 1 at this ε" if val >= 1 else None)


_ROWS = {"basic": _basic, "advanced": _advanced, "kov": _kov, "optimal": _optimal, "br": _br}
