r"""The privacy filter that enforces a ledger's budget (docs/design.md §11).

A *privacy filter* (Rogers, Roth, Ullman, Vadhan 2016) decides, before each mechanism runs,
whether it may run, knowing only the mechanisms run so far — whose parameters may have
been chosen after seeing every earlier output (fully adaptive composition). The filter
here is the Rényi-DP filter of Feldman & Zrnic 2021 ("Individual privacy accounting via a
Rényi filter", NeurIPS, Thm 3.1), run at a fixed finite set Λ of orders with a union bound
over Λ, plus the order α = ∞ (pure DP, basic composition):

* each mechanism i comes with its RDP curve ε_i(α) (:func:`charge`), fixed before it runs;
* the filter lets mechanism t run iff, with S_t(α) = Σ_{i≤t} ε_i(α) (t included),

      S_t(∞) ≤ ε    or    min_{α ∈ Λ} S_t(α) + c(α) ≤ ε,
      c(α) = (ln(|Λ|/δ) − ln α)/(α − 1) + ln((α − 1)/α).

Validity (proof in docs/design.md §11): for each fixed finite α the process
exp((α−1)(L_t − S_t(α))), L_t the privacy loss of the first t outputs, is a non-negative
supermartingale (each step's conditional moment is bounded by its RDP, Feldman & Zrnic
Lemma 3.2), so at the filter's stopping time τ, E[exp((α−1)(L_τ − S_τ(α)))] ≤ 1 (optional
stopping). The hockey-stick divergence of the whole interaction is δ(ε) = E[(1 − e^{ε−L_τ})₊]
and (1 − e^{ε−x})₊ ≤ C_α e^{(α−1)(x−ε)} for all x with C_α = (α−1)^{α−1}/α^α (the pointwise
bound behind the RDP → (ε, δ) conversion of Canonne, Kamath, Steinke 2020 Prop. 12 / Balle et
al. 2020 Thm 21). Every admitted history meets one of the conditions at its end; on the
paths meeting the order-α one, S_τ(α) ≤ ε − c(α), so summing over the |Λ| orders gives
δ(ε) ≤ Σ_α C_α e^{−(α−1)c(α)} = Σ_α δ/|Λ| = δ; the order-∞ paths add nothing, their loss being
bounded by S_τ(∞) ≤ ε pointwise. Hence (ε, δ)-DP.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dpcalc._numerics import UNIT_ROUNDOFF, round_up
from dpcalc.errors import UnsupportedEventError
from dpcalc.events import (
    ComposedEvent,
    EpsilonDeltaEvent,
    Event,
    ExponentialMechanismEvent,
    FixedSizeSampledEvent,
    GaussianEvent,
    LaplaceEvent,
    LNMaxEvent,
    SelfComposedEvent,
    walk,
)

__all__ = ["FILTER_ORDERS", "MAX_ORDERS", "Charge", "add_up", "charge", "check_orders", "conversion", "decimal",
           "FilterState", "RunningTotals", "FILTER_NAME", "FILTER_SOURCE", "source"]

#: the finite Rényi orders Λ of the filter (21 of them: the union bound costs ln 21 ≈ 3.0 in
#: ln(|Λ|/δ)); coarser than the RDP accountant's grid, whose ~95 orders would cost ln 95
FILTER_ORDERS: tuple[float, ...] = (1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0,
                                    16.0, 20.0, 24.0, 32.0, 48.0, 64.0, 96.0, 128.0, 256.0)
FILTER_NAME = "rdp-filter"
#: most orders a dataset's filter may use (``ledger init --orders``)
MAX_ORDERS = 64


def source(orders: tuple[float, ...] = FILTER_ORDERS) -> str:
    """The filter's citation for a dataset whose filter runs at ``orders``."""
    which = (f"{len(orders)} orders" if orders == FILTER_ORDERS else
             f"{len(orders)} order{'s' if len(orders) > 1 else ''} fixed at ledger init ("
             + ", ".join(f"{a:g}" for a in orders) + ")")
    return f"Rényi filter, Feldman & Zrnic 2021 Thm 3.1, union bound over {which} + pure-DP order ∞ (docs/design.md §11)"


FILTER_SOURCE = source()


