"""The base class of every event (:mod:`dpcalc.events` re-exports it; kept apart so that the
event modules it is split into import it without a circle)."""

from __future__ import annotations

__all__ = ["Event"]


class Event:
    """Base class of mechanism descriptions (immutable, hashable)."""

    __slots__ = ()
