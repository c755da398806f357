"""Bounded-range composition of exponential mechanisms (Dong, Durfee, Rogers 2020 — DDR20).

References used here, each computed independently of the code under test:

* the definition: an ε-BR pair is dominated by RR_t (losses t, t − ε; DDR20 §4), so the
  non-adaptive optimum is max over (t_1, …, t_k) of the hockey-stick divergence of the
  product of RR_{t_i} — evaluated by brute force (outcome enumeration, grid + Nelder–Mead);
* the adaptive optimum for k = 2 by its recursion (an adversary choosing t_2 after seeing
  the first output), to show the gap DDR20 §3.3 reports;
* the pure-DP optimal composition (KOV 2015 Thm 3.3), which an ε-BR composition never exceeds
  (ε-BR ⇒ ε-DP);
* Durfee & Rogers 2019's published BR composition bound (their comparison script,
  github.com/rrogers386/DPComposition ``optimal_comp.advanced_comp_br``), valid for adaptive
  composition, hence never below the exact non-adaptive optimum.
"""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcalc.accounting._pld_mechanisms import BoundedRangeLoss
from dpcalc.accounting.registry import get_accountant
from dpcalc.composition import bounded_range as br
from dpcalc.composition.optimal import homogeneous_delta, homogeneous_epsilon
from dpcalc.errors import ParameterError
from dpcalc.events import ExponentialMechanismEvent, SelfComposedEvent

FAST = settings(max_examples=25, deadline=None, derandomize=True)


# ----------------------------------------------------------------------------- independent references
def _rr_t(eps: float, t: float) -> tuple[np.ndarray, np.ndarray]:
    """RR_t under P: masses and losses (DDR20 §4)."""
    p = (math.exp(eps) - math.exp(t)) / math.expm1(eps)
    return np.array([p, 1 - p]), np.array([t, t - eps])


def _product_delta(eps: float, ts, eg: float) -> float:
    """δ(ε_g) of RR_{t_1} ⊗ … ⊗ RR_{t_k} by enumerating the 2^k outcomes."""
    p, loss = np.array([1.0]), np.array([0.0])
    for t in ts:
        pp, ll = _rr_t(eps, t)
        p, loss = np.outer(p, pp).ravel(), np.add.outer(loss, ll).ravel()
    return float(np.sum(p * np.maximum(0.0, -np.expm1(eg - loss))))


def _brute_nonadaptive(eps: float, k: int, eg: float) -> float:
    from scipy.optimize import minimize

    grid = np.linspace(0.0, eps, 13 if k <= 3 else 7)
    cands = [(_product_delta(eps, ts, eg), ts) for ts in itertools.product(grid, repeat=k)]
    cands += [(_product_delta(eps, [t] * k, eg), [t] * k) for t in np.linspace(0.0, eps, 401)]
    cands.sort(key=lambda c: -c[0])
    rng = np.random.default_rng(k)
    starts = [np.array(c[1], dtype=float) for c in cands[:4]] + [rng.uniform(0, eps, k) for _ in range(4)]
    best = cands[0][0]
    for x0 in starts:
        r = minimize(lambda x: -_product_delta(eps, np.clip(x, 0, eps), eg), x0,
                     method="Nelder-Mead", options={"xatol": 1e-12, "fatol": 1e-16, "maxiter": 4000})
        best = max(best, -r.fun)
    return best


def _rr_curve(eps: float, e: float) -> float:
    """Randomized response's curve: a generic ε-DP mechanism (KOV 2015)."""
    return max(0.0, (math.exp(eps) - math.exp(e)) / (1 + math.exp(eps)))


def _single_sup(eps: float, e: float, n: int = 200001) -> float:
    """sup over t of RR_t's curve at ε′, on a dense grid (a lower estimate of the sup)."""
    t = np.linspace(0.0, eps, n)
    p = (np.exp(eps) - np.exp(t)) / np.expm1(eps)
    return float(np.max(p * np.maximum(0.0, -np.expm1(e - t))))


# ----------------------------------------------------------------------------- the formula
@pytest.mark.parametrize("eps,k,eg", [(1.0, 2, 0.5), (0.5, 3, 0.2), (0.3, 4, 0.7), (2.0, 2, 3.0),
                                      (0.05, 3, 0.01),
                                      pytest.param(1.5, 3, 0.0, marks=pytest.mark.slow), (0.8, 1, 0.3)])
