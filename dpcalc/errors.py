"""Exceptions raised by dpcalc's public functions.

The CLI turns :class:`ParameterError` into a one-line ``Error: ...`` message with
exit status 2 and :class:`InfeasibleError` into one with exit status 1
(docs/design.md §5).
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["DpcalcError", "ParameterError", "InfeasibleError", "UnsupportedEventError"]


class DpcalcError(Exception):
    """Base class of every error dpcalc raises on purpose."""


def _show(value: Any) -> str:
    """The offending value as shown in a one-line message: huge integers by their size (str() of
    one beyond 4,300 digits raises), long texts cut."""
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return f"{value:.10g}"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value).bit_length() > 200:
        return f"{'-' if value < 0 else ''}an integer of about {int(abs(value).bit_length() * 0.30103) + 1:,} digits"
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 100 else f"{text[:60]}... ({len(text):,} characters)"


class ParameterError(DpcalcError, ValueError):
    """A parameter is outside its allowed range (bad input).

    Attributes:
        name: glossary name of the parameter (``delta``, ``sample_rate``, ...).
        allowed: human-readable allowed range, e.g. ``"in (0, 1)"``.
        value: the offending value.
    """

    def __init__(self, name: str, allowed: str, value: Any = None, *, message: str | None = None):
        self.name = name
        self.allowed = allowed
        self.value = value
        if message is None:
            message = f"{name} must be {allowed}, got {_show(value)}"
        self.message = message
        super().__init__(message)


class InfeasibleError(DpcalcError):
    """A well-formed request that no parameter value can satisfy
    (e.g. a target ε that no noise multiplier reaches under an accountant)."""


class UnsupportedEventError(DpcalcError):
    """An accountant cannot account for the given mechanism or neighbouring relation.

    The message says why (shown as the reason of a not-applicable result row).
    """
