"""Batch samplers other than Poisson (issue 12): fixed-size batches without replacement
(replace-one; Wang, Balle, Kasiviswanathan 2019 Thm 9) and truncated Poisson sampling
(add/remove; the branch decomposition of dp_accounting's truncated subsampled Gaussian).

References used here:

* WBK19 Thm 9 / Cor 10, re-implemented below in mpmath straight from the statement
  (dpcalc/accounting/_sampling_rdp.py quotes it);
* dp_accounting's ``SampledWithoutReplacementDpEvent`` RDP (the same theorem with its Thm 27
  refinement for α ≤ 256: never above Thm 9); its noise multiplier is relative to the
  replace-one sensitivity, so dp_accounting at σ/2 is dpcalc at σ;
* the explicit two-point instance (a record contributing +C in D and −C in D′, all others 0):
  its output pair is ((1−γ)N(0,σ²) + γN(1,σ²), (1−γ)N(0,σ²) + γN(−1,σ²)) in units of C,
  the pair of pld's Poisson-sampled Gaussian under replace-one, whose certified *lower* bound
  (details["epsilon_lower"]) is below the instance's exact ε — so any valid upper bound for
  sampling without replacement must be above it;
* binomial tails from scipy.stats (tests only; calculator code uses scipy.special).
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcalc.accounting._sampling_rdp import (
    rdp_truncated_poisson_gaussian,
    rdp_without_replacement_gaussian,
    truncation_branch,
)
from dpcalc.accounting.pld import PldAccountant
from dpcalc.accounting.rdp import RdpAccountant, rdp_of_event, rdp_sampled_gaussian
from dpcalc.accounting.registry import available, get_accountant
from dpcalc.errors import ParameterError, UnsupportedEventError
from dpcalc.events import (
    EPOCH_SAMPLINGS,
    SAMPLINGS,
    EpochSampledEvent,
    FixedSizeSampledEvent,
    GaussianEvent,
    PoissonSampledEvent,
    SelfComposedEvent,
    TruncatedPoissonSampledEvent,
    dpsgd_event,
    flatten,
    sampled_step,
)
from dpcalc.schedule import resolve_schedule

mpmath.mp.dps = 40


def _wbk_thm9_mp(gamma: float, sigma: float, alpha: int) -> mpmath.mpf:
    """(α−1)·ε′(α) of WBK19 Thm 9 for the Gaussian under replace-one (ε(j) = 2j/σ², ε(∞) = ∞)."""
    g, s2 = mpmath.mpf(gamma), mpmath.mpf(sigma) ** 2

    def eps(j):
        return 2 * mpmath.mpf(j) / s2

    total = 1 + g ** 2 * mpmath.binomial(alpha, 2) * min(4 * (mpmath.e ** eps(2) - 1), 2 * mpmath.e ** eps(2))
    for j in range(3, alpha + 1):
        total += g ** j * mpmath.binomial(alpha, j) * mpmath.e ** ((j - 1) * eps(j)) * 2
    return mpmath.log(total)


WOR_CASES = [(256, 60000, 1.1), (100, 10000, 2.0), (10, 1000, 4.0), (1, 10, 5.0), (600, 6000, 1.0), (5, 7, 3.0)]


@pytest.mark.parametrize("b,n,sigma", WOR_CASES)
def test_without_replacement_rdp_is_wbk_theorem_9(b, n, sigma):
    """dpcalc's curve is WBK19 Thm 9 (mpmath, 40 digits) at integer orders, its Cor 10 interpolation
    at fractional ones, capped by the unsubsampled 2α/σ² — never below the theorem's value."""
    ints = [2, 3, 4, 5, 8, 13, 32, 64]
    got = rdp_without_replacement_gaussian(batch_size=b, dataset_size=n, noise_multiplier=sigma, orders=ints)
    for a, val in zip(ints, got, strict=True):
        ref = min(float(_wbk_thm9_mp(b / n, sigma, a) / (a - 1)), 2.0 * a / sigma ** 2)
        assert ref <= val <= ref * (1 + 1e-11), (a, val, ref)
    frac = 2.5
    (val,) = rdp_without_replacement_gaussian(batch_size=b, dataset_size=n, noise_multiplier=sigma, orders=[frac])
    cor10 = float((_wbk_thm9_mp(b / n, sigma, 2) + _wbk_thm9_mp(b / n, sigma, 3)) / 2 / (frac - 1))
    ref = min(cor10, 2.0 * frac / sigma ** 2)
    assert ref <= val <= ref * (1 + 1e-11)


