"""Benchmark: ``dpcalc plan``'s 20 × 20 grid against 400 independent ``calibrate_dpsgd`` calls.

Case: N = 50,000 records (CIFAR-10 size), ε = 3, δ = 1e-5, batch sizes 64 … 4096 and epochs
1 … 100, each 20 log-spaced values (``--batch-size 64:4096:20 --epochs 1:100:20``).

1. ``plan_grid(...)`` (what the command runs), timed once per accountant;
2. the same 400 cells calibrated one by one with
   :func:`dpcalc.accounting.calibrate.calibrate_dpsgd` (fresh accountant per call), timed.

Prints both times (wall clock, and CPU time of this process and its workers: on a shared
machine the CPU time is the fairer number), their ratio, whether every grid σ is verified
(ε ≤ target, recomputed with ``accountant.epsilon``) and how far it is from the one-by-one
helper's σ (the grid's rdp search, and its pld search warm-started from the neighbouring
cells, settle on the smallest 8-digit σ that meets the target — for pld on the calibration
stand-in ``dpcalc sigma`` searches — so it is never larger; the helper's Brent search stops
within its rtol 1e-6 above), how many cells the pld warm start answered, and the load
average before and after (the machine is shared).

For pld it also prints the work per cell (stand-in and accountant evaluations, from the
results' ``details``) and the **floor** of any certified grid at this precision: the CPU time
of one accountant evaluation at each cell's final σ (``epsilon()``, as the check above computes
it, from an empty cache of composed PMFs; with ``--floor`` also ``calibration_probe``, which the
grid verifies with: the same ε without the lower bound of the polish round, and the stand-in's
upper bound alone at the grid step the accountant settles on, the cheapest certificate of ε ≤
target on that grid). Divided by the number of workers it bounds the grid's wall time from below.

``pld-quick`` is ``dpcalc plan --quick`` (:mod:`dpcalc.planning._quick`): each σ certified by
pld's upper bound on one grid step fixed per cell, its ε within 0.1% below the target. Its line
prints the time, the re-check of every σ as its Check line does (``dpcalc epsilon --accountant
pld --discretization <step>``, from an empty cache), the stand-in evaluations per cell, the
lowest ε / target, and how far its σ are from the pld grid's (``dpcalc sigma``'s) and from the
independent calls' when those ran first in the same run.

Run:  .venv/bin/python benchmarks/bench_plan.py [--accountant pld pld-quick rdp] [--points 20]
      [--workers N] [--skip-independent] [--floor]
"""

from __future__ import annotations

import argparse
import os
import time

N, EPS, DELTA = 50_000, 3.0, 1e-5


