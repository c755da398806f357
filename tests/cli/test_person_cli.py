"""Privacy per person on the command line (issue 28): --group-size, --privacy-unit user,
--records-per-user, `dpcalc fl`, and the compose spec's group_size and mog entries.

References: the group-privacy conversion (Vadhan 2017 Lemma 2.2) of the record-level guarantee
(the group ε must not exceed it); the record-level commands themselves (user-level and FL runs
are DP-SGD with users in place of records, dpcalc/accounting/federated.py); dp_accounting's PLD
accountant on the same client-level run (a peer's estimate of the same truth); the closed form
of the adaptive-clipping effective noise (Andrew et al. 2021)."""

from __future__ import annotations

import json
import math

import pytest

from dpcalc.accounting.federated import effective_noise_multiplier, update_noise_multiplier
from dpcalc.errors import InfeasibleError


def test_epsilon_group_size_json_has_the_conversion_beside(run_cli):
    out = run_cli("epsilon", "--sigma", "1", "-q", "0.01", "--steps", "1000", "--delta", "1e-5",
                  "--group-size", "4", "--accountant", "pld", "--json").json()
    assert out["inputs"]["group_size"] == 4
    row = out["results"][0]
    conv = out["group"]["convert_group_epsilon"]
    assert row["details"]["epsilon_lower"] <= row["epsilon"] < conv
    rec = run_cli("epsilon", "--sigma", "1", "-q", "0.01", "--steps", "1000", "--delta", "1e-5",
                  "--accountant", "pld", "--json").json()["results"][0]
    assert rec["epsilon"] < row["epsilon"]


def test_group_size_one_changes_nothing(run_cli):
    args = ["epsilon", "--sigma", "1", "-q", "0.01", "--steps", "300", "--delta", "1e-5", "--json"]
    a, b = run_cli(*args).json(), run_cli(*args, "--group-size", "1").json()
    assert a == b


@pytest.mark.parametrize("args,flag", [
    (["epsilon", "--sigma", "1", "-q", "0.1", "--steps", "10", "--delta", "1e-5", "--group-size", "0"], "--group-size"),
    (["sigma", "--eps", "1", "--delta", "1e-5", "--steps", "10", "--group-size", "-2"], "--group-size"),
    (["epsilon", "--sigma", "1", "--delta", "1e-5", "--batch-size", "10", "--dataset-size", "100", "--epochs", "1",
      "--sampling", "shuffle", "--group-size", "2"], "--group-size"),
    (["epsilon", "--sigma", "1", "-q", "0.1", "--steps", "10", "--delta", "1e-5", "--records-per-user", "3"],
     "--records-per-user"),
    (["epsilon", "--sigma", "1", "-q", "0.1", "--steps", "10", "--delta", "1e-5", "--privacy-unit", "user",
      "--records-per-user", "0"], "--records-per-user"),
    (["fl", "--clients-per-round", "200", "--total-clients", "100", "--rounds", "5", "--sigma", "1",
      "--delta", "1e-6"], "--clients-per-round"),
    (["fl", "--clients-per-round", "10", "--total-clients", "100", "--rounds", "5", "--delta", "1e-6"], "--sigma"),
    (["fl", "--clients-per-round", "10", "--total-clients", "100", "--rounds", "0", "--sigma", "1",
      "--delta", "1e-6"], "--rounds must be a whole number >= 1, got 0"),
])
def test_bad_input_is_one_line(run_cli, args, flag):
    assert flag in run_cli(*args).one_line_error()


@pytest.mark.parametrize("content,match", [("3\n-1\n", "line 2"), ("3\nx\n", "line 2"), ("# none\n", "no counts"),
                                           ("3\n0\n", "line 2: expected a whole number >= 1"),
                                           ("3\n4\n5\n", "3 counts")])
def test_records_per_user_file_errors(run_cli, tmp_path, content, match):
    f = tmp_path / "counts.txt"
    f.write_text(content)
    line = run_cli("epsilon", "--sigma", "1", "--batch-size", "1", "--dataset-size", "2", "--epochs", "1",
                   "--delta", "1e-5", "--privacy-unit", "user", "--records-per-user", str(f)).one_line_error()
    assert match in line and "--records-per-user" in line


