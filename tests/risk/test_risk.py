"""dpcalc.risk trade-off curves and ``dpcalc risk`` (issue 13).

References: μ-GDP trade-off G_μ(α) = Φ(Φ⁻¹(1−α) − μ) (Dong, Roth, Su 2022 Def 2.7), evaluated
independently with mpmath at 50 digits; pure ε-DP curve max{0, 1 − e^ε α, e^{−ε}(1 − α)}
(Kairouz, Oh, Viswanath 2015 Thm 2.1); the unsampled Gaussian with σ = 10 composed 100 times is
exactly 1-GDP (DRS 2022 Cor 3.3), so its certified PLD envelope must lie below G_1 and its
upper envelope above it.
"""

from __future__ import annotations

import json
import math

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcalc.events import dpsgd_event
from dpcalc.risk import curve_from_accountant, gdp_curve, pair_curve
from dpcalc.risk import tradeoff as t

ALPHAS = np.concatenate([np.logspace(-8, -0.0001, 120), np.linspace(0.01, 0.99, 99)])


def _gdp_mp(alpha: float, mu: float) -> float:
    mpmath.mp.dps = 50
    a = mpmath.mpf(alpha)
    z = -mpmath.sqrt(2) * mpmath.erfinv(2 * a - 1)  # Φ⁻¹(1 − α)
    return float(mpmath.ncdf(z - mu))


@pytest.mark.parametrize("mu", [0.1, 0.5, 1.0, 3.0])
def test_gdp_curve_matches_mpmath(mu):
    got = t.gdp_tradeoff(ALPHAS, mu)
    ref = np.array([_gdp_mp(a, mu) for a in ALPHAS])
    assert np.max(np.abs(got - ref)) < 1e-9


def test_pure_dp_curve_closed_form():
    eps = 1.3
    c = pair_curve(eps, 0.0)
    ref = np.maximum(0.0, np.maximum(1 - math.exp(eps) * ALPHAS, math.exp(-eps) * (1 - ALPHAS)))
    assert np.allclose(c.tradeoff(ALPHAS), ref, atol=1e-14, rtol=0)
    assert np.all(c.tradeoff(ALPHAS) <= ref)  # never above: certified side


@pytest.fixture(scope="module")
def gaussian_pld():
    ev = dpsgd_event(noise_multiplier=10.0, sample_rate=1.0, steps=100)  # exactly 1-GDP
    return curve_from_accountant(ev, accountant="pld", delta=1e-5)


def test_pld_curve_brackets_exact_gdp(gaussian_pld):
    curve, head = gaussian_pld
    exact = gdp_curve(1.0).tradeoff(ALPHAS)
    low = curve.tradeoff(ALPHAS)
    high = 1.0 - curve.tpr_lower(ALPHAS)
    assert np.all(low <= exact + 1e-12)  # certified envelope below the exact curve
    assert np.all(high >= exact - 1e-12)  # the stated bracket contains it
    gap = curve.gap()
    assert 0 < gap < 0.02
    assert np.max(exact - low) <= gap + 1e-12  # within the stated gap


def test_curve_convex_nonincreasing_and_below_pair(gaussian_pld):
    curve, head = gaussian_pld
    a = np.linspace(0.0, 1.0, 2001)
    f = curve.tradeoff(a)
    assert np.all(np.diff(f) <= 1e-15)
    second = f[:-2] - 2 * f[1:-1] + f[2:]
    assert np.all(second >= -1e-12)
    # never above the single-pair curve where both are certified: the envelope includes the pair's information
    single = t.pair_tradeoff(a, head.epsilon, 1e-5)
    assert np.all(f >= single - 1e-12)  # the full curve is at least as strong (type-II error ≥)
    # attack bounds: full curve ≤ single pair
    rows = curve.bounds(fprs=[1e-4, 1e-3, 1e-2, 1e-1], priors=[0.5, 0.1], baselines=[1e-3],
                        pair=(head.epsilon, 1e-5))
    for r in rows:
        assert r["bound"] <= r["single_pair"] * (1 + 1e-12), r
        if r["bound_lower"] is not None:
            assert r["bound_lower"] <= r["bound"]


