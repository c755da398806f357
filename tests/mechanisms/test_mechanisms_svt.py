"""Sparse vector technique: Lyu, Su, Li 2017 budget split and refused variants; Dwork & Roth 2014
Alg. 1–3 closed forms (Thm 3.24/3.26/3.28); (α, β)-accuracy by seeded Monte Carlo; CLI."""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcalc.errors import InfeasibleError, ParameterError
from dpcalc.mechanisms import sparse_vector as sv


def test_budget_split_lyu():
    # Lyu, Su, Li 2017 Alg. 7: ε₁ : ε₂ = 1 : (2c)^{2/3}; monotonic 1 : c^{2/3}
    e1, e2 = sv.budget_split(epsilon=1.0, answers=4)
    assert e2 / e1 == pytest.approx(8 ** (2 / 3)) and e1 + e2 == pytest.approx(1.0)
    e1, e2 = sv.budget_split(epsilon=1.0, answers=8, monotonic=True)
    assert e2 / e1 == pytest.approx(4.0)
    assert sv.budget_split(epsilon=1.0, answers=8, split="equal") == (0.5, 0.5)


@settings(max_examples=50, deadline=None)
@given(c=st.integers(1, 1000), mono=st.booleans())
def test_split_minimises_noise_variance(c, mono):
    # Var(ν − ρ) ∝ 1/ε₁² + (c')²/ε₂², c' = c (monotonic) or 2c: the split is its minimiser on ε₁ + ε₂ = 1
    cp = c if mono else 2 * c
    e1, e2 = sv.budget_split(epsilon=1.0, answers=c, monotonic=mono)

    def var(x):
        return 1 / x**2 + cp**2 / (1 - x) ** 2

    assert var(e1) <= var(e1 * 1.01) and var(e1) <= var(e1 * 0.99)


def test_lyu_scales():
    r = sv.sparse_vector(epsilon=1.0, queries=100, answers=10, sensitivity=2.0)
    e1, e2 = sv.budget_split(epsilon=1.0, answers=10)
    assert r["threshold_scale"] == pytest.approx(2 / e1) and r["query_scale"] == pytest.approx(2 * 10 * 2 / e2)
    m = sv.sparse_vector(epsilon=1.0, queries=100, answers=10, sensitivity=2.0, monotonic=True)
    e1m, e2m = sv.budget_split(epsilon=1.0, answers=10, monotonic=True)
    assert m["query_scale"] == pytest.approx(10 * 2 / e2m)  # halved query noise (cΔ/ε₂)
    assert m["accuracy"] < r["accuracy"]
    assert r["accuracy"] < r.details["accuracy_equal_split"]  # the optimised split buys accuracy


def test_dwork_roth_closed_forms():
    # DR14 Thm 3.24 (c = 1): α = 8(ln k + ln(2/β))/ε; Thm 3.26: α = 8c(ln k + ln(2c/β))/ε (δ = 0),
    # (ln k + ln(2c/β))·√(512 c ln(1/δ))/ε (δ > 0); Alg. 2: σ = 2c/ε or √(32 c ln(1/δ))/ε, query noise 2σ
    k, c, eps, beta = 1000, 5, 0.5, 0.05
    r1 = sv.sparse_vector(epsilon=eps, queries=k, answers=1, variant="dwork-roth", beta=beta)
    assert r1["accuracy"] == pytest.approx(8 * (math.log(k) + math.log(2 / beta)) / eps, rel=1e-14)
    assert (r1["threshold_scale"], r1["query_scale"]) == (4.0, 8.0)  # Alg. 1: Lap(2/ε), Lap(4/ε)
    r = sv.sparse_vector(epsilon=eps, queries=k, answers=c, variant="dwork-roth", beta=beta, sensitivity=3)
    assert r["accuracy"] == pytest.approx(3 * 8 * c * (math.log(k) + math.log(2 * c / beta)) / eps, rel=1e-14)
    assert r["threshold_scale"] == pytest.approx(3 * 2 * c / eps)
    d = 1e-6
    rd = sv.sparse_vector(epsilon=eps, queries=k, answers=c, variant="dwork-roth", beta=beta, delta=d)
    assert rd["accuracy"] == pytest.approx(
        (math.log(k) + math.log(2 * c / beta)) * math.sqrt(512 * c * math.log(1 / d)) / eps, rel=1e-14)
    assert rd["threshold_scale"] == pytest.approx(math.sqrt(32 * c * math.log(1 / d)) / eps)
    # the composed ε (DR14 Thm 3.20 over c runs of ε' = 2/σ) is below the target
    assert rd.details["epsilon_advanced_composition"] <= eps


