"""Local-DP protocols (issue 27): each variance formula against a simulation (≥ 10⁵ reports, the
empirical per-report variance inside its 99 % confidence interval around the closed form), the
published RAPPOR and Apple parameters, peers (multi-freq-ldpy, pure-ldp) on the same reports, the
ε of each sampler as implemented (an achievable likelihood ratio, never above the stated ε) and the
round trip on 10⁶ Zipf values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpcalc.errors import ParameterError
from dpcalc.mechanisms.ldp import make_oracle, make_rng, rappor_epsilon, synthetic_values
from dpcalc.mechanisms.ldp.cms import APPLE_EMOJI, CountMeanSketch
from dpcalc.mechanisms.ldp.local_hashing import PRIME, collision_probability
from dpcalc.mechanisms.ldp.mean import (
    MEAN_PROTOCOLS,
    alpha_point_round,
    mean_variance,
    randomize_mean,
)

N = 100_000
Z99 = 2.5758293035489004  # the 0.995 normal quantile


def _inside_ci(samples: np.ndarray, sigma2: float) -> tuple[bool, float, float]:
    """Is the sample variance inside its 99 % CI around ``sigma2`` (normal approximation with
    the sample's fourth central moment)?"""
    s2 = float(samples.var(ddof=1))
    m4 = float(((samples - samples.mean()) ** 4).mean())
    # first-order (delta method) plus the second-order term, which dominates for a symmetric
    # two-point variable (Bernoulli(1/2): m4 = s⁴, the first-order term vanishes)
    half = Z99 * math.sqrt(max(m4 - s2 * s2, 0.0) / len(samples)) + Z99**2 * s2 / len(samples)
    return abs(s2 - sigma2) <= half, s2, half


FAST = ["grr", "sue", "oue", "blh", "olh", "hr"]


def _support_indicator(o, reps: np.ndarray, target: int) -> np.ndarray:
    if o.name == "grr":
        return (reps[:, 0] == target).astype(float)
    if o.name in ("sue", "oue", "rappor"):
        return reps[:, target].astype(float)
    if o.name in ("olh", "blh"):
        return (o.hash(reps[:, 0], reps[:, 1], np.int64(target)) == reps[:, 2]).astype(float)
    if o.name == "hr":
        from dpcalc.mechanisms.ldp.hadamard import parity
        return (parity(reps[:, 0] & np.int64(target + 1)) == 0).astype(float)
    if o.name == "ss":
        return (reps == target).any(axis=1).astype(float)
    raise AssertionError(o.name)


@pytest.mark.parametrize("name", FAST + ["ss"])
@pytest.mark.parametrize("eps", [0.5, 2.0])
def test_variance_formula_by_simulation(name, eps):
    """Wang et al. 2017 Thm 2: one report's contribution (S − q*)/(p* − q*) has variance
    p*(1 − p*)/(p* − q*)² for a holder and q*(1 − q*)/(p* − q*)² otherwise; its mean is 1 / 0."""
    k = 64 if name != "ss" else 16
    o = make_oracle(name, eps, k)
    rng = make_rng(1234)
    reps = o.randomize(np.full(N, 5, dtype=np.int64), rng)
    hold_var, other_var = o.report_variances()
    for target, want_var, want_mean in ((5, hold_var, 1.0), (9, other_var, 0.0)):
        c = (_support_indicator(o, reps, target) - o.q_star) / (o.p_star - o.q_star)
        ok, s2, half = _inside_ci(c, want_var)
        assert ok, (name, eps, target, s2, want_var, half)
        assert abs(c.mean() - want_mean) <= Z99 * math.sqrt(want_var / N) * 1.5, (name, target, c.mean())


@pytest.mark.parametrize("hadamard", [False, True])
def test_cms_variance_by_simulation(hadamard):
    """The CMS/HCMS per-report variance (law of total variance over j, flips and hashes) for users
    spread over a domain much larger than the sketch (collisions at their average rate)."""
    o = CountMeanSketch(2.0, 10**6, width=64, hashes=64, hadamard=hadamard, hash_seed=3)
    rng = make_rng(7)
    x = rng.integers(1, 10**6, size=N)
    reps = o.randomize(x, rng)
    j = reps[:, 0]
    pos = o.hash(j, np.zeros(N, dtype=np.int64))
    if hadamard:
        from dpcalc.mechanisms.ldp.hadamard import parity
        z = o.c * (2 * reps[:, 2] - 1) * np.where(parity(reps[:, 1] & pos) == 0, 1, -1)
    else:
        z = o.c / 2 * (2 * reps[np.arange(N), 1 + pos] - 1) + 0.5
    contrib = (z - o.c_m) / (1 - o.c_m)
    ok, s2, half = _inside_ci(contrib, o.report_variances()[1])
    assert ok, (s2, o.report_variances()[1], half)


def test_variance_closed_forms_match_wang_et_al():
    """Wang et al. 2017 Eqs. (2), (4), (5), (9) at f → 0 (n = 1)."""
    e, k = 1.3, 100
    ee = math.exp(e)
    assert make_oracle("grr", e, k).variance(1) == pytest.approx((ee + k - 2) / (ee - 1) ** 2, rel=1e-12)
    assert make_oracle("sue", e, k).variance(1) == pytest.approx(math.exp(e / 2) / (math.exp(e / 2) - 1) ** 2,
                                                                 rel=1e-12)
    assert make_oracle("oue", e, k).variance(1) == pytest.approx(4 * ee / (ee - 1) ** 2, rel=1e-12)
    # OLH at integer g is never better than the real-g optimum 4e^ε/(e^ε − 1)²
    assert make_oracle("olh", e, k).variance(1) >= 4 * ee / (ee - 1) ** 2 * (1 - 1e-9)
    assert make_oracle("hr", e, k).variance(1) == pytest.approx(((ee + 1) / (ee - 1)) ** 2, rel=1e-12)


def test_hash_collision_probability_is_exact_and_close_to_1_over_g():
    # brute force on a small prime would need the family's P; check the closed form's algebra
    for g in (2, 3, 4, 7, 1024, 2**20 + 3):
        assert abs(collision_probability(g) - 1 / g) < 1 / PRIME
        m, t = divmod(PRIME, g)
        assert t * (m + 1) + (g - t) * m == PRIME


@pytest.mark.parametrize("name", ["grr", "sue", "oue", "olh", "blh", "hr", "ss"])
def test_realised_likelihood_ratio_never_exceeds_stated_epsilon(name):
    """The achievable worst case: the largest ratio of the probabilities of one report under two
    inputs, from the realised (grid) probabilities — attained by an explicit report — ≤ e^ε."""
    from decimal import Decimal, getcontext
    from fractions import Fraction as F

    getcontext().prec = 60
    eps = 1.0
    o = make_oracle(name, eps, 32)
    g53 = 2**53
    if name == "grr":
        pt = F(o._threshold, g53)
        ratio = pt * (o.k - 1) / (1 - pt)
    elif name in ("sue", "oue"):
        p, q = F(o._tp, g53), F(o._tq, g53)
        ratio = p * (1 - q) / ((1 - p) * q)
    elif name in ("olh", "blh"):
        pt = F(o._threshold, g53)
        ratio = pt * (o.g - 1) / (1 - pt)
    elif name == "hr":
        pt = F(o._threshold, g53)
        ratio = pt / (1 - pt)
    else:
        pt = F(o._threshold, g53)
        ratio = pt / (1 - pt) * F(o.k - o.d, o.d)
    bound = Decimal(eps).exp()
    assert Decimal(ratio.numerator) / Decimal(ratio.denominator) <= bound
    assert math.log(float(ratio)) >= eps - 1e-12  # and tight: the stated ε is not loose either


@pytest.mark.parametrize("eps", [0.1, 1.0, 4.0])
def test_sketch_and_onebit_realised_epsilon(eps):
    """CMS: two inputs differ in two coordinates, ratio ((1 − φ)/φ)²; HCMS and 1BitMean one bit,
    ratio (1 − φ)/φ — with the realised flip probabilities, never above e^ε (and tight)."""
    from fractions import Fraction as F

    from dpcalc.mechanisms.ldp._core import ceil_grid, floor_grid

    bound = math.exp(eps) * (1 + 1e-15)
    for hadamard, power in ((False, 2), (True, 1)):
        phi = F(CountMeanSketch(eps, 10, width=16, hashes=2, hadamard=hadamard)._tflip, 2**53)
        ratio = ((1 - phi) / phi) ** power
        assert float(ratio) <= math.exp(eps) and float(ratio) >= bound * (1 - 1e-9)
    lo, hi = F(ceil_grid(1 / (math.exp(eps) + 1)), 2**53), F(floor_grid(1 / (1 + math.exp(-eps))), 2**53)
    assert float(hi / lo) <= math.exp(eps) and float((1 - lo) / (1 - hi)) <= math.exp(eps)


def test_rappor_published_example():
    """Erlingsson, Pihur, Korolova 2014 §3: f = 0.5, p = 0.5, q = 0.75, h = 2 give
    ε_∞ = 2h·ln((1 − f/2)/(f/2)) = 4 ln 3 and ε₁ = 2 ln(q*(1 − p*)/(p*(1 − q*))) ≈ 1.0743."""
    r = rappor_epsilon(f=0.5, p=0.5, q=0.75, hashes=2)
    assert r["epsilon_inf"] == pytest.approx(4 * math.log(3), rel=1e-15)
    assert r["epsilon_one"] == pytest.approx(1.0743, abs=5e-5)
    assert (r["q_star"], r["p_star"]) == (0.6875, 0.5625)
    # h hashes multiply: never the one-hash number for h = 2
    assert rappor_epsilon(f=0.5, p=0.5, q=0.75, hashes=1)["epsilon_inf"] == pytest.approx(2 * math.log(3))


def test_apple_emoji_parameters():
    """Apple 2017 (emojis): CMS with m = 1024, k = 65,536 hashes, ε = 4: each bit flipped with
    probability 1/(1 + e^{ε/2}), a 1024-bit (128-byte) privatized vector."""
    o = CountMeanSketch(APPLE_EMOJI["epsilon"], 2600, width=APPLE_EMOJI["width"], hashes=APPLE_EMOJI["hashes"])
    assert o.epsilon == 4.0
    assert o._tflip / 2**53 == pytest.approx(1 / (1 + math.exp(2)), rel=1e-15)
    assert o._tflip / 2**53 >= 1 / (1 + math.exp(2))  # rounded towards more noise
    assert o.bits - 16 == 1024  # the vector; plus log2(65536) = 16 bits of the hash index
    h = CountMeanSketch(4.0, 2600, width=1024, hashes=65536, hadamard=True)
    assert h.bits == 1 + 16 + 10


@pytest.mark.parametrize("protocol", MEAN_PROTOCOLS)
@pytest.mark.parametrize("x0", [0.0, 0.7])
def test_mean_variance_by_simulation(protocol, x0):
    e = 1.0
    r = randomize_mean(protocol, e, np.full(N, x0), make_rng(5))
    vals = r if protocol != "onebit" else (r * (math.exp(e) + 1) - 1) / math.expm1(e)
    ok, s2, half = _inside_ci(vals, float(mean_variance(protocol, e, x0)))
    assert ok, (protocol, x0, s2, half)
    assert abs(vals.mean() - x0) <= Z99 * math.sqrt(s2 / N) * 1.5


def test_alpha_point_rounding_is_unbiased():
    rng = make_rng(2)
    x = np.full(N, 0.37)
    r = alpha_point_round(x, rng.random(N), max_value=1.0, s=4)
    assert set(np.unique(r)) <= {0.25, 0.5}
    assert abs(r.mean() - 0.37) < 4 * math.sqrt(0.25 * 0.25 / 4 / N)


def test_round_trip_zipf_million_hadamard():
    """randomize → estimate on 10⁶ Zipf values: the truth inside ±2.576 printed SEs (the 99 %
    interval) for ≥ 95 % of the categories."""
    o = make_oracle("hr", 1.0, 1024)
    rng = make_rng(11)
    x = synthetic_values("zipf", 1024, 10**6, rng)
    est = o.estimate(o.support(o.randomize(x, rng)), len(x), project=True)
    true = np.bincount(x, minlength=1024) / len(x)
    inside = np.abs(est.estimates - true) <= Z99 * est.standard_errors
    assert inside.mean() >= 0.95, inside.mean()
    assert est.projected.min() >= 0 and est.projected.sum() == pytest.approx(1.0)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["olh", "oue", "grr"])
