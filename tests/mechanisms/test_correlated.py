"""Correlated-noise (matrix-factorization) mechanisms: sensitivity, prefix-sum error, privacy.

References beside each test: dense numpy linear algebra on the materialised C (pseudo-inverse
for Honaker), dp_accounting's tree-aggregation RDP, mpmath binomials, the exact Gaussian curve,
explicit worst-case neighbouring streams (achievable lower bounds). The jax_privacy
cross-checks are in test_correlated_jax.py.
"""

from __future__ import annotations

import itertools
import math

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.linalg import toeplitz

from dpcalc.accounting.correlated import mf_compare, mf_privacy
from dpcalc.errors import ParameterError
from dpcalc.mechanisms.correlated import (
    DenseStrategy,
    Participation,
    TreeStrategy,
    banded_sqrt_strategy,
    banded_strategy,
    blt_strategy,
    identity_strategy,
    pattern_norm,
    prefix_error,
    sensitivity,
    sqrt_coefficients,
    sqrt_strategy,
)
from dpcalc.mechanisms.correlated.error import tree_step_variances
from dpcalc.mechanisms.correlated.optimize import banded_objective, optimize_banded
from dpcalc.mechanisms.gaussian import analytic_noise_std, gaussian_delta, gaussian_epsilon


def tree_matrix(n: int, restarts: int = 1) -> np.ndarray:
    """The restarted tree's C: one row per complete node (interval ending at or before the
    tree's last leaf), block diagonal over the trees."""
    m = n // restarts
    rows = []
    for r in range(restarts):
        for lv in range(m.bit_length()):
            w = 1 << lv
            for j in range(m // w):
                row = np.zeros(n)
                row[r * m + j * w:r * m + (j + 1) * w] = 1
                rows.append(row)
    return np.array(rows)


def dyadic_decoder(n: int) -> np.ndarray:
    """B of the plain tree: prefix t = the popcount(t) dyadic nodes (rows of tree_matrix)."""
    c = tree_matrix(n)
    index = {tuple(np.flatnonzero(row)[[0, -1]]): i for i, row in enumerate(c)}
    b = np.zeros((n, c.shape[0]))
    for t in range(1, n + 1):
        start = 0
        for lv in range(t.bit_length() - 1, -1, -1):
            if t & (1 << lv):
                b[t - 1, index[(start, start + (1 << lv) - 1)]] = 1
                start += 1 << lv
    return b


def materialize(strategy) -> np.ndarray:
    if isinstance(strategy, TreeStrategy):
        return tree_matrix(strategy.steps, strategy.restarts)
    if isinstance(strategy, DenseStrategy):
        return strategy.matrix
    col = np.zeros(strategy.steps)
    m = min(strategy.coefs.size, strategy.steps)
    col[:m] = strategy.coefs[:m]
    return np.tril(toeplitz(col))


def prefix_matrix(n: int) -> np.ndarray:
    return np.tril(np.ones((n, n)))


# --- error -------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 3, 5, 6, 8, 13, 32, 37])
def test_tree_errors_match_dense_decoders(n):
    # Honaker = least squares: B = A C⁺ (numpy pinv); plain: the dyadic decoder, B C = A
    c = tree_matrix(n)
    a = prefix_matrix(n)
    b_ls = a @ np.linalg.pinv(c)  # offline: every node
    np.testing.assert_allclose(tree_step_variances(n, honaker=True, offline=True),
                               np.sum(b_ls**2, axis=1), rtol=1e-10)
    # streaming: prefix t from the nodes complete by step t (the tree over t leaves)
    online = [float(np.sum((prefix_matrix(t)[-1] @ np.linalg.pinv(tree_matrix(t)))**2))
              for t in range(1, n + 1)]
    np.testing.assert_allclose(prefix_error(TreeStrategy(n, honaker=True)).per_step, online, rtol=1e-10)
    assert np.all(np.array(online) <= prefix_error(TreeStrategy(n)).per_step + 1e-12)
    b_dy = dyadic_decoder(n)
    np.testing.assert_allclose(b_dy @ c, a)
    np.testing.assert_allclose(prefix_error(TreeStrategy(n)).per_step, np.sum(b_dy**2, axis=1))


@pytest.mark.parametrize("honaker", [False, True])
def test_restarted_tree_error_matches_dense(honaker):
    n, k = 24, 3
    c = tree_matrix(n, k)
    a = prefix_matrix(n)
    if honaker:  # streaming Honaker per tree; completed trees add their total's estimate
        m = n // k
        per = np.array([float(np.sum((prefix_matrix(t)[-1] @ np.linalg.pinv(tree_matrix(t)))**2))
                        for t in range(1, m + 1)])
        want = np.concatenate([e * per[-1] + per for e in range(k)])
        np.testing.assert_allclose(prefix_error(TreeStrategy(n, honaker=True, restarts=k)).per_step, want,
                                   rtol=1e-10)
        return
    else:
        per = dyadic_decoder(n // k)
        blocks = np.kron(np.eye(k), per)  # each tree's prefixes; completed trees add their total
        b = blocks.copy()
        for e in range(k):
            rows = slice(e * (n // k), (e + 1) * (n // k))
            for f in range(e):
                b[rows] += blocks[(f + 1) * (n // k) - 1]
        np.testing.assert_allclose(b @ c, a)
    got = prefix_error(TreeStrategy(n, honaker=honaker, restarts=k)).per_step
    np.testing.assert_allclose(got, np.sum(b**2, axis=1), rtol=1e-10)


@pytest.mark.parametrize("make", [
    lambda n: sqrt_strategy(n),
    lambda n: banded_sqrt_strategy(n, 4),
    lambda n: banded_strategy(n, [1.0, -0.3, 0.2]),
    lambda n: blt_strategy(n, decay=[0.9, 0.4], scale=[0.25, 0.1]),
    lambda n: identity_strategy(n),
])
def test_toeplitz_error_matches_dense_solve(make):
    n = 60
    s = make(n)
    b = prefix_matrix(n) @ np.linalg.inv(materialize(s))  # dense reference (small n)
    e = prefix_error(s)
    np.testing.assert_allclose(e.per_step, np.sum(b**2, axis=1), rtol=1e-9)
    assert e.total == pytest.approx(np.sum(b**2), rel=1e-9)


def test_dense_error_and_strategy_checks():
    rng = np.random.default_rng(1)
    c = np.tril(rng.normal(size=(30, 30))) + 5 * np.eye(30)
    b = prefix_matrix(30) @ np.linalg.inv(c)
    np.testing.assert_allclose(prefix_error(DenseStrategy(c)).per_step, np.sum(b**2, axis=1), rtol=1e-9)
    with pytest.raises(ParameterError, match="lower-triangular"):
        DenseStrategy(c.T)
    with pytest.raises(ParameterError, match="square"):
        DenseStrategy(np.ones((3, 4)))
    bad = c.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ParameterError, match="finite"):
        DenseStrategy(bad)


def test_sqrt_coefficients_are_binomials_and_square_to_prefix_sums():
    # c_k = binom(2k, k)/4^k (mpmath, exact), and C² = A
    c = sqrt_coefficients(40)
    for k in range(40):
        assert c[k] == pytest.approx(float(mpmath.binomial(2 * k, k) / mpmath.mpf(4) ** k), rel=1e-14)
    cm = materialize(sqrt_strategy(40))
    np.testing.assert_allclose(cm @ cm, prefix_matrix(40), atol=1e-12)


def test_sqrt_error_grows_like_log_n():
    # ‖B_{t,:}‖² = Σ_{j<t} c_j² with c_j² = (binom(2j, j)/4^j)² ~ 1/(πj): the error of the
    # square-root factorization grows like ln(n)/π (Henzinger, Upadhyay, Upadhyay SODA 2023;
    # Fichtenberger, Henzinger, Upadhyay ICML 2023). The expansion
    # Σ_{j<n} c_j² = (ln n + γ + 4 ln 2)/π − 1/(4πn) + O(n⁻²) is checked against an mpmath sum
    # at n = 2000, then used as the reference up to n = 10⁶.
    n0 = 2000
    exact = mpmath.fsum((mpmath.binomial(2 * j, j) / mpmath.mpf(4) ** j) ** 2 for j in range(n0))
    assert prefix_error(sqrt_strategy(n0)).max == pytest.approx(float(exact), rel=1e-13)

    def expansion(n):
        return (math.log(n) + np.euler_gamma + 4 * math.log(2)) / math.pi - 1 / (4 * math.pi * n)

    assert float(exact) == pytest.approx(expansion(n0), abs=1e-6)
    for n in (10**4, 10**5, 10**6):
        e = prefix_error(sqrt_strategy(n))
        assert e.max == pytest.approx(expansion(n), abs=1e-9)
        assert e.max == e.per_step[-1]  # Toeplitz: the last prefix is the worst
        # the mean squared error: (ln n + γ + 4 ln 2 − 1)/π + O(ln(n)/n)
        mean_ref = (math.log(n) + np.euler_gamma + 4 * math.log(2) - 1) / math.pi
        assert abs(e.mean - mean_ref) < 2 * math.log(n) / n


# --- sensitivity -------------------------------------------------------------------------


def _brute_force_sq(c: np.ndarray, p: Participation) -> float:
    """max over every admissible pattern of Σ_{π×π} (CᵀC) — the sensitivity² when CᵀC ≥ 0
    (all gradients equal), a lower bound otherwise."""
    n, k, b = p.steps, p.epochs, p.min_separation
    x = c.T @ c
    best = 0.0
    for size in range(1, k + 1):
        for pi in itertools.combinations(range(n), size):
            if all(j - i >= b for i, j in zip(pi, pi[1:], strict=False)):
                best = max(best, float(x[np.ix_(pi, pi)].sum()))
    return best


CASES = [
    (lambda n, k: sqrt_strategy(n), 12, 3, 4),
    (lambda n, k: sqrt_strategy(n), 12, 3, 2),
    (lambda n, k: banded_sqrt_strategy(n, 3), 12, 4, 3),
    (lambda n, k: banded_sqrt_strategy(n, 5), 12, 3, 2),
    (lambda n, k: blt_strategy(n, decay=[0.8], scale=[0.3]), 12, 3, 3),
    (lambda n, k: TreeStrategy(n, restarts=k), 12, 3, 4),
    (lambda n, k: TreeStrategy(n, honaker=True, restarts=k), 16, 2, 8),
    (lambda n, k: TreeStrategy(n), 12, 3, 2),
    (lambda n, k: identity_strategy(n), 10, 5, 2),
]


@pytest.mark.parametrize("make, n, k, b", CASES)
def test_sensitivity_against_brute_force(make, n, k, b):
    s = make(n, k)
    p = Participation(n, k, b)
    c = materialize(s)
    res = sensitivity(s, p)
    truth_sq = _brute_force_sq(c, p)  # CᵀC ≥ 0 for all these C: the exact sensitivity²
    assert np.all(c.T @ c >= -1e-15)
    assert res.value >= math.sqrt(truth_sq) * (1 - 1e-15)  # never under
    if res.exact:
        assert res.value == pytest.approx(math.sqrt(truth_sq), rel=1e-12)
    assert res.achieved <= math.sqrt(truth_sq) * (1 + 1e-12)


def test_dense_negative_entries_bound_is_sound():
    # a C with negative CᵀC entries: the bound must cover the maximum over sign choices
    rng = np.random.default_rng(7)
    for _ in range(5):
        c = np.tril(rng.normal(size=(9, 9))) + 3 * np.eye(9)
        p = Participation(9, 3, 2)
        res = sensitivity(DenseStrategy(c), p)
        best = 0.0
        for size in (1, 2, 3):
            for pi in itertools.combinations(range(9), size):
                if all(j - i >= 2 for i, j in zip(pi, pi[1:], strict=False)):
                    for signs in itertools.product((1, -1), repeat=size):  # 1-d gradients ±1
                        best = max(best, float(np.linalg.norm(c[:, pi] @ np.array(signs))))
        assert res.value >= best


@pytest.mark.parametrize("make, n, k, b", CASES)
def test_achievable_pair_of_streams_realises_the_sensitivity(make, n, k, b):
    # Two neighbouring gradient streams: x = 0 and x' with gradient (1, 0, ...) at the pattern's
    # steps. ‖C(x' − x)‖ is what a record can move C x: a lower bound on Δ, equal to it when
    # exact; the Gaussian mechanism's privacy loss for this pair is exactly μ = ‖C(x'−x)‖/s, so
    # the reported ε is met with equality by this pair (δ(ε) of that μ ≈ δ).
    s = make(n, k)
    p = Participation(n, k, b)
    res = sensitivity(s, p)
    x = np.zeros(n)
    x_prime = np.zeros(n)
    x_prime[list(res.pattern)] = 1.0
    shift = float(np.linalg.norm(materialize(s) @ (x_prime - x)))
    assert shift == pytest.approx(res.achieved, rel=1e-12)
    assert shift == pytest.approx(pattern_norm(s, res.pattern), rel=1e-12)
    assert shift <= res.value
    if res.exact:
        priv = mf_privacy(s, p, delta=1e-5, epsilon=2.0)
        mu_pair = shift / priv.noise_std
        assert mu_pair <= priv.mu
        assert gaussian_delta(epsilon=2.0, mu=mu_pair) == pytest.approx(1e-5, rel=1e-6)


@settings(max_examples=40, deadline=None)
@given(kind=st.sampled_from(["sqrt", "banded", "blt", "tree", "dense", "bandedneg"]),
       n=st.integers(4, 40), k=st.integers(1, 6), b=st.integers(1, 12), seed=st.integers(0, 99))
def test_sensitivity_monotone_in_participations_and_separation(kind, n, k, b, seed):
    rng = np.random.default_rng(seed)
    make = {
        "sqrt": lambda: sqrt_strategy(n),
        "banded": lambda: banded_sqrt_strategy(n, min(n, 1 + seed % 6)),
        "bandedneg": lambda: banded_strategy(n, [1.0, -0.5, 0.3, -0.1][:1 + seed % 4]),
        "blt": lambda: blt_strategy(n, decay=[0.9, 0.3], scale=[0.2, 0.05 + seed / 200]),
        "tree": lambda: TreeStrategy(n),
        "dense": lambda: DenseStrategy(np.tril(rng.normal(size=(n, n))) + 2 * np.eye(n)),
    }[kind]
    s = make()

    def sens(kk, bb):
        return sensitivity(s, Participation(n, kk, bb)).value

    if k * b > n:
        return
    base = sens(k, b)
    if (k + 1) * b <= n:
        assert sens(k + 1, b) >= base  # more participations: never smaller
    if b > 1:
        assert sens(k, b - 1) >= base  # closer participations: never smaller


def test_participation_errors():
    with pytest.raises(ParameterError, match="min_separation"):
        Participation(10, 1, 11)
    with pytest.raises(ParameterError, match="epochs·min_separation"):
        Participation(10, 3, 4)
    with pytest.raises(ParameterError, match="divisor"):
        TreeStrategy(10, restarts=3)


# --- privacy and the DP-SGD comparison ----------------------------------------------------


def test_tree_epsilon_against_dp_accounting():
    # dp_accounting's SingleEpochTreeAggregationDpEvent (Kairouz et al. 2021 App. D): RDP
    # α·⌈log₂(n+1)⌉/(2σ²), σ the noise std per node, under REPLACE_SPECIAL (a record's
    # gradients replaced by zero: our zero-out neighbouring). Our Δ² is the same depth, so
    # μ = √depth/σ: their RDP curve is exactly μ-GDP's, and our exact GDP ε is below their ε.
    dpa = pytest.importorskip("dp_accounting")
    from dp_accounting.rdp import RdpAccountant

    special = dpa.NeighboringRelation.REPLACE_SPECIAL

    for n, k, noise in [(1000, 1, 3.0), (1023, 1, 2.0), (1024, 1, 5.0), (600, 3, 4.0), (4096, 4, 10.0)]:
        s = TreeStrategy(n, restarts=k)
        p = Participation(n, k)
        sens = sensitivity(s, p)
        event = dpa.SelfComposedDpEvent(dpa.SingleEpochTreeAggregationDpEvent(noise, n // k), k)
        acc = RdpAccountant(orders=[2.0, 8.0, 32.0], neighboring_relation=special)
        acc.compose(event)
        mu_sq = sens.value**2 / noise**2
        np.testing.assert_allclose(acc._rdp, np.array([2.0, 8.0, 32.0]) * mu_sq / 2, rtol=1e-12)
        priv = mf_privacy(s, p, delta=1e-6, noise_multiplier=noise / sens.value)
        rdp_eps = RdpAccountant(neighboring_relation=special).compose(event).get_epsilon(1e-6)
        assert priv.epsilon <= rdp_eps
        assert priv.epsilon == pytest.approx(gaussian_epsilon(delta=1e-6, mu=math.sqrt(mu_sq)), rel=1e-12)


def test_one_band_equals_dpsgd_without_amplification():
    # C = I (one band): Δ = √k, σ_noise = √k·σ_analytic(ε, δ), per-prefix error t·σ_noise²
    n, k = 1000, 5
    p = Participation(n, k)
    for strategy in (identity_strategy(n), banded_sqrt_strategy(n, 1)):
        rows = mf_compare(strategy, p, delta=1e-5, epsilon=2.0, poisson=False)
        mine, dpsgd = rows[0].values, rows[1].values
        for key in ("noise_multiplier", "noise_std", "sensitivity", "epsilon", "rmse", "max_error"):
            assert mine[key] == dpsgd[key]
        sigma = analytic_noise_std(epsilon=2.0, delta=1e-5)
        assert mine["noise_std"] == pytest.approx(math.sqrt(k) * sigma, rel=1e-12)
        assert mine["rmse"] == pytest.approx(math.sqrt(k) * sigma * math.sqrt((n + 1) / 2), rel=1e-12)


def test_identity_epsilon_matches_composed_gaussian_pld():
    # k compositions of the Gaussian mechanism (noise std s, sensitivity 1): dp_accounting PLD
    dpa = pytest.importorskip("dp_accounting")
    n, k, s = 100, 4, 3.0
    priv = mf_privacy(identity_strategy(n), Participation(n, k), delta=1e-5,
                      noise_multiplier=s / math.sqrt(k))
    pld = dpa.pld.PLDAccountant(value_discretization_interval=1e-4)
    pld.compose(dpa.GaussianDpEvent(s), k)
    ref = pld.get_epsilon(1e-5)
    assert priv.epsilon <= ref and priv.epsilon == pytest.approx(ref, abs=2e-3)


def test_calibration_meets_target_and_round_trips():
    s = sqrt_strategy(500)
    p = Participation(500, 5)
    up = mf_privacy(s, p, delta=1e-6, epsilon=1.5)
    back = mf_privacy(s, p, delta=1e-6, noise_multiplier=up.noise_multiplier)
    assert back.epsilon <= 1.5 and back.epsilon == pytest.approx(1.5, rel=1e-6)


def test_amplified_banded_row_is_dpsgd_on_partitions():
    # Choquette-Choo et al. NeurIPS 2023 Thm 4: σ_p is DP-SGD's at rate q·b for ⌈n/b⌉ rounds,
    # noise std σ_p·‖c‖ — checked against the same calibration done directly
    from dpcalc.accounting.calibrate import calibrate_dpsgd
    from dpcalc.accounting.registry import default_accountant, get_accountant

    n, k, bands = 2000, 4, 8
    rows = mf_compare(banded_sqrt_strategy(n, bands), Participation(n, k), delta=1e-5, epsilon=2.0)
    amp = rows[-1]
    assert amp.details["kind"] == "amplified"
    ref = calibrate_dpsgd(get_accountant(default_accountant()), target_epsilon=2.0, delta=1e-5,
                          sample_rate=k / n * bands, steps=n // bands)
    assert amp["noise_multiplier"] == ref.noise_multiplier
    c = sqrt_coefficients(bands)
    assert amp["noise_std"] >= ref.noise_multiplier * float(np.linalg.norm(c))


# --- optimization ------------------------------------------------------------------------


def test_banded_objective_gradient_matches_finite_differences():
    c = np.array([1.0, 0.6, 0.4, 0.2])
    val, grad = banded_objective(c, 80)
    b = prefix_matrix(80) @ np.linalg.inv(materialize(banded_strategy(80, c)))
    assert val == pytest.approx(np.sum(b**2), rel=1e-10)
    for m in range(4):
        e = np.zeros(4)
        e[m] = 1e-6
        fd = (banded_objective(c + e, 80)[0] - banded_objective(c - e, 80)[0]) / 2e-6
        assert grad[m] == pytest.approx(fd, rel=1e-5)


@pytest.mark.parametrize("n, k, bands", [(1000, 1, 8), (2000, 4, 16), (3000, 10, 32)])
def test_optimized_banded_beats_banded_sqrt(n, k, bands):
    p = Participation(n, k)
    opt = optimize_banded(p, bands)
    base = banded_sqrt_strategy(n, bands)

    def loss(s):
        return sensitivity(s, p).value ** 2 * prefix_error(s).total

    assert opt.bands <= bands
    assert loss(opt) <= loss(base) * (1 + 1e-12)
    assert sensitivity(opt, p).exact
    with pytest.raises(ParameterError, match="min_separation"):
        optimize_banded(Participation(n, k, 4), 8) if k > 1 else optimize_banded(Participation(n, 2, 4), 8)


def test_amplified_banded_sigma_cross_checked_with_dp_accounting_pld():
    # the reduction of Choquette-Choo et al. NeurIPS 2023 Thm 4 (DP-SGD at rate q·b, ⌈n/b⌉
    # rounds) accounted independently by dp_accounting's PLD: ε at our σ_p meets the target
    dpa = pytest.importorskip("dp_accounting")
    n, k, bands = 1200, 3, 6
    rows = mf_compare(banded_sqrt_strategy(n, bands), Participation(n, k), delta=1e-6, epsilon=1.5)
    amp = rows[-1]
    rate, rounds = amp.details["sample_rate"], amp.details["steps"]
    assert rate == pytest.approx(k / n * bands) and rounds == n // bands
    pld = dpa.pld.PLDAccountant(value_discretization_interval=1e-4)
    pld.compose(dpa.PoissonSampledDpEvent(rate, dpa.GaussianDpEvent(amp["noise_multiplier"])), rounds)
    assert pld.get_epsilon(1e-6) == pytest.approx(1.5, abs=5e-3)
    # and 1 % less noise would miss the target (the calibration is tight, not just safe)
    pld2 = dpa.pld.PLDAccountant(value_discretization_interval=1e-4)
    pld2.compose(dpa.PoissonSampledDpEvent(rate, dpa.GaussianDpEvent(0.99 * amp["noise_multiplier"])), rounds)
    assert pld2.get_epsilon(1e-6) > 1.5
