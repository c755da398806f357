"""Amplification by shuffling (Feldman, McMillan, Talwar FOCS 2021).

References: the clone pair of FMT21 §4 evaluated by brute force (every c and a enumerated,
mpmath at 40 digits) for small n; the closed form of FMT21 Thm 3.1 in mpmath;
n = 1 (no clones) is the ε₀ randomized response itself.
"""

from __future__ import annotations

import math

import mpmath as mp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcalc.errors import ParameterError
from dpcalc.mechanisms import shuffling as sf


def _delta_exact(eps0: float, n: int, eps: float) -> float:
    """D_{e^ε}(P‖Q) of the FMT21 clone pair by enumeration (ε₀, ε rounded to fractions; mpmath exp)."""
    mp.mp.dps = 40
    e0 = mp.e ** mp.mpf(eps0)
    alpha, p = e0 / (e0 + 1), 1 / e0
    ee = mp.e ** mp.mpf(eps)
    total = mp.mpf(0)
    for c in range(n):  # C ~ Bin(n − 1, e^{−ε₀})
        wc = mp.binomial(n - 1, c) * p**c * (1 - p) ** (n - 1 - c)
        b = [mp.binomial(c, a) / mp.mpf(2) ** c for a in range(c + 1)]
        for a in range(c + 2):  # P(a) = α b(a) + (1 − α) b(a − 1); Q(a) = α b(a − 1) + (1 − α) b(a)
            ba = b[a] if a <= c else 0
            bm = b[a - 1] if a >= 1 else 0
            pa, qa = alpha * ba + (1 - alpha) * bm, alpha * bm + (1 - alpha) * ba
            total += wc * max(pa - ee * qa, 0)
    return float(total)


@pytest.mark.parametrize(("eps0", "n", "eps"), [(1.0, 5, 0.3), (2.0, 12, 0.5), (0.5, 30, 0.05), (3.0, 20, 1.0),
                                                (4.0, 25, 2.5)])
def test_delta_matches_brute_force(eps0, n, eps):
    exact = _delta_exact(eps0, n, eps)
    got = sf.shuffle_delta(eps0=eps0, n=n, epsilon=eps)
    assert got >= exact  # never below (an upper bound)
    assert got <= exact * (1 + 1e-9) + 1e-15


def test_one_report_is_randomized_response():
    # n = 1: no clones, the pair is ε₀ randomized response: ε = ε₀ for every δ < (e^{ε₀} − 1)/(e^{ε₀} + 1)
    r = sf.shuffle_numerical(eps0=2.0, n=1, delta=1e-6)
    assert r["epsilon"] == pytest.approx(2.0, rel=2e-6) and r["epsilon"] <= 2.0


def test_closed_form_matches_formula():
    eps0, n, delta = 1.0, 100_000, 1e-6
    mp.mp.dps = 40
    a = 8 * mp.sqrt(mp.e**eps0 * mp.log(4 / mp.mpf(delta))) / mp.sqrt(n)
    c = 8 * mp.e**eps0 / n
    ep = mp.log(1 + a + c)
    ref = mp.log(1 + (1 - mp.e**-eps0) / (1 + mp.e ** (-eps0 - ep)) * (a + c))
    got = sf.shuffle_closed_form(eps0=eps0, n=n, delta=delta)["epsilon"]
    assert float(ref) <= got <= float(ref) * (1 + 1e-12)
    # and it is never below the FOCS statement's (e^{ε₀} − 1)/(e^{ε₀} + 1) form
    focs = mp.log(1 + (mp.e**eps0 - 1) / (mp.e**eps0 + 1) * (a + c))
    assert got >= float(focs)


def test_closed_form_refused_outside_its_range_with_the_reason():
    r = sf.shuffle_closed_form(eps0=8.0, n=1000, delta=1e-6)
    assert not r.applicable and r["epsilon"] is None
    assert "ln(n/(16 ln(4/δ)))" in r.reason and "1.41" in r.reason
    r = sf.shuffle_closed_form(eps0=1.0, n=10, delta=1e-6)
    assert not r.applicable and "16 ln(4/δ)" in r.reason


@settings(max_examples=30, deadline=None)
@given(eps0=st.floats(0.05, 6.0), log_n=st.floats(2.0, 6.0), log_delta=st.floats(-10, -3))
def test_numerical_at_most_closed_form_and_eps0(eps0, log_n, log_delta):
    n, delta = int(10**log_n), 10.0**log_delta
    num = sf.shuffle_numerical(eps0=eps0, n=n, delta=delta)["epsilon"]
    assert 0.0 <= num <= eps0
    cf = sf.shuffle_closed_form(eps0=eps0, n=n, delta=delta)
    if cf.applicable:
        assert num <= cf["epsilon"]


@settings(max_examples=15, deadline=None)
@given(eps0=st.floats(0.2, 4.0), n=st.integers(10, 20_000))
def test_more_reports_more_amplification(eps0, n):
    a = sf.shuffle_numerical(eps0=eps0, n=n, delta=1e-6)["epsilon"]
    b = sf.shuffle_numerical(eps0=eps0, n=2 * n, delta=1e-6)["epsilon"]
    assert b <= a * (1 + 2e-6)


def test_published_setting_order_of_magnitude():
    """docs/references.md: FMT21's released example (n = 1e5, ε₀ = 4, δ = 1e-6): the closed form and the
    numerical bound both amplify ε₀ = 4 to well below 1."""
    num = sf.shuffle_numerical(eps0=4, n=10**5, delta=1e-6)["epsilon"]
    cf = sf.shuffle_closed_form(eps0=4, n=10**5, delta=1e-6)["epsilon"]
    assert 0.1 <= num <= cf <= 1.0


@pytest.mark.parametrize(("kw", "name"), [(dict(eps0=0, n=10, delta=1e-6), "eps0"),
                                          (dict(eps0=1, n=0, delta=1e-6), "n"),
                                          (dict(eps0=1, n=10, delta=1.0), "delta"),
                                          (dict(eps0=math.inf, n=10, delta=1e-6), "eps0")])
def test_bad_input(kw, name):
    with pytest.raises(ParameterError) as e:
        sf.shuffle_numerical(**kw)
    assert e.value.name == name