def test_round_trip_zipf_million_slow(name):
    """As above for olh, oue, grr (olh's server hashes 10⁶ × 1024 pairs, oue draws 10⁹ bits: ~1 min each)."""
    o = make_oracle(name, 1.0, 1024)
    rng = make_rng(12)
    x = synthetic_values("zipf", 1024, 10**6, rng)
    agg = sum(o.support(o.randomize(x[i:i + 50_000], rng)) for i in range(0, len(x), 50_000))
    est = o.estimate(agg, len(x))
    true = np.bincount(x, minlength=1024) / len(x)
    assert (np.abs(est.estimates - true) <= Z99 * est.standard_errors).mean() >= 0.95


# --- peers on the same reports --------------------------------------------------------------

def _peer_mi(counts, n, p, q):
    """multi-freq-ldpy's matrix-inversion estimator (MI: unbiased, then clipped and renormalised)."""
    mi = pytest.importorskip("multi_freq_ldpy.estimators.Histogram_estimator")
    return mi.MI(np.asarray(counts, dtype=float), n, p, q)


@pytest.mark.parametrize("name", ["grr", "oue", "sue", "ss"])
def test_against_multi_freq_ldpy_parameters_and_estimator(name):
    """multi-freq-ldpy's (p, q) for the same protocol and its MI estimate on our reports' counts
    equal our estimate after the same clip-and-renormalise."""
    pytest.importorskip("multi_freq_ldpy")
    eps, k = 1.0, 20
    o = make_oracle(name, eps, k)
    ee = math.exp(eps)
    if name == "grr":
        p, q = ee / (ee + k - 1), 1 / (ee + k - 1)
    elif name == "oue":
        p, q = 0.5, 1 / (ee + 1)
    elif name == "sue":
        p, q = math.exp(eps / 2) / (math.exp(eps / 2) + 1), 1 / (math.exp(eps / 2) + 1)
    else:
        d = int(max(1, np.rint(k / (ee + 1))))
        assert d == o.d
        p = d * ee / (d * ee + k - d)
        q = ((d - 1) * (d * ee) + (k - d) * d) / ((k - 1) * (d * ee + k - d))
    assert o.p_star == pytest.approx(p, rel=1e-14) and o.q_star == pytest.approx(q, rel=1e-14)
    rng = make_rng(3)
    reps = o.randomize(synthetic_values("zipf", k, 20000, rng), rng)
    sup = o.support(reps)
    ours = np.clip(o.estimate(sup, len(reps)).estimates, 0, None)
    ours /= ours.sum()
    np.testing.assert_allclose(_peer_mi(sup, len(reps), p, q), ours, rtol=1e-9, atol=1e-12)


