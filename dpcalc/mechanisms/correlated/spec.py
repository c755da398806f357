"""``--strategy`` text → strategy (``tree``, ``tree-honaker``, ``sqrt``, ``banded:b``,
``blt:θ1,θ2/ω1,ω2``, ``dense:FILE.npy``, ``identity``), and the safe ``.npy`` reader.

A ``.npy`` file is read through :func:`dpcalc._files.open_input_file` (regular files only,
size-capped) and its header is checked — version, dtype (float or integer, no objects:
nothing is unpickled), a square 2-D shape with n ≤ :data:`MAX_DENSE_STEPS`, and a data size
that matches the file — before any data is read.
"""

from __future__ import annotations

import numpy as np

from dpcalc._files import open_input_file
from dpcalc._validate import parse_number
from dpcalc.errors import ParameterError
from dpcalc.mechanisms.correlated.strategies import (
    DenseStrategy,
    TreeStrategy,
    banded_sqrt_strategy,
    blt_strategy,
    identity_strategy,
    sqrt_strategy,
)

__all__ = ["parse_strategy", "read_npy_matrix", "MAX_DENSE_STEPS", "STRATEGY_FORMS"]

#: the largest n of a dense C (n² float64 = 134 MB; its decoder is an O(n³) triangular solve)
MAX_DENSE_STEPS = 4096
_MAX_NPY_BYTES = MAX_DENSE_STEPS**2 * 8 + 65536
STRATEGY_FORMS = "tree, tree-honaker, sqrt, banded:B, blt:DECAYS/SCALES, dense:FILE.npy, identity"


def _bad(spec: str, why: str) -> ParameterError:
    return ParameterError("strategy", STRATEGY_FORMS, spec,
                          message=f"--strategy must be one of {STRATEGY_FORMS}; {why}, got {spec!r}")


def read_npy_matrix(path: str) -> np.ndarray:
    """A square float matrix from a ``.npy`` file, header checked before the data is read.

    Args:
        path: the file name.

    Returns:
        float64 array of shape (n, n).

    Raises:
        ParameterError: not a regular readable file; larger than the cap; not a ``.npy``
            (bad magic or header); object/structured dtype; not 2-D square; n above
            :data:`MAX_DENSE_STEPS`; data size different from what the header declares.
    """
    flag = "--strategy dense:"
    fh, size = open_input_file(path, option="strategy", max_bytes=_MAX_NPY_BYTES)
    with fh:
        try:
            version = np.lib.format.read_magic(fh)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
            elif version in ((2, 0), (3, 0)):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
            else:
                raise ValueError(f"unsupported .npy version {version}")
        except ValueError as e:  # numpy's message for a bad magic string or header
            raise ParameterError("strategy", "a .npy file", path,
                                 message=f"{flag}{path} is not a readable .npy file: {e}") from None
        if dtype.hasobject or dtype.kind not in "fiu" or dtype.fields is not None:
            raise ParameterError("strategy", "a .npy of floats or integers", str(dtype),
                                 message=f"{flag}{path} must hold floats or integers, got dtype {dtype}")
        if len(shape) != 2 or shape[0] != shape[1]:
            raise ParameterError("strategy", "a square n×n matrix", shape,
                                 message=f"{flag}{path} must hold a square n×n matrix C, got shape {shape}")
        n = int(shape[0])
        if not 1 <= n <= MAX_DENSE_STEPS:
            raise ParameterError("strategy", f"n in [1, {MAX_DENSE_STEPS}]", n,
                                 message=f"{flag}{path} declares a {n}×{n} matrix; n must be in "
                                         f"[1, {MAX_DENSE_STEPS}]")
        nbytes = n * n * dtype.itemsize
        if size - fh.tell() != nbytes:
            raise ParameterError("strategy", "a complete .npy file", path,
                                 message=f"{flag}{path} holds {size - fh.tell():,} data bytes, its header "
                                         f"declares {nbytes:,}")
        data = fh.read(nbytes)
    if len(data) != nbytes:
        raise ParameterError("strategy", "a complete .npy file", path,
                             message=f"{flag}{path} changed while being read")
    arr = np.frombuffer(data, dtype=dtype).reshape((n, n), order="F" if fortran else "C")
    return np.array(arr, dtype=np.float64)


def _floats(text: str, spec: str) -> list[float]:
    toks = [t.strip() for t in text.split(",")]
    if not toks or not all(toks):
        raise _bad(spec, "an empty number")
    try:
        return [parse_number(t) for t in toks]
    except (ValueError, ParameterError):
        raise _bad(spec, "a number that is not a number") from None


def parse_strategy(spec: str, *, steps: int, epochs: int = 1):
    """The strategy named by ``spec`` for n = ``steps`` (trees restart every epoch).

    Args:
        spec: one of :data:`STRATEGY_FORMS`.
        steps: n.
        epochs: k (the tree is restarted k times: one tree per epoch).

    Returns:
        A :class:`~dpcalc.mechanisms.correlated.strategies.TreeStrategy`,
        :class:`~dpcalc.mechanisms.correlated.strategies.ToeplitzStrategy` or
        :class:`~dpcalc.mechanisms.correlated.strategies.DenseStrategy`.

    Raises:
        ParameterError: an unknown form, bad numbers, bands > steps, a bad file or matrix, a
            dense C whose n differs from ``steps``.
    """
    text = str(spec).strip()
    kind, _, arg = text.partition(":")
    kind = kind.lower()
    if kind in ("tree", "tree-honaker") and not arg:
        return TreeStrategy(steps, honaker=kind == "tree-honaker", restarts=epochs)
    if kind == "sqrt" and not arg:
        return sqrt_strategy(steps)
    if kind == "identity" and not arg:
        return identity_strategy(steps)
    if kind == "banded":
        try:
            bands = int(arg)
        except ValueError:
            raise _bad(text, "banded:B needs a whole number of bands B ≥ 1") from None
        if bands < 1 or bands > steps:
            raise ParameterError("bands", f"a whole number in [1, steps = {steps}]", bands,
                                 message=f"--strategy banded:B needs B in [1, steps = {steps}], got {bands}")
        return banded_sqrt_strategy(steps, bands)
    if kind == "blt":
        decays, slash, scales = arg.partition("/")
        if not slash:
            raise _bad(text, "blt needs DECAYS/SCALES, e.g. blt:0.99,0.8/0.3,0.1")
        return blt_strategy(steps, decay=_floats(decays, text), scale=_floats(scales, text))
    if kind == "dense" and arg:
        c = read_npy_matrix(arg)
        if c.shape[0] != steps:
            raise ParameterError("steps", f"the dense C's n = {c.shape[0]}", steps,
                                 message=f"--steps must equal the size of the dense C ({c.shape[0]}), got {steps}")
        return DenseStrategy(c, name=f"dense:{arg}")
    raise _bad(text, "unknown form")
