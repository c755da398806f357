r"""Immutable descriptions of what a mechanism did ("describe, then account").

Accountants consume these value objects; the CLI only builds them. All noise
parameters are normalised by the query's sensitivity, as in DP-SGD:

* :class:`GaussianEvent` — Gaussian noise with std ``noise_multiplier × Δ₂``.
* :class:`LaplaceEvent` — Laplace noise with scale ``scale × Δ₁`` (pure ε = 1/scale).
* :class:`EpsilonDeltaEvent` — any (ε, δ)-DP mechanism, known only by its guarantee.
* :class:`ExponentialMechanismEvent` — an ε-bounded-range mechanism (the exponential
  mechanism, report noisy max with Gumbel noise).
* :class:`PoissonSampledEvent` — a mechanism run on a Poisson subsample (each record
  included independently with probability ``sample_rate``).
* :class:`FixedSizeSampledEvent` — a mechanism run on a uniformly random batch of exactly
  B of the N records, drawn without (or with) replacement.
* :class:`TruncatedPoissonSampledEvent` — Poisson sampling with the batch capped at B_max
  (a uniformly random B_max of the sampled records kept when more were drawn).
* :class:`EpochSampledEvent` — one step of a shuffled or balls-in-bins run: each record in
  exactly one of the ⌈N/B⌉ batches of an epoch (:func:`flatten` accounts an epoch as one
  run of the mechanism, a certified upper bound under zero-out or replace-one adjacency).
* :class:`SelfComposedEvent` — the same mechanism run ``count`` times.
* :class:`ComposedEvent` — a sequence of different mechanisms (adaptive composition).
* :class:`TuningEvent` — repeat-and-select: a mechanism run a random number K of times,
  only the best run released (hyperparameter search; Papernot & Steinke 2022).
* :class:`LNMaxEvent`, :class:`GNMaxEvent`, :class:`PateThresholdEvent` — one PATE
  aggregator query (noisy argmax of teacher votes; the threshold check of Confident-GNMax),
  data-independent, or data-dependent when the query's vote counts are given;
  :class:`PateVotesEvent` — a whole PATE run over a vote matrix (Papernot et al. 2017, 2018;
  :mod:`dpcalc.mechanisms.pate`).

:func:`dpsgd_event` builds the history of a DP-SGD run and :func:`resolve_schedule`
derives (q, T) from batch size, dataset size and epochs (Abadi et al. 2016, §3.1).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dpcalc import _validate as v
from dpcalc._events_base import Event
from dpcalc._person_events import GroupEvent, MixtureOfGaussiansDpEvent, MixtureOfGaussiansEvent
from dpcalc.errors import ParameterError

if TYPE_CHECKING:  # numpy is imported where the arrays are made, not at import time
    import numpy as np

__all__ = [
    "Event",
    "GaussianEvent",
    "LaplaceEvent",
    "EpsilonDeltaEvent",
    "ExponentialMechanismEvent",
    "PoissonSampledEvent",
    "FixedSizeSampledEvent",
    "TruncatedPoissonSampledEvent",
    "EpochSampledEvent",
    "MixtureOfGaussiansEvent",
    "MixtureOfGaussiansDpEvent",
    "GroupEvent",
    "ungroup",
    "EPOCH_SAMPLINGS",
    "SAMPLINGS",
    "SAMPLED_STEP_BUILDERS",
    "sampled_step",
    "SelfComposedEvent",
    "ComposedEvent",
    "TuningEvent",
    "LNMaxEvent",
    "GNMaxEvent",
    "PateThresholdEvent",
    "PateVotesEvent",
    "PATE_MECHANISMS",
    "RUNS_DISTRIBUTIONS",
    "dpsgd_event",
    "children",
    "flatten",
    "is_data_dependent",
    "walk",
]


@dataclass(frozen=True)
class GaussianEvent(Event):
    """Gaussian mechanism: noise N(0, (noise_multiplier·Δ₂)²) on a query of L2 sensitivity Δ₂.

    Args:
        noise_multiplier: σ, the noise std divided by the L2 sensitivity; > 0.
    """

    noise_multiplier: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "noise_multiplier", v.positive("noise_multiplier", self.noise_multiplier))


@dataclass(frozen=True)
class LaplaceEvent(Event):
    """Laplace mechanism with scale b = scale·Δ₁; it is (1/scale)-DP (Dwork & Roth 2014 Thm 3.6).

    Args:
        scale: b/Δ₁, the Laplace scale in units of the L1 sensitivity; > 0.
    """

    scale: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "scale", v.positive("scale", self.scale))

    @property
    def epsilon(self) -> float:
        return 1.0 / self.scale


@dataclass(frozen=True)
class EpsilonDeltaEvent(Event):
    """A mechanism known only to be (ε, δ)-DP (its dominating pair is the
    generalised randomized response; Kairouz, Oh, Viswanath 2015).

    Args:
        epsilon: ε ≥ 0.
        delta: δ in [0, 1).
    """

    epsilon: float
    delta: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", v.nonnegative("epsilon", self.epsilon))
        d = v.closed_unit("delta", self.delta)
        if d >= 1:
            raise ParameterError("delta", "in [0, 1)", d)
        object.__setattr__(self, "delta", d)


@dataclass(frozen=True)
class ExponentialMechanismEvent(Event):
    r"""An ε-bounded-range (ε-BR) mechanism, e.g. one run of the exponential mechanism.

    ε-BR (Durfee & Rogers 2019; Dong, Durfee, Rogers 2020 §2): for every pair of
    neighbouring datasets x, x′ and all outputs y, y′,

        ln(P_x(y)/P_x′(y)) − ln(P_x(y′)/P_x′(y′)) ≤ ε,

    i.e. the privacy loss lies in an interval [t − ε, t] of width ε, with t ∈ [0, ε]
    (the loss takes both signs because E_{P_x′}[e^L] = 1). Hence ε-BR ⇒ ε-DP. The
    exponential mechanism selecting h with probability ∝ exp(ε·u(x, h)/(2Δu)) is ε-BR
    (each score moves by at most Δu, so the loss varies by at most ε over h), and so is
    the monotone variant ∝ exp(ε·u/Δu); so is report noisy max with Gumbel noise of
    scale 2Δu/ε (it *is* the exponential mechanism). ``epsilon`` is the mechanism's usual
    ε parameter, taken as given for whichever adjacency its score sensitivity Δu was
    stated for (like :class:`EpsilonDeltaEvent`, it is not rescaled under replace-one).

    What the accountants make of it: zCDP ρ = ε²/8 (Cesar & Rogers 2021; Hoeffding's
    lemma), RDP min(αε²/8, the ε-DP randomized-response curve), PLD the dominating pair of
    the ε-BR class (:class:`dpcalc.accounting._pld_mechanisms.BoundedRangeLoss`), and
    ``dpcalc compose`` adds the optimal non-adaptive composition of Dong, Durfee, Rogers
    2020 (:mod:`dpcalc.composition.bounded_range`).

    Args:
        epsilon: ε > 0 (nats), finite: the width of the privacy-loss range.

    Raises:
        ParameterError: ε not a positive finite number.
    """

    epsilon: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", v.positive("epsilon", self.epsilon))


@dataclass(frozen=True)
class PoissonSampledEvent(Event):
    """``event`` applied to a Poisson subsample: each record joins independently
    with probability ``sample_rate`` (q in (0, 1])."""

    sample_rate: float
    event: Event

    def __post_init__(self) -> None:
        object.__setattr__(self, "sample_rate", v.half_open_unit("sample_rate", self.sample_rate))
        if not isinstance(self.event, Event):
            raise ParameterError("event", "a dpcalc Event", self.event)



def _check_batch(e) -> None:
    """Validate and normalise ``batch_size`` B and ``dataset_size`` N (1 ≤ B ≤ N, whole) and the
    wrapped ``event`` of a fixed-size or per-epoch sampler event (in place, frozen dataclass)."""
    n = v.count("dataset_size", e.dataset_size, minimum=1)
    b = v.count("batch_size", e.batch_size, minimum=1)
    if b > n:
        raise ParameterError("batch_size", f"at most dataset_size ({n})", b)
    if not isinstance(e.event, Event):
        raise ParameterError("event", "a dpcalc Event", e.event)
    object.__setattr__(e, "batch_size", b)
    object.__setattr__(e, "dataset_size", n)

@dataclass(frozen=True)
class FixedSizeSampledEvent(Event):
    """``event`` applied to a uniformly random batch of exactly ``batch_size`` (B) of the
    ``dataset_size`` (N) records, drawn afresh at each step: without replacement (a uniformly
    random B-subset; ``replacement=False``) or with replacement (B independent uniform draws,
    a record may repeat; ``replacement=True``). dp_accounting's
    ``SampledWithoutReplacementDpEvent`` / ``SampledWithReplacementDpEvent``.

    The natural adjacency is replace-one (N is public and fixed); which accountant supports
    which adjacency is the accountant's business (its ``check`` says why not).

    Args:
        batch_size: B, a whole number in [1, N].
        dataset_size: N, a whole number ≥ 1.
        event: the mechanism run on the batch (DP-SGD: a :class:`GaussianEvent`).
        replacement: False (default) for sampling without replacement.

    Raises:
        ParameterError: B or N not a whole number, B = 0, B > N, or ``event`` not an Event.
    """

    batch_size: int
    dataset_size: int
    event: Event
    replacement: bool = False

    def __post_init__(self) -> None:
        _check_batch(self)
        object.__setattr__(self, "replacement", bool(self.replacement))

    @property
    def sample_rate(self) -> float:
        """γ = B/N, the probability that a given record is in the batch (without replacement)."""
        return self.batch_size / self.dataset_size

    @property
    def sampling(self) -> str:
        """The ``--sampling`` name of this sampler."""
        return "with-replacement" if self.replacement else "without-replacement"


@dataclass(frozen=True)
class TruncatedPoissonSampledEvent(Event):
    """``event`` applied to a truncated Poisson sample: each of the ``dataset_size`` (N)
    records joins independently with probability ``sample_rate`` (q); if more than
    ``max_batch_size`` (B_max) joined, a uniformly random B_max of them are kept (fixed
    memory on accelerators). dp_accounting's ``TruncatedSubsampledGaussianDpEvent``.

    Args:
        sample_rate: q in (0, 1].
        dataset_size: N, a whole number ≥ 1.
        max_batch_size: B_max, a whole number ≥ 1.
        event: the mechanism run on the batch (DP-SGD: a :class:`GaussianEvent`).

    Raises:
        ParameterError: a parameter outside its range.
    """

    sample_rate: float
    dataset_size: int
    max_batch_size: int
    event: Event

    def __post_init__(self) -> None:
        object.__setattr__(self, "sample_rate", v.half_open_unit("sample_rate", self.sample_rate))
        object.__setattr__(self, "dataset_size", v.count("dataset_size", self.dataset_size, minimum=1))
        object.__setattr__(self, "max_batch_size", v.count("max_batch_size", self.max_batch_size, minimum=1))
        if not isinstance(self.event, Event):
            raise ParameterError("event", "a dpcalc Event", self.event)

    @property
    def sampling(self) -> str:
        """The ``--sampling`` name of this sampler."""
        return "truncated-poisson"


#: the samplers that put each record in exactly one batch per epoch (:class:`EpochSampledEvent`)
EPOCH_SAMPLINGS = ("shuffle", "balls-in-bins")


@dataclass(frozen=True)
class EpochSampledEvent(Event):
    r"""One step of a run whose batches are laid out per epoch: ``shuffle`` (one uniformly
    random permutation per epoch cut into T_e = ⌈N/B⌉ batches) or ``balls-in-bins`` (each
    record put in one of the T_e batches uniformly at random, per epoch; B is the expected
    batch size). Chua, Ghazi, Kamath, Kumar, Manurangsi, Sinha, Zhang, ICML 2024 §2;
    Chua et al., AISTATS 2025.

    Accounting (:func:`flatten`, docs/design.md §4): the layout is drawn independently of the
    data (N is fixed and public: zero-out or replace-one adjacency) and, for a fixed layout,
    the differing record is in exactly one batch per epoch, so ``count`` consecutive steps
    are at most ⌈count/T_e⌉ runs of ``event`` (a partial last epoch is rounded up: the record
    is in at most one of its batches); the mixture over layouts is the same on both datasets
    and the hockey-stick divergence is jointly convex, so the composition of those runs is a
    certified upper bound (Balle & Wang 2018 Thm 8; Dong, Roth, Su 2019 Cor 3.3 for the
    Gaussian: μ = √E/σ). An accountant with ``neighboring="add-remove"`` therefore gives the
    **zero-out** bound (its pair for the mechanism is zero-out's: a record vs a ghost with zero
    contribution), with ``"replace"`` the replace-one bound (sensitivity 2). Add/remove proper
    (N ± 1 records) changes the layout itself and has no analysis: the commands refuse it
    (``SAMPLER_ADJACENCY`` in dpcalc/accounting/_sampling.py). Lower bounds and the
    balls-in-bins estimate: :mod:`dpcalc.accounting.shuffling`.

    Args:
        batch_size: B, a whole number in [1, N].
        dataset_size: N, a whole number ≥ 1.
        event: the mechanism run on the batch (DP-SGD: a :class:`GaussianEvent`).
        sampling: ``"shuffle"`` or ``"balls-in-bins"``.

    Raises:
        ParameterError: B or N not a whole number, B = 0, B > N, an unknown sampler, or
            ``event`` not an Event.
    """

    batch_size: int
    dataset_size: int
    event: Event
    sampling: str = "shuffle"

    def __post_init__(self) -> None:
        _check_batch(self)
        object.__setattr__(self, "sampling", v.choice("sampling", self.sampling, EPOCH_SAMPLINGS))

    @property
    def steps_per_epoch(self) -> int:
        """T_e = ⌈N/B⌉ batches per epoch."""
        return -(-self.dataset_size // self.batch_size)

    @property
    def sample_rate(self) -> float:
        """q = B/N (the Poisson rate a user might have assumed)."""
        return self.batch_size / self.dataset_size

    def epochs(self, steps: int) -> int:
        """⌈steps/T_e⌉: the epochs ``steps`` consecutive steps touch (a partial last one counted whole)."""
        return -(-int(steps) // self.steps_per_epoch)


#: batch samplers dpcalc describes (``--sampling``); each has a step builder in
#: :data:`SAMPLED_STEP_BUILDERS`. Accountants refuse, with the reason, those they cannot handle.
SAMPLINGS = ("poisson", "without-replacement", "with-replacement", "truncated-poisson") + EPOCH_SAMPLINGS


def _poisson_step(event: Event, *, sample_rate: float, **_: object) -> Event:
    q = v.half_open_unit("sample_rate", sample_rate)
    return event if q == 1.0 else PoissonSampledEvent(q, event)


def _fixed_size_step(replacement: bool):
    def build(event: Event, *, batch_size: int | None = None, dataset_size: int | None = None,
              **_: object) -> Event:
        if batch_size is None or dataset_size is None:
            name = "with-replacement" if replacement else "without-replacement"
            raise ParameterError("batch_size", "", None,
                                 message=f"--sampling {name} needs --batch-size and --dataset-size")
        return FixedSizeSampledEvent(batch_size, dataset_size, event, replacement)
    return build


def _truncated_poisson_step(event: Event, *, sample_rate: float, dataset_size: int | None = None,
                            max_batch_size: int | None = None, **_: object) -> Event:
    if dataset_size is None or max_batch_size is None:
        raise ParameterError("max_batch_size", "", max_batch_size, message=(
            "--sampling truncated-poisson needs --batch-size (expected), --dataset-size and --max-batch-size"))
    return TruncatedPoissonSampledEvent(sample_rate, dataset_size, max_batch_size, event)


def _epoch_step(name: str):
    def build(event: Event, *, batch_size: int | None = None, dataset_size: int | None = None,
              **_: object) -> Event:
        if batch_size is None or dataset_size is None:
            raise ParameterError("batch_size", "", None,
                                 message=f"--sampling {name} needs --batch-size and --dataset-size")
        return EpochSampledEvent(batch_size, dataset_size, event, name)
    return build


#: ``--sampling`` name → builder ``(event, *, sample_rate, batch_size, dataset_size,
#: max_batch_size) -> step event``; a new sampler adds its name to :data:`SAMPLINGS` and a
#: builder here (builders ignore keywords they do not use).
SAMPLED_STEP_BUILDERS = {
    "poisson": _poisson_step,
    "without-replacement": _fixed_size_step(False),
    "with-replacement": _fixed_size_step(True),
    "truncated-poisson": _truncated_poisson_step,
    "shuffle": _epoch_step("shuffle"),
    "balls-in-bins": _epoch_step("balls-in-bins"),
}


def sampled_step(event: Event, sampling: str = "poisson", *, sample_rate: float = 1.0,
                 batch_size: int | None = None, dataset_size: int | None = None,
                 max_batch_size: int | None = None) -> Event:
    """One step of a subsampled mechanism: ``event`` run on a batch drawn by ``sampling``.

    Args:
        event: the mechanism run on the batch.
        sampling: one of :data:`SAMPLINGS`.
        sample_rate: q (Poisson, truncated Poisson); for fixed-size samplers it is B/N and unused.
        batch_size: B (fixed-size samplers).
        dataset_size: N (fixed-size samplers, truncated Poisson).
        max_batch_size: B_max (truncated Poisson).

    Raises:
        ParameterError: an unknown sampler or a missing/out-of-range parameter.
    """
    name = v.choice("sampling", sampling, tuple(SAMPLED_STEP_BUILDERS))
    return SAMPLED_STEP_BUILDERS[name](event, sample_rate=sample_rate, batch_size=batch_size,
                                       dataset_size=dataset_size, max_batch_size=max_batch_size)


@dataclass(frozen=True)
class SelfComposedEvent(Event):
    """``event`` run ``count`` times (adaptive composition of identical mechanisms)."""

    event: Event
    count: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "count", v.count("count", self.count, minimum=0))
        if not isinstance(self.event, Event):
            raise ParameterError("event", "a dpcalc Event", self.event)


@dataclass(frozen=True)
class ComposedEvent(Event):
    """Adaptive composition of a sequence of mechanisms."""

    events: tuple[Event, ...]

    def __post_init__(self) -> None:
        events = tuple(self.events)
        for e in events:
            if not isinstance(e, Event):
                raise ParameterError("events", "a sequence of dpcalc Events", e)
        object.__setattr__(self, "events", events)


#: laws of the number of runs K of a :class:`TuningEvent`
RUNS_DISTRIBUTIONS = ("poisson", "negative-binomial", "geometric", "logarithmic")


@dataclass(frozen=True)
class TuningEvent(Event):
    r"""Repeat-and-select: ``event`` run K times independently, K random, and only the best run
    (by any score computed from that run's output) released — private hyperparameter search
    (Liu & Talwar 2019; Papernot & Steinke 2022, "Hyperparameter tuning with Rényi differential
    privacy", ICLR; dp_accounting's ``RepeatAndSelectDpEvent`` describes the same thing).

    Laws of K (``distribution``), all parameterised by their mean ``mean_runs``:

    * ``"poisson"``: K ~ Poisson(μ), μ = ``mean_runs`` ≥ 1 (K = 0 releases nothing);
    * ``"negative-binomial"``: the truncated negative binomial D_{η,γ} of Papernot & Steinke
      2022 §3, P[K = k] = (1−γ)^k/(γ^{−η} − 1)·∏_{ℓ<k}(ℓ+η)/(ℓ+1) for k ≥ 1, shape
      η = ``eta`` in (−1, ∞); γ in (0, 1) is the one giving E[K] = ``mean_runs`` ≥ 1;
    * ``"geometric"``: η = 1, P[K = k] = γ(1−γ)^{k−1} (the random stopping of Liu & Talwar 2019);
    * ``"logarithmic"``: η → 0, P[K = k] = (1−γ)^k/(k·log(1/γ)).

    ``mean_runs`` = 1 with a negative-binomial law is the point mass K = 1 (the limit γ → 1):
    one run.

    Args:
        event: one run (e.g. :func:`dpsgd_event`).
        distribution: one of :data:`RUNS_DISTRIBUTIONS`.
        mean_runs: E[K] ≥ 1 (Poisson and the negative-binomial family).
        eta: the shape η of ``"negative-binomial"`` (required there, in (−1, ∞)); must be
            omitted (None) for Poisson; for geometric/logarithmic None or their own 1/0.

    Raises:
        ParameterError: an unknown law, a mean or shape out of range (named, with the range).
    """

    event: Event
    distribution: str
    mean_runs: float
    eta: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.event, Event):
            raise ParameterError("event", "a dpcalc Event", self.event)
        dist = v.choice("runs_distribution", self.distribution, RUNS_DISTRIBUTIONS)
        mean = v.positive("mean_runs", self.mean_runs)
        eta = self.eta
        if dist == "poisson":
            if eta is not None:
                raise ParameterError("eta", "", eta, message=(
                    "eta is the shape of the negative-binomial law; it does not apply to poisson"))
        else:
            fixed = {"geometric": 1.0, "logarithmic": 0.0}.get(dist)
            if dist == "negative-binomial":
                if eta is None:
                    raise ParameterError("eta", "given with the negative-binomial law", None,
                                         message="eta (the shape, in (-1, inf)) is needed with negative-binomial")
                eta = v.finite("eta", eta)
                if not eta > -1.0:
                    raise ParameterError("eta", "in (-1, inf)", eta)
            elif eta is not None and v.finite("eta", eta) != fixed:
                raise ParameterError("eta", f"{fixed:g} for the {dist} law (or omitted)", eta)
            else:
                eta = fixed
        if mean < 1.0:  # poisson too: Thm 6's ln(μ)/(λ − 1) → −∞ near λ = 1 would certify ε = 0
            raise ParameterError("mean_runs", f"at least 1 for the {dist} law "
                                 f"({'E[K]' if dist == 'poisson' else 'K'} >= 1)", mean)
        object.__setattr__(self, "distribution", dist)
        object.__setattr__(self, "mean_runs", mean)
        object.__setattr__(self, "eta", None if eta is None else float(eta) + 0.0)

    @property
    def shape(self) -> float:
        """η, with ∞ for Poisson (dp_accounting's ``shape`` convention)."""
        return math.inf if self.eta is None else self.eta


def _pate_votes(votes) -> tuple[int, ...] | None:
    """One query's vote counts as a tuple of whole numbers ≥ 0 (None stays None)."""
    if votes is None:
        return None
    try:
        vals = tuple(votes)
    except TypeError:
        raise ParameterError("votes", "a sequence of vote counts", votes) from None
    if not vals:
        raise ParameterError("votes", "at least one class", votes)
    out = []
    for j, x in enumerate(vals):
        n = v.count(f"votes[{j}]", x, minimum=0)
        if n > 2**53:
            raise ParameterError(f"votes[{j}]", "a whole number in [0, 2^53]", x)
        out.append(n)
    if sum(out) == 0:
        raise ParameterError("votes", "counts summing to at least 1 (one teacher)", votes)
    return tuple(out)


@dataclass(frozen=True)
class LNMaxEvent(Event):
    r"""One LNMax query of PATE: the argmax of the teachers' vote counts plus Lap(b) noise each
    (Papernot et al. 2017 §3.1).

    Adjacency: one record changes one teacher's vote, i.e. two counts by one (L1 sensitivity
    2), so the query is ε₀ = 2/b pure DP (the 2017 paper's (2γ, 0)-DP with γ = 1/b). With
    ``votes``, the RDP accountant also applies the data-dependent bound of 2017 Thm 3 where
    it holds (:mod:`dpcalc.mechanisms.pate`); that number depends on the private votes.

    Args:
        scale: b > 0, the Laplace scale in votes.
        votes: this query's vote counts (one per class, whole numbers ≥ 0), or None for the
            data-independent guarantee.

    Raises:
        ParameterError: b not positive and finite; a count negative or not whole; no votes.
    """

    scale: float
    votes: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "scale", v.positive("scale", self.scale))
        object.__setattr__(self, "votes", _pate_votes(self.votes))

    @property
    def epsilon(self) -> float:
        """ε₀ = 2/b (pure DP of one query)."""
        return 2.0 / self.scale


@dataclass(frozen=True)
class GNMaxEvent(Event):
    r"""One GNMax query of PATE: the argmax of the vote counts plus N(0, σ²) noise each
    (Papernot et al. 2018 §4.1): RDP λ/σ² (L2 sensitivity √2, 2018 Prop 8); with ``votes``
    the RDP accountant also applies 2018 Thm 6 (q̃ of Prop 7, orders of Prop 10) where it holds.

    Args:
        noise_multiplier: σ > 0, the noise std in votes.
        votes: this query's vote counts, or None (data-independent).

    Raises:
        ParameterError: σ not positive and finite; a bad count.
    """

    noise_multiplier: float
    votes: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "noise_multiplier", v.positive("noise_multiplier", self.noise_multiplier))
        object.__setattr__(self, "votes", _pate_votes(self.votes))


@dataclass(frozen=True)
class PateThresholdEvent(Event):
    r"""The threshold check of Confident-GNMax (Papernot et al. 2018 Alg 1, step 1): releases
    whether max_j n_j + N(0, σ₁²) ≥ T. RDP λ/(2σ₁²) (the max count has sensitivity 1); with
    ``votes`` the RDP accountant also applies 2018 Thm 6 with q̃ = min(Pr[pass], Pr[fail]).

    Args:
        noise_multiplier: σ₁ > 0 (votes).
        threshold: T (votes), needed with ``votes``; ignored (None) otherwise.
        votes: the query's vote counts, or None (data-independent).

    Raises:
        ParameterError: σ₁ not positive; votes without a threshold; a bad count.
    """

    noise_multiplier: float
    threshold: float | None = None
    votes: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "noise_multiplier", v.positive("noise_multiplier", self.noise_multiplier))
        object.__setattr__(self, "votes", _pate_votes(self.votes))
        if self.threshold is not None:
            object.__setattr__(self, "threshold", v.finite("threshold", self.threshold) + 0.0)
        elif self.votes is not None:
            raise ParameterError("threshold", "given with votes", None,
                                 message="threshold is needed with votes (the data-dependent check)")


