"""Events as data: :mod:`dpcalc.events` objects to and from plain JSON (docs/design.md §2).

The ledger stores what a mechanism did — its event — as JSON text, not as pickles: any
later dpcalc (or an auditor with ``jq``) can read it back, and :func:`event_from_json`
rebuilds the very same frozen event (floats round-trip exactly through their shortest
``repr``, which is what :func:`json.dumps` writes). Every field is validated again by the
event's own constructor, so a tampered row gives a :class:`~dpcalc.errors.ParameterError`
naming the field, never a wrong ε.
"""

from __future__ import annotations

import json
import math
from typing import Any

from dpcalc.errors import ParameterError
from dpcalc.events import (
    ComposedEvent,
    EpochSampledEvent,
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
    TuningEvent,
)

__all__ = ["event_to_json", "event_from_json", "dumps", "loads", "check_plain", "MAX_DEPTH",
           "PRIVATE_VOTES_REASON"]

#: why a PATE event holding vote counts is never stored (docs/design.md §11)
PRIVATE_VOTES_REASON = (
    "a PATE event with the teachers' vote counts is data-dependent: the votes (and any ε computed from "
    "them) are private, so the ledger stores only the data-independent event (votes=None)")

#: deepest nesting accepted when reading an event back (a DP-SGD run is 3 levels deep)
MAX_DEPTH = 32


def event_to_json(event: Event) -> dict:
    """The JSON form of ``event``: ``{"type": ..., <fields>}``, nested events inline.

    Raises:
        ParameterError: an event type the ledger cannot store.
    """
    if isinstance(event, GaussianEvent):
        return {"type": "gaussian", "noise_multiplier": event.noise_multiplier}
    if isinstance(event, LaplaceEvent):
        return {"type": "laplace", "scale": event.scale}
    if isinstance(event, EpsilonDeltaEvent):
        return {"type": "epsilon-delta", "epsilon": event.epsilon, "delta": event.delta}
    if isinstance(event, ExponentialMechanismEvent):
        return {"type": "bounded-range", "epsilon": event.epsilon}
    if isinstance(event, PoissonSampledEvent):
        return {"type": "poisson-sampled", "sample_rate": event.sample_rate,
                "event": event_to_json(event.event)}
    if isinstance(event, SelfComposedEvent):
        return {"type": "self-composed", "count": event.count, "event": event_to_json(event.event)}
    if isinstance(event, ComposedEvent):
        return {"type": "composed", "events": [event_to_json(e) for e in event.events]}
    if isinstance(event, TuningEvent):
        return {"type": "tuning", "distribution": event.distribution, "mean_runs": event.mean_runs,
                "eta": event.eta, "event": event_to_json(event.event)}
    if isinstance(event, FixedSizeSampledEvent):
        return {"type": "fixed-size-sampled", "batch_size": event.batch_size,
                "dataset_size": event.dataset_size, "replacement": event.replacement,
                "event": event_to_json(event.event)}
    if isinstance(event, TruncatedPoissonSampledEvent):
        return {"type": "truncated-poisson-sampled", "sample_rate": event.sample_rate,
                "dataset_size": event.dataset_size, "max_batch_size": event.max_batch_size,
                "event": event_to_json(event.event)}
    if isinstance(event, EpochSampledEvent):
        return {"type": "epoch-sampled", "sampling": event.sampling, "batch_size": event.batch_size,
                "dataset_size": event.dataset_size, "event": event_to_json(event.event)}
    if isinstance(event, PateVotesEvent) or getattr(event, "votes", None) is not None:
        raise ParameterError("event", "", type(event).__name__, message=PRIVATE_VOTES_REASON)
    if isinstance(event, LNMaxEvent):
        return {"type": "pate-lnmax", "scale": event.scale}
    if isinstance(event, GNMaxEvent):
        return {"type": "pate-gnmax", "noise_multiplier": event.noise_multiplier}
    if isinstance(event, PateThresholdEvent):  # data-independent: T does not enter its RDP
        return {"type": "pate-threshold", "noise_multiplier": event.noise_multiplier}
    raise ParameterError("event", "a dpcalc event the ledger can store", type(event).__name__)


def _field(data: dict, key: str, kind: type | tuple[type, ...]) -> Any:
    if key not in data:
        raise ParameterError("event", "", None, message=f"ledger event lacks the field {key!r}")
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, kind):
        raise ParameterError("event", "", value,
                             message=f"ledger event field {key!r} has the wrong type "
                                     f"({type(value).__name__})")
    if isinstance(value, float) and not math.isfinite(value):
        raise ParameterError("event", "", value, message=f"ledger event field {key!r} is not finite")
    return value