def test_exact_gdp_bounds_are_closed_forms():
    from scipy.special import ndtr

    c = gdp_curve(1.0)
    adv, adv_lo = c.advantage()
    assert adv == pytest.approx(2 * ndtr(0.5) - 1, rel=1e-13)  # TV distance of N(0,1), N(1,1)
    rows = c.bounds(fprs=[1e-3], pair=None)
    assert rows[0]["bound"] == pytest.approx(float(ndtr(-3.090232306167813 + 1.0)), rel=1e-9)


@settings(max_examples=40, deadline=None)
@given(eps=st.floats(0.0, 10.0), delta=st.floats(0.0, 0.5), swap=st.booleans())
def test_pair_curve_symmetric_and_convex(eps, delta, swap):
    # f_{ε,δ} is symmetric: f(f(α)) = α on [0, 1−δ] (its graph is symmetric about the diagonal)
    a = np.linspace(0.0, 1.0 - delta, 201)
    f = t.pair_tradeoff(a, eps, delta)
    back = t.pair_tradeoff(f, eps, delta)
    assert np.allclose(back, a, atol=1e-9)
    assert np.all(np.diff(f) <= 1e-15)
    assert np.all(f[:-2] - 2 * f[1:-1] + f[2:] >= -1e-12)


@settings(max_examples=30, deadline=None)
@given(eps=st.lists(st.floats(0.0, 8.0), min_size=1, max_size=6),
       d=st.lists(st.floats(0.0, 0.2), min_size=6, max_size=6))
def test_envelope_dominates_each_pair(eps, d):
    d = d[: len(eps)]
    a = np.linspace(0.0, 1.0, 301)
    env = t.envelope(a, eps, d)
    for e, dd in zip(eps, d, strict=True):
        assert np.all(env >= t.pair_tradeoff(a, e, dd) - 1e-15)


def test_upper_envelope_above_profile_curve():
    # profile of 1-GDP known exactly at a coarse grid: the upper points' envelope is above G_1
    from dpcalc.mechanisms.gaussian import gaussian_delta

    e = np.array([0.0, 0.3, 0.8, 1.5, 2.5, 4.0])
    dl = np.array([gaussian_delta(epsilon=x, mu=1.0) for x in e])
    ec, dc = t.upper_envelope_points(e, dl, dl)
    up = t.envelope(ALPHAS, ec, dc)
    assert np.all(up >= gdp_curve(1.0).tradeoff(ALPHAS) - 1e-12)


def test_rdp_region_certified_against_gaussian():
    # the Gaussian with μ = 1 has RDP ε(a) = a/2 (Mironov 2017 Prop 7); its binary Rényi region
    # must contain the exact GDP ROC (TPR bound ≥ exact TPR)
    orders = np.array([1.5, 2, 3, 5, 8, 16, 32])
    tpr = t.rdp_tpr(ALPHAS, orders, orders / 2.0)
    exact = t.gdp_tpr(ALPHAS, 1.0)
    assert np.all(tpr >= exact - 1e-12)


def test_rdp_accountant_curve_is_above_pld():
    ev = dpsgd_event(noise_multiplier=4.0, sample_rate=0.01, steps=1000)
    rdp, _ = curve_from_accountant(ev, accountant="rdp", delta=1e-5)
    pld, _ = curve_from_accountant(ev, accountant="pld", delta=1e-5)
    a = np.logspace(-5, -0.5, 40)
    assert np.all(rdp.tpr(a) >= pld.tpr_lower(a) - 1e-12)


# ---------------------------------------------------------------------- CLI
def test_cli_risk_table_and_json(run_cli):
    r = run_cli("risk", "--sigma", "10", "--steps", "100", "--delta", "1e-5", "--fpr", "0.05", "--prior", "0.1",
                "--baseline", "1e-3", "--json")
    assert r.exit_code == 0, r.stderr
    out = r.json()
    assert out["command"] == "risk"
    rows = {(x["quantity"], x.get("fpr") or x.get("prior") or x.get("baseline")): x for x in out["results"]}
    assert ("tpr_at_fpr", 0.05) in rows and ("reconstruction", 1e-3) in rows
    exact = float(t.gdp_tpr(1e-3, 1.0))
    assert rows[("tpr_at_fpr", 1e-3)]["bound"] >= exact  # certified ≥ exact 1-GDP
    assert rows[("tpr_at_fpr", 1e-3)]["bound_lower"] <= exact
    table = run_cli("risk", "--gdp", "1", "--delta", "1e-5")
    assert table.exit_code == 0 and "TPR at FPR = 0.001" in table.stdout


