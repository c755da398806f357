"""Validation helpers used at every public boundary.

Each helper returns the validated (converted) value or raises
:class:`~dpcalc.errors.ParameterError` naming the parameter, the allowed range
and the value found.
"""

from __future__ import annotations

import math
import numbers
import re
from typing import Any

from dpcalc.errors import ParameterError

#: a number as dpcalc reads it from text: ASCII decimal or scientific notation (no ``1_0``, no
#: Unicode digits, no hexadecimal); ``inf``/``nan`` are recognised so that range checks can
#: refuse them with a range message
NUMBER_TEXT = re.compile(
    r"[+-]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf|infinity|nan)",
    re.ASCII | re.IGNORECASE)


def parse_number(text: str) -> float:
    """``float(text)`` for text matching :data:`NUMBER_TEXT` (surrounding spaces allowed).

    Raises:
        ValueError: any other text (``1_0``, ``١``, ``0x10``, ``''``), unlike ``float``.
    """
    s = str(text).strip(" \t")
    if not NUMBER_TEXT.fullmatch(s):
        raise ValueError(f"not a plain decimal number: {text!r}")
    return float(s)


def _as_float(name: str, value: Any, allowed: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ParameterError(name, allowed, value)
    x = float(value)
    if math.isnan(x):
        raise ParameterError(name, allowed, x)
    return x


def positive(name: str, value: Any, *, allow_inf: bool = False) -> float:
    """A real number > 0 (finite unless ``allow_inf``)."""
    allowed = "a positive number" if allow_inf else "a finite number > 0"
    x = _as_float(name, value, allowed)
    if not x > 0 or (math.isinf(x) and not allow_inf):
        raise ParameterError(name, allowed, x)
    return x


def nonnegative(name: str, value: Any) -> float:
    """A finite real number ≥ 0."""
    x = _as_float(name, value, "a finite number >= 0")
    if not (x >= 0 and math.isfinite(x)):
        raise ParameterError(name, "a finite number >= 0", x)
    return x


def finite(name: str, value: Any) -> float:
    """Any finite real number."""
    x = _as_float(name, value, "a finite number")
    if not math.isfinite(x):
        raise ParameterError(name, "a finite number", x)
    return x


def open_unit(name: str, value: Any) -> float:
    """A probability strictly inside (0, 1), e.g. δ."""
    x = _as_float(name, value, "in (0, 1)")
    if not 0 < x < 1:
        raise ParameterError(name, "in (0, 1)", x)
    return x


def half_open_unit(name: str, value: Any) -> float:
    """A probability in (0, 1], e.g. the sample rate q."""
    x = _as_float(name, value, "in (0, 1]")
    if not 0 < x <= 1:
        raise ParameterError(name, "in (0, 1]", x)
    return x


def closed_unit(name: str, value: Any) -> float:
    """A probability in [0, 1]."""
    x = _as_float(name, value, "in [0, 1]")
    if not 0 <= x <= 1:
        raise ParameterError(name, "in [0, 1]", x)
    return x


def count(name: str, value: Any, *, minimum: int = 1) -> int:
    """A whole number ≥ ``minimum`` (floats with an integral value are accepted)."""
    allowed = f"a whole number >= {minimum}"
    if isinstance(value, bool):
        raise ParameterError(name, allowed, value)
    if isinstance(value, numbers.Integral):
        n = int(value)
    elif isinstance(value, numbers.Real) and math.isfinite(float(value)) and float(value).is_integer():
        n = int(value)
    else:
        raise ParameterError(name, allowed, value)
    if n < minimum:
        raise ParameterError(name, allowed, n)
    return n


def choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    """One of a fixed set of strings."""
    if value not in choices:
        raise ParameterError(name, "one of " + ", ".join(choices), value)
    return value
