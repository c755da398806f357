"""Start-up time of the calculator commands: whole process, median of N runs, against
``python -c "import numpy"`` on the same machine (issue 17: calculator commands ≤ 2×, the
quick-start pld ``sigma`` ≤ 3×).

Usage: ``python benchmarks/bench_startup.py [--runs 7]`` (from the repository root; runs
``python -m dpcalc`` with this interpreter). Prints one line per command: median wall-clock
seconds, min–max, the ratio to the numpy baseline (the target), and the same ratio in CPU
seconds (user + system of the child process: less sensitive to other processes on a shared
machine; each ratio is of medians). The runs are interleaved — each round runs the baseline and
then every command once, after one discarded warm-up round — so that a change of the machine's
load during the measurement weighs on the baseline and the commands alike. Unset
``PYTHONDONTWRITEBYTECODE`` when measuring (otherwise every run recompiles dpcalc).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

COMMANDS: list[tuple[str, list[str], float]] = [  # (label, dpcalc arguments, target ratio)
    ("laplace", ["laplace", "--eps", "1", "--sensitivity", "1", "--beta", "0.05", "--dims", "10000"], 2.0),
    ("gaussian", ["gaussian", "--eps", "1", "--delta", "1e-5"], 2.0),
    ("rr", ["rr", "--eps", "1.0986122886681098"], 2.0),
    ("convert zcdp", ["convert", "zcdp", "--rho", "0.5", "--delta", "1e-5"], 2.0),
    ("convert group", ["convert", "group", "--eps", "1", "--delta", "1e-6", "--group-size", "4"], 2.0),
    ("epsilon --accountant rdp", ["epsilon", "--sigma", "4", "--sample-rate", "0.01", "--steps", "10000",
                                  "--delta", "1e-5", "--accountant", "rdp"], 2.0),
    ("sigma quick start (pld)", ["sigma", "--eps", "3", "--delta", "1e-5", "--batch-size", "256",
                                 "--dataset-size", "60000", "--epochs", "60"], 3.0),
]


def timed(argv: list[str]) -> tuple[float, float]:
    """Wall-clock and CPU (user + system) seconds of one execution of ``argv`` (output discarded)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT, env=env)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7, help="runs per command (median reported)")
    args = ap.parse_args()
    py = sys.executable
    label = 'python -c "import numpy"'
    argvs = {label: [py, "-c", "import numpy"]}
    argvs.update({"dpcalc " + name: [py, "-m", "dpcalc", *cmd] for name, cmd, _ in COMMANDS})
    for argv in argvs.values():  # warm the file cache and the bytecode
        timed(argv)
    walls: dict[str, list[float]] = {name: [] for name in argvs}
    cpus: dict[str, list[float]] = {name: [] for name in argvs}
    for _ in range(args.runs):
        for name, argv in argvs.items():
            w, c = timed(argv)
            walls[name].append(w)
            cpus[name].append(c)
    base, base_cpu = walls[label], cpus[label]
    b, bc = statistics.median(base), statistics.median(base_cpu)
    print(f"{label:34s} {b:6.3f} s  [{min(base):.3f}..{max(base):.3f}]  1.00x  (cpu {bc:.3f} s, 1.00x)")
    for name, _, target in COMMANDS:
        ts, cs = walls["dpcalc " + name], cpus["dpcalc " + name]
        m, c = statistics.median(ts), statistics.median(cs)
        flag = "ok" if m <= target * b else f"above {target:g}x"
        print(f"{'dpcalc ' + name:34s} {m:6.3f} s  [{min(ts):.3f}..{max(ts):.3f}]  "
              f"{m / b:4.2f}x  (target <= {target:g}x: {flag}; cpu {c:.3f} s, {c / bc:4.2f}x)")

if __name__ == "__main__":
    main()