@pytest.mark.parametrize("args,needle", [
    (("--eps", "1", "--delta", "1e-5", "--fpr", "0"), "--fpr must be in (0, 1)"),
    (("--eps", "1", "--delta", "1e-5", "--fpr", "1.5"), "--fpr must be in (0, 1)"),
    (("--eps", "1", "--delta", "1e-5", "--prior", "1"), "--prior must be in (0, 1)"),
    (("--eps", "1", "--delta", "2"), "--delta must be in [0, 1)"),
    (("--sigma", "1", "--steps", "10"), "--delta is needed with --sigma and --spec"),
    (("--sigma", "1", "--steps", "10", "--delta", "0"), "--delta is needed with --sigma and --spec"),
    (("--eps", "1", "--gdp", "1", "--delta", "1e-5"), "exactly one of"),
    (("--gdp", "-1", "--delta", "1e-5"), "mu"),
])
def test_cli_risk_bad_input(run_cli, args, needle):
    r = run_cli("risk", *args)
    assert r.exit_code == 2
    assert needle in r.stderr and r.stderr.count("\n") == 1


@pytest.mark.parametrize("args", [("--eps", "1", "--delta", "0"), ("--eps", "1")])
def test_cli_risk_pure_dp(run_cli, args):
    """Pure ε-DP: TPR ≤ min(e^ε·α, 1 − e^{−ε}(1 − α)) (Kairouz, Oh, Viswanath 2015 Thm 2.1 at δ = 0),
    attained by randomized response with ε (an achievable bound: the table's lower end is it)."""
    r = run_cli("risk", *args, "--fpr", "0.01", "--json")
    assert r.exit_code == 0, r.stderr
    out = r.json()
    assert out["inputs"]["delta"] == 0
    row = next(x for x in out["results"] if x.get("fpr") == 0.01)
    exact = math.e * 0.01  # closed form; 1 − e^{−1}(0.99) = 0.636 is larger
    assert exact <= row["bound"] <= exact * (1 + 1e-12)
    assert exact * (1 - 1e-12) <= row["bound_lower"] <= exact * (1 + 1e-12)
    table = run_cli("risk", *args, "--fpr", "0.01").stdout
    assert "[0.0271828, 0.0271829]" in table  # e·0.01 = 0.02718281828…, bracketed outward


@pytest.mark.parametrize("extra", [(), ("--delta", "0")])
def test_cli_risk_gdp_without_delta(run_cli, extra):
    """μ-GDP needs no δ: TPR at FPR α is Φ(Φ⁻¹(α) + μ) (Dong, Roth, Su 2022 Def 2.7);
    Φ(Φ⁻¹(1e-3) + 1) = 0.0182984684056566 (scipy.stats.norm, mpmath agree)."""
    r = run_cli("risk", "--gdp", "1", *extra, "--fpr", "1e-3", "--json")
    assert r.exit_code == 0, r.stderr
    row = next(x for x in r.json()["results"] if x.get("fpr") == 1e-3)
    assert row["single_pair"] is None
    assert abs(row["bound"] - 0.0182984684056566) < 1e-13
    table = run_cli("risk", "--gdp", "1", *extra, "--fpr", "1e-3").stdout
    assert "0.0182985" in table and "alone" not in table


def test_cli_risk_plot(run_cli, tmp_path):
    pytest.importorskip("matplotlib")
    p = tmp_path / "r.png"
    r = run_cli("risk", "--eps", "2", "--delta", "1e-5", "--plot", str(p))
    assert r.exit_code == 0 and p.stat().st_size > 10_000