def test_nonadaptive_formula_equals_brute_force(eps, k, eg):
    """DDR20 §5's closed form (equal t_i at t_ℓ = (ε_g + (ℓ+1)ε)/(k+1)) is the maximum over all t_i."""
    got = br.br_nonadaptive_delta(eps, k, eg)
    ref = _brute_nonadaptive(eps, k, eg)
    assert got >= ref * (1 - 1e-12)
    assert got == pytest.approx(ref, rel=1e-9, abs=1e-15)


@FAST
@given(eps=st.floats(0.01, 5.0), frac=st.floats(0.0, 0.999))
def test_single_mechanism_closed_form(eps, frac):
    """k = 1: (e^{ε/2} − e^{ε′/2})²/(e^ε − 1) = sup_t of RR_t's curve; tanh(ε/4) at ε′ = 0."""
    e = frac * eps
    closed = br.br_single_delta(eps, e)
    assert closed == pytest.approx(br.br_nonadaptive_delta(eps, 1, e), rel=1e-9, abs=1e-300)
    assert closed >= _single_sup(eps, e) * (1 - 1e-12)
    assert closed == pytest.approx(_single_sup(eps, e), rel=1e-6, abs=1e-14)
    assert br.br_single_delta(eps, 0.0) == pytest.approx(math.tanh(eps / 4), rel=1e-12)


def test_k1_equal_means_pure_epsilon():
    """What "equal at k = 1" means: one ε-BR mechanism is exactly ε-DP, as is one ε-DP
    mechanism — both curves vanish at ε′ = ε and not before — but for every δ > 0 the BR curve
    is strictly below randomized response's, so the BR ε at δ is strictly smaller."""
    for eps in (0.1, 1.0, 3.0):
        assert br.br_single_delta(eps, eps) == 0.0 == _rr_curve(eps, eps)
        for e in np.linspace(0, eps, 9)[:-1]:
            assert 0 < br.br_single_delta(eps, e) < _rr_curve(eps, e)
        for delta in (1e-3, 1e-6):
            b = br.br_nonadaptive_epsilon(eps, 1, delta)
            o = homogeneous_epsilon(epsilon=eps, delta=0.0, count=1, target_delta=delta)
            assert b < o <= eps
        # as δ → 0 both tend to ε (the pure-DP guarantee, equal): ε − ε_BR ≈ 2√(δ(e^ε − 1))e^{−ε/2}
        tiny = 1e-15
        b = br.br_nonadaptive_epsilon(eps, 1, tiny)
        exact = 2 * math.log(math.exp(eps / 2) - math.sqrt(tiny * math.expm1(eps)))
        assert b == pytest.approx(exact, abs=1e-9) and eps - b < 1e-6
        # k mechanisms at δ → 0: both are kε (basic composition is tight for pure DP)
        assert br.br_nonadaptive_delta(eps, 3, 3 * eps) == 0.0
        assert br.br_nonadaptive_delta(eps, 3, 3 * eps * (1 - 1e-9)) > 0.0


@settings(max_examples=40, deadline=None, derandomize=True)
@given(eps=st.floats(0.01, 3.0), k=st.integers(1, 300), log_delta=st.floats(-12.0, -0.5))
def test_br_never_above_pure_dp_optimal(eps, k, log_delta):
    """BR composition ≤ pure-DP optimal composition for every k (ε-BR ⇒ ε-DP), in both directions."""
    delta = 10.0 ** log_delta
    b = br.br_nonadaptive_epsilon(eps, k, delta)
    o = homogeneous_epsilon(epsilon=eps, delta=0.0, count=k, target_delta=delta)
    assert b <= o * (1 + 1e-9)
    e = 0.5 * b + 0.25 * k * eps
    assert br.br_nonadaptive_delta(eps, k, e) <= homogeneous_delta(epsilon=eps, delta=0.0, count=k,
                                                                   target_epsilon=e) * (1 + 1e-9)


