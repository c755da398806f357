"""``--steps-grid`` evaluated in one vectorised pass, the faster numeric optimal composition,
and the pld row of ``compose``. References: the scalar exact method (itself checked against
mpmath in test_composition.py), mpmath sums of KOV 2015 Thm 3.3, direct convolution, and
the accountants evaluated one count at a time."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

from dpcalc.accounting.pld import PldAccountant
from dpcalc.composition import compose as compose_mod
from dpcalc.composition import optimal
from dpcalc.composition.compose import MechanismSpec, compose, sequence_event


def kov_delta_mp(eps: float, k: int, target: float) -> float:
    """KOV 2015 Thm 3.3 in mpmath: δ̃(ε') = Σ_j C(k,j) p^j (1−p)^{k−j} (1 − e^{ε'−ε(2j−k)})₊."""
    mpmath.mp.dps = 50
    e, t = mpmath.mpf(eps), mpmath.mpf(target)
    p = mpmath.e**e / (1 + mpmath.e**e)
    s = mpmath.mpf(0)
    for j in range(k + 1):
        loss = e * (2 * j - k)
        if loss > t:
            s += mpmath.binomial(k, j) * p**j * (1 - p) ** (k - j) * (1 - mpmath.e ** (t - loss))
    return float(s)


# ------------------------------------------------------------------ vectorised KOV Thm 3.3


@pytest.mark.parametrize("eps", [0.01, 0.1, 1.0, 3.0])
@pytest.mark.parametrize("dt", [1e-10, 1e-5, 0.1])
def test_homogeneous_epsilon_many_matches_scalar_exact(eps, dt):
    ks = np.unique(np.round(np.geomspace(1, 3000, 60)).astype(int))
    many = optimal.homogeneous_epsilon_many(epsilons=np.full(ks.size, eps), counts=ks,
                                            delta_tildes=np.full(ks.size, dt))
    scalar = np.array([optimal.exact_loss_atoms([eps], [k]).epsilon_for(dt) for k in ks])
    # both are certified upper bounds on the same exact value; the scalar one is tight to ~1e-12
    assert np.all(many >= scalar * (1 - 1e-9) - 1e-12)
    np.testing.assert_allclose(many, scalar, rtol=1e-6, atol=1e-12)


def test_homogeneous_epsilon_many_reference_and_validity():
    # docs/references.md: k = 100 × (0.1, 0), δ = 1e-5: exact optimal 4.3068
    e = optimal.homogeneous_epsilon_many(epsilons=[0.1], counts=[100], delta_tildes=[1e-5])[0]
    assert e == pytest.approx(4.3068, abs=1e-4)
    # the returned ε' really has δ̃ ≤ target (mpmath), and a slightly smaller ε' does not
    assert kov_delta_mp(0.1, 100, e) <= 1e-5
    assert kov_delta_mp(0.1, 100, e * (1 - 1e-6)) > 1e-5
    # ε = 0 mechanisms cost nothing; δ̃ ≤ 0 is unreachable
    out = optimal.homogeneous_epsilon_many(epsilons=[0.0, 0.1], counts=[10, 10], delta_tildes=[1e-5, 0.0])
    assert out[0] == 0.0 and math.isinf(out[1])


@pytest.mark.parametrize("eps,k", [(0.3, 20), (0.05, 200), (1.0, 7)])
def test_homogeneous_delta_tilde_many_against_mpmath(eps, k):
    targets = [0.0, 0.5 * eps, 1.0, k * eps / 3]
    for t in targets:
        got = optimal.homogeneous_delta_tilde_many(epsilons=[eps], counts=[k], epsilon=t)[0]
        exact = kov_delta_mp(eps, k, t)
        assert got >= exact * (1 - 1e-13)  # never below the truth
        assert got == pytest.approx(exact, rel=1e-9, abs=1e-300)


# ------------------------------------------------------------------ numeric (many distinct ε_i)


def test_fft_atoms_with_pruned_frequencies_match_direct_convolution():
    """The FFT composition (negligible frequencies dropped) against an exact direct convolution
    of the same rounded randomized-response losses: δ̃ agrees within the stated error."""
    rng = np.random.default_rng(3)
    n_values = np.unique(rng.integers(3, 40, size=25))
    counts = rng.integers(1, 4, size=n_values.size)
    h = 0.01
    atoms = optimal._fft_atoms(n_values, counts, h, eta=1e-14)
    # direct: S = Σ n_m Bin(k_m, p_m) by convolution of the PMFs
    pmf = np.ones(1)
    for n, k in zip(n_values, counts, strict=True):
        p = 1 / (1 + math.exp(-h * n))
        one = np.zeros(n + 1)
        one[0], one[n] = 1 - p, p
        for _ in range(k):
            pmf = np.convolve(pmf, one)
    s = np.arange(pmf.size)
    loss = h * (2 * s - float(np.sum(counts * n_values)))
    for eps in (0.0, 0.5, 1.5, 3.0):
        mask = loss > eps
        exact = float(np.sum(pmf[mask] * -np.expm1(eps - loss[mask])))
        got = atoms.hockey_stick(eps)
        assert got >= exact * (1 - 1e-12)
        assert got <= exact * (1 + 1e-9) + atoms.abs_err + 1e-15


def test_heterogeneous_bracket_still_certified():
    rng = np.random.default_rng(0)
    eps = rng.uniform(0.01, 0.1, size=2000)
    res = optimal.optimal_epsilon(eps, np.zeros(2000), np.ones(2000, dtype=int), delta=1e-5)
    assert res.method == "numeric" and res.lower <= res.value <= res.lower * 1.0101
    # rounding every ε_i up to the largest gives a homogeneous (exact) upper bound
    hi = optimal.homogeneous_epsilon(epsilon=float(eps.max()), delta=0.0, count=2000, target_delta=1e-5)
    lo = optimal.homogeneous_epsilon(epsilon=float(eps.min()), delta=0.0, count=2000, target_delta=1e-5)
    assert lo <= res.lower and res.value <= hi


# ------------------------------------------------------------------ compose --steps-grid


def _grid(rep, method):
    rows = {r.method: r for r in rep.results}
    return rows[method], rows[method].details["grid"]


def test_grid_optimal_equals_pointwise_and_last_point_is_row():
    seq = [MechanismSpec("dp", 2000, epsilon=0.1)]
    rep = compose(seq, delta=1e-5, methods=("basic", "kov", "optimal"), steps_grid=50)
    row, g = _grid(rep, "optimal")
    assert len(g["steps"]) == len(g["epsilon"]) > 40 and g["steps"][-1] == 2000
    assert g["epsilon"][-1] == row.epsilon
    for k, e in list(zip(g["steps"], g["epsilon"], strict=True))[::7]:
        ref = optimal.homogeneous_epsilon(epsilon=0.1, delta=0.0, count=k, target_delta=1e-5)
        assert e >= ref * (1 - 1e-9) and e == pytest.approx(ref, rel=1e-6)


def test_grid_accountants_match_pointwise_evaluation():
    from dpcalc.accounting.gdp import GdpAccountant
    from dpcalc.accounting.moments import MomentsAccountant
    from dpcalc.accounting.rdp import RdpAccountant

    seq = [MechanismSpec("gaussian", 3000, noise_multiplier=2.0, sample_rate=0.02)]
    rep = compose(seq, delta=1e-5, methods=("rdp", "ma", "gdp"), steps_grid=30)
    for name, acc in (("rdp", RdpAccountant()), ("ma", MomentsAccountant()), ("gdp", GdpAccountant())):
        row, g = _grid(rep, name)
        assert len(g["steps"]) == len(g["epsilon"]) >= 28  # every point, not a subset
        assert g["epsilon"][-1] == row.epsilon
        for k, e in list(zip(g["steps"], g["epsilon"], strict=True))[::5]:
            ref = acc.epsilon(sequence_event([MechanismSpec("gaussian", k, noise_multiplier=2.0,
                                                            sample_rate=0.02)]), delta=1e-5).epsilon
            if name == "rdp":  # grid orders only (not refined): never below, within 1%
                assert ref * (1 - 1e-12) <= e <= ref * 1.01
            else:
                assert e == pytest.approx(ref, rel=1e-7)
    # δ mode too: rdp δ at each k is an upper bound close to the refined one
    rep = compose(seq, epsilon=1.0, methods=("rdp", "ma"), steps_grid=20)
    row, g = _grid(rep, "ma")
    assert g["delta"] == sorted(g["delta"]) and g["delta"][-1] == row.delta


def test_grid_is_monotone_in_steps_for_every_method():
    seq = [MechanismSpec("gaussian", 1000, noise_multiplier=1.0, sample_rate=0.05)]
    rep = compose(seq, delta=1e-6, steps_grid=40)
    for r in rep.results:
        if r.applicable and "grid" in r.details:
            vals = [x for x in r.details["grid"]["epsilon"] if x is not None]
            # every value is a bound for that many steps; the generic rows choose δ₀ per point,
            # so allow the last point (the row's refined value) to sit slightly below its neighbour
            assert all(b >= a * (1 - 0.02) for a, b in zip(vals, vals[1:], strict=False)), r.method


def test_grid_pld_is_a_labelled_subset_with_the_row_value_last():
    seq = [MechanismSpec("dp", 500, epsilon=0.1)]
    rep = compose(seq, delta=1e-5, methods=("pld", "optimal"), steps_grid=100)
    row, g = _grid(rep, "pld")
    assert 2 <= len(g["steps"]) <= PldAccountant.grid_evaluations and "note" in g
    assert g["steps"][-1] == 500 and g["epsilon"][-1] == row.epsilon
    opt = dict(zip(*_grid(rep, "optimal")[1].values(), strict=True))
    for k, e in zip(g["steps"], g["epsilon"], strict=True):  # pure DP: pld ≥ exact optimal (tiny rounding)
        assert e >= opt[k] * (1 - 1e-9)


# ------------------------------------------------------------------ the pld row


def test_pld_row_sandwiches_exact_kov_for_pure_dp():
    # 100 × ε = 0.1, δ = 1e-5: exact optimal 4.3068 (docs/references.md); pld must bracket it
    rows = {r.method: r for r in compose([MechanismSpec("dp", 100, epsilon=0.1)], delta=1e-5).results}
    pld, opt = rows["pld"], rows["optimal"]
    assert pld.applicable and pld.certified
    assert pld.details["epsilon_lower"] <= opt.epsilon
    assert pld.epsilon >= opt.epsilon * (1 - 1e-9)  # optimal is itself rounded up by ≤ ~1e-12
    assert kov_delta_mp(0.1, 100, pld.epsilon) <= 1e-5  # the certified ε really holds
    # δ at ε' = 2: pld upper ≥ exact (mpmath) ≥ pld lower
    rows = {r.method: r for r in compose([MechanismSpec("dp", 100, epsilon=0.1)], epsilon=2.0,
                                          methods=("pld", "optimal")).results}
    exact = kov_delta_mp(0.1, 100, 2.0)
    assert rows["pld"].details["delta_lower"] <= exact * (1 + 1e-12) <= rows["pld"].delta * (1 + 2e-12)
    assert rows["optimal"].delta == pytest.approx(exact, rel=1e-9)


def test_pld_row_with_delta_i_is_at_most_optimal_within_accuracy():
    # (ε, δ) items: pld uses the same generalised randomized-response pair as optimal
    seq = [MechanismSpec("dp", 30, epsilon=0.2, delta=1e-8), MechanismSpec("dp", 10, epsilon=0.5, delta=0.0)]
    rows = {r.method: r for r in compose(seq, delta=1e-5, methods=("pld", "optimal")).results}
    assert rows["pld"].details["epsilon_lower"] <= rows["optimal"].epsilon <= rows["pld"].epsilon * (1 + 1e-9)


def test_pld_guard_for_many_distinct_mechanisms(monkeypatch):
    from dpcalc.accounting.pld import PldAccountant

    monkeypatch.setattr(PldAccountant, "max_distinct", 2)  # declared capability (base.Accountant.max_distinct)
    seq = [MechanismSpec("dp", 1, epsilon=e) for e in (0.1, 0.2, 0.3)]
    rows = {r.method: r for r in compose(seq, delta=1e-5).results}
    assert not rows["pld"].applicable and "--method pld" in rows["pld"].reason and "3 distinct" in rows["pld"].reason
    # asked for explicitly: evaluated
    rows = {r.method: r for r in compose(seq, delta=1e-5, methods=("pld",)).results}
    assert rows["pld"].applicable and rows["pld"].epsilon > 0


# ------------------------------------------------------------------ CLI


def test_table_star_is_plain_text(run_cli):
    r = run_cli("compose", "--dp", "0.1", "--count", "100", "--delta", "1e-5", "--method", "optimal",
                "--method", "basic")
    assert r.exit_code == 0, r.stderr
    assert "★ optimal" in r.stdout and "[bold" not in r.stdout


def test_plot_curve_uses_pld_points(tmp_path):
    pytest.importorskip("matplotlib")
    seq = [MechanismSpec("gaussian", 50, noise_multiplier=2.0)]
    rep = compose(seq, delta=1e-5, methods=("pld", "gdp"))
    curves = compose_mod.privacy_curves(seq, rep)["curves"]
    assert set(curves) == {"pld", "gdp"}
    pld = curves["pld"]
    assert len(pld["epsilon"]) >= 5 and pld["epsilon"] == sorted(pld["epsilon"])
    # unsampled Gaussian: gdp is exact (μ = √50/2); pld's certified ε at each δ is ≥ the exact one
    from dpcalc.mechanisms.gaussian import gaussian_epsilon

    for e, d in zip(pld["epsilon"], pld["delta"], strict=True):
        assert e >= gaussian_epsilon(delta=d, mu=math.sqrt(50) / 2) * (1 - 1e-9)
