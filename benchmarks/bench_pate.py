"""Benchmark: the GNMax data-dependent analysis of 10⁶ queries × 10 classes (issue 10: < 3 s and
< 500 MB), against a straightforward per-query loop.

* vectorised: :func:`pate_votes_event` (validation), :class:`PateRun` (q̃ of Prop 7 and
  Thm 6's constants for every query) and the (ε, δ) conversion with the order refined
  (:func:`epsilon_of_curve`: the composed data-dependent RDP at 111 orders, then Brent search);
  wall and CPU time (best of ``--repeat``), and the peak memory the analysis allocates
  (tracemalloc; numpy reports its buffers to it);
* straightforward: one query at a time with :mod:`math` (q̃ by erfc, Thm 6 at each order, the
  minimum with λ/σ²), timed on ``--loop-queries`` queries and scaled to 10⁶ (it is linear);
* reading the same votes from a 10⁶-row CSV file (``read_votes_file``), for reference.

Synthetic votes: 250 teachers, class probabilities ~ Dirichlet(0.3), votes ~ Multinomial (seeded).

Run:  PYTHONPATH=. .venv/bin/python benchmarks/bench_pate.py [--repeat 3] [--loop-queries 20000]
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
import time
import tracemalloc

import numpy as np

from dpcalc.accounting import pate as ap
from dpcalc.mechanisms import pate as pm

SIGMA = 40.0
DELTA = 1e-5


def votes(k: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.multinomial(250, rng.dirichlet(np.full(10, 0.3), size=k))


def analyse(v: np.ndarray) -> ap.Conversion:
    run = ap.PateRun(pm.pate_votes_event(v, mechanism="gnmax", noise=SIGMA))
    return ap.epsilon_of_curve(run.rdp_dependent, delta=DELTA)


def loop_rdp(v: np.ndarray, orders: np.ndarray) -> np.ndarray:
    """The straightforward per-query loop: composed data-dependent RDP at ``orders``."""
    total = [0.0] * len(orders)
    var = SIGMA * SIGMA
    for row in v.tolist():
        i = max(range(len(row)), key=lambda j: row[j])
        q = sum(0.5 * math.erfc((row[i] - row[j]) / (2 * SIGMA)) for j in range(len(row)) if j != i)
        q = min(q, 1 - 1 / len(row))
        lq = math.log(q) if q > 0 else -math.inf
        mu2 = SIGMA * math.sqrt(-lq) if q > 0 else math.inf
        mu1 = mu2 + 1
        e1, e2 = mu1 / var, mu2 / var
        ok = (q > 0 and mu2 > 1 and -lq > e2
              and lq <= (mu2 - 1) * e2 - mu2 * (math.log1p(1 / (mu1 - 1)) + math.log1p(1 / (mu2 - 1))))
        for n, lam in enumerate(orders):
            base = lam / var
            if ok and lam < mu1:
                la = (lam - 1) * (math.log1p(-q) - math.log1p(-math.exp((lq + e2) * (1 - 1 / mu2))))
                lb = (lam - 1) * (e1 - lq / (mu1 - 1))
                a, b = math.log1p(-q) + la, lq + lb
                s = max(a, b) + math.log1p(math.exp(-abs(a - b)))
                base = min(base, s / (lam - 1))
            total[n] += base
    return np.array(total)


def main() -> None:
    ap_ = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap_.add_argument("--repeat", type=int, default=3)
    ap_.add_argument("--loop-queries", type=int, default=20_000)
    args = ap_.parse_args()
    k = 10**6
    v = votes(k)
    best_wall = best_cpu = math.inf
    for _ in range(args.repeat):
        w, c = time.perf_counter(), time.process_time()
        conv = analyse(v)
        best_wall = min(best_wall, time.perf_counter() - w)
        best_cpu = min(best_cpu, time.process_time() - c)
    tracemalloc.start()
    analyse(v)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"GNMax σ={SIGMA:g}, {k:,} queries × 10 classes, δ={DELTA:g}: data-dependent ε = {conv.value:.6g} "
          f"at order {conv.order:.4g}")
    print(f"vectorised analysis: {best_wall:.2f} s wall, {best_cpu:.2f} s CPU (best of {args.repeat}); "
          f"peak memory allocated {peak / 1e6:.0f} MB (the 10⁶×10 vote array itself: {v.nbytes / 1e6:.0f} MB)")
    sub = v[:args.loop_queries]
    w = time.perf_counter()
    loop = loop_rdp(sub, ap.ORDERS)
    t_loop = (time.perf_counter() - w) * k / sub.shape[0]
    fast = ap.PateRun(pm.pate_votes_event(sub, mechanism="gnmax", noise=SIGMA)).rdp_dependent(ap.ORDERS)
    print(f"straightforward per-query loop: {t_loop:.0f} s for {k:,} queries (measured on {sub.shape[0]:,}, "
          f"scaled), its composed RDP at most {np.max(np.abs(fast / loop - 1)):.1e} relative from the "
          f"vectorised one (which adds its rounding margins)")
    print(f"ratio loop / vectorised: {t_loop / best_wall:.0f}×")
    fd, path = tempfile.mkstemp(suffix=".csv")
    os.close(fd)
    try:
        np.savetxt(path, v, fmt="%d", delimiter=",")
        w = time.perf_counter()
        pm.read_votes_file(path)
        print(f"reading the votes from a {os.path.getsize(path) / 1e6:.0f} MB CSV file: "
              f"{time.perf_counter() - w:.2f} s")
    finally:
        os.unlink(path)


if __name__ == "__main__":
    main()
