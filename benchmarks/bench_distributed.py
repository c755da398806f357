"""Data-parallel DP-SGD: 2 processes × 1 thread against 1 process × 2 threads, and the cost of the all-reduce.

The same DP-SGD step (tanh CNN of Papernot et al. 2021, 26,010 parameters; random 28×28 inputs;
C = 0.1, σ = 1; SGD with momentum) on a batch of ``--batch-size`` examples per step:

* 1 process × 2 threads: :class:`dpcalc.train.dpsgd.DPSGDStep` on the whole batch, torch with
  ``--threads`` threads (2).
* 2 processes × 1 thread: :class:`dpcalc.train.distributed.DistributedDPSGDStep` over a gloo
  process group (what ``dpcalc train --nproc 2`` runs), each rank clipping half the batch,
  rank 0 adding the noise, one all-reduce of the P + 2 values.

For reference, 1 process × 1 thread as well.

Rounds of ``--steps`` steps alternate (1-process rounds before and after the 2-process ones,
which run in two worker processes started once); medians are reported, with the throughput
ratio. Communication: the time each rank spends in the step's all-reduce (waiting for the
other rank included), and a bare all-reduce of the same P + 2 floats after a barrier (the
transfer alone).

Allocator: by default (``--malloc keep``) every process keeps freed memory, as each
``dpcalc train`` process does (dpcalc/train/memory.py); ``--malloc default`` leaves glibc's.

Run: ``.venv/bin/python benchmarks/bench_distributed.py [--batch-size 256] [--steps 10] [--rounds 6]``
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import time

import torch
import torch.multiprocessing as mp


def _data(b: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, 1, 28, 28, generator=g), torch.randint(0, 10, (b,), generator=g)


def _step_args(b: int) -> dict:
    return dict(noise_multiplier=1.0, max_grad_norm=0.1, expected_batch_size=float(b),
                max_physical_batch=b, noise_generator=torch.Generator().manual_seed(1))


def one_process_rounds(b: int, steps: int, rounds: int, threads: int) -> list[float]:
    """Seconds per round of ``steps`` steps, one process, ``threads`` threads."""
    from dpcalc.train.dpsgd import DPSGDStep
    from dpcalc.train.models import build_model

    torch.set_num_threads(threads)
    x, y = _data(b)
    model = build_model("tanh-cnn", seed=0)
    dp = DPSGDStep(model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9), **_step_args(b))
    dp.step(x, y)  # warm-up
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(steps):
            dp.step(x, y)
        times.append(time.perf_counter() - t0)
    return times


def _worker(rank: int, world: int, port: int, b: int, steps: int, rounds: int, malloc: str, queue) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    _set_allocator(malloc)
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    from dpcalc.train.distributed import Context, DistributedDPSGDStep, shard_bounds
    from dpcalc.train.models import build_model

    context = Context(rank=rank, world_size=world)
    comm: list[float] = []
    reduce = context.all_reduce_

    def timed_reduce(t: torch.Tensor) -> torch.Tensor:
        t0 = time.perf_counter()
        out = reduce(t)
        comm.append(time.perf_counter() - t0)
        return out

    context.all_reduce_ = timed_reduce  # type: ignore[method-assign]
    x, y = _data(b)
    lo, hi = shard_bounds(b, world, rank)
    x, y = x[lo:hi].clone(), y[lo:hi].clone()
    model = build_model("tanh-cnn", seed=0)
    dp = DistributedDPSGDStep(model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
                              context=context, **_step_args(b))
    dp.step(x, y)  # warm-up
    context.barrier()
    times = []
    comm.clear()
    for _ in range(rounds):
        context.barrier()
        t0 = time.perf_counter()
        for _ in range(steps):
            dp.step(x, y)
        times.append(time.perf_counter() - t0)
    # the transfer alone: the same buffer after a barrier
    buf = torch.zeros(dp.num_parameters + 2)
    bare = []
    for _ in range(50):
        context.barrier()
        t0 = time.perf_counter()
        torch.distributed.all_reduce(buf)
        bare.append(time.perf_counter() - t0)
    queue.put((rank, times, comm, bare, dp.num_parameters))
    context.close()


def _set_allocator(malloc: str) -> None:
    """``keep``: glibc keeps freed memory, as each ``dpcalc train`` process does."""
    if malloc == "keep":
        from dpcalc.train.memory import keep_freed_memory

        keep_freed_memory()


def two_process_rounds(b: int, steps: int, rounds: int, malloc: str, world: int = 2) -> dict:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(r, world, port, b, steps, rounds, malloc, queue)) for r in range(world)]
    for p in procs:
        p.start()
    results = {}
    for _ in procs:
        rank, times, comm, bare, params = queue.get(timeout=600)
        results[rank] = (times, comm, bare, params)
    for p in procs:
        p.join()
        if p.exitcode != 0:
            raise SystemExit(f"worker exited with {p.exitcode}")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--steps", type=int, default=10, help="steps per round")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--threads", type=int, default=2, help="threads of the 1-process run")
    parser.add_argument("--malloc", choices=["keep", "default"], default="keep",
                        help="keep (what dpcalc train does, every process) or glibc's defaults")
    args = parser.parse_args()
    b, steps, rounds = args.batch_size, args.steps, args.rounds
    _set_allocator(args.malloc)

    before = one_process_rounds(b, steps, (rounds + 1) // 2, args.threads)
    single_before = one_process_rounds(b, steps, (rounds + 1) // 2, 1)
    dist = two_process_rounds(b, steps, rounds, args.malloc)
    single_after = one_process_rounds(b, steps, rounds // 2, 1)
    after = one_process_rounds(b, steps, rounds // 2, args.threads)
    single = [steps * b / t for t in single_before + single_after]

    one = [steps * b / t for t in before + after]
    # a round of the 2-process run ends when both ranks are done: the slower rank's time
    two = [steps * b / max(t0, t1) for t0, t1 in zip(dist[0][0], dist[1][0], strict=True)]
    params = dist[0][3]
    print(f"tanh CNN ({params:,} parameters), batch {b} per step, torch {torch.__version__}, "
          f"{rounds} rounds of {steps} steps, median, malloc {args.malloc}")
    print(f"  1 process  x {args.threads} threads  {statistics.median(one):>8,.0f} examples/s   "
          f"rounds [{min(one):,.0f} .. {max(one):,.0f}]")
    print(f"  2 processes x 1 thread   {statistics.median(two):>8,.0f} examples/s   "
          f"rounds [{min(two):,.0f} .. {max(two):,.0f}]")
    print(f"  1 process  x 1 thread    {statistics.median(single):>8,.0f} examples/s   "
          f"rounds [{min(single):,.0f} .. {max(single):,.0f}]")
    print(f"(2 processes x 1 thread) / (1 process x {args.threads} threads) = "
          f"{statistics.median(two) / statistics.median(one):.2f}")
    print(f"(2 processes x 1 thread) / (1 process x 1 thread) = "
          f"{statistics.median(two) / statistics.median(single):.2f}")
    step_ms = statistics.median(max(t0, t1) for t0, t1 in zip(dist[0][0], dist[1][0], strict=True)) / steps * 1e3
    for rank in (0, 1):
        comm = dist[rank][1]
        print(f"  rank {rank}: all-reduce in the step {statistics.median(comm) * 1e3:.3f} ms median "
              f"(waiting for the other rank included), of a {step_ms:.1f} ms step")
    bare = dist[0][2]
    print(f"  bare all-reduce of {params + 2:,} float32 (gloo, after a barrier): "
          f"{statistics.median(bare) * 1e3:.3f} ms median, [{min(bare) * 1e3:.3f} .. {max(bare) * 1e3:.3f}]")


if __name__ == "__main__":
    main()
