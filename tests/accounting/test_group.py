"""Mixture-of-Gaussians events and group-level DP-SGD (issue 28; dpcalc/accounting/group.py,
dpcalc/accounting/mixture_rdp.py).

References, independent of the code under test:

* dp_accounting's PLD of ``MixtureOfGaussiansDpEvent`` (Choquette-Choo, Ganesh, Steinke, Thakurta
  2023): a pessimistic estimate of the same truth — never below pld's proven lower bound;
* the exact one-step δ(ε) of the mixture pair in mpmath (the pair is attained by the 1-D instance
  "every record of the group +C, every other record 0", group.py's theorem): an achievable lower
  bound of the group-level truth, inside pld's bracket;
* the exact Gaussian (μ-GDP) curve for q = 1: μ = k√T/σ (Dong, Roth, Su 2022 Cor 3.3);
* the Poisson-sampled Gaussian's exact RDP (Mironov, Talwar, Zhang 2019) for k = 1, and an mpmath
  integral of a three-component mixture's RDP;
* the group-privacy conversion (Vadhan 2017 Lemma 2.2) of the record-level guarantee: an upper bound
  the tight group ε must not exceed.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

from dpcalc.accounting.group import convert_group_epsilon, rdp_mixture_step
from dpcalc.accounting.mixture_rdp import rdp_mixture
from dpcalc.accounting.pld import PldAccountant
from dpcalc.accounting.rdp import RdpAccountant
from dpcalc.accounting.sampled_gaussian_rdp import rdp_sampled_gaussian
from dpcalc.errors import ParameterError, UnsupportedEventError
from dpcalc.events import (
    FixedSizeSampledEvent,
    GaussianEvent,
    GroupEvent,
    MixtureOfGaussiansDpEvent,
    MixtureOfGaussiansEvent,
    PoissonSampledEvent,
    SelfComposedEvent,
    dpsgd_event,
    flatten,
)
from dpcalc.mechanisms.gaussian import gaussian_epsilon

mpmath.mp.dps = 30


def _exact_delta(sigma: float, law: dict, eps: float, order: str) -> mpmath.mpf:
    """Exact δ(ε) of N(0, σ²) vs Σ_c w_c N(c, σ²) (``order`` "remove": P the mixture), in mpmath:
    the loss is increasing in y, so {loss > ε} is a half-line found by bisection."""
    s = mpmath.mpf(sigma)
    law = {mpmath.mpf(c): mpmath.mpf(w) for c, w in law.items() if w > 0}

    def loss(y):
        return mpmath.log(sum(w * mpmath.e ** ((2 * c * y - c * c) / (2 * s * s)) for c, w in law.items()))

    def root(target):
        lo, hi = mpmath.mpf(-400), mpmath.mpf(400)
        for _ in range(200):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if loss(mid) < target else (lo, mid)
        return (lo + hi) / 2

    e = mpmath.e ** eps
    if order == "remove":
        y = root(eps)
        return sum(w * mpmath.ncdf((c - y) / s) for c, w in law.items()) - e * mpmath.ncdf(-y / s)
    p0 = law.get(mpmath.mpf(0), mpmath.mpf(0))
    if p0 > 0 and -eps <= mpmath.log(p0):
        return mpmath.mpf(0)
    y = root(-eps)
    return mpmath.ncdf(y / s) - e * sum(w * mpmath.ncdf((y - c) / s) for c, w in law.items())


def _binom(k: int, q: float) -> dict[int, float]:
    return {j: math.comb(k, j) * q ** j * (1 - q) ** (k - j) for j in range(k + 1)}


# ---------------------------------------------------------------------------------------- events

def test_event_fields_mirror_dp_accounting_and_its_name_is_accepted():
    e = MixtureOfGaussiansDpEvent(standard_deviation=1.0, sensitivities=[0, 1], sampling_probs=[0.9, 0.1])
    assert isinstance(e, MixtureOfGaussiansEvent) and e.sensitivities == (0.0, 1.0)
    assert hash(e) == hash(MixtureOfGaussiansEvent(1.0, (0.0, 1.0), (0.9, 0.1)))


@pytest.mark.parametrize("kwargs,name", [
    ({"standard_deviation": 0.0, "sensitivities": [1], "sampling_probs": [1]}, "standard_deviation"),
    ({"standard_deviation": 1.0, "sensitivities": [1, 2], "sampling_probs": [1]}, "sampling_probs"),
    ({"standard_deviation": 1.0, "sensitivities": [-1], "sampling_probs": [1]}, "sensitivities"),
    ({"standard_deviation": 1.0, "sensitivities": [0, 1], "sampling_probs": [0.5, 0.4]}, "sampling_probs"),
    ({"standard_deviation": 1.0, "sensitivities": [0, 1], "sampling_probs": [1.0, 0.0]}, "sensitivities"),
])
def test_event_refuses_bad_fields(kwargs, name):
    with pytest.raises(ParameterError, match=name):
        MixtureOfGaussiansEvent(**kwargs)


@pytest.mark.parametrize("k", [0, -1, 1.5])
def test_group_size_below_one_is_refused(k):
    with pytest.raises(ParameterError, match="group_size"):
        GroupEvent(k, GaussianEvent(1.0))
    with pytest.raises(ParameterError, match="group_size"):
        dpsgd_event(noise_multiplier=1.0, sample_rate=0.1, steps=3, group_size=k)


def test_flatten_ungroups_exact_cases():
    step = PoissonSampledEvent(0.1, GaussianEvent(2.0))
    assert flatten(GroupEvent(1, step)) == [(step, 1)]
    assert flatten(SelfComposedEvent(GroupEvent(4, GaussianEvent(2.0)), 3)) == [(GaussianEvent(0.5), 3)]
    assert flatten(GroupEvent(4, PoissonSampledEvent(1.0, GaussianEvent(2.0)))) == [(GaussianEvent(0.5), 1)]
    assert flatten(GroupEvent(4, step)) == [(GroupEvent(4, step), 1)]


# ----------------------------------------------------------------- MoG pld against dp_accounting

#: (σ, sensitivities, probabilities, T, δ): ten settings, both orderings matter in each
MOG_SETTINGS = [
    (1.2, [0, 1, 2], [0.7, 0.2, 0.1], 50, 1e-6),
    (1.0, [0, 1], [0.99, 0.01], 1000, 1e-5),
    (2.0, [1.0], [1.0], 10, 1e-5),
    (0.8, [0, 0.5, 1.5], [0.5, 0.3, 0.2], 20, 1e-5),
    (3.0, [0, 1, 2, 3], [0.6, 0.25, 0.1, 0.05], 100, 1e-7),
    (1.5, [0.5, 1.0], [0.5, 0.5], 30, 1e-5),
    (1.0, [0, 3], [0.999, 0.001], 500, 1e-6),
    (5.0, [0, 2, 4], [0.8, 0.15, 0.05], 200, 1e-5),
    (1.1, [0, 1, 2], [0.9025, 0.095, 0.0025], 2000, 1e-5),
    (0.7, [0, 1], [0.98, 0.02], 300, 1e-4),
    (2.5, [0, 1, 2, 3, 4], [0.5, 0.2, 0.15, 0.1, 0.05], 40, 1e-6),
]


@pytest.mark.parametrize("sigma,c,p,steps,delta", [
    *MOG_SETTINGS[2:4], *(pytest.param(*s, marks=pytest.mark.slow) for s in MOG_SETTINGS[:2] + MOG_SETTINGS[4:])])
def test_mog_pld_brackets_dp_accounting(sigma, c, p, steps, delta):
    """dp_accounting's pessimistic PLD (discretisation 4e-3) of the same event: never below pld's
    lower bound, and pld's certified ε within 1% of it (eleven settings; nine are slow, ~5-15 s each)."""
    import dp_accounting

    acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=4e-3)
    acc.compose(dp_accounting.dp_event.MixtureOfGaussiansDpEvent(sigma, c, p), steps)
    theirs = acc.get_epsilon(delta)
    ours = PldAccountant().epsilon(SelfComposedEvent(MixtureOfGaussiansEvent(sigma, c, p), steps), delta=delta)
    assert ours.details["epsilon_lower"] <= theirs * (1 + 1e-9), (ours, theirs)
    assert ours.epsilon <= theirs * 1.01 + 1e-9, (ours, theirs)


