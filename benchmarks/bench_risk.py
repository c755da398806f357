"""Benchmark: ``dpcalc risk`` against the corresponding ``dpcalc epsilon`` call (issue 13: risk
must take no more than 2× the time of epsilon for the same inputs).

For each case the whole command is timed as a user runs it (a fresh ``python -m dpcalc``
process, best of ``--repeat`` runs each, interleaved so load changes hit both):

* ``dpcalc epsilon ARGS --delta 1e-5 --accountant pld`` (the accountant risk uses by default)
  and ``dpcalc epsilon ARGS --delta 1e-5`` (every accountant, the epsilon default);
* ``dpcalc risk ARGS --delta 1e-5`` (pld, the four default FPRs).

Prints the times and the ratios risk / epsilon.

Run:  .venv/bin/python benchmarks/bench_risk.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

CASES = {
    "Abadi et al. MNIST (σ=4, q=0.01, T=10,000)": ["--sigma", "4", "--sample-rate", "0.01", "--steps", "10000"],
    "Opacus MNIST (σ=1.1, B=256, N=60,000, 60 epochs)": ["--sigma", "1.1", "--batch-size", "256", "--dataset-size",
                                                         "60000", "--epochs", "60"],
    "unsampled Gaussian (σ=10, T=100)": ["--sigma", "10", "--steps", "100"],
}


def run(args: list[str]) -> float:
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "dpcalc", *args], check=True, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    opts = ap.parse_args()
    print(f"best of {opts.repeat} runs each (whole process, seconds)")
    worst = 0.0
    for name, args in CASES.items():
        common = [*args, "--delta", "1e-5"]
        cmds = {"epsilon (pld)": ["epsilon", *common, "--accountant", "pld"],
                "epsilon (all)": ["epsilon", *common],
                "risk (pld)": ["risk", *common]}
        best = {k: float("inf") for k in cmds}
        for _ in range(opts.repeat):
            for k, c in cmds.items():
                best[k] = min(best[k], run(c))
        r_pld = best["risk (pld)"] / best["epsilon (pld)"]
        r_all = best["risk (pld)"] / best["epsilon (all)"]
        worst = max(worst, r_pld)
        print(f"{name}: epsilon pld {best['epsilon (pld)']:.2f} s, epsilon all {best['epsilon (all)']:.2f} s, "
              f"risk {best['risk (pld)']:.2f} s -> risk/epsilon(pld) = {r_pld:.2f}, risk/epsilon(all) = {r_all:.2f}")
    print(f"largest ratio risk / epsilon(pld): {worst:.2f} (target ≤ 2)")


if __name__ == "__main__":
    main()