def check_orders(orders) -> tuple[float, ...]:
    """A dataset's filter orders Λ: 1 to :data:`MAX_ORDERS` distinct finite numbers > 1, sorted.

    Raises:
        ParameterError: anything else (named ``orders``).
    """
    from dpcalc.errors import ParameterError

    if not isinstance(orders, (list, tuple)) or any(
            isinstance(a, bool) or not isinstance(a, (int, float)) for a in orders):
        raise ParameterError("orders", f"a list of 1 to {MAX_ORDERS} Rényi orders > 1", str(orders)[:70])
    vals = tuple(sorted(float(a) for a in orders))
    if not 1 <= len(vals) <= MAX_ORDERS or len(set(vals)) != len(vals) or any(
            not (1.0 < a < math.inf) for a in vals):
        raise ParameterError("orders", f"1 to {MAX_ORDERS} distinct finite Rényi orders > 1", list(orders)[:70])
    return vals


@dataclass(frozen=True)
class Charge:
    """What one mechanism costs the filter.

    Attributes:
        rdp: ε(α) at the filter's orders Λ (default :data:`FILTER_ORDERS`), shape (|Λ|,)
            (upper bounds; +inf allowed).
        pure: the pure-DP ε (the order ∞) as an exact rational, or None when not pure.
    """

    rdp: np.ndarray
    pure: Fraction | None

    def times(self, count: int) -> Charge:
        """The charge of ``count`` runs (RDP and pure ε add up, Mironov 2017 Prop. 1)."""
        return Charge(self.rdp * count, None if self.pure is None else self.pure * count)


def decimal(x: float) -> Fraction:
    """The float ``x`` as the exact decimal of its shortest repr: the ε dpcalc's exact samplers
    use (:mod:`dpcalc.mechanisms.discrete`, :func:`dpcalc.mechanisms.noisy_max.release_noisy_max`
    read a float ε through its repr), so ``--eps 0.1`` is 1/10 and ten of them make exactly 1."""
    return Fraction(repr(float(x)))


def _pure(event: Event) -> Fraction | None:
    """Pure ε of ``event`` (exact rational, an upper bound), None if it has none we use."""
    if isinstance(event, EpsilonDeltaEvent):
        return decimal(event.epsilon) if event.delta == 0 else None
    if isinstance(event, ExponentialMechanismEvent):
        return decimal(event.epsilon)  # ε-BR ⇒ ε-DP
    if isinstance(event, LaplaceEvent):
        return Fraction(round_up(1.0 / event.scale))  # 1/scale rounded up: an upper bound
    if isinstance(event, LNMaxEvent) and event.votes is None:
        return Fraction(round_up(2.0 / event.scale))  # ε₀ = 2/b (L1 sensitivity 2), rounded up
    if isinstance(event, SelfComposedEvent):
        inner = _pure(event.event)
        return None if inner is None else inner * event.count
    if isinstance(event, ComposedEvent):
        total = Fraction(0)
        for e in event.events:
            p = _pure(e)
            if p is None:
                return None
            total += p
        return total
    return None  # Gaussian, GNMax, sampled, tuning: no finite pure ε used here


def _fixed_size_steps(event: Event) -> bool:
    """Whether a fixed-size sampled step occurs anywhere inside ``event``."""
    return any(isinstance(e, FixedSizeSampledEvent) for e in walk(event))


