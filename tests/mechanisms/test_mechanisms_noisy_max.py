"""Report noisy max (DR14 Claim 3.9), permute-and-flip (McKenna & Sheldon 2020; Ding et al.
2021), Gumbel = exponential mechanism, Gumbel top-k (Durfee & Rogers 2019): scales, utility
closed forms against mpmath, seeded Monte Carlo, exact release, safe file reading, CLI."""

from __future__ import annotations

import itertools
import math
import random

import mpmath as mp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcalc.errors import ParameterError
from dpcalc.mechanisms import noisy_max as nm
from dpcalc.mechanisms.exponential import exponential_probabilities

# ---------------------------------------------------------------------------------------------
# privacy: scale <-> ε


def test_scale_closed_forms():
    # DR14 Claim 3.9: Lap(1/ε) for counts (monotonic, Δ = 1); general scores 2Δ/ε
    assert nm.noise_scale(epsilon=0.5, monotonic=True) == 2.0
    assert nm.noise_scale(epsilon=0.5, sensitivity=3) == 12.0
    # top-k: k rounds of ε/k each (Durfee & Rogers 2019 §4.1 + basic composition)
    assert nm.noise_scale(epsilon=1.0, sensitivity=1, top=10) == 20.0
    assert nm.noise_epsilon(scale=20.0, top=10) == 1.0


@settings(max_examples=100, deadline=None)
@given(eps=st.floats(1e-6, 1e3), d=st.floats(1e-3, 1e3), mono=st.booleans(), k=st.integers(1, 50))
def test_scale_epsilon_round_trip_and_monotone(eps, d, mono, k):
    b = nm.noise_scale(epsilon=eps, sensitivity=d, monotonic=mono, top=k)
    assert nm.noise_epsilon(scale=b, sensitivity=d, monotonic=mono, top=k) == pytest.approx(eps, rel=1e-14)
    assert nm.noise_scale(epsilon=eps * 1.5, sensitivity=d, monotonic=mono, top=k) < b  # more ε, less noise
    if not mono:
        assert nm.noise_scale(epsilon=eps, sensitivity=d, monotonic=True, top=k) == pytest.approx(b / 2)


# ---------------------------------------------------------------------------------------------
# utility: the worst-case tail P_m(t) against mpmath


def _mp_tail(noise, m, t):
    """P_m(t) = Pr[max_{j<m} Z_j ≥ Z_0 + t] by mpmath quadrature from the noise's pdf and cdf (b = 1)."""
    mp.mp.dps = 30
    n = m - 1
    if noise == "laplace":
        f = lambda z: mp.exp(-abs(z)) / 2  # noqa: E731
        F = lambda x: mp.exp(x) / 2 if x < 0 else 1 - mp.exp(-x) / 2  # noqa: E731
        pts = [-mp.inf, -t, 0, mp.inf] if t > 0 else [-mp.inf, 0, mp.inf]
    elif noise == "exponential":
        f = lambda z: mp.exp(-z)  # noqa: E731
        F = lambda x: 1 - mp.exp(-x) if x > 0 else mp.mpf(0)  # noqa: E731
        pts = [0, mp.inf]
    else:
        f = lambda z: mp.exp(-z - mp.exp(-z))  # noqa: E731
        F = lambda x: mp.exp(-mp.exp(-x))  # noqa: E731
        pts = [-8, 0, mp.inf]  # below −8 the Gumbel density is < e^{−2900}
    return mp.quad(lambda z: f(z) * (1 - F(z + t) ** n), pts)


@pytest.mark.parametrize("noise", nm.NOISES)
@pytest.mark.parametrize(("m", "t"), [(2, 0.0), (2, 1.5), (7, 3.0), (300, 8.0), (300, 20.0)])
def test_worst_case_tail_matches_mpmath(noise, m, t):
    got = nm.worst_case_tail(noise=noise, scale=1.0, candidates=m, gap=t)
    assert got == pytest.approx(float(_mp_tail(noise, m, t)), rel=1e-8)
    # scale invariance: P depends on t/b only
    assert nm.worst_case_tail(noise=noise, scale=2.5, candidates=m, gap=2.5 * t) == pytest.approx(got, rel=1e-12)


