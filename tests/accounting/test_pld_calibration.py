"""Calibration with the pld accountant: reproducible σ, and the CLI round trip sigma → epsilon.

The issue's case (Opacus MNIST example): q = 256/60000, T = 14,063, δ = 1e-5, target ε = 3.
The search runs on a fixed-grid copy of the accountant (smooth and monotone in σ), so the σ
found does not depend on the starting bracket; the returned σ is verified with the default
accountant (what `dpcalc epsilon` uses) at σ rounded up to the 7 digits the table prints.
"""

from __future__ import annotations

import pytest

from dpcalc.accounting.calibrate import calibrate_dpsgd
from dpcalc.accounting.pld import PldAccountant
from dpcalc.cli.render import fmt
from dpcalc.events import dpsgd_event

Q, STEPS, DELTA, TARGET = 256 / 60000, 14_063, 1e-5, 3.0


class _ShiftedHint(PldAccountant):
    """pld with its first guess of σ moved by ``factor`` (None: no guess, search from σ = 1)."""

    def __init__(self, factor):
        super().__init__()
        self.factor = factor

    def calibration_hint(self, **kwargs):
        guess = super().calibration_hint(**kwargs)
        return None if self.factor is None or guess is None else guess * self.factor


@pytest.fixture(scope="module")
def reference():
    return calibrate_dpsgd(PldAccountant(), target_epsilon=TARGET, delta=DELTA, sample_rate=Q, steps=STEPS,
                           rtol=1e-5)


@pytest.mark.parametrize("factor,rtol", [(None, 1e-5), (0.9, 1e-5), (1.1, 1e-5), (1.0, 1e-6)])
def test_sigma_reproducible_across_starting_points(reference, factor, rtol):
    r = calibrate_dpsgd(_ShiftedHint(factor), target_epsilon=TARGET, delta=DELTA, sample_rate=Q, steps=STEPS,
                        rtol=rtol)
    assert r.noise_multiplier == pytest.approx(reference.noise_multiplier, rel=1e-5)
    assert r.epsilon <= TARGET


def test_calibrated_sigma_meets_target_and_lower_bound_is_close(reference):
    sigma = reference.noise_multiplier
    again = PldAccountant().epsilon(dpsgd_event(noise_multiplier=sigma, sample_rate=Q, steps=STEPS), delta=DELTA)
    assert again.epsilon == reference.epsilon <= TARGET
    # the lower bound at σ is within the accuracy (0.5%) of the target: σ is not over-calibrated
    assert TARGET - again.details["epsilon_lower"] <= 0.005 * TARGET
    # and σ is the smallest to ~1e-5: 2e-5 less noise misses the target under the same grid
    search = PldAccountant().calibration_search(again)[1]
    below = search.epsilon(dpsgd_event(noise_multiplier=sigma * (1 - 2e-5), sample_rate=Q, steps=STEPS),
                           delta=DELTA)
    assert below.epsilon > TARGET
    # σ carries 8 significant digits (rounded up); the 7-digit table rounds it up again
    assert float(f"{sigma:.8g}") == sigma


def test_fixed_grid_search_is_monotone_in_sigma(reference):
    search = PldAccountant().calibration_search(reference)[1]
    sigmas = [reference.noise_multiplier * (1 + k * 2e-6) for k in range(-5, 6)]
    eps = [search.epsilon(dpsgd_event(noise_multiplier=s, sample_rate=Q, steps=STEPS), delta=DELTA).epsilon
           for s in sigmas]
    assert all(a > b for a, b in zip(eps, eps[1:], strict=False))


def test_cli_round_trip_sigma_then_epsilon(run_cli):
    common = ["--delta", "1e-5", "--batch-size", "256", "--dataset-size", "60000", "--steps", "14063"]
    r = run_cli("sigma", "--eps", "3", *common, "--json")
    assert r.exit_code == 0, r.stderr
    sigma = r.json()["results"][0]["noise_multiplier"]
    table = run_cli("sigma", "--eps", "3", *common)
    printed = fmt(sigma, 7, "up")  # what the table shows: never below the JSON σ
    assert printed in table.stdout and float(printed) >= sigma
    # the user copies σ (JSON or table) into `dpcalc epsilon` with default settings
    for text in (repr(sigma), printed):
        back = run_cli("epsilon", "--sigma", text, *common, "--accountant", "pld", "--json")
        assert back.exit_code == 0, back.stderr
        assert back.json()["results"][0]["epsilon"] <= 3.0