@pytest.mark.parametrize("b,n,sigma", WOR_CASES)
def test_without_replacement_rdp_agrees_with_dp_accounting(b, n, sigma):
    """dp_accounting's SampledWithoutReplacementDpEvent RDP (σ/2: its σ is relative to the replace-one
    sensitivity), capped like dpcalc's at the unsubsampled 2α/σ²: at orders > 256 it is Thm 9 alone,
    equal to dpcalc; below, its Thm 27 refinement is never above dpcalc's Thm 9, and at most a
    factor 2 below it (1.6 at γ = 0.1, σ = 5, α = 8)."""
    from dp_accounting.rdp import rdp_privacy_accountant as dpa_rdp

    orders = np.array([2.0, 3.0, 8.0, 32.0, 100.0, 256.0, 300.0, 512.0])
    got = rdp_without_replacement_gaussian(batch_size=b, dataset_size=n, noise_multiplier=sigma, orders=orders)
    ref = dpa_rdp._compute_rdp_sample_wor_gaussian(b / n, sigma / 2.0, orders)
    big = orders > 256
    ref = np.minimum(ref, 2 * orders / sigma ** 2)  # dp_accounting does not cap at the unsubsampled curve
    np.testing.assert_allclose(got[big], ref[big], rtol=1e-9)
    assert np.all(got >= ref * (1 - 1e-12))
    assert np.all(got <= ref * 2.0)


def test_without_replacement_pair_functions_on_a_symmetric_grid_are_the_direct_ones():
    """The pair evaluates R once per |ℓ| on a ± symmetric grid (speed, issue 12); the values must be
    bitwise those of evaluating R at every point (the mirror formulas of the module docstring),
    on pld's own edge grid, on an asymmetric one, and on one point."""
    from dpcalc.accounting._sampling_pld import WithoutReplacementGaussianLoss

    pair = WithoutReplacementGaussianLoss(2.2, 256 / 60000)
    h = 2.9e-4
    grids = [(-4000 - 0.5 + 0.5 * np.arange(2 * 8001 + 1)) * h,  # discretize's half-grid edges
             np.linspace(-3.0, 7.0, 1001), np.array([0.3]), np.array([-0.3, 0.0])]
    for ell in grids:
        pos = ell >= 0
        p_le, p_gt, q_le, q_gt = pair._r.functions(np.abs(ell))
        direct = (np.where(pos, p_le, q_gt), np.where(pos, p_gt, q_le), np.where(pos, q_le, p_gt),
                  np.where(pos, q_gt, p_le))
        for got, want in zip(pair.functions(ell), direct, strict=True):
            assert np.array_equal(got, want)


@pytest.mark.parametrize("b,n,sigma,steps,delta", [
    (256, 60000, 1.1, 14063, 1e-5), (100, 10000, 2.0, 1000, 1e-6), (10, 1000, 4.0, 500, 1e-5),
    (600, 6000, 1.0, 100, 1e-5)])
def test_without_replacement_epsilon_vs_dp_accounting_and_two_point_instance(b, n, sigma, steps, delta):
    """ε (rdp, replace-one) ≥ the two-point instance's exact ε (≥ pld's certified lower bound of that
    pair), and within [1, 1.1] of dp_accounting's RDP accountant on the same history."""
    import dp_accounting as dpa
    from dp_accounting.rdp import rdp_privacy_accountant as dpa_rdp

    event = dpsgd_event(noise_multiplier=sigma, steps=steps, sampling="without-replacement",
                        batch_size=b, dataset_size=n)
    eps = RdpAccountant(neighboring="replace").epsilon(event, delta=delta).epsilon
    two_point = PldAccountant(neighboring="replace").epsilon(
        dpsgd_event(noise_multiplier=sigma, sample_rate=b / n, steps=steps), delta=delta)
    assert eps >= two_point.details["epsilon_lower"]
    acc = dpa_rdp.RdpAccountant(neighboring_relation=dpa.NeighboringRelation.REPLACE_ONE)
    acc.compose(dpa.SelfComposedDpEvent(
        dpa.SampledWithoutReplacementDpEvent(n, b, dpa.GaussianDpEvent(sigma / 2.0)), steps))
    ref = acc.get_epsilon(delta)
    assert ref * (1 - 1e-6) <= eps <= ref * 1.1, (eps, ref)


