"""Streaming CSV input and output of ``dpcalc ldp randomize`` / ``estimate``: values in, reports
out, reports in — in chunks of lines, so that 10⁷ reports need only one chunk of memory.

Formats (one record a line, ``\\n`` or ``\\r\\n``):

* values: one whole number in [0, k) a line (frequency protocols) or one decimal number (mean
  protocols); no header.
* reports: a first line ``# dpcalc-ldp protocol=<name> epsilon=<ε> domain_size=<k> …`` naming
  the protocol's parameters, then one report a line: comma-separated whole numbers in the
  protocol's fields (``FrequencyOracle.fields``), a field ``bits`` being one string of 0/1
  characters (``sue``, ``oue``, ``rappor``: k characters; ``cms``: m characters after j).

A malformed line is a :class:`~dpcalc.errors.ParameterError` naming the line number.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import IO

import numpy as np

from dpcalc._validate import NUMBER_TEXT
from dpcalc.errors import ParameterError
from dpcalc.mechanisms.ldp._core import FrequencyOracle

__all__ = ["read_values", "format_reports", "read_reports", "header", "CHUNK_CELLS"]

#: about this many numbers are held per chunk
CHUNK_CELLS = 1 << 22
_INT = re.compile(rb"[0-9]{1,18}")
_INTS = re.compile(rb"(?:[0-9]{1,18}\n)*")
_MAX_LINE = 1 << 24


def _lines(stream: IO[bytes], rows: int, start: int) -> Iterator[tuple[int, list[bytes]]]:
    """Chunks of at most ``rows`` lines (without line ends), with the number of the first line;
    read in blocks of 1 MB (a partial last line is carried over)."""
    buf: list[bytes] = []
    first = lineno = start
    rest = b""
    while True:
        block = stream.read(1 << 20)
        if not block:
            break
        block = rest + block
        cut = block.rfind(b"\n")
        if cut < 0:
            if len(block) > _MAX_LINE:
                raise ParameterError("input", "lines shorter than 16 MB", lineno,
                                     message=f"input line {lineno} is longer than {_MAX_LINE:,} bytes")
            rest = block
            continue
        rest = block[cut + 1:]
        lines = block[:cut].split(b"\n")
        if b"\r" in block:
            lines = [ln[:-1] if ln.endswith(b"\r") else ln for ln in lines]
        buf.extend(lines)
        lineno += len(lines)
        while len(buf) >= rows:
            yield first, buf[:rows]
            buf = buf[rows:]
            first += rows
    if rest:
        buf.append(rest[:-1] if rest.endswith(b"\r") else rest)
    if buf:
        yield first, buf


def _bad(lineno: int, what: str, line: bytes) -> ParameterError:
    shown = line[:40].decode("utf-8", "replace") + ("..." if len(line) > 40 else "")
    return ParameterError("input", what, shown, message=f"input line {lineno}: expected {what}, got {shown!r}")


def read_values(stream: IO[bytes], *, k: int | None, rows: int = 1 << 16) -> Iterator[np.ndarray]:
    """Chunks of values: whole numbers in [0, k) (``k`` given) or decimal numbers (``k`` None).

    Raises:
        ParameterError: a malformed line or a value outside the domain (naming the line).
    """
    for first, lines in _lines(stream, rows, 1):
        if k is not None:
            if not _INTS.fullmatch(b"\n".join(lines) + b"\n"):
                i = next(i for i, ln in enumerate(lines) if not _INT.fullmatch(ln))
                raise _bad(first + i, f"a whole number in [0, {k - 1}]", lines[i])
            arr = np.array(lines).astype(np.int64)
            bad = arr >= k
            if bad.any():
                i = int(np.argmax(bad))
                raise ParameterError("input", f"in [0, {k - 1}]", int(arr[i]), message=(
                    f"input line {first + i}: value {int(arr[i])} is outside the domain [0, {k - 1}] "
                    f"(--domain-size {k})"))
        else:
            for i, ln in enumerate(lines):
                if not NUMBER_TEXT.fullmatch(ln.decode("ascii", "replace")):
                    raise _bad(first + i, "a decimal number", ln)
            arr = np.array([float(x) for x in lines], dtype=float)
        yield arr


def header(params: dict) -> bytes:
    """The first line of a reports file."""
    return ("# dpcalc-ldp " + " ".join(f"{k}={v}" for k, v in params.items()) + "\n").encode()


def parse_header(line: bytes) -> dict[str, str]:
    """The parameters of a reports file's first line (empty when it is not a header)."""
    if not line.startswith(b"# dpcalc-ldp "):
        return {}
    out = {}
    for part in line[len(b"# dpcalc-ldp "):].decode("ascii", "replace").split():
        key, _, val = part.partition("=")
        out[key] = val
    return out


