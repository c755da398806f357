"""Privacy audit of the mechanism calculators against mpmath / brute-force references.

* Analytic Gaussian (Balle & Wang 2018 Thm 8): exact δ(ε) of N(0, σ²) with sensitivity Δ is
  the μ-GDP curve, μ = Δ/σ — evaluated at 60 digits; the returned σ must give δ ≤ target.
  Regression: before the audit the float evaluation cancelled for small μ (up to 7e-11
  relative under-estimate of δ, beyond the 1e-12 safety margin): σ and ε were returned with
  exact δ up to 1.000000000005·target.
* Discrete Gaussian (Canonne, Kamath, Steinke 2020): brute-force hockey-stick
  Σ_x (p(x) − e^ε p(x − d))₊ with p ∝ e^{−x²/(2σ²)}, mpmath, max over shifts 1 ≤ d ≤ Δ.
* Laplace (Dwork & Roth 2014 Thm 3.6, 3.8): scale Δ/ε; ℓ∞ error of k coordinates.
* Amplification by Poisson subsampling (Balle, Barthe, Gaboardi 2018 Thm 8), group privacy
  (Vadhan 2017 Lemma 2.2) and zCDP → (ε, δ) (CKS 2020 Prop 12) are checked against the
  exact curves of the Gaussian mechanism (sampled: closed form; group of k: μ = k/σ).
"""

from __future__ import annotations

import math

import mpmath
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_audit_refs import gdp_delta_mp, sg_delta1

from dpcalc.mechanisms.conversions import (
    group_privacy,
    poisson_subsampling,
    pure_to_zcdp,
    zcdp_to_epsilon,
)
from dpcalc.mechanisms.discrete import discrete_gaussian_delta, discrete_gaussian_sigma
from dpcalc.mechanisms.gaussian import (
    analytic_noise_std,
    classical_noise_std,
    gaussian_epsilon,
    gaussian_log_delta,
)
from dpcalc.mechanisms.laplace import laplace_accuracy, laplace_scale

log_uniform = lambda lo, hi: st.floats(math.log(lo), math.log(hi)).map(math.exp)  # noqa: E731


def exact_delta(mu, eps):
    with mpmath.workdps(60):
        return gdp_delta_mp(mpmath.mpf(mu), mpmath.mpf(eps))


def exact_delta_sigma(sens, sigma, eps):
    with mpmath.workdps(60):
        return gdp_delta_mp(mpmath.mpf(sens) / mpmath.mpf(sigma), mpmath.mpf(eps))


# ----------------------------------------------------------------------------- analytic Gaussian
REGRESSION_SIGMA = [  # (ε, δ, Δ) whose σ had exact δ > target before the audit fix
    (0.006086078078401375, 2.5189150024173173e-13, 0.08930752475042424),
    (0.0015704176374010301, 1.9167170353773484e-10, 60.556839194221276),
    (0.001289668331045499, 1.673758649073893e-13, 89.34162254778175),
    (0.0010160855341815123, 6.557942256301579e-08, 0.08693948326616216),
]
REGRESSION_EPS = [  # (δ, μ) whose ε had exact δ(ε) > δ before the fix
    (1.7314911604573721e-09, 0.000260066725555286),
    (4.545881031075852e-10, 0.00013469884505242356),
    (8.096137470651905e-15, 0.0002461119473113044),
]


@pytest.mark.parametrize("eps,delta,sens", REGRESSION_SIGMA)
def test_analytic_sigma_regressions(eps, delta, sens):
    sigma = analytic_noise_std(epsilon=eps, delta=delta, sensitivity=sens)
    assert exact_delta_sigma(sens, sigma, eps) <= delta


@pytest.mark.parametrize("delta,mu", REGRESSION_EPS)
def test_gaussian_epsilon_regressions(delta, mu):
    assert exact_delta(mu, gaussian_epsilon(delta=delta, mu=mu)) <= delta


@settings(max_examples=200, deadline=None, derandomize=True)
@given(eps=log_uniform(1e-3, 100), delta=log_uniform(1e-15, 0.1), sens=log_uniform(1e-2, 1e2))
def test_analytic_sigma_meets_delta_exactly(eps, delta, sens):
    sigma = analytic_noise_std(epsilon=eps, delta=delta, sensitivity=sens)
    assert exact_delta_sigma(sens, sigma, eps) <= delta
    # and it is tight (not wildly conservative)
    assert exact_delta_sigma(sens, sigma * (1 - 1e-6), eps) > delta * (1 - 1e-3) or sigma * 1e-6 < 1e-300