def test_user_level_is_the_record_formula_over_users(run_cli, tmp_path):
    """Per-user clipping: the user-level ε is DP-SGD's over users; the file gives N = its lines."""
    f = tmp_path / "counts.txt"
    f.write_text("\n".join(str(1 + i % 7) for i in range(1000)) + "\n")
    user = run_cli("epsilon", "--sigma", "1.1", "--batch-size", "10", "--epochs", "5", "--delta", "1e-5",
                   "--privacy-unit", "user", "--records-per-user", str(f), "--accountant", "pld", "--json").json()
    rec = run_cli("epsilon", "--sigma", "1.1", "--batch-size", "10", "--dataset-size", "1000", "--epochs", "5",
                  "--delta", "1e-5", "--accountant", "pld", "--json").json()
    assert user["results"][0]["epsilon"] == rec["results"][0]["epsilon"]
    assert user["inputs"]["users"] == 1000 and user["inputs"]["records_per_user"] == 7
    assert user["inputs"]["privacy_unit"] == "user"


def test_fl_is_dp_sgd_over_clients(run_cli):
    fl = run_cli("fl", "--clients-per-round", "100", "--total-clients", "100000", "--rounds", "2000",
                 "--sigma", "1", "--delta", "1e-6", "--json").json()
    eps = run_cli("epsilon", "--sigma", "1", "--batch-size", "100", "--dataset-size", "100000", "--steps", "2000",
                  "--delta", "1e-6", "--accountant", "pld", "--json").json()
    assert fl["results"][0]["epsilon"] == eps["results"][0]["epsilon"]
    assert fl["inputs"]["sample_rate"] == pytest.approx(1e-3)


def test_fl_sigma_for_a_target_is_verified(run_cli):
    out = run_cli("fl", "--clients-per-round", "100", "--total-clients", "100000", "--rounds", "2000",
                  "--eps", "8", "--delta", "1e-6", "--json").json()
    row = out["results"][0]
    assert row["epsilon"] <= 8
    back = run_cli("fl", "--clients-per-round", "100", "--total-clients", "100000", "--rounds", "2000",
                   "--sigma", repr(row["noise_multiplier"]), "--delta", "1e-6", "--json").json()
    assert back["results"][0]["epsilon"] <= 8


def test_fl_against_dp_accounting():
    """dp_accounting's PLD of the same client-level run (Poisson q = m/N, R rounds): a pessimistic
    estimate of the same truth, inside [our lower bound, our upper bound · 1.01]."""
    import dp_accounting

    from dpcalc.accounting.pld import PldAccountant
    from dpcalc.events import dpsgd_event

    m, n, rounds, z, delta = 100, 100000, 2000, 1.0, 1e-6
    acc = dp_accounting.pld.PLDAccountant()
    acc.compose(dp_accounting.PoissonSampledDpEvent(m / n, dp_accounting.GaussianDpEvent(z)), rounds)
    theirs = acc.get_epsilon(delta)
    ours = PldAccountant().epsilon(dpsgd_event(noise_multiplier=z, sample_rate=m / n, steps=rounds), delta=delta)
    assert ours.details["epsilon_lower"] <= theirs <= ours.epsilon * 1.01


def test_adaptive_clipping_effective_noise():
    """Andrew et al. 2021: z = (z_Δ⁻² + (2σ_b)⁻²)^(-1/2); z_Δ back from z; never the optimistic side."""
    for zd, sb in [(1.0, 5.0), (0.7, 10.0), (2.0, 1.5)]:
        z = effective_noise_multiplier(zd, sb)
        assert z <= 1.0 / math.sqrt(zd ** -2 + (2 * sb) ** -2) and z == pytest.approx(
            1.0 / math.sqrt(zd ** -2 + (2 * sb) ** -2), rel=1e-14)
        back = update_noise_multiplier(z, sb)
        assert back >= zd * (1 - 1e-12) and effective_noise_multiplier(back, sb) >= z
    assert effective_noise_multiplier(1.3, None) == 1.3
    with pytest.raises(InfeasibleError, match="count-stddev"):
        update_noise_multiplier(3.0, 1.0)