def grid_values(points: int) -> tuple[list[int], list[float]]:
    from dpcalc.cli.plan import BATCH_SIZES, EPOCHS

    bs = BATCH_SIZES.convert(f"64:4096:{points}", None, None)
    es = EPOCHS.convert(f"1:100:{points}", None, None)
    return bs, es


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--accountant", nargs="+", default=["pld", "pld-quick", "rdp"],
                    help="pld-quick: plan --quick (each sigma certified on one fixed grid step per cell)")
    ap.add_argument("--points", type=int, default=20)
    ap.add_argument("--workers", type=int, default=None, help="plan_grid's workers (default: its own)")
    ap.add_argument("--skip-independent", action="store_true",
                    help="time the grid only (the 400 one-by-one calls take minutes)")
    ap.add_argument("--floor", action="store_true",
                    help="pld: also time calibration_probe and the stand-in alone at every cell's sigma")
    args = ap.parse_args()

    from dpcalc.accounting.calibrate import calibrate_dpsgd
    from dpcalc.accounting.registry import get_accountant
    from dpcalc.events import dpsgd_event
    from dpcalc.planning.plan import plan_grid
    from dpcalc.schedule import resolve_schedule

    bs, es = grid_values(args.points)
    print(f"grid: {len(bs)} batch sizes {bs[0]}..{bs[-1]} x {len(es)} epochs {es[0]:g}..{es[-1]:g} "
          f"= {len(bs) * len(es)} cells; N={N:,}, eps={EPS}, delta={DELTA}")
    print(f"cpus: {os.cpu_count()}")
    exact: dict = {}  # the pld grid's sigma, to compare the quick grid with
    independent: dict = {}  # the 400 one-by-one pld calibrations (dpcalc sigma), when they ran
    for label in args.accountant:
        name, quick = ("pld", True) if label == "pld-quick" else (label, False)
        load0 = os.getloadavg()[0]
        t, c0 = time.perf_counter(), _cpu()
        plan = plan_grid(target_epsilon=EPS, delta=DELTA, dataset_size=N, batch_sizes=bs, epochs=es,
                         accountant=name, workers=args.workers, quick=quick)
        t_grid, c_grid = time.perf_counter() - t, _cpu() - c0
        grid = {(c.batch_size, c.epochs): c.noise_multiplier for c in plan.cells}
        acc = get_accountant(name)
        feasible = [c for c in plan.cells if c.feasible]
        if quick:
            _quick_report(label, plan, feasible, exact, independent, t_grid, c_grid, load0)
            continue
        if name == "pld":
            exact.update(grid)
        c0 = _cpu()
        checked = [_verify(acc, c, dpsgd_event) for c in feasible]
        c_floor = _cpu() - c0
        verified = all(e <= EPS for e in checked)
        warm = sum(bool(c.result.details.get("warm_start")) for c in feasible)
        line = (f"{name}: plan grid {t_grid:7.2f} s wall ({c_grid:6.2f} s CPU) | every sigma verified: "
                f"{verified}" + (f" | warm-started cells: {warm}" if name == "pld" else ""))
        if name == "pld":
            n = max(len(feasible), 1)
            stand = sum(c.result.details.get("warm_stand_in", 0) for c in feasible) / n
            full = sum(c.result.details.get("warm_full", 0) for c in feasible) / n
            workers = args.workers or _default_workers()
            print(f"pld per cell: {stand:.2f} stand-in + {full:.2f} accountant evaluations (warm cells) | "
                  f"floor, one epsilon() at each of the {len(feasible)} sigma: {c_floor:6.2f} s CPU "
                  f"(/{workers} workers: {c_floor / workers:5.2f} s)")
            if args.floor:
                _floor(acc, feasible, dpsgd_event, workers)
        if not args.skip_independent:
            t, c0 = time.perf_counter(), _cpu()
            larger, smaller = 0.0, 0.0
            for b in bs:
                for e in es:
                    s = resolve_schedule(batch_size=b, dataset_size=N, epochs=e)
                    r = calibrate_dpsgd(get_accountant(name), target_epsilon=EPS, delta=DELTA,
                                        sample_rate=s.sample_rate, steps=s.steps)
                    rel = grid[b, e] / r.noise_multiplier - 1
                    if name == "pld":
                        independent[b, e] = r.noise_multiplier
                    larger, smaller = max(larger, rel), max(smaller, -rel)
            t_ind, c_ind = time.perf_counter() - t, _cpu() - c0
            independent["time"] = t_ind
            line += (f" | {len(bs) * len(es)} independent calibrate calls {t_ind:7.2f} s wall "
                     f"({c_ind:6.2f} s CPU) | CPU ratio {c_ind / c_grid:5.1f} | grid sigma at most "
                     f"{larger:.2e} above, {smaller:.2e} below the independent one")
        print(line + f" | load avg {load0:.2f} -> {os.getloadavg()[0]:.2f}")