@settings(max_examples=200, deadline=None, derandomize=True)
@given(mu=log_uniform(1e-6, 300), eps=st.one_of(st.just(0.0), log_uniform(1e-5, 1e3)))
def test_gaussian_log_delta_never_below_exact(mu, eps):
    with mpmath.workdps(60):
        ex = gdp_delta_mp(mu, eps)
        if ex <= 0:
            return
        lex = float(mpmath.log(ex))
    got = gaussian_log_delta(epsilon=eps, mu=mu)
    assert got >= lex - 1e-15 * max(1.0, abs(lex))
    if lex > -700:
        assert got <= lex + 1e-6  # still accurate


@settings(max_examples=100, deadline=None, derandomize=True)
@given(delta=log_uniform(1e-15, 0.1), mu=log_uniform(1e-4, 100))
def test_gaussian_epsilon_meets_delta(delta, mu):
    assert exact_delta(mu, gaussian_epsilon(delta=delta, mu=mu)) <= delta


@pytest.mark.parametrize("eps,delta", [(0.5, 1e-5), (0.9, 1e-10), (0.01, 1e-3)])
def test_classical_sigma_is_valid(eps, delta):
    """Dwork–Roth Thm A.1 (ε < 1) must also satisfy the exact condition."""
    s = classical_noise_std(epsilon=eps, delta=delta)
    assert exact_delta(1 / s, eps) <= delta
    assert s >= analytic_noise_std(epsilon=eps, delta=delta)


def test_published_analytic_values():
    # docs/references.md: Balle & Wang 2018 (dp_accounting and autodp agree)
    assert analytic_noise_std(epsilon=1, delta=1e-5) == pytest.approx(3.730632, abs=1e-6)
    assert analytic_noise_std(epsilon=1, delta=1e-6) == pytest.approx(4.224679, abs=1e-6)


# ----------------------------------------------------------------------------- discrete Gaussian
def brute_discrete_gaussian_delta(eps, sigma, sens):
    """Σ_x (p(x) − e^ε p(x − d))₊ for the discrete Gaussian, max over shifts d ≤ Δ (mpmath)."""
    with mpmath.workdps(40):
        s2 = mpmath.mpf(sigma) ** 2
        n = int(40 * sigma + 10 * sens + 50)
        w = {x: mpmath.exp(-mpmath.mpf(x) ** 2 / (2 * s2)) for x in range(-n - sens, n + sens + 1)}
        z = sum(w[x] for x in range(-n, n + 1))
        ee = mpmath.exp(eps)
        best = mpmath.mpf(0)
        for d in range(1, sens + 1):
            tot = sum(max(w[x] - ee * w[x - d], 0) for x in range(-n, n + 1))
            best = max(best, tot / z)
        return best


@pytest.mark.parametrize("eps,sigma,sens", [(1.0, 3.0, 1), (0.5, 10.0, 1), (2.0, 1.0, 1), (1.0, 6.0, 3),
                                            (0.1, 50.0, 2), (3.0, 0.6, 1)])
def test_discrete_gaussian_delta_brute_force(eps, sigma, sens):
    got = discrete_gaussian_delta(epsilon=eps, sigma=sigma, sensitivity=sens)
    ref = brute_discrete_gaussian_delta(eps, sigma, sens)
    assert got >= ref * (1 - 1e-12)
    assert got <= ref * (1 + 1e-8) + 1e-300


@pytest.mark.parametrize("eps,delta,sens", [(1.0, 1e-5, 1), (0.5, 1e-6, 2), (2.0, 1e-3, 1)])
def test_discrete_gaussian_sigma_brute_force(eps, delta, sens):
    sigma = discrete_gaussian_sigma(epsilon=eps, delta=delta, sensitivity=sens)
    assert brute_discrete_gaussian_delta(eps, sigma, sens) <= delta


# ----------------------------------------------------------------------------- Laplace
@pytest.mark.parametrize("eps,sens", [(1.0, 1.0), (0.1, 3.0), (5.0, 0.5)])
def test_laplace_scale_is_pure_dp(eps, sens):
    b = laplace_scale(epsilon=eps, sensitivity=sens)
    # the Laplace loss is bounded by Δ/b: pure ε-DP exactly when Δ/b ≤ ε
    assert sens / b <= eps * (1 + 1e-15)


@pytest.mark.parametrize("b,beta,k", [(1.0, 0.05, 10_000), (2.5, 0.01, 1), (0.3, 0.2, 7)])
def test_laplace_accuracy(b, beta, k):
    acc = laplace_accuracy(scale=b, beta=beta, dims=k)
    with mpmath.workdps(30):
        fail = lambda a: 1 - (1 - mpmath.exp(-mpmath.mpf(a) / b)) ** k  # Pr[‖Y‖∞ ≥ a]  # noqa: E731
        assert fail(acc["accuracy_exact"]) == pytest.approx(beta, rel=1e-9)
        assert fail(acc["accuracy"]) <= beta * (1 + 1e-12)


