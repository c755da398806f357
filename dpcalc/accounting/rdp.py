r"""Rényi-DP accountant: the dispatch from events to composed RDP curves, and the accountant.

The mathematics lives in one module per job; this module walks a history and composes:

* orders and the RDP → (ε, δ) conversion (Canonne, Kamath, Steinke 2020, Prop. 12, with the
  total-variation shortcut): :mod:`dpcalc.accounting.rdp_conversion`;
* the Gaussian, Laplace, pure ε-DP and ε-bounded-range curves (Mironov 2017):
  :mod:`dpcalc.accounting.rdp_curves`;
* the Poisson-sampled Gaussian (Mironov, Talwar, Zhang 2019 §3.3):
  :mod:`dpcalc.accounting.sampled_gaussian_rdp`; the other batch samplers:
  :mod:`dpcalc.accounting._sampling_rdp`;
* PATE queries and runs: :mod:`dpcalc.accounting.pate`; repeat-and-select (Papernot & Steinke
  2022): :mod:`dpcalc.accounting.tuning`, which receives the RDP of its run from this dispatch.

Composition adds RDP curves order by order (Mironov 2017, Def. 3 and Prop. 1). One function,
:func:`_walk`, walks an event once: it raises :class:`~dpcalc.errors.UnsupportedEventError`
with the reason where this accountant has no curve and, when asked to compose, returns the
composed curve (dp_accounting's ``_maybe_compose(event, count, do_compose)`` is the model).
The best order of the grid is refined by bounded Brent search between its neighbours.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from dpcalc import _validate as v
from dpcalc._numerics import minimize_bounded, minimize_bounded_steps
from dpcalc.accounting import tuning
from dpcalc.accounting._sampling import check_rdp_sampler, is_sampler_event
from dpcalc.accounting._sampling_rdp import rdp_sampler_step, rdp_without_replacement_gaussian
from dpcalc.accounting.additive import AdditiveAccountant
from dpcalc.accounting.base import data_dependent_label
from dpcalc.accounting.mixture_steps import check_mixture_step, is_mixture_step, rdp_mixture_step
from dpcalc.accounting.rdp_conversion import (
    CONVERSION_SOURCE,
    DEFAULT_ORDERS,
    MAX_ORDER,
    as_orders,
    conversion_floor,
    delta_from_rdp,
    epsilon_from_rdp,
    epsilon_per_order,
    log_delta_per_order,
)
from dpcalc.accounting.rdp_curves import rdp_bounded_range, rdp_gaussian, rdp_laplace, rdp_pure_dp
from dpcalc.accounting.sampled_gaussian_rdp import (
    fractional_floor,
    log_a_sampled_gaussian,
    rdp_sampled_gaussian,
    rdp_sampled_gaussian_rows,
)
from dpcalc.errors import ParameterError, UnsupportedEventError
from dpcalc.events import (
    ComposedEvent,
    EpochSampledEvent,
    EpsilonDeltaEvent,
    Event,
    ExponentialMechanismEvent,
    GaussianEvent,
    GNMaxEvent,
    GroupEvent,
    LaplaceEvent,
    LNMaxEvent,
    PateThresholdEvent,
    PateVotesEvent,
    PoissonSampledEvent,
    SelfComposedEvent,
    TuningEvent,
    dpsgd_event,
    ungroup,
)
from dpcalc.results import AccountingResult

# the curves and the conversion are re-exported: `from dpcalc.accounting.rdp import ...` of
# these public names keeps working (their homes are the modules named in the docstring)
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
    "rdp_without_replacement_gaussian",
    "rdp_of_event",
    "epsilon_from_rdp",
    "delta_from_rdp",
    "check_event",
]

SOURCE = f"Mironov 2017; Mironov, Talwar, Zhang 2019; conversion: {CONVERSION_SOURCE}"

_PATE_EVENTS = (LNMaxEvent, GNMaxEvent, PateThresholdEvent, PateVotesEvent)

_REPLACE_REASON = (
    "the RDP of the Poisson-sampled Gaussian implemented here is for add/remove "
    "adjacency (Mironov, Talwar, Zhang 2019); neighboring='replace' is not supported "
    "for sampled mechanisms by this accountant")


# ---------------------------------------------------------------------------
# Events -> composed RDP curve: one walk that checks and (optionally) composes
# ---------------------------------------------------------------------------

def _walk(event: Event, orders: np.ndarray, warnings: list | None, neighboring: str,
          compose: bool) -> np.ndarray | None:
    """Walk ``event`` once: raise :class:`UnsupportedEventError` (with the reason) where the
    RDP accountant has no curve under ``neighboring``; with ``compose``, return the composed
    RDP curve at ``orders`` (shape (m,)), else None.

    Noise multipliers and Laplace scales are relative to one record's contribution bound (the
    clipping norm), so under replace-one the unsampled mechanisms have sensitivity 2 (replacing
    a record moves the query by up to twice that; the same convention as the PLD accountant).
    """
    sensitivity = 2.0 if neighboring == "replace" else 1.0
    if isinstance(event, SelfComposedEvent):
        inner = event.event
        if isinstance(inner, EpochSampledEvent):
            # shuffle / balls-in-bins: ⌈count/T_e⌉ runs of the mechanism (dpcalc.events.EpochSampledEvent)
            one = _walk(inner.event, orders, warnings, neighboring, compose)
            return None if one is None else inner.epochs(event.count) * one
        if event.count == 0:
            _walk(inner, orders, warnings, neighboring, False)
            return np.zeros_like(orders) if compose else None
        one = _walk(inner, orders, warnings, neighboring, compose)
        return None if one is None else event.count * one
    if isinstance(event, EpochSampledEvent):
        # an epoch is at most one run of the mechanism (dpcalc.events.flatten)
        return _walk(event.event, orders, warnings, neighboring, compose)
    if isinstance(event, TuningEvent):
        _walk(event.event, orders, warnings, neighboring, False)
        if not compose:
            return None
        return tuning.rdp_of_tuning(event, orders, warnings, neighboring, _run_rdp)
    if isinstance(event, ComposedEvent):
        total = np.zeros_like(orders) if compose else None
        for e in event.events:
            part = _walk(e, orders, warnings, neighboring, compose)
            if compose:
                total = total + part
        return total
    if isinstance(event, EpsilonDeltaEvent) and event.delta > 0:
        raise UnsupportedEventError(
            f"an (epsilon, delta)-DP guarantee with delta={event.delta:g} > 0 has no finite "
            "Rényi-DP bound; only pure (delta = 0) guarantees can be converted to RDP")
    if isinstance(event, (GaussianEvent, LaplaceEvent, EpsilonDeltaEvent, ExponentialMechanismEvent)):
        if not compose:
            return None
        if isinstance(event, GaussianEvent):
            return orders * sensitivity ** 2 / (2.0 * event.noise_multiplier ** 2)
        if isinstance(event, LaplaceEvent):
            return rdp_laplace(scale=event.scale / sensitivity, orders=orders)
        if isinstance(event, EpsilonDeltaEvent):
            return rdp_pure_dp(epsilon=event.epsilon, orders=orders)
        return rdp_bounded_range(epsilon=event.epsilon, orders=orders)
    if is_sampler_event(event):  # fixed-size, truncated Poisson: dpcalc/accounting/_sampling.py
        check_rdp_sampler(event, neighboring)
        return rdp_sampler_step(event, orders, warnings, neighboring) if compose else None
    if isinstance(event, _PATE_EVENTS):
        # imported here for start-up cost only (mechanisms.pate is not needed by other
        # histories, tests/test_imports.py); pate imports nothing of this module
        from dpcalc.accounting import pate

        pate.check_pate_event(event, neighboring=neighboring)
        return pate.rdp_of_pate_event(event, orders, sensitivity) if compose else None
    if isinstance(event, GroupEvent) and ungroup(event) is not event:
        return _walk(ungroup(event), orders, warnings, neighboring, compose)
    if is_mixture_step(event):  # mixture of Gaussians, group of a sampled Gaussian: dpcalc/accounting/group.py
        check_mixture_step(event, neighboring, "the RDP accountant")
        return rdp_mixture_step(event, orders) if compose else None
    if isinstance(event, PoissonSampledEvent):
        if neighboring != "add-remove":
            raise UnsupportedEventError(_REPLACE_REASON)
        if not isinstance(event.event, GaussianEvent):
            raise UnsupportedEventError(
                "RDP amplification by Poisson sampling is implemented for the Gaussian mechanism "
                f"only, got a sampled {type(event.event).__name__}")
        if not compose:
            return None
        return rdp_sampled_gaussian(sample_rate=event.sample_rate,
                                    noise_multiplier=event.event.noise_multiplier, orders=orders,
                                    warnings=warnings)
    raise UnsupportedEventError(
        f"the RDP accountant does not know the RDP of {type(event).__name__}")


def _run_rdp(event: Event, orders: np.ndarray, warnings: list | None, neighboring: str) -> np.ndarray:
    """The composed RDP curve of a checked ``event`` (the callable a repeat-and-select receives
    for its run, :func:`dpcalc.accounting.tuning.rdp_of_tuning`)."""
    return _walk(event, orders, warnings, neighboring, True)


def check_event(event: Event, *, neighboring: str = "add-remove") -> None:
    """Raise :class:`UnsupportedEventError` (with the reason) unless the RDP accountant
    can account for ``event`` under ``neighboring``.

    Supported: Gaussian, Laplace, (ε, 0)-DP events, ε-bounded-range (exponential mechanism)
    events, Poisson-sampled Gaussian (add/remove only), the other batch samplers of a Gaussian
    (:mod:`dpcalc.accounting._sampling`), PATE queries and runs, repeat-and-select of any of
    these (:class:`~dpcalc.events.TuningEvent`, Papernot & Steinke 2022), and
    self-compositions / compositions of these.
    """
    _walk(event, np.empty(0), None, neighboring, False)


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
    a = as_orders(orders)
    check_event(event, neighboring=neighboring)  # the whole history is checked before any curve
    return _run_rdp(event, a, warnings, neighboring)


# ---------------------------------------------------------------------------
# The accountant
# ---------------------------------------------------------------------------

class RdpAccountant(AdditiveAccountant):
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
    vectorised_dpsgd = True
    plotted_curve = True
    rdp_tradeoff = True
    all_batch_samplers = True
    grid_note = "grid points use the accountant's order grid (not refined between orders)"

    def __init__(self, *, neighboring: str = "add-remove", orders: Sequence[float] | None = None,
                 refine: bool = True) -> None:
        super().__init__(neighboring=neighboring)
        a = DEFAULT_ORDERS if orders is None else orders
        # sorted distinct orders (np.unique would import numpy.ma: ~40 ms on every start-up)
        o = np.sort(as_orders(a))
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
    def _search(self, event: Event, objective, floor: float, curve=None) -> tuple[float, float, list[str]]:
        """Minimise ``objective(orders, rdp) -> values`` over the grid and refine.

        ``floor`` is the objective's smallest possible value (0 for ε, −inf for log δ):
        an optimum there needs no edge warning. ``curve(orders, warnings)``: the RDP curve
        searched (default :meth:`rdp`; a repeat-and-select's may skip work at orders that
        cannot be the best, :func:`dpcalc.accounting.tuning.rdp_of_tuning`).

        Returns ``(best value, best order, warnings)``.
        """
        if curve is None:
            def curve(orders, warns=None):
                return self.rdp(event, orders, warns)
        warnings: list[str] = []
        a = self.orders
        rdp = curve(a, warnings)
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
                val = float(objective(xa, curve(xa))[0])
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
        curve = None
        if isinstance(event, TuningEvent):
            # checked above; its curve skips the refinements that cannot change the best order
            def curve(orders, warns=None):
                return tuning.rdp_of_tuning(event, as_orders(orders), warns, self.neighboring, _run_rdp,
                                            log_delta=log_d)
        eps, order, warnings = self._search(event, lambda a, r: epsilon_per_order(a, r, log_d), 0.0,
                                            curve)
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
        return data_dependent_label(AccountingResult(self.name, eps, d, self.certified, details=details,
                                                     reason=reason, source=self._source(event)), event)

    def epsilon_dpsgd_many(self, *, sample_rates: Sequence[float], noise_multipliers: Sequence[float],
                           steps: Sequence[int], delta: float) -> list[AccountingResult]:
        """ε at δ of many DP-SGD runs at once: entry k is exactly (the same floats, details and
        warnings) ``self.epsilon(dpsgd_event(noise_multiplier=σ_k, sample_rate=q_k,
        steps=T_k), delta=delta)`` (tests/accounting/test_rdp_batch.py), computed with one
        vectorised fractional-order series for all runs (:func:`~dpcalc.accounting.sampled_gaussian_rdp.rdp_sampled_gaussian_rows`) and
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

        def curves(orders_rows: np.ndarray, rows: np.ndarray, warn_rows) -> np.ndarray:
            """T·(one step's RDP) of runs ``rows`` at ``orders_rows`` (shape (len(rows), m)),
            as :func:`rdp_sampled_gaussian` then the self-composition compute it."""
            one = rdp_sampled_gaussian_rows([qs[k] for k in rows], [sigmas[k] for k in rows],
                                            orders_rows, warn_rows)
            return counts[rows] * one

        warnings: list[list[str]] = [[] for _ in range(n)]
        rows = np.arange(n)
        is_int = a == np.round(a)
        vals = np.empty((n, a.size))
        if is_int.all() or not is_int.any():
            vals[:] = epsilon_per_order(a, curves(np.broadcast_to(a, (n, a.size)).copy(), rows,
                                               warnings), log_d)
        else:
            # integer orders first; the fractional ones only where they can matter
            ai = a[is_int]
            vals[:, is_int] = epsilon_per_order(ai, curves(np.broadcast_to(ai, (n, ai.size)).copy(),
                                                        rows, warnings), log_d)
            bound = fractional_floor(a[~is_int], vals[:, is_int].min(axis=1), q_arr, s_arr,
                                      counts[:, 0], log_d)
            need = np.flatnonzero(np.isnan(bound))
            vals[:, ~is_int] = bound[:, None]
            if need.size:
                af = a[~is_int]
                wf: list[list[str]] = [[] for _ in range(need.size)]
                vals[np.ix_(need, np.flatnonzero(~is_int))] = epsilon_per_order(
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
            fx = epsilon_per_order(xs, curves(xs, ks, None), log_d)[:, 0]
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
        log_d, order, warnings = self._search(event, lambda a, r: log_delta_per_order(a, r, e),
                                             -math.inf)
        details: dict = {"order": order}
        pure = self._pure_tuning(event)
        if pure is not None and pure <= e and log_d > -math.inf:
            log_d, warnings, details = -math.inf, [], {"order": math.inf, "pure_dp": True}
        if warnings:
            details["warnings"] = warnings
        return data_dependent_label(AccountingResult(self.name, e, float(math.exp(min(log_d, 0.0))),
                                                     self.certified, details=details,
                                                     source=self._source(event)), event)

    def _source(self, event: Event) -> str:
        return f"{self.source}; repeat-and-select: {tuning.SOURCE}" if tuning.contains_tuning(event) else self.source

    def _pure_tuning(self, event: Event) -> float | None:
        """The pure ε-DP bound of a history containing a repeat-and-select, when every part is
        pure (:func:`dpcalc.accounting.tuning.pure_epsilon`); None otherwise (other histories
        keep their RDP answer unchanged)."""
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
        return max(float(np.min(conversion_floor(a, math.log(d)))), 0.0)

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

    # --- many numbers of compositions at once (dpcalc compose --steps-grid, AdditiveAccountant)
    def step_cost(self, step: Event) -> np.ndarray:
        """One run's RDP curve at this accountant's orders (RDP adds up, Mironov 2017 Prop 1)."""
        return self.rdp(step)

    def epsilons_of_costs(self, costs: np.ndarray, delta: float) -> np.ndarray:
        """ε of each composed curve (rows of ``costs``) at δ: CKS 2020 Prop 12, minimised over
        this accountant's orders without refinement (a valid bound, slightly above :meth:`epsilon`)."""
        return epsilon_per_order(self.orders[None, :], costs, math.log(delta)).min(axis=1)

    def deltas_of_costs(self, costs: np.ndarray, epsilon: float) -> np.ndarray:
        """δ of each composed curve (rows of ``costs``) at ε (see :meth:`epsilons_of_costs`)."""
        return np.exp(log_delta_per_order(self.orders[None, :], costs, epsilon).min(axis=1))