def test_numeric_sparse_closed_forms():
    # DR14 Alg. 3 (δ = 0): ε₁ = 8ε/9, ε₂ = 2ε/9, σ(ε) = 2c/ε; Thm 3.28: α = 9c(ln k + ln(4c/β))/ε
    # (it bounds the released answers' Laplace error σ(ε₂)·ln(2c/β) = 9c·ln(2c/β)/ε too)
    k, c, eps, beta = 200, 4, 0.9, 0.1
    r = sv.sparse_vector(epsilon=eps, queries=k, answers=c, variant="numeric", beta=beta)
    assert r["accuracy"] == pytest.approx(9 * c * (math.log(k) + math.log(4 * c / beta)) / eps, rel=1e-14)
    assert r["answer_scale"] == pytest.approx(2 * c / (2 * eps / 9))
    assert r["threshold_scale"] == pytest.approx(2 * c / (8 * eps / 9))
    assert r["epsilon_threshold"] == pytest.approx(8 * eps / 9) and r["epsilon_queries"] == pytest.approx(2 * eps / 9)


def _ac(eps1, count, delta):
    """DR14 Thm 3.20, written out: √(2c·ln(1/δ))·ε' + c·ε'(e^{ε'} − 1)."""
    return math.sqrt(2 * count * math.log(1 / delta)) * eps1 + count * eps1 * math.expm1(eps1)


def test_numeric_sparse_delta_uses_dwork_roth_split():
    # DR14 Alg. 3 with δ > 0: ε₁ = √512/(√512 + 1)·ε, ε₂ = 2/(√512 + 1)·ε, σ(ε) = √(32c·ln(2/δ))/ε;
    # Thm 3.27's proof: Sparse at (ε₁, δ/2) composed with the c Laplace answers at δ/2
    k, c, eps, beta, d = 200, 4, 0.9, 0.1, 1e-5
    r = sv.sparse_vector(epsilon=eps, queries=k, answers=c, variant="numeric", beta=beta, delta=d)
    s = math.sqrt(512)
    e1, e2 = s / (s + 1) * eps, 2 / (s + 1) * eps
    root = math.sqrt(32 * c * math.log(2 / d))
    assert r["epsilon_threshold"] == pytest.approx(e1, rel=1e-14)
    assert r["epsilon_queries"] == pytest.approx(e2, rel=1e-14)
    assert r["threshold_scale"] == pytest.approx(root / e1, rel=1e-14)
    assert r["query_scale"] == pytest.approx(2 * root / e1, rel=1e-14)
    assert r["answer_scale"] == pytest.approx(root / e2, rel=1e-14)
    # privacy: c AboveThreshold runs (ε' = 2/σ(ε₁)) and c Laplace answers (1/σ(ε₂)), δ/2 each, by
    # DR14 Thm 3.20; first order ε₁/2 + ε₂/4 = ε/2, the rest is the second-order term
    comp = _ac(2 / (root / e1), c, d / 2) + _ac(1 / (root / e2), c, d / 2)
    assert r.details["epsilon_advanced_composition"] == pytest.approx(comp, rel=1e-12)
    assert eps / 2 < comp <= eps
    # accuracy: the larger of Sparse's (Thm 3.26 at (ε₁, δ/2, β/2): Thm 3.28's closed form) and the
    # released answers' Laplace error σ(ε₂)·ln(2c/β) (each fails with probability ≤ β/2)
    thm = (math.log(k) + math.log(4 * c / beta)) * math.sqrt(c * math.log(2 / d)) * (s + 1) / eps
    sparse = (math.log(k) + math.log(2 * c / (beta / 2))) * math.sqrt(512 * c * math.log(2 / d)) / e1
    assert sparse == pytest.approx(thm, rel=1e-12)
    answers = root / e2 * math.log(2 * c / beta)
    assert answers > thm  # here the released answers bind
    assert r["accuracy"] == pytest.approx(max(thm, answers), rel=1e-12)
    assert "split" in r.details and "√512" in r.details["split"]


