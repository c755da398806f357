"""Throughput and memory of dpcalc's per-example clipping (ghost norms + book-keeping) against
non-private SGD and Opacus, on the tanh CNN and a larger GroupNorm CNN.

Methods, all with SGD on the same random 28×28 batch, clipping norm and noise multiplier:

* dpcalc: :class:`dpcalc.train.dpsgd.DPSGDStep` — one forward pass, one backward pass to the
  layer outputs, per layer the cheaper of ghost norm (Li et al. 2022) and materialised
  per-example gradient, book-keeping sum (Bu et al. 2023); dpcalc/train/ghost.py.
* Opacus in each of its per-example modes (``grad_sample_mode`` of ``PrivacyEngine``), the
  fastest of which is the comparison ("opacus best"):

  - opacus: ``GradSampleModule`` + ``DPOptimizer``, per-example gradients by module hooks
    (``"hooks"``, Opacus's default);
  - opacus-functorch: the same with ``force_functorch=True`` (``"functorch"``: per-example
    gradients of every layer by ``torch.func``);
  - opacus-ew: ``GradSampleModuleExpandedWeights`` (``"ew"``: PyTorch's ExpandedWeights);
  - opacus-ghost: Opacus's own ghost clipping (``"ghost"``:
    ``GradSampleModuleFastGradientClipping``, ``DPOptimizerFastGradientClipping``,
    ``DPLossFastGradientClipping``: ghost norms, then a second backward pass).
  A mode that fails on a model (raises) is reported as such and left out.
* non-private: plain forward/backward/SGD step.

All methods use the same model (same initial weights), the same batch, SGD with momentum 0.9
and the same learning rate; the DP methods the same σ, C and expected batch size.

Bound on the Opacus target. Every DP method here runs the model's forward and backward
passes and then more (norms, clipping, noise), so its throughput is at most that of
non-private SGD: dpcalc / opacus ≤ (non-private / opacus). The benchmark prints that ceiling
(non-private / opacus best) next to the measured ratio.

Allocator: by default (``--malloc keep``) glibc keeps freed memory in the process, as
``dpcalc train`` has it (dpcalc/train/memory.py), for every method alike; ``--malloc default``
leaves glibc's defaults, under which each step's large tensors are mapped and page-faulted
afresh (system time then rivals user time, and it slows the methods unequally).

Throughput: each method runs ``--steps`` steps per round, rounds interleaved (dpcalc, opacus,
..., dpcalc, ...) so that load from other processes hits all alike; the median round is
reported, and each ratio is the median over rounds of the ratio within a round. On a shared
machine ``--clock cpu`` (process CPU time instead of elapsed time) is far steadier.
Peak memory: each (model, batch, method) in a fresh subprocess; the rise of the peak resident
set size (VmHWM, reset after set-up) over the resident size after set-up, during three steps,
divided by the batch size (Linux only; left out elsewhere). It includes the step's activations
and what the method keeps per example, and one-time buffers (e.g. oneDNN's).

Run: ``.venv/bin/python benchmarks/bench_clipping.py [--batch-sizes 256 1024] [--threads 2]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import warnings

import torch
import torch.nn.functional as F
from torch import nn

METHODS = ("dpcalc", "opacus", "opacus-functorch", "opacus-ew", "opacus-ghost", "non-private")
OPACUS = tuple(m for m in METHODS if m.startswith("opacus"))


def larger_cnn() -> nn.Module:
    """A 3-block GroupNorm CNN for 28×28 grey-scale images (390,858 parameters)."""
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.GroupNorm(4, 32), nn.Tanh(), nn.MaxPool2d(2),     # 14×14
        nn.Conv2d(32, 64, 3, padding=1), nn.GroupNorm(8, 64), nn.Tanh(), nn.MaxPool2d(2),    # 7×7
        nn.Conv2d(64, 128, 3, padding=1), nn.GroupNorm(8, 128), nn.Tanh(), nn.MaxPool2d(2),  # 3×3
        nn.Flatten(), nn.Linear(128 * 9, 256), nn.Tanh(), nn.Linear(256, 10))


def make_model(name: str) -> nn.Module:
    torch.manual_seed(0)
    if name == "tanh-cnn":
        from dpcalc.train.models import build_model

        return build_model("tanh-cnn", seed=0)
    return larger_cnn()


def make_step(method: str, model_name: str, b: int, sigma: float, clip: float):
    """A zero-argument function doing one training step of ``method`` on a fixed batch."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(b, 1, 28, 28, generator=g)
    y = torch.randint(0, 10, (b,), generator=g)
    model = make_model(model_name)
    sgd = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    if method == "dpcalc":
        from dpcalc.train.dpsgd import DPSGDStep

        dp = DPSGDStep(model, sgd, noise_multiplier=sigma, max_grad_norm=clip, expected_batch_size=float(b),
                       max_physical_batch=b, noise_generator=torch.Generator().manual_seed(1))
        assert dp.uses_fast_path
        return lambda: dp.step(x, y)
    if method in ("opacus", "opacus-functorch", "opacus-ew"):
        from opacus.grad_sample import GradSampleModule, GradSampleModuleExpandedWeights
        from opacus.optimizers import DPOptimizer

        if method == "opacus-ew":
            gm = GradSampleModuleExpandedWeights(model)
        else:
            gm = GradSampleModule(model, force_functorch=method == "opacus-functorch")
        opt = DPOptimizer(torch.optim.SGD(gm.parameters(), lr=0.01, momentum=0.9), noise_multiplier=sigma,
                          max_grad_norm=clip, expected_batch_size=b)

        def opacus_step() -> None:
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(gm(x), y).backward()
            opt.step()
        return opacus_step
    if method == "opacus-ghost":
        from opacus.grad_sample import GradSampleModuleFastGradientClipping
        from opacus.optimizers import DPOptimizerFastGradientClipping
        from opacus.utils.fast_gradient_clipping_utils import DPLossFastGradientClipping

        gm = GradSampleModuleFastGradientClipping(model, max_grad_norm=clip, use_ghost_clipping=True)
        opt = DPOptimizerFastGradientClipping(torch.optim.SGD(gm.parameters(), lr=0.01, momentum=0.9),
                                              noise_multiplier=sigma, max_grad_norm=clip, expected_batch_size=b)
        crit = DPLossFastGradientClipping(gm, opt, nn.CrossEntropyLoss())

        def ghost_step() -> None:
            opt.zero_grad(set_to_none=True)
            crit(gm(x), y).backward()
            opt.step()
        return ghost_step

    def plain_step() -> None:
        sgd.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        sgd.step()
    return plain_step


