"""Which histories the pld accountant accounts for: a history as checked (step, count)
segments (:func:`segments`), with the reason for every step it refuses (docs/design.md §3).

The accountant's registry name is passed in (``accountant``) for the messages of the shared
refusals (:func:`~dpcalc.accounting._sampling.refuse_sampler`,
:func:`~dpcalc.accounting.tuning.refuse_tuning`).
"""

from __future__ import annotations

from dpcalc.accounting._sampling import (
    WITH_REPLACEMENT_REPLACE_REASON,
    is_sampler_event,
    refuse_sampler,
)
from dpcalc.accounting._sampling_pld import without_replacement_add_remove_step
from dpcalc.accounting._truncated_pld import check_truncated_step
from dpcalc.accounting.group import check_mixture_step, is_mixture_step
from dpcalc.accounting.tuning import refuse_tuning
from dpcalc.errors import UnsupportedEventError
from dpcalc.events import (
    ComposedEvent,
    EpsilonDeltaEvent,
    Event,
    ExponentialMechanismEvent,
    FixedSizeSampledEvent,
    GaussianEvent,
    GNMaxEvent,
    LaplaceEvent,
    LNMaxEvent,
    PateThresholdEvent,
    PateVotesEvent,
    PoissonSampledEvent,
    SelfComposedEvent,
    TruncatedPoissonSampledEvent,
    flatten,
)

__all__ = ["BR_MAX_EPSILON", "has_pate", "check_sampler_step", "segments"]

#: the largest ε of an exponential mechanism pld discretises (its grid of losses up to ~ε
#: must stay below the e^700 overflow of the lower-bound construction)
BR_MAX_EPSILON = 650.0


def has_pate(event: Event) -> bool:
    """Whether the history holds a PATE query (any count, as ``dpcalc.accounting.pate.as_standard`` walks it)."""
    if isinstance(event, SelfComposedEvent):
        return has_pate(event.event)
    if isinstance(event, ComposedEvent):
        return any(has_pate(e) for e in event.events)
    return isinstance(event, (LNMaxEvent, GNMaxEvent, PateThresholdEvent, PateVotesEvent))


def check_sampler_step(event: Event, neighboring: str, accountant: str) -> None:
    """The pld accountant's check of one sampler step: fixed-size sampling of a Gaussian without
    replacement, under replace-one (Dong, Roth, Su 2022 §4.1) or add/remove (the Poisson-sampled
    Gaussian at q = B/N, σ/2; issue 32), or with replacement under add/remove (the binomial
    mixture of Gaussians; issue 32), dpcalc/accounting/_sampling_pld.py; truncated Poisson
    sampling of a Gaussian under add/remove (the branch decomposition,
    dpcalc/accounting/_truncated_pld.py).

    Raises:
        UnsupportedEventError: any other sampler or sampled mechanism, with the reason.
    """
    if not is_sampler_event(event):
        return
    if isinstance(event, TruncatedPoissonSampledEvent):  # add/remove (dpcalc/accounting/_truncated_pld.py)
        check_truncated_step(event, neighboring)
        return
    if not isinstance(event, FixedSizeSampledEvent):
        refuse_sampler(event, accountant)
    if event.replacement and neighboring == "replace":
        raise UnsupportedEventError(f"{accountant}: {WITH_REPLACEMENT_REPLACE_REASON}")
    if not isinstance(event.event, GaussianEvent):
        raise UnsupportedEventError(
            f"pld: {event.sampling} sampling is accounted for the Gaussian mechanism only, "
            f"got a sampled {type(event.event).__name__}")


def segments(event: Event, neighboring: str, accountant: str) -> list[tuple[Event, int]]:
    """The history as (step event, count) pairs (:func:`dpcalc.events.flatten`), checked.

    Under add/remove a fixed-size step without replacement is replaced by the Poisson-sampled
    Gaussian that dominates it and is attained
    (:func:`~dpcalc.accounting._sampling_pld.without_replacement_add_remove_step`), merged with
    an equal step of the history."""
    if has_pate(event):  # PATE queries → standard ones (pate.py imports rdp: only when needed)
        from dpcalc.accounting.pate import as_standard, refuse_replace

        refuse_replace(event, neighboring, accountant)
        event = as_standard(event)
    segs = flatten(event)
    if neighboring != "replace" and any(is_sampler_event(s) for s, _ in segs):
        merged: dict[Event, int] = {}
        for step, count in segs:
            check_sampler_step(step, neighboring, accountant)
            if isinstance(step, FixedSizeSampledEvent) and not step.replacement:
                step = without_replacement_add_remove_step(step)
            merged[step] = merged.get(step, 0) + count
        segs = list(merged.items())
    for step, _ in segs:
        if is_mixture_step(step):  # mixture of Gaussians, group of records (dpcalc/accounting/group.py)
            check_mixture_step(step, neighboring, accountant)
        elif is_sampler_event(step):  # dpcalc/accounting/_sampling.py: the samplers pld has a pair for
            check_sampler_step(step, neighboring, accountant)
        elif isinstance(step, PoissonSampledEvent):
            if not isinstance(step.event, GaussianEvent):
                raise UnsupportedEventError(
                    "pld supports Poisson sampling of the Gaussian mechanism only, "
                    f"not of {type(step.event).__name__}")
        elif not isinstance(step, (GaussianEvent, LaplaceEvent, EpsilonDeltaEvent, ExponentialMechanismEvent)):
            refuse_tuning(step, accountant)
            refuse_sampler(step, accountant)
            raise UnsupportedEventError(f"pld cannot account for {type(step).__name__}")
        elif isinstance(step, ExponentialMechanismEvent) and step.epsilon > BR_MAX_EPSILON:
            raise UnsupportedEventError(
                f"pld handles exponential (ε-bounded-range) mechanisms with ε ≤ {BR_MAX_EPSILON:g} (its loss grid "
                f"would reach e^700), got ε = {step.epsilon:g}; see rdp, optimal")
    return segs