def test_without_replacement_full_batch_is_the_gaussian_under_replace_one():
    """B = N: every record in every batch: the Gaussian with replace-one sensitivity 2 (2α/σ²)."""
    a = np.array([1.5, 2.0, 10.0])
    got = rdp_without_replacement_gaussian(batch_size=50, dataset_size=50, noise_multiplier=3.0, orders=a)
    np.testing.assert_array_equal(got, 2.0 * a / 9.0)


def test_truncation_branch_closed_form():
    """p = P[Bin(M, q) ≥ B_max] and γ = E[q·B_max/(K+1); K ≥ B_max]/p (summed term by term)."""
    from scipy.stats import binom

    for q, m, bmax in [(0.01, 10000, 110), (0.05, 999, 55), (0.3, 40, 10), (0.5, 7, 3)]:
        p, gamma = truncation_branch(sample_rate=q, others=m, max_batch_size=bmax)
        k = np.arange(bmax, m + 1)
        w = binom.pmf(k, m, q)
        assert p == pytest.approx(w.sum(), rel=1e-9)
        assert gamma == pytest.approx((w * q * bmax / (k + 1)).sum() / w.sum(), rel=1e-7)  # widened 3e-8
        assert gamma >= (w * q * bmax / (k + 1)).sum() / w.sum() * (1 - 1e-12)
    assert truncation_branch(sample_rate=0.5, others=5, max_batch_size=6) == (0.0, 0.0)


def test_truncated_poisson_rdp_is_the_branch_mixture():
    """The curve is log((1−p)e^{(α−1)A} + p·e^{(α−1)B})/(α−1), A the Poisson-sampled Gaussian (q, σ),
    B the one at (γ, σ/2), maximised over M = N−1 and N others (module docstring)."""
    q, n, bmax, sigma = 0.02, 2000, 45, 1.5
    a = np.array([1.5, 2.0, 4.0, 16.0])
    got = rdp_truncated_poisson_gaussian(sample_rate=q, dataset_size=n, max_batch_size=bmax,
                                         noise_multiplier=sigma, orders=a)
    base = rdp_sampled_gaussian(sample_rate=q, noise_multiplier=sigma, orders=a)
    refs = []
    for m in (n - 1, n):
        p, gamma = truncation_branch(sample_rate=q, others=m, max_batch_size=bmax)
        br = rdp_sampled_gaussian(sample_rate=gamma, noise_multiplier=sigma / 2, orders=a)
        refs.append(np.log((1 - p) * np.exp((a - 1) * base) + p * np.exp((a - 1) * br)) / (a - 1))
    ref = np.maximum(*refs)
    assert np.all(got >= ref * (1 - 1e-12))
    np.testing.assert_allclose(got, ref, rtol=1e-7)  # the reference's own round-off at tiny values
    assert np.all(got > base)  # here the truncation branch costs privacy


def test_truncated_poisson_without_truncation_is_poisson():
    """B_max > N: never truncated (not even on a neighbour with N + 1 records): the Poisson step."""
    step = TruncatedPoissonSampledEvent(0.1, 100, 101, GaussianEvent(2.0))
    assert flatten(SelfComposedEvent(step, 3)) == [(PoissonSampledEvent(0.1, GaussianEvent(2.0)), 3)]
    a = np.array([2.0, 8.0])
    capped = rdp_of_event(TruncatedPoissonSampledEvent(0.1, 100, 100, GaussianEvent(2.0)), a)
    poisson = rdp_sampled_gaussian(sample_rate=0.1, noise_multiplier=2.0, orders=a)
    assert np.all(capped >= poisson)  # B_max = N: the neighbour with N + 1 records can be truncated