#: aggregators of :class:`PateVotesEvent`
PATE_MECHANISMS = ("lnmax", "gnmax", "confident-gnmax")


@dataclass(frozen=True)
class PateVotesEvent(Event):
    r"""A whole PATE run over a vote matrix, analysed data-dependently (Papernot et al. 2017
    Thm 3; 2018 Thm 6, Alg 1): the composition of one query event per row, stored compactly.

    Build it with :func:`dpcalc.mechanisms.pate.pate_votes_event` (which validates a vote array);
    this class checks only its own fields. ``votes_bytes`` holds the (k, m) counts as little-endian
    float64 (whole numbers ≥ 0, every row the same total); ``answered_bytes`` the rows that
    passed the threshold check (Confident-GNMax; one byte 0/1 per row; None: every row).

    Attributes:
        mechanism: ``"lnmax"``, ``"gnmax"`` or ``"confident-gnmax"``.
        noise: b (lnmax) or σ (gnmax) or σ₂ (confident-gnmax), in votes.
        shape: (k, m).
        sigma1, threshold: the check's σ₁ and T (confident-gnmax only).
    """

    mechanism: str
    noise: float
    shape: tuple[int, int]
    votes_bytes: bytes
    sigma1: float | None = None
    threshold: float | None = None
    answered_bytes: bytes | None = None

    def __post_init__(self) -> None:
        mech = v.choice("mechanism", self.mechanism, PATE_MECHANISMS)
        object.__setattr__(self, "noise", v.positive("noise", self.noise))
        k, m = (int(x) for x in self.shape)
        if k < 0 or m < 1 or len(self.votes_bytes) != 8 * k * m:
            raise ParameterError("votes", "a (queries, classes) matrix", self.shape)
        object.__setattr__(self, "shape", (k, m))
        if mech == "confident-gnmax":
            object.__setattr__(self, "sigma1", v.positive("sigma1", self.sigma1))
            object.__setattr__(self, "threshold", v.finite("threshold", self.threshold) + 0.0)
            if self.answered_bytes is not None and len(self.answered_bytes) != k:
                raise ParameterError("answered", f"one entry per query ({k})", len(self.answered_bytes))
        elif self.sigma1 is not None or self.threshold is not None or self.answered_bytes is not None:
            raise ParameterError("sigma1", "", self.sigma1,
                                 message="sigma1, threshold and answered apply to confident-gnmax only")

    def votes(self) -> np.ndarray:
        """The counts as a read-only float64 array of shape (k, m)."""
        import numpy as np

        return np.frombuffer(self.votes_bytes, dtype="<f8").reshape(self.shape)

    def answered(self) -> np.ndarray:
        """bool (k,): the rows that passed the check (all True unless given)."""
        import numpy as np

        if self.answered_bytes is None:
            return np.ones(self.shape[0], dtype=bool)
        return np.frombuffer(self.answered_bytes, dtype=np.uint8).astype(bool)


