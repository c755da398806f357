"""Vectorised erfc (dpcalc._erfc) against the libm loop (dpcalc._numerics._erfc_abs_scaled),
per array size (issue 31): where the crossover lies (``_NDTR_LIBM_MAX`` is chosen from it).

Run: ``.venv/bin/python benchmarks/bench_erfc.py`` (a few seconds). Times are CPU time
(``time.process_time``), best of ``--repeat`` rounds, the two sides interleaved, so a busy
shared machine affects both alike.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from dpcalc._erfc import erfc_abs_scaled
from dpcalc._numerics import _erfc_abs_scaled


def _best(f, x, number: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.process_time()
        for _ in range(number):
            f(x)
        best = min(best, (time.process_time() - t) / number)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    print(f"{'points':>8} {'vector µs':>10} {'ns/pt':>7} {'libm µs':>10} {'ns/pt':>7} {'libm/vector':>12}")
    for n in (16, 64, 128, 256, 512, 1024, 2048, 4096, 32768, 262144):
        x = np.sort(rng.uniform(-12.0, 12.0, n))
        number = max(1, 200_000 // n)
        v, m = [], []
        for _ in range(args.repeat):  # interleaved
            v.append(_best(erfc_abs_scaled, x, number, 1))
            m.append(_best(_erfc_abs_scaled, x, number, 1))
        tv, tm = min(v), min(m)
        print(f"{n:8d} {tv * 1e6:10.1f} {tv / n * 1e9:7.1f} {tm * 1e6:10.1f} {tm / n * 1e9:7.1f} {tm / tv:12.2f}")


if __name__ == "__main__":
    main()
