r"""PATE accounting: RDP curves of PATE events, the data-dependent analysis of a vote matrix,
and its conversion to (ε, δ) with the order chosen continuously.

The per-query formulas are in :mod:`dpcalc.mechanisms.pate`; this module composes them:

* data-independent per query: LNMax min(the ε₀-DP randomized-response curve,
  2 × the Laplace(b) curve) with ε₀ = 2/b — the noisy histogram moves by +1 in one count and
  −1 in another, two Laplace mechanisms of sensitivity 1 (Mironov 2017 Table 2), and the argmax
  is a post-processing; either is a valid RDP bound, so is their minimum (it is ≤ the 2017
  paper's own min(ε₀, ½ε₀²λ) of Thm 2 / Bun & Steinke 2016 Prop 3.3); GNMax λ/σ²; threshold
  check λ/(2σ₁²);
* data-dependent per query: the minimum, order by order, of the data-independent curve and
  the data-dependent bound where its conditions hold (2017 Thm 3 for LNMax, 2018 Thm 6 for
  GNMax and the threshold check);
* composition over queries adds RDP curves (Mironov 2017 Prop 1); in Confident-GNMax every
  query pays its threshold check and only the answered ones pay GNMax (2018 Alg 1);
* (ε, δ): the conversion of :mod:`dpcalc.accounting.rdp_conversion` (Canonne, Kamath, Steinke 2020
  Prop 12, with the total-variation shortcut), minimised over a grid of orders and refined
  between the best order's neighbours by bounded Brent search (every order gives a valid bound).

Adjacency. One record changes one teacher's vote (add/remove of a record). Under
``neighboring="replace"`` dpcalc lets two teachers' votes change (a replaced record may land
in another partition): the data-independent curves are taken with sensitivity 2 (GNMax
4λ/σ², LNMax min(RR(4/b), 2 × Laplace(b/2)) — the Laplace RDP is convex in the shift, so two
shifts of 2 dominate any split), and the data-dependent bounds, stated for one changed vote,
are refused.

The data-dependent ε is a function of the private votes: publishing it leaks, and it is a
number about these votes, not a guarantee (``dpcalc pate`` labels its rows ``data_dependent:
true``, ``certified: false``). Papernot et al. 2018 §4 and App. B–C release it privately with
smooth sensitivity: GNMax only, :mod:`dpcalc.mechanisms.pate_ss` and
:func:`dpcalc.accounting.pate_analysis.release_gnmax` (docs/design.md §4).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dpcalc import _validate as v
from dpcalc._numerics import minimize_bounded, round_up
from dpcalc.accounting.rdp_conversion import (
    DEFAULT_ORDERS,
    as_orders,
    epsilon_per_order,
    log_delta_per_order,
)
from dpcalc.errors import ParameterError, UnsupportedEventError
from dpcalc.events import (
    ComposedEvent,
    Event,
    GaussianEvent,
    GNMaxEvent,
    LaplaceEvent,
    LNMaxEvent,
    PateThresholdEvent,
    PateVotesEvent,
    SelfComposedEvent,
)
from dpcalc.mechanisms import pate as pm

__all__ = [
    "PATE_EVENTS",
    "ORDERS",
    "SOURCE",
    "independent_rdp",
    "check_pate_event",
    "rdp_of_pate_event",
    "as_standard",
    "PateRun",
    "epsilon_of_curve",
    "delta_of_curve",
]

PATE_EVENTS = (LNMaxEvent, GNMaxEvent, PateThresholdEvent, PateVotesEvent)

SOURCE = (f"{pm.SOURCE_2017}; {pm.SOURCE_2018}; Mironov 2017 Prop 1; conversion: Canonne, Kamath, "
          "Steinke 2020 Prop 12")


def _orders() -> np.ndarray:
    extra = [320.0, 384.0, 448.0, 512.0, 640.0, 768.0, 896.0, 1024.0]
    return np.asarray(DEFAULT_ORDERS + tuple(extra))


#: orders of the PATE analysis: the RDP accountant's default grid and larger orders up to 1024
#: (data-dependent bounds of confident queries are cheap at high orders)
ORDERS: np.ndarray = _orders()

#: queries per chunk of the (queries × orders) evaluation: bounds memory to a few MB per array
CHUNK = 1 << 14


def independent_rdp(kind: str, noise: float, orders, sensitivity: float = 1.0) -> np.ndarray:
    """Data-independent RDP of one PATE query at ``orders`` (shape (n,)), rounded up.

    Args:
        kind: ``"lnmax"`` (noise = b), ``"gnmax"`` (σ) or ``"threshold"`` (σ₁).
        noise: the noise parameter, in votes, > 0.
        orders: Rényi orders > 1, shape (n,).
        sensitivity: 1 (one changed vote) or 2 (two; ``neighboring="replace"``).

    Raises:
        ParameterError: bad noise or orders.
    """
    a = as_orders(orders)
    s = float(sensitivity)
    if kind == "gnmax":
        return pm.rdp_gnmax_independent(noise, a) * (s * s)
    if kind == "threshold":
        return pm.rdp_threshold_independent(noise, a) * (s * s)
    return pm.rdp_lnmax_independent(noise, a, s)


def _is_dependent(event: Event) -> bool:
    return isinstance(event, PateVotesEvent) or getattr(event, "votes", None) is not None


def check_pate_event(event: Event, *, neighboring: str = "add-remove") -> None:
    """Refuse a data-dependent PATE event under replace-one adjacency (its bounds are stated for
    one changed teacher vote).

    Raises:
        UnsupportedEventError: the reason.
    """
    if neighboring == "replace" and _is_dependent(event):
        raise UnsupportedEventError(
            "the data-dependent PATE bounds (Papernot et al. 2017 Thm 3, 2018 Thm 6) are stated for one "
            "changed teacher vote (add/remove of one record); use neighboring='add-remove' or the "
            "data-independent event (votes=None)")


def rdp_of_pate_event(event: Event, orders, sensitivity: float = 1.0) -> np.ndarray:
    """RDP curve of one PATE event at ``orders`` (shape (n,)): the data-independent curve, or
    with votes the per-order minimum with the data-dependent bound (module docstring).

    Raises:
        UnsupportedEventError: a data-dependent event with ``sensitivity`` ≠ 1.
    """
    a = np.asarray(orders, dtype=float)
    if _is_dependent(event) and sensitivity != 1.0:
        check_pate_event(event, neighboring="replace")
    if isinstance(event, PateVotesEvent):
        return PateRun(event).rdp(a)[0]
    if isinstance(event, LNMaxEvent):
        base = independent_rdp("lnmax", event.scale, a, sensitivity)
        if event.votes is None:
            return base
        thm = pm.Thm3(pm.log_q_lnmax(event.votes, event.scale), pm.lnmax_epsilon(event.scale))
        return np.minimum(base, thm.rdp(a)[0])
    if isinstance(event, GNMaxEvent):
        base = independent_rdp("gnmax", event.noise_multiplier, a, sensitivity)
        if event.votes is None:
            return base
        thm = pm.Thm6(pm.log_q_gnmax(event.votes, event.noise_multiplier), event.noise_multiplier)
        return np.minimum(base, thm.rdp(a)[0])
    if isinstance(event, PateThresholdEvent):
        base = independent_rdp("threshold", event.noise_multiplier, a, sensitivity)
        if event.votes is None:
            return base
        lq = pm.log_q_threshold(event.votes, event.threshold, event.noise_multiplier)
        thm = pm.Thm6(lq, math.sqrt(2.0) * event.noise_multiplier)
        return np.minimum(base, thm.rdp(a)[0])
    raise UnsupportedEventError(f"not a PATE event: {type(event).__name__}")  # pragma: no cover


def as_standard(event: Event) -> Event:
    """``event`` with its data-independent PATE queries replaced by the standard mechanisms they
    post-process, for accountants without PATE-specific code (pld), under add/remove adjacency:
    GNMax(σ) → the Gaussian mechanism with noise multiplier σ/√2 (L2 sensitivity √2); LNMax(b) →
    two Laplace mechanisms of scale b (the +1 and the −1 count); threshold(σ₁) → the Gaussian
    mechanism with noise multiplier σ₁. Other events are returned unchanged.

    Raises:
        UnsupportedEventError: a data-dependent PATE event (its bounds are RDP bounds: use rdp).
    """
    if isinstance(event, SelfComposedEvent):
        inner = as_standard(event.event)
        return event if inner is event.event else SelfComposedEvent(inner, event.count)
    if isinstance(event, ComposedEvent):
        parts = tuple(as_standard(e) for e in event.events)
        return event if all(p is e for p, e in zip(parts, event.events, strict=True)) else ComposedEvent(parts)
    if not isinstance(event, PATE_EVENTS):
        return event
    if _is_dependent(event):
        raise UnsupportedEventError(
            "data-dependent PATE bounds (with vote counts) are Rényi-DP bounds: use the rdp accountant")
    if isinstance(event, GNMaxEvent):
        return GaussianEvent(event.noise_multiplier / math.sqrt(2.0))
    if isinstance(event, LNMaxEvent):
        return SelfComposedEvent(LaplaceEvent(event.scale), 2)
    return GaussianEvent(event.noise_multiplier)


def refuse_replace(event: Event, neighboring: str, accountant: str) -> None:
    """Refuse PATE events under replace-one adjacency in accountants that desugar them
    (:func:`as_standard`): two changed votes are not one standard mechanism there.

    Raises:
        UnsupportedEventError: a PATE event under ``neighboring="replace"``.
    """
    if neighboring != "replace":
        return

    def walk(e: Event) -> bool:
        if isinstance(e, SelfComposedEvent):
            return walk(e.event)
        if isinstance(e, ComposedEvent):
            return any(walk(x) for x in e.events)
        return isinstance(e, PATE_EVENTS)

    if walk(event):
        raise UnsupportedEventError(
            f"{accountant} accounts for PATE events under add/remove adjacency only (one changed vote); "
            "use the rdp accountant for replace-one")


# ---------------------------------------------------------------------------
# A PATE run over a vote matrix
# ---------------------------------------------------------------------------

class _Part:
    """One aggregator step over a set of rows: base curve + a per-query data-dependent bound."""

    def __init__(self, rows: np.ndarray, kind: str, noise: float, thm) -> None:
        self.rows = rows                      # indices of the queries that pay this step
        self.kind, self.noise, self.thm = kind, noise, thm
        app = thm.applies[rows]
        self.dep_rows = rows[app]             # rows where the data-dependent bound may apply
        self.zero_rows = rows[thm.zero[rows]]  # rows whose answer is certain (cost 0)
        self.plain = int(rows.size - self.dep_rows.size - self.zero_rows.size)

    def base(self, orders: np.ndarray) -> np.ndarray:
        return independent_rdp(self.kind, self.noise, orders)

    def _sorted(self):
        """The data-dependent rows' constants sorted by μ₁ (descending; the rows with μ₁ > λ
        are then a prefix for every order λ)."""
        if getattr(self, "_cache", None) is None:
            t = self.thm
            r = self.dep_rows
            mu1 = t.mu1[r] if isinstance(t, pm.Thm6) else np.full(r.size, np.inf)
            order = np.argsort(-mu1, kind="stable")
            r, mu1 = r[order], mu1[order]
            l1q, lq, ca, cb = t.log1q[r], t.logq[r], t.ca[r], t.cb[r]
            k4 = pm._K
            self._cache = (-mu1, (l1q, lq, ca, cb, t.e1[r] + k4 * np.abs(l1q), t.ea[r] + k4 * np.abs(ca),
                                  k4 * np.abs(lq), t.eb[r] + k4 * np.abs(cb)))
        return self._cache

    def total(self, orders: np.ndarray) -> np.ndarray:
        """Σ over this part's queries of min(base, data-dependent), shape (n,).

        Evaluated order by order over the prefix of rows with μ₁ > λ (the others pay the base),
        with :func:`dpcalc.mechanisms.pate.kernel_sum` (the same numbers as ``Thm6.rdp``).
        """
        base = self.base(orders)
        paying = self.rows.size - self.zero_rows.size  # zero rows: the answer is certain, cost 0
        out = paying * base
        if not self.dep_rows.size:
            return out
        neg_mu1, consts = self._sorted()
        prefix = np.searchsorted(neg_mu1, -orders, side="left")  # rows with μ₁ > λ
        for j, lam in enumerate(orders):
            n = int(prefix[j])
            if n == 0:
                continue
            total = pm.kernel_sum(float(lam) - 1.0, tuple(x[:n] for x in consts), float(base[j]))
            # the n rows pay min(bound, base) instead of base (integer counts: no cancellation)
            out[j] = (paying - n) * base[j] + total
        return out

    def per_query(self, order: float, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(data-dependent, data-independent) RDP of every query at one order, shape (k,) each
        (0 for the queries that do not pay this step)."""
        a = np.array([order])
        base = float(self.base(a)[0])
        dep = np.zeros(k)
        ind = np.zeros(k)
        ind[self.rows] = base
        dep[self.rows] = base
        dep[self.zero_rows] = 0.0
        for i in range(0, self.dep_rows.size, CHUNK):
            r = self.dep_rows[i:i + CHUNK]
            dep[r] = np.minimum(self.thm.rdp(a, rows=r)[:, 0], base)
        return dep, ind


