r"""Batch samplers, exactly the ones dpcalc accounts for (docs/design.md §4, ``--sampling``).

Every sampler draws batch ``step`` (0-based) from a torch generator seeded by (seed, step) —
or (seed, epoch) for the per-epoch samplers — so its state is just (seed, step index):
resuming at step k reproduces the batches an uninterrupted run would have drawn, and no
generator state needs checkpointing. Each ``batch(step)`` returns a sorted int64 tensor of
record indices in [0, N) (repeated indices only for ``with-replacement``).

* :class:`PoissonBatchSampler` — each record independently with probability q (Abadi et al.
  2016); the batch size is Bin(N, q).
* :class:`WithoutReplacementSampler` — a uniformly random subset of exactly B records per step.
* :class:`WithReplacementSampler` — B independent uniform draws from the N records per step;
  duplicates are kept (a record drawn twice is in the batch twice and contributes twice to the
  clipped sum: the mechanism Birrell, Ebrahimi, Behnia, Pacheco 2024 Thm 3.6 accounts for).
  The returned indices are sorted and may repeat.
* :class:`TruncatedPoissonSampler` — a Poisson batch; if it has more than B_max records,
  B_max of them are kept uniformly at random (the others dropped). Truncation rate
  Pr[Bin(N, q) > B_max].
* :class:`ShuffleSampler` — one uniformly random permutation per epoch, cut into ⌈N/B⌉
  consecutive batches (the last one has N − (⌈N/B⌉ − 1)B records): every record exactly
  once per epoch.
* :class:`BallsInBinsSampler` — per epoch, each record is put in one of T = ⌈N/B⌉ batches
  uniformly at random (Chua et al. 2025): every record exactly once per epoch, batch sizes
  Bin(N, 1/T).
* :class:`CyclicSampler` — one fixed permutation cut into ⌈N/B⌉ batches, the same every epoch
  (``--noise correlated`` only: its min-separation is what the correlated noise is accounted for).

:class:`dpcalc.train.dpsgd.PoissonSampler` (a sampler that advances one checkpointed
generator) is the one the trainer's loop uses for ``--sampling poisson`` (its numbers unchanged);
the loop uses :func:`make_sampler` for the others (:mod:`dpcalc.train.loop`). It is re-exported here.
"""

from __future__ import annotations

import math

import torch

from dpcalc import _validate as v
from dpcalc.errors import ParameterError
from dpcalc.train.dpsgd import PoissonSampler

__all__ = ["BatchSampler", "PoissonBatchSampler", "WithoutReplacementSampler", "WithReplacementSampler",
           "TruncatedPoissonSampler",
           "ShuffleSampler", "BallsInBinsSampler", "CyclicSampler", "PoissonSampler", "SAMPLERS", "make_sampler",
           "truncation_probability"]

_MASK = (1 << 63) - 1


def _generator(seed: int, *stream: int) -> torch.Generator:
    """A CPU generator seeded by a 63-bit mix of (seed, *stream) (SplitMix64 finaliser)."""
    x = seed & _MASK
    for s in stream:
        x = (x * 0x9E3779B97F4A7C15 + s + 0x632BE59BD9B4E019) & ((1 << 64) - 1)
        x ^= x >> 30
        x = (x * 0xBF58476D1CE4E5B9) & ((1 << 64) - 1)
        x ^= x >> 27
        x = (x * 0x94D049BB133111EB) & ((1 << 64) - 1)
        x ^= x >> 31
    return torch.Generator().manual_seed(x & _MASK)


class BatchSampler:
    """Base: ``batch(step)`` → sorted int64 indices; deterministic in (seed, step).

    Args:
        dataset_size: N ≥ 1.
        seed: whole number ≥ 0.
    """

    name = ""

    def __init__(self, *, dataset_size: int, seed: int = 0) -> None:
        self.dataset_size = v.count("dataset_size", dataset_size)
        self.seed = v.count("seed", seed, minimum=0)

    def batch(self, step: int) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def state(self, step: int) -> dict:
        """Everything needed to resume at ``step``: the seed and the step index."""
        return {"sampler": self.name, "seed": self.seed, "step": int(step)}


class _BatchSizeSampler(BatchSampler):
    """Base of the samplers given a batch size B (1 ≤ B ≤ N) rather than a sampling rate."""

    def __init__(self, *, dataset_size: int, batch_size: int, seed: int = 0) -> None:
        super().__init__(dataset_size=dataset_size, seed=seed)
        self.batch_size = _batch_size(batch_size, self.dataset_size)


