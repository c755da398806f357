"""``--sampling`` on epsilon, delta, sigma, compose and plan (issue 12): not-applicable rows with the
reason, one-line refusals (exit 2) of bad inputs and of sampler/adjacency pairs without a proof,
and the δ ≥ 1/N warning (table and JSON ``warnings``)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from dpcalc.cli import cli

WOR = ["--sampling", "without-replacement", "--neighboring", "replace"]
BATCHES = ["--batch-size", "256", "--dataset-size", "60000"]


def run(*args: str):
    return CliRunner().invoke(cli, list(args), prog_name="dpcalc")


def refused(res, *words: str) -> None:
    assert res.exit_code == 2, (res.exit_code, res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), res.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])


@pytest.mark.parametrize("args,words", [
    (["epsilon", "--sigma", "1", "--batch-size", "600", "--dataset-size", "60", "--steps", "10", "--delta", "1e-5",
      *WOR], ["--batch-size", "at most dataset_size (60)", "600"]),
    (["epsilon", "--sigma", "1", "--batch-size", "0", "--dataset-size", "60", "--steps", "10", "--delta", "1e-5",
      *WOR], ["--batch-size", "0"]),
    (["epsilon", "--sigma", "1", *BATCHES, "--epochs", "0", "--delta", "1e-6", *WOR], ["--epochs", "0"]),
    (["sigma", "--eps", "1", *BATCHES, "--epochs", "1", "--delta", "1e-6", "--sampling", "with-replacement",
      "--neighboring", "replace"], ["with-replacement", "proven for add/remove", "--neighboring add-remove"]),
    (["delta", "--sigma", "1", *BATCHES, "--epochs", "1", "--eps", "1", "--sampling", "truncated-poisson",
      "--max-batch-size", "300", "--neighboring", "replace"], ["truncated-poisson", "add/remove"]),
    (["epsilon", "--sigma", "1", *BATCHES, "--epochs", "1", "--delta", "1e-6", "--max-batch-size", "300"],
     ["--max-batch-size", "truncated-poisson only"]),
    (["epsilon", "--sigma", "1", "-q", "0.01", "--steps", "10", "--delta", "1e-6", *WOR],
     ["--batch-size and --dataset-size"]),
    (["compose", "--gaussian", "1", "--sampling", "without-replacement", "--batch-size", "200", "--dataset-size",
      "100", "--delta", "1e-6"], ["batch_size", "at most dataset_size (100)"]),
    (["compose", "--laplace", "1", "--sampling", "poisson", "--delta", "1e-6"], ["--gaussian only"]),
])
def test_bad_sampler_input_is_one_line_exit_2(args, words):
    refused(run(*args), *words)


def test_epsilon_without_replacement_rows_and_reasons():
    res = run("epsilon", "--sigma", "2", *BATCHES, "--epochs", "1", "--delta", "1e-6", *WOR, "--json")
    assert res.exit_code == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["inputs"]["sampling"] == "without-replacement"
    assert out["inputs"]["sample_rate"] == 256 / 60000
    rows = {r["accountant"]: r for r in out["results"]}
    for name in ("pld", "rdp"):
        assert rows[name].get("applicable", True) and rows[name]["epsilon"] > 0
    assert rows["pld"]["epsilon"] <= rows["rdp"]["epsilon"]
    for name in ("zcdp", "gdp"):
        assert rows[name]["applicable"] is False and "without-replacement" in rows[name]["reason"]
    assert "warnings" not in out  # δ = 1e-6 < 1/N
    table = run("epsilon", "--sigma", "2", *BATCHES, "--epochs", "1", "--delta", "1e-6", *WOR)
    assert "Sampler: without-replacement" in table.stdout and "n/a: zcdp" in table.stdout


def test_small_delta_warning_table_and_json():
    args = ["epsilon", "--sigma", "2", *BATCHES, "--epochs", "1", "--delta", "1e-4", "--accountant", "rdp"]
    out = json.loads(run(*args, "--json").stdout)
    assert len(out["warnings"]) == 1 and "1/N" in out["warnings"][0]
    assert "Warning: delta = 0.0001 is at least 1/N" in run(*args).stdout
    sig = json.loads(run("sigma", "--eps", "2", "--delta", "1e-4", *BATCHES, "--epochs", "1", "--json").stdout)
    assert "1/N" in sig["warnings"][0]
    # without N (sample rate and steps) there is nothing to compare with
    assert "warnings" not in json.loads(run("epsilon", "--sigma", "2", "-q", "0.01", "--steps", "10",
                                            "--delta", "0.01", "--accountant", "rdp", "--json").stdout)
    comp = json.loads(run("compose", "--gaussian", "2", "--sample-rate", "0.01", "--sampling", "truncated-poisson",
                          "--dataset-size", "1000", "--max-batch-size", "20", "--count", "10", "--delta", "0.01",
                          "--json").stdout)
    assert "1/N" in comp["warnings"][0]
    plan = json.loads(run("plan", "--eps", "3", "--delta", "1e-3", "--dataset-size", "50000", "--batch-size", "256",
                          "--epochs", "1", "--accountant", "rdp", "--json").stdout)
    assert "1/N" in plan["warnings"][0]


def test_sigma_defaults_to_an_accountant_with_a_proof():
    """Without replacement: the default accountant is pld (its symmetric pair); truncated Poisson:
    pld too (its branch-decomposition pair, dpcalc/accounting/_truncated_pld.py)."""
    out = json.loads(run("sigma", "--eps", "3", "--delta", "1e-6", *BATCHES, "--epochs", "5", *WOR, "--json").stdout)
    (row,) = out["results"]
    assert row["accountant"] == "pld" and row["epsilon"] <= 3.0
    trunc = json.loads(run("sigma", "--eps", "3", "--delta", "1e-6", *BATCHES, "--epochs", "5", "--sampling",
                           "truncated-poisson", "--max-batch-size", "300", "--json").stdout)
    assert trunc["results"][0]["accountant"] == "pld" and trunc["results"][0]["epsilon"] <= 3.0
    poisson = json.loads(run("sigma", "--eps", "3", "--delta", "1e-6", *BATCHES, "--epochs", "5",
                             "--accountant", "rdp", "--json").stdout)["results"][0]
    assert row["noise_multiplier"] > poisson["noise_multiplier"]  # replace-one: more noise


def test_truncated_poisson_epsilon_delta_compose_agree():
    """The same truncated-Poisson history through epsilon, delta and compose (rdp)."""
    common = ["--sigma", "1.5", "--batch-size", "100", "--dataset-size", "10000", "--steps", "300",
              "--sampling", "truncated-poisson", "--max-batch-size", "110", "--accountant", "rdp", "--json"]
    eps = json.loads(run("epsilon", *common, "--delta", "1e-6").stdout)["results"][0]["epsilon"]
    dlt = json.loads(run("delta", *common, "--eps", repr(eps)).stdout)["results"][0]["delta"]
    assert dlt <= 1e-6 * (1 + 1e-6)
    comp = json.loads(run("compose", "--gaussian", "1.5", "--sample-rate", "0.01", "--sampling", "truncated-poisson",
                          "--dataset-size", "10000", "--max-batch-size", "110", "--count", "300", "--delta", "1e-6",
                          "--method", "rdp", "--json").stdout)
    assert comp["results"][0]["epsilon"] == pytest.approx(eps, rel=1e-9)


def test_plan_without_replacement_runs_with_pld():
    res = run("plan", "--eps", "3", "--delta", "1e-6", "--dataset-size", "50000", "--batch-size", "256,1024",
              "--epochs", "5", *WOR, "--json")
    assert res.exit_code == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["inputs"]["accountant"] == "pld" and out["inputs"]["sampling"] == "without-replacement"
    assert all(r["epsilon"] <= 3.0 for r in out["results"])
    refused(run("plan", "--eps", "3", "--delta", "1e-6", "--dataset-size", "50000", "--batch-size", "256",
                "--epochs", "1", "--sampling", "truncated-poisson"), "truncated-poisson")


# ----------------------------------------------------------------------------- shuffle, balls-in-bins

SHUF = ["--sampling", "shuffle"]


def _json(res) -> dict:
    assert res.exit_code == 0, (res.stdout, res.stderr)
    return json.loads(res.stdout)


def test_epsilon_shuffle_is_the_certified_e_fold_gaussian_with_its_bracket():
    """epsilon --sampling shuffle: every accountant's ε is the E-fold Gaussian's (gdp: exact, equal to
    shuffling.certified_upper_epsilon; pld within its accuracy, above), the adjacency is zero-out, and the
    JSON ``sampler`` has lower ≤ upper, the width and the Poisson ε (Chua et al. 2024; docs/design.md §4)."""
    from dpcalc.accounting import shuffling as sh

    out = _json(run("epsilon", "--sigma", "1", *BATCHES, "--epochs", "10", "--delta", "1e-5", *SHUF, "--json"))
    exact = sh.certified_upper_epsilon(noise_multiplier=1.0, epochs=10, delta=1e-5)
    rows = {r["accountant"]: r for r in out["results"]}
    assert rows["gdp"]["epsilon"] == exact
    assert exact <= rows["pld"]["epsilon"] <= exact * 1.01
    assert all(r["epsilon"] >= exact * (1 - 1e-12) for r in out["results"] if r.get("applicable", True))
    assert out["inputs"]["neighboring"] == "zero-out" and out["inputs"]["steps"] == 2350
    b = out["sampler"]
    assert b["epsilon"] == exact and 0 < b["epsilon_lower"] <= b["epsilon"]
    assert b["width"] == pytest.approx(b["epsilon"] - b["epsilon_lower"])
    poisson = _json(run("epsilon", "--sigma", "1", *BATCHES, "--steps", "2350", "--delta", "1e-5", "--accountant",
                        "pld", "--json"))["results"][0]["epsilon"]  # Poisson, q = B/N, the same T
    assert b["poisson_epsilon"] == poisson < b["epsilon_lower"]  # the number users report is below the lower bound


def test_epsilon_shuffle_table_prints_bracket_width_poisson_and_adjacency():
    res = run("epsilon", "--sigma", "1", *BATCHES, "--epochs", "10", "--delta", "1e-5", *SHUF, "--accountant", "pld")
    assert res.exit_code == 0, res.stderr
    text = " ".join(res.stdout.split())
    for words in ("Adjacency: zero-out", "lies in [7.231, 17.86]", "width", "Poisson ε a user might have reported",
                  "under-reports ε", "composed 10 times"):
        assert words in text, words


def test_epsilon_partial_epoch_is_rounded_up():
    """2.5 epochs: the certified ε is the 3-fold Gaussian's, the lower bound that of 2 whole epochs."""
    from dpcalc.accounting import shuffling as sh

    out = _json(run("epsilon", "--sigma", "1", *BATCHES, "--epochs", "2.5", "--delta", "1e-5", *SHUF, "--accountant",
                    "gdp", "--json"))
    three = sh.certified_upper_epsilon(noise_multiplier=1.0, epochs=3, delta=1e-5)
    assert out["results"][0]["epsilon"] == out["sampler"]["epsilon"] == three
    assert out["sampler"]["epsilon_lower"] == sh.shuffle_lower_epsilon(noise_multiplier=1.0, steps_per_epoch=235,
                                                                       epochs=2, delta=1e-5)


