"""Benchmark the ledger at 10³, 10⁴ and 10⁵ recorded events (issue 33).

For each size N a ledger is built by ``ledger import`` of N released events (a mix of a Gaussian,
a Laplace and a pure (ε, 0) release, as a long-lived ledger repeats a few mechanisms), then:

* **release lock hold**: the time one ``Ledger.reserve`` holds the write lock (its ``BEGIN
  IMMEDIATE`` … ``COMMIT``), and its status update to ``released`` (best of ``--repeat``);
  target < 50 ms at 10⁵ events — the filter's running totals make it O(1) in N;
* **``ledger show``** wall time of the command in a fresh process (``--json`` to /dev/null);
* the running totals checked equal to a full recomputation.

Before issue 33 a release recomputed the whole history under the lock (5.1 s at 60,000 events)
and ``ledger show`` took 28.5 s at 60,000.

Run: ``PYTHONPATH=. .venv/bin/python benchmarks/bench_ledger.py [--sizes 1000,10000,100000]``
(the 10⁵ import takes about a minute on one core).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dpcalc.events import EpsilonDeltaEvent
from dpcalc.ledger import Ledger, api, records
from dpcalc.ledger.transfer import EXPORT_FORMAT, import_plan, parse_export

EVENTS = ({"type": "gaussian", "noise_multiplier": 400.0}, {"type": "laplace", "scale": 1e5},
          {"type": "epsilon-delta", "epsilon": 1e-5, "delta": 0.0})


def build(path: Path, n: int) -> float:
    lines = [records.dumps({"format": EXPORT_FORMAT})]
    lines.append(records.dumps({"type": "dataset", "name": "census", "budget_epsilon": 100.0, "delta": 1e-6,
                                "adjacency": "add-remove", "created": "2026-01-01T00:00:00+00:00"}))
    for i in range(n):
        lines.append(records.dumps({
            "type": "event", "dataset": "census", "kind": "release", "mechanism": "bench", "params": {"i": i},
            "event": EVENTS[i % 3], "status": "released", "created": "2026-01-01T00:00:00+00:00",
            "updated": "2026-01-01T00:00:00+00:00", "command": ["bench"], "version": "bench"}))
    t = time.perf_counter()
    with Ledger(path, create=True) as led:
        import_plan(led, parse_export(lines))
    return time.perf_counter() - t


def lock_hold(path: Path, repeat: int) -> tuple[float, float]:
    """Best lock-hold time of a reservation and of its status update (seconds)."""
    held: list[float] = []
    real = api.transaction

    @contextlib.contextmanager
    def timed(con, p):
        with real(con, p) as c:
            t = time.perf_counter()  # the lock is held from BEGIN IMMEDIATE (inside real)
            yield c
        held.append(time.perf_counter() - t)

    api.transaction = timed
    try:
        best_reserve = best_status = float("inf")
        with Ledger(path) as led:
            for _ in range(repeat):
                held.clear()
                eid = led.reserve("census", mechanism="bench", params={}, event=EpsilonDeltaEvent(1e-5),
                                  command=["bench"])
                best_reserve = min(best_reserve, held[-1])
                led.set_status(eid, "released")
                best_status = min(best_status, held[-1])
    finally:
        api.transaction = real
    return best_reserve, best_status


def show_time(path: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "dpcalc", "ledger", "show", str(path), "--json"], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"{'events':>8} {'import s':>9} {'reserve lock ms':>16} {'status lock ms':>15} {'show s':>8}  totals")
    for n in (int(x) for x in args.sizes.split(",")):
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "bench.db"
            t_import = build(path, n)
            reserve, status = lock_hold(path, args.repeat)
            t_show = show_time(path)
            with Ledger(path) as led:
                ds = led.dataset("census")
                same = led.stored_totals(ds) == led.recomputed_totals(ds)
            print(f"{n:>8} {t_import:>9.2f} {1e3 * reserve:>16.2f} {1e3 * status:>15.2f} {t_show:>8.2f}  "
                  f"{'= recomputation' if same else 'DIFFER'}")


if __name__ == "__main__":
    main()
