"""DP-SGD questions answered by every requested accountant side by side.

These are the library functions behind ``dpcalc epsilon``, ``dpcalc delta`` and
``dpcalc sigma``: the CLI parses options into a :class:`dpcalc.schedule.Schedule`,
calls one of these, and renders the rows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from dpcalc import _validate as v
from dpcalc.accounting.base import isolated
from dpcalc.accounting.calibrate import calibrate_dpsgd
from dpcalc.accounting.mixture_steps import convert_group_delta, convert_group_epsilon
from dpcalc.accounting.registry import available, default_accountant, get_accountant
from dpcalc.errors import InfeasibleError
from dpcalc.results import AccountingResult
from dpcalc.schedule import Schedule

__all__ = ["resolve_accountants", "epsilon_by_accountant", "delta_by_accountant", "convert_group_comparison",
           "noise_multiplier_by_accountant"]


def resolve_accountants(choice: str | None, *, default_all: bool) -> list[str]:
    """Accountant names for ``--accountant`` (a name, ``"all"``, or None for the default).

    With ``default_all`` the default is every registered accountant (epsilon/delta
    tables); otherwise the tightest certified one (sigma).

    Raises:
        ParameterError: unknown name.
    """
    names = available()
    if choice is None:
        return list(names) if default_all else [default_accountant()]
    if choice == "all":
        return list(names)
    return [v.choice("accountant", choice, (*names, "all"))]


def _each(names: Sequence[str], neighboring: str, run,
          options: Mapping[str, Mapping[str, Any]] | None = None) -> list[AccountingResult]:
    rows = []
    for name in names:
        acc = get_accountant(name, neighboring=neighboring, **dict((options or {}).get(name, {})))
        rows.append(isolated(acc, run))
    return rows


def epsilon_by_accountant(
    *, noise_multiplier: float, schedule: Schedule, delta: float,
    accountants: Sequence[str], neighboring: str = "add-remove",
    options: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[AccountingResult]:
    """ε spent by a DP-SGD run (σ, q, T) at ``delta``, one row per accountant.

    Args:
        noise_multiplier: σ (noise std / clipping norm), > 0.
        schedule: sampler, sample rate q and steps T (see :func:`dpcalc.schedule.resolve_schedule`);
            an accountant without an analysis of the sampler gives a not-applicable row with the reason.
        delta: δ in (0, 1).
        accountants: registry names.
        neighboring: ``add-remove`` or ``replace``.
        options: per-accountant constructor options, e.g. ``{"pld": {"accuracy": 1e-3}}``.

    Returns:
        One :class:`AccountingResult` per accountant (``applicable=False`` with the
        reason where an accountant does not support the history).

    Raises:
        ParameterError: a parameter out of range.
    """
    delta = v.open_unit("delta", delta)
    event = schedule.event(noise_multiplier)
    return _each(accountants, neighboring, lambda acc: acc.epsilon(event, delta=delta), options)


def delta_by_accountant(
    *, noise_multiplier: float, schedule: Schedule, epsilon: float,
    accountants: Sequence[str], neighboring: str = "add-remove",
    options: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[AccountingResult]:
    """δ of a DP-SGD run (σ, q, T) at ``epsilon`` (≥ 0), one row per accountant.

    Same arguments and errors as :func:`epsilon_by_accountant`, with ε for δ.
    """
    epsilon = v.nonnegative("epsilon", epsilon)
    event = schedule.event(noise_multiplier)
    return _each(accountants, neighboring, lambda acc: acc.delta(event, epsilon=epsilon), options)


def noise_multiplier_by_accountant(
    *, target_epsilon: float, delta: float, schedule: Schedule, accountants: Sequence[str],
    neighboring: str = "add-remove", max_grad_norm: float | None = None,
    options: Mapping[str, Mapping[str, Any]] | None = None, fallback: bool = False,
) -> list[AccountingResult]:
    """The noise multiplier σ a DP-SGD run needs for (ε, δ), per accountant.

    Args:
        target_epsilon: ε target, > 0.
        delta: δ in (0, 1).
        schedule: q and T (T ≥ 1).
        accountants: registry names.
        neighboring: ``add-remove`` or ``replace``.
        max_grad_norm: optional clipping norm C; then ``noise_std`` = σ·C (the std of the
            noise added to the summed clipped gradients).
        options: per-accountant constructor options, e.g. ``{"pld": {"accuracy": 1e-3}}``.
        fallback: with a single accountant that cannot reach the target (e.g. ``pld`` below
            its numerical δ floor, ~1e-13), calibrate with the next certified accountant
            instead and say so in ``details["note"]`` (used when the user chose none).

    Returns:
        One row per accountant with ``noise_multiplier`` and the ``epsilon`` achieved
        at it (≤ target). With one accountant an infeasible target raises; with several,
        its row is marked not applicable with the reason.

    Raises:
        ParameterError: a parameter out of range.
        InfeasibleError: the (single) accountant cannot reach the target.
    """
    target_epsilon = v.positive("epsilon", target_epsilon)
    delta = v.open_unit("delta", delta)
    steps = v.count("steps", schedule.steps, minimum=1)
    c = None if max_grad_norm is None else v.positive("max_grad_norm", max_grad_norm)

    def run(acc):
        try:
            res = calibrate_dpsgd(acc, target_epsilon=target_epsilon, delta=delta,
                                  sample_rate=schedule.sample_rate, steps=steps,
                                  sampler=schedule.sampler_args())
        except InfeasibleError as e:
            if len(accountants) == 1 and fallback:
                res = _fall_back(acc, e)
            elif len(accountants) == 1:
                raise
            else:
                return acc.not_applicable(str(e))
        if c is not None:
            res = dataclasses.replace(res, noise_std=res.noise_multiplier * c)
        return res

    def _fall_back(acc, error: InfeasibleError) -> AccountingResult:
        for name in available():
            other = get_accountant(name, neighboring=neighboring, **dict((options or {}).get(name, {})))
            if name == acc.name or not other.certified or not other.supports(event_at_one):
                continue
            try:
                res = calibrate_dpsgd(other, target_epsilon=target_epsilon, delta=delta,
                                      sample_rate=schedule.sample_rate, steps=steps,
                                      sampler=schedule.sampler_args())
            except InfeasibleError:
                continue
            details = dict(res.details)
            details["note"] = f"{acc.name} cannot reach the target ({error}); calibrated with {name}"
            return dataclasses.replace(res, details=details)
        raise error

    event_at_one = schedule.event(1.0, steps)
    return _each(accountants, neighboring, run, options)


def convert_group_comparison(*, noise_multiplier: float, schedule: Schedule, neighboring: str = "add-remove",
                             delta: float | None = None, epsilon: float | None = None,
                             options: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """What ``dpcalc convert group`` would certify for the schedule's group from the record-level
    run: ε at ``delta`` (:func:`dpcalc.accounting.mixture_steps.convert_group_epsilon`) or δ at
    ``epsilon`` (:func:`~dpcalc.accounting.mixture_steps.convert_group_delta`), with the default (tightest
    certified) accountant — the number the mixture-of-Gaussians analysis improves on.

    Args:
        noise_multiplier: σ > 0.
        schedule: a schedule with ``group_size`` k ≥ 2.
        neighboring: adjacency of the record-level run.
        delta, epsilon: exactly one of them.
        options: per-accountant constructor options.

    Returns:
        ``{"group_size", "accountant", "convert_group_epsilon" | "convert_group_delta", "source"}``.
    """
    name = default_accountant()
    acc = get_accountant(name, neighboring=neighboring, **dict((options or {}).get(name, {})))
    record = dataclasses.replace(schedule, group_size=1).event(noise_multiplier)
    out: dict[str, Any] = {"group_size": schedule.group_size, "accountant": name,
                           "source": "Vadhan 2017 Lemma 2.2 on the record-level guarantee"}
    if delta is not None:
        out["convert_group_epsilon"] = convert_group_epsilon(acc, record, group_size=schedule.group_size, delta=delta)
    else:
        out["convert_group_delta"] = convert_group_delta(acc, record, group_size=schedule.group_size,
                                                         epsilon=float(epsilon))
    return out