def _rdp(event: Event, orders: np.ndarray, adjacency: str | None) -> np.ndarray:
    """RDP of ``event`` in the ledger's convention (parameters relative to the sensitivity under the
    dataset's adjacency, no doubling): dpcalc's ``rdp`` accountant with add/remove formulas, except a
    run of fixed-size batches, whose Rényi bound depends on the dataset's adjacency:

    * ``add-remove`` dataset: the whole event goes through the rdp accountant's dispatch under
      add/remove (:func:`dpcalc.accounting.rdp.rdp_of_event` with ``neighboring="add-remove"``):
      ``FixedSizeSampledEvent(B, N, GaussianEvent(σ))`` is charged Birrell, Ebrahimi, Behnia, Pacheco
      2024 Thm 3.1/3.3 (without replacement) or Thm 3.6 (with replacement),
      dpcalc/accounting/_fixed_size_rdp.py; σ is relative to the add/remove sensitivity C.
    * ``replace`` dataset: ``FixedSizeSampledEvent(B, N, GaussianEvent(s))`` without replacement is the
      Gaussian of multiplier s relative to the replace-one sensitivity on a batch of B of N: Wang, Balle,
      Kasiviswanathan 2019 Thm 9 with the base curve α/(2s²), which is
      :func:`~dpcalc.accounting.rdp.rdp_without_replacement_gaussian` at σ = 2s (its σ is
      relative to C with replace-one sensitivity 2C: base 2α/σ²; doubling is exact). With replacement
      has no replace-one bound (refused).

    Raises:
        UnsupportedEventError: a fixed-size step with ``adjacency`` None (the charge depends on it), with
            replacement on a replace dataset, or of a mechanism other than the Gaussian.
    """
    from dpcalc.accounting.rdp import rdp_of_event

    if not _fixed_size_steps(event):
        return rdp_of_event(event, orders)
    if adjacency == "add-remove":
        return rdp_of_event(event, orders, neighboring="add-remove")
    if adjacency != "replace":
        raise UnsupportedEventError(
            "the ledger's filter charges fixed-size batches only knowing the dataset's adjacency "
            "(add-remove or replace)")
    step = event.event if isinstance(event, SelfComposedEvent) else event
    if not isinstance(step, FixedSizeSampledEvent) or step.replacement or not isinstance(step.event, GaussianEvent):
        raise UnsupportedEventError(
            "on a replace dataset the ledger's filter charges fixed-size batches only without replacement, "
            "of a Gaussian (Wang, Balle, Kasiviswanathan 2019 Thm 9, replace-one)")
    from dpcalc.accounting.rdp import rdp_without_replacement_gaussian

    count = event.count if isinstance(event, SelfComposedEvent) else 1
    if count == 0:
        return np.zeros(len(orders))
    one = rdp_without_replacement_gaussian(batch_size=step.batch_size, dataset_size=step.dataset_size,
                                           noise_multiplier=2.0 * step.event.noise_multiplier, orders=orders)
    return count * np.asarray(one, dtype=float)  # as the rdp accountant composes (Mironov 2017 Prop. 1)


def charge(event: Event, orders: tuple[float, ...] = FILTER_ORDERS, *, adjacency: str | None = None) -> Charge:
    """The filter's charge for ``event`` (:func:`_charge`), memoised: a ledger repeats the same few
    mechanisms, and an event is a frozen value, so its charge is computed once per process. Each
    call returns its own copy of the curve."""
    try:
        c = _charge_cached(event, tuple(float(a) for a in orders), adjacency)
    except TypeError:  # an unhashable event (never one the ledger stores)
        c = _charge(event, orders, adjacency=adjacency)
    return Charge(c.rdp.copy(), c.pure)


@functools.lru_cache(maxsize=4096)
def _charge_cached(event: Event, orders: tuple[float, ...], adjacency: str | None) -> Charge:
    return _charge(event, orders, adjacency=adjacency)


def _charge(event: Event, orders: tuple[float, ...] = FILTER_ORDERS, *, adjacency: str | None = None) -> Charge:
    """The filter's charge for ``event``: its RDP curve at ``orders`` (default :data:`FILTER_ORDERS`;
    dpcalc's RDP accountant, add/remove convention: parameters are relative to the stated
    sensitivity — for a run of fixed-size batches, the bound under the dataset's ``adjacency``,
    :func:`_rdp`) and its pure ε.

    Args:
        event: the mechanism (a training run: its step composed T times).
        orders: the dataset's filter orders Λ.
        adjacency: the dataset's adjacency (``"add-remove"`` or ``"replace"``); needed only for
            fixed-size batches (None: such an event is refused).

    Raises:
        UnsupportedEventError: the event has neither an RDP curve nor a pure ε
            (e.g. an (ε, δ) guarantee with δ > 0: docs/design.md §11).
    """
    pure = _pure(event)
    try:
        rdp = np.asarray(_rdp(event, np.asarray(orders), adjacency), dtype=float)
    except UnsupportedEventError:
        if pure is None:
            raise
        rdp = np.full(len(orders), math.inf)
    return Charge(np.where(np.isnan(rdp), math.inf, rdp), pure)


