"""A small memo of composed upper PMFs for the ``pld`` accountant (issue 31).

A calibration asks for the same composition more than once: the fixed-grid stand-in
(``_FixedGridPld``) evaluates the σ it settles on, and the accountant's certificate at that σ
then composes the same upper PMF on the same grid again (T = 10⁸, q = 1e-5: ~1 s of ~10 s); a
``dpcalc plan`` cell does the same. The composition is a pure function of the history, the grid
step, the truncation budget, the ordering and the accountant's options, so a repeated request
returns the PMF computed the first time — bitwise what the computation gives again. Entries are
read-only (their ``probs`` arrays cannot be written) and the memo holds at most
:data:`MAX_ENTRIES` PMFs and :data:`MAX_BYTES` of masses, least recently used dropped first.
The answer never depends on the memo's content: accountants stay stateless in what they return.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

from dpcalc.accounting._pld_grid import DiscretePLD

__all__ = ["get", "put", "clear", "MAX_ENTRIES", "MAX_BYTES"]

#: most PMFs kept (two orderings of a few recent evaluations)
MAX_ENTRIES = 8
#: most bytes of masses kept (a T = 10⁸ composition is ~17 MB per ordering)
MAX_BYTES = 96 * 2**20

_memo: OrderedDict[Hashable, DiscretePLD] = OrderedDict()


def get(key: Hashable) -> DiscretePLD | None:
    """The PMF stored under ``key`` (marked most recently used), or None."""
    out = _memo.get(key)
    if out is not None:
        _memo.move_to_end(key)
    return out


def put(key: Hashable, pmf: DiscretePLD) -> DiscretePLD:
    """Store ``pmf`` under ``key`` (its masses made read-only) and return it; a PMF larger than
    :data:`MAX_BYTES` is returned without being stored."""
    if pmf.probs.nbytes > MAX_BYTES:
        return pmf
    pmf.probs.setflags(write=False)
    _memo[key] = pmf
    _memo.move_to_end(key)
    while len(_memo) > MAX_ENTRIES or sum(p.probs.nbytes for p in _memo.values()) > MAX_BYTES:
        _memo.popitem(last=False)
    return pmf


def clear() -> None:
    """Forget every stored PMF."""
    _memo.clear()