def test_closed_form_tails():
    # Gumbel (= EM): n e^{−t}/(1 + n e^{−t}) ≤ m e^{−t} (DR14 Thm 3.11); exponential m = 2: a/2 (PF by hand)
    n, t = 99, 5.0
    assert nm.worst_case_tail(noise="gumbel", scale=1, candidates=100, gap=t) == pytest.approx(
        n * math.exp(-t) / (1 + n * math.exp(-t)), rel=1e-15)
    assert nm.worst_case_tail(noise="exponential", scale=1, candidates=2, gap=t) == pytest.approx(
        math.exp(-t) / 2, rel=1e-13)
    # Laplace m = 2: the exact tail of a Laplace difference, (1 + t/2)e^{−t}/2 (= the union bound)
    assert nm.worst_case_tail(noise="laplace", scale=1, candidates=2, gap=t) == pytest.approx(
        (1 + t / 2) * math.exp(-t) / 2, rel=1e-10)
    assert nm.worst_case_tail_union(scale=1, candidates=2, gap=t) == pytest.approx((1 + t / 2) * math.exp(-t) / 2)


def test_exponential_tail_no_cancellation_far_out():
    # m = 10⁶, t = 40 b: P = (C(m,2) a² − C(m,3) a³ + …)/(m a) ≈ (m − 1) a/2; mpmath at 60 digits
    mp.mp.dps = 60
    m, a = 10**6, mp.exp(-40)
    ref = (m * a - 1 + (1 - a) ** m) / (m * a)
    assert nm.worst_case_tail(noise="exponential", scale=1, candidates=m, gap=40.0) == pytest.approx(
        float(ref), rel=1e-12)


@pytest.mark.parametrize("noise", nm.NOISES)
def test_expected_gap_bound_is_integral_of_tail(noise):
    # E[gap] ≤ ∫₀^∞ P_m(t) dt = ∫ F(y)(1 − F(y)^{m−1}) dy (Fubini): the latter by mpmath, the former by
    # integrating our own P_m on a grid; closed forms b ln m (Gumbel), b(H_{m−1} − 1 + 1/m) (exponential)
    m = 5
    mp.mp.dps = 20
    F = {"laplace": lambda x: mp.exp(x) / 2 if x < 0 else 1 - mp.exp(-x) / 2,
         "exponential": lambda x: 1 - mp.exp(-x) if x > 0 else mp.mpf(0),
         "gumbel": lambda x: mp.exp(-mp.exp(-x))}[noise]
    ref = float(mp.quad(lambda y: F(y) * (1 - F(y) ** (m - 1)), [-8 if noise == "gumbel" else -mp.inf, 0, mp.inf]))
    got = nm.worst_case_expected_gap(noise=noise, scale=1.0, candidates=m)
    assert got == pytest.approx(ref, rel=1e-9)
    x0, w0 = np.polynomial.legendre.leggauss(20)  # 30 Gauss–Legendre panels of width 2 on [0, 60]
    t = (np.arange(30)[:, None] * 2 + 1 + x0[None, :]).ravel()
    tail = np.array([nm.worst_case_tail(noise=noise, scale=1.0, candidates=m, gap=x) for x in t])
    assert got == pytest.approx(float(np.dot(np.tile(w0, 30), tail)), rel=1e-9)
    if noise == "gumbel":
        assert got == pytest.approx(math.log(5))
    if noise == "exponential":
        assert got == pytest.approx(1 + 1 / 2 + 1 / 3 + 1 / 4 - 1 + 1 / 5)


