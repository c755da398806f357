"""Time of pld's group-level ε (the binomial mixture of Gaussians, issue 28) against the record-level
ε of the same run, for groups of k = 1…100 records, and the number of mixture components kept
(binomial tail ≤ 1e-30, counted in the certified bracket).

Run: ``PYTHONPATH=. python benchmarks/bench_group_pld.py``. Prints one line per k: components,
seconds, the ratio to the record-level run, ε and its bracket, and what `convert group` gives.
"""

from __future__ import annotations

import time

from dpcalc.accounting.group import convert_group_epsilon, group_components
from dpcalc.accounting.pld import PldAccountant
from dpcalc.events import dpsgd_event

RUNS = [(1.0, 0.01, 1000), (1.5, 0.0005, 2000)]
GROUPS = [1, 2, 10, 30, 100]


def main() -> None:
    for sigma, q, steps in RUNS:
        pld = PldAccountant()
        t0 = time.perf_counter()
        rec = pld.epsilon(dpsgd_event(noise_multiplier=sigma, sample_rate=q, steps=steps), delta=1e-5)
        base = time.perf_counter() - t0
        print(f"σ={sigma}, q={q}, T={steps}: record-level ε={rec.epsilon:.4f} in {base:.2f} s")
        for k in GROUPS:
            event = dpsgd_event(noise_multiplier=sigma, sample_rate=q, steps=steps, group_size=k)
            t0 = time.perf_counter()
            res = pld.epsilon(event, delta=1e-5)
            dt = time.perf_counter() - t0
            kept = len(group_components(k, q)[0]) if k > 1 else 2
            conv = convert_group_epsilon(pld, dpsgd_event(noise_multiplier=sigma, sample_rate=q, steps=steps),
                                         group_size=k, delta=1e-5)
            print(f"  k={k:4d}: components={kept:3d}  {dt:6.2f} s  ratio={dt / base:5.1f}  "
                  f"ε={res.epsilon:.4f} [{res.details['epsilon_lower']:.4f}]  convert group ε={conv:.4g}")


if __name__ == "__main__":
    main()