@pytest.mark.parametrize("sigma,c,p", [(1.2, [0, 1, 2], [0.7, 0.2, 0.1]), (0.9, [0.5, 2.0], [0.6, 0.4])])
def test_mog_one_step_bracket_contains_the_exact_delta(sigma, c, p):
    law = {float(ci): pi for ci, pi in zip(c, p, strict=True)}
    event = MixtureOfGaussiansEvent(sigma, c, p)
    for eps in (0.3, 1.0, 2.5):
        exact = float(max(_exact_delta(sigma, law, eps, "remove"), _exact_delta(sigma, law, eps, "add")))
        res = PldAccountant(accuracy=1e-3).delta(event, epsilon=eps)
        assert res.details["delta_lower"] <= exact * (1 + 1e-9) + 1e-15
        assert exact <= res.delta <= exact * 1.02 + 1e-12


def test_mog_refused_under_replace_one():
    event = MixtureOfGaussiansEvent(1.0, [0, 1], [0.5, 0.5])
    with pytest.raises(UnsupportedEventError, match="add/remove"):
        PldAccountant(neighboring="replace").epsilon(event, delta=1e-5)


# ---------------------------------------------------------------------------------------- RDP

@pytest.mark.parametrize("q,sigma", [(0.01, 1.0), (0.1, 0.8), (0.5, 2.0), (0.001, 0.6)])
def test_rdp_two_components_is_the_sampled_gaussian(q, sigma):
    """Shifts (0, 1/σ), weights (1−q, q): the exact RDP of Mironov, Talwar, Zhang 2019 is a lower
    bound of ours (both orderings ≤ the remove one) and ours is within 5% (or 2e-6: the quadrature's
    chord error where the RDP itself is ~1e-5) of it from α = 2 on."""
    orders = np.array([1.5, 2.0, 3.0, 8.0, 16.0, 32.0, 64.0, 256.0])
    ours = rdp_mixture(np.array([0.0, 1.0 / sigma]), np.log([1 - q, q]), np.log([1 - q, q]), orders)
    ref = rdp_sampled_gaussian(sample_rate=q, noise_multiplier=sigma, orders=orders)
    assert np.all(ours >= ref)
    assert np.all(ours[1:] <= ref[1:] * 1.05 + 2e-6)