def test_laplace_accuracy_published():
    # Dwork & Roth Thm 3.8 census example: k = 10,000, ε = 1, β = 0.05 → ln(10000/0.05) ≈ 12.2
    assert laplace_accuracy(scale=1.0, beta=0.05, dims=10_000)["accuracy"] == pytest.approx(12.206, abs=1e-3)


# ----------------------------------------------------------------------------- conversions
@pytest.mark.parametrize("sigma,eps0,q", [(1.0, 2.0, 0.01), (2.0, 0.5, 0.3), (0.8, 4.0, 0.001), (5.0, 0.2, 0.9)])
def test_amplification_by_subsampling_dominates_exact_sampled_gaussian(sigma, eps0, q):
    """(ε0, δ0) of the Gaussian ⇒ BBG18 (ln(1+q(e^ε0−1)), qδ0) must hold for the exact sampled curve."""
    d0 = float(exact_delta(1 / sigma, eps0))
    r = poisson_subsampling(epsilon=eps0, delta=d0, sample_rate=q).values
    assert sg_delta1(q, sigma, r["epsilon"]) <= r["delta"] * (1 + 1e-9)


@pytest.mark.parametrize("eps,q", [(1.0, 0.1), (10.0, 0.5), (800.0, 0.01), (1e-8, 0.3)])
def test_amplification_pure_dp_is_randomized_response_exact(eps, q):
    """Sampled randomized response attains ln(1 + q(e^ε − 1)) exactly (the bound is tight)."""
    got = poisson_subsampling(epsilon=eps, sample_rate=q).values["epsilon"]
    with mpmath.workdps(50):
        ref = float(mpmath.log(1 + q * (mpmath.exp(eps) - 1)))
    assert got >= ref * (1 - 1e-14)


@pytest.mark.parametrize("sigma,eps,k", [(3.0, 1.0, 2), (10.0, 0.3, 5), (1.0, 2.0, 3)])
def test_group_privacy_dominates_exact_group_gaussian(sigma, eps, k):
    """A group of k records moves the query by k: the exact curve has μ = k/σ."""
    d = float(exact_delta(1 / sigma, eps))
    g = group_privacy(epsilon=eps, delta=d, group_size=k).values
    assert float(exact_delta(k / sigma, g["epsilon"])) <= g["delta"] * (1 + 1e-12)


def test_group_privacy_pure_formula():
    g = group_privacy(epsilon=0.5, delta=1e-6, group_size=4).values
    assert g["epsilon"] == 2.0
    assert g["delta"] == pytest.approx(1e-6 * (1 + math.exp(0.5) + math.exp(1.0) + math.exp(1.5)), rel=1e-12)


@pytest.mark.parametrize("sigma,delta", [(1.0, 1e-5), (5.0, 1e-10), (0.5, 1e-3), (50.0, 1e-6)])
def test_zcdp_conversion_dominates_exact_gaussian(sigma, delta):
    eps = zcdp_to_epsilon(rho=1 / (2 * sigma ** 2), delta=delta).values["epsilon"]
    assert float(exact_delta(1 / sigma, eps)) <= delta


@pytest.mark.parametrize("eps", [0.1, 1.0, 3.0])
def test_pure_to_zcdp_dominates_randomized_response(eps):
    """ε-DP ⇒ (ε²/2)-zCDP: check D_α of randomized response (the worst ε-DP pair) ≤ αρ."""
    rho = pure_to_zcdp(epsilon=eps).values["rho"]
    with mpmath.workdps(40):
        p = mpmath.exp(eps) / (1 + mpmath.exp(eps))
        for a in (1.5, 2, 5, 20):
            d_alpha = mpmath.log(p ** a * (1 - p) ** (1 - a) + (1 - p) ** a * p ** (1 - a)) / (a - 1)
            assert d_alpha <= a * rho * (1 + 1e-15)


@pytest.mark.parametrize("eps,delta", [(0.7, 1e-6), (1.0, 1e-5), (0.3, 1e-9)])
def test_cli_gaussian_table_sigma_not_below_certified(run_cli, eps, delta):
    """The σ printed in the table is ≥ the certified σ (rounded up), so copying it is safe."""
    import re
    args = ("gaussian", "--eps", str(eps), "--delta", str(delta))
    js = {r["method"]: r["noise_std"] for r in run_cli(*args, "--json").json()["results"]}
    for line in run_cli(*args).stdout.splitlines():
        cells = [c.strip() for c in line.split("│")]
        if len(cells) > 2 and cells[1] in js and js[cells[1]] is not None:
            shown = float(re.findall(r"[0-9.]+(?:e[-+]?\d+)?", cells[2])[0])
            assert shown >= js[cells[1]]
            assert exact_delta_sigma(1.0, shown, eps) <= delta
