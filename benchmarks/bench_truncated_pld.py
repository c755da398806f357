"""Benchmark (issue 32): pld on truncated-Poisson batches against rdp, dp_accounting's PLD
accountant and issue 32's reference bracket.

Rows: the issue's two truncated rows (B 256, N 60,000, E 10 → T = ⌈E·N/B⌉ = 2,344 steps as
``dpcalc epsilon --sampling truncated-poisson`` counts them, σ 1.1, δ 1e-5, B_max 300 and 256)
and a few more. For each: dpcalc pld's certified ε and its proven lower bound (of the dominating
pair), rdp's ε, dp_accounting's PLD ε (``TruncatedSubsampledGaussianDpEvent``, grid
``--interval``, at dataset_size N and N + 1: dpcalc covers both neighbours), the ratios
pld / dp_accounting and pld / rdp, and the wall time of each (one cold call).

Targets (issue 32): pld within 5% of the reference upper end (2.181, 5.286), ideally at or below
dp_accounting (2.167, 5.735 at its grid 1e-4).

Run:  .venv/bin/python benchmarks/bench_truncated_pld.py [--interval 1e-4] [--no-peer]
"""

from __future__ import annotations

import argparse
import time

#: (q, N, B_max, σ, T, δ, issue 32's reference upper end or None)
CASES = [
    (256 / 60000, 60000, 300, 1.1, 2344, 1e-5, 2.181),
    (256 / 60000, 60000, 256, 1.1, 2344, 1e-5, 5.286),
    (256 / 60000, 60000, 256, 1.1, 14063, 1e-5, None),
    (0.01, 10000, 110, 1.0, 1000, 1e-5, None),
    (0.05, 1000, 55, 2.0, 500, 1e-5, None),
]


def _timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--interval", type=float, default=1e-4, help="dp_accounting's grid (default 1e-4)")
    parser.add_argument("--no-peer", action="store_true", help="skip dp_accounting")
    args = parser.parse_args()

    from dpcalc.accounting.pld import PldAccountant
    from dpcalc.accounting.rdp import RdpAccountant
    from dpcalc.events import GaussianEvent, SelfComposedEvent, TruncatedPoissonSampledEvent

    def peer(n, q, bmax, sigma, steps, delta):
        import dp_accounting as dpa

        acc = dpa.pld.PLDAccountant(value_discretization_interval=args.interval)
        acc.compose(dpa.TruncatedSubsampledGaussianDpEvent(n, q, bmax, sigma), steps)
        return acc.get_epsilon(delta)

    print(f"{'q':>8} {'N':>7} {'B_max':>5} {'σ':>4} {'T':>6} | {'pld':>8} {'lower':>8} {'s':>5} | "
          f"{'rdp':>7} {'s':>5} | {'dp_acc N':>8} {'N+1':>8} {'s':>5} | {'pld/dpa':>7} {'pld/rdp':>7} "
          f"{'pld/ref':>7}")
    for q, n, bmax, sigma, steps, delta, ref in CASES:
        event = SelfComposedEvent(TruncatedPoissonSampledEvent(q, n, bmax, GaussianEvent(sigma)), steps)
        res, t_pld = _timed(lambda event=event, delta=delta: PldAccountant().epsilon(event, delta=delta))
        rdp, t_rdp = _timed(lambda event=event, delta=delta: RdpAccountant().epsilon(event, delta=delta))
        if args.no_peer:
            d1 = d2 = float("nan")
            t_peer = 0.0
        else:
            case = (q, bmax, sigma, steps, delta)
            (d1, d2), t_peer = _timed(lambda n=n, case=case: (peer(n, *case), peer(n + 1, *case)))
        ratio_ref = f"{res.epsilon / ref:7.4f}" if ref else f"{'—':>7}"
        print(f"{q:8.5f} {n:7d} {bmax:5d} {sigma:4.1f} {steps:6d} | {res.epsilon:8.4f} "
              f"{res.details['epsilon_lower']:8.4f} {t_pld:5.2f} | {rdp.epsilon:7.3f} {t_rdp:5.2f} | "
              f"{d1:8.4f} {d2:8.4f} {t_peer:5.1f} | {res.epsilon / max(d1, d2):7.4f} "
              f"{res.epsilon / rdp.epsilon:7.4f} {ratio_ref}", flush=True)


if __name__ == "__main__":
    main()
