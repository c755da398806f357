"""The one accountant contract (docs/contributing.md §2, docs/design.md §2).

An accountant takes a mechanism history (a :class:`dpcalc.events.Event`) and answers
"ε at δ" or "δ at ε". It is **stateless**: the same history always gives the same answer,
which is what calibration by root finding needs; nothing is remembered between calls and
nothing outside the accountant sets its attributes.

Required: :meth:`Accountant.epsilon`, :meth:`Accountant.delta`, :meth:`Accountant.check`
and the class attributes ``name``, ``certified``, ``source``, ``short_source``,
``description``. Every optional capability is declared here with a default, so callers
never probe with ``getattr``:

* :meth:`calibration_hint` — a cheap first guess of σ for a target ε (default: none);
* :meth:`calibration_search` — a smooth, monotone stand-in for ε(σ) for the root finder
  (default: none, the accountant itself is searched);
* :meth:`infeasible_hint` — why a target ε is out of reach, with δ passed explicitly;
* :meth:`epsilon_grid` / :meth:`delta_grid` — the answer at many numbers of compositions
  at once (``dpcalc compose --steps-grid``); the default evaluates point by point at no
  more than :attr:`grid_evaluations` points; accountants whose curves add up over
  compositions (RDP, moments, zCDP, GDP) override it with one vectorised pass;
* :meth:`rdp_curve` — the Rényi-DP curve of a history, if the accountant has one;
* :meth:`privacy_profile` — certified δ(ε) (and a proven lower bound, if any) at many ε at
  once; the default calls :meth:`delta` at each ε, pld composes once and reads every δ off
  the same composed distribution (``dpcalc risk``);
* :meth:`profile_stand_in` — a cheaper accountant for the many δ(ε) points of a risk curve;
* :meth:`epsilon_dpsgd_many` — ε of many DP-SGD runs at once (default: one by one), with
  :attr:`vectorised_dpsgd` saying whether it is one vectorised pass worth searching in step;
* :attr:`calibrates_by_stand_in` — whether :meth:`calibration_search` gives a stand-in (then
  ``dpcalc plan`` warm-starts each cell from its neighbour).

Declared capabilities (class attributes with defaults) are what the commands read instead of
names: :attr:`options` (constructor options the commands' flags may set),
:attr:`vectorised_grid`, :attr:`plotted_curve`, :attr:`curve_by_epsilon`,
:attr:`max_distinct` / :attr:`distinct_cost`, :attr:`rdp_tradeoff`,
:attr:`approximation_note`, :attr:`all_batch_samplers`, :attr:`vectorised_dpsgd`.

Adding an accountant is one module (a subclass) and one line in
:data:`dpcalc.accounting.registry.ACCOUNTANTS`; ``epsilon``, ``delta``, ``sigma``,
``compose`` (and its ``--method`` choices), ``risk``, ``plan`` and ``train`` pick it up from
the registry. Outside the registry no code names an accountant (tests/test_architecture.py).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from dpcalc import _validate as v
from dpcalc.errors import ParameterError, UnsupportedEventError
from dpcalc.events import ComposedEvent, Event, SelfComposedEvent, dpsgd_event, is_data_dependent
from dpcalc.results import AccountingResult

if TYPE_CHECKING:  # numpy is imported by every accountant module anyway, lazily here
    import numpy as np

__all__ = ["Accountant", "GridResult", "NEIGHBORING_RELATIONS", "additive_totals", "composed_at",
           "data_dependent_label", "isolated"]

#: ``add-remove``: neighbours differ by adding or removing one record (Opacus, TF
#: Privacy, dp_accounting default). ``replace``: neighbours differ in one record's value.
NEIGHBORING_RELATIONS = ("add-remove", "replace")


@dataclass(frozen=True)
class GridResult:
    """An accountant's answer at several numbers of compositions (a steps grid).

    Attributes:
        indices: which rows of the count matrix were evaluated (ascending).
        values: ε (or δ) at each of those rows; ``inf`` where unbounded.
        note: how the grid was evaluated when it matters to a reader (a subset of the
            points, orders not refined between grid orders, ...), else None.
    """

    indices: tuple[int, ...]
    values: tuple[float, ...]
    note: str | None = None

    @classmethod
    def every_row(cls, values, note: str | None = None) -> GridResult:
        """A grid evaluated at every row: ``values`` has one entry per row of the count matrix."""
        return cls(tuple(range(len(values))), tuple(float(x) for x in values), note)


def additive_totals(counts, per_step) -> np.ndarray:
    """Totals of a privacy quantity that adds up over compositions (RDP curves, log-moments,
    ρ, μ²): ``counts @ per_step``.

    Args:
        counts: integer array of shape (m, n), entries ≥ 0 (row i runs step j counts[i, j] times).
        per_step: shape (n,) or (n, k): the quantity of one run of each step (per order).

    Returns:
        Array of shape (m,) or (m, k).
    """
    import numpy as np

    return np.asarray(counts, dtype=float) @ np.asarray(per_step, dtype=float)


def composed_at(steps: Sequence[Event], counts: Sequence[int]) -> Event:
    """The history that runs ``steps[j]`` ``counts[j]`` times (zero counts kept: they cost nothing).

    Args:
        steps: one-run mechanisms, length n.
        counts: how many times each runs, length n, each ≥ 0.
    """
    parts = tuple(SelfComposedEvent(s, int(c)) for s, c in zip(steps, counts, strict=True))
    return parts[0] if len(parts) == 1 else ComposedEvent(parts)


def spread_indices(n: int, cap: int) -> list[int]:
    """Up to ``cap`` indices of 0 … n−1, evenly spread, always including both ends."""
    if n <= cap:
        return list(range(n))
    step = (n - 1) / (cap - 1)
    return sorted({int(round(i * step)) for i in range(cap)})


class Accountant(ABC):
    """Base class: subclasses set ``name``, ``certified``, ``source``, ``short_source`` and
    ``description`` and implement :meth:`epsilon`, :meth:`delta` and :meth:`check`.

    Args:
        neighboring: the adjacency relation, ``"add-remove"`` (default) or ``"replace"``.

    Raises:
        ParameterError: unknown ``neighboring``.
    """

    name: ClassVar[str]
    #: True iff every number is a proven upper bound (gdp: False, a CLT approximation)
    certified: ClassVar[bool] = True
    #: the paper(s) and theorem(s) the numbers come from (JSON ``source``)
    source: ClassVar[str] = ""
    #: short citation for table columns
    short_source: ClassVar[str] = ""
    #: one-line description for --help and the README
    description: ClassVar[str] = ""
    #: the default :meth:`epsilon_grid`/:meth:`delta_grid` evaluate at most this many points
    grid_evaluations: ClassVar[int] = 12
    #: True iff :meth:`epsilon_grid` / :meth:`delta_grid` are overridden by one vectorised pass
    #: over the whole grid (curves that add up over compositions: rdp, ma, zcdp, gdp); False:
    #: the point-by-point default, so ``--steps-grid`` asks for a few points only
    vectorised_grid: ClassVar[bool] = False
    #: constructor options (beyond ``neighboring``) that the commands' flags may set, e.g.
    #: ``("discretization", "accuracy")`` for ``--discretization`` / ``--accuracy``: a flag's
    #: value is passed only to the accountants that list it (default: none)
    options: ClassVar[tuple[str, ...]] = ()
    #: True iff ``dpcalc compose --plot-curve`` draws this accountant's δ(ε) curve (the tight
    #: methods; accountants kept for comparison or reproduction, zcdp and ma, are left off)
    plotted_curve: ClassVar[bool] = False
    #: True iff ε at a given δ is much cheaper than δ at a given ε: privacy curves are then
    #: drawn from ε at several δ instead of δ at several ε (pld)
    curve_by_epsilon: ClassVar[bool] = False
    #: ``compose`` without explicit methods skips this accountant (with the reason) for more
    #: distinct mechanisms than this, its time growing with their number; None: never skipped
    max_distinct: ClassVar[int | None] = None
    #: why the time grows with the number of distinct mechanisms (in the skipped row's reason)
    distinct_cost: ClassVar[str] = ""
    #: True iff the accountant's guarantee is its Rényi-DP curve (:meth:`rdp_curve`), so
    #: ``dpcalc risk`` also bounds each binary test by that curve's Rényi region (Balle, Barthe,
    #: Gaboardi, Hsu, Sato 2020 §3). False where the curve is an intermediate only (ma states
    #: the moments accountant's tail bound, not the Rényi region)
    rdp_tradeoff: ClassVar[bool] = False
    #: what an uncertified result of this accountant is, for table notes (gdp: a CLT
    #: approximation that may under-report); "" when there is nothing to say
    approximation_note: ClassVar[str] = ""
    #: True iff the accountant has analyses of every non-Poisson batch sampler of
    #: :mod:`dpcalc.accounting._sampling` (the refusals of the others point to it)
    all_batch_samplers: ClassVar[bool] = False
    #: True iff :meth:`epsilon_dpsgd_many` is one vectorised pass (the calibration of many runs
    #: then searches them in step, ``dpcalc plan``); False: the one-by-one default
    vectorised_dpsgd: ClassVar[bool] = False

    def __init__(self, *, neighboring: str = "add-remove") -> None:
        self.neighboring = v.choice("neighboring", neighboring, NEIGHBORING_RELATIONS)

    # ------------------------------------------------------------------ required

    @abstractmethod
    def epsilon(self, event: Event, *, delta: float) -> AccountingResult:
        """The smallest ε this accountant certifies for ``event`` at ``delta``.

        Raises:
            ParameterError: ``delta`` not in (0, 1).
            UnsupportedEventError: the accountant cannot handle ``event``.
        """

    @abstractmethod
    def delta(self, event: Event, *, epsilon: float) -> AccountingResult:
        """The smallest δ this accountant certifies for ``event`` at ``epsilon`` (ε ≥ 0).

        Raises:
            ParameterError: ``epsilon`` negative or not finite.
            UnsupportedEventError: the accountant cannot handle ``event``.
        """

    @abstractmethod
    def check(self, event: Event) -> None:
        """Raise :class:`UnsupportedEventError` (with the reason) if ``event`` is not supported."""

    # ------------------------------------------------------------------ provided

    def supports(self, event: Event) -> bool:
        """True iff :meth:`check` passes."""
        try:
            self.check(event)
        except UnsupportedEventError:
            return False
        return True

    def not_applicable(self, reason: str) -> AccountingResult:
        """A result row saying this accountant does not apply, and why (``certified`` False: a
        row without a number certifies nothing)."""
        return AccountingResult(self.name, None, None, False, applicable=False,
                                reason=reason, source=self.source)

    # ------------------------------------------------------------------ optional hooks

    def calibration_hint(self, *, target_epsilon: float, delta: float,
                         make_event: Callable[[float], Event]) -> float | None:
        """A cheap first guess of the noise multiplier σ meeting ``target_epsilon`` at
        ``delta`` for the history ``make_event(σ)``, or None (default: no guess).

        The guess only seeds the bracket of :func:`dpcalc.accounting.calibrate.calibrate_noise_multiplier`;
        it need not be certified.

        Raises:
            InfeasibleError: the accountant can tell cheaply that no σ up to the search limit
                meets the target (an early refusal; the message says why).
        """
        return None

    def calibration_search(self, result: AccountingResult) -> tuple[Hashable, Accountant] | None:
        """A stand-in to run the root finder on, given this accountant's ``result`` at a σ.

        Returns None (default: search this accountant itself) or ``(key, accountant)``:
        an accountant whose ε(σ) is smooth and monotone in σ and never below this
        accountant's ε wherever this accountant's own plan has the same ``key`` (pld: its
        grid fixed). The calibration re-plans until the key at the σ found is the key
        searched, then verifies with this accountant.
        """
        return None

    def calibration_probe(self, event: Event, *, delta: float) -> AccountingResult:
        """This accountant's result where a calibration needs only its ε and its
        :meth:`calibration_search` key (the first evaluation, at the guess): the ε must be
        :meth:`epsilon`'s, the details may be cheaper (pld: the last round's lower bound is
        skipped). Default: :meth:`epsilon`."""
        return self.epsilon(event, delta=delta)

    def quick_stand_in(self, event: Event, *, delta: float) -> tuple[float, Accountant] | None:
        """For ``dpcalc plan --quick``: ``(key, accountant)``, a certified accountant with no
        choice left to make near ``event`` (pld: its upper bound on one grid step, the ``key``,
        fixed from ``event`` alone), whose ε(σ) is smooth and non-increasing in σ; each quick
        cell's σ is certified by that accountant's ε alone. None (default): the cell is
        calibrated as ``dpcalc sigma`` calibrates it."""
        return None

    @property
    def calibrates_by_stand_in(self) -> bool:
        """True iff :meth:`calibration_search` returns a stand-in for this instance (default
        False; pld without an explicit grid step): ``dpcalc plan`` then warm-starts each cell
        from its neighbour (:mod:`dpcalc.planning._warm`)."""
        return False

    def infeasible_hint(self, target_epsilon: float, *, delta: float) -> str:
        """Why ``target_epsilon`` at ``delta`` may be out of reach, and what to change
        (the tail of an :class:`~dpcalc.errors.InfeasibleError` message)."""
        return "the target is below what this accountant can certify; raise epsilon or delta"

    def epsilon_grid(self, steps: Sequence[Event], counts: np.ndarray, *, delta: float) -> GridResult:
        """ε at ``delta`` for every row of ``counts``: row i is the history running
        ``steps[j]`` ``counts[i, j]`` times (:func:`composed_at`).

        Args:
            steps: one-run mechanisms, length n.
            counts: integer array of shape (m, n), each entry ≥ 0.
            delta: δ in (0, 1).

        Returns:
            :class:`GridResult`. Default: :meth:`epsilon` at up to :attr:`grid_evaluations`
            rows spread over the grid (both ends included), with a note saying so.

        Raises:
            UnsupportedEventError: a step is not supported.
        """
        return self._pointwise(steps, counts, lambda ev: self.epsilon(ev, delta=delta).epsilon)

    def delta_grid(self, steps: Sequence[Event], counts: np.ndarray, *, epsilon: float) -> GridResult:
        """δ at ``epsilon`` for every row of ``counts`` (see :meth:`epsilon_grid`)."""
        return self._pointwise(steps, counts, lambda ev: self.delta(ev, epsilon=epsilon).delta)

    def rdp_curve(self, event: Event) -> tuple[np.ndarray, np.ndarray] | None:
        """``(orders, rdp)`` of the history — Rényi-DP ε(α) at each order α, shapes (k,), (k,) —
        or None when this accountant has no RDP curve (default)."""
        return None

    def profile_stand_in(self, head: AccountingResult) -> tuple[Accountant, str] | None:
        """A cheaper accountant for the many δ(ε) points of a privacy profile read beside this
        accountant's headline result ``head`` (``dpcalc risk``), with a note on how it differs
        (e.g. ``"grid step 0.02 nats"``); None (default): the points are evaluated by this
        accountant itself. The stand-in's δ must still be certified upper bounds."""
        return None

    def epsilon_dpsgd_many(self, *, sample_rates: Sequence[float], noise_multipliers: Sequence[float],
                           steps: Sequence[int], delta: float) -> list[AccountingResult]:
        """ε at δ of many DP-SGD runs (Poisson sampling): entry k is
        ``self.epsilon(dpsgd_event(noise_multiplier=σ_k, sample_rate=q_k, steps=T_k), delta=delta)``.
        Default: one call per run; an accountant computing all runs in one vectorised pass
        overrides it and sets :attr:`vectorised_dpsgd`.

        Args:
            sample_rates: q_k in (0, 1], length n.
            noise_multipliers: σ_k > 0, length n.
            steps: T_k ≥ 0, length n.
            delta: δ in (0, 1).

        Returns:
            n results, in order.

        Raises:
            ParameterError: a parameter out of range, or lengths that differ.
            UnsupportedEventError: as :meth:`epsilon`.
        """
        n = len(sample_rates)
        if len(noise_multipliers) != n or len(steps) != n:
            raise ParameterError("noise_multipliers", f"of length {n} (one per sample rate)", len(noise_multipliers))
        return [self.epsilon(dpsgd_event(noise_multiplier=s, sample_rate=q, steps=t), delta=delta)
                for q, s, t in zip(sample_rates, noise_multipliers, steps, strict=True)]

    def privacy_profile(self, event: Event, epsilons: Sequence[float]) -> tuple[np.ndarray, np.ndarray | None]:
        """The privacy profile δ(ε) of ``event`` at each of ``epsilons``: certified upper bounds
        and, when the accountant proves them, lower bounds (Balle, Barthe, Gaboardi 2018: the
        profile ε ↦ δ(ε) of a mechanism; docs/design.md §2).

        Args:
            event: the mechanism history.
            epsilons: ε values, each ≥ 0 and finite, any order, shape (k,).

        Returns:
            ``(delta_upper, delta_lower)``: float arrays of shape (k,) in the order given;
            ``delta_upper[i]`` is at least what :meth:`delta` certifies for a valid bound (``inf``
            where it certifies none); ``delta_lower`` holds proven lower bounds of the true δ(ε_i)
            (0 where none is known), or is None when the accountant proves none at all. Default:
            :meth:`delta` at each ε (its ``details["delta_lower"]`` as the lower bound).

        Raises:
            ParameterError: an ε negative or not finite.
            UnsupportedEventError: the accountant cannot handle ``event``.
        """
        import numpy as np

        eps = [v.nonnegative("epsilon", e) for e in epsilons]
        upper, lower, any_lower = [], [], False
        for e in eps:
            r = self.delta(event, epsilon=e)
            upper.append(math.inf if r.delta is None else float(r.delta))
            lo = (r.details or {}).get("delta_lower")
            any_lower = any_lower or lo is not None
            lower.append(0.0 if lo is None else max(0.0, float(lo)))
        return np.asarray(upper, dtype=float), (np.asarray(lower, dtype=float) if any_lower else None)

    def _pointwise(self, steps, counts, value: Callable[[Event], float | None]) -> GridResult:
        rows = [list(map(int, r)) for r in counts]
        idx = spread_indices(len(rows), self.grid_evaluations)
        vals = []
        for i in idx:
            x = value(composed_at(steps, rows[i]))
            vals.append(math.inf if x is None else float(x))
        note = None
        if len(idx) < len(rows):
            note = (f"evaluated at {len(idx)} of the {len(rows)} grid points (one full {self.name} "
                    "evaluation each); the plot joins them")
        return GridResult(tuple(idx), tuple(vals), note)


