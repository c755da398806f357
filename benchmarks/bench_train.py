"""Training throughput of dpcalc's DP-SGD step against Opacus and non-private SGD.

Same model (the tanh CNN of Papernot et al. 2021, 26,010 parameters), same batch of
random 28×28 inputs, same clipping norm and noise multiplier, CPU, ``--threads`` torch
threads. Each method runs ``--steps`` steps per round; rounds are interleaved
(dpcalc, Opacus, non-private, dpcalc, ...) so that load from other processes hits all
of them alike, and the median round is reported. Prints examples/s and the ratios.

* dpcalc: :class:`dpcalc.train.dpsgd.DPSGDStep` (per-example gradients from one batched
  forward/backward pass and closed-form per-layer formulas, clipping over all parameters,
  Gaussian noise, SGD step).
* dpcalc (torch.func): the same step forced onto its generic ``vmap`` path (the fallback
  for models the fast path does not cover), for reference.
* Opacus: ``GradSampleModule`` + ``DPOptimizer`` (per-sample gradients by hooks,
  the same clipping and noise), SGD.
* non-private: plain forward/backward/SGD step.

Allocator: by default (``--malloc keep``) glibc keeps freed memory in the process, as
``dpcalc train`` has it (dpcalc/train/memory.py), for every method alike; ``--malloc default``
leaves glibc's defaults.

Run: ``.venv/bin/python benchmarks/bench_train.py [--batch-size 256] [--threads 2]``
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=10, help="steps per round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--sigma", type=float, default=1.0)
    parser.add_argument("--max-grad-norm", type=float, default=0.1)
    parser.add_argument("--malloc", choices=["keep", "default"], default="keep",
                        help="keep (what dpcalc train does) or glibc's defaults, for every method alike")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.malloc == "keep":
        from dpcalc.train.memory import keep_freed_memory

        keep_freed_memory()

    from dpcalc.train.dpsgd import DPSGDStep
    from dpcalc.train.models import build_model

    b = args.batch_size
    g = torch.Generator().manual_seed(0)
    x = torch.randn(b, 1, 28, 28, generator=g)
    y = torch.randint(0, 10, (b,), generator=g)

    # dpcalc
    m1 = build_model("tanh-cnn", seed=0)
    opt1 = torch.optim.SGD(m1.parameters(), lr=0.01, momentum=0.9)
    dp = DPSGDStep(m1, opt1, noise_multiplier=args.sigma, max_grad_norm=args.max_grad_norm,
                   expected_batch_size=float(b), max_physical_batch=b,
                   noise_generator=torch.Generator().manual_seed(1))

    def dpcalc_step() -> None:
        dp.step(x, y)

    m0 = build_model("tanh-cnn", seed=0)
    dp_generic = DPSGDStep(m0, torch.optim.SGD(m0.parameters(), lr=0.01, momentum=0.9),
                           noise_multiplier=args.sigma, max_grad_norm=args.max_grad_norm,
                           expected_batch_size=float(b), max_physical_batch=b,
                           noise_generator=torch.Generator().manual_seed(1))
    dp_generic._layers = None  # force the torch.func path

    def dpcalc_generic_step() -> None:
        dp_generic.step(x, y)

    # Opacus
    methods = {"dpcalc": dpcalc_step, "dpcalc (torch.func)": dpcalc_generic_step}
    try:
        from opacus import GradSampleModule
        from opacus.optimizers import DPOptimizer

        m2 = GradSampleModule(build_model("tanh-cnn", seed=0))
        opt2 = DPOptimizer(torch.optim.SGD(m2.parameters(), lr=0.01, momentum=0.9),
                           noise_multiplier=args.sigma, max_grad_norm=args.max_grad_norm,
                           expected_batch_size=b)

        def opacus_step() -> None:
            opt2.zero_grad(set_to_none=True)
            F.cross_entropy(m2(x), y).backward()
            opt2.step()

        methods["opacus"] = opacus_step
    except ImportError:
        print("opacus not installed: skipping it")

    # non-private
    m3 = build_model("tanh-cnn", seed=0)
    opt3 = torch.optim.SGD(m3.parameters(), lr=0.01, momentum=0.9)

    def plain_step() -> None:
        opt3.zero_grad(set_to_none=True)
        F.cross_entropy(m3(x), y).backward()
        opt3.step()

    methods["non-private"] = plain_step

    for f in methods.values():  # warm up
        for _ in range(3):
            f()
    rates: dict[str, list[float]] = {k: [] for k in methods}
    for _ in range(args.rounds):
        for name, f in methods.items():
            t = time.perf_counter()
            for _ in range(args.steps):
                f()
            rates[name].append(args.steps * b / (time.perf_counter() - t))
    med = {k: statistics.median(v) for k, v in rates.items()}
    print(f"tanh CNN (26,010 parameters), batch {b}, {args.threads} threads, torch {torch.__version__}, "
          f"median of {args.rounds} interleaved rounds of {args.steps} steps, malloc {args.malloc}")
    for name, r in med.items():
        spread = f"[{min(rates[name]):,.0f} .. {max(rates[name]):,.0f}]"
        print(f"  {name:20s} {r:10,.0f} examples/s   rounds {spread}")
    if "opacus" in med:
        print(f"dpcalc / opacus      = {med['dpcalc'] / med['opacus']:.2f}  (target >= 1.3)")
    print(f"dpcalc / non-private = {med['dpcalc'] / med['non-private']:.2f}  (target >= 0.5)")
    print(f"dpcalc / dpcalc (torch.func) = {med['dpcalc'] / med['dpcalc (torch.func)']:.2f}")


if __name__ == "__main__":
    main()
