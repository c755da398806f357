"""calibrate_dpsgd_many: all step counts of one sampling rate at once (``dpcalc plan``'s rows).

The contract is calibrate_dpsgd's (docs/design.md §1): every σ returned is verified with the
accountant as the user calls it (ε ≤ target), rounded up, and the smallest to rtol — the σ of
``dpcalc sigma`` up to the search tolerance (the two searches take different paths, so the last
digits may differ, each verified).
"""

from __future__ import annotations

import pytest

from dpcalc.accounting.calibrate import calibrate_dpsgd, calibrate_dpsgd_many
from dpcalc.accounting.registry import available, get_accountant
from dpcalc.events import dpsgd_event

EPS, DELTA, Q = 3.0, 1e-5, 0.02
STEPS = [1, 50, 400, 3000, 400]


def _supported(name: str) -> bool:
    return get_accountant(name).supports(dpsgd_event(noise_multiplier=1.0, sample_rate=Q, steps=10))


@pytest.mark.parametrize("name", [n for n in available() if n != "pld"])
def test_each_sigma_is_verified_and_matches_calibrate_dpsgd(name):
    if not _supported(name):
        pytest.skip(f"{name} does not account for Poisson-sampled Gaussians")
    acc = get_accountant(name)
    many = calibrate_dpsgd_many(acc, target_epsilon=EPS, delta=DELTA, sample_rate=Q, steps=STEPS)
    assert len(many) == len(STEPS) and many[2] is many[4]  # repeats share one answer
    for t, res in zip(STEPS, many, strict=True):
        assert res.applicable and res.epsilon <= EPS
        again = acc.epsilon(dpsgd_event(noise_multiplier=res.noise_multiplier, sample_rate=Q, steps=t), delta=DELTA)
        assert again.epsilon <= EPS  # the printed σ reproduces the guarantee
        one = calibrate_dpsgd(acc, target_epsilon=EPS, delta=DELTA, sample_rate=Q, steps=t)
        assert res.noise_multiplier == pytest.approx(one.noise_multiplier, rel=2e-6)


def test_unpolished_rdp_sigma_is_never_smaller_than_needed():
    acc = get_accountant("rdp")
    many = calibrate_dpsgd_many(acc, target_epsilon=EPS, delta=DELTA, sample_rate=Q, steps=STEPS, polish=False)
    for t, res in zip(STEPS, many, strict=True):
        one = calibrate_dpsgd(acc, target_epsilon=EPS, delta=DELTA, sample_rate=Q, steps=t)
        assert res.epsilon <= EPS
        assert res.noise_multiplier >= one.noise_multiplier * (1 - 2e-6)  # the grid errs high
        assert res.noise_multiplier <= one.noise_multiplier * 1.05


def test_cli_epsilon_confirms_the_batched_sigma(run_cli):
    res = calibrate_dpsgd_many(get_accountant("rdp"), target_epsilon=EPS, delta=DELTA, sample_rate=Q,
                               steps=[100, 1000])
    for t, r in zip([100, 1000], res, strict=True):
        out = run_cli("epsilon", "--sigma", repr(r.noise_multiplier), "-q", Q, "--steps", t, "--delta", DELTA,
                      "--accountant", "rdp", "--json")
        assert out.exit_code == 0 and out.json()["results"][0]["epsilon"] <= EPS


def test_unreachable_targets_are_not_applicable_rows():
    # δ = 1e-12 and ε = 0.02 with orders up to 256: out of reach for rdp (epsilon_floor)
    acc = get_accountant("rdp")
    res = calibrate_dpsgd_many(acc, target_epsilon=0.02, delta=1e-12, sample_rate=Q, steps=[10, 100])
    assert all(not r.applicable and r.reason for r in res)


def test_pld_is_calibrated_cell_by_cell():
    acc = get_accountant("pld")
    many = calibrate_dpsgd_many(acc, target_epsilon=EPS, delta=DELTA, sample_rate=Q, steps=[200])
    one = calibrate_dpsgd(acc, target_epsilon=EPS, delta=DELTA, sample_rate=Q, steps=200)
    assert many[0].noise_multiplier == one.noise_multiplier
