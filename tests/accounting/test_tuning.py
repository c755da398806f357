"""Repeat-and-select (``dpcalc tune``, :mod:`dpcalc.accounting.tuning`, :class:`TuningEvent`).

References: Papernot & Steinke 2022 ("Hyperparameter tuning with Rényi differential privacy",
ICLR): Thm 2 (truncated negative binomial), Cor 3 (pure DP: (2+η)ε), Cor 4 (ρ-zCDP base:
closed form), Thm 6 (Poisson); Liu & Talwar 2019 (geometric stopping: 3ε). The closed forms
below are written out independently of the implementation (as in dp_accounting's own tests of
``RepeatAndSelectDpEvent``, rdp_privacy_accountant_test.py). The paper prints no table of
values; its Figure 7 (MNIST, 60 epochs, batch 256, σ = 1.1) is reproduced from the inputs the
authors released with it (tensorflow/privacy research/hyperparameters_2022: the run's RDP curve
and the γ of the plotted points), docs/references.md §8.
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
    (["--runs-distribution", "poisson", "--mean-runs", "0.9"], "--mean-runs"),
    (["--runs-distribution", "negative-binomial", "--mean-runs", "5", "--eta", "-1"], "--eta"),
    (["--runs-distribution", "negative-binomial", "--mean-runs", "5", "--eta", "-3"], "--eta"),
    (["--runs-distribution", "negative-binomial", "--mean-runs", "5"], "--eta"),
    (["--runs-distribution", "poisson", "--mean-runs", "5", "--eta", "1"], "--eta"),
    (["--runs-distribution", "uniform", "--mean-runs", "5"], "--runs-distribution"),
])
def test_tune_bad_input_is_one_line(run_cli, extra, flag):
    line = run_cli("tune", "--sigma", "1", *RUN, *extra).one_line_error()
    assert flag in line, line


# ----------------------------------------------------------------------------- Figure 7 (published setting)
# Papernot & Steinke 2022 §4 / Figure 7: the learning rate of a DP-SGD CNN on MNIST tuned with a
# random number of runs, each run 60 epochs, batch size 256, noise multiplier 1.1 (N = 60,000);
# x-axis "privacy budget" of each law as a function of γ. The authors' released defaults
# (tensorflow/privacy, research/hyperparameters_2022/figure7_default_values.py) store the run's
# RDP curve at these orders and the γ of the plotted points; figure7.py plots, per law and γ,
# the smallest value over the orders of the search's RDP curve (Thm 2 with λ̂ over the same
# orders; Poisson with mean 100·γ, Thm 6). See docs/references.md §8.
FIG7_ORDERS = [1.25, 1.5, 1.75, 2.0, 2.25, 2.5, 3.0, 3.5, 4.0, 4.5] + list(range(5, 64)) + [128, 256, 512]
FIG7_RDP = [  # figure7_default_values.py `rdp` (9 significant digits)
    2.04459751e-01, 2.45818210e-01, 2.87335988e-01, 3.29014798e-01, 3.70856385e-01, 4.12862542e-01,
    4.97375951e-01, 5.82570265e-01, 6.68461534e-01, 7.55066706e-01, 8.42403732e-01, 1.01935100e+00,
    1.19947313e+00, 1.38297035e+00, 1.57009549e+00, 1.76124790e+00, 1.95794503e+00, 2.19017390e+00,
    4.48407479e+00, 3.08305394e+02, 4.98610133e+03, 1.11363692e+04, 1.72590079e+04, 2.33487231e+04,
    2.94091123e+04, 3.54439803e+04, 4.14567914e+04, 4.74505356e+04, 5.34277419e+04, 5.93905358e+04,
    6.53407051e+04, 7.12797586e+04, 7.72089762e+04, 8.31294496e+04, 8.90421151e+04, 9.49477802e+04,
    1.00847145e+05, 1.06740819e+05, 1.12629335e+05, 1.18513163e+05, 1.24392717e+05, 1.30268362e+05,
    1.36140424e+05, 1.42009194e+05, 1.47874932e+05, 1.53737871e+05, 1.59598221e+05, 1.65456171e+05,
    1.71311893e+05, 1.77165542e+05, 1.83017260e+05, 1.88867175e+05, 1.94715404e+05, 2.00562057e+05,
    2.06407230e+05, 2.12251015e+05, 2.18093495e+05, 2.23934746e+05, 2.29774840e+05, 2.35613842e+05,
    2.41451813e+05, 2.47288808e+05, 2.53124881e+05, 2.58960080e+05, 2.64794449e+05, 2.70628032e+05,
    2.76460867e+05, 2.82292992e+05, 2.88124440e+05, 6.66483142e+05, 1.41061455e+06, 2.89842152e+06,
]
FIG7_GAMMAS = [1e-07, 8e-06, 1e-04, 0.00024, 0.0015, 0.0035, 0.025, 0.05, 0.1, 0.2, 0.5]


def test_figure7_run_is_the_papers_dpsgd_run():
    """The stored RDP of one training run is the Poisson-sampled Gaussian of the paper's
    setting: q = 256/60000, σ = 1.1, T = ⌈60·60000/256⌉ = 14063 steps (dpcalc's schedule), at
    all 72 orders to the 9 digits stored (this pins the setting, including T, for the test below)."""
    from dpcalc.accounting.rdp import rdp_sampled_gaussian
    from dpcalc.schedule import resolve_schedule

    s = resolve_schedule(batch_size=256, dataset_size=60_000, epochs=60)
    assert (s.sample_rate, s.steps) == (256 / 60_000, 14_063)
    ours = s.steps * rdp_sampled_gaussian(sample_rate=s.sample_rate, noise_multiplier=1.1, orders=FIG7_ORDERS)
    np.testing.assert_allclose(ours, FIG7_RDP, rtol=5e-8)
    assert not np.allclose(ours * 14_062 / 14_063, FIG7_RDP, rtol=5e-8)  # one step fewer is visible


# (law, η, the γ plotted, the x-value it has in the figure: Thm 2 on the stored curve, to 4 decimals
# as listed in docs/references.md §8)
FIG7_POINTS = [
    ("logarithmic", 0.0, 1e-07, 6.4239), ("logarithmic", 0.0, 0.0015, 3.8783), ("logarithmic", 0.0, 0.5, 1.1683),
    ("geometric", 1.0, 1e-04, 7.3865), ("geometric", 1.0, 0.025, 4.5712), ("geometric", 1.0, 0.5, 1.8661),
    ("negative-binomial", 0.5, 1e-07, 8.2550), ("negative-binomial", 0.5, 0.05, 3.3439),
    ("negative-binomial", 0.5, 0.5, 1.5314),
]


def _thm2_min(gamma: float, eta: float, log_term: float) -> float:
    """Papernot & Steinke 2022 Thm 2 written out: min over λ of ε(λ) + (1+η)·min over λ̂ of
    [(1 − 1/λ̂)ε(λ̂) + log_term/λ̂] + log E[K]/(λ − 1), λ and λ̂ over the figure's orders, with
    E[K] = (1/γ − 1)/log(1/γ) (η = 0) or η(1 − γ)/(γ(1 − γ^η)) (§3)."""
    a, r = np.array(FIG7_ORDERS), np.array(FIG7_RDP)
    hat = float(np.min((1 - 1 / a) * r + log_term / a))
    mean = (1 / gamma - 1) / math.log(1 / gamma) if eta == 0 else eta * (1 - gamma) / (gamma * (1 - gamma ** eta))
    return float(np.min(r + (1 + eta) * hat + math.log(mean) / (a - 1)))


@pytest.mark.parametrize("gamma", FIG7_GAMMAS)
@pytest.mark.parametrize("law,eta", [("logarithmic", 0.0), ("geometric", 1.0), ("negative-binomial", 0.5)])
def test_figure7_privacy_budgets_are_theorem_2_on_the_stored_run(law, eta, gamma):
    """Figure 7's x-values: dpcalc's repeat-and-select curve on the stored run (orders and RDP of
    the authors' defaults), minimised over the orders, equals Thm 2 written out (log(1/γ) in the
    λ̂ term, as in the theorem and dp_accounting) to 1e-9. The authors' plotting script puts
    log(1/γ − 1) there for η ≠ 1 (smaller); dpcalc stays with the theorem: never below it."""
    mean = tnb_mean(gamma, eta)
    ours = float(repeat_and_select_rdp(FIG7_ORDERS, FIG7_RDP, distribution=law, mean_runs=mean, eta=eta).min())
    assert ours == pytest.approx(_thm2_min(gamma, eta, math.log(1 / gamma)), rel=1e-9)
    assert ours >= _thm2_min(gamma, eta, math.log(1 / gamma - 1)) - 1e-12


@pytest.mark.parametrize("law,eta,gamma,x", FIG7_POINTS)
def test_figure7_points_to_the_printed_precision(law, eta, gamma, x):
    """The x-values listed in docs/references.md §8 (4 decimals), recomputed."""
    got = float(repeat_and_select_rdp(FIG7_ORDERS, FIG7_RDP, distribution=law, mean_runs=tnb_mean(gamma, eta),
                                      eta=eta).min())
    assert round(got, 4) == x


@pytest.mark.parametrize("gamma,x", [(0.025, 1.3843), (0.05, 2.1923), (0.1, 3.3901), (0.2, 5.1936), (0.5, 8.5872)])
def test_figure7_poisson_points(gamma, x):
    """Poisson law of Figure 7 (mean μ = 100·γ): Thm 6, ε(λ) + μ·δ̂ + log(μ)/(λ − 1) with
    ε̂ = log(1 + 1/(λ − 1)); δ̂ from the stored curve by the conversion of Canonne, Kamath,
    Steinke 2020 Prop 12 — tighter than the plain exp((λ−1)(ε − ε̂)) of Mironov 2017 Prop 3, so
    never above Thm 6 with that conversion (written out here)."""
    a, r = np.array(FIG7_ORDERS), np.array(FIG7_RDP)
    mu = 100 * gamma
    got = float(repeat_and_select_rdp(a, r, distribution="poisson", mean_runs=mu).min())
    assert round(got, 4) == x
    eps_hat = np.log1p(1 / (a - 1))
    with np.errstate(over="ignore"):
        plain = np.array([min(1.0, float(np.min(np.exp((a - 1) * (r - e))))) for e in eps_hat])
    assert got <= float(np.min(r + mu * plain + math.log(mu) / (a - 1))) + 1e-12


# ---- issue 33: the law at its edges -------------------------------------------------------------

def test_tnb_gamma_refuses_a_law_below_the_float_range():
    # η = −0.999, E[K] = 10 needs γ ≈ e^{−2300} (E[K] ≈ |η| γ^{−1−η}): math domain error before
    with pytest.raises(ParameterError, match="1e-300"):
        tnb_gamma(10.0, -0.999)
    g = tnb_gamma(10.0, -0.99)  # still representable: answered as before
    assert g > 0 and tnb_mean(g, -0.99) >= 10.0


@pytest.mark.parametrize(("mean", "eta"), [(20.0, 5.0), (50.0, 0.5), (8.0, -0.5), (1e3, 40.0)])
def test_tnb_quantile_matches_mpmath(mean, eta):
    """The 99% quantile of K read from the pmf p_1 = (1−γ)η/(γ^{−η} − 1), p_{k+1} = p_k (1−γ)(k+η)/(k+1),
    summed in 50-digit arithmetic (mpmath) at the same γ."""
    import mpmath

    from dpcalc.accounting.tuning import _quantile

    mpmath.mp.dps = 50
    g = mpmath.mpf(tnb_gamma(mean, eta))
    p = (1 - g) * eta / (g ** (-eta) - 1)
    cdf, k = p, 1
    while cdf < mpmath.mpf("0.99"):
        p *= (1 - g) * (k + eta) / (k + 1)
        cdf += p
        k += 1
    assert _quantile("negative-binomial", mean, eta, 0.99) == k


def test_tnb_quantile_large_eta_does_not_overflow():
    # η = 1e3 and E[K] = 1e6: γ^{−η} = 1e3000 (OverflowError before); the quantile is finite and
    # above the mean (a law concentrated around its mean: at least the mean at 99%)
    from dpcalc.accounting.tuning import _quantile

    q = _quantile("negative-binomial", 1e6, 1e3, 0.99)
    assert 1e6 <= q < 2e6


# ---- issue 31: Thm 6's δ̂ with the conversion order refined off the grid -------------------------

@pytest.mark.parametrize("sigma", [0.8, 2.0, 5.0])
def test_refined_delta_hat_between_exact_and_grid(sigma):
    """For a Gaussian run (ε(α) = α/(2σ²), Mironov 2017) the refined δ̂ at every ε̂ is never
    above the grid's (every order is a valid conversion) and never below the Gaussian's exact δ
    at ε̂ (Balle & Wang 2018 Thm 8, attained by the mechanism itself: an achievable lower bound)."""
    from dpcalc.accounting.rdp_conversion import log_delta_per_order
    from dpcalc.accounting.tuning import refined_log_delta_hat
    from dpcalc.mechanisms.gaussian import gaussian_delta

    a = np.asarray(DEFAULT_ORDERS)
    r = a / (2 * sigma ** 2)
    eps_hat = np.log1p(1.0 / (a - 1.0))
    got = refined_log_delta_hat(a, r, eps_hat, lambda x: np.asarray(x) / (2 * sigma ** 2))
    grid = log_delta_per_order(a[None, :], r[None, :], eps_hat[:, None]).min(axis=1)
    assert np.all(got <= grid)
    exact = np.log([gaussian_delta(epsilon=float(e), mu=1.0 / sigma) for e in eps_hat])
    assert np.all(got >= exact - 1e-12)
    # and close to the minimum over a dense order grid (the refinement finds the optimum)
    dense = np.linspace(1.0005, 300.0, 30_000)
    best = log_delta_per_order(dense[None, :], dense[None, :] / (2 * sigma ** 2), eps_hat[:, None]).min(axis=1)
    assert np.all(got <= best + 1e-3 * np.abs(best))


@pytest.mark.slow
def test_poisson_search_not_above_dp_accounting_default_orders():
    """Issue 31's case (σ 1, q 0.01, T 1000, E[K] = 10 Poisson, δ 1e-5): dp_accounting's
    RepeatAndSelectDpEvent with its own default orders (1.1 … 10.9 by 0.1, 11 … 63, 128 … 1024)
    gives 4.32950; ours (Thm 6 with the conversion's order refined) must not be above it, and stays
    within 0.1% (the same theorem)."""
    dpe = pytest.importorskip("dp_accounting.dp_event")
    rdp_mod = pytest.importorskip("dp_accounting.rdp.rdp_privacy_accountant")
    ours = RdpAccountant().epsilon(TuningEvent(BASE, "poisson", 10.0), delta=DELTA).epsilon
    ev = dpe.SelfComposedDpEvent(dpe.PoissonSampledDpEvent(0.01, dpe.GaussianDpEvent(1.0)), 1000)
    theirs = rdp_mod.RdpAccountant()
    theirs.compose(dpe.RepeatAndSelectDpEvent(ev, 10.0, math.inf))
    their_eps = theirs.get_epsilon(DELTA)
    assert their_eps == pytest.approx(4.3295, abs=1e-4)
    assert their_eps * 0.999 <= ours <= their_eps


# ---- issue 31: the σ search of a repeat-and-select in about a second, the same numbers -----------

def _clear_tuning_caches():
    from dpcalc.accounting import tuning

    for f in (tuning._run_memo, tuning._hat_term):
        f.cache_clear()


#: (σ, q, T, law, E[K], η, ε at δ = 1e-5, order) computed by dpcalc before the speed-up (commit
#: 47b97fc: every row of Thm 6 refined, the run's RDP recomputed at every order asked)
BEFORE = [
    (0.7864418, 0.01, 100, "poisson", 5.0, None, 2.999997389890787, 5.506479353731582),
    (1.0, 0.01, 1000, "poisson", 10.0, None, 4.328702875216155, 7.628985126586302),
    (2.0, 0.004, 10_000, "poisson", 100.0, None, 6.966317499524479, 4.069227636735277),
    (0.8, 1.0, 1, "poisson", 3.0, None, 7.63629447805797, 4.657883386127255),
    (1.5, 0.05, 300, "poisson", 100.0, None, 28.600730865605726, 2.1233427011328123),
    (0.25, 0.01, 100, "poisson", 5.0, None, 60.52778214415328, 1.3256620759997806),
    (0.7864418, 0.01, 100, "geometric", 10.0, None, 3.9956504264579813, 5.549126043940553),
    (2.0, 0.004, 10_000, "negative-binomial", 100.0, 2.0, 2.8173951626841993, 24.162240594083453),
]


@pytest.mark.parametrize("sigma,q,steps,law,mean,eta,eps,order", BEFORE)
def test_search_epsilon_is_the_one_before_the_speed_up(sigma, q, steps, law, mean, eta, eps, order):
    """The rows of Thm 6 that skip refinement (:func:`dpcalc.accounting.tuning._rows_to_refine`),
    the remembered run RDP and the conversion orders skipped by their lower bound change no ε:
    the values printed before, to 1e-12 (they agreed to the last bit on bench_tune's settings)."""
    _clear_tuning_caches()
    ev = TuningEvent(dpsgd_event(noise_multiplier=sigma, sample_rate=q, steps=steps), law, mean, eta)
    res = RdpAccountant().epsilon(ev, delta=DELTA)
    assert res.epsilon == pytest.approx(eps, rel=1e-12)
    assert res.details["order"] == pytest.approx(order, rel=1e-9)


_DPSGD = dpsgd_event(noise_multiplier=0.9, sample_rate=0.02, steps=500)


_STRONG = dpsgd_event(noise_multiplier=0.3, sample_rate=1.0, steps=1)


@pytest.mark.parametrize("run,law,mean,delta", [
    (_DPSGD, "poisson", 1.5, 1e-5), (_DPSGD, "poisson", 5.0, 1e-3), (_DPSGD, "poisson", 40.0, 1e-9),
    (_DPSGD, "poisson", 5.0, 1e-5),
    (dpsgd_event(noise_multiplier=1.3, sample_rate=1.0, steps=4), "poisson", 5.0, 1e-5),
    (dpsgd_event(noise_multiplier=1.3, sample_rate=1.0, steps=4), "poisson", 40.0, 1e-9),
    (SelfComposedEvent(LaplaceEvent(2.0), 3), "poisson", 5.0, 1e-5),
    pytest.param(dpsgd_event(noise_multiplier=0.25, sample_rate=0.01, steps=100), "poisson", 5.0, 1e-5,
                 marks=pytest.mark.slow),  # ~3 s: the full refinement near order 1
    # Thm 2 laws: the fractional grid orders skipped, and (δ near 1, a strong run) needed
    (_DPSGD, "geometric", 10.0, 1e-5), (_DPSGD, "logarithmic", 1.5, 1e-9), (_DPSGD, "geometric", 1.0, 1e-5),
    (_STRONG, "geometric", 10.0, 0.5), (_STRONG, "logarithmic", 1.01, 0.9), (_STRONG, "geometric", 3.0, 1e-5),
])
def test_rows_skipped_at_delta_do_not_change_epsilon(run, law, mean, delta):
    """ε at δ with the rows that cannot be the best left unrefined (Thm 6) and the fractional grid
    orders not computed where they cannot matter (Thm 2) equals the search over the curve with
    every row refined and every order computed (the same floats: same best order, same value)."""
    _clear_tuning_caches()
    ev = TuningEvent(run, law, mean)
    acc = RdpAccountant()
    fast = acc.epsilon(ev, delta=delta)
    log_d = math.log(delta)
    from dpcalc.accounting.rdp_conversion import epsilon_per_order

    _clear_tuning_caches()
    full = acc._search(ev, lambda a, r: epsilon_per_order(a, r, log_d), 0.0)  # every row refined
    if not fast.details.get("pure_dp"):
        assert fast.epsilon == full[0]
        assert fast.details["order"] == full[1]


def test_remembered_run_rdp_is_the_computed_one():
    """An order's RDP does not depend on the orders computed with it, so the remembered value
    is the one a fresh call gives (to the last bit for the sampled Gaussian's series)."""
    from dpcalc.accounting.rdp import _run_rdp
    from dpcalc.accounting.tuning import _run_memo

    _clear_tuning_caches()
    run = dpsgd_event(noise_multiplier=0.8, sample_rate=0.01, steps=100)
    memo = _run_memo(run, "add-remove", _run_rdp)
    xs = np.array([1.0123, 1.5, 2.75, 4.321, 17.5, 300.25])
    got = memo(xs)
    again = memo(xs[::-1])[::-1]
    alone = np.array([_run_rdp(run, np.array([x]), None, "add-remove")[0] for x in xs])
    assert np.array_equal(got, alone) and np.array_equal(again, alone)


def test_issue_31_calibration_is_the_one_before():
    """Issue 31's case (q 0.01, T 100, K ~ Poisson(5), ε 3, δ 1e-5): about 20 s before, the same σ
    now (0.78644171 before the speed-up, 12 evaluations, commit 47b97fc)."""
    from dpcalc.accounting.calibrate import calibrate_noise_multiplier

    _clear_tuning_caches()
    res = calibrate_noise_multiplier(
        RdpAccountant(), target_epsilon=3.0, delta=DELTA,
        make_event=lambda s: TuningEvent(dpsgd_event(noise_multiplier=s, sample_rate=0.01, steps=100),
                                         "poisson", 5.0))
    assert res.noise_multiplier == 0.78644171
    assert res.epsilon == pytest.approx(2.9999983052638477, rel=1e-12)
    assert res.details["evaluations"] == 12


@pytest.mark.parametrize("mean", [1e-6, 0.3, 1.0, 2.5, 5.0, 10.0, 37.3, 100.0, 1e3, 12_345.6, 1e5, 1e6])
@pytest.mark.parametrize("quantile", [0.5, 0.99, 0.999999])
def test_poisson_quantile_matches_scipy(mean, quantile):
    """The Poisson quantile of the naive comparison (no scipy import on `dpcalc tune`'s path) is
    scipy.special.pdtr's: the smallest k with P[K ≤ k] ≥ quantile."""
    pdtr = pytest.importorskip("scipy.special").pdtr
    from dpcalc.accounting.tuning import _quantile

    k = _quantile("poisson", mean, None, quantile)
    assert pdtr(k, mean) >= quantile
    assert k == 0 or pdtr(k - 1, mean) < quantile


@pytest.mark.parametrize("sigma,mean", [(0.8, 10.0), (0.3, 1.01), (0.05, 1.2), (3.0, 1e4)])
def test_hat_term_skips_fractional_orders_only_when_they_cannot_win(sigma, mean):
    """Thm 2's λ̂ term from the integer grid orders when a fractional λ̂ ≤ 1.75 cannot win (it
    costs at least log(1/γ)/λ̂) is the term over the full grid (γ near 1 and a strong run make a
    fractional λ̂ win: then they are computed)."""
    from dpcalc.accounting.rdp import _run_rdp
    from dpcalc.accounting.tuning import TUNING_ORDERS, _hat_term, _run_memo, hat_minimum

    _clear_tuning_caches()
    run = dpsgd_event(noise_multiplier=sigma, sample_rate=1.0, steps=1)
    gamma = tnb_gamma(mean, 1.0)
    got = _hat_term(run, "add-remove", _run_rdp, gamma, None)
    memo = _run_memo(run, "add-remove", _run_rdp)
    full = hat_minimum(np.asarray(TUNING_ORDERS), memo.base(), gamma,
                       rdp_at=lambda x: float(memo(np.array([x]))[0]))
    assert got == full


@pytest.mark.parametrize("mean", [0.5, 0.9, 0.999])
def test_poisson_mean_below_one_is_refused_not_certified_zero(mean):
    """Review finding: with E[K] = μ < 1, Thm 6's ln(μ)/(λ − 1) term drove the RDP row to 0 near
    λ = 1 and ε = 0 was "certified". Achievable lower bound for σ = 0.5, one Gaussian run and a
    constant score: with probability 1 − e^{−μ} the run's output is released, so δ(0) ≥
    (1 − e^{−μ})·TV(N(0, σ²), N(1, σ²)) = (1 − e^{−μ})(2Φ(1/(2σ)) − 1) ≈ 0.40 at μ = 0.9 (closed
    form), far above any δ: no valid bound gives ε = 0. μ < 1 is refused, as dp_accounting does."""
    lower = -math.expm1(-mean) * math.erf(1.0 / (2 * 0.5 * math.sqrt(2)))
    assert lower > 0.1
    with pytest.raises(ParameterError, match="mean_runs"):
        TuningEvent(GaussianEvent(0.5), "poisson", mean)
    with pytest.raises(ParameterError, match="mean_runs"):
        repeat_and_select_rdp([1.01, 2.0, 8.0], [0.01, 2.0, 8.0], distribution="poisson", mean_runs=mean)
