"""Benchmark (issue 12): ``dpcalc sigma --sampling without-replacement`` against the Poisson path.

Case (Opacus MNIST example): batch 256 of 60,000, 60 epochs -> T = 14,063 steps, δ = 1e-5,
target ε = 3 (and shorter runs: 20 and 5 epochs). Each σ is calibrated exactly as ``dpcalc sigma`` does
(:func:`dpcalc.accounting.dpsgd.noise_multiplier_by_accountant`: σ to 1e-6 relative, verified
by the accountant), i.e. at the same accuracy. Rows:

* ``poisson rdp``  — Poisson sampling, the rdp accountant (the same accountant and accuracy as
  the sampler below: the like-for-like ratio);
* ``poisson pld``  — Poisson sampling, the default accountant of ``dpcalc sigma``;
* ``wor pld``      — ``--sampling without-replacement --neighboring replace`` with its default
  accountant pld (the symmetric pair of Dong, Roth, Su 2022 §4.1);
* ``wor rdp``      — the same with rdp (Wang, Balle, Kasiviswanathan 2019 Thm 9);
* ``truncated rdp`` — ``--sampling truncated-poisson --max-batch-size 300``;
* ``shuffle pld`` / ``shuffle rdp`` — ``--sampling shuffle`` (zero-out: the Gaussian composed
  once per epoch, T = E·⌈N/B⌉ steps);
* ``shuffle pld+br`` — what ``dpcalc sigma --sampling shuffle`` does: the calibration plus the
  bracket printed at the σ found (Chua et al. lower bound and the Poisson pld ε,
  :func:`dpcalc.accounting.shuffling.steps_bracket`).

Best of ``--repeat`` warm runs (and the first, cold call) each; the ratios are against
``poisson rdp`` and ``poisson pld``. Target (issue 12): the without-replacement path no slower
than 2× the Poisson path with the same accountant (same accuracy); the same for shuffle (with
its bracket: against ``poisson pld``).

Run:  .venv/bin/python benchmarks/bench_sampling.py [--repeat 5] [--epochs 60 20 5] [--runs 3]

``--runs K`` measures everything K times and ends with the median of each ratio over the runs.
"""

from __future__ import annotations

import argparse
import math
import statistics

from bench_sigma import best_of  # the same timing helper (benchmarks/ is on sys.path when run)

N, B, DELTA, TARGET = 60_000, 256, 1e-5, 3.0


def measure(epochs: int, repeat: int) -> dict[str, float]:
    """Print the table for one run length; return the best time per path."""
    from dpcalc.accounting.dpsgd import noise_multiplier_by_accountant
    from dpcalc.schedule import resolve_schedule

    print(f"\nsigma: B = {B}, N = {N:,}, {epochs} epochs (T = {math.ceil(epochs * N / B):,}), "
          f"delta = {DELTA:g}, eps = {TARGET:g}; best of {repeat}")
    cases = {
        "poisson rdp": ("poisson", "rdp", "add-remove", None),
        "poisson pld": ("poisson", "pld", "add-remove", None),
        "wor pld": ("without-replacement", "pld", "replace", None),
        "wor rdp": ("without-replacement", "rdp", "replace", None),
        "truncated rdp": ("truncated-poisson", "rdp", "add-remove", 300),
        "shuffle pld": ("shuffle", "pld", "add-remove", None),
        "shuffle rdp": ("shuffle", "rdp", "add-remove", None),
        "shuffle pld+br": ("shuffle", "pld", "add-remove", None),
    }
    times = {}
    print(f"{'path':<15} {'first s':>9} {'best s':>9} {'sigma':>11}  {'vs poisson rdp':>15} {'vs poisson pld':>15}")
    for label, (sampling, acc, nb, bmax) in cases.items():
        sched = resolve_schedule(batch_size=B, dataset_size=N, epochs=epochs, sampling=sampling,
                                 max_batch_size=bmax)

        with_bracket = label.endswith("+br")

        def run(sched=sched, acc=acc, nb=nb, bracket=with_bracket):
            res = noise_multiplier_by_accountant(target_epsilon=TARGET, delta=DELTA, schedule=sched,
                                                 accountants=[acc], neighboring=nb)[0]
            if bracket:
                from dpcalc.accounting.shuffling import steps_bracket

                steps_bracket(sampler="shuffle", noise_multiplier=res.noise_multiplier, batch_size=B,
                              dataset_size=N, steps=sched.steps, delta=DELTA)
            return res

        first, best, res = best_of(run, repeat)
        times[label] = best
        r1 = best / times["poisson rdp"]
        r2 = best / times.get("poisson pld", best)
        print(f"{label:<15} {first:9.3f} {best:9.3f} {res.noise_multiplier:11.7f}  {r1:15.2f} {r2:15.2f}")
    r = ratios(times)
    print(f"without-replacement / Poisson, same accountant: pld {r['wor pld']:.2f}x, rdp {r['wor rdp']:.2f}x "
          f"(target <= 2x): {'OK' if max(r['wor pld'], r['wor rdp']) <= 2.0 else 'SLOWER'}")
    print(f"shuffle / Poisson, same accountant: pld {r['shuffle pld']:.2f}x, rdp {r['shuffle rdp']:.2f}x, sigma "
          f"with its bracket (pld) {r['shuffle pld+br']:.2f}x (target <= 2x): "
          f"{'OK' if max(r['shuffle pld'], r['shuffle rdp'], r['shuffle pld+br']) <= 2.0 else 'SLOWER'}")
    return times


def ratios(times: dict[str, float]) -> dict[str, float]:
    """The target's ratios: each sampler against the Poisson path with the same accountant
    (shuffle with its bracket against Poisson pld)."""
    return {"wor pld": times["wor pld"] / times["poisson pld"],
            "wor rdp": times["wor rdp"] / times["poisson rdp"],
            "shuffle pld": times["shuffle pld"] / times["poisson pld"],
            "shuffle rdp": times["shuffle rdp"] / times["poisson rdp"],
            "shuffle pld+br": times["shuffle pld+br"] / times["poisson pld"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=5, help="warm calls per path (best kept)")
    ap.add_argument("--epochs", type=int, nargs="+", default=[60, 20, 5], help="run lengths (epochs)")
    ap.add_argument("--runs", type=int, default=1,
                    help="measure everything this many times and print the median ratios (a shared "
                         "machine's load varies from run to run)")
    args = ap.parse_args()

    per_epochs: dict[int, list[dict[str, float]]] = {e: [] for e in args.epochs}
    for k in range(args.runs):
        if args.runs > 1:
            print(f"\n=== run {k + 1} of {args.runs}")
        for epochs in args.epochs:
            per_epochs[epochs].append(ratios(measure(epochs, args.repeat)))
    print(f"\nmedian ratio over {args.runs} run(s) (target <= 2x; wor/shuffle against Poisson, same accountant):")
    print(f"{'epochs':>6}  " + "  ".join(f"{k:>14}" for k in per_epochs[args.epochs[0]][0]))
    for epochs, runs in per_epochs.items():
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        print(f"{epochs:>6}  " + "  ".join(f"{v:13.2f}x" for v in med.values())
              + ("  OK" if max(med.values()) <= 2.0 else "  SLOWER"))

if __name__ == "__main__":
    main()