def pure_ldp_module(sub: str):
    """A pure-ldp frequency-oracle subpackage (``"unary_encoding"``, ...), or None when pure-ldp is
    not installed. pure_ldp.frequency_oracles' own __init__ imports every oracle, RAPPOR's server
    needing statsmodels (not a declared dependency of pure-ldp 1.2): the package is registered
    without running that __init__, and only the subpackage asked for is imported."""
    import importlib
    import importlib.util
    import sys
    import types

    try:
        spec = importlib.util.find_spec("pure_ldp")
    except ImportError:  # pragma: no cover
        return None
    if spec is None:
        return None
    name = "pure_ldp.frequency_oracles"
    if name not in sys.modules:
        pkg = types.ModuleType(name)
        pkg.__path__ = [str(__import__("pathlib").Path(spec.origin).parent / "frequency_oracles")]
        sys.modules[name] = pkg
    return importlib.import_module(f"{name}.{sub}")


def test_against_pure_ldp_unary_server_on_the_same_reports():
    """pure-ldp's UEServer (OUE) aggregating our reports gives our unbiased count estimates."""
    ue = pure_ldp_module("unary_encoding")
    if ue is None:
        pytest.skip("pure-ldp (bench extra) not installed")
    eps, k = 1.5, 16
    o = make_oracle("oue", eps, k)
    rng = make_rng(9)
    reps = o.randomize(synthetic_values("zipf", k, 5000, rng), rng)
    server = ue.UEServer(epsilon=eps, d=k, use_oue=True)
    for r in reps:
        server.aggregate(r.astype(float))
    theirs = np.array([server.estimate(v + 1, suppress_warnings=True) for v in range(k)])
    ours = o.estimate(o.support(reps), len(reps)).estimates * len(reps)
    np.testing.assert_allclose(theirs, ours, rtol=1e-12, atol=1e-6)