@pytest.mark.parametrize("q,n,bmax,sigma,steps,delta", [
    (0.01, 10000, 110, 1.0, 1000, 1e-5), (0.05, 1000, 55, 2.0, 500, 1e-5), (0.01, 10000, 100, 1.0, 1000, 1e-5)])
def test_truncated_poisson_epsilon_near_dp_accounting(q, n, bmax, sigma, steps, delta):
    """Same order as dp_accounting's PLD of TruncatedSubsampledGaussianDpEvent (its second branch uses
    the looser symmetric replace-one pair; ours is an RDP bound): within a factor 1.5 either way here,
    and above the Poisson ε (the truncation branch costs privacy at these caps)."""
    import dp_accounting as dpa
    from dp_accounting.pld import pld_privacy_accountant as dpa_pld

    event = dpsgd_event(noise_multiplier=sigma, steps=steps, sampling="truncated-poisson", sample_rate=q,
                        dataset_size=n, max_batch_size=bmax)
    eps = RdpAccountant().epsilon(event, delta=delta).epsilon
    acc = dpa_pld.PLDAccountant(value_discretization_interval=1e-3)
    acc.compose(dpa.SelfComposedDpEvent(dpa.TruncatedSubsampledGaussianDpEvent(n, q, bmax, sigma), steps))
    ref = acc.get_epsilon(delta)
    assert ref / 1.5 <= eps <= ref * 1.5, (eps, ref)
    poisson = RdpAccountant().epsilon(dpsgd_event(noise_multiplier=sigma, steps=steps, sample_rate=q), delta=delta)
    assert eps > poisson.epsilon


# ----------------------------------------------------------------------------- pld, without replacement

@pytest.mark.parametrize("sigma", [0.1, 0.5, 1.0, 2.0, 8.0])
@pytest.mark.parametrize("gamma", [1e-4, 0.01, 0.3, 0.9])
def test_remove_pair_dominates_its_reverse_for_positive_epsilon(sigma, gamma):
    """The condition under which C_γ(f) = (f_γ on [0, x*], slope −1, f_γ⁻¹) (Dong, Roth, Su 2022 §4.1)
    is the symmetric pair of _sampling_pld: δ of R = ((1−γ)N(0,s²) + γN(1,s²), N(0,s²)) is at least
    δ of R reversed at every ε ≥ 0 (checked on a grid; the pair would under-report otherwise)."""
    from dpcalc.accounting._pld_mechanisms import SampledGaussianLoss

    rem, add = SampledGaussianLoss(sigma, gamma, "remove"), SampledGaussianLoss(sigma, gamma, "add")
    for eps in np.concatenate([np.linspace(0.0, 4.0, 81), np.geomspace(1e-6, 60.0, 40)]):
        assert add.delta(eps) <= rem.delta(eps) * (1 + 1e-9) + 1e-16, eps


def test_without_replacement_pair_is_the_symmetrised_remove_pair():
    """For ε ≥ 0 the pair's δ is the remove pair's at σ/2; it is symmetric (law of L under P = law of
    −L under Q); the atom at 0 is (1−γ)(1 − 2Φ̄(1/σ)) (module docstring)."""
    from scipy.special import ndtr

    from dpcalc.accounting._pld_mechanisms import SampledGaussianLoss
    from dpcalc.accounting._sampling_pld import WithoutReplacementGaussianLoss

    sigma, gamma = 1.3, 0.2
    pair, rem = WithoutReplacementGaussianLoss(sigma, gamma), SampledGaussianLoss(sigma / 2, gamma, "remove")
    for eps in (0.0, 0.1, 1.0, 3.0):
        assert pair.delta(eps) == rem.delta(eps)
    ell = np.array([-2.0, -0.3, 0.3, 2.0])
    np.testing.assert_allclose(pair.P_le(ell), pair.Q_gt(-ell), rtol=1e-12)
    atom = pair.P_le(np.array([0.0]))[0] - pair.P_le(np.array([-1e-300]))[0]
    assert atom == pytest.approx((1 - gamma) * (1 - 2 * ndtr(-1.0 / sigma)), rel=1e-9)


@pytest.mark.parametrize("b,n,sigma,steps,delta", [
    (256, 60000, 1.1, 14063, 1e-5), (100, 10000, 2.0, 1000, 1e-6), (10, 1000, 4.0, 500, 1e-5),
    (600, 6000, 1.0, 100, 1e-5)])