def available(method: str) -> bool:
    if not method.startswith("opacus"):
        return True
    try:
        import opacus  # noqa: F401
    except ImportError:
        return False
    return True


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise OSError(f"{field} not in /proc/self/status")


def memory_probe(method: str, model_name: str, b: int, sigma: float, clip: float) -> None:
    """(Subprocess) print, as JSON, the peak resident memory of three steps above the resident
    memory after set-up (model, optimiser, batch), in bytes per example (Linux: VmHWM is reset
    by writing 5 to /proc/self/clear_refs). The base is taken before the first step: the
    allocator keeps freed blocks, so a base taken after a step would hide the working set."""
    step = make_step(method, model_name, b, sigma, clip)
    base = _status_kib("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    for _ in range(3):
        step()
    peak = _status_kib("VmHWM")
    print(json.dumps({"bytes_per_example": (peak - base) * 1024 / b}))


def peak_memory(method: str, model_name: str, b: int, args) -> float | None:
    cmd = [sys.executable, __file__, "--probe", method, model_name, str(b), "--threads", str(args.threads),
           "--malloc", args.malloc,
           "--sigma", str(args.sigma), "--max-grad-norm", str(args.max_grad_norm)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])["bytes_per_example"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--models", nargs="+", default=["tanh-cnn", "larger-cnn"])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3, help="steps per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sigma", type=float, default=1.0)
    parser.add_argument("--max-grad-norm", type=float, default=0.1)
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                        help="wall: elapsed time; cpu: this process's CPU time (all its threads), "
                             "which other processes' load disturbs far less (with --threads 1 it is "
                             "the elapsed time of an idle machine)")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory subprocesses")
    parser.add_argument("--malloc", choices=["keep", "default"], default="keep",
                        help="keep: glibc keeps freed memory (dpcalc.train.memory.keep_freed_memory, "
                             "what dpcalc train does), for every method alike; default: glibc's "
                             "defaults (each step's large tensors page-fault afresh)")
    parser.add_argument("--probe", nargs=3, metavar=("METHOD", "MODEL", "B"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.malloc == "keep":
        from dpcalc.train.memory import keep_freed_memory

        keep_freed_memory()
    warnings.filterwarnings("ignore", message="Full backward hook")  # Opacus on a model whose input needs no grad
    if args.probe:
        memory_probe(args.probe[0], args.probe[1], int(args.probe[2]), args.sigma, args.max_grad_norm)
        return

    methods = [m for m in METHODS if m in args.methods and available(m)]
    clock = time.perf_counter if args.clock == "wall" else time.process_time
    print(f"torch {torch.__version__}, {args.threads} threads, σ = {args.sigma}, C = {args.max_grad_norm}, "
          f"malloc {args.malloc}; "
          f"{args.clock} clock, median of {args.rounds} interleaved rounds of {args.steps} steps")
    for model_name in args.models:
        n_params = sum(p.numel() for p in make_model(model_name).parameters())
        for b in args.batch_sizes:
            steps = {}
            failed = {}
            for m in methods:
                try:
                    f = make_step(m, model_name, b, args.sigma, args.max_grad_norm)
                    f()  # warm up
                except Exception as e:  # an Opacus mode that does not support this model
                    failed[m] = f"{type(e).__name__}: {str(e).splitlines()[0][:80] if str(e) else ''}"
                    continue
                steps[m] = f
            rates: dict[str, list[float]] = {m: [] for m in steps}
            for _ in range(args.rounds):
                for m, f in steps.items():
                    t = clock()
                    for _ in range(args.steps):
                        f()
                    rates[m].append(args.steps * b / (clock() - t))
            med = {m: statistics.median(r) for m, r in rates.items()}
            del steps
            print(f"\n{model_name} ({n_params:,} parameters), batch {b}")
            for m in methods:
                if m in failed:
                    print(f"  {m:16s} failed: {failed[m]}")
                    continue
                mem = None if args.no_memory else peak_memory(m, model_name, b, args)
                mem_s = "" if mem is None else f"   peak memory {mem / 1024:8,.1f} KiB/example"
                print(f"  {m:16s} {med[m]:9,.0f} examples/s  [{min(rates[m]):,.0f} .. {max(rates[m]):,.0f}]{mem_s}")
            if "dpcalc" not in med or "non-private" not in med:
                continue

            def ratio(m1: str, m2: str, rates=rates) -> float:  # median over rounds of the ratio in a round
                return statistics.median(r1 / r2 for r1, r2 in zip(rates[m1], rates[m2], strict=True))
            print(f"  dpcalc / non-private    = {ratio('dpcalc', 'non-private'):.2f}  (target >= 0.9)")
            ops = [m for m in OPACUS if m in med]
            for m in ops:
                print(f"  dpcalc / {m:14s} = {ratio('dpcalc', m):.2f}")
            if ops:
                best = max(ops, key=lambda m: med[m])
                ceiling = ratio("non-private", best)
                print(f"  opacus best = {best}: dpcalc / {best} = {ratio('dpcalc', best):.2f} (target >= 2.5); "
                      f"ceiling for any DP method = non-private / {best} = {ceiling:.2f}"
                      f"{' < 2.5: target out of reach' if ceiling < 2.5 else ''}")
    print("\nnote: every DP method runs the model's forward and backward passes plus its clipping work, so "
          "its speed-up over Opacus is at most non-private / Opacus (the ceiling above); a target above "
          "the ceiling would need DP training faster than non-private training.")


if __name__ == "__main__":
    main()
