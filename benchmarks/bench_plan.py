"""Benchmark: ``dpcalc plan``'s 20 × 20 grid against 400 independent ``calibrate_dpsgd`` calls.

Case: N = 50,000 records (CIFAR-10 size), ε = 3, δ = 1e-5, batch sizes 64 … 4096 and epochs
1 … 100, each 20 log-spaced values (``--batch-size 64:4096:20 --epochs 1:100:20``).

1. ``plan_grid(...)`` (what the command runs), timed once per accountant;
2. the same 400 cells calibrated one by one with
   :func:`dpcalc.accounting.calibrate.calibrate_dpsgd` (fresh accountant per call), timed.

Prints both times (wall clock and this process's CPU time: on a shared machine the CPU time
is the fairer number), their ratio, whether every σ agrees with the one-by-one helper, or else
is never smaller (and by how much it is larger), the load average before and after (the machine is shared), and whether the helper
accepts a starting guess (``start``) that the grid could seed from its neighbours.

Run:  .venv/bin/python benchmarks/bench_plan.py [--accountant pld rdp] [--points 20]
"""

from __future__ import annotations

import argparse
import math
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
    ap.add_argument("--accountant", nargs="+", default=["pld", "rdp"])
    ap.add_argument("--points", type=int, default=20)
    args = ap.parse_args()

    from dpcalc.accounting.calibrate import calibrate_dpsgd
    from dpcalc.accounting.registry import get_accountant
    from dpcalc.events import resolve_schedule
    from dpcalc.planning.plan import _start_supported, plan_grid

    bs, es = grid_values(args.points)
    print(f"grid: {len(bs)} batch sizes {bs[0]}..{bs[-1]} x {len(es)} epochs {es[0]:g}..{es[-1]:g} "
          f"= {len(bs) * len(es)} cells; N={N:,}, eps={EPS}, delta={DELTA}")
    print(f"calibrate_dpsgd accepts a start guess: {_start_supported()}; cpus: {os.cpu_count()}")
    for name in args.accountant:
        load0 = os.getloadavg()[0]
        t, c0 = time.perf_counter(), time.process_time()
        plan = plan_grid(target_epsilon=EPS, delta=DELTA, dataset_size=N, batch_sizes=bs, epochs=es,
                         accountant=name)
        t_grid, c_grid = time.perf_counter() - t, time.process_time() - c0
        grid = {(c.batch_size, c.epochs): c.noise_multiplier for c in plan.cells}

        t, c0 = time.perf_counter(), time.process_time()
        same, never_smaller, excess = True, True, 0.0
        for b in bs:
            for e in es:
                s = resolve_schedule(batch_size=b, dataset_size=N, epochs=e)
                r = calibrate_dpsgd(get_accountant(name), target_epsilon=EPS, delta=DELTA,
                                    sample_rate=s.sample_rate, steps=s.steps)
                same &= math.isclose(r.noise_multiplier, grid[b, e], rel_tol=1e-5)
                never_smaller &= grid[b, e] >= r.noise_multiplier
                excess = max(excess, grid[b, e] / r.noise_multiplier - 1)
        t_ind, c_ind = time.perf_counter() - t, time.process_time() - c0
        load1 = os.getloadavg()[0]
        cells = len(bs) * len(es)
        print(f"{name}: plan grid {t_grid:7.2f} s wall ({c_grid:6.2f} s CPU) | {cells} independent "
              f"calibrate calls {t_ind:7.2f} s wall ({c_ind:6.2f} s CPU) | ratio {t_ind / t_grid:4.2f} | "
              f"same sigma: {same} | grid sigma never smaller: {never_smaller} (max excess {excess:.2%}) | "
              f"load avg {load0:.2f} -> {load1:.2f}")

if __name__ == "__main__":
    main()
