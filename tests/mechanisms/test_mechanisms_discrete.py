"""Exact samplers of Canonne, Kamath, Steinke 2020 (Alg. 1–3), the discrete Gaussian's δ
(CKS20 Thm 7) and the safe release. Samplers are seeded here (tests only); release uses the
OS CSPRNG by default."""

from __future__ import annotations

import math
import random
import secrets
from collections import Counter
from fractions import Fraction

import mpmath as mp
import numpy as np
import pytest

from dpcalc.errors import ParameterError
from dpcalc.mechanisms import discrete
from dpcalc.mechanisms.discrete import (
    bernoulli_exp,
    discrete_gaussian_delta,
    discrete_gaussian_sigma,
    release_gaussian,
    release_laplace,
    sample_discrete_gaussian,
    sample_discrete_laplace,
)
from dpcalc.mechanisms.gaussian import analytic_noise_std

stats = pytest.importorskip("scipy.stats")

N = 20_000


def chi2_pvalue(samples, pmf, cut):
    """Chi-square goodness of fit of integer samples against pmf on |y| ≤ cut (tails pooled)."""
    counts = Counter(samples)
    ys = range(-cut, cut + 1)
    probs = np.array([pmf(y) for y in ys])
    obs = np.array([counts.get(y, 0) for y in ys], dtype=float)
    probs = np.append(probs, 1 - probs.sum())
    obs = np.append(obs, len(samples) - obs.sum())
    return stats.chisquare(obs, len(samples) * probs).pvalue


def dlap_pmf(t):
    a = math.exp(-1 / t)
    return lambda y: (1 - a) / (1 + a) * a ** abs(y)


def dgauss_pmf(sigma2):
    z = sum(math.exp(-y * y / (2 * sigma2)) for y in range(-2000, 2001))
    return lambda y: math.exp(-y * y / (2 * sigma2)) / z


@pytest.mark.parametrize("gamma", [Fraction(0), Fraction(1, 3), Fraction(1), Fraction(5, 2)])
def test_bernoulli_exp(gamma):
    rng = random.Random(12345)
    hits = sum(bernoulli_exp(gamma, rng) for _ in range(N))
    assert stats.binomtest(hits, N, math.exp(-gamma)).pvalue > 1e-3


@pytest.mark.parametrize("scale", [Fraction(1), Fraction(5, 2), Fraction(10)])
def test_discrete_laplace_distribution(scale):
    rng = random.Random(2020)
    samples = [sample_discrete_laplace(scale, rng) for _ in range(N)]
    cut = int(4 * scale) + 2
    assert chi2_pvalue(samples, dlap_pmf(float(scale)), cut) > 1e-3
    # the test has power: the same samples reject a 15% larger scale
    assert chi2_pvalue(samples, dlap_pmf(1.15 * float(scale)), cut) < 1e-3


@pytest.mark.parametrize("sigma2", [Fraction(1), Fraction(9, 4), Fraction(25)])
def test_discrete_gaussian_distribution(sigma2):
    rng = random.Random(7)
    samples = [sample_discrete_gaussian(sigma2, rng) for _ in range(N)]
    cut = int(3 * math.sqrt(sigma2)) + 1
    assert chi2_pvalue(samples, dgauss_pmf(float(sigma2)), cut) > 1e-3
    assert chi2_pvalue(samples, dgauss_pmf(1.3 * float(sigma2)), cut) < 1e-3


def brute_delta(eps, sigma, shift_max):
    """Σ_y max(0, p(y) − e^ε p(y − d)), max over shifts, mpmath (the definition of δ)."""
    with mp.workdps(40):
        w = lambda y: mp.e ** (-mp.mpf(y) ** 2 / (2 * mp.mpf(sigma) ** 2))  # noqa: E731
        z = mp.nsum(w, [-mp.inf, mp.inf])
        span = int(40 * sigma) + 50
        best = mp.mpf(0)
        for d in range(1, shift_max + 1):
            tot = mp.fsum(max(mp.mpf(0), w(y) - mp.e**eps * w(y - d)) for y in range(-span, span))
            best = max(best, tot / z)
        return float(best)


