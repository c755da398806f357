"""The series the ``--plot`` pictures of ``epsilon``, ``sigma`` and ``tune`` draw.

Each function answers the command's own question at several points — ε after fewer steps, σ for
other targets, ε of the search for other numbers of runs — with the same library calls the
command makes for its table (:mod:`dpcalc.accounting.dpsgd`, the accountant's ``epsilon``, the one
calibration helper), so a point of a picture is the number the command prints for that setting:
the last point of :func:`epsilon_by_epochs` is ``dpcalc epsilon``'s row, the point at factor 1 of
:func:`sigma_by_target` is ``dpcalc sigma``'s. The plotting code (``dpcalc.cli``) draws these and
computes nothing.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

from dpcalc import _validate as v
from dpcalc.accounting.base import Accountant
from dpcalc.accounting.dpsgd import epsilon_by_accountant, noise_multiplier_by_accountant
from dpcalc.errors import InfeasibleError
from dpcalc.events import Event, SelfComposedEvent, TuningEvent
from dpcalc.results import AccountingResult
from dpcalc.schedule import Schedule

__all__ = ["Curve", "Series", "epsilon_by_epochs", "sigma_by_target", "SIGMA_FACTORS",
           "tuning_epsilon_by_runs", "TUNING_LAWS"]

#: the targets of :func:`sigma_by_target`: the requested ε times these factors (2^(k/3), k = −3 … 3)
SIGMA_FACTORS = tuple(2.0 ** (k / 3) for k in range(-3, 4))
#: the laws of K drawn by :func:`tuning_epsilon_by_runs` (negative-binomial only with a shape η)
TUNING_LAWS = ("poisson", "geometric", "logarithmic")


@dataclasses.dataclass(frozen=True)
class Curve:
    """One line of a picture.

    Attributes:
        name: the accountant (or the law of K, or the comparison) the line is of.
        values: the y value at each x of the :class:`Series`; None where there is none (not
            applicable, unbounded, or a target that cannot be met).
        lower: a proven lower bound at each x (pld's certified bracket), or None.
        certified: True iff ``values`` are proven upper bounds.
        reason: why values are missing, if they all are.
    """

    name: str
    values: tuple[float | None, ...]
    lower: tuple[float | None, ...] | None = None
    certified: bool = True
    reason: str | None = None

    @property
    def drawn(self) -> bool:
        """True iff at least one value exists."""
        return any(y is not None for y in self.values)


@dataclasses.dataclass(frozen=True)
class Series:
    """The x values of a picture and its lines (one :class:`Curve` each).

    Attributes:
        x: the x values (epochs, target ε, mean number of runs), increasing.
        curves: the lines, in the order they are drawn.
        details: what else the picture states (e.g. ``steps`` under the epochs of
            :func:`epsilon_by_epochs`).
    """

    x: tuple[float, ...]
    curves: tuple[Curve, ...]
    details: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def curve(self, name: str) -> Curve:
        """The line named ``name`` (KeyError if none)."""
        for c in self.curves:
            if c.name == name:
                return c
        raise KeyError(name)


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def _curves(rows_by_x: Sequence[Sequence[AccountingResult]], key: str, lower_key: str | None) -> tuple[Curve, ...]:
    """Per-accountant curves from one list of rows per x (rows in the same accountant order)."""
    curves = []
    for j, first in enumerate(rows_by_x[0]):
        rows = [rows[j] for rows in rows_by_x]
        values = tuple(_finite(getattr(r, key)) if r.applicable else None for r in rows)
        lower = None
        if lower_key is not None:
            lows = tuple(_finite(r.details.get(lower_key)) if r.applicable and r.details else None for r in rows)
            lower = lows if any(x is not None for x in lows) else None
        reason = next((r.reason for r in rows if not r.applicable and r.reason), None)
        curves.append(Curve(first.accountant, values, lower, all(r.certified for r in rows if r.applicable), reason))
    return tuple(curves)


def epoch_steps(schedule: Schedule, points: int = 12) -> list[int]:
    """The step counts of :func:`epsilon_by_epochs`: ``points`` evenly spaced up to T, T last
    (every step count when T ≤ ``points``)."""
    total = v.count("steps", schedule.steps, minimum=1)
    points = v.count("points", points, minimum=2)
    return sorted({max(1, math.ceil(total * k / points)) for k in range(1, points + 1)})


def steps_to_epochs(schedule: Schedule, steps: int) -> float:
    """Passes over the data after ``steps`` steps: T / ⌈N/B⌉ for shuffle and balls-in-bins (one
    batch of each record per epoch), T·q for the other samplers (q = 1 without sampling)."""
    if schedule.sampling in ("shuffle", "balls-in-bins") and schedule.batch_size and schedule.dataset_size:
        return steps / -(-schedule.dataset_size // schedule.batch_size)
    return steps * schedule.sample_rate


def epsilon_by_epochs(
    *, noise_multiplier: float, schedule: Schedule, delta: float, accountants: Sequence[str],
    neighboring: str = "add-remove", options: Mapping[str, Mapping[str, Any]] | None = None, points: int = 12,
) -> Series:
    """ε at δ after 1/``points``, 2/``points``, …, all of the run's steps, per accountant.

    Each point is :func:`dpcalc.accounting.dpsgd.epsilon_by_accountant` of the schedule cut at
    that many steps (the last point is the whole run: ``dpcalc epsilon``'s rows).

    Args:
        noise_multiplier: σ (noise std / clipping norm), > 0.
        schedule: the run (sampler, q, T ≥ 1).
        delta: δ in (0, 1).
        accountants: registry names.
        neighboring: ``add-remove`` or ``replace``.
        options: per-accountant constructor options.
        points: number of step counts (≥ 2; fewer when T is smaller).

    Returns:
        A :class:`Series`: ``x`` the epochs (passes over the data, :func:`steps_to_epochs`),
        ``details["steps"]`` the step counts; one curve per accountant (``values`` the ε upper
        bound, ``lower`` the certified bracket's lower end where the accountant gives one).

    Raises:
        ParameterError: a parameter out of range.
    """
    steps = epoch_steps(schedule, points)
    rows = [epsilon_by_accountant(noise_multiplier=noise_multiplier, schedule=dataclasses.replace(schedule, steps=t),
                                  delta=delta, accountants=accountants, neighboring=neighboring, options=options)
            for t in steps]
    return Series(tuple(steps_to_epochs(schedule, t) for t in steps), _curves(rows, "epsilon", "epsilon_lower"),
                  {"steps": tuple(steps), "delta": delta, "noise_multiplier": noise_multiplier})


def sigma_by_target(
    *, target_epsilon: float, delta: float, schedule: Schedule, accountants: Sequence[str],
    neighboring: str = "add-remove", options: Mapping[str, Mapping[str, Any]] | None = None,
    fallback: bool = False, factors: Sequence[float] = SIGMA_FACTORS,
) -> Series:
    """The noise multiplier σ for target ε values around ``target_epsilon``, per accountant.

    Each point is :func:`dpcalc.accounting.dpsgd.noise_multiplier_by_accountant` at ε =
    ``target_epsilon`` × factor (at factor 1: ``dpcalc sigma``'s rows); a target an accountant
    cannot meet is a missing value (None), not an error.

    Args:
        target_epsilon: the requested ε, > 0.
        delta: δ in (0, 1).
        schedule: the run (q, T ≥ 1).
        accountants: registry names.
        neighboring, options, fallback: as :func:`~dpcalc.accounting.dpsgd.noise_multiplier_by_accountant`.
        factors: the multiples of ``target_epsilon`` (> 0; default :data:`SIGMA_FACTORS`, ½ to 2).

    Returns:
        A :class:`Series`: ``x`` the targets (increasing), one curve per accountant with σ
        (rounded up, verified: the σ ``dpcalc sigma`` prints for that target).

    Raises:
        ParameterError: a parameter out of range.
    """
    target = v.positive("epsilon", target_epsilon)
    targets = sorted({target * v.positive("factors", f) for f in factors})
    rows = []
    for eps in targets:
        try:
            rows.append(noise_multiplier_by_accountant(
                target_epsilon=eps, delta=delta, schedule=schedule, accountants=accountants,
                neighboring=neighboring, options=options, fallback=fallback))
        except InfeasibleError as e:  # one accountant, this target unreachable: a gap in its line
            rows.append([AccountingResult(accountants[0], None, delta, True, applicable=False, reason=str(e))])
    return Series(tuple(targets), _curves(rows, "noise_multiplier", None),
                  {"delta": delta, "target_epsilon": target})


def mean_runs_grid(mean_runs: float, points: int = 9) -> list[float]:
    """E[K] values of :func:`tuning_epsilon_by_runs`: ``points`` geometrically spaced from 1 to
    max(10, 4·``mean_runs``) (3 significant digits) and ``mean_runs`` itself."""
    mean = v.positive("mean_runs", mean_runs)
    top = max(10.0, 4.0 * mean)
    grid = {float(f"{top ** (i / (points - 1)):.3g}") for i in range(points)}
    return sorted(grid | {mean})


def tuning_epsilon_by_runs(
    run: Event, *, accountant: Accountant, delta: float, mean_runs: Sequence[float],
    laws: Sequence[tuple[str, float | None]] = tuple((law, None) for law in TUNING_LAWS),
    pure_epsilon_of_runs: Any = None,
) -> Series:
    """ε at δ of a hyperparameter search (best of K runs, K random) against E[K], per law of K,
    beside E[K] runs all composed (K = ⌈E[K]⌉).

    Args:
        run: one run's history.
        accountant: an accountant that accounts for a repeat-and-select (``supports`` a
            :class:`~dpcalc.events.TuningEvent`; ``dpcalc tune`` picks the tightest registered).
        delta: δ in (0, 1).
        mean_runs: the E[K] values (> 0); a law that needs E[K] ≥ 1 has no value below it.
        laws: (law, η) pairs (η only for ``negative-binomial``).
        pure_epsilon_of_runs: optional ``f(event) -> float | None``, a pure-ε bound of composed
            runs (``dpcalc tune``'s basic-composition comparison); the composed line takes the
            smaller of it and the accountant's ε, as the tune table does.

    Returns:
        A :class:`Series`: ``x`` = ``mean_runs`` sorted, one curve per law (named ``law`` or
        ``negative-binomial (η=…)``) and one named ``composed`` (K = ⌈E[K]⌉ runs composed).

    Raises:
        ParameterError: δ out of range, a mean ≤ 0.
    """
    delta = v.open_unit("delta", delta)
    xs = sorted({v.positive("mean_runs", m) for m in mean_runs})
    curves = []
    for law, eta in laws:
        values: list[float | None] = []
        reason = None
        for m in xs:
            try:
                res = accountant.epsilon(TuningEvent(run, law, m, eta), delta=delta)
            except ValueError as e:  # a mean the law does not take (ParameterError is a ValueError)
                values.append(None)
                reason = str(e)
                continue
            values.append(_finite(res.epsilon) if res.applicable else None)
        name = law if eta is None else f"{law} (η={eta:g})"
        curves.append(Curve(name, tuple(values), None, accountant.certified, reason))
    composed: list[float | None] = []
    for m in xs:
        event = SelfComposedEvent(run, max(1, math.ceil(m)))
        eps = _finite(accountant.epsilon(event, delta=delta).epsilon)
        pure = pure_epsilon_of_runs(event) if pure_epsilon_of_runs is not None else None
        if pure is not None and (eps is None or pure < eps):
            eps = pure
        composed.append(eps)
    curves.append(Curve("composed", tuple(composed), None, accountant.certified))
    return Series(tuple(xs), tuple(curves), {"delta": delta, "accountant": accountant.name})