def test_without_replacement_pld_between_its_bounds(b, n, sigma, steps, delta):
    """pld (replace-one, symmetrised pair) is certified and
    * ≥ the two-point instance's exact ε (≥ pld's lower bound of that pair);
    * ≥ the ε of the orientation-fixed composition (the Poisson add/remove pair at σ/2, composed
      in each orientation separately: a lower bound, as every step may take either orientation);
    * ≤ the Wang, Balle, Kasiviswanathan 2019 RDP bound (rdp)."""
    event = dpsgd_event(noise_multiplier=sigma, steps=steps, sampling="without-replacement",
                        batch_size=b, dataset_size=n)
    res = PldAccountant(neighboring="replace").epsilon(event, delta=delta)
    assert res.certified and res.details["epsilon_lower"] <= res.epsilon
    two_point = PldAccountant(neighboring="replace").epsilon(
        dpsgd_event(noise_multiplier=sigma, sample_rate=b / n, steps=steps), delta=delta)
    fixed = PldAccountant().epsilon(dpsgd_event(noise_multiplier=sigma / 2, sample_rate=b / n, steps=steps),
                                    delta=delta)
    wbk = RdpAccountant(neighboring="replace").epsilon(event, delta=delta)
    assert two_point.details["epsilon_lower"] <= res.epsilon
    assert fixed.details["epsilon_lower"] <= res.epsilon
    assert res.epsilon <= wbk.epsilon


# ----------------------------------------------------------------------------- who supports what

#: (accountant, sampler, adjacency) with a proof in dpcalc (dpcalc/accounting/_sampling.py)
SUPPORTED = {("rdp", "without-replacement", "replace"), ("ma", "without-replacement", "replace"),
             ("pld", "without-replacement", "replace"), ("pld", "without-replacement", "add-remove"),
             # Birrell, Ebrahimi, Behnia, Pacheco 2024 (dpcalc/accounting/_fixed_size_rdp.py)
             ("rdp", "without-replacement", "add-remove"), ("ma", "without-replacement", "add-remove"),
             ("rdp", "with-replacement", "add-remove"), ("ma", "with-replacement", "add-remove"),
             ("pld", "with-replacement", "add-remove"),  # issue 32: the binomial mixture of Gaussians
             ("rdp", "truncated-poisson", "add-remove"), ("ma", "truncated-poisson", "add-remove"),
             # the branch-decomposition pair (dpcalc/accounting/_truncated_pld.py)
             ("pld", "truncated-poisson", "add-remove")}


def _step(sampling: str):
    return sampled_step(GaussianEvent(1.5), sampling, sample_rate=0.01, batch_size=100, dataset_size=10000,
                        max_batch_size=120)


@pytest.mark.parametrize("sampling", [s for s in SAMPLINGS if s != "poisson" and s not in EPOCH_SAMPLINGS])
@pytest.mark.parametrize("neighboring", ["add-remove", "replace"])
def test_every_accountant_refuses_a_sampler_it_has_no_proof_for(sampling, neighboring):
    """Never silently computed as Poisson: each registered accountant either has a proof for the
    (sampler, adjacency) pair (rdp and its moments view, per the table of _sampling.py) or refuses it
    with a reason naming the sampler (an accountant registered later is expected to refuse)."""
    event = SelfComposedEvent(_step(sampling), 10)
    for name in available():
        acc = get_accountant(name, neighboring=neighboring)
        expected = (name, sampling, neighboring) in SUPPORTED
        assert acc.supports(event) == expected, (name, sampling, neighboring)
        if not expected:
            with pytest.raises(UnsupportedEventError) as e:
                acc.epsilon(event, delta=1e-5)
            text = str(e.value)
            assert ("sampling" in text) or ("replacement" in text), text
        else:
            assert math.isfinite(acc.epsilon(event, delta=1e-5).epsilon)


# ----------------------------------------------------------------------------- events