def test_numeric_sparse_delta_accuracy_holds_on_an_explicit_instance():
    # One query far above the threshold (answered with probability → 1): its released value
    # q + Lap(b), b = the answer scale, misses q by more than α with probability exactly e^{−α/b}
    # (fresh noise, independent of the threshold test). DR14 Thm 3.28's closed form fails that
    # instance; dpcalc's α does not, and no valid α is below b·ln(1/β).
    c = k = 1
    beta, d, eps = 0.05, 1e-5, 1.0
    r = sv.sparse_vector(epsilon=eps, queries=k, answers=c, variant="numeric", beta=beta, delta=d)
    b = r["answer_scale"]
    thm = math.log(4 * c / beta) * math.sqrt(c * math.log(2 / d)) * (math.sqrt(512) + 1) / eps
    assert math.exp(-thm / b) > 3 * beta  # the closed form's "α" is missed with probability ≈ 0.21
    assert math.exp(-r["accuracy"] / b) <= beta / 2 * (1 + 1e-12)
    assert r["accuracy"] >= b * math.log(1 / beta)


def test_numeric_sparse_delta_inverse_round_trip():
    kw = dict(queries=1000, answers=10, variant="numeric", delta=1e-6, beta=0.05)
    r = sv.sparse_vector(epsilon=0.5, **kw)
    inv = sv.sparse_vector_epsilon_for_accuracy(accuracy=r["accuracy"], **kw)
    assert inv["epsilon"] == pytest.approx(0.5, rel=1e-12)


def test_lyu_ratio_text_matches_the_split():
    # the 'ratio' detail states the split the row uses: ε₁ = ε₂ = ε/2 for lyu-equal
    eq = sv.sparse_vector(epsilon=1.0, queries=100, answers=10, split="equal")
    assert eq.method == "lyu-equal" and eq["epsilon_threshold"] == eq["epsilon_queries"] == 0.5
    assert eq.details["ratio"].startswith("1 : 1")
    opt = sv.sparse_vector(epsilon=1.0, queries=100, answers=10)
    assert opt.details["ratio"] == "1 : (2c)^(2/3)"
    assert opt["epsilon_queries"] / opt["epsilon_threshold"] == pytest.approx(20 ** (2 / 3))
    mono = sv.sparse_vector(epsilon=1.0, queries=100, answers=10, monotonic=True, split="equal")
    assert mono.details["ratio"].startswith("1 : 1")


def test_cli_ratio_and_numeric_delta_note(run_cli):
    r = run_cli("svt", "--eps", "1", "--queries", "1000", "--answers", "10", "--json")
    rows = {x["method"]: x for x in r.json()["results"]}
    assert rows["lyu-equal"]["details"]["ratio"].startswith("1 : 1")
    assert rows["lyu"]["details"]["ratio"] == "1 : (2c)^(2/3)"
    r = run_cli("svt", "--eps", "0.5", "--queries", "1000", "--answers", "10", "--variant", "numeric",
                "--delta", "1e-6")
    assert r.exit_code == 0, r.stderr
    text = " ".join(r.stdout.split())
    assert "√512/(√512 + 1)" in text and "Thm 3.28" in text


def test_delta_variant_refused_when_composition_fails():
    # DR14 Cor 3.21 assumes ε < 1: at ε = 50 advanced composition exceeds the target
    with pytest.raises(InfeasibleError, match="advanced composition"):
        sv.sparse_vector(epsilon=50.0, queries=10, answers=10, variant="dwork-roth", delta=1e-3)


def test_laplace_difference_tail_against_mpmath():
    # Pr[X − Y > t], X ~ Lap(a), Y ~ Lap(b): convolution integral in mpmath
    mp.mp.dps = 30
    for a, b, t in [(3.0, 1.0, 2.0), (1.0, 5.0, 7.0), (2.0, 2.0, 3.0)]:
        ref = mp.quad(lambda y, a=a, b=b, t=t: mp.exp(-abs(y) / b) / (2 * b)
                      * (mp.exp(-(t + y) / a) / 2 if t + y > 0 else 1 - mp.exp((t + y) / a) / 2),
                      [-mp.inf, -t, 0, mp.inf])
        assert sv._laplace_diff_tail(t, a, b) == pytest.approx(float(ref), rel=1e-10)


