"""The ledger's API: datasets with budgets, releases and training runs recorded and filtered.

Reserve, then release (docs/design.md §11): :meth:`Ledger.reserve` decides with the privacy
filter (:mod:`dpcalc.ledger.filter`) and records the event in the *same* ``BEGIN IMMEDIATE``
transaction, and the caller draws noise only after it returns. A process that dies after
the reservation leaves a counted event (status ``reserved``): a release that might have
printed is always counted. A refused release writes nothing and raises
:class:`BudgetExceededError` (exit status 1) before any noise is drawn.

A training run (:class:`TrainingRun`) reserves its planned steps T before the first step;
its row then records the steps taken, counted as the trainer's own ledger counts them
(before each step's gradient is computed, :mod:`dpcalc.train.checkpoint`). Until the run
finishes, the filter counts all T reserved steps (a killed run may have taken any of them);
a finished run counts the steps it took (a prefix of an accepted run is accepted: the
filter's sums only grow).
"""

from __future__ import annotations

import datetime as _dt
import functools
import math
import os
import sqlite3
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpcalc import _validate as v
from dpcalc._version import __version__
from dpcalc.errors import InfeasibleError, ParameterError, UnsupportedEventError
from dpcalc.events import (
    ComposedEvent,
    EpochSampledEvent,
    Event,
    FixedSizeSampledEvent,
    GaussianEvent,
    PoissonSampledEvent,
    SelfComposedEvent,
    children,
    sampled_step,
)
from dpcalc.ledger import filter as flt
from dpcalc.ledger import records
from dpcalc.ledger.store import LedgerFileError, connect, connect_for_reading, describe, transaction

__all__ = ["Ledger", "Dataset", "Record", "TrainingRun", "BudgetExceededError", "ADJACENCIES",
           "open_ledger", "set_status_retrying", "MAX_NAME", "SAMPLER_REASONS", "check_training_sampling", "training_step"]

#: adjacency relations a dataset's budget can be stated for
ADJACENCIES = ("add-remove", "replace")
#: longest dataset name
MAX_NAME = 100
#: statuses of an event row
STATUSES = ("reserved", "released", "running", "finished")


class BudgetExceededError(InfeasibleError):
    """The filter refuses a release or a run: it would take the dataset past its budget.
    Nothing was recorded and no noise drawn (exit status 1)."""


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="microseconds")


def check_name(name: Any) -> str:
    """A dataset name: 1–100 printable characters.

    Raises:
        ParameterError: anything else (named ``dataset``).
    """
    if not isinstance(name, str) or not 1 <= len(name) <= MAX_NAME or not name.isprintable():
        raise ParameterError("dataset", f"a name of 1 to {MAX_NAME} printable characters",
                             str(name)[:MAX_NAME + 1])
    return name


@dataclass(frozen=True)
class Dataset:
    """A dataset and its budget: the filter keeps its history (ε, δ)-DP with ε = ``budget_epsilon``.

    Attributes:
        id: row id. name: its name. budget_epsilon: ε > 0. delta: δ in (0, 1).
        adjacency: the neighbouring relation the budget (and every recorded sensitivity) is
            stated for, one of :data:`ADJACENCIES`. created: ISO time (UTC).
        orders: the filter's Rényi orders Λ, fixed when the dataset was created
            (default :data:`dpcalc.ledger.filter.FILTER_ORDERS`).
    """

    id: int
    name: str
    budget_epsilon: float
    delta: float
    adjacency: str
    created: str
    orders: tuple[float, ...] = flt.FILTER_ORDERS

    def to_json(self) -> dict:
        return {"name": self.name, "budget_epsilon": self.budget_epsilon, "delta": self.delta,
                "adjacency": self.adjacency, "created": self.created, "orders": list(self.orders)}


