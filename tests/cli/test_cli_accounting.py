"""CLI tests of ``dpcalc epsilon``, ``dpcalc delta`` and ``dpcalc sigma`` (click CliRunner).

Reference values:
- Abadi et al. 2016 §5 (MNIST: q = 0.01, σ = 4, T = 10,000, δ = 1e-5): moments accountant ε ≈ 1.26.
- Balle & Wang 2018 Thm 8 (μ-GDP curve, μ = √T/σ = 1): σ = 10, T = 100, δ = 1e-5 → exact ε = 4.37718
  (docs/references.md; also recomputed here with mpmath).
"""

from __future__ import annotations

import math

import mpmath
import pytest

ABADI = ["--sigma", "4", "--sample-rate", "0.01", "--steps", "10000", "--delta", "1e-5"]


def exact_gdp_epsilon(mu: float, delta: float) -> float:
    """ε of μ-GDP at δ by mpmath root finding on Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) = δ (Dong, Roth, Su 2019 Cor. 2.13)."""
    mpmath.mp.dps = 40
    f = lambda e: mpmath.ncdf(-e / mu + mu / 2) - mpmath.exp(e) * mpmath.ncdf(-e / mu - mu / 2) - delta  # noqa: E731
    lo, hi = mpmath.mpf(0), mpmath.mpf(50)  # δ(ε) decreases in ε: plain bisection, 100 halvings
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if f(mid) > 0 else (lo, mid)
    return float(hi)


def test_exact_gdp_reference_matches_published():
    # docs/references.md: σ = 10, T = 100 (μ = 1), δ = 1e-5 → 4.37718
    assert exact_gdp_epsilon(1.0, 1e-5) == pytest.approx(4.37718, abs=1e-5)


def test_epsilon_json_contract_abadi(run_cli):
    r = run_cli("epsilon", *ABADI, "--json")
    assert r.exit_code == 0, r.stderr
    out = r.json()
    assert out["command"] == "epsilon"
    assert out["inputs"] == {"noise_multiplier": 4.0, "sample_rate": 0.01, "steps": 10000,
                             "delta": 1e-5, "neighboring": "add-remove"}
    rows = {row["accountant"]: row for row in out["results"]}
    assert {"rdp", "ma"} <= set(rows)
    for row in out["results"]:
        assert set(row) >= {"accountant", "epsilon", "delta", "certified", "details"}
    # Abadi et al. 2016 §5: moments accountant ε ≈ 1.26 (within 1%)
    assert rows["ma"]["epsilon"] == pytest.approx(1.26, rel=0.01)
    assert rows["ma"]["certified"] is True
    # the improved conversion is tighter than the moments accountant's tail bound
    assert rows["rdp"]["epsilon"] < rows["ma"]["epsilon"]
    assert rows["rdp"]["details"]["order"] > 1


def test_epsilon_table_output_mentions_inputs_and_assumptions(run_cli):
    r = run_cli("epsilon", *ABADI, "--accountant", "ma")
    assert r.exit_code == 0, r.stderr
    assert "ma" in r.stdout and "Poisson sampling" in r.stdout and "1.2" in r.stdout


def test_unsampled_gaussian_never_below_exact(run_cli):
    exact = exact_gdp_epsilon(1.0, 1e-5)
    r = run_cli("epsilon", "--sigma", "10", "--steps", "100", "--delta", "1e-5", "--json")
    assert r.exit_code == 0, r.stderr
    out = r.json()
    assert out["inputs"]["sample_rate"] == 1.0
    for row in out["results"]:
        if row["certified"] and row.get("applicable", True):
            assert row["epsilon"] >= exact * (1 - 1e-9), row


def test_unsampled_note(run_cli):
    r = run_cli("sigma", "--eps", "1", "--delta", "1e-5", "--steps", "100")
    assert r.exit_code == 0, r.stderr
    assert "no subsampling" in r.stdout


def test_batches_derive_rate_and_steps(run_cli):
    r = run_cli("epsilon", "--sigma", "1.1", "--batch-size", "256", "--dataset-size", "60000",
                "--epochs", "60", "--delta", "1e-5", "--accountant", "rdp", "--json")
    assert r.exit_code == 0, r.stderr
    inputs = r.json()["inputs"]
    assert inputs["sample_rate"] == 256 / 60000
    assert inputs["steps"] == math.ceil(60 * 60000 / 256) == 14063