def event_from_json(data: Any, _depth: int = 0) -> Event:
    """Rebuild an event from :func:`event_to_json`'s form (every field re-validated).

    Raises:
        ParameterError: not an object, an unknown type, a missing or invalid field, or
            nesting deeper than :data:`MAX_DEPTH`.
    """
    if _depth > MAX_DEPTH:
        raise ParameterError("event", "", None, message=f"ledger event nested deeper than {MAX_DEPTH}")
    if not isinstance(data, dict):
        raise ParameterError("event", "", None,
                             message=f"a ledger event must be a JSON object, got {type(data).__name__}")
    kind = data.get("type")
    num = (int, float)
    if kind == "gaussian":
        return GaussianEvent(_field(data, "noise_multiplier", num))
    if kind == "laplace":
        return LaplaceEvent(_field(data, "scale", num))
    if kind == "epsilon-delta":
        return EpsilonDeltaEvent(_field(data, "epsilon", num), _field(data, "delta", num))
    if kind == "bounded-range":
        return ExponentialMechanismEvent(_field(data, "epsilon", num))
    if kind == "poisson-sampled":
        return PoissonSampledEvent(_field(data, "sample_rate", num),
                                   event_from_json(_field(data, "event", dict), _depth + 1))
    if kind == "self-composed":
        return SelfComposedEvent(event_from_json(_field(data, "event", dict), _depth + 1),
                                 _field(data, "count", int))
    if kind == "composed":
        events = _field(data, "events", list)
        return ComposedEvent(tuple(event_from_json(e, _depth + 1) for e in events))
    if kind == "tuning":
        eta = data.get("eta")
        if eta is not None:
            eta = _field(data, "eta", num)
        return TuningEvent(event_from_json(_field(data, "event", dict), _depth + 1),
                           _field(data, "distribution", str), _field(data, "mean_runs", num), eta)
    if kind == "fixed-size-sampled":
        replacement = data.get("replacement", False)
        if not isinstance(replacement, bool):
            raise ParameterError("event", "", replacement,
                                 message="ledger event field 'replacement' must be true or false")
        return FixedSizeSampledEvent(_field(data, "batch_size", int), _field(data, "dataset_size", int),
                                     event_from_json(_field(data, "event", dict), _depth + 1), replacement)
    if kind == "truncated-poisson-sampled":
        return TruncatedPoissonSampledEvent(_field(data, "sample_rate", num), _field(data, "dataset_size", int),
                                            _field(data, "max_batch_size", int),
                                            event_from_json(_field(data, "event", dict), _depth + 1))
    if kind == "epoch-sampled":
        return EpochSampledEvent(_field(data, "batch_size", int), _field(data, "dataset_size", int),
                                 event_from_json(_field(data, "event", dict), _depth + 1),
                                 _field(data, "sampling", str))
    if kind in ("pate-lnmax", "pate-gnmax", "pate-threshold") and "votes" in data:
        raise ParameterError("event", "", kind, message=PRIVATE_VOTES_REASON)
    if kind == "pate-lnmax":
        return LNMaxEvent(_field(data, "scale", num))
    if kind == "pate-gnmax":
        return GNMaxEvent(_field(data, "noise_multiplier", num))
    if kind == "pate-threshold":
        return PateThresholdEvent(_field(data, "noise_multiplier", num))
    raise ParameterError("event", "", kind, message=f"unknown ledger event type {str(kind)[:40]!r}")


def dumps(obj: Any) -> str:
    """Compact, key-sorted JSON with exact float round trips (NaN/inf refused)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)


def loads(text: str) -> Any:
    """JSON text to Python, refusing NaN/Infinity literals and numbers that overflow a float
    (``1e999``): a ledger never holds them.

    Raises:
        ValueError: not JSON, or a non-finite number. RecursionError: nesting deeper than
            Python's recursion limit (callers map both to one line).
    """
    def bad(token: str) -> Any:
        raise ValueError(f"non-finite number {token[:40]} (not finite)")

    def number(token: str) -> float:
        x = float(token)
        if not math.isfinite(x):
            bad(token)
        return x
    return json.loads(text, parse_constant=bad, parse_float=number)


def check_plain(value: Any, what: str = "params", _depth: int = 0) -> Any:
    """Check that ``value`` is plain JSON a ledger may store: objects with string keys, lists,
    strings, booleans, None, integers and finite floats, nested at most :data:`MAX_DEPTH` deep
    (what a release records; an import is held to the same rule).

    Returns:
        ``value`` unchanged.

    Raises:
        ParameterError: anything else, naming ``what`` and the reason.
    """
    if _depth > MAX_DEPTH:
        raise ParameterError(what, "", None, message=f"ledger {what} nested deeper than {MAX_DEPTH} levels")
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ParameterError(what, "", value, message=f"ledger {what} holds a number that is not finite")
        return value
    if isinstance(value, dict):
        for k, item in value.items():
            if not isinstance(k, str):
                raise ParameterError(what, "", None, message=f"ledger {what} has a key that is not a string")
            check_plain(item, what, _depth + 1)
        return value
    if isinstance(value, (list, tuple)):
        for item in value:
            check_plain(item, what, _depth + 1)
        return value
    raise ParameterError(what, "", None,
                         message=f"ledger {what} holds a {type(value).__name__}, not plain JSON")