@dataclass(frozen=True)
class Record:
    """One recorded event (a release or a training run).

    Attributes:
        id: row id (order of recording). dataset: its dataset's name.
        kind: ``release`` or ``train``. mechanism: e.g. ``discrete-laplace``, ``dp-sgd``.
        params: the mechanism's parameters as given (sensitivity, ε, σ, q, ...).
        event: the :mod:`dpcalc.events` object the filter accounts (for a training run, ONE step).
        dp_event: the event the non-adaptive accountants use instead, when it differs (None).
        status: one of :data:`STATUSES`. created/updated: ISO times (UTC).
        command: the command line. version: the dpcalc version that recorded it.
        steps_reserved, steps_taken: a training run's planned and taken steps (None for releases).
    """

    id: int
    dataset: str
    kind: str
    mechanism: str
    params: dict
    event: Event
    dp_event: Event | None
    status: str
    created: str
    updated: str
    command: list
    version: str
    steps_reserved: int | None = None
    steps_taken: int | None = None

    @property
    def counted_steps(self) -> int | None:
        """Steps the accounting counts: all reserved steps until the run finishes."""
        if self.kind != "train":
            return None
        return self.steps_taken if self.status == "finished" else self.steps_reserved

    def accounted(self, *, for_filter: bool = True) -> Event:
        """The event as accounted: a training run's step composed ``counted_steps`` times;
        with ``for_filter=False``, ``dp_event`` when there is one."""
        base = self.event if for_filter or self.dp_event is None else self.dp_event
        if self.kind == "train":
            return SelfComposedEvent(base, self.counted_steps or 0)
        return base

    def to_json(self) -> dict:
        out = {"id": self.id, "dataset": self.dataset, "kind": self.kind, "mechanism": self.mechanism,
               "params": self.params, "event": records.event_to_json(self.event),
               "status": self.status, "created": self.created, "updated": self.updated,
               "command": self.command, "version": self.version}
        if self.dp_event is not None:
            out["dp_event"] = records.event_to_json(self.dp_event)
        if self.kind == "train":
            out.update(steps_reserved=self.steps_reserved, steps_taken=self.steps_taken)
        return out


@dataclass
class Spent:
    """A dataset's spending: the filter's ε (enforced) and what is left."""

    dataset: Dataset
    records: list[Record]
    filter_epsilon: float
    left: float
    charges: list[flt.Charge] = field(repr=False, default_factory=list)


@functools.lru_cache(maxsize=4096)
def _event_of(text: str) -> Event:
    """The event stored as ``text`` (memoised: a ledger repeats the same few events; events are
    frozen values)."""
    return records.event_from_json(records.loads(text))


def _event_row(row: sqlite3.Row, name: str) -> Record:
    try:
        dp = row["dp_event"]
        return Record(
            id=row["id"], dataset=name, kind=row["kind"], mechanism=row["mechanism"],
            params=records.check_plain(records.loads(row["params"])), event=_event_of(row["event"]),
            dp_event=None if dp is None else _event_of(dp),
            status=row["status"], created=row["created"], updated=row["updated"],
            command=records.check_plain(records.loads(row["command"]), "command"), version=row["version"],
            steps_reserved=row["steps_reserved"], steps_taken=row["steps_taken"])
    except RecursionError:
        raise LedgerFileError(f"ledger event #{row['id']} is corrupt: nested deeper than "
                              f"{records.MAX_DEPTH} levels") from None
    except (ValueError, ParameterError, TypeError) as e:
        msg = e.message if isinstance(e, ParameterError) else str(e)
        raise LedgerFileError(f"ledger event #{row['id']} is corrupt: {msg[:160]}") from None


#: why a batch sampler cannot be recorded on a dataset of the given adjacency (None: it can);
#: the table of docs/design.md §11 "Samplers", with the charge of each accepted pair there
SAMPLER_REASONS: dict[str, dict[str, str | None]] = {
    "poisson": {"add-remove": None, "replace": (
        "dpcalc's Rényi bound of the Poisson-sampled Gaussian (Mironov, Talwar, Zhang 2019) is for "
        "add/remove neighbours only; record it on a dataset created with --adjacency add-remove")},
    "truncated-poisson": {"add-remove": None, "replace": (
        "dpcalc's Rényi bound of the truncated-Poisson-sampled Gaussian is for add/remove neighbours only; "
        "record it on a dataset created with --adjacency add-remove")},
    "without-replacement": {"replace": None, "add-remove": None},
    "with-replacement": {"add-remove": None, "replace": (
        "its Rényi bound (Birrell, Ebrahimi, Behnia, Pacheco 2024 Thm 3.6) is proven for add/remove neighbours "
        "only, and dpcalc has no replace-one bound for fixed-size sampling with replacement; record it on a "
        "dataset created with --adjacency add-remove")},
    "shuffle": {"replace": None, "add-remove": (
        "its certified bound (one Gaussian run per epoch) holds for zero-out or replace-one neighbours, where "
        "N and so the batch layout are the same on both datasets; under add/remove the layout itself changes "
        "(N ± 1 records, ceil(N/B) batches) and no bound is proven; record it on a dataset created with "
        "--adjacency replace")},
}
SAMPLER_REASONS["balls-in-bins"] = dict(SAMPLER_REASONS["shuffle"])


