"""Repeat-and-select (``dpcalc tune``, :mod:`dpcalc.accounting.tuning`, :class:`TuningEvent`).

References: Papernot & Steinke 2022 ("Hyperparameter tuning with Rényi differential privacy",
ICLR): Thm 2 (truncated negative binomial), Cor 3 (pure DP: (2+η)ε), Cor 4 (ρ-zCDP base:
closed form), Thm 6 (Poisson); Liu & Talwar 2019 (geometric stopping: 3ε). The closed forms
below are written out independently of the implementation (as in dp_accounting's own tests of
``RepeatAndSelectDpEvent``, rdp_privacy_accountant_test.py). We found no table of printed
example values in the paper (its Figure 7 is a plot), so the closed-form corollaries are the
published reference values.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcalc.accounting.rdp import DEFAULT_ORDERS, RdpAccountant, rdp_laplace
from dpcalc.accounting.registry import available, get_accountant
from dpcalc.accounting.tuning import repeat_and_select_rdp, tnb_gamma, tnb_mean
from dpcalc.errors import ParameterError, UnsupportedEventError
from dpcalc.events import (
    GaussianEvent,
    LaplaceEvent,
    SelfComposedEvent,
    TuningEvent,
    dpsgd_event,
)

DELTA = 1e-5
BASE = dpsgd_event(noise_multiplier=1.0, sample_rate=0.01, steps=1000)
LAWS = [("poisson", 10.0, None), ("geometric", 10.0, None), ("logarithmic", 10.0, None),
        ("negative-binomial", 10.0, 0.5), ("negative-binomial", 100.0, 2.0), ("poisson", 3.0, None)]


def _one_line_error(r, code: int = 2) -> str:
    assert r.exit_code == code, (r.exit_code, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""
    return lines[0]


# ----------------------------------------------------------------------------- the law of K
@pytest.mark.parametrize("eta", [-0.5, 0.0, 0.5, 1.0, 3.0])
@pytest.mark.parametrize("mean", [1.5, 10.0, 1000.0])
def test_tnb_gamma_inverts_the_mean_on_the_safe_side(eta, mean):
    g = tnb_gamma(mean, eta)
    assert 0 < g < 1
    assert tnb_mean(g, eta) >= mean  # γ rounded down: E[K] errs high
    assert tnb_mean(g, eta) == pytest.approx(mean, rel=1e-9)


def test_geometric_mean_is_one_over_gamma():
    # geometric law P[K = k] = γ(1−γ)^{k−1}: E[K] = 1/γ (Liu & Talwar 2019)
    assert tnb_gamma(10.0, 1.0) == pytest.approx(0.1, rel=1e-12)


# ----------------------------------------------------------------------------- closed forms
@pytest.mark.parametrize("law,eta", [("geometric", 1.0), ("logarithmic", 0.0), ("negative-binomial", 0.5),
                                     ("negative-binomial", 3.0)])
@pytest.mark.parametrize("eps0", [0.1, 1.0])
def test_pure_dp_base_gives_two_plus_eta_epsilon(law, eta, eps0):
    # Papernot & Steinke Cor 3: ε-DP runs ⇒ (2+η)ε-DP search; geometric: 3ε (Liu & Talwar 2019)
    ev = TuningEvent(LaplaceEvent(1.0 / eps0), law, 50.0, eta if law == "negative-binomial" else None)
    res = RdpAccountant().epsilon(ev, delta=1e-10)
    assert res.epsilon == pytest.approx((2.0 + eta) * eps0, rel=1e-12)
    assert res.details["pure_dp"] is True
    # and every δ: δ(ε) = 0 at that ε
    assert RdpAccountant().delta(ev, epsilon=(2.0 + eta) * eps0).delta == 0.0


@pytest.mark.parametrize("rho,gamma,shape", [(0.01, 0.01, 0.0), (1.0, 0.1, 0.0), (0.01, 0.01, 0.5),
                                              (1.0, 0.1, 0.5), (0.01, 0.01, 1.0), (1.0, 0.1, 1.0),
                                              (0.01, 0.01, 5.0), (1.0, 0.1, 5.0), (0.5, 0.3, 2.0)])
def test_gaussian_base_matches_corollary_4(rho, gamma, shape):
    # Papernot & Steinke Cor 4 (ρ-zCDP base, ρ ≤ log 1/γ): for λ ≥ 1 + √(log E[K]/ρ)
    # ε′(λ) = ρ(λ−1) + log E[K]/(λ−1) + 2(1+η)√(ρ log(1/γ)) − ηρ, below it the value there
    mean = tnb_mean(gamma, shape)
    lam_hat = math.sqrt(-math.log(gamma) / rho)
    lam_star = 1 + math.sqrt(math.log(mean) / rho)
    orders = np.array(sorted({1.1, 2.0, lam_hat, lam_star, 3.0, 5.0, 10.0, 100.0, 1000.0, 10000.0}))
    orders = orders[orders > 1]
    out = repeat_and_select_rdp(orders, rho * orders, distribution="negative-binomial", mean_runs=mean,
                                eta=shape)
    const = 2 * (1 + shape) * math.sqrt(-rho * math.log(gamma)) - shape * rho
    for lam, got in zip(orders, out, strict=True):
        x = max(lam, lam_star)
        want = rho * (x - 1) + math.log(mean) / (x - 1) + const
        assert got == pytest.approx(want, rel=1e-9, abs=1e-12), lam


@pytest.mark.parametrize("eps0,mean", [(1.0, 1.0), (0.1, 2.0), (10.0, 10.0), (0.001, 100.0),
                                       (2.0, 1000.0), (1.0, 1e6)])
def test_pure_poisson_closed_form(eps0, mean):
    # Thm 6 with ε̂ = log(1 + 1/(α−1)) = ε₀ at α = 1 + 1/(e^ε₀ − 1): δ̂ = 0, so
    # ε′(α) = (Laplace RDP at α) + log(μ)·(e^ε₀ − 1)   (Mironov 2017 Table 2 for the Laplace RDP)
    alpha = 1 + 1 / math.expm1(eps0)
    lap = eps0 + math.log1p(math.expm1((1 - 2 * alpha) * eps0) * (alpha - 1) / (2 * alpha - 1)) / (alpha - 1)
    want = max(lap + math.log(mean) * math.expm1(eps0), 0.0)
    one = np.array([alpha])
    out = repeat_and_select_rdp(one, rdp_laplace(scale=1 / eps0, orders=one), distribution="poisson",
                                mean_runs=mean, pure=eps0)
    assert out[0] == pytest.approx(want, rel=1e-9, abs=1e-12)
    # with a larger order too, its bound may cap this one (RDP grows with the order): never above
    two = np.array([alpha, 1e4])
    out2 = repeat_and_select_rdp(two, rdp_laplace(scale=1 / eps0, orders=two), distribution="poisson",
                                 mean_runs=mean, pure=eps0)
    assert out2[0] <= want * (1 + 1e-12) + 1e-15


@pytest.mark.parametrize("sigma,mean", [(1.0, 1.0), (1.0, 1000.0), (3.0, 10.0), (10.0, 1e4), (0.7, 5.0)])
def test_gaussian_poisson_closed_form(sigma, mean):
    # Thm 6 with the exact Gaussian δ̂(ε̂) (Balle & Wang 2018 Thm 8, written with math.erfc):
    # ε′(λ) = λ/(2σ²) + μ·δ̂ + log(μ)/(λ − 1), then the minimum over larger orders
    acc = RdpAccountant()
    got = acc.rdp(TuningEvent(GaussianEvent(sigma), "poisson", mean))
    orders = np.asarray(DEFAULT_ORDERS)
    want = []
    for lam in orders:
        e = math.log1p(1 / (lam - 1))
        x = (e * sigma - 0.5 / sigma) / math.sqrt(2)
        y = (e * sigma + 0.5 / sigma) / math.sqrt(2)
        d = math.erfc(x) / 2 - math.exp(e) * math.erfc(y) / 2
        want.append(lam / (2 * sigma ** 2) + mean * d + math.log(mean) / (lam - 1))
    # larger orders of the implementation's grid (up to 1024) may cap the last ones: ≤ there
    want = np.minimum.accumulate(np.maximum(want, 0.0)[::-1])[::-1]
    np.testing.assert_allclose(got[:-8], want[:-8], rtol=1e-9, atol=1e-12)
    assert np.all(got <= want * (1 + 1e-9) + 1e-12)


def test_k_equal_one_is_a_single_run():
    acc = RdpAccountant()
    one = acc.epsilon(BASE, delta=DELTA).epsilon
    for law in ("geometric", "logarithmic"):
        assert acc.epsilon(TuningEvent(BASE, law, 1.0), delta=DELTA).epsilon == one
    assert acc.epsilon(TuningEvent(BASE, "negative-binomial", 1.0, 0.7), delta=DELTA).epsilon == one


def test_logarithmic_is_the_eta_to_zero_limit_and_geometric_is_eta_one():
    acc = RdpAccountant()
    log = acc.epsilon(TuningEvent(BASE, "logarithmic", 20.0), delta=DELTA).epsilon
    near = acc.epsilon(TuningEvent(BASE, "negative-binomial", 20.0, 1e-7), delta=DELTA).epsilon
    assert near == pytest.approx(log, rel=1e-5)
    geo = acc.epsilon(TuningEvent(BASE, "geometric", 20.0), delta=DELTA).epsilon
    assert acc.epsilon(TuningEvent(BASE, "negative-binomial", 20.0, 1.0), delta=DELTA).epsilon == geo


def test_search_costs_more_than_one_run_and_less_than_composing_the_mean():
    acc = RdpAccountant()
    one = acc.epsilon(BASE, delta=DELTA).epsilon
    composed = acc.epsilon(SelfComposedEvent(BASE, 10), delta=DELTA).epsilon
    for law, mean, eta in LAWS[:4]:
        e = acc.epsilon(TuningEvent(BASE, law, mean, eta), delta=DELTA).epsilon
        assert one < e < composed, law


@settings(max_examples=25, deadline=None)
@given(m1=st.floats(1.0, 500.0), m2=st.floats(1.0, 500.0),
       law=st.sampled_from(["poisson", "geometric", "logarithmic", "negative-binomial"]))
def test_epsilon_grows_with_the_mean_number_of_runs(m1, m2, law):
    lo, hi = sorted((m1, m2))
    eta = 0.5 if law == "negative-binomial" else None
    acc = RdpAccountant()
    base = GaussianEvent(2.0)
    e_lo = acc.epsilon(TuningEvent(base, law, lo, eta), delta=DELTA).epsilon
    e_hi = acc.epsilon(TuningEvent(base, law, hi, eta), delta=DELTA).epsilon
    assert e_lo <= e_hi + 1e-9


# ----------------------------------------------------------------------------- dp_accounting
@pytest.mark.parametrize("sigma,q,steps", [(1.0, 0.01, 1000), (2.0, 0.004, 10000), (0.8, 1.0, 1)])
@pytest.mark.parametrize("law,mean,eta", LAWS)
def test_not_above_dp_accounting_repeat_and_select(sigma, q, steps, law, mean, eta):
    # dp_accounting's RDP accountant with RepeatAndSelectDpEvent (same theorems), same orders:
    # ours may only be lower (our order refinement; exact Gaussian δ̂ for unsampled Poisson cases;
    # λ̂ refined between orders).
    dpe = pytest.importorskip("dp_accounting.dp_event")
    rdp_mod = pytest.importorskip("dp_accounting.rdp.rdp_privacy_accountant")
    base = dpsgd_event(noise_multiplier=sigma, sample_rate=q, steps=steps)
    ours = RdpAccountant().epsilon(TuningEvent(base, law, mean, eta), delta=DELTA).epsilon
    g = dpe.GaussianDpEvent(sigma)
    ev = dpe.SelfComposedDpEvent(g if q == 1 else dpe.PoissonSampledDpEvent(q, g), steps)
    shape = {"poisson": math.inf, "geometric": 1.0, "logarithmic": 0.0}.get(law, eta)
    theirs = rdp_mod.RdpAccountant(orders=list(DEFAULT_ORDERS))
    theirs.compose(dpe.RepeatAndSelectDpEvent(ev, mean, shape))
    their_eps = theirs.get_epsilon(DELTA)
    assert ours <= their_eps + 1e-9
    # the same theorem: close, except that our δ̂ of an unsampled Gaussian is its exact δ
    # (Balle & Wang 2018) rather than an RDP conversion, which lowers the Poisson bound much
    assert ours >= (0.8 if law == "poisson" and q == 1 else 0.99) * their_eps


# ----------------------------------------------------------------------------- the contract
def test_other_accountants_refuse_with_the_reason():
    ev = TuningEvent(BASE, "geometric", 5.0)
    for name in available():
        acc = get_accountant(name)
        if name == "rdp":
            assert acc.supports(ev)
            continue
        assert not acc.supports(ev)
        with pytest.raises(UnsupportedEventError, match="rdp accountant"):
            acc.epsilon(ev, delta=DELTA)


@pytest.mark.parametrize("args,name", [
    (("poisson", 0.0), "mean_runs"), (("poisson", -1.0), "mean_runs"),
    (("geometric", 0.5), "mean_runs"), (("negative-binomial", 5.0, -1.0), "eta"),
    (("negative-binomial", 5.0, math.inf), "eta"), (("negative-binomial", 5.0), "eta"),
    (("poisson", 5.0, 0.5), "eta"), (("geometric", 5.0, 0.5), "eta"), (("uniform", 5.0), "runs_distribution"),
])
def test_bad_laws_are_refused(args, name):
    with pytest.raises(ParameterError) as e:
        TuningEvent(BASE, *args)
    assert e.value.name == name


def test_calibrated_sigma_meets_the_target():
    from dpcalc.accounting.calibrate import calibrate_noise_multiplier

    acc = RdpAccountant()
    res = calibrate_noise_multiplier(
        acc, target_epsilon=3.0, delta=DELTA,
        make_event=lambda s: TuningEvent(dpsgd_event(noise_multiplier=s, sample_rate=0.01, steps=1000),
                                         "geometric", 10.0))
    ev = TuningEvent(dpsgd_event(noise_multiplier=res.noise_multiplier, sample_rate=0.01, steps=1000),
                     "geometric", 10.0)
    assert acc.epsilon(ev, delta=DELTA).epsilon <= 3.0
    smaller = TuningEvent(dpsgd_event(noise_multiplier=res.noise_multiplier * (1 - 1e-4), sample_rate=0.01,
                                      steps=1000), "geometric", 10.0)
    assert acc.epsilon(smaller, delta=DELTA).epsilon > 3.0  # the smallest σ, to 1e-4


# ----------------------------------------------------------------------------- the command
RUN = ["--sample-rate", "0.01", "--steps", "1000", "--delta", "1e-5"]


def test_tune_prints_the_search_beside_the_comparisons(run_cli):
    r = run_cli("tune", "--sigma", "1", *RUN, "--runs-distribution", "geometric", "--mean-runs", "10", "--json")
    assert r.exit_code == 0, r.stderr
    rows = {x["scenario"]: x for x in r.json()["results"]}
    assert rows["single"]["epsilon"] < rows["search"]["epsilon"] < rows["fixed"]["epsilon"] < rows["naive"]["epsilon"]
    direct = RdpAccountant().epsilon(TuningEvent(BASE, "geometric", 10.0), delta=DELTA).epsilon
    assert rows["search"]["epsilon"] == direct


def test_tune_target_sigma_round_trips(run_cli):
    r = run_cli("tune", "--eps", "3", *RUN, "--runs-distribution", "poisson", "--mean-runs", "10", "--json")
    assert r.exit_code == 0, r.stderr
    rows = {x["scenario"]: x for x in r.json()["results"]}
    sigma = rows["search"]["noise_multiplier"]
    back = run_cli("tune", "--sigma", repr(sigma), *RUN, "--runs-distribution", "poisson", "--mean-runs", "10",
                   "--json")
    assert {x["scenario"]: x for x in back.json()["results"]}["search"]["epsilon"] <= 3.0
    one = run_cli("sigma", "--eps", "3", *RUN, "--accountant", "rdp", "--json").json()["results"][0]
    assert rows["single"]["noise_multiplier"] == one["noise_multiplier"]  # the same helper


def test_tune_with_a_spec_file_of_pure_runs(run_cli, tmp_path):
    f = tmp_path / "run.json"
    f.write_text(json.dumps([{"mechanism": "laplace", "parameters": {"epsilon": 0.5}, "count": 2}]))
    r = run_cli("tune", "--spec", str(f), "--delta", "1e-6", "--runs-distribution", "geometric",
                "--mean-runs", "30", "--json")
    assert r.exit_code == 0, r.stderr
    rows = {x["scenario"]: x for x in r.json()["results"]}
    assert rows["search"]["epsilon"] == pytest.approx(3.0)  # Liu & Talwar: 3 × (2 × 0.5)


@pytest.mark.parametrize("extra,flag", [
    (["--runs-distribution", "poisson", "--mean-runs", "0"], "--mean-runs"),
    (["--runs-distribution", "poisson", "--mean-runs", "-2"], "--mean-runs"),
    (["--runs-distribution", "geometric", "--mean-runs", "0.5"], "--mean-runs"),
    (["--runs-distribution", "negative-binomial", "--mean-runs", "5", "--eta", "-1"], "--eta"),
    (["--runs-distribution", "negative-binomial", "--mean-runs", "5", "--eta", "-3"], "--eta"),
    (["--runs-distribution", "negative-binomial", "--mean-runs", "5"], "--eta"),
    (["--runs-distribution", "poisson", "--mean-runs", "5", "--eta", "1"], "--eta"),
    (["--runs-distribution", "uniform", "--mean-runs", "5"], "--runs-distribution"),
])
def test_tune_bad_input_is_one_line(run_cli, extra, flag):
    line = _one_line_error(run_cli("tune", "--sigma", "1", *RUN, *extra))
    assert flag in line, line
