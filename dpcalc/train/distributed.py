r"""Data-parallel DP-SGD on several processes (``torchrun``, ``dpcalc train --nproc W``) and devices.

The mechanism of one step is the single-process one of :mod:`dpcalc.train.dpsgd`, exactly
(docs/design.md §6):

.. math::
    \tilde g = \frac{1}{qN}\Big(\sum_{r=0}^{W-1} \sum_{i \in B \cap S_r} \mathrm{clip}_C(g_i)
               + \mathcal N(0, \sigma^2 C^2 I)\Big)

* **Global Poisson sampling.** The N records are split into W contiguous shards S_r
  (:func:`shard_bounds`). Every step, every rank draws the same N uniforms u_1…u_N from the
  sampling generator (seeded from ``--seed``, identical on all ranks) and takes record i of
  its shard iff u_i < q. The batch B = ∪_r (B ∩ S_r) is therefore the set {i : u_i < q} —
  each record included independently with probability q, whatever W — the batch of the
  single-process run with the same seed, draw for draw.
* **Per-example clipping on each rank**, then **one all-reduce** (sum) of a buffer holding the
  rank's clipped sum (P values), its loss sum and its batch size.
* **Noise exactly once per step:** only rank 0 draws z ~ N(0, σ²C²I) (from the noise generator,
  on the CPU, so the draw does not depend on W or on the device) and adds it to its own
  contribution *before* the all-reduce; the all-reduce hands every rank the same noisy sum
  Σ_r S_r + z. The other ranks never draw noise.
* **Division by the expected global batch size** qN on every rank, then the optimiser step
  (post-processing). Every rank applies the same update to the same weights.

Rank 0 owns the files: the privacy ledger (rewritten before every step, as in one process:
rank 0 writes it before it enters the step's all-reduce, and no rank can finish a step
without rank 0's contribution, so the ledger never shows fewer steps than were taken),
checkpoints, the log and the saved model, all written atomically.

Failures: the start of a run (data, calibration, resume checks) ends in an agreement — every
rank gathers every rank's outcome, and either all continue with the same (σ, q, planned steps,
budget, steps already recorded) or all stop with the first error (printed once, by rank 0).
A rank that dies mid-run breaks the collective its peers wait in; they stop with
:class:`PeerLostError` naming the step and the ledger's count.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import torch

from dpcalc import _validate as v
from dpcalc.errors import DpcalcError, ParameterError
from dpcalc.train.dpsgd import DPSGDStep, StepOutput

__all__ = ["DEVICES", "Context", "SilentError", "PeerLostError", "resolve_device", "shard_bounds",
           "ShardSampler", "DistributedDPSGDStep", "context_from_environment", "in_torchrun",
           "launch"]

#: True once this process joined a torch.distributed process group (dpcalc.cli leaves such a
#: process with os._exit: see dpcalc.cli._exit)
JOINED = False

DEVICES = ("auto", "cpu", "cuda")

#: how long a rank waits in a collective for its peers before giving up (a dead peer is
#: usually noticed at once: its connection closes)
COLLECTIVE_TIMEOUT = timedelta(minutes=10)

#: test hook: ``RANK:STEP`` makes that rank kill itself (SIGKILL) when the ledger reaches STEP
KILL_ENV = "DPCALC_TEST_KILL_RANK_AT"


class SilentError(DpcalcError):
    """Raised on ranks other than 0 when the whole job stops for an error rank 0 reports:
    the CLI exits with ``exit_code`` without printing (the message is printed once)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class PeerLostError(DpcalcError):
    """A collective failed: another rank died or stopped (exit status 1)."""