@settings(max_examples=40, deadline=None)
@given(noise=st.sampled_from(nm.NOISES), m=st.integers(2, 10**5), beta=st.floats(1e-9, 0.9))
def test_gap_for_beta_round_trip(noise, m, beta):
    t = nm.gap_for_beta(noise=noise, scale=1.0, candidates=m, beta=beta)
    assert nm.worst_case_tail(noise=noise, scale=1.0, candidates=m, gap=t) <= beta * (1 + 1e-9)
    if t > 0:
        assert nm.worst_case_tail(noise=noise, scale=1.0, candidates=m, gap=t * (1 - 1e-6)) > beta * (1 - 1e-9)


@settings(max_examples=40, deadline=None)
@given(noise=st.sampled_from(nm.NOISES), m=st.integers(2, 5000), t=st.floats(0, 50))
def test_tail_monotone(noise, m, t):
    p = nm.worst_case_tail(noise=noise, scale=1.0, candidates=m, gap=t)
    assert nm.worst_case_tail(noise=noise, scale=1.0, candidates=m, gap=t + 0.5) <= p + 1e-15
    assert nm.worst_case_tail(noise=noise, scale=1.0, candidates=m + 10, gap=t) >= p - 1e-15
    if noise == "laplace":
        assert p <= nm.worst_case_tail_union(scale=1.0, candidates=m, gap=t) * (1 + 1e-9)


def test_permute_and_flip_never_worse_than_em_in_expectation():
    # McKenna & Sheldon 2020: PF's expected error ≤ EM's; the worst-case bounds agree
    for m in (2, 10, 1000, 10**6):
        assert (nm.worst_case_expected_gap(noise="exponential", scale=1, candidates=m)
                <= nm.worst_case_expected_gap(noise="gumbel", scale=1, candidates=m))


# ---------------------------------------------------------------------------------------------
# exact selection probabilities for given scores


def _pf_closed_form(q, b):
    """McKenna & Sheldon 2020: Pr[r] = p_r Σ_{S ⊆ R∖{r}} (−1)^{|S|} Π_{s∈S} p_s / (|S| + 1)
    (the expansion of p_r ∫₀¹ Π_{s≠r}(1 − p_s x) dx), in mpmath."""
    mp.mp.dps = 40
    qs = max(q)
    p = [mp.exp((x - qs) / b) for x in q]
    out = []
    for r in range(len(q)):
        others = [p[s] for s in range(len(q)) if s != r]
        tot = mp.mpf(0)
        for size in range(len(others) + 1):
            for sub in itertools.combinations(others, size):
                tot += (-1) ** size * mp.fprod(sub) / (size + 1)
        out.append(p[r] * tot)
    return [float(x) for x in out]


def test_pf_probabilities_match_closed_form():
    q = [3.0, 2.5, 0.0, -1.0, 3.0, 1.7]
    got = nm.selection_probabilities(noise="exponential", scores=q, scale=0.8)
    assert got == pytest.approx(_pf_closed_form(q, 0.8), rel=1e-12, abs=1e-15)


def test_gumbel_probabilities_are_the_exponential_mechanism():
    q = np.array([10.0, 8.0, 3.0])
    got = nm.selection_probabilities(noise="gumbel", scores=q, scale=2.0)  # b = 2Δ/ε, ε = Δ = 1
    assert np.allclose(got, exponential_probabilities(scores=q, epsilon=1.0), rtol=1e-14)


# ---------------------------------------------------------------------------------------------
# seeded Monte Carlo: noisy argmax frequencies against the closed forms (fail if a constant is 20% off)

N_MC = 200_000
SCORES = np.array([0.0, -0.5, -1.0, -2.0, -3.0])


def _argmax_freq(noise_sampler, b, seed):
    rng = np.random.default_rng(seed)
    z = noise_sampler(rng, (N_MC, SCORES.size)) * b
    return np.bincount(np.argmax(SCORES + z, axis=1), minlength=SCORES.size) / N_MC


def _check(freq, probs):
    se = np.sqrt(probs * (1 - probs) / N_MC)
    return np.all(np.abs(freq - probs) < 5 * se + 1e-4)