@dataclass(frozen=True)
class Conversion:
    """An (ε, δ) read from an RDP curve: the value, the order used, warnings."""

    value: float
    order: float
    warnings: tuple[str, ...] = ()


class PateRun:
    """The data-dependent and data-independent RDP of a PATE run (:class:`PateVotesEvent`).

    Per-query constants (q̃ and Thm 3/6's) are computed once, so curves at any orders, the cost
    of each query at one order and cumulative curves are cheap.

    Args:
        event: the run.

    Attributes:
        queries: k; answered: the number of rows answered (GNMax paid).
    """

    def __init__(self, event: PateVotesEvent) -> None:
        self.event = event
        votes = event.votes()
        k = votes.shape[0]
        self.queries = k
        rows = np.arange(k)
        self.parts: list[_Part] = []
        if event.mechanism == "lnmax":
            thm = pm.Thm3(pm.log_q_lnmax(votes, event.noise), pm.lnmax_epsilon(event.noise))
            self.parts.append(_Part(rows, "lnmax", event.noise, thm))
            self.answered = k
        elif event.mechanism == "gnmax":
            thm = pm.Thm6(pm.log_q_gnmax(votes, event.noise), event.noise)
            self.parts.append(_Part(rows, "gnmax", event.noise, thm))
            self.answered = k
        else:
            lq = pm.log_q_threshold(votes, event.threshold, event.sigma1)
            self.parts.append(_Part(rows, "threshold", event.sigma1, pm.Thm6(lq, math.sqrt(2.0) * event.sigma1)))
            ans = np.flatnonzero(event.answered())
            self.answered = int(ans.size)
            thm = pm.Thm6(pm.log_q_gnmax(votes, event.noise), event.noise)
            self.parts.append(_Part(ans, "gnmax", event.noise, thm))

    def rdp(self, orders) -> tuple[np.ndarray, np.ndarray]:
        """(data-dependent, data-independent) composed RDP at ``orders``, shape (n,) each."""
        return self.rdp_dependent(orders), self.rdp_independent(orders)

    def rdp_dependent(self, orders) -> np.ndarray:
        """Data-dependent composed RDP at ``orders``, shape (n,), rounded up (pairwise sums of
        non-negative terms: relative error ≤ ~log₂(k)·u; margin 128 unit round-offs)."""
        a = np.asarray(orders, dtype=float)
        dep = np.zeros_like(a)
        for p in self.parts:
            dep = dep + p.total(a)
        # per query the minimum with the base is taken, so the data-independent total bounds it too
        return np.minimum(round_up(np.maximum(dep, 0.0), 128), self.rdp_independent(a))

    def rdp_independent(self, orders) -> np.ndarray:
        """Data-independent composed RDP at ``orders``, shape (n,), rounded up."""
        a = np.asarray(orders, dtype=float)
        ind = np.zeros_like(a)
        for p in self.parts:
            ind = ind + p.rows.size * p.base(a)
        return round_up(ind, 64)

    def per_query(self, order: float) -> tuple[np.ndarray, np.ndarray]:
        """Each query's (data-dependent, data-independent) RDP at ``order``, shape (k,) each."""
        dep = np.zeros(self.queries)
        ind = np.zeros(self.queries)
        for p in self.parts:
            d, i = p.per_query(order, self.queries)
            dep += d
            ind += i
        return dep, ind

    def cumulative(self, orders, counts) -> tuple[np.ndarray, np.ndarray]:
        """Composed RDP of the first c queries for each c in ``counts`` (ascending, in [0, k]),
        shape (len(counts), n) each: (data-dependent, data-independent), rounded up. Computed
        in chunks of queries (memory: a chunk × orders)."""
        a = np.asarray(orders, dtype=float)
        cs = np.asarray(counts, dtype=np.int64)
        k = self.queries
        dep = np.zeros((cs.size, a.size))
        ind = np.zeros((cs.size, a.size))
        for p in self.parts:
            base = p.base(a)
            paid = np.searchsorted(p.rows, cs, side="left")  # this part's rows among the first c
            ind += paid[:, None] * base[None, :]
            is_paid = np.zeros(k, dtype=bool)
            is_paid[p.rows] = True
            is_paid[p.zero_rows] = False
            is_dep = np.zeros(k, dtype=bool)
            is_dep[p.dep_rows] = True
            running = np.zeros(a.size)
            for i in range(0, k, CHUNK):
                j = min(i + CHUNK, k)
                cost = np.where(is_paid[i:j, None], base[None, :], 0.0)
                loc = np.flatnonzero(is_dep[i:j])
                if loc.size:
                    cost[loc] = np.minimum(p.thm.rdp(a, rows=loc + i), base[None, :])
                csum = np.cumsum(cost, axis=0) + running
                sel = np.flatnonzero((cs > i) & (cs <= j))
                dep[sel] += csum[cs[sel] - i - 1]
                running = csum[-1]
        return round_up(dep, 64 + k), round_up(ind, 64)  # cumsum: sequential, ≤ k·u relative