def test_ddr20_comparison_order_of_magnitude():
    """The comparison setting of DDR20's figures (from Durfee & Rogers 2019's script): δ = 1e-6,
    ε ∈ {0.1, 0.25, 0.5, 1}, k = 1 … 100. The exact BR composition sits below DR19's published
    BR bound, and below the optimal pure-DP composition by a factor that grows from 1 towards 2
    for small ε and large k (Hoeffding on a loss range ε instead of 2ε halves the √k term; the
    mean drops from kε·tanh(ε/2) ≈ kε²/2 to ≈ kε²/8)."""
    delta = 1e-6

    def dr19(k, eps):  # rrogers386/DPComposition optimal_comp.advanced_comp_br
        return min(k * eps ** 2 / 2 + eps * math.sqrt(0.5 * k * math.log(1 / delta)),
                   k * eps * math.expm1(eps) / (math.exp(eps) + 1) + eps * math.sqrt(2 * k * math.log(1 / delta)),
                   k * eps)

    ratios = {}
    for eps in (0.1, 0.25, 0.5, 1.0):
        for k in (1, 2, 5, 10, 25, 50, 100):
            b = br.br_nonadaptive_epsilon(eps, k, delta)
            o = homogeneous_epsilon(epsilon=eps, delta=0.0, count=k, target_delta=delta)
            assert b <= dr19(k, eps) * (1 + 1e-12)
            ratios[eps, k] = o / b
    assert all(1.0 <= r <= 2.5 for r in ratios.values())
    assert 1.9 <= ratios[0.1, 100] <= 2.3  # ~2: 2.246 against 4.775
    assert ratios[0.1, 1] < 1.01  # one mechanism at δ = 1e-6: both ≈ ε
    assert ratios[0.1, 100] > ratios[0.1, 10] > ratios[0.1, 2]
    # order of magnitude: between the largest mean loss k·KL* of an ε-BR step,
    # KL* = ln((e^ε − 1)/ε) − 1 + ε/(e^ε − 1) (maximised over t), and the Azuma–Hoeffding bound
    # k·KL* + ε√(k ln(1/δ)/2) (a loss of range ε per step)
    for eps in (0.1, 0.25, 0.5, 1.0):
        kl = math.log(math.expm1(eps) / eps) - 1 + eps / math.expm1(eps)
        for k in (10, 50, 100):
            b = br.br_nonadaptive_epsilon(eps, k, delta)
            assert k * kl < b <= k * kl + eps * math.sqrt(k * math.log(1 / delta) / 2)
    assert 2.0 < br.br_nonadaptive_epsilon(0.1, 100, delta) < 2.5


# ----------------------------------------------------------------------------- adaptivity and accountants
def _adaptive2(eps: float, eg: float) -> float:
    """The adaptive optimum for k = 2 (DDR20 §6): the second t may depend on the first output,
    δ = max_t1 [p_t1·δ₁(ε_g − t1) + (1 − p_t1)·δ₁(ε_g − t1 + ε)] with δ₁ the one-step curve
    (for ε′ < 0: 1 − e^{ε′} + e^{ε′}δ₁(−ε′), the class being closed under swapping)."""
    def d1(s):
        if s >= 0:
            return br.br_single_delta(eps, s)
        return 1 - math.exp(s) + math.exp(s) * br.br_single_delta(eps, min(-s, eps))

    best = 0.0
    for t in np.linspace(0.0, eps, 4001):
        p = (math.exp(eps) - math.exp(t)) / math.expm1(eps)
        best = max(best, p * d1(eg - t) + (1 - p) * d1(eg - t + eps))
    return best


def test_adaptive_choice_can_cost_more_and_pld_covers_it():
    """DDR20 §3.3: adaptively chosen exponential mechanisms can cost more than non-adaptive ones,
    so the br row is not certified; the pld row (dominating pair of the class) covers the
    adaptive optimum."""
    eps, eg = 0.5, 0.2
    na = br.br_nonadaptive_delta(eps, 2, eg)
    ad = _adaptive2(eps, eg)
    assert ad > na * 1.004  # 0.08327 against 0.08284
    pld = get_accountant("pld").delta(SelfComposedEvent(ExponentialMechanismEvent(eps), 2), epsilon=eg)
    assert pld.delta >= ad


def test_dominating_pair():
    """BoundedRangeLoss: masses add to 1, its curve is sup_t of RR_t's (so it dominates each),
    symmetric, and no atoms."""
    for eps in (0.05, 1.0, 4.0):
        pair = BoundedRangeLoss(eps)
        ell = np.linspace(-1.2 * eps, 1.2 * eps, 41)
        assert np.allclose(pair.P_le(ell) + pair.P_gt(ell), 1.0, atol=1e-14)
        assert np.allclose(pair.Q_le(ell) + pair.Q_gt(ell), 1.0, atol=1e-14)
        assert np.allclose(pair.P_le(ell), pair.Q_gt(-ell), atol=1e-14)  # symmetric: P-law of L = Q-law of −L
        for e in np.linspace(0, eps, 7):
            d = pair.delta(float(e))
            assert d == pytest.approx(br.br_single_delta(eps, float(e)), rel=1e-10, abs=1e-16)
            for t in np.linspace(0, eps, 11):
                p, loss = _rr_t(eps, float(t))
                assert d >= float(np.sum(p * np.maximum(0, -np.expm1(e - loss)))) * (1 - 1e-12)