# --- bad input ------------------------------------------------------------------------------

def test_bad_parameters_are_refused():
    with pytest.raises(ParameterError, match="epsilon"):
        make_oracle("olh", 0.0, 10)
    with pytest.raises(ParameterError, match="domain_size"):
        make_oracle("grr", 1.0, 1)
    with pytest.raises(ParameterError, match="1,000,000,000,000 bits"):
        make_oracle("oue", 1.0, 10**12)
    with pytest.raises(ParameterError, match="domain"):
        make_oracle("grr", 1.0, 10).randomize(np.array([3, 10]), make_rng(1))


def test_against_pure_ldp_direct_encoding_server_on_the_same_reports():
    de = pure_ldp_module("direct_encoding")
    if de is None:
        pytest.skip("pure-ldp (bench extra) not installed")
    eps, k = 1.0, 12
    o = make_oracle("grr", eps, k)
    rng = make_rng(4)
    reps = o.randomize(synthetic_values("zipf", k, 5000, rng), rng)
    server = de.DEServer(epsilon=eps, d=k)
    for r in reps[:, 0]:
        server.aggregate(int(r))  # DEClient reports the 0-based index
    theirs = np.array([server.estimate(v + 1, suppress_warnings=True) for v in range(k)])
    ours = o.estimate(o.support(reps), len(reps)).estimates * len(reps)
    # pure-ldp uses the nominal p, q; ours the realised (2⁻⁵³-grid) ones: equal to ~1e-12
    np.testing.assert_allclose(theirs, ours, rtol=1e-9, atol=1e-6)