def test_monte_carlo_gumbel_noise_is_the_exponential_mechanism():
    b = nm.noise_scale(epsilon=1.0)  # 2
    freq = _argmax_freq(lambda r, s: r.gumbel(size=s), b, seed=1)
    probs = exponential_probabilities(scores=SCORES, epsilon=1.0)  # exp(ε q/(2Δ)), McSherry & Talwar 2007
    assert _check(freq, probs)
    assert not _check(freq, exponential_probabilities(scores=SCORES, epsilon=1.2))  # constant 20% off
    assert not _check(freq, exponential_probabilities(scores=SCORES, epsilon=0.8))


def test_monte_carlo_exponential_noise_is_permute_and_flip():
    b = nm.noise_scale(epsilon=1.0)
    freq = _argmax_freq(lambda r, s: r.exponential(size=s), b, seed=2)
    assert _check(freq, np.array(_pf_closed_form(SCORES.tolist(), b)))
    assert not _check(freq, np.array(_pf_closed_form(SCORES.tolist(), b * 1.2)))
    assert not _check(freq, np.array(_pf_closed_form(SCORES.tolist(), b / 1.2)))


def test_monte_carlo_worst_case_tail_laplace():
    # the worst case: one candidate at q*, m − 1 just below q* − t; frequency of a bad release = P_m(t)
    m, t, b = 20, 6.0, 1.0
    rng = np.random.default_rng(3)
    z = rng.laplace(size=(N_MC, m)) * b
    bad = (z[:, 1:].max(axis=1) - t > z[:, 0]).mean()
    p = nm.worst_case_tail(noise="laplace", scale=b, candidates=m, gap=t)
    se = math.sqrt(p * (1 - p) / N_MC)
    assert abs(bad - p) < 5 * se
    assert abs(bad - nm.worst_case_tail(noise="laplace", scale=b * 1.2, candidates=m, gap=t)) > 5 * se


def test_utility_bound_holds_on_random_scores():
    # for any scores, Pr[gap > t_β] ≤ β (PF exact probabilities and EM)
    rng = np.random.default_rng(4)
    for _ in range(20):
        q = rng.normal(0, 5, size=rng.integers(2, 60))
        for noise in ("exponential", "gumbel"):
            p = nm.selection_probabilities(noise=noise, scores=q, scale=1.0)
            t = nm.gap_for_beta(noise=noise, scale=1.0, candidates=q.size, beta=0.1)
            assert p[q.max() - q > t].sum() <= 0.1 + 1e-12
            assert np.dot(p, q.max() - q) <= nm.worst_case_expected_gap(noise=noise, scale=1.0,
                                                                       candidates=q.size) + 1e-12


def test_topk_tail_sums_rounds():
    # Σ_{i=1}^k P_{m−i+1}(t) with the Gumbel closed form
    m, k, t = 10, 3, 4.0
    want = sum((m - i) * math.exp(-t) / (1 + (m - i) * math.exp(-t)) for i in range(1, k + 1))
    assert nm.topk_tail(scale=1, candidates=m, top=k, gap=t) == pytest.approx(want)
    g = nm.topk_gap_for_beta(scale=1, candidates=m, top=k, beta=0.05)
    assert nm.topk_tail(scale=1, candidates=m, top=k, gap=g) <= 0.05 * (1 + 1e-9)


def test_noisy_max_result():
    r = nm.noisy_max(noise="exponential", epsilon=1.0, candidates=1000, beta=0.05, gap=10)
    assert r["scale"] == 2.0 and r["epsilon"] == 1.0
    assert r["prob_within"] == pytest.approx(1 - nm.worst_case_tail(noise="exponential", scale=2, candidates=1000,
                                                                     gap=10))
    inv = nm.noisy_max(noise="laplace", scale=4.0, candidates=10, monotonic=True)
    assert inv["epsilon"] == 0.25
    with pytest.raises(ParameterError, match="top"):
        nm.noisy_max(noise="laplace", epsilon=1.0, candidates=10, top=2)
    with pytest.raises(ParameterError, match="top"):
        nm.noisy_max(noise="gumbel", epsilon=1.0, candidates=3, top=4)
    with pytest.raises(ParameterError, match="epsilon"):
        nm.noisy_max(noise="gumbel", epsilon=0.0, candidates=3)


