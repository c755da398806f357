"""The rdp accountant's many-runs path (``dpcalc plan``'s grid, issue 14) against the one-run
path it must equal, and the joint σ search against the one-run calibration helper.

Sources of the reference values: the one-run functions themselves (whose accuracy against
mpmath is pinned in tests/accounting/test_rdp.py and tests/test_special_functions.py), so the
comparisons are exact (the same floats); the fractional-order floor is checked against the
one-run ε it must stay below (Pinsker's inequality, see ``sampled_gaussian_rdp.fractional_floor``).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcalc._numerics import minimize_bounded, minimize_bounded_steps
from dpcalc.accounting import rdp as R
from dpcalc.accounting import sampled_gaussian_rdp as SG
from dpcalc.accounting.calibrate import (
    _lattice_step,
    calibrate_dpsgd,
    calibrate_dpsgd_many,
)
from dpcalc.accounting.rdp_conversion import epsilon_per_order
from dpcalc.events import dpsgd_event

FRAC = np.array([x for x in R.DEFAULT_ORDERS if x != round(x)])
INTS = np.array([x for x in R.DEFAULT_ORDERS if x == round(x)])

#: (q, σ): small q, q ≈ ½ at large σ (the pinned hard case of the fractional series), q ≥ 0.55
#: (the swapped series), small σ (long series), tiny q
CASES = [(256 / 50000, 1.1), (0.5, 1e8), (0.3, 0.7), (0.7, 2.0), (1e-5, 50.0), (0.46, 3.0),
         (0.99, 1.5), (0.08, 0.4), (0.5, 255.0)]


def test_fractional_rows_equal_the_one_run_series():
    qs, ss, alphas, ref = [], [], [], []
    for q, s in CASES:
        SG._chunk_consts.cache_clear()
        ref.append(SG.log_a_frac(q, s, FRAC, None))
        qs += [q] * FRAC.size
        ss += [s] * FRAC.size
        alphas += list(FRAC)
    perm = np.random.default_rng(0).permutation(len(alphas))  # rows in any order, modes mixed
    got = np.empty(len(alphas))
    got[perm] = SG.log_a_frac(np.array(qs)[perm], np.array(ss)[perm], np.array(alphas)[perm],
                              [[] for _ in perm])
    assert np.array_equal(got, np.concatenate(ref))


def test_integer_rows_equal_the_one_run_sum():
    qs = [q for q, _ in CASES]
    ss = [s for _, s in CASES]
    got = SG.log_a_int_rows(qs, ss, INTS)
    for r, (q, s) in enumerate(CASES):
        assert np.array_equal(got[r], SG.log_a_int(q, s, INTS))


def test_minimize_bounded_steps_is_minimize_bounded():
    def f(x):
        return (x - 2.3) ** 2 + 0.1 * math.sin(5 * x)

    gen = minimize_bounded_steps(1.0, 4.0, 1e-6)
    x, seen = next(gen), []
    try:
        while True:
            seen.append(x)
            x = gen.send(f(x))
    except StopIteration as stop:
        assert stop.value == minimize_bounded(f, 1.0, 4.0, 1e-6)
    assert len(seen) > 3


def _runs():
    rng = np.random.default_rng(7)
    runs = [(1.0, 2.0, 10), (0.01, 1.0, 0), (0.5, 1e8, 1000), (0.5, 255.0, 3)]
    for k in range(16):
        q = float(min(10 ** rng.uniform(-6, 0), 1.0)) if k % 4 else float(rng.uniform(0.4, 0.6))
        runs.append((q, float(10 ** rng.uniform(-1.5, 2)), int(10 ** rng.uniform(0, 6))))
    return runs


@pytest.mark.parametrize("delta", [1e-5, 1e-12])
def test_many_runs_equal_one_run_each(delta):
    acc = R.RdpAccountant()
    runs = _runs()
    many = acc.epsilon_dpsgd_many(sample_rates=[r[0] for r in runs],
                                  noise_multipliers=[r[1] for r in runs],
                                  steps=[r[2] for r in runs], delta=delta)
    for (q, s, t), res in zip(runs, many, strict=True):
        one = acc.epsilon(dpsgd_event(noise_multiplier=s, sample_rate=q, steps=t), delta=delta)
        assert res == one
        # and the general path (a composition of the same step) gives the same ε
        if q < 1 and t > 0:
            gen = acc._search(dpsgd_event(noise_multiplier=s, sample_rate=q, steps=t),
                              lambda a, r: epsilon_per_order(a, r, math.log(delta)), 0.0)
            assert gen[0] == res.epsilon


@settings(max_examples=60, deadline=None)
@given(q=st.floats(1e-6, 0.999), sigma=st.floats(0.05, 1e3), steps=st.integers(1, 10**6),
       log10_delta=st.floats(-14, -2))
def test_fractional_floor_is_below_every_fractional_epsilon(q, sigma, steps, log10_delta):
    """Where the floor claims the fractional orders cannot win, each one's ε (computed by the
    one-run path) is at least the floor, and the floor exceeds the best integer order's ε."""
    log_d = log10_delta * math.log(10)
    frac = R.rdp_sampled_gaussian(sample_rate=q, noise_multiplier=sigma, orders=FRAC) * steps
    ints = R.rdp_sampled_gaussian(sample_rate=q, noise_multiplier=sigma, orders=INTS) * steps
    best_int = float(np.min(epsilon_per_order(INTS, ints, log_d)))
    floor = SG.fractional_floor(FRAC, np.array([best_int]), np.array([q]), np.array([sigma]),
                                np.array([float(steps)]), log_d)[0]
    if not math.isnan(floor):
        assert floor > best_int
        assert np.all(epsilon_per_order(FRAC, frac, log_d) >= floor)


