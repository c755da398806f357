"""The zCDP accountant (Bun & Steinke 2016; CKS 2020 Prop 12 conversion) and the one
vectorised conversion in dpcalc.mechanisms.conversions, against closed forms and mpmath."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcalc.accounting.registry import available, get_accountant
from dpcalc.errors import UnsupportedEventError
from dpcalc.events import (
    ComposedEvent,
    EpsilonDeltaEvent,
    GaussianEvent,
    LaplaceEvent,
    SelfComposedEvent,
    dpsgd_event,
)
from dpcalc.mechanisms.conversions import poisson_amplify, zcdp_delta, zcdp_epsilon
from dpcalc.mechanisms.gaussian import gaussian_epsilon


def test_registered_after_rdp_and_certified():
    names = available()
    assert names.index("zcdp") == names.index("rdp") + 1
    assert get_accountant("zcdp").certified


def test_rho_closed_forms():
    acc = get_accountant("zcdp")
    # Bun & Steinke 2016 Prop 1.6: ρ = 1/(2σ²) per Gaussian step; Prop 1.4: ε²/2 for ε-DP; Lemma 2.3: sum
    ev = ComposedEvent((SelfComposedEvent(GaussianEvent(10.0), 100), SelfComposedEvent(LaplaceEvent(10.0), 4),
                        EpsilonDeltaEvent(0.2)))
    want = 100 / 200 + 4 * 0.1**2 / 2 + 0.2**2 / 2
    assert want <= acc.rho(ev) <= want * (1 + 1e-14)
    # replace-one: sensitivity 2 for Gaussian and Laplace
    assert get_accountant("zcdp", neighboring="replace").rho(GaussianEvent(10.0)) == pytest.approx(4 / 200)


def test_epsilon_is_never_below_the_exact_gaussian():
    # T Gaussians with σ are exactly μ-GDP, μ = √T/σ (DRS 2019 Cor 3.3): zCDP must not go below
    acc = get_accountant("zcdp")
    for sigma, steps, delta in [(10.0, 100, 1e-5), (1.0, 5, 1e-3), (30.0, 10_000, 1e-8)]:
        res = acc.epsilon(dpsgd_event(noise_multiplier=sigma, sample_rate=1.0, steps=steps), delta=delta)
        exact = gaussian_epsilon(delta=delta, mu=math.sqrt(steps) / sigma)
        assert exact <= res.epsilon <= exact * 1.2
        back = acc.delta(dpsgd_event(noise_multiplier=sigma, sample_rate=1.0, steps=steps), epsilon=res.epsilon)
        assert back.delta <= delta * (1 + 1e-9)


def test_not_applicable_with_reasons():
    acc = get_accountant("zcdp")
    with pytest.raises(UnsupportedEventError, match="Poisson"):
        acc.check(dpsgd_event(noise_multiplier=1.0, sample_rate=0.01, steps=10))
    with pytest.raises(UnsupportedEventError, match="δ"):
        acc.check(EpsilonDeltaEvent(1.0, 1e-6))
    assert acc.epsilon(dpsgd_event(noise_multiplier=1.0, sample_rate=1.0, steps=0), delta=1e-5).epsilon == 0.0


def cks_min_mp(rho: float, delta: float) -> float:
    """min over a fine α grid of CKS 2020 Prop 12 with ε(α) = αρ, in mpmath (60 digits)."""
    mpmath.mp.dps = 60
    r, d = mpmath.mpf(rho), mpmath.mpf(delta)
    best = mpmath.inf
    for t in np.linspace(-8, 8, 4001):
        a = 1 + mpmath.e ** mpmath.mpf(float(t))
        best = min(best, a * r + mpmath.log(1 - 1 / a) - (mpmath.log(d) + mpmath.log(a)) / (a - 1))
    return float(best)


@pytest.mark.parametrize("rho,delta", [(0.5, 1e-5), (0.01, 1e-8), (3.0, 1e-3)])
def test_conversion_against_mpmath(rho, delta):
    eps, _ = zcdp_epsilon(rho, delta)
    ref = cks_min_mp(rho, delta)
    assert eps[0] <= ref * (1 + 1e-9) and eps[0] >= ref * (1 - 1e-4)  # refined: never above the grid minimum
    grid, _ = zcdp_epsilon(np.array([rho, rho]), delta, refine=False)
    assert np.all(grid >= eps[0] * (1 - 1e-12))


@settings(max_examples=40, deadline=None)
@given(rho=st.floats(1e-6, 50), delta=st.floats(1e-12, 0.1))
def test_conversion_round_trip(rho, delta):
    eps, _ = zcdp_epsilon(rho, delta)
    back, _ = zcdp_delta(rho, float(eps[0]))
    assert back[0] <= delta * (1 + 1e-6)


@settings(max_examples=60, deadline=None)
@given(eps=st.floats(0, 700), q=st.floats(1e-9, 1))
def test_poisson_amplification_is_an_upper_bound(eps, q):
    # Balle, Barthe, Gaboardi 2018 Thm 8: ln(1 + q(e^ε − 1)), in mpmath
    mpmath.mp.dps = 50
    ref = mpmath.log1p(mpmath.mpf(q) * mpmath.expm1(mpmath.mpf(eps)))
    got = poisson_amplify(eps, q)
    assert got >= float(ref) * (1 - 1e-16) and got <= float(ref) * (1 + 1e-13) + 1e-300