def ungroup(e: GroupEvent) -> Event:
    """The exact ungrouped form of a group event (:func:`flatten`): its event for k = 1, the
    Gaussian (Laplace) mechanism at σ/k (scale/k) for an unsampled one; else ``e`` itself."""
    inner, k = e.event, e.group_size
    if isinstance(inner, PoissonSampledEvent) and inner.sample_rate == 1.0:
        inner = inner.event
    if k == 1:
        return inner
    if isinstance(inner, GaussianEvent):
        return GaussianEvent(inner.noise_multiplier / k)
    if isinstance(inner, LaplaceEvent):
        return LaplaceEvent(inner.scale / k)
    return e


def dpsgd_event(*, noise_multiplier: float, sample_rate: float = 1.0, steps: int,
                sampling: str = "poisson", batch_size: int | None = None,
                dataset_size: int | None = None, max_batch_size: int | None = None,
                group_size: int = 1) -> Event:
    """The history of a DP-SGD run (Abadi et al. 2016, Algorithm 1).

    Args:
        noise_multiplier: σ, noise std divided by the clipping norm C; > 0.
        sample_rate: q, the Poisson sampling probability of each step, in (0, 1].
            q = 1 means no subsampling (the Gaussian mechanism composed T times).
            Ignored by the fixed-size samplers (their rate is B/N).
        steps: T, the number of noisy gradient steps; ≥ 0.
        sampling: the batch sampler, one of :data:`SAMPLINGS` (default ``"poisson"``).
        batch_size: B, with ``"without-replacement"``/``"with-replacement"``.
        dataset_size: N, with the fixed-size samplers and ``"truncated-poisson"``.
        max_batch_size: B_max, with ``"truncated-poisson"``.
        group_size: k ≥ 1: the history as seen by a group of k records (each step wrapped in a
            :class:`GroupEvent`; default 1, one record).

    Returns:
        ``SelfComposedEvent(step, T)`` with step :func:`sampled_step` of ``GaussianEvent(σ)``:
        ``PoissonSampledEvent(q, GaussianEvent(σ))`` for Poisson (``GaussianEvent(σ)`` when
        q = 1), :class:`FixedSizeSampledEvent`, or :class:`TruncatedPoissonSampledEvent`.

    Raises:
        ParameterError: a parameter outside its range.
    """
    gaussian = GaussianEvent(noise_multiplier)
    step = sampled_step(gaussian, sampling, sample_rate=sample_rate, batch_size=batch_size,
                        dataset_size=dataset_size, max_batch_size=max_batch_size)
    k = v.count("group_size", group_size, minimum=1)
    return SelfComposedEvent(GroupEvent(k, step) if k > 1 else step, v.count("steps", steps, minimum=0))


