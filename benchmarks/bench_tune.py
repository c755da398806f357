"""Benchmark: ``dpcalc tune``'s repeat-and-select ε against dp_accounting's ``RepeatAndSelectDpEvent``.

Both apply Papernot & Steinke 2022 (Thm 2: truncated negative binomial, geometric, logarithmic;
Thm 6: Poisson) to the RDP curve of one DP-SGD run. dp_accounting uses its default order grid
(1.1 … 10.9 in steps of 0.1, then 11 … 63, 128 … 1024) for λ, λ̂ and the conversion giving δ̂;
dpcalc refines each of them off its grid (every order gives a valid bound), so its certified ε
must never be above dp_accounting's. Prints both ε side by side, their relative difference,
and the time of each (wall and CPU of this process).

Run:  .venv/bin/python benchmarks/bench_tune.py
"""

from __future__ import annotations

import math
import time

DELTA = 1e-5
#: (σ, q, T) of one run × (law, E[K], η)
RUNS = [(1.0, 0.01, 1000), (2.0, 0.004, 10_000), (0.8, 1.0, 1)]
LAWS = [("poisson", 10.0, None), ("poisson", 3.0, None), ("poisson", 100.0, None), ("geometric", 10.0, None),
        ("logarithmic", 10.0, None), ("negative-binomial", 10.0, 0.5), ("negative-binomial", 100.0, 2.0)]


def _timed(fn):
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


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
    main()
