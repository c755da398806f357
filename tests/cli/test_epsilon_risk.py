"""``dpcalc epsilon --risk`` (issue 13): the TPR bound at FPR 1e-3 beside each accountant's ε.

Reference: the unsampled Gaussian with σ = 10 composed 100 times is exactly μ-GDP with
μ = √100/10 = 1 (Dong, Roth, Su 2022 Cor 3.3), whose best test has TPR = 1 − G_1(α) =
Φ(Φ⁻¹(α) + 1) at FPR α (DRS Def 2.7), evaluated with mpmath at 50 digits. A certified bound
(pld) lies at or above it, and pld's bracket contains it.
"""

from __future__ import annotations

import subprocess
import sys

import mpmath
import pytest


def _exact_tpr(alpha: float, mu: float) -> float:
    mpmath.mp.dps = 50
    z = mpmath.sqrt(2) * mpmath.erfinv(2 * mpmath.mpf(alpha) - 1)  # Φ⁻¹(α)
    return float(mpmath.ncdf(z + mu))


def test_risk_column_brackets_the_exact_gdp_tpr(run_cli):
    r = run_cli("epsilon", "--sigma", "10", "--steps", "100", "--delta", "1e-5", "--risk", "--json")
    assert r.exit_code == 0, r.stderr
    rows = {x["accountant"]: x for x in r.json()["results"]}
    exact = _exact_tpr(1e-3, 1.0)  # ≈ 0.01553
    pld = rows["pld"]["risk"]
    assert pld["fpr"] == 1e-3 and pld["certified"] is True
    assert pld["tpr_bound_lower"] <= exact <= pld["tpr_bound"] <= 1.02 * exact
    for name, row in rows.items():
        risk = row.get("risk")
        if risk is None:
            assert row.get("applicable") is False or row.get("epsilon") is None
            continue
        assert risk["certified"] == row["certified"]
        if row["certified"]:  # every certified curve allows at least the exact attack
            assert risk["tpr_bound"] >= exact * (1 - 1e-9), name
        assert risk["tpr_bound"] <= risk["single_pair"] <= 1.0  # the whole curve is never looser than one pair


def test_risk_is_the_tpr_row_of_dpcalc_risk(run_cli):
    args = ("--sigma", "1.1", "--batch-size", "256", "--dataset-size", "60000", "--epochs", "3", "--delta", "1e-5")
    e = run_cli("epsilon", *args, "--accountant", "pld", "--risk", "--json")
    k = run_cli("risk", *args, "--json")
    assert e.exit_code == 0 and k.exit_code == 0, e.stderr + k.stderr
    mine = e.json()["results"][0]["risk"]
    row = next(x for x in k.json()["results"] if x.get("quantity") == "tpr_at_fpr" and x["fpr"] == 1e-3)
    # both certified, each within the other's bracket (risk refines its grid for four FPRs)
    assert mine["tpr_bound_lower"] <= row["bound"] and row["bound_lower"] <= mine["tpr_bound"]
    assert mine["single_pair"] == row["single_pair"]


def test_table_has_the_column_only_with_the_flag(run_cli):
    args = ("epsilon", "--sigma", "4", "--sample-rate", "0.01", "--steps", "1000", "--delta", "1e-5")
    plain, flagged = run_cli(*args), run_cli(*args, "--risk")
    assert plain.exit_code == flagged.exit_code == 0
    assert "TPR at FPR 1e-3" not in plain.stdout and "TPR at FPR 1e-3" in flagged.stdout
    assert "approx." in flagged.stdout.split("gdp", 1)[1].splitlines()[0]  # gdp's bound is labelled
    j = run_cli(*args, "--json").json()
    assert all("risk" not in x for x in j["results"])


@pytest.mark.parametrize("with_risk", [False, True])
def test_epsilon_imports_risk_only_with_the_flag(with_risk):
    """`epsilon` without --risk must stay exactly as fast: the risk modules are not even imported."""
    code = ("import sys\nfrom dpcalc.cli import main\n"
            "sys.argv = ['dpcalc', 'epsilon', '--sigma', '4', '--sample-rate', '0.01', '--steps', '100', "
            "'--delta', '1e-5', '--accountant', 'rdp'" + (", '--risk'" if with_risk else "") + "]\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print('RISK' if 'dpcalc.risk.curve' in sys.modules else 'NO-RISK', file=sys.stderr)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stderr.strip().splitlines()[-1] == ("RISK" if with_risk else "NO-RISK")