def conversion(delta: float, orders: tuple[float, ...] = FILTER_ORDERS) -> np.ndarray:
    """c(α) at ``orders`` Λ: (ln(|Λ|/δ) − ln α)/(α − 1) + ln((α − 1)/α), rounded up
    (each term is computed to a few ulps; the 16-ulp margin of ``round_up`` is taken on the sum
    of their magnitudes)."""
    a = np.asarray(orders)
    first = (math.log(len(orders)) - math.log(delta) - np.log(a)) / (a - 1.0)
    return add_up(first, np.log1p(-1.0 / a))


def add_up(x, y):
    """x + y moved up by 16 unit round-offs of |x| + |y|: an upper bound on the exact sum of two
    upper bounds, whatever their signs (:func:`dpcalc._numerics.round_up` would move a negative
    sum down)."""
    with np.errstate(invalid="ignore", over="ignore"):
        return x + y + 16.0 * UNIT_ROUNDOFF * (np.abs(x) + np.abs(y))


def _float_up(x: Fraction) -> float:
    f = float(x)
    return f if Fraction(f) >= x else math.nextafter(f, math.inf)


def _fsum_up(values) -> float:
    """math.fsum (correctly rounded), +inf past the largest float instead of OverflowError."""
    try:
        return math.fsum(values)
    except OverflowError:
        return math.inf


class _Decisions:
    """ε and admission from :meth:`totals` (shared by :class:`FilterState` and :class:`RunningTotals`)."""

    delta: float
    orders: tuple[float, ...]

    def totals(self, extra: Charge | None = None) -> tuple[np.ndarray, Fraction | None]:
        raise NotImplementedError

    def epsilon(self, extra: Charge | None = None) -> float:
        """The ε the filter certifies for the history (with ``extra`` appended): the smaller of
        S(∞) and min over Λ of S(α) + c(α) (:func:`conversion`), rounded up, at least 0."""
        rdp, pure = self.totals(extra)
        with np.errstate(invalid="ignore", over="ignore"):
            finite = float(np.min(add_up(rdp, conversion(self.delta, self.orders))))
        finite = math.inf if math.isnan(finite) else max(0.0, finite)
        return min(finite, _float_up(pure)) if pure is not None else finite

    def admits(self, extra: Charge, budget: float) -> bool:
        """Whether the filter lets a mechanism with charge ``extra`` run under ``budget`` ε."""
        rdp, pure = self.totals(extra)
        if pure is not None and pure <= Fraction(budget):
            return True  # the order ∞, exactly (k releases of ε/k fit a budget of ε)
        return self.epsilon(extra) <= budget


@dataclass
class FilterState(_Decisions):
    """The filter's running sums for one dataset.

    Args:
        delta: the dataset's δ in (0, 1).
        charges: the charges of the mechanisms run so far (computed at ``orders``).
        orders: the filter's orders Λ, fixed when the dataset was created.
    """

    delta: float
    charges: list[Charge]
    orders: tuple[float, ...] = FILTER_ORDERS

    def totals(self, extra: Charge | None = None) -> tuple[np.ndarray, Fraction | None]:
        """(S(α) at Λ rounded up, S(∞) exact or None) over the charges (and ``extra``)."""
        items = self.charges + ([extra] if extra is not None else [])
        n = len(self.orders)
        rdp = np.array([_fsum_up(c.rdp[k] for c in items) for k in range(n)]) if items else np.zeros(n)
        rdp = round_up(rdp)  # fsum is correctly rounded: 16 ulps cover it and the inputs' own rounding
        pure: Fraction | None = Fraction(0)
        for c in items:
            if c.pure is None:
                pure = None
                break
            pure += c.pure
        return rdp, pure