@pytest.mark.slow
def test_rdp_three_components_against_mpmath():
    """~13 s (mpmath quadrature)."""
    sigma, c, p = 1.3, [0.0, 1.0, 2.0], [0.6, 0.3, 0.1]
    event = MixtureOfGaussiansEvent(sigma, c, p)
    for alpha in (2.0, 5.5, 12.0):
        def integrand(y, a=alpha, sign=1):
            n0 = mpmath.npdf(y, 0, sigma)
            m = sum(pi * mpmath.npdf(y, ci, sigma) for ci, pi in zip(c, p, strict=True))
            return m ** a * n0 ** (1 - a) if sign > 0 else n0 ** a * m ** (1 - a)
        rem = mpmath.log(mpmath.quad(integrand, [-mpmath.inf, 0, 10, 40, mpmath.inf])) / (alpha - 1)
        add = mpmath.log(mpmath.quad(lambda y, a=alpha: integrand(y, a, -1), [-mpmath.inf, -40, 0, mpmath.inf]))
        exact = float(max(rem, add / (alpha - 1)))
        ours = float(rdp_mixture_step(event, np.array([alpha]))[0])
        assert exact <= ours <= exact * 1.01 + 1e-9, (alpha, exact, ours)


# ------------------------------------------------------------------------------ group-level DP-SGD

