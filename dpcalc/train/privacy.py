"""The privacy side of a ``dpcalc train`` run: the batch sampler as the accounting sees it
(:class:`SamplerSpec`), the accountant that reports and decides (:func:`run_accountant`), the
history it is asked about (:meth:`SamplerSpec.history`), σ for ``--target-epsilon``
(:func:`calibrate_sigma`), the ``--max-epsilon`` stop (:func:`budget_steps`) and the sampler's
record in the result (:func:`sampler_record`).

Every sampler goes the same way: its steps are a :func:`dpcalc.events.dpsgd_event`, an
accountant answers for that history, and σ is calibrated on it by
:func:`dpcalc.accounting.calibrate.calibrate_dpsgd` (the helper behind ``dpcalc sigma``).
Poisson runs use ``--accountant`` (default: the registry's tightest certified one). The others:

* ``without-replacement`` — exactly B records per step; replace-one adjacency by default (N is
  public): pld (Dong, Roth, Su 2022 §4.1) or rdp (Wang, Balle, Kasiviswanathan 2019 Thm 9); with
  ``neighboring="add-remove"`` (``--neighboring``), pld (the Poisson-sampled Gaussian at q = B/N,
  σ/2, which dominates the step and is attained: dpcalc/accounting/_sampling_pld.py) or rdp
  (Birrell, Ebrahimi, Behnia, Pacheco 2024 Thm 3.1/3.3);
* ``with-replacement`` — B independent uniform draws per step (duplicates kept); add/remove
  adjacency: pld (the binomial mixture of Gaussians, dpcalc/accounting/_sampling_pld.py) or rdp
  (Birrell, Ebrahimi, Behnia, Pacheco 2024 Thm 3.6): the default accountant is the first
  certified one that supports the sampler;
* ``truncated-poisson`` — Poisson at q = B/N capped at ``max_batch_size``; add/remove; rdp
  only (pld refuses it): the default accountant is the first certified one that supports the
  sampler (:func:`dpcalc.accounting._sampling.default_accountant_for`);
* ``shuffle`` / ``balls-in-bins`` — each record in one batch per epoch of T = ⌈N/B⌉ steps;
  zero-out adjacency; ε is the certified upper bound ε_GDP(δ; √E/σ) of
  :class:`dpcalc.accounting.shuffling.EpochGaussianAccountant` (each epoch one Gaussian run),
  E the passes over the data (a partial epoch counts as a whole one; each orphaned segment adds
  the passes it touches), with a proven lower bound and the Poisson ε of the same (σ, q, T)
  reported beside it (docs/design.md §6).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dpcalc.accounting import shuffling
from dpcalc.accounting._pld_grid import GridTooLargeError
from dpcalc.accounting._sampling import default_accountant_for
from dpcalc.accounting.base import Accountant
from dpcalc.accounting.calibrate import calibrate_dpsgd
from dpcalc.accounting.registry import default_accountant, get_accountant
from dpcalc.errors import DpcalcError, InfeasibleError, ParameterError, UnsupportedEventError
from dpcalc.events import ComposedEvent, Event, GaussianEvent, SelfComposedEvent, dpsgd_event
from dpcalc.results import AccountingResult
from dpcalc.train import checkpoint as ckpt
from dpcalc.train.config import EPOCH_SAMPLINGS, SAMPLING_ADJACENCY, TrainConfig

__all__ = ["SamplerSpec", "touched_passes", "run_accountant", "calibrate_sigma", "epsilon_for_steps",
           "budget_steps", "sampler_record"]


@dataclass(frozen=True)
class SamplerSpec:
    """The batch sampler of a run, as the accounting needs it.

    Attributes:
        sampling: one of :data:`dpcalc.train.config.SAMPLINGS`.
        dataset_size: N (data plus included canaries).
        batch_size: B (expected, for the Poisson samplers and balls-in-bins).
        max_batch_size: B_max of ``truncated-poisson`` (else None).
        adjacency: ``--neighboring`` (None: the sampler's default, :attr:`neighboring`).
    """

    sampling: str
    dataset_size: int
    batch_size: int
    max_batch_size: int | None = None
    adjacency: str | None = None

    @property
    def per_epoch(self) -> bool:
        """True for the samplers that lay out whole epochs (``shuffle``, ``balls-in-bins``)."""
        return self.sampling in EPOCH_SAMPLINGS

    @property
    def steps_per_epoch(self) -> int:
        """T = ⌈N/B⌉, the batches of one epoch of the epoch samplers."""
        return -(-self.dataset_size // self.batch_size)

    @property
    def neighboring(self) -> str:
        """The adjacency the sampler is accounted under: ``--neighboring`` when given, else
        :data:`dpcalc.train.config.SAMPLING_ADJACENCY`."""
        return self.adjacency or SAMPLING_ADJACENCY[self.sampling]

    def event_args(self) -> dict:
        """Keyword arguments of :func:`dpcalc.events.dpsgd_event` for the per-step samplers."""
        if self.sampling == "poisson":
            return {}
        out: dict[str, Any] = {"sampling": self.sampling, "batch_size": self.batch_size,
                               "dataset_size": self.dataset_size}
        if self.max_batch_size is not None:
            out["max_batch_size"] = self.max_batch_size
        return out

    def passes(self, model_steps: int, orphaned_passes: int = 0) -> int:
        """E: the epochs touched by ``model_steps`` steps (a partial epoch counts as a whole
        one) plus ``orphaned_passes`` — the most batches of the epoch samplers a record is in."""
        return -(-model_steps // self.steps_per_epoch) + orphaned_passes

    def history(self, *, noise_multiplier: float, sample_rate: float, steps: int, orphaned_steps: int = 0,
                orphaned_passes: int = 0) -> Event:
        """The mechanism history of a run after ``steps`` steps (orphaned steps included): what
        its accountant is asked about.

        Per-step samplers: T = ``steps`` steps of :func:`dpcalc.events.dpsgd_event` (σ, q, the
        sampler). Epoch samplers: the model's ``steps − orphaned_steps`` steps, epoch-sampled
        (:class:`dpcalc.events.EpochSampledEvent`: each epoch touched one Gaussian run), and one
        more Gaussian run for each of the ``orphaned_passes`` passes of interrupted runs —
        :meth:`passes` runs in all.

        Args:
            noise_multiplier: σ > 0. sample_rate: q = B/N. steps: T ≥ 0, every step the data
                was used in. orphaned_steps, orphaned_passes: of the privacy ledger
                (:class:`dpcalc.train.checkpoint.PrivacyLedger`).
        """
        if not self.per_epoch:
            return dpsgd_event(noise_multiplier=noise_multiplier, sample_rate=sample_rate, steps=steps,
                               **self.event_args())
        model_steps = max(steps - orphaned_steps, 0)
        run = dpsgd_event(noise_multiplier=noise_multiplier, sample_rate=sample_rate, steps=model_steps,
                          **self.event_args())
        extra = self.passes(steps - orphaned_steps, orphaned_passes) - self.passes(model_steps)
        if extra == 0:
            return run
        return ComposedEvent((run, SelfComposedEvent(GaussianEvent(noise_multiplier), extra)))


def touched_passes(start: int, count: int, steps_per_epoch: int) -> int:
    """The epochs of ``steps_per_epoch`` steps that the steps start … start + count − 1 touch
    (0 for count ≤ 0)."""
    if count <= 0:
        return 0
    return -(-(start + count) // steps_per_epoch) - start // steps_per_epoch


def run_accountant(config: TrainConfig, spec: SamplerSpec, q: float) -> Accountant:
    """The accountant that reports the run's ε and takes its decisions (calibration, budget stop).

    Poisson: ``--accountant``, by default the registry's tightest certified one (an approximate
    one was refused for decisions by :meth:`TrainConfig.validated`); ``shuffle`` /
    ``balls-in-bins``: :class:`~dpcalc.accounting.shuffling.EpochGaussianAccountant`; the other
    samplers: :func:`_sampler_accountant`.

    Raises:
        ParameterError: ``--accountant`` has no proof for the sampler (with the reason).
    """
    if spec.sampling == "poisson":
        return get_accountant(config.accountant or default_accountant())
    if spec.per_epoch:
        return shuffling.EpochGaussianAccountant()
    return _sampler_accountant(config, spec, q)


def _sampler_accountant(config: TrainConfig, spec: SamplerSpec, q: float) -> Accountant:
    """The accountant of a per-step non-Poisson sampler under its adjacency: ``--accountant`` if it
    has a proof for the sampler (else refused with the reason), by default the first certified
    one that has (:func:`~dpcalc.accounting._sampling.default_accountant_for`)."""
    probe = dpsgd_event(noise_multiplier=1.0, sample_rate=q, steps=1, **spec.event_args())
    name = config.accountant or default_accountant_for(probe, spec.neighboring)
    accountant = get_accountant(name, neighboring=spec.neighboring)
    try:
        accountant.check(probe)
    except UnsupportedEventError as e:
        raise ParameterError("accountant", "", name, message=(
            f"--accountant {name} cannot account for --sampling {spec.sampling} ({spec.neighboring} adjacency): "
            f"{e}")) from None
    return accountant


def calibrate_sigma(accountant: Accountant, *, spec: SamplerSpec, target_epsilon: float, delta: float,
                    sample_rate: float, steps: int) -> AccountingResult:
    """σ for ``target_epsilon`` at ``delta`` over the planned ``steps`` under the run's accountant:
    :func:`dpcalc.accounting.calibrate.calibrate_dpsgd` on the sampler's history, as ``dpcalc
    sigma`` calibrates (σ rounded up to 8 significant digits, ε ≤ target verified at it).

    Returns:
        The accountant's result at σ (``noise_multiplier``; ``details`` with ``target_epsilon``).

    Raises:
        InfeasibleError: no σ up to the search limit meets the target.
    """
    return calibrate_dpsgd(accountant, target_epsilon=target_epsilon, delta=delta, sample_rate=sample_rate,
                           steps=steps, sampler=spec.event_args())


def epsilon_for_steps(accountant: Accountant, spec: SamplerSpec, *, noise_multiplier: float, sample_rate: float,
                      steps: int, delta: float, orphaned_steps: int = 0, orphaned_passes: int = 0) -> AccountingResult:
    """The accountant's ε at δ for the run's history after ``steps`` steps
    (:meth:`SamplerSpec.history`); a per-step sampler's T = 0 spends nothing.

    Args:
        accountant: an :class:`dpcalc.accounting.base.Accountant` (:func:`run_accountant`).
        spec: the sampler. noise_multiplier: σ. sample_rate: q. steps: T ≥ 0. delta: δ in (0, 1).
        orphaned_steps, orphaned_passes: of the privacy ledger (epoch samplers).

    Raises:
        InfeasibleError: the accountant's arithmetic fails for these numbers (an overflow
            or a division by zero inside it): said in one line instead of a traceback.
    """
    if steps == 0 and not spec.per_epoch:  # the epoch accountant says so itself, with its passes
        return AccountingResult(accountant.name, 0.0, delta, accountant.certified,
                                details={"note": "no steps taken"}, source=accountant.source)
    event = spec.history(noise_multiplier=noise_multiplier, sample_rate=sample_rate, steps=steps,
                         orphaned_steps=orphaned_steps, orphaned_passes=orphaned_passes)
    try:
        return accountant.epsilon(event, delta=delta)
    except (OverflowError, ZeroDivisionError, FloatingPointError) as e:
        raise InfeasibleError(
            f"accountant {accountant.name} cannot evaluate epsilon for sigma={noise_multiplier:g}, "
            f"q={sample_rate:g}, {steps:,} steps, delta={delta:g} ({type(e).__name__}: {e}); "
            "try another --accountant") from None


def budget_steps(eps_at: Callable[[int], AccountingResult], *, max_epsilon: float,
                 planned: int) -> tuple[int, float | None]:
    """The most steps ≤ planned whose ε stays ≤ max_epsilon, and the ε one step beyond it
    (None if the whole plan fits). ε is non-decreasing in T, so bisection applies.
    ``eps_at(T)`` is a certified accountant's result for T steps."""

    def eps(t: int) -> float:
        e = eps_at(t).epsilon
        return math.inf if e is None else e

    if eps(planned) <= max_epsilon:
        return planned, None
    lo, hi = 0, planned  # eps(lo) <= max (eps(0) = 0), eps(hi) > max
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if eps(mid) <= max_epsilon:
            lo = mid
        else:
            hi = mid
    return lo, eps(lo + 1)