class PoissonBatchSampler(BatchSampler):
    """Poisson sampling: each record independently with probability q (Abadi et al. 2016 §3.1).

    Args:
        dataset_size: N ≥ 1.
        sample_rate: q in (0, 1].
        seed: whole number ≥ 0.
    """

    name = "poisson"

    def __init__(self, *, dataset_size: int, sample_rate: float, seed: int = 0) -> None:
        super().__init__(dataset_size=dataset_size, seed=seed)
        self.sample_rate = v.half_open_unit("sample_rate", sample_rate)

    def batch(self, step: int) -> torch.Tensor:
        gen = _generator(self.seed, 1, v.count("step", step, minimum=0))
        return PoissonSampler(dataset_size=self.dataset_size, sample_rate=self.sample_rate, generator=gen).sample()


class WithoutReplacementSampler(_BatchSizeSampler):
    """Exactly B distinct records per step, uniformly at random (each step independent).

    Args:
        dataset_size: N ≥ 1.
        batch_size: 1 ≤ B ≤ N.
        seed: whole number ≥ 0.
    """

    name = "without-replacement"

    def batch(self, step: int) -> torch.Tensor:
        gen = _generator(self.seed, 2, v.count("step", step, minimum=0))
        perm = torch.randperm(self.dataset_size, generator=gen)
        return perm[: self.batch_size].sort().values


class WithReplacementSampler(_BatchSizeSampler):
    """Exactly B draws per step, each independently uniform over the N records (duplicates kept:
    a record drawn k times appears k times in the batch and contributes k clipped gradients to
    the sum, as the accounted mechanism does — Birrell, Ebrahimi, Behnia, Pacheco 2024 Thm 3.6).
    Each step independent; seeded by (seed, step), so every process draws the same global batch.

    Args:
        dataset_size: N ≥ 1.
        batch_size: 1 ≤ B ≤ N (the cap B ≤ N is the trainer's, as for the other fixed-size sampler).
        seed: whole number ≥ 0.
    """

    name = "with-replacement"

    def batch(self, step: int) -> torch.Tensor:
        gen = _generator(self.seed, 6, v.count("step", step, minimum=0))
        return torch.randint(0, self.dataset_size, (self.batch_size,), generator=gen).sort().values


class TruncatedPoissonSampler(BatchSampler):
    """Poisson sampling at rate q capped at B_max records: a larger batch keeps B_max of its
    records chosen uniformly at random.

    Args:
        dataset_size: N ≥ 1.
        sample_rate: q in (0, 1].
        max_batch_size: B_max ≥ 1.
        seed: whole number ≥ 0.
    """

    name = "truncated-poisson"

    def __init__(self, *, dataset_size: int, sample_rate: float, max_batch_size: int, seed: int = 0) -> None:
        super().__init__(dataset_size=dataset_size, seed=seed)
        self.sample_rate = v.half_open_unit("sample_rate", sample_rate)
        self.max_batch_size = v.count("max_batch_size", max_batch_size)

    def batch(self, step: int) -> torch.Tensor:
        gen = _generator(self.seed, 3, v.count("step", step, minimum=0))
        idx = PoissonSampler(dataset_size=self.dataset_size, sample_rate=self.sample_rate, generator=gen).sample()
        if idx.numel() > self.max_batch_size:
            keep = torch.randperm(idx.numel(), generator=gen)[: self.max_batch_size]
            idx = idx[keep].sort().values
        return idx


