"""pld composes one neighbouring ordering when the other is its swap (issue 31).

The add ordering of a Poisson-sampled Gaussian is the remove pair swapped, so its composition
is the swapped composition and the hockey-stick duality δ_{Q‖P}(ε) = 1 − e^ε + e^ε δ_{P‖Q}(−ε)
bounds it from the remove ordering's upper PMF (``swapped_delta_upper``). References:
- exact δ(ε) of μ-GDP (Balle & Wang 2018 Thm 8; Dong, Roth, Su 2019 Cor. 2.13), mpmath: the
  Gaussian mechanism is symmetric, so the swapped bound must be ≥ its exact δ (an achievable
  value: the mechanism attains it);
- the add ordering composed directly: its lower PMF is a proven lower bound on the true δ (the
  swapped bound must be above it) and its upper PMF an upper bound (the swapped bound is as
  tight where δ is not near the slack).
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

from dpcalc.accounting._pld_compose import delta_for_epsilon, self_compose, swapped_delta_upper
from dpcalc.accounting._pld_grid import DiscretePLD, discretize
from dpcalc.accounting._pld_history import segments
from dpcalc.accounting._pld_mechanisms import GaussianLoss
from dpcalc.accounting.pld import _ETA_REL, PldAccountant
from dpcalc.events import dpsgd_event


def _gdp_delta(mu: float, eps: float) -> float:
    mpmath.mp.dps = 40
    e, m = mpmath.mpf(eps), mpmath.mpf(mu)
    return float(mpmath.ncdf(-e / m + m / 2) - mpmath.exp(e) * mpmath.ncdf(-e / m - m / 2))


def test_swapped_bound_on_the_gaussian_is_above_the_exact_delta_and_tight():
    sigma, steps = 10.0, 100
    mu = math.sqrt(steps) / sigma
    up, _ = discretize(GaussianLoss(1.0 / sigma), 1e-3, tail=1e-16, max_points=2 ** 22)
    comp = self_compose(up, steps, eta=1e-14, max_points=2 ** 22)
    for eps in (0.0, 0.5, 1.0, 2.0, 3.0, 4.0):
        exact = _gdp_delta(mu, eps)
        bound = swapped_delta_upper(comp, eps)
        assert bound >= exact
        assert bound <= exact * (1 + 1e-3) + 1e-12
        # the direct read-out of the same PMF (the pair is symmetric): the same value, but for
        # the slack and the PMF's mass defects (P-mass above 1, Q-mass sent to +∞: ~1e-11 here),
        # which the duality multiplies by e^ε
        slack = (math.exp(eps) + 1) * (comp.slack + 1e-12) + 1e-10
        assert bound == pytest.approx(delta_for_epsilon(comp, eps), rel=1e-6, abs=slack)


@pytest.mark.parametrize(("q", "sigma", "steps"), [(0.01, 1.0, 1000), (0.01, 4.0, 10_000), (0.5, 1.0, 100)])
def test_swapped_bound_brackets_the_add_ordering(q, sigma, steps):
    acc = PldAccountant(accuracy=1e-3)
    segs = segments(dpsgd_event(noise_multiplier=sigma, sample_rate=q, steps=steps), acc.neighboring, acc.name)
    eta = _ETA_REL * 1e-5
    comp = acc._compose(segs, acc._start_h(segs, eta), eta, directions=("remove", "add"))
    (up_r, _), (up_a, lo_a) = comp["remove"], comp["add"]
    for eps in (0.0, 0.3, 1.0, 2.0, 3.0, 5.0):
        bound = swapped_delta_upper(up_r, eps)
        assert bound >= delta_for_epsilon(lo_a, eps)  # a proven lower bound on the true δ
        direct = delta_for_epsilon(up_a, eps)
        # as tight, but for the slack (multiplied by e^ε in the swapped bound)
        assert bound <= direct * (1 + 1e-4) + (math.exp(eps) + 1) * (up_r.slack + 1e-12) + 1e-10


def test_one_ordering_gives_the_same_bracket_as_both():
    class Both(PldAccountant):
        def _compose(self, segs, h, eta, lower=True, directions=None):
            return super()._compose(segs, h, eta, lower, directions or ("remove", "add"))

    for q, sigma, steps, delta in [(0.01, 4.0, 10_000, 1e-5), (256 / 60000, 1.1, 14_063, 1e-5),
                                   (0.01, 1.0, 1000, 1e-5), (0.2, 0.7, 50, 1e-8)]:
        event = dpsgd_event(noise_multiplier=sigma, sample_rate=q, steps=steps)
        one = PldAccountant(accuracy=1e-3).epsilon(event, delta=delta)
        both = Both(accuracy=1e-3).epsilon(event, delta=delta)
        assert one.epsilon == both.epsilon  # the add ordering is below: the same upper bound, bitwise
        assert one.details["epsilon_lower"] <= both.details["epsilon_lower"]
        assert one.details["epsilon_lower"] >= both.details["epsilon_lower"] - 1e-12
        d1 = PldAccountant().delta(event, epsilon=1.0)
        d2 = Both().delta(event, epsilon=1.0)
        assert d1.delta == d2.delta


def test_the_add_ordering_is_composed_when_the_swapped_bound_cannot_show_it_is_below():
    acc = PldAccountant()
    segs = segments(dpsgd_event(noise_multiplier=1.0, sample_rate=0.01, steps=100), acc.neighboring, acc.name)
    comp = acc._compose(segs, 1e-3, 1e-12)
    assert set(comp) == {"remove"} and comp.pending is not None
    assert comp.covers(3.0, 1e-5)
    assert not comp.covers(0.0, 1e-12)  # δ(0) of the add ordering is far above 1e-12
    comp.complete()
    assert set(comp) == {"remove", "add"} and comp.pending is None and comp.covers(0.0, 1e-12)


def test_first_above_is_searchsorted():
    rng = np.random.default_rng(3)
    for _ in range(500):
        n = int(rng.integers(1, 500))
        h = float(10 ** rng.uniform(-7, 0))
        pld = DiscretePLD(h, int(rng.integers(-n - 20, 20)), np.ones(n), 0.0, 0.0, True,
                          float(rng.uniform(-0.4, 0.4) * h) if rng.random() < 0.5 else 0.0)
        ell = pld.losses
        for x in (0.0, float(ell[0]), float(ell[-1]), float(ell[n // 2]), float(rng.normal()), -math.inf, math.inf):
            assert pld.first_above(x) == int(np.searchsorted(ell, x, side="right"))
            i = pld.first_above(x)
            assert np.array_equal(pld.losses_from(i), ell[i:])


def test_accurate_power_tabulated_angles_are_bitwise_the_direct_ones():
    # issue 31: with fewer residues k·d mod N than (k, d) pairs, sin(θ/2), sin θ and min(|θ|, 2)
    # are tabulated per residue; one frequency at a time takes the direct path (2N > K·width)
    from dpcalc.accounting._pld_compose import _accurate_power

    rng = np.random.default_rng(5)
    for n, n_fft, ks in [(3000, 4000, np.arange(40)), (5000, 9000, np.array([0, 3, 7, 11, 40, 41, 400, 2000]))]:
        p = rng.random(n) ** 6
        p /= p.sum()
        d = np.arange(n) - n // 3
        many, _ = _accurate_power(p, d, ks, n_fft, 1000)
        one = np.array([_accurate_power(p, d, np.array([k]), n_fft, 1000)[0][0] for k in ks])
        assert np.array_equal(many, one)


def test_cheap_swapped_estimate_is_below_the_bound():
    # Composed.covers skips the exact swapped bound on a large grid when this estimate (A taken at
    # each block's smallest loss, an upper bound on A) is already above δ: it must be ≤ the bound
    from dpcalc.accounting._pld_compose import _swapped_lower_estimate

    acc = PldAccountant(accuracy=1e-3)
    for q, sigma, steps in [(0.01, 4.0, 10_000), (256 / 60000, 1.1, 14_063)]:
        segs = segments(dpsgd_event(noise_multiplier=sigma, sample_rate=q, steps=steps), acc.neighboring, acc.name)
        up = acc._compose(segs, acc._start_h(segs, 1e-10), 1e-10, lower=False)["remove"][0]
        for eps in (0.0, 0.5, 1.0, 2.0, 3.0):
            assert _swapped_lower_estimate(up, eps) <= swapped_delta_upper(up, eps)
            # and close to it: A is overestimated by at most a factor e^{16h}
            assert _swapped_lower_estimate(up, eps) >= swapped_delta_upper(up, eps) - math.expm1(16 * up.h)


def _full_readout(pld: DiscretePLD, delta: float) -> tuple[float, float]:
    """epsilon_for_delta_both on the whole grid (the read-out before issue 31's slice), for the
    losses ≤ 30 path: the reference the sliced read-out must reproduce bitwise."""
    sign = 1.0 if pld.upper else -1.0
    first = pld.first_above(0.0)
    p = pld.probs[first:]
    lp = pld.losses_from(first)
    sp = np.cumsum(p[::-1])[::-1]
    prev = np.concatenate(([0.0], lp))
    sq = np.cumsum((p * np.exp(-lp))[::-1])[::-1]
    d_at = np.concatenate((sp - np.exp(prev[:-1]) * sq, [0.0]))
    out = []
    for target in (delta - pld.p_inf - sign * pld.slack, delta - pld.p_inf):
        if not target > 0:
            out.append(math.inf)
            continue
        j = int(np.argmax(d_at <= target))
        if j == 0:
            out.append(0.0)
            continue
        eps = math.log(float(sp[j - 1]) - target) - float(np.log(sq[j - 1: j])[0]) \
            if sp[j - 1] > target else float(prev[j])
        out.append(min(max(eps, float(prev[j - 1])), float(prev[j])))
    return out[0], out[1]


@pytest.mark.parametrize("guess", ["default", "worst"])
def test_sliced_readout_is_bitwise_the_full_one(monkeypatch, guess):
    # issue 31: epsilon_for_delta_both computes δ at the grid losses from a guessed index up
    # only, and doubles the slice when its first value does not show that no lower index qualifies
    import dpcalc.accounting._pld_compose as compose

    if guess == "worst":  # the slice starts at the last point: the doubling path must still agree
        monkeypatch.setattr(compose, "_readout_start", lambda sp, target: sp.size - 1)
    acc = PldAccountant(accuracy=1e-3)
    rng = np.random.default_rng(11)
    for q, sigma, steps in [(0.01, 4.0, 10_000), (0.01, 1.0, 1000), (0.1, 1.0, 100)]:
        segs = segments(dpsgd_event(noise_multiplier=sigma, sample_rate=q, steps=steps), acc.neighboring, acc.name)
        up, lo = acc._compose(segs, acc._start_h(segs, 1e-10), 1e-10)["remove"]
        for pld in (up, lo):
            assert pld.losses_from(pld.probs.size - 1)[0] <= 30  # the sliced path (S_Q summed directly)
            for delta in [*10.0 ** rng.uniform(-12, -0.3, 25), 1e-5, 0.9]:
                assert compose.epsilon_for_delta_both(pld, float(delta)) == _full_readout(pld, float(delta))