# ---------------------------------------------------------------------------
# Conversion with the order chosen continuously
# ---------------------------------------------------------------------------

def _search(curve, orders: np.ndarray, objective, floor: float) -> Conversion:
    """Minimise ``objective(orders, curve(orders))`` over the grid, then refine the best order
    between its neighbours (bounded Brent search); warnings when the optimum sits at an edge."""
    vals = objective(orders, curve(orders))
    i = int(np.argmin(vals))
    best, order = float(vals[i]), float(orders[i])
    warns: list[str] = []
    if not math.isfinite(best) or best <= floor:
        return Conversion(best, order)
    lo = float(orders[max(i - 1, 0)])
    hi = float(orders[min(i + 1, orders.size - 1)])
    if hi > lo:
        def f(x: float) -> float:
            xa = np.array([x])
            val = float(objective(xa, curve(xa))[0])
            return val if math.isfinite(val) else 1e300

        x, fx = minimize_bounded(f, lo, hi, xatol=1e-4 * float(orders[i]))
        if math.isfinite(fx) and fx < best:
            best, order = float(fx), float(x)
    if i == orders.size - 1:
        warns.append(f"the optimal order {order:.6g} is the largest searched; larger orders might give a "
                     "tighter bound")
    return Conversion(best, order, tuple(warns))


