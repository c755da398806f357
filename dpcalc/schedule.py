"""The sampling schedule of a DP-SGD run, resolved from the user's options.

A :class:`Schedule` is option resolution, not a mechanism: it turns ``--batch-size``,
``--dataset-size``, ``--epochs``, ``--sample-rate`` and ``--steps`` into the sample rate q and
the number of steps T (q = B/N, T = ⌈epochs·N/B⌉) and builds the event history
(:func:`dpcalc.events.dpsgd_event`) that the accountants consume. Events describe; this
module resolves.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from fractions import Fraction

from dpcalc import _validate as v
from dpcalc.errors import ParameterError
from dpcalc.events import EPOCH_SAMPLINGS, SAMPLINGS, Event, dpsgd_event

__all__ = ["Schedule", "resolve_schedule"]


@dataclass(frozen=True)
class Schedule:
    """Sampling schedule of a DP-SGD run: sampler, sample rate q and number of steps T.

    ``source`` says how it was obtained: ``"sample_rate"`` (given directly),
    ``"batches"`` (q = B/N, T = ⌈epochs·N/B⌉; with ``epochs`` set and no B, N: T = ⌈epochs/q⌉) or ``"unsampled"`` (no sampling
    option given: q = 1, the plain Gaussian mechanism composed T times).
    ``sampling`` is the batch sampler (:data:`SAMPLINGS`, default ``"poisson"``);
    ``max_batch_size`` is B_max of ``"truncated-poisson"``.
    """

    sample_rate: float
    steps: int
    source: str
    batch_size: int | None = None
    dataset_size: int | None = None
    epochs: float | None = None
    sampling: str = "poisson"
    max_batch_size: int | None = None
    group_size: int = 1

    def as_inputs(self) -> dict:
        """The schedule as JSON ``inputs`` entries (glossary names); ``sampling`` (and
        ``max_batch_size``) only for a sampler other than Poisson."""
        out: dict = {}
        if self.sampling != "poisson":
            out["sampling"] = self.sampling
        out.update(sample_rate=self.sample_rate, steps=self.steps)
        if self.source == "batches":
            out.update(batch_size=self.batch_size, dataset_size=self.dataset_size, epochs=self.epochs)
        elif self.epochs is not None:  # q and epochs given: T = ⌈epochs/q⌉ is printed beside them
            out["epochs"] = self.epochs
        if self.max_batch_size is not None:
            out["max_batch_size"] = self.max_batch_size
        if self.group_size > 1:
            out["group_size"] = self.group_size
        return out

    def sampler_args(self) -> dict:
        """Keyword arguments of :func:`dpsgd_event` / :func:`sampled_step` describing the sampler."""
        out = {"sampling": self.sampling, "sample_rate": self.sample_rate, "batch_size": self.batch_size,
               "dataset_size": self.dataset_size, "max_batch_size": self.max_batch_size}
        if self.group_size > 1:  # the history as a group of k records sees it (dpcalc.events.GroupEvent)
            out["group_size"] = self.group_size
        return out

    def event(self, noise_multiplier: float, steps: int | None = None) -> Event:
        """The DP-SGD history of this schedule at noise multiplier σ (:func:`dpsgd_event`),
        over ``steps`` steps (default: the schedule's T), as a group of ``group_size`` records sees it."""
        return dpsgd_event(noise_multiplier=noise_multiplier, steps=self.steps if steps is None else steps,
                           **self.sampler_args())

    def small_delta_warning(self, delta: float | None) -> str | None:
        """The δ ≥ 1/N warning when N is known (a δ this large allows releasing a record in
        the clear: the "name and shame" mechanism, Dwork & Roth 2014 §2.3), else None."""
        n = self.dataset_size
        if n is None or delta is None or delta < 1.0 / n:
            return None
        return (f"delta = {delta:g} is at least 1/N = {1.0 / n:.3g} (N = {n}): a mechanism that publishes "
                "one random record in the clear satisfies such a delta; use delta well below 1/N")


def resolve_schedule(
    *,
    sample_rate: float | None = None,
    steps: float | None = None,
    batch_size: float | None = None,
    dataset_size: float | None = None,
    epochs: float | None = None,
    sampling: str = "poisson",
    max_batch_size: float | None = None,
    group_size: float = 1,
) -> Schedule:
    """Derive (q, T) from exactly one consistent set of sampling options.

    Accepted combinations:

    * ``sample_rate`` and ``steps`` (Poisson only);
    * ``sample_rate`` and ``epochs`` (Poisson only, Opacus's pair): T = ⌈epochs/q⌉, an epoch
      being 1/q expected steps (computed on the decimals as written);
    * ``batch_size``, ``dataset_size`` and ``epochs``: q = B/N, T = ⌈epochs·N/B⌉
      (computed in exact rational arithmetic; "epochs" of Poisson sampling are
      expected passes over the data);
    * ``batch_size``, ``dataset_size`` and ``steps``: q = B/N;
    * ``steps`` alone: q = 1 (no subsampling; Poisson only).

    ``sampling`` (:data:`SAMPLINGS`) other than ``"poisson"`` needs ``batch_size`` and
    ``dataset_size`` (for ``"truncated-poisson"`` B is the expected batch size, and
    ``max_batch_size`` B_max ≥ 1 is required; it is refused with any other sampler). For
    ``"shuffle"`` and ``"balls-in-bins"`` an epoch is T_e = ⌈N/B⌉ steps: T = ⌈epochs·T_e⌉.

    ``group_size`` k ≥ 1: the guarantee for a group of k records added or removed together
    (:class:`dpcalc.events.GroupEvent`); with k > 1 only Poisson sampling (or none) is accounted.

    Raises:
        ParameterError: missing, conflicting or out-of-range options.
    """
    sampling = v.choice("sampling", sampling, SAMPLINGS)
    k = v.count("group_size", group_size, minimum=1)
    if k > 1 and sampling != "poisson":
        raise ParameterError("group_size", "", k, message=(
            f"--group-size applies to Poisson sampling (or none) only, got --sampling {sampling}: the group-level "
            "mixture of Gaussians is proven for Poisson sampling (docs/how-to/group-and-user-level.md)"))
    if k > 1:
        return dataclasses.replace(resolve_schedule(sample_rate=sample_rate, steps=steps, batch_size=batch_size,
                                                    dataset_size=dataset_size, epochs=epochs), group_size=k)
    if max_batch_size is not None and sampling != "truncated-poisson":
        raise ParameterError("max_batch_size", "", max_batch_size,
                             message="--max-batch-size applies to --sampling truncated-poisson only")
    bmax = None
    if sampling != "poisson":
        if sample_rate is not None or batch_size is None or dataset_size is None:
            raise ParameterError("sampling", "", sampling, message=(
                f"--sampling {sampling} needs --batch-size and --dataset-size (not --sample-rate): "
                "q = B/N is derived from them"))
        if sampling == "truncated-poisson":
            if max_batch_size is None:
                raise ParameterError("max_batch_size", "", None,
                                     message="--sampling truncated-poisson needs --max-batch-size (the cap B_max)")
            bmax = v.count("max_batch_size", max_batch_size, minimum=1)
    base = _resolve_poisson(sample_rate=sample_rate, steps=steps, batch_size=batch_size,
                            dataset_size=dataset_size, epochs=epochs)
    if sampling == "poisson":
        return base
    if sampling in EPOCH_SAMPLINGS and base.epochs is not None:
        # an epoch of a shuffled / balls-in-bins run is T_e = ⌈N/B⌉ steps (the last batch smaller)
        per_epoch = -(-base.dataset_size // base.batch_size)
        base = dataclasses.replace(base, steps=math.ceil(Fraction(repr(base.epochs)) * per_epoch))
    return dataclasses.replace(base, sampling=sampling, max_batch_size=bmax)


def _resolve_poisson(
    *,
    sample_rate: float | None,
    steps: float | None,
    batch_size: float | None,
    dataset_size: float | None,
    epochs: float | None,
) -> Schedule:
    if sample_rate is not None and (batch_size is not None or dataset_size is not None):
        raise ParameterError(
            "sample_rate", "", sample_rate,
            message="give either --sample-rate or --batch-size/--dataset-size, not both",
        )
    if steps is not None and epochs is not None:
        raise ParameterError("steps", "", steps, message="give either --steps or --epochs, not both")
    if sample_rate is not None:
        q = v.half_open_unit("sample_rate", sample_rate)
        if epochs is not None:  # Opacus's sample_rate + epochs: an epoch is 1/q expected steps
            e = v.positive("epochs", epochs)
            t = math.ceil(Fraction(repr(e)) / Fraction(repr(q)))  # the decimals as written: 10/0.01 = 1000
            return Schedule(q, t, "sample_rate", epochs=e)
        if steps is None:
            raise ParameterError("steps", "given with --sample-rate", None,
                                 message="--sample-rate needs --steps or --epochs (or use --batch-size, "
                                         "--dataset-size and --epochs)")
        return Schedule(q, v.count("steps", steps, minimum=0), "sample_rate")
    if batch_size is not None or dataset_size is not None:
        if batch_size is None or dataset_size is None:
            missing = "--batch-size" if batch_size is None else "--dataset-size"
            raise ParameterError("batch_size", "", None,
                                 message=f"{missing} is needed with --batch-size/--dataset-size")
        b = v.count("batch_size", batch_size, minimum=1)
        n = v.count("dataset_size", dataset_size, minimum=1)
        if b > n:
            raise ParameterError("batch_size", f"at most dataset_size ({n})", b)
        q = b / n
        if steps is not None:
            return Schedule(q, v.count("steps", steps, minimum=0), "batches", b, n, None)
        if epochs is None:
            raise ParameterError("epochs", "given with --batch-size/--dataset-size", None,
                                 message="--batch-size/--dataset-size need --epochs or --steps")
        e = v.positive("epochs", epochs)
        t = math.ceil(Fraction(repr(e)) * n / b)  # repr: 0.1 epochs is 1/10, not its binary neighbour
        return Schedule(q, t, "batches", b, n, e)
    if epochs is not None:
        raise ParameterError("epochs", "", epochs,
                             message="--epochs needs --batch-size and --dataset-size")
    if steps is None:
        raise ParameterError("steps", "", None,
                             message="give --steps (with --sample-rate), or --batch-size, --dataset-size and --epochs")
    return Schedule(1.0, v.count("steps", steps, minimum=0), "unsampled")
