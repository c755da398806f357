"""A small cache of composed upper PMFs for :class:`~dpcalc.accounting.pld.PldAccountant`.

Also :func:`warm_allocator`: the C allocator's state that keeps a composition's ~2¹⁵-point
buffers from being fresh memory at every call.

A calibration evaluates the fixed-grid stand-in (``pld._FixedGridPld``, upper bound only) at a
σ and then the accountant itself at the same σ, whose last round composes the same upper PMFs
on the same grid: ``PldAccountant._compose`` keeps its composed upper PMFs here under their key
(the history's segments, the grid step, the truncation mass and the options that shape the
composition) and reuses them. Composed PMFs are never modified after they are made (read-outs
copy them with another slack), so a reused PMF gives bitwise the result a fresh composition gives.
"""

from __future__ import annotations

import threading

import numpy as np

from dpcalc.accounting._pld_grid import DiscretePLD

__all__ = ["upper_cache_get", "upper_cache_put", "clear_upper_cache", "warm_allocator"]

#: composed upper PMFs kept by :func:`upper_cache_put`: the most recent entries, at most
#: _UPPER_CACHE_SIZE of them and _UPPER_CACHE_POINTS grid points in all (2²³ doubles: 64 MiB;
#: T = 10⁸ steps at q = 1e-5 composes ~2·10⁶ points per ordering)
_UPPER_CACHE: dict = {}
_UPPER_CACHE_SIZE = 4
_UPPER_CACHE_POINTS = 2 ** 23
_UPPER_CACHE_LOCK = threading.Lock()


def upper_cache_get(key) -> dict[str, DiscretePLD] | None:
    """The composed upper PMFs ``PldAccountant._compose`` made for ``key`` (its history, grid
    step, truncation mass and options), or None. Composed PMFs are never modified after they are
    made (read-outs copy them with another slack), so sharing them gives bitwise the same results."""
    try:
        with _UPPER_CACHE_LOCK:
            return _UPPER_CACHE.get(key)
    except TypeError:  # an event with an unhashable field: no caching
        return None


def upper_cache_put(key, upper: dict[str, DiscretePLD]) -> None:
    """Keep ``upper`` (ordering → composed upper PMF; other entries, e.g. ``"chernoff"``, are
    kept along and not counted) under ``key``, forgetting the oldest entries beyond the size
    and point budgets (an entry above the point budget is not kept)."""
    def points(entry: dict[str, DiscretePLD]) -> int:
        return sum(p.probs.size for p in entry.values() if isinstance(p, DiscretePLD))

    if points(upper) > _UPPER_CACHE_POINTS:
        return
    try:
        with _UPPER_CACHE_LOCK:
            _UPPER_CACHE.pop(key, None)
            _UPPER_CACHE[key] = upper
            while (len(_UPPER_CACHE) > _UPPER_CACHE_SIZE
                   or sum(points(e) for e in _UPPER_CACHE.values()) > _UPPER_CACHE_POINTS):
                del _UPPER_CACHE[next(iter(_UPPER_CACHE))]
    except TypeError:
        return


def clear_upper_cache() -> None:
    """Forget every kept PMF (benchmarks time each call from an empty cache)."""
    with _UPPER_CACHE_LOCK:
        _UPPER_CACHE.clear()


#: bytes of the block :func:`warm_allocator` allocates and frees once (8 MiB: the thresholds it
#: sets keep buffers up to 8 MiB, i.e. FFTs up to ~2¹⁹ points, in the heap and ≤ 16 MiB freed)
_WARM_BYTES = 16 << 20
_WARMED = [False]


def warm_allocator() -> None:
    """Allocate and free one ``_WARM_BYTES`` buffer, once per process (``PldAccountant._compose``
    calls it before composing; issue 31).

    glibc's malloc serves a request of at least its mmap threshold (128 KiB at start) with fresh
    pages from the kernel, and returns the free top of the heap to the kernel beyond its trim
    threshold; freeing an mmap'd block raises both thresholds to its size and twice its size
    (glibc's dynamic threshold, ``man mallopt``: M_MMAP_THRESHOLD). An ε call on ~2¹⁵ grid
    points allocates and frees a dozen arrays of ~200 KiB (numpy's results, pocketfft's work
    buffers): at the start-up thresholds each is fresh memory every call (~600 page faults, a
    third of a 6 ms call on bench_pld's cases 2 and 5, measured with getrusage). After one
    8 MiB block is freed they are reused from the heap. The buffer is never written (no page is
    touched); a process that already freed a larger block, another allocator, or thresholds
    set explicitly with mallopt are unaffected. Values computed are the same either way."""
    if not _WARMED[0]:
        _WARMED[0] = True
        block = np.empty(_WARM_BYTES // 8)
        del block