# ---------------------------------------------------------------------------------------------
# exact release


def test_release_pf_exact_distribution():
    # the exact sampler (seeded rng in tests only) reproduces PF's closed form
    q = ["1", "0", "-1"]
    rng = random.Random(5)
    n = 6000
    counts = np.zeros(3)
    for _ in range(n):
        counts[nm.release_noisy_max(noise="exponential", scores=q, epsilon=2, rng=rng)["released"][0]] += 1
    probs = np.array(_pf_closed_form([1.0, 0.0, -1.0], 1.0))
    assert np.all(np.abs(counts / n - probs) < 5 * np.sqrt(probs * (1 - probs) / n))


def test_release_em_exact_distribution_and_topk():
    q = ["2", "1", "0"]
    rng = random.Random(6)
    n = 6000
    counts = np.zeros(3)
    for _ in range(n):
        counts[nm.release_noisy_max(noise="gumbel", scores=q, epsilon=2, rng=rng)["released"][0]] += 1
    probs = exponential_probabilities(scores=[2.0, 1.0, 0.0], epsilon=2.0)
    assert np.all(np.abs(counts / n - probs) < 5 * np.sqrt(probs * (1 - probs) / n))
    res = nm.release_noisy_max(noise="gumbel", scores=q, epsilon=4, top=3, labels=["a", "b", "c"], rng=rng)
    assert sorted(res["released"]) == [0, 1, 2] and len(res["released_labels"]) == 3
    assert res["scale"] == 1.5  # 2·k·Δ/ε
    assert nm.release_noisy_max(noise="laplace", scores=q, epsilon=1, rng=rng).details["exact"] is False


# ---------------------------------------------------------------------------------------------
# reading scores


def test_read_scores_file(tmp_path):
    p = tmp_path / "s.txt"
    p.write_text("# counts\na,10\nb, 8.5\n\nc,1e1\n")
    s = nm.read_scores_file(str(p))
    assert s.labels == ["a", "b", "c"] and s.values.tolist() == [10.0, 8.5, 10.0] and s.texts[2] == "1e1"
    p.write_bytes(b"1\n2\x00\n")
    with pytest.raises(ParameterError, match="binary"):
        nm.read_scores_file(str(p))
    p.write_bytes(b"1\n\xff\xfe\n")
    with pytest.raises(ParameterError, match="UTF-8"):
        nm.read_scores_file(str(p))
    p.write_text("# nothing\n\n")
    with pytest.raises(ParameterError, match="empty"):
        nm.read_scores_file(str(p))
    p.write_text("1\nnan\n")
    with pytest.raises(ParameterError, match="finite"):
        nm.read_scores_file(str(p))
    p.write_text("1\n" * 100)
    with pytest.raises(ParameterError, match="too large"):
        nm.read_scores_file(str(p), max_bytes=50)
    with pytest.raises(ParameterError, match="regular file"):
        nm.read_scores_file("/dev/zero")
    with pytest.raises(ParameterError, match="regular file"):
        nm.read_scores_file(str(tmp_path))
    with pytest.raises(ParameterError, match="cannot be read"):
        nm.read_scores_file(str(tmp_path / "missing.txt"))


# ---------------------------------------------------------------------------------------------
# CLI


def test_cli_table_and_json(run_cli):
    r = run_cli("noisy-max", "--eps", "1", "--candidates", "1000", "--json")
    assert r.exit_code == 0, r.stderr
    out = r.json()
    assert [x["method"] for x in out["results"]] == ["laplace", "exponential", "gumbel"]
    assert all(x["scale"] == 2.0 for x in out["results"])
    g = out["results"][2]
    assert g["gap_at_beta"] == pytest.approx(2 * math.log(999 * 0.95 / 0.05))
    r = run_cli("noisy-max", "--eps", "1", "--candidates", "1000", "--noise", "gumbel", "--top", "10")
    assert r.exit_code == 0 and "gumbel-top-k" in r.stdout