@settings(max_examples=40, deadline=None)
@given(eps=st.floats(0.01, 50), k=st.integers(1, 10**5), c=st.integers(1, 50), mono=st.booleans(),
       variant=st.sampled_from(sv.VARIANTS))
def test_inverse_round_trip(eps, k, c, mono, variant):
    c = min(c, k)
    r = sv.sparse_vector(epsilon=eps, queries=k, answers=c, monotonic=mono, variant=variant)
    inv = sv.sparse_vector_epsilon_for_accuracy(accuracy=r["accuracy"], queries=k, answers=c, monotonic=mono,
                                                variant=variant)
    assert inv["epsilon"] == pytest.approx(eps, rel=1e-9)
    assert inv["accuracy_at_epsilon"] <= r["accuracy"] * (1 + 1e-9)
    more = sv.sparse_vector(epsilon=eps * 1.3, queries=k, answers=c, monotonic=mono, variant=variant)
    assert more["accuracy"] < r["accuracy"]  # more ε, better accuracy


@settings(max_examples=30, deadline=None)
@given(k=st.integers(1, 10**4), alpha=st.floats(0.1, 500), A=st.floats(0.1, 50), B=st.floats(0.1, 50))
def test_failure_probability_monotone(k, alpha, A, B):
    f = sv.svt_failure_probability(accuracy=alpha, threshold_scale=A, query_scale=B, queries=k)
    assert sv.svt_failure_probability(accuracy=alpha * 1.1, threshold_scale=A, query_scale=B, queries=k) <= f
    assert sv.svt_failure_probability(accuracy=alpha, threshold_scale=A, query_scale=B, queries=k + 1) >= f


# ---------------------------------------------------------------------------------------------
# seeded Monte Carlo of Lyu et al.'s SVT


def _run_svt(rng, q, T, c, A, B, trials):
    """Vectorised SVT runs: returns, per trial, whether every answered query is within α... (see caller)."""
    rho = rng.laplace(scale=A, size=(trials, 1))
    nu = rng.laplace(scale=B, size=(trials, q.size))
    above = q[None, :] + nu >= T + rho
    # halt after the c-th ⊤: queries after it are not answered
    answered = np.cumsum(above, axis=1) - above < c
    return above, answered


def test_monte_carlo_accuracy_frequency_at_least_one_minus_beta():
    # k = 30 queries at T ± 0.9α (and far away), c = 3: every answered query must be classified right
    k, c, eps, beta = 30, 3, 2.0, 0.1
    r = sv.sparse_vector(epsilon=eps, queries=k, answers=c, beta=beta)
    alpha, A, B = r["accuracy"], r["threshold_scale"], r["query_scale"]
    T = 0.0
    rng = np.random.default_rng(11)
    q = np.where(np.arange(k) % 2 == 0, T - 1.01 * alpha, T + 1.01 * alpha)  # just outside ±α
    above, answered = _run_svt(rng, q, T, c, A, B, 100_000)
    wrong = answered & (above != (q > T)[None, :])
    ok = 1 - wrong.any(axis=1).mean()
    assert ok >= 1 - beta


def test_monte_carlo_single_query_exact():
    # k = 1: β = 2·Pr[ν − ρ > α] exactly; the frequency of |ν − ρ| ≥ α matches, and a 20% change in
    # either scale or in α moves it well outside the Monte Carlo error
    beta = 0.1
    r = sv.sparse_vector(epsilon=1.0, queries=1, answers=1, beta=beta)
    alpha, A, B = r["accuracy"], r["threshold_scale"], r["query_scale"]
    assert sv.svt_failure_probability(accuracy=alpha, threshold_scale=A, query_scale=B, queries=1) == \
        pytest.approx(beta, rel=1e-9)
    n = 400_000
    rng = np.random.default_rng(12)
    d = np.abs(rng.laplace(scale=B, size=n) - rng.laplace(scale=A, size=n))
    se = math.sqrt(beta * (1 - beta) / n)
    assert abs((d >= alpha).mean() - beta) < 5 * se
    assert abs((d >= 0.8 * alpha).mean() - beta) > 10 * se
    assert abs((d >= 1.2 * alpha).mean() - beta) > 10 * se


# ---------------------------------------------------------------------------------------------
# refused variants and CLI