def test_sigma_json_and_verification(run_cli):
    r = run_cli("sigma", "--eps", "3", "--delta", "1e-5", "--batch-size", "256", "--dataset-size",
                "60000", "--epochs", "60", "--accountant", "rdp", "--max-grad-norm", "2", "--json")
    assert r.exit_code == 0, r.stderr
    (row,) = r.json()["results"]
    assert row["accountant"] == "rdp"
    assert row["epsilon"] <= 3.0
    assert row["noise_std"] == pytest.approx(2 * row["noise_multiplier"])
    # and the σ it returns gives that ε back through `epsilon`
    r2 = run_cli("epsilon", "--sigma", repr(row["noise_multiplier"]), "--batch-size", "256",
                 "--dataset-size", "60000", "--epochs", "60", "--delta", "1e-5", "--accountant", "rdp", "--json")
    assert r2.json()["results"][0]["epsilon"] == pytest.approx(row["epsilon"], rel=1e-9)


def test_delta_round_trip(run_cli):
    r = run_cli("epsilon", *ABADI, "--accountant", "rdp", "--json")
    eps = r.json()["results"][0]["epsilon"]
    r2 = run_cli("delta", "--sigma", "4", "--sample-rate", "0.01", "--steps", "10000",
                 "--eps", repr(eps), "--accountant", "rdp", "--json")
    assert r2.exit_code == 0, r2.stderr
    assert r2.json()["results"][0]["delta"] == pytest.approx(1e-5, rel=1e-3)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["epsilon", "--sigma", "4", "--sample-rate", "0.01", "--steps", "100", "--delta", "1.5"],
         "--delta must be in (0, 1), got 1.5"),
        (["epsilon", "--sigma", "4", "--sample-rate", "0.01", "--steps", "100", "--delta", "0"],
         "--delta must be in (0, 1), got 0"),
        (["epsilon", "--sigma", "4", "--sample-rate", "0.01", "--steps", "100", "--delta", "nan"],
         "--delta must be in (0, 1), got nan"),
        (["epsilon", "--sigma", "nan", "--sample-rate", "0.01", "--steps", "100", "--delta", "1e-5"],
         "--sigma must be a finite number > 0, got nan"),
        (["epsilon", "--sigma", "inf", "--sample-rate", "0.01", "--steps", "100", "--delta", "1e-5"],
         "--sigma must be a finite number > 0, got inf"),
        (["epsilon", "--sigma", "4", "--sample-rate", "1.5", "--steps", "100", "--delta", "1e-5"],
         "--sample-rate must be in (0, 1], got 1.5"),
        (["epsilon", "--sigma", "4", "--sample-rate", "0", "--steps", "100", "--delta", "1e-5"],
         "--sample-rate must be in (0, 1], got 0"),
        (["epsilon", "--sigma", "4", "--sample-rate", "0.01", "--steps", "-3", "--delta", "1e-5"],
         "--steps must be a whole number >= 0, got -3"),
        (["epsilon", "--sigma", "4", "--sample-rate", "0.01", "--steps", "2.5", "--delta", "1e-5"],
         "--steps must be a whole number >= 0, got 2.5"),
        (["sigma", "--eps", "0", "--delta", "1e-5", "--sample-rate", "0.01", "--steps", "100"],
         "--eps must be a finite number > 0, got 0"),
        (["sigma", "--eps", "-1", "--delta", "1e-5", "--steps", "100"],
         "--eps must be a finite number > 0, got -1"),
        (["sigma", "--eps", "1", "--delta", "1e-5", "--sample-rate", "0.01", "--steps", "0"],
         "--steps must be a whole number >= 1, got 0"),
        (["sigma", "--eps", "1", "--delta", "1e-5", "--batch-size", "256", "--dataset-size", "60000",
          "--epochs", "3", "--steps", "10"], "either --steps or --epochs, not both"),
        (["sigma", "--eps", "1", "--delta", "1e-5", "--sample-rate", "0.01", "--batch-size", "256",
          "--dataset-size", "60000", "--epochs", "3"], "either --sample-rate or --batch-size"),
        (["sigma", "--eps", "1", "--delta", "1e-5", "--sample-rate", "0.01"], "--sample-rate needs --steps"),
        (["sigma", "--eps", "1", "--delta", "1e-5", "--batch-size", "256", "--epochs", "3"],
         "--dataset-size is needed"),
        (["sigma", "--eps", "1", "--delta", "1e-5", "--batch-size", "600", "--dataset-size", "500",
          "--epochs", "3"], "--batch-size must be at most dataset_size (500), got 600"),
        (["sigma", "--delta", "1e-5", "--steps", "10"], "Missing option '--eps'"),
        (["epsilon", "--sigma", "4", "--steps", "abc", "--delta", "1e-5"], "--steps must be a whole number"),
        (["epsilon", "--sigma", "4", "--steps", "10", "--delta", "1e-5", "--accountant", "xyz"],
         "--accountant must be one of"),
        (["sigma", "--eps", "1", "--delta", "1e-5", "--steps", "10", "--max-grad-norm", "-1"],
         "--max-grad-norm must be a finite number > 0, got -1"),
    ],
)
def test_bad_input_one_line_exit_2(run_cli, args, needle):
    r = run_cli(*args)
    assert r.exit_code == 2, (r.stdout, r.stderr)
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("Error: ")
    assert needle in lines[0]