@pytest.mark.parametrize("eps,k,delta", [(0.1, 1, 1e-6), (0.5, 10, 1e-6), (1.0, 30, 1e-5), (0.1, 200, 1e-8)])
def test_accountants_between_exact_and_pure_dp(eps, k, delta):
    """zcdp (ρ = kε²/8), rdp, pld (certified, adaptive) are never below the exact non-adaptive
    optimum; pld is never above the pure-DP optimal composition (its pair is dominated by RR_ε),
    up to its stated accuracy."""
    ev = SelfComposedEvent(ExponentialMechanismEvent(eps), k)
    exact = br.br_nonadaptive_epsilon(eps, k, delta)
    pure = homogeneous_epsilon(epsilon=eps, delta=0.0, count=k, target_delta=delta)
    for name in ("zcdp", "rdp", "pld"):
        res = get_accountant(name).epsilon(ev, delta=delta)
        assert res.certified and res.epsilon >= exact, name
    zres = get_accountant("zcdp").epsilon(ev, delta=delta)
    assert zres.details["rho"] == pytest.approx(k * eps * eps / 8, rel=1e-12)
    assert "Cesar & Rogers 2021" in zres.source
    pld = get_accountant("pld").epsilon(ev, delta=delta)
    assert pld.details["epsilon_lower"] <= pure


def test_pld_large_epsilon(recwarn):
    """ε up to 650: evaluated without floating-point warnings; beyond, refused with the reason."""
    import warnings

    acc = get_accountant("pld")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = acc.epsilon(ExponentialMechanismEvent(650.0), delta=0.5)
    assert br.br_nonadaptive_epsilon(650.0, 1, 0.5) <= res.epsilon <= 650.0
    assert not acc.supports(ExponentialMechanismEvent(651.0))
    with pytest.raises(Exception, match="ε ≤ 650"):
        acc.check(ExponentialMechanismEvent(651.0))


def test_rdp_curve_is_min_of_zcdp_and_pure_dp():
    from dpcalc.accounting.rdp import rdp_bounded_range, rdp_pure_dp

    a = np.array([1.5, 2.0, 8.0, 64.0, 1024.0])
    for eps in (0.1, 2.0, 10.0):
        got = rdp_bounded_range(epsilon=eps, orders=a)
        assert np.allclose(got, np.minimum(a * eps * eps / 8, rdp_pure_dp(epsilon=eps, orders=a)), rtol=1e-15)
        assert np.all(got <= eps)


def test_gdp_refuses_with_reason():
    acc = get_accountant("gdp")
    ev = SelfComposedEvent(ExponentialMechanismEvent(0.1), 3)
    assert not acc.supports(ev)
    with pytest.raises(Exception, match="exponential"):
        acc.check(ev)


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf, "x"])
def test_event_validation(bad):
    with pytest.raises(ParameterError):
        ExponentialMechanismEvent(bad)


def test_event_immutable():
    ev = ExponentialMechanismEvent(0.5)
    with pytest.raises(AttributeError):
        ev.epsilon = 1.0  # type: ignore[misc]
    assert ev == ExponentialMechanismEvent(0.5) and hash(ev) == hash(ExponentialMechanismEvent(0.5))


def test_formula_input_errors():
    with pytest.raises(ParameterError):
        br.br_nonadaptive_delta(0.1, br.MAX_BR_COUNT + 1, 1.0)
    with pytest.raises(ParameterError):
        br.br_nonadaptive_epsilon(0.1, 10, 0.0)
    with pytest.raises(ParameterError):
        br.br_single_delta(701.0, 1.0)


