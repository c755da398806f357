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
    rows = {x["sampler"]: x for x in out["results"] if x["details"]["adjacency"] != "add-remove"}
    assert [(x["sampler"], x["details"]["adjacency"].split(" ")[0]) for x in out["results"]] == [
        ("poisson", "add/remove"), ("shuffle", "zero-out"), ("balls-in-bins", "zero-out"),
        ("without-replacement", "replace"), ("without-replacement", "add-remove"),
        ("with-replacement", "add-remove")]  # no --max-batch-size: no truncated-poisson row
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
    """The without-replacement rows (replace-one; add/remove), the with-replacement row (add/remove) and the
    truncated-poisson row (add/remove, with --max-batch-size) are exactly what `dpcalc epsilon --sampling X
    --neighboring A` certifies for the same T steps with the accountant the row names (the tightest certified
    one with a proof: pld for every fixed-size and truncated-Poisson sampler — issue 32); no lower
    bound is claimed."""
    r = run_cli(*BASE, "--no-monte-carlo", "--max-batch-size", "300", "--json")
    assert r.exit_code == 0, r.stderr
    rows = {(x["sampler"], x["details"]["adjacency"]): x for x in r.json()["results"]}
    registry = [("without-replacement", "replace"), ("without-replacement", "add-remove"),
                ("with-replacement", "add-remove"), ("truncated-poisson", "add-remove")]
    assert [k[0] for k in rows] == ["poisson", "shuffle", "balls-in-bins"] + [k[0] for k in registry]
    assert "replace-one" in rows[registry[0]]["details"]["note"]
    assert [rows[k]["details"]["accountant"] for k in registry] == ["pld", "pld", "pld", "pld"]
    common = ["epsilon", "--sigma", "1", "--batch-size", "256", "--dataset-size", "60000", "--steps", "705",
              "--delta", "1e-5", "--json"]
    for sampling, adjacency in registry:
        row = rows[(sampling, adjacency)]
        assert row["epsilon_lower"] is None and row["certified"] is True
        extra = ["--max-batch-size", "300"] if sampling == "truncated-poisson" else []
        e = run_cli(*common, "--sampling", sampling, "--neighboring", adjacency, *extra, "--accountant",
                    row["details"]["accountant"]).json()["results"][0]["epsilon"]
        assert row["epsilon"] == e
    # the add/remove without-replacement row is not the replace-one number (another adjacency)
    assert rows[registry[1]]["epsilon"] != rows[registry[0]]["epsilon"]


def test_sampling_cost_table_labels_each_rows_adjacency(run_cli):
    r = run_cli(*BASE, "--no-monte-carlo")
    assert r.exit_code == 0, r.stderr
    lines = [" ".join(x.replace("│", " ").split()) for x in r.stdout.splitlines()]
    for start in ("poisson add/remove", "shuffle zero-out", "balls-in-bins zero-out", "without-replacement replace-one",
                  "without-replacement add/remove", "with-replacement add/remove"):
        assert any(x.startswith(start) for x in lines), start


def test_sampling_cost_without_max_batch_size_says_truncated_is_omitted(run_cli):
    r = run_cli(*BASE, "--no-monte-carlo")
    assert r.exit_code == 0, r.stderr
    text = " ".join(r.stdout.split())
    assert "truncated-poisson: row omitted (give --max-batch-size" in text
    assert "each row's adjacency is in its column" in text
