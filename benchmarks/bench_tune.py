"""Benchmark: ``dpcalc tune``'s repeat-and-select ε against dp_accounting's ``RepeatAndSelectDpEvent``.

Both apply Papernot & Steinke 2022 (Thm 2: truncated negative binomial, geometric, logarithmic;
Thm 6: Poisson) to the RDP curve of one DP-SGD run. dp_accounting uses its default order grid
(1.1 … 10.9 in steps of 0.1, then 11 … 63, 128 … 1024) for λ, λ̂ and the conversion giving δ̂;
dpcalc refines each of them off its grid (every order gives a valid bound), so its certified ε
must never be above dp_accounting's. Prints both ε side by side, their relative difference,
and the time of each (wall and CPU of this process).

``--calibrate`` (issue 31): the per-run σ of ``dpcalc tune --eps`` (the library call the command
makes for the search row, ``calibrate_noise_multiplier(RdpAccountant(), ...)`` with a
``TuningEvent``; rtol 1e-6, verified) on 10 settings covering every law of K and a few (q, T,
target ε, δ): σ, ε(σ), the number of ε evaluations and the CPU (``time.process_time``, the fairer
number on a shared machine) and wall time of each calibration. dp_accounting has no calibration;
beside ours it prints its ε at our σ (≥ the target: with it the search would need at least our
σ) and the time of that one evaluation. ``--src DIR`` runs dpcalc from another source tree (e.g.
``git archive <commit> dpcalc | tar -x -C DIR``) for a before/after comparison.

Run:  .venv/bin/python benchmarks/bench_tune.py
      .venv/bin/python benchmarks/bench_tune.py --calibrate [--src DIR]
"""

from __future__ import annotations

import argparse
import math
import sys
import time

DELTA = 1e-5
#: (σ, q, T) of one run × (law, E[K], η)
RUNS = [(1.0, 0.01, 1000), (2.0, 0.004, 10_000), (0.8, 1.0, 1)]
LAWS = [("poisson", 10.0, None), ("poisson", 3.0, None), ("poisson", 100.0, None), ("geometric", 10.0, None),
        ("logarithmic", 10.0, None), ("negative-binomial", 10.0, 0.5), ("negative-binomial", 100.0, 2.0)]
#: --calibrate: (law, E[K], η, q, T, target ε, δ); the first is issue 31's (20 s before)
CALIBRATIONS = [
    ("poisson", 5.0, None, 0.01, 100, 3.0, 1e-5),
    ("geometric", 5.0, None, 0.01, 100, 3.0, 1e-5),
    ("logarithmic", 10.0, None, 0.01, 1000, 3.0, 1e-5),
    ("negative-binomial", 10.0, 0.5, 0.01, 1000, 3.0, 1e-5),
    ("poisson", 10.0, None, 0.01, 1000, 3.0, 1e-5),
    ("poisson", 100.0, None, 0.004, 10_000, 8.0, 1e-5),
    ("geometric", 20.0, None, 0.001, 10_000, 1.0, 1e-5),
    ("negative-binomial", 100.0, 2.0, 0.05, 500, 5.0, 1e-5),
    ("poisson", 3.0, None, 1.0, 1, 2.0, 1e-5),
    ("logarithmic", 3.0, None, 0.02, 2000, 2.0, 1e-6),
]


def _timed(fn):
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def _their_epsilon(sigma: float, q: float, steps: int, law: str, mean: float, eta, delta: float) -> float:
    from dp_accounting import dp_event as dpe
    from dp_accounting.rdp import rdp_privacy_accountant as dpa_rdp

    g = dpe.GaussianDpEvent(sigma)
    base = dpe.SelfComposedDpEvent(g if q == 1 else dpe.PoissonSampledDpEvent(q, g), steps)
    shape = {"poisson": math.inf, "geometric": 1.0, "logarithmic": 0.0}.get(law, eta)
    acc = dpa_rdp.RdpAccountant()
    acc.compose(dpe.RepeatAndSelectDpEvent(base, mean, shape))
    return acc.get_epsilon(delta)