@pytest.mark.parametrize("name", sorted(sv.REFUSED))
def test_refused_variants_name_the_finding(name):
    with pytest.raises(ParameterError, match="refused.*Lyu, Su, Li 2017"):
        sv.sparse_vector(epsilon=1.0, queries=10, answers=2, variant=name)


def test_cli_table_and_json(run_cli):
    r = run_cli("svt", "--eps", "1", "--queries", "1000", "--answers", "10", "--json")
    assert r.exit_code == 0, r.stderr
    rows = {x["method"]: x for x in r.json()["results"]}
    assert set(rows) == {"lyu", "lyu-equal", "dwork-roth", "numeric"}
    assert rows["dwork-roth"]["accuracy"] == pytest.approx(8 * 10 * (math.log(1000) + math.log(20 / 0.05)))
    r = run_cli("svt", "--accuracy", "50", "--queries", "1000", "--answers", "10", "--variant", "lyu", "--json")
    assert r.exit_code == 0, r.stderr
    assert r.json()["results"][0]["accuracy"] == 50


@pytest.mark.parametrize(("args", "needle", "code"), [
    (("--eps", "1", "--queries", "10", "--answers", "11"), "--answers must be at most", 2),
    (("--eps", "0", "--queries", "10"), "--eps must be", 2),
    (("--eps", "-2", "--queries", "10"), "--eps must be", 2),
    (("--eps", "1", "--queries", "0"), "--queries must be", 2),
    (("--eps", "1", "--queries", "10", "--variant", "no-query-noise"), "not ε-DP", 2),
    (("--eps", "1", "--queries", "10", "--variant", "lee-clifton-2014"), "((1 + 6c)/4)", 2),
    (("--eps", "1", "--queries", "10", "--variant", "bogus"), "--variant must be", 2),
    (("--eps", "1", "--queries", "10", "--variant", "lyu", "--delta", "1e-5"), "--delta must be", 2),
    (("--queries", "10"), "exactly one of --eps", 2),
    (("--eps", "60", "--queries", "10", "--answers", "10", "--variant", "dwork-roth", "--delta", "1e-3"),
     "advanced composition", 1),
])
def test_cli_bad_input(run_cli, args, needle, code):
    r = run_cli("svt", *args)
    assert r.exit_code == code
    assert r.stderr.startswith("Error: ") and needle in r.stderr and len(r.stderr.strip().splitlines()) == 1


# ---- extremes (issue 17) ---------------------------------------------------------------------------

@pytest.mark.parametrize("variant", ["lyu", "dwork-roth", "numeric"])
@pytest.mark.parametrize("scale", [1e-200, 1e200])
def test_accuracy_scales_with_sensitivity_over_epsilon(variant, scale):
    # every noise is Laplace with scale ∝ Δ/ε, so α(ε, Δ) = (Δ/ε)·α(1, 1) (Lyu et al. 2017 Alg. 1;
    # DR14 Thm 3.24/3.28 are linear in Δ/ε). Δ/ε = 1e-200 used to divide 0 by 0 (a², b² underflow),
    # 1e200 to overflow.
    kw = dict(queries=1000, answers=10, beta=0.05, variant=variant)
    unit = sv.sparse_vector(epsilon=1.0, sensitivity=1.0, **kw)["accuracy"]
    eps, sens = (1e100, 1e-100) if scale < 1 else (1e-100, 1e100)
    far = sv.sparse_vector(epsilon=eps, sensitivity=sens, **kw)["accuracy"]
    assert far == pytest.approx(unit * scale, rel=1e-9)


def test_advanced_composition_beyond_exp_overflow_is_infinite():
    # DR14 Thm 3.20: c·ε'(e^{ε'} − 1) is beyond any float for ε' > 709.78 (math.expm1 raised)
    assert sv.advanced_composition_epsilon(epsilon=710.0, count=1, delta=1e-5) == math.inf
    assert sv.advanced_composition_epsilon(epsilon=708.0, count=1, delta=1e-5) == pytest.approx(
        math.sqrt(2 * math.log(1e5)) * 708 + 708 * math.expm1(708))
    with pytest.raises(InfeasibleError):  # the composed ε exceeds any target: refused, exit 1
        sv.sparse_vector(epsilon=1e4, queries=10, answers=1, variant="dwork-roth", delta=0.5)