def data_dependent_label(result: AccountingResult, event: Event) -> AccountingResult:
    """``result`` as it may be shown for ``event``: when the history holds private PATE votes
    (:func:`dpcalc.events.is_data_dependent`) its number is about those votes, not a
    publishable guarantee, so the row is ``certified`` False with ``details["data_dependent"]``
    True (Papernot et al. 2018 §3; docs/design.md §1: data-dependent numbers are labelled).
    Any other result is returned unchanged.

    Args:
        result: an accountant's row for ``event``.
        event: the history it was computed for.
    """
    if not is_data_dependent(event):
        return result
    import dataclasses

    return dataclasses.replace(result, certified=False,
                               details={**(result.details or {}), "data_dependent": True})


def isolated(acc: Accountant, run: Callable[[Accountant], AccountingResult], *,
             also: tuple[type[BaseException], ...] = ()) -> AccountingResult:
    """One accountant's row of a table, isolated from the others.

    ``run(acc)`` computes the row. A failure of this accountant alone — an unsupported
    history, a numerical failure at extreme inputs (overflow, division by zero, a domain
    error; a ParameterError of an internal quantity included), or an exception of a type in
    ``also`` — becomes a not-applicable row with the reason, never the failure of the whole
    table. :class:`~dpcalc.errors.InfeasibleError` propagates unless listed in ``also`` (a
    calibration with one accountant must fail as a whole). numpy RuntimeWarnings raised on
    the way are not printed; they are listed in ``details["numerical_warnings"]`` of the row.

    Args:
        acc: the accountant.
        run: computes the row from the accountant.
        also: further exception types that make the row not applicable.

    Returns:
        The row, or ``acc.not_applicable(reason)``.
    """
    import dataclasses
    import warnings

    from dpcalc.errors import InfeasibleError

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        try:
            row = run(acc)
        except UnsupportedEventError as e:
            return acc.not_applicable(str(e))
        except also as e:
            return acc.not_applicable(f"not evaluated for these inputs: {e}")
        except InfeasibleError:
            raise
        except (ArithmeticError, ValueError) as e:
            msg = str(e) or type(e).__name__
            return acc.not_applicable(f"{acc.name} failed numerically at these inputs "
                                      f"({type(e).__name__}: {msg})")
    seen = list(dict.fromkeys(f"{w.filename.rsplit('/', 1)[-1]}:{w.lineno}: {w.message}"
                              for w in caught if issubclass(w.category, RuntimeWarning)))
    for w in caught:  # anything else is shown as usual
        if not issubclass(w.category, RuntimeWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if seen:
        details = dict(row.details or {})
        details["numerical_warnings"] = seen
        row = dataclasses.replace(row, details=details)
    return row