def check_training_sampling(sampling: str, ds: Dataset) -> None:
    """Refuse a batch sampler that has no sound charge on ``ds``'s adjacency (:data:`SAMPLER_REASONS`).

    Raises:
        ParameterError: an unknown sampler, or one refused on this adjacency (one line with the reason).
    """
    reasons = SAMPLER_REASONS.get(sampling)
    if reasons is None:
        raise ParameterError("sampling", f"one of {', '.join(SAMPLER_REASONS)}", sampling)
    reason = reasons.get(ds.adjacency)
    if reason is not None:
        raise ParameterError("sampling", "", sampling, message=(
            f"--sampling {sampling} cannot be recorded on dataset {ds.name!r} ({ds.adjacency} adjacency): {reason}"))


def training_step(sampling: str, ds: Dataset, *, noise_multiplier: float, sample_rate: float,
                  batch_size: int | None = None, dataset_size: int | None = None,
                  max_batch_size: int | None = None) -> Event:
    """One DP-SGD step as ``ds``'s filter charges it: the event recorded for a training run.

    Events on a dataset are parameterised relative to the sensitivity under *its* adjacency
    (docs/design.md §11). A DP-SGD step's noise is σ·C, C the clipping norm (one record's
    contribution, the add/remove sensitivity of the clipped sum); replacing a record moves the sum
    by up to 2C, so on a ``replace`` dataset the Gaussian is recorded as ``GaussianEvent(σ/2)``.

    * add/remove: ``poisson`` → ``PoissonSampledEvent(q, GaussianEvent(σ))`` (the Gaussian itself at
      q = 1); ``truncated-poisson`` → ``TruncatedPoissonSampledEvent(q, N, B_max, GaussianEvent(σ))``;
      ``without-replacement`` / ``with-replacement`` → ``FixedSizeSampledEvent(B, N, GaussianEvent(σ),
      replacement)``, charged by Birrell, Ebrahimi, Behnia, Pacheco 2024 Thm 3.1/3.3 resp. Thm 3.6 (the rdp
      accountant's add/remove dispatch, :func:`dpcalc.ledger.filter.charge`);
    * replace: ``without-replacement`` → ``FixedSizeSampledEvent(B, N, GaussianEvent(σ/2))``, charged
      by Wang, Balle, Kasiviswanathan 2019 Thm 9 (:func:`dpcalc.ledger.filter.charge`);
      ``shuffle`` / ``balls-in-bins`` → ``EpochSampledEvent(B, N, GaussianEvent(σ/2))``: T steps are
      charged ⌈T/⌈N/B⌉⌉ Gaussian runs, one per epoch touched (:class:`dpcalc.events.EpochSampledEvent`).

    Args:
        sampling: the trainer's ``--sampling``. ds: the dataset. noise_multiplier: σ > 0.
        sample_rate: q = B/N. batch_size: B. dataset_size: N (data plus included canaries).
        max_batch_size: B_max (``truncated-poisson``).

    Raises:
        ParameterError: a sampler refused on ``ds``'s adjacency (:func:`check_training_sampling`), or
            a parameter out of range.
    """
    check_training_sampling(sampling, ds)
    sigma = v.positive("noise_multiplier", noise_multiplier)
    if ds.adjacency == "replace":
        sigma = sigma / 2.0  # exact: the replace-one sensitivity of the clipped sum is 2C
    return sampled_step(GaussianEvent(sigma), sampling, sample_rate=sample_rate, batch_size=batch_size,
                        dataset_size=dataset_size, max_batch_size=max_batch_size)