def children(event: Event) -> tuple[Event, ...]:
    """The events directly inside ``event``: the parts of a composition, the mechanism that a
    sampled, self-composed, epoch-sampled or repeat-and-select event runs; ``()`` for a leaf.

    This is the one place that knows how events nest: code that walks a history calls
    :func:`children` or :func:`walk` instead of probing attributes.
    """
    if isinstance(event, ComposedEvent):
        return event.events
    if isinstance(event, (SelfComposedEvent, PoissonSampledEvent, FixedSizeSampledEvent,
                          TruncatedPoissonSampledEvent, EpochSampledEvent, TuningEvent, GroupEvent)):
        return (event.event,)
    return ()


def walk(event: Event) -> Iterator[Event]:
    """Every event of the tree rooted at ``event``, depth first, ``event`` itself first
    (a generator; repeated sub-histories are yielded each time they occur)."""
    stack = [event]
    while stack:
        e = stack.pop()
        yield e
        stack.extend(reversed(children(e)))


def is_data_dependent(event: Event) -> bool:
    """Whether the history holds a PATE query or run described together with its private votes
    (a :class:`PateVotesEvent`, or an LNMax/GNMax/threshold query with ``votes``): an ε computed
    for it is a number about those votes — data-dependent, not a publishable guarantee
    (Papernot et al. 2018 §3; accountants report such rows ``certified: false`` with
    ``details["data_dependent"]``)."""
    return any(isinstance(e, PateVotesEvent)
               or (isinstance(e, (LNMaxEvent, GNMaxEvent, PateThresholdEvent)) and e.votes is not None)
               for e in walk(event))