def test_basic_rappor_variance_and_realised_epsilon():
    """Basic RAPPOR (h = 1) at the paper's f, p, q: support probabilities q*, p* of §3, the
    per-report variance by simulation, and the realised ε₁, ε_∞ (grid probabilities) ≤ stated."""
    o = make_oracle("rappor", None, 32, rappor_f=0.5, rappor_p=0.5, rappor_q=0.75)
    assert o.epsilon == pytest.approx(0.5 * 1.074285864166728) and o.epsilon_inf == pytest.approx(2 * math.log(3))
    assert (o.p_star, o.q_star) == pytest.approx((0.6875, 0.5625), abs=1e-15)
    rng = make_rng(21)
    reps = o.randomize(np.full(N, 2, dtype=np.int64), rng)
    hold_var, other_var = o.report_variances()
    for target, want in ((2, hold_var), (7, other_var)):
        c = (reps[:, target] - o.q_star) / (o.p_star - o.q_star)
        ok, s2, half = _inside_ci(c, want)
        assert ok, (target, s2, want, half)
    fh = o._th / 2**53
    assert 2 * math.log((1 - fh) / fh) <= o.epsilon_inf
    assert math.log(o.p_star * (1 - o.q_star) / (o.q_star * (1 - o.p_star))) <= o.epsilon


def test_subset_selection_report_order_reveals_nothing():
    """The released tuple, not only the set, must be ε-LDP: with the true value written at a random
    position among sorted others, an out-of-order tuple named x (ratio ∞; found in review). Every
    report is now sorted, and the tuples' empirical distributions under two inputs share one support
    with ratios within e^ε (k = 8, d = 2: 28 tuples, 4·10⁵ reports per input)."""
    from collections import Counter

    eps = 1.0
    o = make_oracle("ss", eps, 8)
    assert o.d == 2
    rng = make_rng(7)
    dists = []
    for x in (0, 7):
        r = o.randomize(np.full(400_000, x), rng)
        assert (np.diff(r, axis=1) > 0).all()  # sorted, distinct
        c = Counter(map(tuple, r.tolist()))
        dists.append({t: n / len(r) for t, n in c.items()})
    assert set(dists[0]) == set(dists[1])
    worst = max(max(a / dists[1][t], dists[1][t] / a) for t, a in dists[0].items())
    assert worst <= math.exp(eps) * 1.1  # sampling error of ≥ 0.01-probability tuples: < 10%


def test_estimate_stream_equals_one_aggregate_and_refuses_no_reports():
    """The streamed estimate (chunk by chunk, as `dpcalc ldp estimate` reads) is the estimate of the
    whole batch's support counts; an empty stream is a one-line ParameterError."""
    o = make_oracle("oue", 1.0, 8)
    rng = make_rng(5)
    reps = o.randomize(synthetic_values("zipf", 8, 3000, rng), rng)
    est, n = o.estimate_stream(reps[i:i + 700] for i in range(0, len(reps), 700))
    whole = o.estimate(o.support(reps), len(reps))
    assert n == len(reps)
    np.testing.assert_array_equal(est.estimates, whole.estimates)
    with pytest.raises(ParameterError, match="no reports"):
        o.estimate_stream(iter(()))