def _sampled_steps(event: Event) -> list[Event]:
    """The sampled steps (Poisson, fixed-size, truncated Poisson, epoch) anywhere inside ``event``."""
    from dpcalc.accounting._sampling import SAMPLER_EVENTS

    if isinstance(event, (PoissonSampledEvent, EpochSampledEvent, *SAMPLER_EVENTS)):
        return [event]
    return [s for e in children(event) for s in _sampled_steps(e)]


def _sampling_of(step: Event) -> str:
    if isinstance(step, PoissonSampledEvent):
        return "poisson"
    if isinstance(step, FixedSizeSampledEvent):
        return "with-replacement" if step.replacement else "without-replacement"
    if isinstance(step, EpochSampledEvent):
        return step.sampling
    return "truncated-poisson"


def _check_sampling(event: Event, ds: Dataset) -> None:
    """Refuse sampled steps that have no sound charge on ``ds``'s adjacency (:data:`SAMPLER_REASONS`).

    Raises:
        ParameterError: e.g. a fixed-size or epoch sampler on an add/remove dataset, a Poisson step
            on a replace one.
    """
    for step in _sampled_steps(event):
        check_training_sampling(_sampling_of(step), ds)


class Ledger:
    """A ledger file (:mod:`dpcalc.ledger.store`), open. Use as a context manager.

    Args:
        path: the ledger file.
        create: create it if missing (``dpcalc ledger init``).
        read_only: for readers (``ledger show``/``export``): a ledger that cannot be written is
            opened read-only instead of refused (:func:`dpcalc.ledger.store.connect_for_reading`);
            ``self.read_only`` then says so. Leaving the ``with`` block checks that a ledger read
            without locking (``immutable``) did not change meanwhile.
        migrate: with ``read_only``, False opens even a writable ledger the read-only way (never
            migrated, no write lock: ``dpcalc ledger report``).

    Raises:
        LedgerFileError: see :func:`dpcalc.ledger.store.connect`.
    """

    def __init__(self, path: str | os.PathLike, *, create: bool = False, read_only: bool = False,
                 migrate: bool = True) -> None:
        self.path = Path(path)
        self._unchanged = None
        if read_only and not create:
            self.con, self._unchanged = connect_for_reading(self.path, migrate=migrate)
        else:
            self.con = connect(self.path, create=create)
        self.read_only = bool(self.con.execute("PRAGMA query_only").fetchone()[0])
        self.con.row_factory = sqlite3.Row

    def close(self) -> None:
        self.con.close()

    def check_unchanged(self) -> None:
        """Raise :class:`LedgerFileError` if a ledger opened without locking changed while read."""
        if self._unchanged is not None:
            self._unchanged()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        self.close()
        if exc_type is None:
            self.check_unchanged()

    # -- datasets ---------------------------------------------------------------------------

    def _read(self, sql: str, args: tuple = ()) -> list[sqlite3.Row]:
        try:
            return self.con.execute(sql, args).fetchall()
        except sqlite3.Error as e:
            raise describe(e, self.path) from None

    def datasets(self) -> list[Dataset]:
        """Every dataset, in the order they were added."""
        return [self._dataset(r) for r in self._read("SELECT * FROM datasets ORDER BY id")]

    def _dataset(self, r: sqlite3.Row) -> Dataset:
        try:
            eps = v.positive("budget_epsilon", r["budget_epsilon"])
            delta = v.open_unit("delta", r["delta"])
            if r["adjacency"] not in ADJACENCIES:
                raise ValueError(f"adjacency {r['adjacency']!r}")
            stored = r["orders"] if "orders" in r.keys() else None  # a v2 ledger read read-only: no column
            orders = flt.FILTER_ORDERS if stored is None else flt.check_orders(records.loads(stored))
        except (ParameterError, ValueError, TypeError) as e:
            raise LedgerFileError(f"ledger {self.path}: dataset {r['name']!r} is corrupt ({e})") from None
        return Dataset(r["id"], r["name"], eps, delta, r["adjacency"], r["created"], orders)

    def dataset(self, name: str) -> Dataset:
        """The dataset called ``name``.

        Raises:
            ParameterError: no such dataset (the message lists the ledger's datasets).
        """
        rows = self._read("SELECT * FROM datasets WHERE name = ?", (check_name(name),))
        if not rows:
            names = [d.name for d in self.datasets()]
            have = ", ".join(repr(n) for n in names) if names else "none"
            raise ParameterError("ledger_dataset", "", name, message=f"dataset {name!r} is not in ledger "
                                 f"{self.path} (it has: {have}); add it with `dpcalc ledger init`")
        return self._dataset(rows[0])

    def add_dataset(self, name: str, *, budget_epsilon: float, delta: float,
                    adjacency: str = "add-remove", orders=None) -> Dataset:
        """Add a dataset with its budget (ε, δ) under ``adjacency``.

        Args:
            orders: the filter's Rényi orders Λ for this dataset (None: the default 21,
                :data:`dpcalc.ledger.filter.FILTER_ORDERS`). Fixed now, before any release, as the
                filter's validity requires (docs/design.md §11); fewer orders cost less (ln |Λ|).

        Raises:
            ParameterError: a bad name, ε, δ, adjacency or order set; the name already in the ledger.
        """
        name = check_name(name)
        stored = None if orders is None else records.dumps(list(flt.check_orders(orders)))
        eps = v.positive("budget_epsilon", budget_epsilon)
        if not math.isfinite(eps):
            raise ParameterError("budget_epsilon", "a finite number > 0", eps)
        delta = v.open_unit("delta", delta)
        adjacency = v.choice("adjacency", adjacency, ADJACENCIES)
        with transaction(self.con, self.path):
            if self.con.execute("SELECT 1 FROM datasets WHERE name = ?", (name,)).fetchone():
                raise ParameterError("ledger_dataset", "", name, message=f"dataset {name!r} is already in "
                                     f"ledger {self.path}; budgets are never changed")
            self.con.execute("INSERT INTO datasets (name, budget_epsilon, delta, adjacency, created, orders) "
                             "VALUES (?, ?, ?, ?, ?, ?)", (name, eps, delta, adjacency, _now(), stored))
            if not self.con.execute("SELECT 1 FROM meta WHERE key = 'created_by'").fetchone():
                self.con.execute("INSERT INTO meta VALUES ('created_by', ?)", (f"dpcalc {__version__}",))
        return self.dataset(name)

    # -- events -----------------------------------------------------------------------------

    def records(self, dataset: Dataset) -> list[Record]:
        """Every event recorded for ``dataset``, in order."""
        rows = self._read("SELECT * FROM events WHERE dataset_id = ? ORDER BY id", (dataset.id,))
        return [_event_row(r, dataset.name) for r in rows]

    def _dataset_by_id(self, dataset_id: int) -> Dataset:
        rows = self._read("SELECT * FROM datasets WHERE id = ?", (dataset_id,))
        if not rows:
            raise LedgerFileError(f"ledger {self.path}: an event of a dataset (#{dataset_id}) it does not have")
        return self._dataset(rows[0])

    def _coverage(self, dataset: Dataset) -> tuple[int, int]:
        """(number of events, last event id) of ``dataset`` (an index scan, no row is decoded)."""
        n, last = self._read("SELECT count(*), coalesce(max(id), 0) FROM events WHERE dataset_id = ?",
                             (dataset.id,))[0]
        return int(n), int(last)

    def recomputed_totals(self, dataset: Dataset) -> flt.RunningTotals:
        """The filter's totals recomputed from every recorded event (O(events))."""
        return flt.RunningTotals.of(dataset.delta, (flt.charge(r.accounted(), dataset.orders,
                                                                adjacency=dataset.adjacency)
                                                    for r in self.records(dataset)), dataset.orders)

    def stored_totals(self, dataset: Dataset) -> flt.RunningTotals | None:
        """The filter's running totals as stored (schema v4), or None when there are none, they are
        malformed, or they do not cover exactly the events recorded (then :meth:`totals` recomputes)."""
        try:
            row = self.con.execute("SELECT events, last_id, state FROM filter_state WHERE dataset_id = ?",
                                   (dataset.id,)).fetchone()
        except sqlite3.Error:  # no such table: an older schema read read-only
            return None
        if row is None or (row[0], row[1]) != self._coverage(dataset):
            return None
        try:
            totals = flt.RunningTotals.from_json(records.loads(row[2]), dataset.delta, dataset.orders)
        except (ValueError, TypeError, KeyError, AttributeError, ZeroDivisionError):
            return None
        return totals if totals.count == row[0] else None

    def totals(self, dataset: Dataset) -> flt.RunningTotals:
        """The filter's running totals for ``dataset``: stored ones (O(1) in the number of events)
        or, when missing or stale, :meth:`recomputed_totals`. Equal to a recomputation either way."""
        stored = self.stored_totals(dataset)
        return stored if stored is not None else self.recomputed_totals(dataset)

    def _store_totals(self, dataset: Dataset, totals: flt.RunningTotals) -> None:
        """Write ``totals`` as covering ``dataset``'s events now (inside a transaction)."""
        n, last = self._coverage(dataset)
        if totals.count != n:
            raise LedgerFileError(f"ledger {self.path}: filter totals of {totals.count} events for {n} recorded")
        self.con.execute("INSERT OR REPLACE INTO filter_state (dataset_id, events, last_id, state) "
                         "VALUES (?, ?, ?, ?)", (dataset.id, n, last, records.dumps(totals.to_json())))

    def epsilon_now(self, dataset: Dataset) -> tuple[float, float]:
        """(the filter's ε for ``dataset``'s history, ε left under its budget), from the running
        totals (O(1) in the number of events)."""
        t = self.totals(dataset)
        eps = t.epsilon() if t.count else 0.0
        return eps, max(0.0, dataset.budget_epsilon - eps)

    def record(self, event_id: int) -> Record:
        """The event ``event_id``.

        Raises:
            LedgerFileError: no such event.
        """
        rows = self._read("SELECT * FROM events WHERE id = ?", (event_id,))
        if not rows:
            raise LedgerFileError(f"ledger {self.path} has no event #{event_id}")
        return _event_row(rows[0], self._dataset_by_id(rows[0]["dataset_id"]).name)

    def spent(self, dataset: Dataset) -> Spent:
        """The filter's ε for ``dataset``'s history and the ε left under its budget."""
        recs = self.records(dataset)
        charges = [flt.charge(r.accounted(), dataset.orders, adjacency=dataset.adjacency) for r in recs]
        state = flt.FilterState(dataset.delta, charges, dataset.orders)
        eps = state.epsilon() if recs else 0.0
        return Spent(dataset, recs, eps, max(0.0, dataset.budget_epsilon - eps), charges)

    def reserve(self, dataset: str, *, mechanism: str, params: dict, event: Event,
                dp_event: Event | None = None, kind: str = "release", steps: int | None = None,
                command: list[str] | None = None) -> int:
        """Decide with the filter and record the event, in one ``BEGIN IMMEDIATE`` transaction.

        Args:
            dataset: the dataset's name.
            mechanism: the mechanism's name (``discrete-laplace``, ``dp-sgd``, ...).
            params: its parameters (JSON-ready; sensitivity, ε, σ, q, ...).
            event: what the filter accounts (for ``kind="train"``: one step).
            dp_event: what the non-adaptive accountants use instead (None: ``event``).
            kind: ``release`` (status ``reserved``) or ``train`` (status ``running``).
            steps: a training run's planned steps T (``kind="train"`` only).
            command: the command line (default ``sys.argv``).

        Returns:
            The event's id. Only after this returns may the caller draw noise.

        Raises:
            BudgetExceededError: the filter refuses (nothing recorded).
            InfeasibleError: the filter cannot account for ``event``.
            LedgerFileError: the file could not be written (nothing recorded).
        """
        ds = self.dataset(dataset)
        _check_sampling(event, ds)
        if kind == "train":
            steps = v.count("steps", steps, minimum=0)
            accounted = SelfComposedEvent(event, steps)
        elif kind == "release":
            if steps is not None:
                raise ParameterError("steps", "None for a release", steps)
            accounted = event
        else:
            raise ParameterError("kind", "release or train", kind)
        try:
            new = flt.charge(accounted, ds.orders, adjacency=ds.adjacency)
        except UnsupportedEventError as e:
            raise InfeasibleError(f"the ledger's filter cannot account for this mechanism: {e}") from None
        argv = list(sys.argv if command is None else command)
        records.check_plain(params, "params")
        records.check_plain(argv, "command")
        row = (mechanism, records.dumps(params), records.dumps(records.event_to_json(event)),
               None if dp_event is None else records.dumps(records.event_to_json(dp_event)))
        with transaction(self.con, self.path):
            ds = self.dataset(dataset)  # read again under the lock
            state = self.totals(ds)  # O(1): the running totals (recomputed once if missing)
            if not state.admits(new, ds.budget_epsilon):
                now = state.epsilon() if state.count else 0.0
                after = state.epsilon(new)
                left = max(0.0, ds.budget_epsilon - now)
                raise BudgetExceededError(
                    f"refused, nothing drawn or recorded: dataset {ds.name!r} has ε {_down(left)} left of "
                    f"its budget {ds.budget_epsilon:g} (δ = {ds.delta:g}, {flt.FILTER_NAME}); this "
                    f"{'run' if kind == 'train' else 'release'} would bring it to ε {_up(after)}")
            now = _now()
            cur = self.con.execute(
                "INSERT INTO events (dataset_id, kind, mechanism, params, event, dp_event, status, "
                "created, updated, command, version, steps_reserved, steps_taken) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (ds.id, kind, *row[:3], row[3], "running" if kind == "train" else "reserved", now, now,
                 records.dumps(argv), __version__, steps, 0 if kind == "train" else None))
            state.add(new)
            self._store_totals(ds, state)
            return int(cur.lastrowid)

    def set_status(self, event_id: int, status: str, *, steps_taken: int | None = None) -> None:
        """Mark a release ``released`` or a run's progress / end (``steps_taken``, ``finished``).

        Raises:
            ParameterError: an unknown status; more steps than reserved.
            LedgerFileError: the file could not be written.
        """
        if status not in STATUSES:
            raise ParameterError("status", f"one of {', '.join(STATUSES)}", status)
        with transaction(self.con, self.path):
            row = self.con.execute("SELECT * FROM events WHERE id = ?", (event_id,)).fetchone()
            if row is None:
                raise LedgerFileError(f"ledger {self.path} has no event #{event_id}")
            if steps_taken is not None:
                if row["steps_reserved"] is None or not 0 <= steps_taken <= row["steps_reserved"]:
                    raise ParameterError("steps", f"at most the {row['steps_reserved']} steps reserved",
                                         steps_taken)
                steps_taken = max(steps_taken, row["steps_taken"] or 0)  # never decreases
            if row["kind"] == "train":
                self._recount(row, status, steps_taken)
            self.con.execute("UPDATE events SET status = ?, updated = ?, "
                             "steps_taken = coalesce(?, steps_taken) WHERE id = ?",
                             (status, _now(), steps_taken, event_id))

    def _recount(self, row: sqlite3.Row, status: str, steps_taken: int | None) -> None:
        """Move a training run's charge in the running totals when its counted steps change
        (it finishes: counted at the steps taken instead of the steps reserved). Inside the
        transaction that updates the row, before the update."""
        before = row["steps_taken"] if row["status"] == "finished" else row["steps_reserved"]
        taken = row["steps_taken"] if steps_taken is None else steps_taken
        after = taken if status == "finished" else row["steps_reserved"]
        if after == before:
            return  # a step of a running run: all reserved steps stay counted
        ds = self._dataset_by_id(row["dataset_id"])
        rec = _event_row(row, ds.name)
        state = self.totals(ds)
        state.remove(flt.charge(rec.accounted(), ds.orders, adjacency=ds.adjacency))
        state.add(flt.charge(SelfComposedEvent(rec.event, after or 0), ds.orders, adjacency=ds.adjacency))
        self._store_totals(ds, state)

    def integrity_check(self) -> list[str]:
        """``PRAGMA integrity_check`` rows (``["ok"]`` for a sound file)."""
        return [r[0] for r in self._read("PRAGMA integrity_check")]

    # -- training -----------------------------------------------------------------------------

    def start_training(self, dataset: str, *, noise_multiplier: float, sample_rate: float,
                       steps: int, params: dict | None = None,
                       command: list[str] | None = None, step_event: Event | None = None) -> TrainingRun:
        """Reserve a DP-SGD run of ``steps`` steps (before its first step; :meth:`reserve`).

        Args:
            step_event: one step as the filter charges it on this dataset (:func:`training_step`,
                e.g. for ``--sampling truncated-poisson``); None: Poisson sampling at ``sample_rate``
                of a Gaussian with σ = ``noise_multiplier`` (refused on a replace dataset).

        Raises:
            BudgetExceededError: the filter refuses the T planned steps (nothing recorded).
            ParameterError: a sampler without a sound charge on the dataset's adjacency
                (:data:`SAMPLER_REASONS`).
        """
        step = step_event if step_event is not None else training_step(
            "poisson", self.dataset(dataset), noise_multiplier=noise_multiplier, sample_rate=sample_rate)
        p = {"noise_multiplier": float(noise_multiplier), "sample_rate": float(sample_rate),
             "steps": int(steps), **(params or {})}
        eid = self.reserve(dataset, mechanism="dp-sgd", params=p, event=step, kind="train",
                           steps=steps, command=command)
        return TrainingRun(self, eid, int(steps))