@pytest.mark.parametrize("sampling", ["shuffle", "balls-in-bins"])
def test_sigma_shuffle_calibrates_on_the_certified_upper_bound(sampling):
    """σ from sigma --sampling X fed back to epsilon gives ε ≤ target, and equals the σ of the unsampled
    Gaussian composed E times (the certified upper bound; never the lower bound or an estimate)."""
    out = _json(run("sigma", "--eps", "3", "--delta", "1e-5", *BATCHES, "--epochs", "10", "--sampling", sampling,
                    "--json"))
    row = out["results"][0]
    sigma = row["noise_multiplier"]
    back = _json(run("epsilon", "--sigma", repr(sigma), *BATCHES, "--epochs", "10", "--delta", "1e-5", "--sampling",
                     sampling, "--accountant", row["accountant"], "--json"))
    assert back["results"][0]["epsilon"] <= 3.0
    assert back["sampler"]["epsilon_lower"] <= back["sampler"]["epsilon"] <= 3.0
    plain = _json(run("sigma", "--eps", "3", "--delta", "1e-5", "--steps", "10", "--accountant", row["accountant"],
                      "--json"))
    assert sigma == plain["results"][0]["noise_multiplier"]
    assert out["sampler"]["epsilon"] <= 3.0


def test_delta_and_replace_one_shuffle():
    """--neighboring replace: the accountants' replace-one Gaussian (sensitivity 2, μ = 2√E/σ), no zero-out bracket."""
    from dpcalc.mechanisms.gaussian import gaussian_epsilon

    out = _json(run("epsilon", "--sigma", "2", *BATCHES, "--epochs", "4", "--delta", "1e-5", *SHUF, "--neighboring",
                    "replace", "--accountant", "gdp", "--json"))
    assert out["inputs"]["neighboring"] == "replace" and "sampler" not in out
    assert out["results"][0]["epsilon"] == pytest.approx(gaussian_epsilon(delta=1e-5, mu=2.0), rel=1e-12)
    d = run("delta", "--sigma", "1", *BATCHES, "--epochs", "2", "--eps", "4", "--sampling", "balls-in-bins")
    assert d.exit_code == 0 and "Adjacency: zero-out" in " ".join(d.stdout.split())


