"""The δ̃ slack and total-δ formulas of dpcalc.composition.slack (KOV 2015 Thm 3.3/3.5,
MV 2016 Thm 1.5): checked against exact rational arithmetic (mpmath, 80 digits)."""

from __future__ import annotations

import mpmath
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcalc.composition.slack import slack_delta, total_delta


def exact_slack(delta, deltas, counts):
    mpmath.mp.dps = 80
    keep = mpmath.mpf(1)
    for d, k in zip(deltas, counts, strict=True):
        keep *= (1 - mpmath.mpf(d)) ** int(k)
    return 1 - (1 - mpmath.mpf(delta)) / keep


@settings(max_examples=80, deadline=None)
@given(delta=st.floats(1e-12, 0.5), d1=st.floats(0, 1e-6), d2=st.floats(0, 1e-3), k1=st.integers(0, 10**6),
       k2=st.integers(0, 100))
def test_slack_is_a_lower_bound_and_total_an_upper_bound(delta, d1, d2, k1, k2):
    dl, cnt = np.array([d1, d2]), np.array([k1, k2])
    got = float(slack_delta(delta=delta, deltas=dl, counts=cnt))
    ref = exact_slack(delta, dl, cnt)
    if ref > 0:
        assert got <= ref
        if ref > delta * 1e-3:  # no heavy cancellation: within a few ulps
            assert got >= float(ref) * (1 - 1e-12)
        # the total at that δ̃ never exceeds the target (round trip)
        assert float(total_delta(delta_tilde=max(got, 0.0), deltas=dl, counts=cnt)) <= delta * (1 + 1e-12)
    else:
        assert got <= 1e-300 or got <= float(ref) + 1e-30