def set_status_retrying(ledger: Ledger, event_id: int, status: str, *, seconds: float) -> bool:
    """:meth:`Ledger.set_status` for a release whose value is already out: a locked ledger is
    retried (with a growing pause) for up to ``seconds`` s, whatever ``DPCALC_LEDGER_TIMEOUT`` says.

    Returns:
        True if the status was written; False if the ledger stayed locked or could not be written
        (the event keeps its ``reserved`` status, which the filter counts exactly as ``released``:
        nothing is under-counted).

    Raises:
        ParameterError: an unknown status or event (a programming error, not a busy ledger).
    """
    import time

    end = time.monotonic() + max(0.0, seconds)
    pause = 0.005
    while True:
        try:
            ledger.set_status(event_id, status)
            return True
        except LedgerFileError as e:
            if "locked" not in e.message or time.monotonic() >= end:
                return False
        time.sleep(min(pause, max(0.0, end - time.monotonic())))
        pause = min(2 * pause, 0.2)


def _down(x: float) -> str:
    return f"{math.floor(x * 1e6) / 1e6:.6g}"


def _up(x: float) -> str:
    return "inf" if math.isinf(x) else f"{math.ceil(x * 1e6) / 1e6:.6g}"


class TrainingRun:
    """A reserved DP-SGD run: record its steps as the trainer takes them.

    Call :meth:`step` with the trainer's step count (the privacy ledger's ``steps``, counted
    before each step's gradient) and :meth:`finish` at the end. A run that never finishes
    stays counted at its reserved steps.
    """

    def __init__(self, ledger: Ledger, event_id: int, reserved: int) -> None:
        self.ledger, self.event_id, self.reserved = ledger, event_id, reserved

    def step(self, steps: int) -> None:
        """Record that ``steps`` steps have been (or are being) taken.

        Raises:
            ParameterError: more steps than reserved (the trainer must stop: never happens
                for a run whose plan is the reservation).
        """
        self.ledger.set_status(self.event_id, "running", steps_taken=steps)

    def finish(self, steps: int) -> None:
        """The run ended normally after ``steps`` steps: from now on those are counted."""
        self.ledger.set_status(self.event_id, "finished", steps_taken=steps)


def open_ledger(path: str | os.PathLike, *, create: bool = False) -> Ledger:
    """:class:`Ledger` (``path``, ``create``)."""
    return Ledger(path, create=create)


def composed(recs: list[Record], *, for_filter: bool = False) -> Event:
    """The recorded history as one :class:`~dpcalc.events.ComposedEvent` (for the non-adaptive
    accountants). Identical events are grouped into one ``SelfComposedEvent(event, k)`` in the
    order of their first occurrence: the same mechanism (non-adaptive composition does not depend
    on the order), which the accountants compose in O(distinct events) rather than O(events)."""
    counts: dict[Event, int] = {}
    for r in recs:
        e = r.accounted(for_filter=for_filter)
        counts[e] = counts.get(e, 0) + 1  # events are frozen dataclasses: hashable values
    parts = [e if k == 1 else SelfComposedEvent(e, k) for e, k in counts.items()]
    return ComposedEvent(tuple(parts))