def test_fixed_size_event_validation():
    g = GaussianEvent(1.0)
    with pytest.raises(ParameterError, match="batch_size"):
        FixedSizeSampledEvent(0, 10, g)
    with pytest.raises(ParameterError, match="at most dataset_size"):
        FixedSizeSampledEvent(11, 10, g)
    with pytest.raises(ParameterError, match="sampling"):
        sampled_step(g, "shuffle-ish")
    e = FixedSizeSampledEvent(25, 100, g)
    assert e.sample_rate == 0.25 and e.sampling == "without-replacement"
    assert FixedSizeSampledEvent(25, 100, g, True).sampling == "with-replacement"


def test_dpsgd_event_default_is_unchanged():
    """The Poisson history is built exactly as before the sampler option existed."""
    assert dpsgd_event(noise_multiplier=2.0, sample_rate=0.1, steps=5) == \
        SelfComposedEvent(PoissonSampledEvent(0.1, GaussianEvent(2.0)), 5)
    assert dpsgd_event(noise_multiplier=2.0, sample_rate=1.0, steps=5) == SelfComposedEvent(GaussianEvent(2.0), 5)


def test_resolve_schedule_with_a_sampler():
    s = resolve_schedule(batch_size=256, dataset_size=60000, epochs=1, sampling="without-replacement")
    assert (s.sample_rate, s.steps, s.sampling) == (256 / 60000, 235, "without-replacement")
    assert s.as_inputs()["sampling"] == "without-replacement"
    assert s.event(1.0) == SelfComposedEvent(FixedSizeSampledEvent(256, 60000, GaussianEvent(1.0)), 235)
    assert "sampling" not in resolve_schedule(batch_size=256, dataset_size=60000, epochs=1).as_inputs()
    with pytest.raises(ParameterError, match="needs --batch-size and --dataset-size"):
        resolve_schedule(sample_rate=0.01, steps=10, sampling="without-replacement")
    with pytest.raises(ParameterError, match="max-batch-size"):
        resolve_schedule(batch_size=10, dataset_size=100, steps=10, sampling="truncated-poisson")
    with pytest.raises(ParameterError, match="truncated-poisson only"):
        resolve_schedule(batch_size=10, dataset_size=100, steps=10, max_batch_size=20)
    t = resolve_schedule(batch_size=10, dataset_size=100, steps=10, sampling="truncated-poisson", max_batch_size=20)
    assert t.event(1.0) == SelfComposedEvent(TruncatedPoissonSampledEvent(0.1, 100, 20, GaussianEvent(1.0)), 10)
    assert s.small_delta_warning(1e-5) is None and "1/N" in s.small_delta_warning(1e-4)


# ----------------------------------------------------------------------------- shuffle, balls-in-bins

def _gdp_epsilon_mp(mu: float, delta: float) -> float:
    """ε of μ-GDP at δ (Dong, Roth, Su 2019 Cor 2.13: δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2)),
    solved with mpmath at 40 digits: the exact ε of the E-fold Gaussian mechanism, μ = √E/σ."""
    m = mpmath.mpf(mu)

    def gap(eps):
        return mpmath.ncdf(-eps / m + m / 2) - mpmath.e ** eps * mpmath.ncdf(-eps / m - m / 2) - mpmath.mpf(delta)

    lo, hi = mpmath.mpf(0), mpmath.mpf(200)  # δ(ε) decreases in ε: bisection to 2^-150
    for _ in range(150):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if gap(mid) > 0 else (lo, mid)
    return float(hi)


@pytest.mark.parametrize("sampling", EPOCH_SAMPLINGS)
@pytest.mark.parametrize("neighboring", ["add-remove", "replace"])
def test_epoch_samplers_are_the_e_fold_mechanism_in_every_accountant(sampling, neighboring):
    """docs/design.md §4: each record is in exactly one batch per epoch, so T = E·⌈N/B⌉ steps of
    shuffle / balls-in-bins are accounted as E runs of the Gaussian by every accountant that
    accounts the unsampled Gaussian — the same floats (add-remove here is the zero-out pair)."""
    sigma, b, n, e = 1.5, 100, 10_050, 7  # T_e = ⌈10050/100⌉ = 101
    event = dpsgd_event(noise_multiplier=sigma, steps=e * 101, sampling=sampling, batch_size=b, dataset_size=n)
    reference = SelfComposedEvent(GaussianEvent(sigma), e)
    for name in available():
        acc = get_accountant(name, neighboring=neighboring)
        assert acc.supports(event) == acc.supports(reference), name
        if acc.supports(reference):
            assert acc.epsilon(event, delta=1e-5).epsilon == acc.epsilon(reference, delta=1e-5).epsilon, name


