"""Tests of the moments accountant (Abadi et al. 2016, Thm 2) built on the RDP curves."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpcalc.accounting.moments import MomentsAccountant
from dpcalc.accounting.rdp import RdpAccountant
from dpcalc.accounting.registry import get_accountant
from dpcalc.errors import ParameterError, UnsupportedEventError
from dpcalc.events import EpsilonDeltaEvent, GaussianEvent, SelfComposedEvent, dpsgd_event


def test_registry_entry():
    acc = get_accountant("ma")
    assert isinstance(acc, MomentsAccountant)
    assert acc.name == "ma" and acc.certified and acc.source == "Abadi et al. 2016, Thm 2"


def test_abadi_mnist_epsilon():
    # Abadi et al. 2016 §5: q = 0.01, σ = 4, T = 10,000, δ = 1e-5 -> ε ≈ 1.26;
    # docs/references.md: integer λ, old conversion 1.2586 at λ + 1 = 20
    ev = dpsgd_event(noise_multiplier=4.0, sample_rate=0.01, steps=10_000)
    r = MomentsAccountant().epsilon(ev, delta=1e-5)
    assert r.epsilon == pytest.approx(1.26, rel=0.01)
    assert r.epsilon == pytest.approx(1.2586, abs=5e-4)
    assert r.details["order"] == 20.0 and r.details["lambda"] == 19
    assert r.certified and r.delta == 1e-5


def test_abadi_mnist_long_run():
    # Abadi et al. 2016: T = 40,000 -> 2.55 in the paper; old conversion 2.574 (docs/references.md)
    ev = dpsgd_event(noise_multiplier=4.0, sample_rate=0.01, steps=40_000)
    e = MomentsAccountant().epsilon(ev, delta=1e-5).epsilon
    assert e == pytest.approx(2.574, rel=0.01)
    assert e >= 2.55 * 0.999  # never better than the paper's own bound at integer λ


def test_unsampled_gaussian_closed_form():
    # Gaussian: α(λ) = T λ(λ+1)/(2σ²) (Abadi et al. 2016 / Mironov 2017 Prop. 7), so
    # ε = min_λ (T(λ+1)/(2σ²) + ln(1/δ)/λ) over λ = 1..255, δ = min_λ exp(α(λ) − λε)
    sigma, steps, delta = 10.0, 100, 1e-5
    lam = np.arange(1, 256)
    by_hand = np.min(steps * (lam + 1) / (2 * sigma**2) + math.log(1 / delta) / lam)
    ev = SelfComposedEvent(GaussianEvent(sigma), steps)
    acc = MomentsAccountant()
    assert acc.epsilon(ev, delta=delta).epsilon == pytest.approx(by_hand, rel=1e-13)
    eps = 2.0
    d_by_hand = math.exp(np.min(steps * lam * (lam + 1) / (2 * sigma**2) - lam * eps))
    assert acc.delta(ev, epsilon=eps).delta == pytest.approx(d_by_hand, rel=1e-12)
    # σ = 10, T = 100 is μ-GDP with μ = 1: exact ε(1e-5) = 4.37718 (Balle & Wang 2018)
    assert acc.epsilon(ev, delta=delta).epsilon >= 4.37718


@pytest.mark.parametrize("sigma,q,steps", [(4.0, 0.01, 10_000), (1.1, 256 / 60_000, 14_063),
                                           (0.7, 0.1, 50), (30.0, 1.0, 1000)])
def test_moments_never_tighter_than_rdp(sigma, q, steps):
    ev = dpsgd_event(noise_multiplier=sigma, sample_rate=q, steps=steps)
    assert MomentsAccountant().epsilon(ev, delta=1e-6).epsilon >= \
        RdpAccountant().epsilon(ev, delta=1e-6).epsilon


def test_round_trip_and_range():
    ev = dpsgd_event(noise_multiplier=1.3, sample_rate=150 / 60_000, steps=6000)
    acc = MomentsAccountant()
    e = acc.epsilon(ev, delta=1e-6).epsilon
    assert acc.delta(ev, epsilon=e).delta == pytest.approx(1e-6, rel=1e-9)
    assert acc.delta(ev, epsilon=0.0).delta == 1.0  # δ is capped at 1
    # (no steps → ε = δ = 0, not the tail bound ln(1/δ)/λ: tests/accounting/test_contract.py)


def test_edge_warning_and_hint():
    ev = dpsgd_event(noise_multiplier=4.0, sample_rate=0.01, steps=10_000)
    r = MomentsAccountant(max_lambda=8).epsilon(ev, delta=1e-5)
    assert r.details["lambda"] == 8 and "largest searched" in r.details["warnings"][0]
    acc = MomentsAccountant()
    assert "ln(1/delta)/255 = 0.04515" in acc.infeasible_hint(0.01, delta=1e-5)  # ln(1e5)/255


def test_bad_input_and_unsupported():
    with pytest.raises(ParameterError, match="max_lambda must be a whole number >= 1, got 0"):
        MomentsAccountant(max_lambda=0)
    ev = dpsgd_event(noise_multiplier=1.0, sample_rate=0.1, steps=10)
    with pytest.raises(ParameterError, match="delta must be in \\(0, 1\\)"):
        MomentsAccountant().epsilon(ev, delta=1.5)
    with pytest.raises(UnsupportedEventError, match="add/remove"):
        MomentsAccountant(neighboring="replace").epsilon(ev, delta=1e-5)
    with pytest.raises(UnsupportedEventError, match="delta"):
        MomentsAccountant().epsilon(EpsilonDeltaEvent(1.0, 1e-6), delta=1e-5)