def format_reports(o: FrequencyOracle | None, reports: np.ndarray) -> bytes:
    """CSV lines of a block of reports (``o`` None: one float a line, mean protocols)."""
    if o is None:
        return "".join(f"{x!r}\n" for x in reports.tolist()).encode()
    if o.fields == ("bits",):
        b = (np.asarray(reports, dtype=np.uint8) + 48)
        b = np.concatenate([b, np.full((len(b), 1), 10, dtype=np.uint8)], axis=1)
        return b.tobytes()
    if o.fields == ("j", "bits"):
        j = reports[:, 0].tolist()
        bits = (np.asarray(reports[:, 1:], dtype=np.uint8) + 48)
        return b"".join(b"%d," % jj + row.tobytes() + b"\n" for jj, row in zip(j, bits, strict=True))
    cols = [np.asarray(c).astype("S20") for c in np.asarray(reports).T]
    line = cols[0]
    for c in cols[1:]:
        line = np.char.add(np.char.add(line, b","), c)
    return b"\n".join(line.tolist()) + b"\n"


def read_reports(stream: IO[bytes], o: FrequencyOracle | None, *, start: int = 1,
                 rows: int | None = None) -> Iterator[np.ndarray]:
    """Chunks of reports for ``o`` (checked by ``o.check_reports``), or floats (``o`` None).

    Raises:
        ParameterError: a malformed line (naming it) or a report outside the protocol's ranges.
    """
    if o is None:
        yield from read_values(stream, k=None)
        return
    width = o.k if o.fields == ("bits",) else (o.m + 1 if o.fields == ("j", "bits") else len(o.fields))
    rows = rows or max(1, min(1 << 16, CHUNK_CELLS // max(1, width)))
    if o.fields == ("bits",):
        pat = re.compile(rb"[01]{%d}" % o.k)
        what = f"{o.k} characters 0/1"
    elif o.fields == ("j", "bits"):
        pat = re.compile(rb"[0-9]{1,18},[01]{%d}" % o.m)
        what = f"j,{o.m} characters 0/1"
    else:
        pat = re.compile(rb"[0-9]{1,18}" + rb",[0-9]{1,18}" * (len(o.fields) - 1))
        what = ",".join(o.fields) + " (whole numbers)"
    for first, lines in _lines(stream, rows, start):
        for i, ln in enumerate(lines):
            if not pat.fullmatch(ln):
                raise _bad(first + i, what, ln)
        if o.fields == ("bits",):
            arr = (np.frombuffer(b"".join(lines), dtype=np.uint8) - 48).reshape(len(lines), o.k)
        elif o.fields == ("j", "bits"):
            js, bits = zip(*(ln.split(b",") for ln in lines), strict=True)
            arr = np.concatenate([np.array([int(x) for x in js], dtype=np.int64)[:, None],
                                  (np.frombuffer(b"".join(bits), dtype=np.uint8) - 48)
                                  .reshape(len(lines), o.m).astype(np.int64)], axis=1)
        else:
            arr = np.array(b",".join(lines).split(b",")).astype(np.int64).reshape(len(lines), len(o.fields))
        try:
            yield o.check_reports(arr)
        except ParameterError as e:
            raise ParameterError("input", "", None, message=f"input lines {first}–{first + len(lines) - 1}: "
                                 f"{e.message}") from None