@pytest.mark.parametrize("eps, sigma, shift", [(1, 3.73, 1), (0.5, 5.0, 3), (2, 2.0, 1), (1, 0.7, 2)])
def test_discrete_gaussian_delta_matches_definition(eps, sigma, shift):
    ours = discrete_gaussian_delta(epsilon=eps, sigma=sigma, sensitivity=shift)
    ref = brute_delta(eps, sigma, shift)
    assert ours >= ref  # certified: never below the true δ
    assert ours == pytest.approx(ref, rel=1e-9)


@pytest.mark.parametrize("eps, delta, shift", [(1, 1e-5, 1), (0.5, 1e-6, 3), (2, 1e-8, 1), (0.2, 1e-10, 5)])
def test_discrete_gaussian_sigma_is_verified_and_close(eps, delta, shift):
    sigma = discrete_gaussian_sigma(epsilon=eps, delta=delta, sensitivity=shift)
    assert discrete_gaussian_delta(epsilon=eps, sigma=sigma, sensitivity=shift) <= delta
    continuous = analytic_noise_std(epsilon=eps, delta=delta, sensitivity=shift)
    assert continuous <= sigma <= continuous * 1.01  # CKS20 §4: the curves are close


def test_release_laplace_integer_and_granularity():
    res = release_laplace(value=1234, epsilon=0.5, sensitivity=1, rng=random.Random(1))
    assert res["scale"] == 2.0 and res["sensitivity_units"] == 1 and res["delta"] == 0.0
    assert float(res["released"]).is_integer()
    res = release_laplace(value="12.345", epsilon="0.5", sensitivity="1", granularity="0.01",
                          rng=random.Random(1))
    assert res.details["rounded_value"] == "12.35"  # half up
    assert res["sensitivity_units"] == 100 and res["scale"] == pytest.approx(2.0)
    assert Fraction(res.details["released_exact"]) % Fraction(1, 100) == 0
    assert "pure DP" in res.details["guarantee"]


def test_release_sensitivity_rounded_up():
    # rounding to multiples of g can bring values one step further apart: Δ' = ⌈Δ/g⌉
    res = release_laplace(value="3.3", epsilon=1, sensitivity="0.25", granularity="0.1",
                          rng=random.Random(0))
    assert res["sensitivity_units"] == 3


def test_release_gaussian():
    res = release_gaussian(value=100, epsilon=1.0, delta=1e-5, sensitivity=1, rng=random.Random(3))
    assert res["delta_discrete"] <= 1e-5
    assert res["rho"] == pytest.approx(1 / (2 * res["noise_std"] ** 2))  # CKS20 Thm 4
    assert "zCDP" in res.details["guarantee"]
    assert float(res["released"]).is_integer()


def test_release_uses_os_csprng_by_default(monkeypatch):
    calls = []
    real = discrete._system_rng

    def spy():
        rng = real()
        calls.append(rng)
        return rng

    monkeypatch.setattr(discrete, "_system_rng", spy)
    release_laplace(value=5, epsilon=1)
    assert calls and all(isinstance(r, secrets.SystemRandom) for r in calls)


@pytest.mark.parametrize("kw, match", [
    ({"value": "abc", "epsilon": 1}, "release"),
    ({"value": "12.5", "epsilon": 1}, "release"),
    ({"value": 3, "epsilon": 0}, "epsilon"),
    ({"value": 3, "epsilon": 1, "sensitivity": 0}, "sensitivity"),
    ({"value": 3, "epsilon": 1, "granularity": "0"}, "granularity"),
    ({"value": 3, "epsilon": 1, "granularity": "x"}, "granularity"),
])
def test_release_bad_input(kw, match):
    with pytest.raises(ParameterError, match=match):
        release_laplace(**kw)


def test_gaussian_release_refuses_too_fine_granularity():
    with pytest.raises(ParameterError, match="granularity"):
        release_gaussian(value=1, epsilon=0.01, delta=1e-10, sensitivity=100)
    with pytest.raises(ParameterError, match="sensitivity"):
        release_gaussian(value=1, epsilon=1, delta=1e-5, sensitivity=1, granularity="0.001")


def test_sampler_bad_parameters():
    with pytest.raises(ParameterError):
        sample_discrete_laplace(Fraction(-1))
    with pytest.raises(ParameterError):
        sample_discrete_gaussian(0.5)  # floats are refused: the parameter must be exact
    with pytest.raises(ParameterError):
        bernoulli_exp(Fraction(-1, 2))