def test_cli_scores_and_release(run_cli, tmp_path):
    p = tmp_path / "s.txt"
    p.write_text("a,10\nb,8\nc,3\n")
    r = run_cli("noisy-max", "--eps", "1", "--scores", str(p), "--gap", "2", "--json")
    assert r.exit_code == 0, r.stderr
    pf = r.json()["results"][1]
    assert pf["details"]["probabilities"] == pytest.approx(_pf_closed_form([10.0, 8.0, 3.0], 2.0), rel=1e-12)
    r = run_cli("noisy-max", "--eps", "1", "--scores", str(p), "--noise", "exponential", "--release", "--json")
    assert r.exit_code == 0, r.stderr
    res = r.json()["results"][0]
    assert res["released"][0] in (0, 1, 2) and res["details"]["exact"] is True


@pytest.mark.parametrize(("args", "needle"), [
    (("--eps", "0", "--candidates", "3"), "--eps must be"),
    (("--eps", "-1", "--candidates", "3"), "--eps must be"),
    (("--eps", "1"), "--candidates is required"),
    (("--eps", "1", "--candidates", "0"), "--candidates must be"),
    (("--eps", "1", "--candidates", "3", "--noise", "laplace", "--top", "2"), "--top must be"),
    (("--eps", "1", "--scores", "/dev/zero"), "regular file"),
    (("--eps", "1", "--scores", "EMPTY"), "--scores is empty"),
    (("--eps", "1", "--scores", "BINARY"), "binary"),
    (("--eps", "1", "--scores", "GOOD", "--release"), "--noise must be chosen"),
    (("--eps", "1", "--candidates", "3", "--beta", "1"), "--beta must be"),
])
def test_cli_bad_input(run_cli, tmp_path, args, needle):
    files = {"EMPTY": b"# nothing\n", "BINARY": b"\x00\x01\x02", "GOOD": b"1\n2\n"}
    args = [str(tmp_path / a) if a in files else a for a in args]
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    r = run_cli("noisy-max", *args)
    assert r.exit_code == 2
    assert r.stderr.startswith("Error: ") and needle in r.stderr and len(r.stderr.strip().splitlines()) == 1


# ---- extremes (issue 17): a gap far beyond the noise, a tiny β ------------------------------------

def test_tail_at_a_huge_gap_is_zero_without_quadrature():
    # t = gap/b = 1e300: Laplace used to lay 1e300 unit panels (ValueError, or GBs for t ~ 1e8);
    # the exponential closed form divided by a = e^{−t} = 0. The union bound (m−1)(1 + t/2)e^{−t}/2
    # ≥ P_m(t) (the docstring of worst_case_tail_union) is 0 in floating point for t > 1000.
    for noise in ("laplace", "exponential", "gumbel"):
        assert nm.worst_case_tail(noise=noise, scale=1.0, candidates=1000, gap=1e300) == 0.0
        assert nm.worst_case_tail(noise=noise, scale=1e-100, candidates=10**12, gap=1e100) == 0.0


def test_laplace_tail_just_beyond_the_quadrature_range_agrees_with_the_union_bound():
    # at t = 1000 the quadrature and the union bound are both 0 to double precision
    assert nm.worst_case_tail(noise="laplace", scale=1.0, candidates=10, gap=1000.0) == 0.0
    assert nm.worst_case_tail(noise="laplace", scale=1.0, candidates=10, gap=1000.5) == 0.0


def test_exponential_gap_for_a_tiny_beta():
    # P_m(t) = (m−1)·a/2 + O(a²) for a = e^{−t} → 0 (module docstring, first term of the series):
    # t(β) = ln((m − 1)/(2β)) to relative 1e-9 at β = 1e-100, the smallest β `dpcalc noisy-max`
    # accepts (RANGES["beta_union"])
    m, beta = 1000, 1e-100
    t = nm.gap_for_beta(noise="exponential", scale=1.0, candidates=m, beta=beta)
    assert t == pytest.approx(math.log(m - 1) - math.log(2) - math.log(beta), rel=1e-9)
