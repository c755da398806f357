"""The calibration helper's contract (dpcalc.accounting.calibrate): bracketing and verification
with rdp and ma, the tight-calibration property for every registered accountant."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpcalc.accounting.calibrate import SIGMA_MIN, calibrate_dpsgd, calibrate_noise_multiplier
from dpcalc.accounting.rdp import RdpAccountant
from dpcalc.accounting.registry import available, get_accountant
from dpcalc.errors import InfeasibleError, ParameterError
from dpcalc.events import GaussianEvent, SelfComposedEvent, dpsgd_event


def eps_at(acc, sigma, q, steps, delta):
    ev = dpsgd_event(noise_multiplier=sigma, sample_rate=q, steps=steps)
    return acc.epsilon(ev, delta=delta).epsilon


@pytest.mark.parametrize("target,q,steps", [
    (1.0, 0.01, 10_000),   # σ ≈ 4: the bracket expands upwards from σ = 1
    (30.0, 0.05, 100),     # σ < 1: the bracket expands downwards
])
def test_bracketing_both_ways_and_verification(target, q, steps):
    acc = RdpAccountant()
    r = calibrate_dpsgd(acc, target_epsilon=target, delta=1e-5, sample_rate=q, steps=steps)
    sigma = r.noise_multiplier
    assert (sigma > 1) == (target == 1.0)
    # the returned result is the accountant's at σ, and meets the target
    assert r.epsilon == eps_at(acc, sigma, q, steps, 1e-5)
    assert target * (1 - 1e-4) <= r.epsilon <= target
    # σ is the smallest to rtol = 1e-6: slightly less noise misses the target
    assert eps_at(acc, sigma * (1 - 2e-6), q, steps, 1e-5) > target
    assert r.details["target_epsilon"] == target and r.details["evaluations"] >= 3
    assert r.accountant == "rdp" and r.certified and "order" in r.details


def test_opacus_style_mnist_case():
    # batch 256 of 60,000 for 60 epochs, δ = 1e-5, ε = 3 (Opacus MNIST example):
    # cross-check against a brute-force dense order grid at the returned σ
    import numpy as np

    q, steps = 256 / 60_000, 14_063
    r = calibrate_dpsgd(RdpAccountant(), target_epsilon=3.0, delta=1e-5, sample_rate=q,
                        steps=steps)
    dense = RdpAccountant(orders=np.linspace(1.5, 20, 3000), refine=False)
    assert eps_at(dense, r.noise_multiplier, q, steps, 1e-5) <= 3.0 + 1e-6
    assert 1.0 < r.noise_multiplier < 1.03


def test_infeasible_target_raises_with_explanation():
    # T = 1e9 unsampled steps: even σ = 1e6 leaves ε ≈ 0.15 at δ = 1e-5 under RDP
    with pytest.raises(InfeasibleError) as err:
        calibrate_dpsgd(RdpAccountant(), target_epsilon=0.05, delta=1e-5, sample_rate=1.0,
                        steps=10**9)
    msg = str(err.value)
    assert "no noise multiplier up to 1e+06" in msg and "accountant 'rdp'" in msg
    assert "orders up to 256" in msg and "delta=1e-05" in msg


def test_target_met_at_smallest_sigma():
    r = calibrate_dpsgd(RdpAccountant(), target_epsilon=1e6, delta=1e-5, sample_rate=1e-4,
                        steps=1)
    assert r.noise_multiplier == SIGMA_MIN and "smallest noise multiplier" in r.details["note"]
    assert r.epsilon <= 1e6


def test_generic_helper_with_unsampled_gaussian():
    # T-fold Gaussian, RDP: ε(σ) = min_α αT/(2σ²) + conversion; calibrated σ must reach it
    acc = RdpAccountant()
    r = calibrate_noise_multiplier(acc, target_epsilon=4.0, delta=1e-5,
                                   make_event=lambda s: SelfComposedEvent(GaussianEvent(s), 100))
    # σ = 10 gives 4.73 (> 4) under RDP, so the calibrated σ is larger
    assert r.noise_multiplier > 10.0
    assert 4.0 * (1 - 1e-4) <= r.epsilon <= 4.0


def test_bad_parameters():
    with pytest.raises(ParameterError, match="epsilon must be a finite number > 0, got -1"):
        calibrate_dpsgd(RdpAccountant(), target_epsilon=-1, delta=1e-5, sample_rate=0.1, steps=10)
    with pytest.raises(ParameterError, match="sample_rate must be in \\(0, 1\\], got 1.5"):
        calibrate_dpsgd(RdpAccountant(), target_epsilon=1, delta=1e-5, sample_rate=1.5, steps=10)
    with pytest.raises(ParameterError, match="delta must be in \\(0, 1\\), got 0"):
        calibrate_dpsgd(RdpAccountant(), target_epsilon=1, delta=0, sample_rate=0.1, steps=10)


@pytest.mark.parametrize("name", available())
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(target=st.floats(0.5, 10.0), q=st.floats(1e-3, 1.0), steps=st.integers(1, 10**4))
def test_calibrated_sigma_meets_target_tightly(name, target, q, steps):
    # every registered accountant (certified or not): σ meets the target and is the smallest to rtol
    acc = get_accountant(name)
    if not acc.supports(dpsgd_event(noise_multiplier=1.0, sample_rate=q, steps=steps)):
        return
    r = calibrate_dpsgd(acc, target_epsilon=target, delta=1e-5, sample_rate=q, steps=steps)
    e = get_accountant(name).epsilon(
        dpsgd_event(noise_multiplier=r.noise_multiplier, sample_rate=q, steps=steps), delta=1e-5).epsilon
    assert e <= target
    if r.noise_multiplier > SIGMA_MIN and e < target * (1 - 1e-4):
        # not within 1e-4 of the target in ε: then σ must still be the smallest to 1e-4 in σ. pld's
        # grid step is chosen per σ, so ε(σ) jumps where the step switches and the target can fall
        # in a jump (hypothesis: q 0.1178, T 431, ε 5.29979: σ 2.2432234 gives 1.15e-4 below the
        # target, σ·(1 − 1e-4) on the coarser step is above it; the same at 47b97fc)
        below = get_accountant(name).epsilon(
            dpsgd_event(noise_multiplier=r.noise_multiplier * (1 - 1e-4), sample_rate=q, steps=steps),
            delta=1e-5).epsilon
        assert below > target, (e, below)