def resolve_device(choice: str) -> torch.device:
    """The torch device for ``--device`` (``auto``: CUDA when available, else the CPU).

    Raises:
        ParameterError: ``choice`` not in :data:`DEVICES`, or ``cuda`` without a CUDA device.
    """
    if choice not in DEVICES:
        raise ParameterError("device", f"one of {', '.join(DEVICES)}", choice)
    if choice == "cpu" or (choice == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ParameterError("device", "", choice, message=(
            f"--device cuda: no CUDA device is available (torch {torch.__version__}, "
            f"built with CUDA {torch.version.cuda or 'none'}); use --device cpu or auto"))
    return torch.device("cuda")


def shard_bounds(n: int, world_size: int, rank: int) -> tuple[int, int]:
    """Records [lo, hi) of rank ``rank``'s shard: W contiguous shards of ⌊N/W⌋ or ⌈N/W⌉ records
    (each non-empty when W ≤ N)."""
    return rank * n // world_size, (rank + 1) * n // world_size


class ShardSampler:
    """Global Poisson sampling restricted to one shard.

    Every rank draws the same N uniforms per step from ``generator`` (identical on all ranks) and
    keeps the records i in [lo, hi) with u_i < q: the union over the ranks is the batch
    {i : u_i < q} of :class:`dpcalc.train.dpsgd.PoissonSampler` with the same generator.

    Args:
        dataset_size: N ≥ 1. sample_rate: q in (0, 1]. generator: the sampling generator
            (CPU). lo, hi: the shard, 0 ≤ lo ≤ hi ≤ N.

    Raises:
        ParameterError: N < 1, q outside (0, 1], or a shard outside [0, N].
    """

    def __init__(self, *, dataset_size: int, sample_rate: float, generator: torch.Generator,
                 lo: int, hi: int) -> None:
        self.dataset_size = v.count("dataset_size", dataset_size)
        self.sample_rate = v.half_open_unit("sample_rate", sample_rate)
        self.generator = generator
        if not 0 <= lo <= hi <= dataset_size:
            raise ParameterError("shard", f"0 <= lo <= hi <= N = {dataset_size}", (lo, hi))
        self.lo, self.hi = lo, hi

    def sample(self) -> torch.Tensor:
        """Indices (relative to the shard, sorted int64) of this rank's part of the batch."""
        u = torch.rand(self.dataset_size, generator=self.generator)
        return (u[self.lo:self.hi] < self.sample_rate).nonzero().squeeze(1)


class Context:
    """The process group of a run (one process: rank 0 of 1, no communication).

    Attributes:
        rank, world_size, local_rank: as torchrun sets them. device: the torch device.
    """

    def __init__(self, *, rank: int = 0, world_size: int = 1, local_rank: int = 0,
                 device: torch.device | None = None) -> None:
        self.rank, self.world_size, self.local_rank = rank, world_size, local_rank
        self.device = device or torch.device("cpu")
        self.step = 0  # ledger step in progress (for error messages)
        self.ledger_note = ""  # where the ledger is, for error messages

    @property
    def distributed(self) -> bool:
        return self.world_size > 1 or torch.distributed.is_initialized()

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    # -- collectives (no-ops in one process) -------------------------------------------
    def _collective(self, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except (RuntimeError, OSError) as e:  # gloo/NCCL raise RuntimeError subclasses
            first = re.sub(r"^\[[^\]]*\]\s*", "", (str(e).strip().splitlines() or [""])[0])
            first = first.split(". ")[0][:120]
            where = f"during step {self.step}" if self.step else "while starting"
            raise PeerLostError(
                f"rank {self.rank}: another rank stopped {where} ({first}); this rank stops too"
                f"{self.ledger_note}") from None

    def all_reduce_(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum ``tensor`` over the ranks, in place."""
        if self.distributed:
            self._collective(lambda: torch.distributed.all_reduce(tensor))
        return tensor

    def broadcast_(self, tensor: torch.Tensor) -> torch.Tensor:
        """Rank 0's ``tensor`` on every rank, in place."""
        if self.distributed:
            self._collective(lambda: torch.distributed.broadcast(tensor, src=0))
        return tensor

    def gather_objects(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` (picklable), in rank order."""
        if not self.distributed:
            return [obj]
        out: list[Any] = [None] * self.world_size
        self._collective(lambda: torch.distributed.all_gather_object(out, obj))
        return out

    def barrier(self) -> None:
        if self.distributed:
            self._collective(lambda: torch.distributed.barrier())

    @contextmanager
    def agreement(self) -> Iterator[dict]:
        """Run a block on every rank, then agree: yields a dict the block fills with the
        decisions every rank must share. On exit, every rank gathers every rank's outcome; if
        a rank raised, all stop with the first rank's error (rank 0 raises it — rank ≠ 0
        errors prefixed with their rank —, the other ranks :class:`SilentError`); if the
        decisions differ, all stop with a :class:`DpcalcError` saying which."""
        decisions: dict = {}
        if not self.distributed:
            yield decisions
            return
        try:
            yield decisions
        except DpcalcError as e:
            outcome: Any = ("error", getattr(e, "name", ""), _exit_code(e), _message(e))
            error: BaseException | None = e
        except Exception as e:  # noqa: BLE001 - a bug: tell the peers, then re-raise here
            outcome, error = ("error", type(e).__name__, 1, f"{type(e).__name__}: {e}"), e
        else:
            outcome, error = ("ok", decisions), None
        outcomes = self.gather_objects(outcome)
        failed = [(r, o) for r, o in enumerate(outcomes) if o[0] == "error"]
        if failed:
            r, (_, name, code, message) = failed[0]
            if self.rank == 0:
                if r == 0 and error is not None:
                    raise error
                if code == 2:
                    raise ParameterError(name or "nproc", "", None, message=f"rank {r}: {message}")
                raise DpcalcError(f"rank {r}: {message}")
            raise SilentError(message, code)
        first = outcomes[0][1]
        for r, (_, other) in enumerate(outcomes):
            if other != first and self.rank != 0:
                raise SilentError("the ranks disagree (rank 0 says how)", 1)
            if other != first:
                diff = {k: (first.get(k), other.get(k)) for k in set(first) | set(other)
                        if first.get(k) != other.get(k)}
                raise DpcalcError(
                    f"rank {r} disagrees with rank 0 on " + ", ".join(
                        f"{k} ({a!r} on rank 0, {b!r} on rank {r})" for k, (a, b) in sorted(diff.items()))
                    + ": every rank must see the same data, settings and --checkpoint directory "
                    "(a filesystem shared by all nodes)")

    def same_weights(self, model: torch.nn.Module) -> None:
        """Check that every rank holds rank 0's weights, bit for bit (they apply the same update
        to the same weights; a difference is a bug and stops the run)."""
        if not self.distributed:
            return
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        ref = self.broadcast_(flat.clone())
        mismatch = torch.tensor([float(not torch.equal(ref, flat))], device=flat.device)
        self.all_reduce_(mismatch)
        if mismatch.item():
            raise DpcalcError(f"the ranks' model weights differ after step {self.step}: "
                              "an internal error; please report it")

    def maybe_kill(self, step: int) -> None:
        """Test hook (:data:`KILL_ENV` = ``RANK:STEP``): die like a crashed process."""
        spec = os.environ.get(KILL_ENV)
        if spec and spec == f"{self.rank}:{step}":
            os.kill(os.getpid(), signal.SIGKILL)

    def close(self, *, finished: bool = True) -> None:
        """Leave the process group. ``finished``: every rank got here without an error, so wait
        for all of them first (a rank tearing down its connections while a peer still uses them
        can abort the peer)."""
        if torch.distributed.is_initialized():
            if finished:
                try:
                    torch.distributed.barrier()
                except RuntimeError:  # a peer already gone: nothing left to protect
                    pass
            torch.distributed.destroy_process_group()


def _message(e: BaseException) -> str:
    return e.message if isinstance(e, ParameterError) else str(e)


def _exit_code(e: BaseException) -> int:
    if isinstance(e, SilentError):
        return e.exit_code
    return 2 if isinstance(e, ParameterError) else 1


def in_torchrun() -> bool:
    """True when this process was started by torchrun (or ``dpcalc train --nproc``)."""
    return "TORCHELASTIC_RUN_ID" in os.environ or (
        "WORLD_SIZE" in os.environ and "RANK" in os.environ and "MASTER_ADDR" in os.environ)


#: seconds between two looks of the watchdog at this rank's parent
WATCHDOG_PERIOD = 0.5
#: seconds a rank whose launcher died has to stop on SIGTERM before SIGKILL
WATCHDOG_GRACE = 10.0


def die_with_parent() -> None:
    """Make this rank stop when its launcher dies, even by SIGKILL (issue 33): the launcher starts
    the ranks in sessions of their own, so nothing else would stop them.

    * Linux: ``prctl(PR_SET_PDEATHSIG, SIGTERM)`` (through :mod:`ctypes`): the kernel sends SIGTERM
      when the parent exits; the rank then stops as it does on the launcher's own SIGTERM;
    * everywhere: a daemon thread that looks at :func:`os.getppid` every :data:`WATCHDOG_PERIOD`
      seconds and, once the parent is gone, sends this process SIGTERM, then SIGKILL after
      :data:`WATCHDOG_GRACE` seconds. (A death signal fires when the parent *thread* that forked
      exits, so the watchdog also covers a launcher that started the rank from another thread.)
    """
    import threading

    parent = os.getppid()
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG = 1
        except (OSError, AttributeError):
            pass  # the watchdog below still stops the rank

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(WATCHDOG_PERIOD)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(WATCHDOG_GRACE)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="dpcalc-parent-watchdog", daemon=True).start()
    if os.getppid() != parent:  # the launcher died before the death signal was set
        os.kill(os.getpid(), signal.SIGTERM)


def context_from_environment(device: str = "auto") -> Context:
    """The :class:`Context` of this process: joins torchrun's process group (gloo on the CPU,
    NCCL on CUDA; each rank on GPU ``LOCAL_RANK``) when started by torchrun, else one process.

    Raises:
        ParameterError: a bad ``device`` (:func:`resolve_device`).
    """
    dev = resolve_device(device)
    if not in_torchrun():
        return Context(device=dev)
    die_with_parent()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if dev.type == "cuda":
        dev = torch.device("cuda", local % torch.cuda.device_count())
        torch.cuda.set_device(dev)
    backend = "nccl" if dev.type == "cuda" else "gloo"
    if not torch.distributed.is_initialized():
        torch.distributed.init_process_group(backend, timeout=COLLECTIVE_TIMEOUT)
        global JOINED
        JOINED = True
    return Context(rank=rank, world_size=world, local_rank=local, device=dev)


class DistributedDPSGDStep(DPSGDStep):
    """:class:`~dpcalc.train.dpsgd.DPSGDStep` over the ranks of ``context``: this rank's clipped
    sum, rank 0's single noise draw, one all-reduce, division by the global qN (see the module
    docstring). With one process it is the single-process step (same numbers).

    Args: as :class:`~dpcalc.train.dpsgd.DPSGDStep`, plus ``context``.
    """

    def __init__(self, *args: Any, context: Context, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.context = context

    def step(self, x: torch.Tensor, y: torch.Tensor) -> StepOutput:
        """One DP-SGD update on this rank's part (x, y) of the Poisson batch; returns the global
        batch size and loss sum."""
        total, loss_sum = self.clipped_sum(x, y)
        p = total.numel()
        buf = torch.empty(p + 2, dtype=total.dtype, device=total.device)
        buf[:p] = total
        if self.context.is_main:  # the one draw of N(0, σ²C²I) of this step
            buf[:p] += self.noise()
        buf[p] = loss_sum
        buf[p + 1] = float(x.shape[0])
        self.context.all_reduce_(buf)
        noisy = buf[:p] / self.expected_batch_size
        for n, g in zip(self.names, self._unflatten(noisy), strict=True):
            self._params[n].grad = g
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return StepOutput(int(round(float(buf[p + 1]))), float(buf[p]))


def launch(args: list[str], *, nproc: int, threads: int | None) -> tuple[int, str | None]:
    """Run ``python -m dpcalc <args>`` on ``nproc`` local processes through
    ``torch.distributed.run`` (torchrun's own launcher, standalone rendezvous on a free port).

    Returns:
        ``(status, error)``: status 0 if every rank succeeded; else 2 if a rank refused its input
        (exit status 2), 130 if this launcher was interrupted, else 1. The ranks print their own
        errors; ``error`` is the one line naming the rank that failed first or the interruption,
        for the caller (the CLI) to print, or None.
    """
    import logging

    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser, run

    for name in list(logging.Logger.manager.loggerDict):
        if name.startswith("torch.distributed"):
            logging.getLogger(name).setLevel(logging.CRITICAL)  # this function reports failures
    os.environ.setdefault("OMP_NUM_THREADS", str(threads or 1))
    # the launcher's own options only: its parser would take a dpcalc option that abbreviates one of
    # its own (--log of --log-dir) for that one
    parsed = get_args_parser().parse_args(
        ["--standalone", "--nproc-per-node", str(nproc), "--max-restarts", "0", "--module", "dpcalc"])
    parsed.training_script_args = list(args)
    try:
        run(parsed)
    except ChildFailedError as e:
        codes = {r: f.exitcode for r, f in e.failures.items()}
        # the root cause: a rank killed by a signal other than the launcher's own SIGTERM (the
        # survivors may exit first: they report the lost peer and leave at once)
        killed = sorted((r, f) for r, f in e.failures.items() if f.exitcode < 0 and f.exitcode != -15)
        if not killed and all(c in (1, 2) or c == -15 for c in codes.values()):
            # every failed rank printed its one line (the ranks never print a traceback): no more
            return (2 if any(c == 2 for c in codes.values()) else 1), None
        rank, failure = e.get_first_failure()
        if killed:
            rank, failure = killed[0]
        how = (f"was killed by {failure.signal_name()}" if failure.exitcode < 0
               else f"exited with status {failure.exitcode}")
        return 1, f"dpcalc train --nproc {nproc}: rank {rank} {how}; the run stopped"
    except SignalException as e:  # Ctrl-C or a kill of this launcher: the ranks were stopped
        return 130, f"dpcalc train --nproc {nproc}: interrupted ({e.sigval.name}); the ranks were stopped"
    return 0, None