def test_infeasible_target_exit_1(run_cli):
    # RDP with orders up to 256 cannot certify ε = 1e-4 at δ = 1e-10 for any σ: infeasible, exit 1
    r = run_cli("sigma", "--eps", "1e-4", "--delta", "1e-10", "--steps", "10", "--accountant", "rdp")
    assert r.exit_code == 1, (r.stdout, r.stderr)
    assert r.stderr.startswith("Error: ") and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("cmd", ["epsilon", "delta", "sigma"])
def test_help_ends_with_runnable_example(run_cli, cmd):
    r = run_cli(cmd, "--help")
    assert r.exit_code == 0
    last = r.stdout.strip().splitlines()[-1].strip()
    assert last.startswith("dpcalc " + cmd)
    # the example itself runs
    ex = run_cli(*last.split()[1:])
    assert ex.exit_code == 0, ex.stderr


def test_top_level_help_ends_with_example(run_cli):
    r = run_cli("--help")
    assert r.exit_code == 0, r.stderr
    assert "dpcalc sigma --eps 3" in r.stdout


def test_version(run_cli):
    import dpcalc

    r = run_cli("--version")
    assert r.exit_code == 0 and dpcalc.__version__ in r.stdout


# ---- peers' names (issue 25): Opacus's --target-epsilon/--target-delta, q with epochs, prv ----
@pytest.mark.parametrize("command,rest", [
    ("sigma", ["--sample-rate", "0.01", "--steps", "1000"]),
    ("plan", ["--dataset-size", "50000", "--batch-size", "256,1024", "--epochs", "10"]),
    ("tune", ["--sample-rate", "0.01", "--steps", "100", "--runs-distribution", "geometric", "--mean-runs", "5"]),
])
def test_target_epsilon_and_delta_are_other_spellings(run_cli, command, rest):
    ours = run_cli(command, "--eps", "3", "--delta", "1e-5", *rest, "--json")
    opacus = run_cli(command, "--target-epsilon", "3", "--target-delta", "1e-5", *rest, "--json")
    assert ours.exit_code == 0 and opacus.exit_code == 0, (ours.stderr, opacus.stderr)
    assert ours.json() == opacus.json()
    help_text = run_cli(command, "--help").stdout
    assert "--target-epsilon" in help_text and "--target-delta" in help_text
    twice = run_cli(command, "--eps", "3", "--target-epsilon", "3", "--delta", "1e-5", *rest)
    assert twice.exit_code == 2 and "more than once" in twice.stderr


@pytest.mark.parametrize("q,epochs,steps", [("0.01", "10", 1000), ("0.3", "2.5", 9), ("0.001", "0.5", 500),
                                            ("1", "3", 3)])
def test_sample_rate_with_epochs_is_opacus_pair(run_cli, q, epochs, steps):
    """T = ⌈epochs/q⌉ (Opacus's sample_rate + epochs: an epoch is 1/q expected steps), in the inputs."""
    r = run_cli("epsilon", "--sigma", "1", "-q", q, "--epochs", epochs, "--delta", "1e-5", "--accountant", "rdp",
                "--json")
    assert r.exit_code == 0, r.stderr
    same = run_cli("epsilon", "--sigma", "1", "-q", q, "--steps", str(steps), "--delta", "1e-5",
                   "--accountant", "rdp", "--json")
    assert r.json()["inputs"]["steps"] == steps and r.json()["inputs"]["epochs"] == float(epochs)
    assert r.json()["results"] == same.json()["results"]
    table = run_cli("sigma", "--eps", "3", "--delta", "1e-5", "-q", q, "--epochs", epochs, "--accountant", "rdp")
    assert f"steps={steps:,}, epochs={epochs}" in table.stdout.splitlines()[0]


def test_accountant_prv_runs_pld_with_a_note(run_cli):
    pld = run_cli("epsilon", *ABADI, "--accountant", "pld", "--json")
    prv = run_cli("epsilon", *ABADI, "--accountant", "prv", "--json")
    assert prv.exit_code == 0, prv.stderr
    assert prv.json() == pld.json()
    assert prv.stderr.count("\n") == 1 and "prv" in prv.stderr and "ran pld" in prv.stderr
    s = run_cli("sigma", "--eps", "3", "--delta", "1e-5", "-q", "0.01", "--steps", "1000", "--accountant", "prv")
    assert s.exit_code == 0 and "│ pld" in s.stdout and "ran pld" in s.stderr
    assert "prv (runs pld)" in run_cli("sigma", "--help").stdout
    bad = run_cli("epsilon", *ABADI, "--accountant", "opacus")
    assert bad.exit_code == 2 and "must be one of" in bad.stderr