class RunningTotals(_Decisions):
    """The filter's sums kept as it runs, so that deciding on a release costs O(1) in the number
    of events recorded (issue 33). The sums are exact — per order the sum of the finite charges
    as an integer in units of 2^-1074 (every finite float is one) and a count of the infinite ones, the pure ε a rational and a count of charges without
    one — so :meth:`totals` is *equal* to :meth:`FilterState.totals` over the same charges (``fsum``
    is correctly rounded, and so is the rational sum's conversion to a float), and a charge can be
    taken out exactly (a training run that finishes is counted at its steps taken).

    Args:
        delta: the dataset's δ. orders: its filter orders Λ.
    """

    #: finite charges are summed as integers in units of 2^-1074 (the smallest subnormal), exactly
    SCALE_BITS = 1074

    def __init__(self, delta: float, orders: tuple[float, ...] = FILTER_ORDERS) -> None:
        self.delta, self.orders = delta, tuple(orders)
        n = len(self.orders)
        self.sums = [0] * n  # exact: Σ x · 2^1074 over the finite charges
        self.infs = [0] * n
        self.pure = Fraction(0)
        self.impure = 0
        self.count = 0

    @classmethod
    def of(cls, delta: float, charges, orders: tuple[float, ...] = FILTER_ORDERS) -> RunningTotals:
        """The totals of ``charges`` (a full recomputation)."""
        out = cls(delta, orders)
        for c in charges:
            out.add(c)
        return out

    def _apply(self, c: Charge, sign: int) -> None:
        if len(c.rdp) != len(self.orders):
            raise ValueError("a charge computed at other orders than the filter's")
        for k, x in enumerate(c.rdp):
            x = float(x)
            if math.isinf(x) or math.isnan(x):
                self.infs[k] += sign
            else:
                num, den = x.as_integer_ratio()  # den a power of two, at most 2^1074
                self.sums[k] += sign * (num << (self.SCALE_BITS + 1 - den.bit_length()))
        if c.pure is None:
            self.impure += sign
        else:
            self.pure += sign * c.pure
        self.count += sign

    def add(self, c: Charge) -> None:
        """Count one more mechanism."""
        self._apply(c, 1)

    def remove(self, c: Charge) -> None:
        """Take out a charge added before (exactly)."""
        self._apply(c, -1)

    def totals(self, extra: Charge | None = None) -> tuple[np.ndarray, Fraction | None]:
        """(S(α) at Λ rounded up, S(∞) exact or None), as :meth:`FilterState.totals`."""
        n = len(self.orders)
        if self.count == 0 and extra is None:
            return round_up(np.zeros(n)), Fraction(0)
        rdp = np.empty(n)
        for k in range(n):
            e = float(extra.rdp[k]) if extra is not None else 0.0
            if self.infs[k] > 0 or math.isinf(e) or math.isnan(e):
                rdp[k] = math.inf
                continue
            num, den = e.as_integer_ratio()
            total = self.sums[k] + (num << (self.SCALE_BITS + 1 - den.bit_length()))
            try:
                rdp[k] = float(Fraction(total, 1 << self.SCALE_BITS))  # correctly rounded, as fsum
            except OverflowError:
                rdp[k] = math.inf
        pure = None if self.impure > 0 or (extra is not None and extra.pure is None) else (
            self.pure + (extra.pure if extra is not None else 0))
        return round_up(rdp), pure

    def to_json(self) -> dict:
        """Plain JSON (the sums as integers in units of 2^-1074, the pure ε as ``"p/q"`` text)."""
        return {"count": self.count, "sums": list(self.sums), "infs": list(self.infs),
                "pure": str(self.pure), "impure": self.impure}

    @classmethod
    def from_json(cls, data: dict, delta: float, orders: tuple[float, ...]) -> RunningTotals:
        """Rebuild :meth:`to_json`'s form.

        Raises:
            ValueError, TypeError, KeyError: a malformed state (the caller recomputes it).
        """
        out = cls(delta, orders)
        sums, infs = data["sums"], data["infs"]
        if len(sums) != len(out.orders) or len(infs) != len(out.orders):
            raise ValueError("filter state at other orders")
        if any(isinstance(x, bool) or not isinstance(x, int) for x in sums):
            raise TypeError("filter state sums must be integers")
        out.sums = list(sums)
        out.infs = [int(x) for x in infs]
        out.pure = Fraction(str(data["pure"]))
        out.impure, out.count = int(data["impure"]), int(data["count"])
        if min(out.infs + [out.impure, out.count]) < 0:
            raise ValueError("negative count in a filter state")
        return out

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RunningTotals):
            return NotImplemented
        return self.to_json() == other.to_json() and self.orders == other.orders and self.delta == other.delta
