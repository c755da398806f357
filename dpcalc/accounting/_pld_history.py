"""Which histories the pld accountant accounts for: a history as checked (step, count)
segments (:func:`segments`), with the reason for every step it refuses (docs/design.md §3).

The accountant's registry name is passed in (``accountant``) for the messages of the shared
refusals (:func:`~dpcalc.accounting._sampling.refuse_sampler`,
:func:`~dpcalc.accounting.tuning.refuse_tuning`).
"""

from __future__ import annotations

from dpcalc.accounting._sampling import WOR_ADD_REMOVE_REASON, is_sampler_event, refuse_sampler
from dpcalc.accounting._truncated_pld import check_truncated_step
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
    """The pld accountant's check of one sampler step: fixed-size sampling without replacement of
    a Gaussian under replace-one (Dong, Roth, Su 2022 §4.1; dpcalc/accounting/_sampling_pld.py);
    truncated Poisson sampling of a Gaussian under add/remove (dpcalc/accounting/_truncated_pld.py).

    Raises:
        UnsupportedEventError: any other sampler, adjacency or sampled mechanism, with the reason.
    """
    if not is_sampler_event(event):
        return
    if isinstance(event, TruncatedPoissonSampledEvent):  # add/remove (dpcalc/accounting/_truncated_pld.py)
        check_truncated_step(event, neighboring)
        return
    if not (isinstance(event, FixedSizeSampledEvent) and not event.replacement):
        refuse_sampler(event, accountant)
    if neighboring != "replace":
        raise UnsupportedEventError(f"pld: {WOR_ADD_REMOVE_REASON}")
    if not isinstance(event.event, GaussianEvent):
        raise UnsupportedEventError(
            "pld: sampling without replacement is accounted for the Gaussian mechanism only, "
            f"got a sampled {type(event.event).__name__}")


def segments(event: Event, neighboring: str, accountant: str) -> list[tuple[Event, int]]:
    """The history as (step event, count) pairs (:func:`dpcalc.events.flatten`), checked."""
    if has_pate(event):  # PATE queries → standard ones (pate.py imports rdp: only when needed)
        from dpcalc.accounting.pate import as_standard, refuse_replace

        refuse_replace(event, neighboring, accountant)
        event = as_standard(event)
    segs = flatten(event)
    for step, _ in segs:
        if is_sampler_event(step):  # dpcalc/accounting/_sampling.py: pld has without replacement only
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