def flatten(event: Event) -> list[tuple[Event, int]]:
    """A history as (step, count) pairs: compositions unrolled, identical steps merged
    (first-seen order), zero counts dropped, and a Poisson-sampled event with sample rate 1
    replaced by the event itself (it is the same mechanism).

    Steps are the leaves: GaussianEvent, LaplaceEvent, EpsilonDeltaEvent,
    ExponentialMechanismEvent, PoissonSampledEvent, FixedSizeSampledEvent and
    TruncatedPoissonSampledEvent (kept whole; accountants decide which they support). A
    truncated Poisson sample that can never exceed its cap, even on a neighbour with one more
    record (B_max > N), is the Poisson sample. ``count`` steps of an :class:`EpochSampledEvent`
    (shuffle, balls-in-bins) become ⌈count/T_e⌉ runs of its mechanism (one per epoch, a partial
    last epoch rounded up; a lone step is one run): the certified upper bound of its docstring,
    taken before merging so that separate runs never share an epoch. A :class:`GroupEvent` of one
    record is its event; of a Gaussian or Laplace mechanism (sampled at rate 1 or not), the
    mechanism at k times the sensitivity (exact); any other group stays whole.
    """
    out: dict[Event, int] = {}

    def walk(e: Event, mult: int) -> None:
        if isinstance(e, SelfComposedEvent) and isinstance(e.event, EpochSampledEvent):
            walk(e.event.event, mult * e.event.epochs(e.count))
        elif isinstance(e, EpochSampledEvent):
            walk(e.event, mult)
        elif isinstance(e, SelfComposedEvent):
            walk(e.event, mult * e.count)
        elif isinstance(e, ComposedEvent):
            for sub in e.events:
                walk(sub, mult)
        elif isinstance(e, GroupEvent) and ungroup(e) is not e:
            walk(ungroup(e), mult)
        elif mult:
            step = e.event if isinstance(e, PoissonSampledEvent) and e.sample_rate == 1.0 else e
            if isinstance(step, TruncatedPoissonSampledEvent) and step.max_batch_size > step.dataset_size:
                # never truncated, even on a neighbour with one more record
                step = step.event if step.sample_rate == 1.0 else PoissonSampledEvent(step.sample_rate, step.event)
            out[step] = out.get(step, 0) + mult

    walk(event, 1)
    return list(out.items())