def test_round_trip_other_cases(run_cli):
    # unsampled Gaussian (grid not aligned by q) and a small-T sampled case
    for extra, target in ((["--steps", "100"], "1"), (["--sample-rate", "0.02", "--steps", "500"], "0.8")):
        r = run_cli("sigma", "--eps", target, "--delta", "1e-6", *extra, "--json")
        sigma = r.json()["results"][0]["noise_multiplier"]
        back = run_cli("epsilon", "--sigma", fmt(sigma, 7, "up"), "--delta", "1e-6", *extra, "--accountant", "pld",
                       "--json")
        assert back.json()["results"][0]["epsilon"] <= float(target)


def test_unreachable_tiny_delta_is_refused_early_with_the_reason(monkeypatch):
    # issue 17: ε = 0.05, δ = 1e-12, q = 0.01, T = 10⁶ took 23 s of full-accuracy evaluations up
    # to σ = 10⁶ before exit 1. pld's numerical allowance (FFT round-off, ~3e-12 at T = 10⁶)
    # alone exceeds δ at every σ: the coarse search sees ε = inf at σ = 10⁶ and refuses at once.
    from dpcalc.errors import InfeasibleError

    calls = []
    original = PldAccountant.epsilon

    def counting(self, event, *, delta):
        calls.append(type(self).__name__)
        return original(self, event, delta=delta)

    monkeypatch.setattr(PldAccountant, "epsilon", counting)
    with pytest.raises(InfeasibleError, match="numerical allowance .* reaches delta"):
        calibrate_dpsgd(PldAccountant(), target_epsilon=0.05, delta=1e-12, sample_rate=0.01, steps=10**6)
    assert "PldAccountant" not in calls and len(calls) <= 3  # coarse evaluations only


def test_probe_and_cached_upper_pmfs_give_epsilon_bitwise():
    """issue 31: a calibration's first evaluation is ``calibration_probe`` (no lower bound in the
    polish round) and a verification reuses the upper PMFs its stand-in composed at that σ
    (``_pld_cache``); both must leave the certified ε exactly as a fresh ``epsilon()`` computes it."""
    from dpcalc.accounting._pld_cache import clear_upper_cache

    event = dpsgd_event(noise_multiplier=0.9686, sample_rate=256 / 60000, steps=14_063)
    clear_upper_cache()
    fresh = PldAccountant().epsilon(event, delta=1e-5)
    clear_upper_cache()
    probe = PldAccountant().calibration_probe(event, delta=1e-5)
    assert probe.epsilon == fresh.epsilon
    assert probe.details["discretization"] == fresh.details["discretization"]
    assert probe.details["epsilon_lower"] <= fresh.details["epsilon_lower"] <= fresh.epsilon
    clear_upper_cache()
    stand_in = PldAccountant().calibration_search(fresh)[1]
    assert stand_in.epsilon(event, delta=1e-5).epsilon == fresh.epsilon  # its grid's upper bound
    again = PldAccountant().epsilon(event, delta=1e-5)  # polish round's upper PMFs from the cache
    assert again.epsilon == fresh.epsilon and again.details == fresh.details


def test_a_repeated_epsilon_call_touches_no_fresh_memory():
    """issue 31 (_pld_cache.warm_allocator): after the first pld call of a process, an ε call on
    ~2¹⁵ grid points (bench_pld's case 2) reuses freed heap memory for its FFT buffers instead of
    fresh pages from the kernel (~570 page faults per call without the warm-up, measured). Runs
    in a fresh process (the allocator's state is process-wide); glibc (Linux) only."""
    import platform
    import subprocess
    import sys

    if sys.platform != "linux" or platform.libc_ver()[0] != "glibc":
        pytest.skip("glibc's dynamic mmap threshold")
    code = (
        "import resource\n"
        "from dpcalc.accounting._pld_cache import clear_upper_cache\n"
        "from dpcalc.accounting.pld import PldAccountant\n"
        "from dpcalc.events import dpsgd_event\n"
        "ev = dpsgd_event(noise_multiplier=4.0, sample_rate=0.01, steps=10_000)\n"
        "PldAccountant(accuracy=1e-3).epsilon(ev, delta=1e-5)\n"
        "f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
        "for _ in range(5):\n"
        "    clear_upper_cache()\n"
        "    PldAccountant(accuracy=1e-3).epsilon(ev, delta=1e-5)\n"
        "print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / 5)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert float(out.stdout) < 50