def sampler_record(spec: SamplerSpec, ledger: ckpt.PrivacyLedger, *, sigma: float, q: float, delta: float,
                   epsilon: float) -> dict:
    """The ``details`` a non-Poisson run adds to its result: the sampler, its adjacency and, for
    the epoch samplers, the bracket (proven lower bound, the certified ``epsilon`` of the run)
    and the Poisson ε of the same (σ, q, steps) under the registry's default accountant."""
    out: dict[str, Any] = {"sampling": spec.sampling, "batch_size": spec.batch_size, "adjacency": spec.neighboring}
    if spec.max_batch_size is not None:
        out["max_batch_size"] = spec.max_batch_size
    if not spec.per_epoch:
        return out
    t = spec.steps_per_epoch
    passes = spec.passes(ledger.model_steps, ledger.orphaned_passes)
    # the lower bound holds for the whole epochs applied to the model (an adversary may ignore
    # the other steps); never above the certified number
    full = ledger.model_steps // t
    lower = pois = None
    # the bracket and the Poisson number are shown beside ε; the training is done, so a numerical
    # failure of either (extreme σ or T) leaves it out with the reason rather than losing the run
    if full >= 1:
        low = (shuffling.shuffle_lower_epsilon if spec.sampling == "shuffle"
               else shuffling.balls_in_bins_lower_epsilon)
        try:
            lower = low(noise_multiplier=sigma, steps_per_epoch=t, epochs=full, delta=delta)
        except (DpcalcError, GridTooLargeError, OverflowError, FloatingPointError) as e:
            out["epsilon_lower_reason"] = f"lower bound not computed: {e}"
        else:
            lower = min(lower, epsilon)
    poisson_name = default_accountant()
    if ledger.steps:
        poisson = dataclasses.replace(spec, sampling="poisson", max_batch_size=None, adjacency=None)
        try:
            pois = epsilon_for_steps(get_accountant(poisson_name), poisson, noise_multiplier=sigma, sample_rate=q,
                                     steps=ledger.steps, delta=delta).epsilon
        except (DpcalcError, GridTooLargeError, OverflowError, FloatingPointError) as e:
            out["poisson_epsilon_reason"] = f"Poisson ε not computed: {e}"
    out.update(adjacency="zero-out", steps_per_epoch=t, passes=passes, orphaned_passes=ledger.orphaned_passes,
               epsilon_lower=lower, lower_bound_epochs=full, poisson_epsilon=pois,
               poisson_accountant=poisson_name,
               source_lower=(shuffling.SOURCE_SHUFFLE_LOWER if spec.sampling == "shuffle"
                             else shuffling.SOURCE_BNB + ", max-statistic pair"))
    return out