def test_fl_adaptive_clipping_accounts_the_effective_noise(run_cli):
    base = ["fl", "--clients-per-round", "100", "--total-clients", "100000", "--rounds", "500", "--delta", "1e-6",
            "--json"]
    with_count = run_cli(*base, "--sigma", "1", "--count-stddev", "5").json()
    z = with_count["adaptive_clipping"]["effective_noise_multiplier"]
    plain = run_cli(*base, "--sigma", repr(z)).json()
    assert with_count["results"][0]["epsilon"] == plain["results"][0]["epsilon"]
    assert with_count["results"][0]["epsilon"] > run_cli(*base, "--sigma", "1").json()["results"][0]["epsilon"]


def test_compose_spec_group_and_mog(run_cli, tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps([
        {"mechanism": "gaussian", "parameters": {"noise_multiplier": 1.0, "sample_rate": 0.01, "group_size": 4},
         "count": 1000}]))
    grp = run_cli("compose", "--spec", str(spec), "--delta", "1e-5", "--method", "pld", "--json").json()
    eps = run_cli("epsilon", "--sigma", "1", "-q", "0.01", "--steps", "1000", "--delta", "1e-5",
                  "--group-size", "4", "--accountant", "pld", "--json").json()
    pick = next(r for r in grp["results"] if r.get("method") == "pld" or r.get("accountant") == "pld")
    assert pick["epsilon"] == eps["results"][0]["epsilon"]
    spec.write_text(json.dumps([{"mechanism": "MixtureOfGaussiansDpEvent", "count": 10, "parameters": {
        "standard_deviation": 2.0, "sensitivities": [0, 1, 2], "sampling_probs": [0.8, 0.15, 0.05]}}]))
    out = run_cli("compose", "--spec", str(spec), "--delta", "1e-5", "--method", "pld", "--json").json()
    assert out["inputs"]["mechanisms"][0]["mechanism"] == "mog"
    spec.write_text(json.dumps([{"mechanism": "laplace", "count": 1, "parameters": {"epsilon": 1, "group_size": 2}}]))
    assert "group_size" in run_cli("compose", "--spec", str(spec), "--delta", "1e-5").one_line_error()


def test_risk_uses_the_group_curve(run_cli):
    out = run_cli("risk", "--sigma", "1", "-q", "0.01", "--steps", "1000", "--delta", "1e-5", "--group-size", "4",
                  "--json").json()
    eps = run_cli("epsilon", "--sigma", "1", "-q", "0.01", "--steps", "1000", "--delta", "1e-5",
                  "--group-size", "4", "--accountant", "pld", "--json").json()["results"][0]["epsilon"]
    profile = next(r for r in out["results"] if r.get("quantity") == "privacy_profile")
    assert out["inputs"]["group_size"] == 4
    assert profile["single_pair"][0] == pytest.approx(eps, rel=1e-3)


@pytest.mark.slow
def test_plan_grid_for_a_group_matches_sigma(run_cli):
    """~30 s on a loaded machine: each cell of the grid is `dpcalc sigma --group-size`'s calibration."""
    out = run_cli("plan", "--eps", "8", "--delta", "1e-5", "--dataset-size", "60000", "--batch-size", "1024",
                  "--epochs", "5", "--group-size", "4", "--json").json()
    cell = out["results"][0]
    sig = run_cli("sigma", "--eps", "8", "--delta", "1e-5", "--batch-size", "1024", "--dataset-size", "60000",
                  "--steps", str(cell["steps"]), "--group-size", "4", "--json").json()["results"][0]
    assert cell["noise_multiplier"] == pytest.approx(sig["noise_multiplier"], rel=1e-5)
    assert cell["epsilon"] <= 8