class _EpochSampler(_BatchSizeSampler):
    """Samplers that lay out a whole epoch at once: T = ⌈N/B⌉ batches per epoch."""

    def __init__(self, *, dataset_size: int, batch_size: int, seed: int = 0) -> None:
        super().__init__(dataset_size=dataset_size, batch_size=batch_size, seed=seed)
        self.steps_per_epoch = -(-self.dataset_size // self.batch_size)
        self._cache: tuple[int, object] | None = None

    def _epoch(self, epoch: int):  # pragma: no cover - abstract
        raise NotImplementedError

    def batch(self, step: int) -> torch.Tensor:
        step = v.count("step", step, minimum=0)
        epoch, t = divmod(step, self.steps_per_epoch)
        if self._cache is None or self._cache[0] != epoch:
            self._cache = (epoch, self._epoch(epoch))
        return self._slice(self._cache[1], t)

    def _slice(self, layout, t: int) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError


class ShuffleSampler(_EpochSampler):
    """One uniformly random permutation per epoch, cut into ⌈N/B⌉ consecutive batches of B
    (the last one holds the remainder): each record exactly once per epoch.

    Args:
        dataset_size: N ≥ 1.
        batch_size: 1 ≤ B ≤ N.
        seed: whole number ≥ 0.
    """

    name = "shuffle"

    def _epoch(self, epoch: int) -> torch.Tensor:
        return torch.randperm(self.dataset_size, generator=_generator(self.seed, 4, epoch))

    def _slice(self, perm: torch.Tensor, t: int) -> torch.Tensor:
        return perm[t * self.batch_size:(t + 1) * self.batch_size].sort().values


class BallsInBinsSampler(_EpochSampler):
    """Per epoch, each record goes to one of T = ⌈N/B⌉ batches uniformly at random
    (Chua et al. 2025): each record exactly once per epoch; batch sizes Bin(N, 1/T).

    Args:
        dataset_size: N ≥ 1.
        batch_size: 1 ≤ B ≤ N (expected batch size N/T).
        seed: whole number ≥ 0.
    """

    name = "balls-in-bins"

    def _epoch(self, epoch: int) -> torch.Tensor:
        return torch.randint(0, self.steps_per_epoch, (self.dataset_size,), generator=_generator(self.seed, 5, epoch))

    def _slice(self, bins: torch.Tensor, t: int) -> torch.Tensor:
        return (bins == t).nonzero().squeeze(1)


class CyclicSampler(_EpochSampler):
    """A fixed epoch order: one uniformly random permutation (seeded, drawn once) cut into
    T = ⌈N/B⌉ consecutive batches, the same batches in the same order every epoch — each record
    in exactly one batch per epoch, its steps j, j + T, j + 2T, … (min-separation T): the
    participation the matrix-factorization mechanisms of ``--noise correlated`` are accounted for
    (Choquette-Choo et al. ICML 2023 §2, "fixed epoch order").

    Args:
        dataset_size: N ≥ 1.
        batch_size: 1 ≤ B ≤ N.
        seed: whole number ≥ 0.
    """

    name = "cyclic"

    def _epoch(self, epoch: int) -> torch.Tensor:
        return torch.randperm(self.dataset_size, generator=_generator(self.seed, 6))  # every epoch alike

    def _slice(self, perm: torch.Tensor, t: int) -> torch.Tensor:
        return perm[t * self.batch_size:(t + 1) * self.batch_size].sort().values


def _batch_size(batch_size, n: int) -> int:
    b = v.count("batch_size", batch_size)
    if b > n:
        raise ParameterError("batch_size", f"at most dataset_size ({n:,})", b)
    return b


#: sampler name -> class
SAMPLERS = {cls.name: cls for cls in (PoissonBatchSampler, WithoutReplacementSampler, WithReplacementSampler,
                                      TruncatedPoissonSampler, ShuffleSampler, BallsInBinsSampler,
                                      CyclicSampler)}


def make_sampler(name: str, *, dataset_size: int, batch_size: int, seed: int = 0,
                 max_batch_size: int | None = None) -> BatchSampler:
    """A sampler by ``--sampling`` name; q = B/N for the Poisson ones, B_max defaults to B.

    Raises:
        ParameterError: unknown name or bad sizes.
    """
    name = v.choice("sampling", name, tuple(SAMPLERS))
    n = v.count("dataset_size", dataset_size)
    b = _batch_size(batch_size, n)
    if name == "poisson":
        return PoissonBatchSampler(dataset_size=n, sample_rate=b / n, seed=seed)
    if name == "truncated-poisson":
        return TruncatedPoissonSampler(dataset_size=n, sample_rate=b / n,
                                       max_batch_size=b if max_batch_size is None else max_batch_size, seed=seed)
    return SAMPLERS[name](dataset_size=n, batch_size=b, seed=seed)


def truncation_probability(*, dataset_size: int, sample_rate: float, max_batch_size: int) -> float:
    r"""Pr[Bin(N, q) > B_max]: the probability a truncated-Poisson batch is capped (exact sum of
    the binomial pmf in log space, ``math.lgamma``)."""
    n = v.count("dataset_size", dataset_size)
    q = v.half_open_unit("sample_rate", sample_rate)
    m = v.count("max_batch_size", max_batch_size)
    if m >= n:
        return 0.0
    if q == 1.0:
        return 1.0
    lq, l1q = math.log(q), math.log1p(-q)
    terms = [math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * lq + (n - k) * l1q
             for k in range(m + 1, n + 1)]
    top = max(terms)
    return min(1.0, math.exp(top) * sum(math.exp(t - top) for t in terms))
