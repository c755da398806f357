"""Benchmark (issue 32): pld on fixed-size batches under add/remove — the issue's table re-measured.

For each row: pld's certified ε (upper), its lower bound, the ratio of the upper to the truth
bracket's upper end quoted in issue 32 (target: ≤ 1.01 without replacement, ≤ 1.05 with
replacement), rdp's ε (the previous default) and the wall time of one pld evaluation (cold: the
first call of the row; the pairs are cached after it).

Run:  .venv/bin/python benchmarks/bench_fixed_size_pld.py
"""

from __future__ import annotations

import math
import time

from dpcalc.accounting.pld import PldAccountant
from dpcalc.accounting.rdp import RdpAccountant
from dpcalc.events import FixedSizeSampledEvent, GaussianEvent, SelfComposedEvent

DELTA = 1e-5
#: (sampler, σ, B, N, epochs, truth bracket of issue 32)
ROWS = [
    ("without-replacement", 1.1, 256, 60000, 10, (6.710, 6.732)),
    ("without-replacement", 1.1, 256, 60000, 60, (14.651, 14.785)),
    ("without-replacement", 2.0, 1000, 50000, 20, (3.894, 3.904)),
    ("with-replacement", 1.1, 256, 60000, 10, (8.19, 8.33)),
    ("with-replacement", 2.0, 100, 10000, 5, (1.37, 1.42)),
]


def main() -> None:
    print(f"{'sampler':20} {'σ':>4} {'B':>5} {'N':>6} {'E':>3} {'pld upper':>10} {'pld lower':>10} "
          f"{'truth':>16} {'upper/hi':>8} {'rdp':>9} {'time s':>7}")
    for sampling, sigma, b, n, epochs, (lo, hi) in ROWS:
        steps = math.ceil(epochs * n / b)
        event = SelfComposedEvent(FixedSizeSampledEvent(b, n, GaussianEvent(sigma), sampling == "with-replacement"),
                                  steps)
        t = time.perf_counter()
        res = PldAccountant().epsilon(event, delta=DELTA)
        took = time.perf_counter() - t
        rdp = RdpAccountant().epsilon(event, delta=DELTA).epsilon
        print(f"{sampling:20} {sigma:4g} {b:5d} {n:6d} {epochs:3d} {res.epsilon:10.4f} "
              f"{res.details['epsilon_lower']:10.4f} {f'[{lo}, {hi}]':>16} {res.epsilon / hi:8.4f} "
              f"{rdp:9.3f} {took:7.2f}")


if __name__ == "__main__":
    main()
