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
    (["epsilon", "--sigma", "1", *BATCHES, "--epochs", "1", "--delta", "1e-6", "--sampling", "without-replacement"],
     ["without-replacement", "add-remove", "replace-one", "--neighboring replace"]),
    (["sigma", "--eps", "1", *BATCHES, "--epochs", "1", "--delta", "1e-6", "--sampling", "with-replacement",
      "--neighboring", "replace"], ["with-replacement", "no certified bound"]),
    (["delta", "--sigma", "1", *BATCHES, "--epochs", "1", "--eps", "1", "--sampling", "truncated-poisson",
      "--max-batch-size", "300", "--neighboring", "replace"], ["truncated-poisson", "add/remove"]),
    (["epsilon", "--sigma", "1", *BATCHES, "--epochs", "1", "--delta", "1e-6", "--max-batch-size", "300"],
     ["--max-batch-size", "truncated-poisson only"]),
    (["epsilon", "--sigma", "1", "-q", "0.01", "--steps", "10", "--delta", "1e-6", *WOR],
     ["--batch-size and --dataset-size"]),
    (["compose", "--gaussian", "1", "--sampling", "without-replacement", "--batch-size", "10", "--dataset-size",
      "100", "--count", "10", "--delta", "1e-6"], ["without-replacement", "add-remove"]),
    (["compose", "--gaussian", "1", "--sampling", "without-replacement", "--batch-size", "200", "--dataset-size",
      "100", "--delta", "1e-6"], ["batch_size", "at most dataset_size (100)"]),
    (["compose", "--laplace", "1", "--sampling", "poisson", "--delta", "1e-6"], ["--gaussian only"]),
    (["plan", "--eps", "3", "--delta", "1e-6", "--dataset-size", "50000", "--batch-size", "256", "--epochs", "1",
      "--sampling", "without-replacement"], ["replace-one"]),
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
    rdp (pld has no analysis of it)."""
    out = json.loads(run("sigma", "--eps", "3", "--delta", "1e-6", *BATCHES, "--epochs", "5", *WOR, "--json").stdout)
    (row,) = out["results"]
    assert row["accountant"] == "pld" and row["epsilon"] <= 3.0
    trunc = json.loads(run("sigma", "--eps", "3", "--delta", "1e-6", *BATCHES, "--epochs", "5", "--sampling",
                           "truncated-poisson", "--max-batch-size", "300", "--json").stdout)
    assert trunc["results"][0]["accountant"] == "rdp"
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
