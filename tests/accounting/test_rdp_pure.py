"""The RDP of the Laplace mechanism and of pure ε-DP against mpmath (Mironov 2017 Table 2).

The closed forms cancel near order 1 and at large scale (the two terms of the sum agree to
many digits); a naive log-sum-exp evaluation was up to ~3e-9 relative *below* the exact value
(b = 1000, α = 1.015) — an under-report. Every returned value must be ≥ the exact one.
"""

import mpmath as mp
import numpy as np
import pytest

from dpcalc.accounting.rdp import rdp_laplace, rdp_pure_dp

mp.mp.dps = 60

ORDERS = np.array([1.0001, 1.001, 1.015, 1.1, 1.5, 2.0, 3.5, 10.0, 64.0, 256.0])


def _laplace_exact(b, a):
    b, a = mp.mpf(b), mp.mpf(a)
    s = a / (2 * a - 1) * mp.exp((a - 1) / b) + (a - 1) / (2 * a - 1) * mp.exp(-a / b)
    return min(mp.log(s) / (a - 1), 1 / b)


def _rr_exact(e, a):
    e, a = mp.mpf(e), mp.mpf(a)
    p = mp.exp(e) / (1 + mp.exp(e))
    s = p**a * (1 - p) ** (1 - a) + (1 - p) ** a * p ** (1 - a)
    return min(mp.log(s) / (a - 1), e, a * e * e / 2)


@pytest.mark.parametrize("scale", [0.05, 1.0, 20.0, 1000.0, 1e6])
def test_laplace_never_below_exact_and_close(scale):
    got = rdp_laplace(scale=scale, orders=ORDERS)
    for a, g in zip(ORDERS, got, strict=True):
        ref = _laplace_exact(scale, float(a))
        assert g >= ref, (scale, a, g, float(ref))
        assert g <= ref * (1 + 1e-7) + 1e-300  # the rounding margin covers the cancellation, (scale, a, g, float(ref))


@pytest.mark.parametrize("epsilon", [1e-6, 1e-3, 0.1, 1.0, 5.0, 50.0])
def test_pure_dp_never_below_exact_and_close(epsilon):
    got = rdp_pure_dp(epsilon=epsilon, orders=ORDERS)
    for a, g in zip(ORDERS, got, strict=True):
        ref = _rr_exact(epsilon, float(a))
        assert g >= ref, (epsilon, a, g, float(ref))
        assert g <= ref * (1 + 1e-7) + 1e-300  # the rounding margin covers the cancellation, (epsilon, a, g, float(ref))


def test_the_reported_case():
    """b = 1000 at α = 1.015: the old evaluation was 2.7e-9 relative below mpmath."""
    g = float(rdp_laplace(scale=1000.0, orders=np.array([1.015]))[0])
    assert g >= _laplace_exact(1000.0, 1.015)


def test_pure_dp_zero():
    assert np.all(rdp_pure_dp(epsilon=0.0, orders=ORDERS) == 0.0)
