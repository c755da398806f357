r"""σ for many DP-SGD cells (sample rate q, steps T) of :func:`dpcalc.planning.plan.plan_grid`,
in up to :data:`MAX_WORKERS` forked worker processes.

Which search each accountant gets is read off its declared capabilities
(:mod:`dpcalc.accounting.base`): one calibrated through a stand-in
(:attr:`~dpcalc.accounting.base.Accountant.calibrates_by_stand_in`, pld) is warm-started along
rows of the grid (:mod:`dpcalc.planning._warm`); one with a vectorised
:meth:`~dpcalc.accounting.base.Accountant.epsilon_dpsgd_many`
(:attr:`~dpcalc.accounting.base.Accountant.vectorised_dpsgd`, rdp) searches its cells in step
(:func:`dpcalc.accounting.calibrate.calibrate_dpsgd_many`); any other is calibrated cell by
cell, exactly as ``dpcalc sigma``. Every σ returned is re-checked (:func:`check_verified`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from dpcalc import _validate as v
from dpcalc.accounting.calibrate import calibrate_dpsgd_many
from dpcalc.errors import InfeasibleError
from dpcalc.planning._quick import calibrate_rows_quick
from dpcalc.planning._warm import calibrate_rows
from dpcalc.results import AccountingResult

__all__ = ["MAX_WORKERS", "PARALLEL_MIN_CELLS", "calibrate_cells", "calibrate_chunk", "check_verified",
           "default_workers"]

#: most worker processes :func:`dpcalc.planning.plan.plan_grid` starts by default
MAX_WORKERS = 4
#: runtimes that start threads of their own: with one loaded, the grid is not forked
_THREADED_RUNTIMES = ("jax", "torch")

#: grids with fewer calibrations than this run in the calling process (forking costs ~0.1 s)
PARALLEL_MIN_CELLS = 8


def calibrate_chunk(acc, keys: list[tuple[float, int]], target: float, delta: float, quick: bool = False
                    ) -> list[AccountingResult | InfeasibleError]:
    """σ for each (q, T) of ``keys``: pld warm-started from the neighbouring cell
    (:func:`dpcalc.planning._warm.calibrate_rows`: verified as ``dpcalc sigma`` verifies, never
    above its σ on the same grid step), or with ``quick`` certified on one fixed grid per cell
    (:func:`dpcalc.planning._quick.calibrate_rows_quick`); other accountants
    :func:`calibrate_dpsgd_many` (the same contract as :func:`calibrate_dpsgd`, i.e.
    ``dpcalc sigma``, per cell; rdp searches them in step; ``quick`` changes nothing)."""
    if acc.calibrates_by_stand_in:  # warm-started from the neighbouring cell
        if quick:
            return calibrate_rows_quick(acc, keys, target, delta)
        return calibrate_rows(acc, keys, target, delta)
    return calibrate_dpsgd_many(acc, target_epsilon=target, delta=delta, runs=keys)


#: the worker processes' accountant (set once per process by :func:`_worker_init`)
_WORKER_ACCOUNTANT: list = []


def _worker_init(acc) -> None:
    _WORKER_ACCOUNTANT[:] = [acc]


def _worker_task(keys: list[tuple[float, int]], target: float, delta: float, quick: bool) -> list:
    return calibrate_chunk(_WORKER_ACCOUNTANT[0], keys, target, delta, quick)


def default_workers() -> int:
    import os

    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, MAX_WORKERS))


def calibrate_cells(acc, keys: list[tuple[float, int]], target: float, delta: float,
                    workers: int | None, progress: Callable[[int], None] | None, quick: bool = False
                    ) -> dict[tuple[float, int], AccountingResult]:
    """σ for every (q, T) in ``keys``: independent calibrations, in up to ``workers`` forked
    processes (each returns what :func:`calibrate_chunk` returns in this process; falls back
    to this process where ``fork`` is unavailable). An accountant with a vectorised
    :meth:`~dpcalc.accounting.base.Accountant.epsilon_dpsgd_many` (rdp) gets one chunk per
    worker (searched in step), one calibrated by a stand-in (pld) whole rows per worker (warm
    starts along each row, rows dealt in turn), other accountants one cell per task. A returned σ is re-checked
    (:func:`check_verified`); an unreachable target makes the cell not applicable. ``quick``:
    :func:`calibrate_chunk`'s."""
    import multiprocessing

    n_workers = default_workers() if workers is None else v.count("workers", workers, minimum=1)
    n_workers = min(n_workers, len(keys))
    batched = acc.vectorised_dpsgd or acc.calibrates_by_stand_in  # one chunk per worker
    # fork is unsafe once a multithreaded runtime is loaded in this process (its locks are copied
    # held: the child may deadlock; Python warns for JAX): then the grid runs here
    threaded = any(m in sys.modules for m in _THREADED_RUNTIMES)
    if n_workers <= 1 or len(keys) < PARALLEL_MIN_CELLS or threaded \
            or "fork" not in multiprocessing.get_all_start_methods():
        chunks = [keys] if batched else [[k] for k in keys]
        answers = []
        for chunk in chunks:
            answers.append(calibrate_chunk(acc, chunk, target, delta, quick))
            if progress is not None:
                progress(sum(len(a) for a in answers))
    else:
        from concurrent.futures import ProcessPoolExecutor, as_completed

        if acc.vectorised_dpsgd:
            ordered = sorted(keys, key=lambda k: (k[1], k[0]))
            chunks = [ordered[w::n_workers] for w in range(n_workers)]
        elif batched:  # warm starts run along rows (same q): whole rows, dealt in turn
            rows = sorted({k[0] for k in keys})
            mine = {qq: w % n_workers for w, qq in enumerate(rows)}
            chunks = [[k for k in keys if mine[k[0]] == w] for w in range(n_workers)]
            chunks = [c for c in chunks if c]
        else:  # the largest T first, so that the workers finish together
            chunks = [[k] for k in sorted(keys, key=lambda k: -k[1])]
        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=n_workers, mp_context=ctx, initializer=_worker_init,
                                 initargs=(acc,)) as pool:
            futures = {pool.submit(_worker_task, chunk, target, delta, quick): c
                       for c, chunk in enumerate(chunks)}
            got: dict[int, list] = {}
            for fut in as_completed(futures):
                got[futures[fut]] = fut.result()
                if progress is not None:
                    progress(sum(len(a) for a in got.values()))
        answers = [got[c] for c in range(len(chunks))]
    out: dict[tuple[float, int], AccountingResult] = {}
    for chunk, answer in zip(chunks, answers, strict=True):
        for key, res in zip(chunk, answer, strict=True):
            if isinstance(res, InfeasibleError):
                out[key] = acc.not_applicable(str(res))
            else:
                check_verified(res, target)
                out[key] = res
    return out


def check_verified(res: AccountingResult, target: float) -> None:
    """The helper's contract, re-checked: ε at the returned σ is ≤ target (never report a
    σ whose verification failed)."""
    if res.noise_multiplier is None or res.epsilon is None or not res.epsilon <= target:
        raise InfeasibleError(  # pragma: no cover - would be a bug in the calibration helper
            f"calibration returned sigma={res.noise_multiplier} with epsilon={res.epsilon} above "
            f"the target {target:g}; refusing to report it")