def calibrate() -> None:
    """--calibrate: the search row of ``dpcalc tune --eps`` on :data:`CALIBRATIONS`."""
    import dpcalc
    from dpcalc.accounting.calibrate import calibrate_noise_multiplier
    from dpcalc.accounting.rdp import RdpAccountant
    from dpcalc.events import TuningEvent, dpsgd_event

    RdpAccountant().epsilon(TuningEvent(dpsgd_event(noise_multiplier=1.0, sample_rate=0.5, steps=3),
                                        "poisson", 2.0), delta=DELTA)  # warm-up: imports
    _their_epsilon(1.0, 0.01, 3, "poisson", 2.0, None, DELTA)  # warm-up
    print(f"dpcalc from {dpcalc.__file__.rsplit('/dpcalc/', 1)[0]}; per-run sigma of the search "
          "(rdp accountant, rtol 1e-6, verified)")
    print(f"{'law':>18} {'E[K]':>5} {'eta':>4} {'q':>6} {'T':>6} {'eps':>4} {'delta':>6} | {'sigma':>10} "
          f"{'eps(sigma)':>10} {'evals':>5} {'CPU s':>6} {'wall s':>6} | {'dp_acc eps(sigma)':>17} "
          f"{'dp_acc 1 eval ms':>16}")
    total = 0.0
    for law, mean, eta, q, steps, target, delta in CALIBRATIONS:
        def make(s, law=law, mean=mean, eta=eta, q=q, steps=steps):
            return TuningEvent(dpsgd_event(noise_multiplier=s, sample_rate=q, steps=steps), law, mean, eta)

        res, wall, cpu = _timed(lambda make=make, target=target, delta=delta: calibrate_noise_multiplier(
            RdpAccountant(), target_epsilon=target, delta=delta, make_event=make))
        total += cpu
        sigma = res.noise_multiplier
        their, tw, _ = _timed(lambda args=(sigma, q, steps, law, mean, eta, delta): _their_epsilon(*args))
        print(f"{law:>18} {mean:5g} {eta if eta is not None else '':>4} {q:6g} {steps:6d} {target:4g} "
              f"{delta:6g} | {sigma:10.8g} {res.epsilon:10.7f} {res.details['evaluations']:5d} {cpu:6.2f} "
              f"{wall:6.2f} | {their:17.7f} {tw * 1e3:16.1f}")
    print(f"{len(CALIBRATIONS)} calibrations: {total:.2f} s CPU in all")


def main() -> None:
    from dp_accounting import dp_event as dpe
    from dp_accounting.rdp import rdp_privacy_accountant as dpa_rdp

    from dpcalc.accounting.rdp import RdpAccountant
    from dpcalc.events import TuningEvent, dpsgd_event

    RdpAccountant().epsilon(TuningEvent(dpsgd_event(noise_multiplier=1.0, sample_rate=0.5, steps=3),
                                        "poisson", 2.0), delta=DELTA)  # warm-up: imports
    print(f"delta = {DELTA:g}; dpcalc rdp vs dp_accounting RdpAccountant (default orders)")
    print(f"{'run (sigma, q, T)':>22} {'law':>18} {'E[K]':>6} {'eta':>4} | {'dpcalc eps':>11} "
          f"{'dp_accounting':>13} {'rel. diff':>10} | {'dpcalc wall/CPU ms':>19} {'dp_acc wall/CPU ms':>19}")
    worst, n = -math.inf, 0
    for sigma, q, steps in RUNS:
        base = dpsgd_event(noise_multiplier=sigma, sample_rate=q, steps=steps)
        g = dpe.GaussianDpEvent(sigma)
        their_base = dpe.SelfComposedDpEvent(g if q == 1 else dpe.PoissonSampledDpEvent(q, g), steps)
        for law, mean, eta in LAWS:
            event = TuningEvent(base, law, mean, eta)
            ours, ow, oc = _timed(lambda event=event: RdpAccountant().epsilon(event, delta=DELTA).epsilon)
            shape = {"poisson": math.inf, "geometric": 1.0, "logarithmic": 0.0}.get(law, eta)

            their_event = dpe.RepeatAndSelectDpEvent(their_base, mean, shape)

            def theirs(ev=their_event):
                acc = dpa_rdp.RdpAccountant()
                acc.compose(ev)
                return acc.get_epsilon(DELTA)

            their, tw, tc = _timed(theirs)
            rel = ours / their - 1
            worst, n = max(worst, rel), n + 1
            print(f"{f'({sigma:g}, {q:g}, {steps})':>22} {law:>18} {mean:6g} {eta if eta is not None else '':>4} | "
                  f"{ours:11.6f} {their:13.6f} {rel:+10.2e} | {ow * 1e3:8.1f} /{oc * 1e3:8.1f} "
                  f"{tw * 1e3:8.1f} /{tc * 1e3:8.1f}")
    print(f"{n} settings; largest (dpcalc / dp_accounting - 1): {worst:+.2e} "
          f"({'never above dp_accounting' if worst <= 0 else 'ABOVE dp_accounting somewhere'})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calibrate", action="store_true", help="time the per-run σ calibration")
    parser.add_argument("--src", default=None, help="run dpcalc from this source tree (before/after)")
    args = parser.parse_args()
    if args.src:
        sys.path.insert(0, args.src)
    calibrate() if args.calibrate else main()
