"""DP-ERM (dpcalc/mechanisms/erm.py): the closed forms of Chaudhuri, Monteleoni, Sarwate 2011
(CMS11) and Kifer, Smith, Thakurta 2012 (KST12), the exact-in-law noise sampler (KS tests
against the Gamma law, seeded), both branches of objective perturbation, the ε = ∞ fit, and
the excess-risk bounds (closed forms and a seeded Monte Carlo check)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcalc.errors import ParameterError
from dpcalc.mechanisms import erm

REL = 1e-12


# ---- closed forms ----------------------------------------------------------------------------

def test_output_sensitivity_and_rate_cms11():
    # CMS11 Cor. 8: ‖w*(D) − w*(D')‖ ≤ 2/(nΛ) for |ℓ'| ≤ 1; Alg. 1: β = nΛε/2
    assert erm.output_sensitivity(n=100, lam=0.1) == pytest.approx(0.2, rel=REL)
    assert erm.output_sensitivity(n=100, lam=0.1) >= 0.2
    assert erm.output_sensitivity(n=50, lam=0.01, lipschitz=3.0) == pytest.approx(2 * 3 / (50 * 0.01), rel=REL)
    rate = erm.output_rate(epsilon=0.5, n=1000, lam=0.01)
    assert rate == pytest.approx(1000 * 0.01 * 0.5 / 2, rel=REL) and rate <= 2.5
    assert erm.output_rate(epsilon=math.inf, n=10, lam=1.0) == math.inf


def test_objective_epsilon_prime_main_branch_cms11():
    # CMS11 Alg. 2: ε' = ε − log(1 + 2c/(nΛ) + c²/(n²Λ²)) when > 0, Δ = 0
    n, lam, c, eps = 1000, 0.01, 0.25, 1.0
    want = eps - math.log(1 + 2 * c / (n * lam) + c**2 / (n * lam) ** 2)
    got, extra, branch = erm.objective_epsilon_prime(epsilon=eps, n=n, lam=lam, smoothness=c)
    assert branch == "main" and extra == 0.0
    assert got == pytest.approx(want, rel=REL) and got <= want  # rounded towards more noise


def test_objective_epsilon_prime_fallback_branch_cms11():
    # n = 100, Λ = 0.01, c = 1/4: 2 ln(1 + 0.25) = 0.446 > ε = 0.1, so ε' ≤ 0: the fallback
    # Δ = c/(n(e^{ε/4} − 1)) − Λ, ε' = ε/2 (CMS11 Alg. 2)
    n, lam, c, eps = 100, 0.01, 0.25, 0.1
    assert eps - math.log(1 + 2 * c / (n * lam) + c**2 / (n * lam) ** 2) <= 0
    got, extra, branch = erm.objective_epsilon_prime(epsilon=eps, n=n, lam=lam, smoothness=c)
    assert branch == "fallback"
    assert got == pytest.approx(eps / 2, rel=REL) and got <= eps / 2
    want_extra = c / (n * math.expm1(eps / 4)) - lam
    assert extra == pytest.approx(want_extra, rel=1e-12) and extra >= want_extra
    # with Λ + Δ the Jacobian term is exactly ε/2: the two halves add up to ε
    assert 2 * math.log1p(c / (n * (lam + extra))) <= eps / 2


@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 10**9), lam=st.floats(1e-9, 1e3), c=st.floats(0, 10), eps=st.floats(1e-6, 50))
def test_objective_budget_adds_up_to_at_most_epsilon(n, lam, c, eps):
    """Both branches: Jacobian term 2 ln(1 + c/(n(λ + Δ))) (CMS11 Thm 9) + ε' ≤ ε, ε' > 0."""
    e1, extra, branch = erm.objective_epsilon_prime(epsilon=eps, n=n, lam=lam, smoothness=c)
    assert e1 > 0 and extra >= 0
    assert (extra == 0) == (branch == "main")
    assert 2 * math.log1p(c / (n * (lam + extra))) + e1 <= eps * (1 + 1e-12)


@settings(max_examples=200, deadline=None)
@given(eps=st.floats(1e-4, 100), delta=st.floats(1e-300, 0.5), L=st.floats(1e-3, 1e3))
def test_gaussian_objective_sigma_meets_its_bound(eps, delta, L):
    """σ = L(t + √(t² + 2ε'))/ε' solves 2Lt/σ + 2L²/σ² = ε' (docs/design.md §4), t = √(2 ln(1/δ))."""
    s = erm.gaussian_objective_noise_std(epsilon_noise=eps, delta=delta, lipschitz=L)
    t = math.sqrt(2 * math.log(1 / delta))
    assert 2 * L * t / s + 2 * L * L / (s * s) <= eps * (1 + 1e-12)
    assert 2 * L * t / s + 2 * L * L / (s * s) >= eps * (1 - 1e-9)  # and not wastefully large


def test_kst12_published_sigma_and_ours_is_larger():
    # KST12 Alg. 1 line 5: σ² = ζ²(8 ln(2/δ) + 4ε)/ε²; at ε = 1, δ = 1e-5, ζ = 1: √(8 ln 2e5 + 4)
    assert erm.kst12_published_noise_std(epsilon=1, delta=1e-5) == pytest.approx(
        math.sqrt(8 * math.log(2e5) + 4), rel=REL)
    # at KST12's own split (noise share ε/2) the σ dpcalc can prove is larger, ≈ 2× for small δ
    for eps in (0.1, 1.0, 10.0):
        for delta in (1e-3, 1e-5, 1e-10):
            ours = erm.gaussian_objective_noise_std(epsilon_noise=eps / 2, delta=delta)
            kst = erm.kst12_published_noise_std(epsilon=eps, delta=delta)
            assert 1.3 * kst < ours < 2.5 * kst


def test_chi_square_tail_used_by_the_gaussian_bound():
    """‖Pb‖/σ ≤ √(2 ln(1/δ)) except w.p. ≤ δ for a projection of rank ≤ 2 (χ²₂ tail e^{−t²/2}
    exactly, χ²₁ tail 2Φ(−t) ≤ e^{−t²/2}): the step the σ above rests on (seeded check)."""
    from scipy import stats

    for delta in (0.2, 0.05, 0.01):
        t = math.sqrt(2 * math.log(1 / delta))
        assert stats.chi2.sf(t * t, 2) == pytest.approx(delta, rel=1e-12)
        assert stats.chi2.sf(t * t, 1) <= delta
        rng = np.random.default_rng(3)
        b = rng.standard_normal((200_000, 2))
        assert np.mean(np.linalg.norm(b, axis=1) > t) == pytest.approx(delta, rel=0.05)


def test_output_gaussian_uses_the_analytic_gaussian():
    from dpcalc.mechanisms.gaussian import analytic_noise_std

    r = erm.erm_noise(method="output", epsilon=1.0, delta=1e-5, n=1000, dims=10, lam=0.01)
    assert r["noise"] == "gaussian"
    assert r["noise_std"] == analytic_noise_std(epsilon=1.0, delta=1e-5, sensitivity=r["sensitivity"])


def test_erm_noise_moments_and_excess_risk_closed_forms():
    n, d, lam, c, L, eps = 500, 7, 0.05, 0.25, 1.0, 2.0
    out = erm.erm_noise(method="output", epsilon=eps, n=n, dims=d, lam=lam)
    beta = n * lam * eps / (2 * L)
    assert out["rate"] == pytest.approx(beta, rel=REL)
    # ‖b‖ ~ Gamma(d, 1/β): E‖b‖ = d/β, E‖b‖² = d(d + 1)/β²; smoothness bound ((c + λ)/2)·E‖b‖²
    assert out["expected_noise_norm"] == pytest.approx(d / beta, rel=1e-12)
    assert out["excess_risk_bound"] == pytest.approx((c + lam) / 2 * d * (d + 1) / beta**2, rel=1e-12)
    from scipy import stats

    assert out["noise_norm_quantile"] == pytest.approx(stats.gamma.ppf(0.95, d, scale=1 / beta), rel=1e-9)
    obj = erm.erm_noise(method="objective", epsilon=eps, n=n, dims=d, lam=lam)
    e1 = eps - 2 * math.log1p(c / (n * lam))
    b1 = e1 / (2 * L)
    assert obj["rate"] == pytest.approx(b1, rel=1e-12)
    assert obj["excess_risk_bound"] == pytest.approx(d * (d + 1) / b1**2 / (2 * n * n * lam), rel=1e-12)
    g = erm.erm_noise(method="objective", epsilon=eps, delta=1e-6, n=n, dims=d, lam=lam)
    s = g["noise_std"]
    assert g["expected_noise_norm"] == pytest.approx(s * math.sqrt(2) * math.gamma((d + 1) / 2) / math.gamma(d / 2),
                                                     rel=1e-12)
    assert g["noise_norm_quantile"] == pytest.approx(stats.chi.ppf(0.95, d) * s, rel=1e-9)


def test_calculator_bad_input():
    with pytest.raises(ParameterError):
        erm.erm_noise(method="output", epsilon=1, n=10, dims=3, lam=0)
    with pytest.raises(ParameterError):
        erm.erm_noise(method="objective", epsilon=1, n=10, dims=3, lam=-1)
    with pytest.raises(ParameterError):
        erm.erm_noise(method="nope", epsilon=1, n=10, dims=3, lam=1)
    with pytest.raises(ParameterError):
        erm.objective_epsilon_prime(epsilon=0, n=10, lam=1)


# ---- sampler: exact in law -----------------------------------------------------------------------

@pytest.mark.parametrize("dims", [1, 3, 20])
def test_norm_noise_radius_is_gamma_ks(dims):
    from scipy import stats

    rate = 2.5
    rng = np.random.default_rng(12345 + dims)
    norms = np.array([np.linalg.norm(erm.sample_norm_noise(dims, rate, rng)) for _ in range(3000)])
    assert stats.kstest(norms, stats.gamma(dims, scale=1 / rate).cdf).pvalue > 1e-3
    # a constant wrong by 20 % is rejected
    assert stats.kstest(norms, stats.gamma(dims, scale=1.2 / rate).cdf).pvalue < 1e-6
    assert stats.kstest(norms, stats.gamma(dims * 1.2, scale=1 / rate).cdf).pvalue < 1e-6


def test_norm_noise_direction_is_uniform_and_system_random_path():
    """Direction: the squared first coordinate of a uniform unit vector in ℝᵈ is Beta(½, (d−1)/2).
    The random.Random path (the OS CSPRNG's API; seeded here) follows the same Gamma law."""
    from scipy import stats

    d, rate = 5, 1.0
    rng = np.random.default_rng(7)
    u = np.array([erm.sample_norm_noise(d, rate, rng) for _ in range(3000)])
    cos2 = (u[:, 0] / np.linalg.norm(u, axis=1)) ** 2
    assert stats.kstest(cos2, stats.beta(0.5, (d - 1) / 2).cdf).pvalue > 1e-3
    r = random.Random(11)
    norms = [np.linalg.norm(erm.sample_norm_noise(d, rate, r)) for _ in range(2000)]
    assert stats.kstest(norms, stats.gamma(d, scale=1 / rate).cdf).pvalue > 1e-3
    assert erm.sample_norm_noise(3, rate).shape == (3,)  # the OS CSPRNG default runs


# ---- the fit ---------------------------------------------------------------------------------------

def _toy(n=60, k=2, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, k))
    y = np.where(x @ np.arange(1, k + 1) + 0.3 * rng.standard_normal(n) > 0, 1, -1)
    z, _ = erm.scale_rows(x)
    return z, y


def test_fitted_output_noise_norm_matches_gamma_law_ks():
    """The private model's noise w_priv − w* (output perturbation, seeded) has ‖·‖ ~ Gamma(d, 1/β)."""
    from scipy import stats

    z, y = _toy()
    w0, _ = erm.fit_logistic(z, y, reg=0.1)
    rng = np.random.default_rng(2024)
    norms, rates = [], set()
    for _ in range(400):
        f = erm.private_logistic_regression(z, y, method="output", epsilon=1.0, lam=0.1, rng=rng)
        norms.append(np.linalg.norm(f.weights - w0))
        rates.add(f.calibration["rate"])
    (rate,) = rates
    d = z.shape[1]
    # β = ε/Δ₂ with Δ₂ = 2/(nλ) + 2g/λ (the solver's tolerance g)
    assert rate == pytest.approx(1.0 / (2 / (60 * 0.1) + 2 * erm.GRADIENT_TOL / 0.1), rel=1e-12)
    assert stats.kstest(norms, stats.gamma(d, scale=1 / rate).cdf).pvalue > 1e-3
    assert stats.kstest(norms, stats.gamma(d, scale=1.2 / rate).cdf).pvalue < 1e-6


def test_objective_fit_noise_norm_matches_gamma_law_ks():
    """Objective perturbation: the drawn b has ‖b‖ ~ Gamma(d, 2/ε') (seeded, both branches)."""
    from scipy import stats

    z, y = _toy(n=40)
    d = z.shape[1]
    for eps, branch in ((2.0, "main"), (0.05, "fallback")):
        rng = np.random.default_rng(5)
        fits = [erm.private_logistic_regression(z, y, method="objective", epsilon=eps, lam=0.1, rng=rng)
                for _ in range(300)]
        assert {f.calibration["branch"] for f in fits} == {branch}
        rate = fits[0].calibration["rate"]
        assert rate == pytest.approx(fits[0].calibration["epsilon_noise"] / 2, rel=1e-15)
        assert stats.kstest([f.noise_norm for f in fits], stats.gamma(d, scale=1 / rate).cdf).pvalue > 1e-3
        assert all(f.gradient_norm <= erm.GRADIENT_TOL for f in fits)
        if branch == "fallback":
            assert fits[0].calibration["extra_regularization"] > 0


@pytest.mark.parametrize("method", ["output", "objective"])
@pytest.mark.parametrize("delta", [None, 1e-5])
def test_infinite_epsilon_fit_equals_non_private_fit(method, delta):
    z, y = _toy(n=80, k=3, seed=1)
    w0, _ = erm.fit_logistic(z, y, reg=0.05)
    f = erm.private_logistic_regression(z, y, method=method, epsilon=math.inf, delta=delta, lam=0.05,
                                        rng=np.random.default_rng(0))
    assert f.noise_norm == 0.0
    np.testing.assert_array_equal(f.weights, w0)


def test_fit_minimises_the_regularised_risk():
    """The solver's w* has gradient ≤ g and matches scikit-learn's at the same λ (C = 1/(nλ), no
    separate intercept: the constant column is a feature)."""
    LogisticRegression = pytest.importorskip("sklearn.linear_model").LogisticRegression

    z, y = _toy(n=200, k=4, seed=2)
    lam = 0.02
    w, g = erm.fit_logistic(z, y, reg=lam)
    assert g <= erm.GRADIENT_TOL
    sk = LogisticRegression(C=1 / (len(y) * lam), fit_intercept=False, tol=1e-12, max_iter=10_000).fit(z, y)
    np.testing.assert_allclose(w, sk.coef_[0], rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("method", ["output", "objective"])
def test_mean_excess_risk_below_the_bound(method):
    """Monte Carlo (seeded): the mean of J(w_priv) − J(w*) is below the calculator's bound."""
    z, y = _toy(n=100, k=3, seed=4)
    lam, eps = 0.05, 1.0
    w0, _ = erm.fit_logistic(z, y, reg=lam)

    def J(w):
        return float(np.logaddexp(0, -(z @ w) * y).mean() + lam / 2 * w @ w)

    rng = np.random.default_rng(9)
    gaps = [J(erm.private_logistic_regression(z, y, method=method, epsilon=eps, lam=lam, rng=rng).weights) - J(w0)
            for _ in range(200)]
    bound = erm.erm_noise(method=method, epsilon=eps, n=100, dims=z.shape[1], lam=lam)["excess_risk_bound"]
    assert min(gaps) >= -1e-12
    assert np.mean(gaps) <= bound


def test_scale_rows_rule():
    x = np.array([[3.0, 4.0], [0.0, 0.0], [0.3, 0.4]])
    z, rule = erm.scale_rows(x)
    np.testing.assert_allclose(z[0], np.array([0.6, 0.8, 1.0]) / math.sqrt(2))
    np.testing.assert_allclose(z[1], np.array([0.0, 0.0, 1.0]) / math.sqrt(2))
    np.testing.assert_allclose(z[2], z[0])
    assert "divided by their L2 norm" in rule
    zb, rule = erm.scale_rows(x, norm_bound=2.0)
    np.testing.assert_allclose(zb[0], np.array([0.6, 0.8, 1.0]) / math.sqrt(2))  # clipped to 2, ÷ 2
    np.testing.assert_allclose(zb[2], np.array([0.15, 0.2, 1.0]) / math.sqrt(2))  # inside: ÷ 2
    assert np.all(np.linalg.norm(zb, axis=1) <= 1.0) and "clipped to L2 norm 2" in rule


def test_rows_outside_the_ball_are_refused():
    with pytest.raises(ParameterError):
        erm.private_logistic_regression(np.array([[1.0, 1.0]]), np.array([1]), method="output", epsilon=1, lam=1)


def test_real_data_breast_cancer_accuracy_approaches_non_private():
    """Wisconsin breast cancer (bundled with scikit-learn, no download), features min–max scaled
    to [0, 1] by their stated ranges: at ε = 10 objective perturbation is within 5 points of the
    non-private fit's test accuracy on average (benchmarks/bench_erm.py measures: 0.890 vs 0.886
    over 20 seeds), and output perturbation at ε = 10 within 10 points (0.877)."""
    datasets = pytest.importorskip("sklearn.datasets")
    d = datasets.load_breast_cancer()
    x = (d.data - d.data.min(0)) / (d.data.max(0) - d.data.min(0))  # a test, not a release
    y = np.where(d.target == 1, 1, -1)
    z, _ = erm.scale_rows(x, norm_bound=2.0)
    tr, te = erm.split_indices(len(y), test_fraction=0.2, seed=0)
    w0, _ = erm.fit_logistic(z[tr], y[tr], reg=0.01)
    base = erm.accuracy(w0, z[te], y[te])
    assert base > 0.85
    for method, slack in (("objective", 0.05), ("output", 0.10)):
        rng = np.random.default_rng(0)
        accs = [erm.accuracy(erm.private_logistic_regression(z[tr], y[tr], method=method, epsilon=10.0, lam=0.01,
                                                             rng=rng).weights, z[te], y[te]) for _ in range(20)]
        assert np.mean(accs) >= base - slack, (method, np.mean(accs), base)