def test_epoch_sampler_partial_epoch_is_rounded_up():
    """A partial last epoch counts as a whole one (the record is in at most one of its batches):
    E·T_e − 1 steps → E runs, E·T_e + 1 → E + 1; a lone step is one run; separate runs never share
    an epoch (2 × 1.5 epochs is 4 runs, not 3)."""
    step = sampled_step(GaussianEvent(2.0), "shuffle", batch_size=100, dataset_size=1000)  # T_e = 10
    assert isinstance(step, EpochSampledEvent) and step.steps_per_epoch == 10
    assert flatten(SelfComposedEvent(step, 29)) == [(GaussianEvent(2.0), 3)]
    assert flatten(SelfComposedEvent(step, 30)) == [(GaussianEvent(2.0), 3)]
    assert flatten(SelfComposedEvent(step, 31)) == [(GaussianEvent(2.0), 4)]
    assert flatten(step) == [(GaussianEvent(2.0), 1)]
    assert flatten(SelfComposedEvent(SelfComposedEvent(step, 15), 2)) == [(GaussianEvent(2.0), 4)]
    sched = resolve_schedule(batch_size=256, dataset_size=60_000, epochs=2.5, sampling="shuffle")
    assert sched.steps == 588  # ⌈2.5 · ⌈60000/256⌉⌉ = ⌈2.5 · 235⌉
    sched = resolve_schedule(batch_size=3, dataset_size=10, epochs=10, sampling="shuffle")
    assert sched.steps == 40 and sched.event(1.0).event.epochs(sched.steps) == 10  # not ⌈10·10/3⌉ = 34


@pytest.mark.parametrize(("sigma", "epochs"), [(1.0, 10), (0.8, 3), (4.0, 60)])
def test_epoch_sampler_upper_bound_is_the_exact_e_fold_gaussian(sigma, epochs):
    """shuffling.certified_upper_epsilon and the gdp accountant on the shuffle history equal the
    exact ε of μ-GDP with μ = √E/σ (mpmath); pld is an upper bound within its accuracy."""
    from dpcalc.accounting.shuffling import certified_upper_epsilon

    exact = _gdp_epsilon_mp(math.sqrt(epochs) / sigma, 1e-5)
    event = dpsgd_event(noise_multiplier=sigma, steps=epochs * 235, sampling="shuffle", batch_size=256,
                        dataset_size=60_000)
    assert certified_upper_epsilon(noise_multiplier=sigma, epochs=epochs, delta=1e-5) == pytest.approx(exact, rel=1e-9)
    assert get_accountant("gdp").epsilon(event, delta=1e-5).epsilon == pytest.approx(exact, rel=1e-9)
    pld = get_accountant("pld").epsilon(event, delta=1e-5).epsilon
    assert exact * (1 - 1e-9) <= pld <= exact * 1.01


def test_steps_bracket_lower_at_most_upper_and_partial_epochs():
    """steps_bracket: lower ≤ upper; a partial epoch takes the certified bound over ⌈T/T_e⌉ epochs and
    the lower bound over ⌊T/T_e⌋ whole ones (so both stay valid); under one epoch no lower bound."""
    from dpcalc.accounting import shuffling as sh

    whole = sh.steps_bracket(sampler="shuffle", noise_multiplier=1.0, batch_size=100, dataset_size=1000,
                             steps=30, delta=1e-5)
    part = sh.steps_bracket(sampler="shuffle", noise_multiplier=1.0, batch_size=100, dataset_size=1000,
                            steps=35, delta=1e-5)
    four = sh.certified_upper_epsilon(noise_multiplier=1.0, epochs=4, delta=1e-5)
    assert whole.epsilon_lower <= whole.epsilon
    assert part.epsilon == four and part.epsilon_lower == whole.epsilon_lower
    assert whole.epsilon_lower == sh.shuffle_lower_epsilon(noise_multiplier=1.0, steps_per_epoch=10, epochs=3,
                                                           delta=1e-5)
    short = sh.steps_bracket(sampler="balls-in-bins", noise_multiplier=1.0, batch_size=100, dataset_size=1000,
                             steps=5, delta=1e-5)
    assert short.epsilon_lower is None and short.epsilon == sh.certified_upper_epsilon(
        noise_multiplier=1.0, epochs=1, delta=1e-5)