# ----------------------------------------------------------------------------- compose and the CLI
def test_compose_rows(run_cli):
    r = run_cli("compose", "--exponential", "0.1", "--count", "100", "--delta", "1e-6", "--json")
    assert r.exit_code == 0, r.stderr
    rows = {x["method"]: x for x in r.json()["results"]}
    assert rows["br"]["certified"] is False and rows["br"]["details"]["validity"] == "non-adaptive"
    assert rows["br"]["epsilon"] == pytest.approx(br.br_nonadaptive_epsilon(0.1, 100, 1e-6))
    assert rows["br"]["epsilon"] < rows["optimal"]["epsilon"]  # side by side: 2.246 against 4.775
    assert rows["gdp"]["applicable"] is False
    assert r.json()["results"][0]["certified"] is True  # the ★ row is a certified (adaptive) bound
    text = run_cli("compose", "--exponential", "0.1", "--count", "100", "--delta", "1e-6")
    assert text.exit_code == 0 and "non-adaptive" in text.stdout and "br" in text.stdout


def test_compose_spec_and_delta_mode(run_cli, tmp_path):
    spec = tmp_path / "em.json"
    spec.write_text(json.dumps([{"mechanism": "exponential", "parameters": {"epsilon": 0.5}, "count": 10}]))
    r = run_cli("compose", "--spec", str(spec), "--eps", "3", "--json")
    assert r.exit_code == 0, r.stderr
    rows = {x["method"]: x for x in r.json()["results"]}
    assert rows["br"]["delta"] == pytest.approx(br.br_nonadaptive_delta(0.5, 10, 3.0))
    assert rows["br"]["delta"] <= rows["optimal"]["delta"]
    assert r.json()["inputs"]["mechanisms"] == [{"mechanism": "exponential", "count": 10, "epsilon": 0.5}]


def test_compose_br_not_applicable(run_cli):
    r = run_cli("compose", "--exponential", "0.1", "--count", "3", "--laplace", "0.1", "--delta", "1e-6", "--json")
    assert r.exit_code == 0, r.stderr
    rows = {x["method"]: x for x in r.json()["results"]}
    assert rows["br"]["applicable"] is False and "one ε" in rows["br"]["reason"]
    r = run_cli("compose", "--gaussian", "3", "--delta", "1e-6", "--method", "br", "--method", "rdp", "--json")
    rows = {x["method"]: x for x in r.json()["results"]}
    assert rows["br"]["applicable"] is False and "--exponential" in rows["br"]["reason"]


def test_compose_steps_grid(run_cli):
    r = run_cli("compose", "--exponential", "0.2", "--count", "50", "--delta", "1e-6", "--steps-grid", "20",
                "--json")
    assert r.exit_code == 0, r.stderr
    grid = {x["method"]: x["details"].get("grid") for x in r.json()["results"] if x.get("applicable", True)}
    g = grid["br"]
    assert g["steps"][-1] == 50 and all(a <= b for a, b in zip(g["epsilon"], g["epsilon"][1:], strict=False))
    for steps, value in zip(g["steps"], g["epsilon"], strict=True):
        assert value == pytest.approx(br.br_nonadaptive_epsilon(0.2, steps, 1e-6), rel=1e-9)


@pytest.mark.parametrize("args,message", [
    (["--exponential", "0", "--delta", "1e-5"], "--exponential must be a finite number > 0, got 0"),
    (["--exponential", "-1", "--delta", "1e-5"], "--exponential must be a finite number > 0, got -1"),
    (["--exponential", "abc", "--delta", "1e-5"], "--exponential"),
    (["--exponential", "800", "--delta", "1e-5"], "epsilon must be a number in (0, 700], got 800"),
    (["--exponential", "0.1", "--count", "0", "--delta", "1e-5"], "--count must be a whole number >= 1"),
    (["--exponential", "0.1", "--sample-rate", "0.1", "--delta", "1e-5"], "--sample-rate applies to --gaussian only"),
])
def test_bad_exponential_exit_2(run_cli, args, message):
    r = run_cli("compose", *args)
    assert r.exit_code == 2, r.stdout
    assert r.stderr.startswith("Error: ") and message in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and r.stdout == ""


def test_bad_exponential_spec_exit_2(run_cli, tmp_path):
    spec = tmp_path / "em.json"
    spec.write_text(json.dumps([{"mechanism": "exponential", "parameters": {"epsilon": 0.5, "delta": 0.1}}]))
    r = run_cli("compose", "--spec", str(spec), "--delta", "1e-5")
    assert r.exit_code == 2 and "unknown parameter(s) delta for exponential (allowed: epsilon)" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and r.stdout == ""
