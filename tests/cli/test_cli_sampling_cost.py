"""CLI of issue 12: ``dpcalc sampling-cost`` and ``dpcalc convert shuffle``."""

from __future__ import annotations

import pytest

BASE = ["sampling-cost", "--sigma", "1", "--batch-size", "256", "--dataset-size", "60000", "--epochs", "3",
        "--delta", "1e-5"]


def test_sampling_cost_json(run_cli):
    r = run_cli(*BASE, "--mc-samples", "20000", "--json")
    assert r.exit_code == 0, r.stderr
    out = r.json()
    assert out["command"] == "sampling-cost"
    assert out["inputs"]["steps_per_epoch"] == 235 and out["inputs"]["steps"] == 705
    rows = {x["sampler"]: x for x in out["results"]}
    assert list(rows) == ["poisson", "shuffle", "balls-in-bins", "without-replacement"]  # no --max-batch-size
    for row in rows.values():
        # ε is the certified upper bound, never the lower one
        assert row["epsilon_lower"] is None or row["epsilon"] >= row["epsilon_lower"]
        assert row["poisson_epsilon"] == rows["poisson"]["epsilon"]
    assert rows["shuffle"]["epsilon"] == rows["balls-in-bins"]["epsilon"]  # the same E-fold Gaussian bound
    assert rows["shuffle"]["epsilon_lower"] > rows["poisson"]["epsilon"]  # the reported number is too small
    est = rows["balls-in-bins"]["estimate"]
    assert est["approximate"] is True and est["ci"][0] <= est["epsilon"] <= est["ci"][1]
    assert rows["balls-in-bins"]["certified"] is True and "zero-out" in rows["shuffle"]["details"]["adjacency"]


def test_sampling_cost_table_names_the_bracket(run_cli):
    r = run_cli(*BASE, "--no-monte-carlo")
    assert r.exit_code == 0, r.stderr
    for text in ("ε certified (upper)", "lower bound", "width", "shuffle", "balls-in-bins", "under-reports",
                 "never an ε"):
        assert text in r.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["--batch-size", "70000"], "--batch-size must be at most dataset_size (60,000), got 70000"),
    (["--batch-size", "0"], "--batch-size must be a whole number >= 1, got 0"),
    (["--epochs", "0"], "--epochs must be a whole number >= 1, got 0"),
    (["--epochs", "1.5"], "--epochs must be a whole number >= 1, got 1.5"),
])
def test_sampling_cost_bad_input(run_cli, args, message):
    argv = list(BASE)
    flag = args[0]
    argv[argv.index(flag) + 1] = args[1]
    r = run_cli(*argv)
    assert r.exit_code == 2
    assert r.stderr == f"Error: {message}\n"


def test_sampling_cost_plot(run_cli, tmp_path):
    pytest.importorskip("matplotlib")
    target = tmp_path / "cost.png"
    r = run_cli(*BASE, "--no-monte-carlo", "--plot", str(target))
    assert r.exit_code == 0, r.stderr
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bad = run_cli(*BASE, "--plot", str(tmp_path / "missing" / "x.png"))
    assert bad.exit_code == 2 and bad.stderr.count("\n") == 1


def test_convert_shuffle(run_cli):
    r = run_cli("convert", "shuffle", "--eps0", "4", "--n", "100000", "--delta", "1e-6", "--json")
    assert r.exit_code == 0, r.stderr
    rows = {x["method"]: x for x in r.json()["results"]}
    assert rows["numerical"]["epsilon"] <= rows["closed-form"]["epsilon"] < 4
    t = run_cli("convert", "shuffle", "--eps0", "8", "--n", "1000", "--delta", "1e-6")
    assert t.exit_code == 0 and "not applicable" in t.stdout and "16 ln(4/δ)" in t.stdout
    bad = run_cli("convert", "shuffle", "--eps0", "-1", "--n", "1000", "--delta", "1e-6")
    assert bad.exit_code == 2 and bad.stderr.startswith("Error: --eps0 must be")


def test_sampling_cost_registry_rows_are_the_accountants_numbers(run_cli):
    """without-replacement (replace-one) and truncated-poisson (add/remove, with --max-batch-size) rows are
    exactly what `dpcalc epsilon --sampling X` certifies for the same T steps; no lower bound is claimed."""
    r = run_cli(*BASE, "--no-monte-carlo", "--max-batch-size", "300", "--json")
    assert r.exit_code == 0, r.stderr
    rows = {x["sampler"]: x for x in r.json()["results"]}
    assert list(rows) == ["poisson", "shuffle", "balls-in-bins", "without-replacement", "truncated-poisson"]
    wor, trunc = rows["without-replacement"], rows["truncated-poisson"]
    assert wor["details"]["adjacency"] == "replace" and "replace-one" in wor["details"]["note"]
    assert trunc["details"]["adjacency"] == "add-remove"
    assert wor["epsilon_lower"] is None and trunc["epsilon_lower"] is None and wor["certified"]
    common = ["epsilon", "--sigma", "1", "--batch-size", "256", "--dataset-size", "60000", "--steps", "705",
              "--delta", "1e-5", "--json"]
    e_wor = run_cli(*common, "--sampling", "without-replacement", "--neighboring", "replace", "--accountant",
                    wor["details"]["accountant"]).json()["results"][0]["epsilon"]
    e_tr = run_cli(*common, "--sampling", "truncated-poisson", "--max-batch-size", "300", "--accountant",
                   trunc["details"]["accountant"]).json()["results"][0]["epsilon"]
    assert wor["epsilon"] == e_wor and trunc["epsilon"] == e_tr


def test_sampling_cost_without_max_batch_size_says_truncated_is_omitted(run_cli):
    r = run_cli(*BASE, "--no-monte-carlo")
    assert r.exit_code == 0, r.stderr
    text = " ".join(r.stdout.split())
    assert "truncated-poisson: row omitted (give --max-batch-size" in text
    assert "without-replacement: replace-one" in text