def test_group_of_one_is_the_record_level_run():
    rec = dpsgd_event(noise_multiplier=1.0, sample_rate=0.01, steps=500)
    grp = SelfComposedEvent(GroupEvent(1, PoissonSampledEvent(0.01, GaussianEvent(1.0))), 500)
    for acc in (PldAccountant(), RdpAccountant()):
        assert acc.epsilon(grp, delta=1e-5).epsilon == acc.epsilon(rec, delta=1e-5).epsilon


@pytest.mark.parametrize("k,sigma,steps", [(2, 1.0, 100), (4, 3.0, 1000), (10, 8.0, 50)])
def test_group_without_sampling_is_the_exact_gdp(k, sigma, steps):
    """q = 1: exactly μ-GDP with μ = k√T/σ (the Gaussian with shift k, composed T times)."""
    mu = k * math.sqrt(steps) / sigma
    exact = gaussian_epsilon(delta=1e-5, mu=mu)
    res = PldAccountant().epsilon(dpsgd_event(noise_multiplier=sigma, steps=steps, group_size=k), delta=1e-5)
    assert res.details["epsilon_lower"] <= exact * (1 + 1e-9) and exact <= res.epsilon <= exact * 1.006


#: (k, q, σ, T, δ): group-level runs
GROUP_RUNS = [(2, 0.01, 1.0, 1000, 1e-5), (4, 0.01, 1.0, 1000, 1e-5),
              pytest.param(10, 0.001, 0.8, 10000, 1e-5, marks=pytest.mark.slow),
              pytest.param(5, 0.05, 2.0, 500, 1e-6, marks=pytest.mark.slow)]


@pytest.mark.parametrize("k,q,sigma,steps,delta", GROUP_RUNS)
def test_group_below_convert_group_and_above_record_level(k, q, sigma, steps, delta):
    pld = PldAccountant()
    grp = pld.epsilon(dpsgd_event(noise_multiplier=sigma, sample_rate=q, steps=steps, group_size=k), delta=delta)
    rec = dpsgd_event(noise_multiplier=sigma, sample_rate=q, steps=steps)
    conv = convert_group_epsilon(pld, rec, group_size=k, delta=delta)
    assert grp.epsilon <= conv
    assert grp.details["epsilon_lower"] <= grp.epsilon
    assert grp.epsilon >= pld.epsilon(rec, delta=delta).epsilon
    assert grp.epsilon <= RdpAccountant().epsilon(
        dpsgd_event(noise_multiplier=sigma, sample_rate=q, steps=steps, group_size=k), delta=delta).epsilon


@pytest.mark.parametrize("k,q,sigma", [(3, 0.1, 1.0), (8, 0.05, 2.0)])
def test_group_one_step_bracket_contains_the_attained_instance(k, q, sigma):
    """One step: the exact δ(ε) of the binomial mixture (attained by the instance of group.py's
    theorem) lies in pld's bracket — an achievable lower bound, never under-reported."""
    event = GroupEvent(k, PoissonSampledEvent(q, GaussianEvent(sigma)))
    law = _binom(k, q)
    for eps in (0.5, 1.5):
        exact = float(max(_exact_delta(sigma, law, eps, "remove"), _exact_delta(sigma, law, eps, "add")))
        res = PldAccountant(accuracy=1e-3).delta(event, epsilon=eps)
        assert res.details["delta_lower"] <= exact * (1 + 1e-9) + 1e-15
        assert exact <= res.delta <= exact * 1.02 + 1e-12


def test_group_with_a_fixed_size_sampler_is_refused_with_the_reason():
    event = GroupEvent(3, FixedSizeSampledEvent(10, 100, GaussianEvent(1.0)))
    with pytest.raises(UnsupportedEventError, match="group-level"):
        PldAccountant().epsilon(event, delta=1e-5)