@pytest.mark.parametrize("target", [0.5, 3.0, pytest.param(20.0, marks=pytest.mark.slow)])
def test_joint_calibration_is_verified_and_never_above_the_helper(target):
    acc = R.RdpAccountant()
    runs = [(64 / 50000, 782), (256 / 50000, 11719), (4096 / 50000, 13), (0.02, 5000), (0.5, 10)]
    got = calibrate_dpsgd_many(acc, target_epsilon=target, delta=1e-5, runs=runs)
    for (q, t), res in zip(runs, got, strict=True):
        one = calibrate_dpsgd(acc, target_epsilon=target, delta=1e-5, sample_rate=q, steps=t)
        sigma = res.noise_multiplier
        ev = acc.epsilon(dpsgd_event(noise_multiplier=sigma, sample_rate=q, steps=t), delta=1e-5)
        assert ev.epsilon == res.epsilon <= target
        assert sigma <= one.noise_multiplier <= sigma * (1 + 1e-6)
        # the smallest 8-digit σ: the lattice point below misses the target
        below = _lattice_step(sigma, 8, up=False)
        assert below < sigma and f"{below:.8g}" != f"{sigma:.8g}"
        assert acc.epsilon(dpsgd_event(noise_multiplier=below, sample_rate=q, steps=t),
                           delta=1e-5).epsilon > target


def test_joint_calibration_hands_hard_runs_to_the_helper():
    """A target out of reach comes back as the helper's InfeasibleError; an unsupported
    accountant setting (replace adjacency) raises as the helper does."""
    from dpcalc.errors import InfeasibleError

    acc = R.RdpAccountant()
    got = calibrate_dpsgd_many(acc, target_epsilon=1e-4, delta=1e-12, runs=[(0.5, 10**6)])
    assert isinstance(got[0], InfeasibleError)


@pytest.mark.parametrize("s", [1.0, 9.9999999, 0.57827104, 1234.5678])
def test_lattice_neighbours(s):
    up, down = _lattice_step(s, 8, up=True), _lattice_step(s, 8, up=False)
    assert down < s < up
    assert float(f"{up:.8g}") == up and float(f"{down:.8g}") == down