def epsilon_of_curve(curve, *, delta: float, orders=None) -> Conversion:
    """ε at δ of an RDP curve given as a function ``curve(orders) -> rdp`` (CKS 2020 Prop 12 with
    the TV shortcut, :mod:`dpcalc.accounting.rdp_conversion`), the order refined continuously.

    Raises:
        ParameterError: δ not in (0, 1).
    """
    d = v.open_unit("delta", delta)
    ld = math.log(d)
    a = ORDERS if orders is None else np.asarray(orders, dtype=float)
    return _search(curve, a, lambda o, r: epsilon_per_order(o, r, ld), 0.0)


def delta_of_curve(curve, *, epsilon: float, orders=None) -> Conversion:
    """δ at ε of an RDP curve (CKS 2020 Prop 12 inverted, TV bound), the order refined.

    Raises:
        ParameterError: ε negative or not finite.
    """
    e = v.nonnegative("epsilon", epsilon)
    a = ORDERS if orders is None else np.asarray(orders, dtype=float)
    c = _search(curve, a, lambda o, r: log_delta_per_order(o, r, e), -math.inf)
    return Conversion(math.exp(min(c.value, 0.0)), c.order, c.warnings)


def check_noise(name: str, value) -> float:
    """A positive finite noise parameter (votes).

    Raises:
        ParameterError: not positive and finite.
    """
    x = v.positive(name, value)
    if not math.isfinite(x):  # pragma: no cover - positive() refuses inf
        raise ParameterError(name, "finite", x)
    return x