def test_risk_past_epsilon_700_does_not_overflow(run_cli):
    """A nearly non-private run (σ = 0.05, q = 0.1, T = 354: certified ε ≈ 1.2e4 under pld) once
    crashed `dpcalc risk` (e^ε overflowed in the bracket and the pair columns). Every bound is
    then 1: with (ε, δ) = (1.2e4, 1e-5), f_{ε,δ}(α) = max{0, 1 − δ − e^ε α, e^{−ε}(1 − δ − α)} is
    below e^{−ε} < 1e-300 for every α ≥ 1e-300 (KOV 2015 Thm 2.1), so TPR ≤ 1 is all that holds."""
    r = run_cli("risk", "--sigma", "0.05", "--sample-rate", "0.1", "--steps", "354", "--delta", "1e-5",
                "--json")
    assert r.exit_code == 0, r.stderr
    rows = [x for x in r.json()["results"] if x["quantity"] == "tpr_at_fpr"]
    assert rows and all(x["bound"] == 1.0 and x["single_pair"] == 1.0 for x in rows)
    assert all(0.99 < x["bound_lower"] <= 1.0 for x in rows)
    # the overflow-free forms agree with the closed forms where both are finite
    assert t.pair_advantage(700.0, 1e-5) == pytest.approx((math.expm1(700) + 2e-5) / (math.exp(700) + 1))
    assert t.pair_advantage(800.0, 1e-5) == 1.0
    # e^800·1e-305 > 1: the TPR bound is 1 (a cap of e^ε at e^700 gave 0.1 here, below the truth)
    assert float(t.envelope_tpr(1e-305, [800.0], [0.0])) == 1.0
    e, d = t.upper_envelope_points([0.0, 800.0, 1600.0], [0.3, 0.0, 0.0], [0.31, 1e-9, 0.0])
    assert e.tolist() == [0.0] and d.tolist() == [0.3]  # (0, δ_lower(0)) alone: DRS Prop 2.12


# ---- extremes (issue 17): e^ε beyond floating point ------------------------------------------------

def test_pair_tradeoff_beyond_exp_overflow():
    # f_{ε,δ}(α) = max{0, 1 − δ − e^ε α, e^{−ε}(1 − δ − α)} (DRS Prop 2.5): at ε = 710, α = 1e-310,
    # e^ε·α = exp(710 − 310 ln 10) (mpmath); math.exp(710) used to raise OverflowError
    eps, a = 710.0, 1e-310
    expected = 1 - float(mpmath.exp(mpmath.mpf(eps)) * mpmath.mpf(a))
    got = t.pair_tradeoff(np.array([0.0, a, 0.5]), eps, 0.0)
    assert got[0] == 1.0
    assert got[1] == pytest.approx(expected, rel=1e-12)
    assert got[2] == pytest.approx(float(mpmath.exp(-eps) * 0.5), rel=1e-9)  # e^{−ε}(1 − δ − α), subnormal
    # continuous across the switch at ε = 700
    x = np.array([1e-305, 1e-304])
    assert np.allclose(t.pair_tradeoff(x, 700.0, 1e-5), t.pair_tradeoff(x, np.nextafter(700.0, 800), 1e-5),
                       rtol=1e-12, atol=0)


def test_pair_bounds_beyond_exp_overflow():
    # advantage (e^ε − 1 + 2δ)/(e^ε + 1) = 1 − 2(1 − δ)/(e^ε + 1) = 1.0 in floating point;
    # a Bayes attacker with prior π guesses right with probability → 1 (kink at α ≈ 0)
    assert t.pair_advantage(710.0, 1e-5) == 1.0
    assert t.pair_prior_success(0.5, 710.0, 1e-5) == pytest.approx(1.0, abs=1e-12)
    assert t.pair_prior_success(0.5, 710.0, 1e-5) <= 1.0


@pytest.mark.parametrize("args", [["--eps", "1e4", "--delta", "1e-5"], ["--gdp", "1e100", "--delta", "1e-5"],
                                  ["--sigma", "1e-3", "-q", "1", "--steps", "100", "--delta", "1e-5",
                                   "--accountant", "rdp"]])
def test_risk_answers_where_e_to_the_eps_overflows(run_cli, args):
    # ε (or the head ε of the curve) beyond 709.78 used to end in OverflowError
    r = run_cli("risk", *args, "--json")
    assert r.exit_code == 0, r.stderr
    rows = [x for x in json.loads(r.stdout)["results"] if x.get("quantity") == "advantage"]
    assert rows and rows[0]["bound"] <= 1.0