@pytest.mark.parametrize("args,words", [
    (["epsilon", "--sigma", "1", *BATCHES, "--epochs", "1", "--delta", "1e-5", *SHUF, "--neighboring", "add-remove"],
     ["shuffle", "add-remove", "zero-out", "layout"]),
    (["sigma", "--eps", "1", *BATCHES, "--epochs", "1", "--delta", "1e-5", "--sampling", "balls-in-bins",
      "--neighboring", "add-remove"], ["balls-in-bins", "add-remove", "layout"]),
    (["plan", "--eps", "1", "--delta", "1e-5", "--dataset-size", "1000", "--batch-size", "10", "--epochs", "1",
      *SHUF, "--neighboring", "add-remove"], ["shuffle", "add-remove"]),
    (["epsilon", "--sigma", "1", "--batch-size", "600", "--dataset-size", "60", "--epochs", "1", "--delta", "1e-5",
      *SHUF], ["--batch-size", "at most dataset_size (60)", "600"]),
    (["epsilon", "--sigma", "1", *BATCHES, "--epochs", "0", "--delta", "1e-5", *SHUF], ["--epochs", "0"]),
    (["epsilon", "--sigma", "1", "-q", "0.01", "--steps", "10", "--delta", "1e-5", *SHUF], ["--batch-size"]),
    (["compose", "--gaussian", "1", "--count", "10", *SHUF, "--batch-size", "10", "--dataset-size", "100",
      "--delta", "1e-5"], ["compose", "add/remove", "shuffle", "dpcalc epsilon"]),
])
def test_bad_shuffle_input_is_one_line_exit_2(args, words):
    refused(run(*args), *words)


def test_plan_shuffle_epochs_are_whole_passes():
    """plan --sampling shuffle: an epoch is ceil(N/B) steps; each cell's σ is sigma's (the certified bound)."""
    out = _json(run("plan", "--eps", "3", "--delta", "1e-5", "--dataset-size", "60000", "--batch-size", "256",
                    "--epochs", "10", *SHUF, "--json"))
    cell = out["results"][0]
    assert cell["steps"] == 2350 and out["inputs"]["neighboring"] == "zero-out"
    ref = _json(run("sigma", "--eps", "3", "--delta", "1e-5", *BATCHES, "--epochs", "10", *SHUF, "--accountant",
                    cell["accountant"], "--json"))
    assert cell["noise_multiplier"] == ref["results"][0]["noise_multiplier"]
    at = _json(run("plan", "--eps", "3", "--delta", "1e-5", "--dataset-size", "60000", "--batch-size", "256",
                   "--sigma", "3", *SHUF, "--json"))["results"][0]
    assert at["steps"] % 235 == 0 and at["max_epochs"] == at["steps"] // 235
