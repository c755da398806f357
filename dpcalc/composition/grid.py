r"""``--steps-grid``: every row of ``dpcalc compose`` at many numbers of compositions.

The grid is a list of count vectors (:func:`steps_grid_counts`). The generic theorems are
evaluated at all of them in one vectorised pass (:func:`theorem_grid`); each accountant
answers through its own :meth:`~dpcalc.accounting.base.Accountant.epsilon_grid` /
``delta_grid`` (vectorised where its curves add up over compositions, point by point at a
few points otherwise). The last grid point is the input itself and carries the row's own
value.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from dpcalc import _validate as v
from dpcalc._numerics import round_up
from dpcalc.composition.generic import THEOREMS, GenericView
from dpcalc.events import Event
from dpcalc.results import MethodResult

__all__ = ["MAX_GRID_POINTS", "steps_grid_counts", "theorem_grid", "add_grid"]

#: the most points a steps grid may have (memory and time grow linearly with it)
MAX_GRID_POINTS = 1000
#: optimal composition with several distinct ε_i is evaluated at no more than this many grid points
OPT_GRID_CAP = 16
#: per-step δ₀ candidates of Gaussian items on the grid
_CANDIDATES = 64


def steps_grid_counts(counts: Sequence[int], points: int) -> list[list[int]]:
    """Count vectors for ``points`` numbers of compositions, log-spaced up to ``counts``.

    One item: k = 1 … K. Several items: every count scaled by the same factor (at least 1
    each). Duplicates are removed; the last vector is ``counts`` itself.

    Args:
        counts: the counts of the items, length n, each ≥ 1.
        points: 2 … :data:`MAX_GRID_POINTS` (callers cap it).

    Raises:
        ParameterError: ``points`` not in [2, MAX_GRID_POINTS].
    """
    points = v.count("steps_grid", points, minimum=2)
    if points > MAX_GRID_POINTS:
        from dpcalc.errors import ParameterError

        raise ParameterError("steps_grid", f"a whole number in [2, {MAX_GRID_POINTS}]", points)
    base = np.array([int(c) for c in counts], dtype=float)
    fractions = np.geomspace(1.0 / base.max(), 1.0, points)
    vecs = np.maximum(1, np.round(fractions[:, None] * base[None, :])).astype(np.int64)
    vecs[-1] = np.array([int(c) for c in counts], dtype=np.int64)  # the last vector is the input itself
    keep = np.concatenate([[True], np.any(vecs[1:] != vecs[:-1], axis=1)])
    return vecs[keep].tolist()


def theorem_grid(view: GenericView, grid, *, delta, epsilon, rtol, methods) -> dict:
    """The generic theorems at every count vector of ``grid`` in one vectorised pass.

    Gaussian items: a common set of 64 per-step δ₀ candidates (log-spaced over
    :meth:`GenericView.delta0_range` of the smallest and largest grid points) is converted
    once; each theorem takes the best candidate per grid point (each candidate is a valid
    bound, so the minimum is certified). ``optimal`` uses the candidate best for ``kov``.

    Returns:
        ``{method: (indices, values)}`` for the wanted ``methods``.
    """
    from dpcalc.composition import advanced

    eps_mode = delta is not None
    cnt = np.array(grid, dtype=float)  # (m, n)
    if view.has_gaussian:
        qv = np.array([k_q for k_q in _gauss_rates(view)])
        weight = cnt @ qv
        lo = math.log(delta / weight.max()) - math.log(1e16) if eps_mode else math.log(1e-30)
        top = (math.log(delta / weight.min()) + math.log1p(-1e-6) if eps_mode
               else math.log(0.5 / max(weight.min(), 1.0)))
        top = min(top, math.log(1.0 - 2.0**-20))
        cands = np.exp(np.linspace(min(lo, top - 1.0), top, _CANDIDATES))
        pairs = [view.triples(float(c)) for c in cands]
        E = np.array([p[0] for p in pairs])  # (C, n)
        D = np.array([p[1] for p in pairs])
    else:
        e1, d1 = view.triples()
        E, D = e1[None, :], d1[None, :]
    cnt3 = cnt[:, None, :]
    out: dict = {}
    n = cnt.shape[1]
    # a sum of n products, each within u: rounded up by 2(n + 1) u
    e_basic = round_up(np.sum(cnt3 * E[None], axis=-1), 2 * (n + 1))  # (m, C)
    d_basic = round_up(np.sum(cnt3 * D[None], axis=-1), 2 * (n + 1))
    all_idx = list(range(cnt.shape[0]))
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        if eps_mode:
            basic_v = np.where(d_basic <= delta, e_basic, np.inf)
            kov_v = advanced.kov_epsilon(E[None], D[None], cnt3, delta=delta)
        else:
            basic_v = np.where(epsilon >= e_basic, np.minimum(d_basic, 1.0), 1.0)
            kov_v = advanced.kov_delta(E[None], D[None], cnt3, epsilon=epsilon)
        if "basic" in methods:
            out["basic"] = (all_idx, basic_v.min(axis=1).tolist())
        if "kov" in methods:
            out["kov"] = (all_idx, kov_v.min(axis=1).tolist())
        if "advanced" in methods:
            k = cnt.sum(axis=1)[:, None]
            if eps_mode:
                drv = advanced.drv_epsilon(epsilon=E[None, :, 0], delta=D[None, :, 0], count=k, target_delta=delta)
            else:
                drv = advanced.drv_delta(epsilon=E[None, :, 0], delta=D[None, :, 0], count=k, target_epsilon=epsilon)
            out["advanced"] = (all_idx, np.minimum(drv, basic_v).min(axis=1).tolist())
    if "optimal" in methods:
        out["optimal"] = _optimal_grid(E, D, cnt, np.argmin(kov_v, axis=1), delta=delta, epsilon=epsilon, rtol=rtol)
    if "br" in methods:
        out["br"] = _br_grid(view, grid, delta=delta, epsilon=epsilon)
    return out


def _br_grid(view: GenericView, grid, *, delta, epsilon) -> tuple[list[int], list[float]]:
    """The ``br`` row (one exponential-mechanism item) at up to 12 grid points, spread evenly
    (each an exact O(k²) evaluation, :mod:`dpcalc.composition.bounded_range`)."""
    from dpcalc.accounting.base import spread_indices
    from dpcalc.composition.generic import br_value

    eps = view.steps[0].epsilon
    idx = spread_indices(len(grid), 12)
    vals = [br_value(eps, int(sum(grid[i])), delta=delta, eps_target=epsilon) for i in idx]
    return idx, vals


def _gauss_rates(view: GenericView):
    from dpcalc.events import PoissonSampledEvent

    for s, (_, _, fixed) in zip(view.steps, view._inner, strict=True):
        if fixed is not None:
            yield 0.0
        else:
            yield s.sample_rate if isinstance(s, PoissonSampledEvent) else 1.0


def _optimal_grid(E, D, cnt, best, *, delta, epsilon, rtol):
    """``optimal`` at every grid point: one vectorised pass when every point is homogeneous
    (one distinct ε, KOV Thm 3.3: :func:`optimal.homogeneous_epsilon_many`), otherwise the
    scalar method at up to :data:`OPT_GRID_CAP` points. Returns (indices, values)."""
    from dpcalc.composition import optimal
    from dpcalc.composition.slack import slack_delta, total_delta

    eps_mode = delta is not None
    Ep, Dp = E[best], D[best]  # (m, n): per point, the per-item (ε_i, δ_i) of its best δ₀
    homogeneous = np.all(Ep == Ep[:, :1], axis=1)
    idx_all = np.arange(cnt.shape[0])
    out = np.full(cnt.shape[0], np.nan)
    if homogeneous.any():
        h = idx_all[homogeneous]
        k = cnt[h].sum(axis=1)
        if eps_mode:
            dt = slack_delta(delta=delta, deltas=Dp[h], counts=cnt[h])
            out[h] = optimal.homogeneous_epsilon_many(epsilons=Ep[h, 0], counts=k, delta_tildes=dt)
        else:
            dtl = optimal.homogeneous_delta_tilde_many(epsilons=Ep[h, 0], counts=k, epsilon=epsilon)
            out[h] = total_delta(delta_tilde=dtl, deltas=Dp[h], counts=cnt[h])
    rest = idx_all[~homogeneous]
    if rest.size > OPT_GRID_CAP:
        keep = np.unique(np.round(np.linspace(0, rest.size - 1, OPT_GRID_CAP)).astype(int))
        rest = rest[keep]
    for p in rest:
        c = cnt[p].astype(np.int64)
        if eps_mode:
            out[p] = optimal.optimal_epsilon(Ep[p], Dp[p], c, delta=delta, rtol=rtol).value
        else:
            out[p] = optimal.optimal_delta(Ep[p], Dp[p], c, epsilon=epsilon, rtol=rtol).value
    idx = [int(i) for i in idx_all if not np.isnan(out[i])]
    return idx, [float(out[i]) for i in idx]


def _accountant_grid(acc, steps, counts: np.ndarray, *, delta, epsilon):
    """(indices, values, note) of one accountant over the grid.

    An accountant that keeps the point-by-point default of
    :meth:`~dpcalc.accounting.base.Accountant.epsilon_grid` (it does not declare
    :attr:`~dpcalc.accounting.base.Accountant.vectorised_grid`) is asked only for up to
    ``grid_evaluations − 1`` points spread over the grid (the last point is the row's own
    value, never evaluated twice); a vectorised one gets the whole grid.
    """
    from dpcalc.accounting.base import spread_indices

    eps_mode = delta is not None
    m = counts.shape[0]
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        if not acc.vectorised_grid and m > 1:
            pick = spread_indices(m, max(acc.grid_evaluations, 2))[:-1]
            sub = counts[pick]
            res = acc.epsilon_grid(steps, sub, delta=delta) if eps_mode else acc.delta_grid(steps, sub, epsilon=epsilon)
            idx = [pick[i] for i in res.indices] + [m - 1]
            values = list(res.values) + [math.nan]  # replaced by the row's value
            note = (f"evaluated at {len(idx)} of the {m} grid points (one full {acc.name} evaluation each); "
                    "the plot joins them") if len(idx) < m else None
            return idx, values, note
        res = acc.epsilon_grid(steps, counts, delta=delta) if eps_mode else acc.delta_grid(steps, counts, epsilon=epsilon)
    return list(res.indices), list(res.values), res.note


def add_grid(rows: list[MethodResult], steps: Sequence[Event], grid: list[list[int]], *,
             delta, epsilon, rtol, accountants: dict) -> list[MethodResult]:
    """New rows with ``details["grid"]``: every applicable row at each count vector of ``grid``.

    Args:
        rows: the rows of :func:`dpcalc.composition.compose.compose`.
        steps: the one-run events of the sequence, length n.
        grid: count vectors (:func:`steps_grid_counts`), shape (m, n).
        delta, epsilon: the target (one of them is None).
        rtol: relative accuracy of the numeric optimal composition.
        accountants: registry name → accountant instance, for the accountant rows.

    Returns:
        The rows, those with a grid replaced (:func:`dataclasses.replace`). A row whose grid
        evaluation fails keeps its value and says so in ``details["grid_error"]``.
    """
    key = "epsilon" if delta is not None else "delta"
    totals = [int(sum(c)) for c in grid]
    live = [r for r in rows if r.applicable]
    wanted = {r.method for r in live if r.method in THEOREMS}
    gvals: dict = {}
    if wanted:
        try:
            counts = [c for c in grid[-1]]
            gvals = theorem_grid(GenericView(steps, counts), grid, delta=delta, epsilon=epsilon, rtol=rtol,
                                 methods=wanted)
        except (ArithmeticError, ValueError, MemoryError) as e:
            gvals = {m: e for m in wanted}
    out = []
    counts_arr = np.array(grid, dtype=np.int64)
    for r in rows:
        if not r.applicable:
            out.append(r)
            continue
        note = None
        try:
            if r.method in gvals:
                got = gvals[r.method]
                if isinstance(got, Exception):
                    raise got
                idx, values = got
                if len(idx) < len(grid) and r.method == "br":
                    note = (f"evaluated at {len(idx)} of the {len(grid)} grid points (one exact "
                            "bounded-range composition each)")
                elif len(idx) < len(grid):
                    note = (f"evaluated at {len(idx)} of the {len(grid)} grid points (several distinct ε_i: "
                            "one exact/numeric composition each)")
            else:
                idx, values, note = _accountant_grid(accountants[r.method], steps, counts_arr,
                                                     delta=delta, epsilon=epsilon)
        except Exception as e:  # noqa: BLE001 - one grid failing never loses the command
            details = dict(r.details)
            details["grid_error"] = f"the steps grid could not be evaluated: {type(e).__name__}: {e}"
            out.append(dataclasses.replace(r, details=details))
            continue
        values = list(values)
        row_value = r.epsilon if key == "epsilon" else r.delta
        if idx and idx[-1] == len(grid) - 1:
            values[-1] = row_value  # the last point is the input itself: the row's own (refined) value
        grid_d = {"steps": [totals[i] for i in idx],
                  key: [None if (x is None or not math.isfinite(x)) else float(x) for x in values]}
        if note:
            grid_d["note"] = note
        details = dict(r.details)
        details["grid"] = grid_d
        out.append(dataclasses.replace(r, details=details))
    return out