def _quick_report(label: str, plan, feasible, exact: dict, independent: dict, t_grid: float, c_grid: float,
                  load0: float) -> None:
    """plan --quick: time; every sigma re-checked as its Check line does (pld with the cell's grid
    step, from an empty cache); its epsilon window; stand-in evaluations per cell; and its sigma
    beside the pld grid's (dpcalc sigma's), when that ran first."""
    from dpcalc.accounting._pld_cache import clear_upper_cache
    from dpcalc.accounting.pld import PldAccountant
    from dpcalc.events import dpsgd_event

    verified = same = True
    for c in feasible:
        clear_upper_cache()
        quick = c.result.details.get("quick")
        acc = PldAccountant(discretization=c.result.details["discretization"]) if quick else PldAccountant()
        e = acc.epsilon(dpsgd_event(noise_multiplier=c.noise_multiplier, sample_rate=c.sample_rate,
                                    steps=c.steps), delta=DELTA).epsilon
        verified &= e <= EPS
        same &= not quick or e == c.epsilon
    quick_cells = [c for c in feasible if c.result.details.get("quick")]
    evals = sum(c.result.details["evaluations"] for c in quick_cells) / max(len(quick_cells), 1)
    low = min(c.epsilon for c in quick_cells) / EPS if quick_cells else float("nan")
    line = (f"{label}: plan grid {t_grid:7.2f} s wall ({c_grid:6.2f} s CPU) | every sigma verified "
            f"(pld --discretization at its step): {verified}, its epsilon bit for bit: {same} | quick cells "
            f"{len(quick_cells)}/{len(feasible)}, {evals:.2f} stand-in evaluations per quick cell, epsilon >= "
            f"{low:.5f} x target")
    for what, ref in (("the pld grid", exact), ("the 400 independent pld calibrations", independent)):
        rel = [c.noise_multiplier / ref[c.batch_size, c.epochs] - 1 for c in feasible
               if ref.get((c.batch_size, c.epochs))]
        if rel:
            line += f" | sigma vs {what}: at most {max(rel):.2e} above, {max(0.0, -min(rel)):.2e} below"
    if "time" in independent:
        line += f" | wall ratio to the independent calls {independent['time'] / t_grid:5.1f}"
    print(line + f" | load avg {load0:.2f} -> {os.getloadavg()[0]:.2f}")


def _verify(acc, cell, dpsgd_event) -> float:
    """ε at the cell's σ as ``dpcalc epsilon`` computes it (from an empty cache of composed PMFs)."""
    if acc.name == "pld":
        from dpcalc.accounting._pld_cache import clear_upper_cache

        clear_upper_cache()
    res = acc.epsilon(dpsgd_event(noise_multiplier=cell.noise_multiplier, sample_rate=cell.sample_rate,
                                  steps=cell.steps), delta=DELTA)
    return res.epsilon


def _floor(acc, cells, dpsgd_event, workers: int) -> None:
    """CPU of calibration_probe, and of the stand-in alone at the grid step, at every σ (pld)."""
    from dpcalc.accounting._pld_cache import clear_upper_cache

    t_probe = t_stand = 0.0
    for c in cells:
        ev = dpsgd_event(noise_multiplier=c.noise_multiplier, sample_rate=c.sample_rate, steps=c.steps)
        clear_upper_cache()
        c0 = _cpu()
        probe = acc.calibration_probe(ev, delta=DELTA)
        t_probe += _cpu() - c0
        _, stand_in = acc.calibration_search(probe)
        clear_upper_cache()
        c0 = _cpu()
        stand_in.epsilon(ev, delta=DELTA)
        t_stand += _cpu() - c0
    print(f"pld floor: calibration_probe at each sigma {t_probe:6.2f} s CPU (/{workers}: {t_probe / workers:5.2f} s)"
          f" | the stand-in alone at its grid step {t_stand:6.2f} s CPU (/{workers}: {t_stand / workers:5.2f} s)")


def _default_workers() -> int:
    from dpcalc.planning._parallel import default_workers

    return default_workers()


def _cpu() -> float:
    """CPU seconds of this process and of its finished child processes (plan's workers)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


if __name__ == "__main__":
    main()
