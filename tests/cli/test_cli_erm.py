"""``dpcalc erm`` at the command line: the calculator's numbers are the library's closed forms
(CMS11), the fit runs on the bundled breast-cancer example, and bad input is one line with exit
status 2 (λ ≤ 0, strings in a feature column, three classes, an empty CSV, ...)."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "examples", "breast-cancer.csv")


def test_calculator_json_matches_cms11(run_cli):
    r = run_cli("erm", "--eps", "1", "--dataset-size", "1000", "--dims", "11", "--lambda", "0.01", "--json")
    assert r.exit_code == 0, r.stderr
    out = r.json()
    by = {x["method"]: x for x in out["results"]}
    # CMS11 Alg. 1: Δ₂ = 2/(nΛ) = 0.2, β = nΛε/2 = 5; Alg. 2: ε' = 1 − 2 ln(1 + 0.25/10), β = ε'/2
    assert by["output"]["sensitivity"] == pytest.approx(0.2, rel=1e-12)
    assert by["output"]["rate"] == pytest.approx(5.0, rel=1e-12)
    assert by["objective"]["epsilon_noise"] == pytest.approx(1 - 2 * math.log(1.025), rel=1e-12)
    assert by["objective"]["rate"] == pytest.approx((1 - 2 * math.log(1.025)) / 2, rel=1e-12)
    assert by["objective"]["branch"] == "main" and all(x["certified"] for x in out["results"])


def test_calculator_fallback_branch_is_shown(run_cli):
    r = run_cli("erm", "--eps", "0.1", "--dataset-size", "100", "--dims", "5", "--lambda", "0.01",
                "--method", "objective")
    assert r.exit_code == 0 and "fallback" in r.stdout


def test_calculator_gaussian(run_cli):
    r = run_cli("erm", "--eps", "1", "--delta", "1e-5", "--dataset-size", "10000", "--dims", "785",
                "--lambda", "1e-3", "--json")
    assert r.exit_code == 0
    res = r.json()["results"]
    assert {x["noise"] for x in res} == {"gaussian"}
    assert res[1]["details"]["kst12_published_noise_std"] < res[1]["noise_std"]


def test_fit_on_the_example(run_cli, tmp_path):
    model = tmp_path / "model.json"
    r = run_cli("erm", "--fit", EXAMPLE, "--label", "diagnosis", "--eps", "1", "--lambda", "0.01",
                "--norm-bound", "1", "--method", "objective", "--seed", "3", "--save-model", str(model), "--json")
    assert r.exit_code == 0, r.stderr
    out = r.json()
    assert out["inputs"]["dataset_size"] == 455 and out["inputs"]["dims"] == 11
    nonpriv, obj = out["results"]
    assert nonpriv["method"] == "non-private" and nonpriv["epsilon"] is None
    assert obj["method"] == "objective" and obj["certified"] is False and "exact" in obj["reason"]
    assert 0.5 <= obj["test_accuracy"] <= 1 and nonpriv["test_accuracy"] > 0.8
    saved = json.loads(model.read_text())
    assert list(saved["weights"])[-1] == "(intercept)" and len(saved["weights"]) == 11
    assert saved["classes"] == {"-1": "benign", "+1": "malignant"}
    assert saved["privacy"]["epsilon"] == 1.0
    # the same seed gives the same model (reproducible), and the table mentions the scaling rule
    again = run_cli("erm", "--fit", EXAMPLE, "--label", "diagnosis", "--eps", "1", "--lambda", "0.01",
                    "--norm-bound", "1", "--method", "objective", "--seed", "3")
    assert "clipped to L2 norm 1" in again.stdout and "not for a real release" in again.stdout
    assert f"{obj['test_accuracy']:.4g}" in again.stdout


def test_fit_output_and_objective_and_csprng(run_cli):
    r = run_cli("erm", "--fit", EXAMPLE, "--label", "diagnosis", "--eps", "2", "--delta", "1e-6",
                "--lambda", "0.01")
    assert r.exit_code == 0, r.stderr
    assert "OS CSPRNG" in r.stdout and "output" in r.stdout and "objective" in r.stdout


def _csv(tmp_path, text, name="d.csv"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


@pytest.mark.parametrize(("text", "needle"), [
    ("a,b,y\n1,2,p\n3,abc,q\n", "line 3, column 'b': 'abc' is not a number"),
    ("a,b,y\n1,2,p\n3,4,q\n5,6,r\n", "has 3 classes ('p', 'q', 'r'); dpcalc erm fits two-class"),
    ("a,b,y\n1,2,p\n3,4,p\n", "has 1 class ('p')"),
    ("", "is empty"),
    ("a,b,y\n", "has no data rows"),
    ("a,b,y\n1,2,p\n3,q\n", "line 3 has 2 fields, the header has 3"),
    ("a,b,y\n1,nan,p\n3,4,q\n", "line 2, column 'b': 'nan' is not finite"),
    ("a,a,y\n1,2,p\n", "column name 'a' appears twice"),
    ("a,b,z\n1,2,p\n3,4,q\n", "--label 'y' is not a column"),
    ("y\np\nq\n", "no feature column"),
    ("a,b,y\n1,2,\n3,4,q\n", "line 2, column 'y': empty label"),
])
def test_bad_csv_is_one_line_exit_2(run_cli, tmp_path, text, needle):
    path = _csv(tmp_path, text)
    r = run_cli("erm", "--fit", path, "--label", "y", "--eps", "1", "--lambda", "0.1")
    assert r.exit_code == 2, (r.stdout, r.stderr)
    assert r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1 and needle in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize(("args", "needle"), [
    (["--lambda", "0"], "--lambda must be a finite number > 0, got 0"),
    (["--lambda", "-1"], "--lambda must be a finite number > 0, got -1"),
    (["--lambda", "1", "--dims", "5"], "--dataset-size is required"),
    (["--lambda", "1", "--dataset-size", "5", "--dims", "5", "--label", "y"], "--label is used only with --fit"),
    (["--lambda", "1", "--dataset-size", "5", "--dims", "5", "--delta", "1"], "--delta must be in [0, 1)"),
    (["--lambda", "1", "--dataset-size", "0", "--dims", "5"], "--dataset-size must be a whole number >= 1"),
])
def test_bad_calculator_input(run_cli, args, needle):
    r = run_cli("erm", "--eps", "1", *args)
    assert r.exit_code == 2 and r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1, r.stderr
    assert needle in r.stderr, r.stderr


def test_fit_option_conflicts(run_cli, tmp_path):
    r = run_cli("erm", "--fit", EXAMPLE, "--eps", "1", "--lambda", "0.1")
    assert r.exit_code == 2 and "--label COLUMN is required" in r.stderr
    r = run_cli("erm", "--fit", EXAMPLE, "--label", "diagnosis", "--eps", "1", "--lambda", "0.1", "--dims", "3")
    assert r.exit_code == 2 and "counted from the --fit file" in r.stderr
    r = run_cli("erm", "--fit", EXAMPLE, "--label", "diagnosis", "--eps", "1", "--lambda", "0.1",
                "--lipschitz", "2")
    assert r.exit_code == 2 and "fixed by the logistic loss" in r.stderr
    r = run_cli("erm", "--fit", EXAMPLE, "--label", "diagnosis", "--eps", "1", "--lambda", "0.1",
                "--save-model", str(tmp_path / "m.json"))
    assert r.exit_code == 2 and "--save-model needs one model" in r.stderr
    assert not (tmp_path / "m.json").exists()
    r = run_cli("erm", "--fit", "/dev/zero", "--label", "y", "--eps", "1", "--lambda", "0.1")
    assert r.exit_code == 2 and "not a regular file" in r.stderr


def test_save_model_into_missing_directory_writes_nothing(run_cli, tmp_path):
    target = tmp_path / "nope" / "m.json"
    r = run_cli("erm", "--fit", EXAMPLE, "--label", "diagnosis", "--eps", "1", "--lambda", "0.1",
                "--method", "output", "--save-model", str(target))
    assert r.exit_code == 2 and "does not exist" in r.stderr and r.stderr.count("\n") == 1
    assert not target.parent.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".dpcalc-erm-")]


def test_saved_model_predicts_like_the_library(run_cli, tmp_path):
    """The saved weights applied with the stated rule reproduce the reported test accuracy."""
    from dpcalc.mechanisms import erm

    model = tmp_path / "m.json"
    r = run_cli("erm", "--fit", EXAMPLE, "--label", "diagnosis", "--eps", "5", "--lambda", "0.01",
                "--method", "output", "--seed", "1", "--save-model", str(model), "--json")
    assert r.exit_code == 0, r.stderr
    acc = r.json()["results"][1]["test_accuracy"]
    saved = json.loads(model.read_text())
    data = erm.read_csv_dataset(EXAMPLE, label="diagnosis")
    z, _ = erm.scale_rows(data.features, norm_bound=saved["scaling"]["norm_bound"])
    _, test = erm.split_indices(z.shape[0], test_fraction=0.2, seed=0)
    w = np.array(list(saved["weights"].values()))
    assert erm.accuracy(w, z[test], data.labels[test]) == acc


def test_calculator_stays_light_at_run_time():
    """Calculator mode imports neither scipy.stats nor scipy.optimize (nor torch, sklearn) even
    when it runs (the fit may import scipy.optimize)."""
    import subprocess
    import sys

    code = ("import sys\nfrom dpcalc.cli import cli\n"
            "cli.main(['erm', '--eps', '1', '--delta', '1e-5', '--dataset-size', '100', '--dims', '5', "
            "'--lambda', '0.1', '--json'], prog_name='dpcalc', standalone_mode=False)\n"
            "print([m for m in ('scipy.stats', 'scipy.optimize', 'torch', 'sklearn') if m in sys.modules])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"