@settings(max_examples=25, deadline=None)
@given(sigma=st.floats(0.5, 6.0), b=st.integers(1, 500), n=st.integers(1, 5000), steps=st.integers(1, 400))
def test_epoch_sampler_bracket_property(sigma, b, n, steps):
    """For any (σ, B ≤ N, T): the accountants' ε of T shuffle steps is the certified bound over ⌈T/T_e⌉ epochs
    (gdp: exact), non-decreasing in T, and the bracket's lower bound (⌊T/T_e⌋ whole epochs) never exceeds it."""
    from dpcalc.accounting import shuffling as sh

    b = min(b, n)
    per_epoch = -(-n // b)
    event = dpsgd_event(noise_multiplier=sigma, steps=steps, sampling="shuffle", batch_size=b, dataset_size=n)
    gdp = get_accountant("gdp")
    eps = gdp.epsilon(event, delta=1e-5).epsilon
    upper = sh.certified_upper_epsilon(noise_multiplier=sigma, epochs=-(-steps // per_epoch), delta=1e-5)
    assert eps == pytest.approx(upper, rel=1e-12)  # μ = √(E/σ²) vs √E/σ: the last bit only
    more = dpsgd_event(noise_multiplier=sigma, steps=steps + 1, sampling="shuffle", batch_size=b, dataset_size=n)
    assert gdp.epsilon(more, delta=1e-5).epsilon >= eps
    br = sh.steps_bracket(sampler="shuffle", noise_multiplier=sigma, batch_size=b, dataset_size=n, steps=steps,
                          delta=1e-5, poisson=0.0)
    assert br.epsilon == upper
    assert br.epsilon_lower is None or br.epsilon_lower <= br.epsilon


@pytest.mark.parametrize("steps", [2, 4])
@pytest.mark.parametrize("delta", [1e-5, 1e-10, 1e-19])
@pytest.mark.parametrize("sigma", [0.5, 1.0, 1.1, 3.0])
def test_pld_two_fold_gaussian_is_never_zero(sigma, steps, delta):
    """Regression (found by the shuffle fuzz rows: 2 epochs = the Gaussian composed twice): the pld
    accountant printed ε = 0 for T = 2 (an exact zero of the PMF's transform made its round-off
    estimate NaN, and a NaN slack read as δ ≤ target). Its ε must be ≥ the exact E-fold Gaussian ε
    (Dong, Roth, Su 2019 Cor 2.13, mpmath) and within its accuracy of it; at δ = 1e-19, below pld's
    round-off floor, no finite ε (never a small one)."""
    exact = _gdp_epsilon_mp(math.sqrt(steps) / sigma, delta)
    res = get_accountant("pld").epsilon(SelfComposedEvent(GaussianEvent(sigma), steps), delta=delta)
    if delta < 1e-15 and (res.epsilon is None or not math.isfinite(res.epsilon)):
        return  # honest: the round-off allowance alone reaches δ
    assert res.epsilon is not None and exact * (1 - 1e-9) <= res.epsilon <= exact * 1.02, (res.epsilon, exact)
    assert math.isfinite(res.details["slack"])


def test_a_nan_allowance_never_reads_as_no_error():
    """Defence in depth behind the T = 2 fix: a DiscretePLD whose slack or δ comes out NaN gives
    ε = ∞ and δ = 1 (upper), never ε = 0 (every comparison with NaN is false)."""
    import math

    import numpy as np

    from dpcalc.accounting._pld_compose import delta_for_epsilon, epsilon_for_delta
    from dpcalc.accounting._pld_grid import DiscretePLD

    pld = DiscretePLD(0.01, 0, np.array([0.5, 0.5]), 0.0, math.nan, True)
    assert pld.slack == math.inf
    assert epsilon_for_delta(pld, 1e-5) == math.inf
    assert delta_for_epsilon(pld, 0.0) == 1.0
