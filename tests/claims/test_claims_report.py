"""``dpcalc report``: the DP statement of a run, from options and from the sidecar of a real (tiny,
synthetic) ``dpcalc train`` run; ``dpcalc train --save-model`` writes the same statement beside
the model; and the docs example — the statement of the README's Fashion-MNIST run
(docs/examples/fmnist27_model.pt.json and .dp.md) — is regenerated here so it cannot drift.

The README run's sidecar is rebuilt from its printed settings (σ = 1.9572187, q = 2048/60000,
1,172 steps, δ = 1e-5, C = 0.1, 86.53%, 285 s) with the key layout of the sidecar a real run
writes today (checked against a tiny synthetic run with the same options) and the pld numbers
of those settings (the run's own accountant).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dpcalc.claims.statement import (
    CHECKLIST_SOURCE,
    build_statement,
    render_markdown,
    run_from_sidecar,
)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs/examples/fmnist27_model.pt.json"
EXAMPLE_MD = ROOT / "docs/examples/fmnist27_model.pt.dp.md"
FMNIST = dict(sigma=1.9572187, q=2048 / 60000, steps=1172, delta=1e-5)
ITEMS = ("DP setting", "Data accesses covered", "Final mechanism output", "Unit of privacy", "Adjacency definition",
         "Type of accounting", "Accounting assumptions", "Formal DP statement", "Hyperparameter tuning",
         "Empirical audit", "Transparency and verifiability")


def _epsilon(sigma, q, steps, delta):
    from dpcalc.accounting.dpsgd import epsilon_by_accountant
    from dpcalc.schedule import Schedule

    return epsilon_by_accountant(noise_multiplier=sigma, schedule=Schedule(q, steps, "sample_rate"), delta=delta,
                                 accountants=["pld"])[0]


def fmnist_sidecar() -> dict:
    """The sidecar of the README's Fashion-MNIST run (`dpcalc train --dataset fashion-mnist --model
    tanh-cnn --target-epsilon 2.7 --delta 1e-5 --epochs 40 --batch-size 2048 --lr 4 --optimizer
    momentum --momentum 0.9 --max-grad-norm 0.1 --seed 0 ... --save-model runs/fmnist27_model.pt`),
    as dpcalc/train/loop.py's save_model writes it."""
    acc = _epsilon(FMNIST["sigma"], FMNIST["q"], FMNIST["steps"], FMNIST["delta"])
    details = dict(acc.details, planned_steps=1172, dataset_size=60000, expected_batch_size=FMNIST["q"] * 60000,
                   calibrated_for_epsilon=2.7)
    return {"dpcalc_version": "0.1.0", "model": "tanh-cnn", "dataset": "fashion-mnist", "max_grad_norm": 0.1,
            "batch_size": 2048, "optimizer": "momentum", "lr": 4.0, "seed": 0, "accountant": "pld",
            "epsilon": acc.epsilon, "delta": 1e-5, "certified": True, "noise_multiplier": FMNIST["sigma"],
            "sample_rate": FMNIST["q"], "steps": 1172, "test_accuracy": 0.8653, "epochs": 1172 * FMNIST["q"],
            "seconds": 285.0, "details": details}


def _keys(d: dict) -> tuple[set, set]:
    return set(d), set(d["details"])


# ----------------------------------------------------------------------------- from options

def test_report_from_options_markdown(run_cli):
    r = run_cli("report", "--sigma", "1.9572187", "--batch-size", "2048", "--dataset-size", "60000", "--steps",
                "1172", "--delta", "1e-5", "--max-grad-norm", "0.1")
    assert r.exit_code == 0, r.stderr
    md = r.stdout
    acc = _epsilon(**FMNIST)
    assert "certified upper bound" in md and "pld" in md
    from dpcalc._rounding import format_bound as _fmt

    assert f"ε = {_fmt(acc.epsilon)} at δ = 1e-05" in md  # the pld number, rounded up
    assert f"[{_fmt(acc.details['epsilon_lower'], 'down')}, {_fmt(acc.epsilon)}]" in md
    assert "δ = 1e-05 = 0.6/N (N = 60,000): below 1/N" in md
    assert "membership inference, TPR at FPR = 0.001" in md and "membership advantage" in md
    for item in ITEMS:
        assert f"| {item} |" in md, item
    assert "| Hyperparameter tuning | not recorded |" in md
    assert "| Empirical audit | not recorded |" in md


def test_report_json_and_tuning(run_cli):
    r = run_cli("report", "--sigma", "1", "--sample-rate", "0.01", "--steps", "1000", "--delta", "1e-5",
                "--tuning-runs", "10", "--format", "json")
    assert r.exit_code == 0, r.stderr
    st = json.loads(r.stdout)["results"][0]
    g = st["guarantee"]
    acc = _epsilon(1.0, 0.01, 1000, 1e-5)
    assert g["epsilon"] == acc.epsilon and g["epsilon_lower"] == acc.details["epsilon_lower"]
    assert g["certified"] and g["accountant"] == "pld" and g["delta_below_1_over_n"] is None
    assert st["tuning"]["runs"] == 10 and not st["tuning"]["accounted"] and "NOT included" in st["tuning"]["text"]
    assert 0 < st["risk"]["tpr_bound"] <= st["risk"]["tpr_single_pair"] <= 1
    assert [i["item"] for i in st["checklist"]] == list(ITEMS)


def test_report_shuffled_run_states_the_sampler_bracket(run_cli):
    r = run_cli("report", "--sigma", "1.1", "--batch-size", "256", "--dataset-size", "60000", "--epochs", "60",
                "--delta", "1e-5", "--sampling", "shuffle", "--format", "json")
    st = json.loads(r.stdout)["results"][0]
    g = st["guarantee"]
    assert g["neighboring"] == "zero-out" and g["accountant"] == "e-fold-gaussian"
    assert g["epsilon_lower"] < g["epsilon"] and g["poisson_epsilon"] < g["epsilon_lower"]
    assert "μ-GDP" in st["risk"]["method"]


_HTML = ["report", "--sigma", "1", "--sample-rate", "0.01", "--steps", "100", "--delta", "1e-5", "--format", "html"]


def test_report_html_without_matplotlib(run_cli, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    r = run_cli(*_HTML)
    assert r.exit_code == 0, r.stderr
    page = r.stdout
    assert page.startswith("<!DOCTYPE html>") and "<table>" in page and "data:image/png" not in page
    assert "Reporting checklist" in page and "&lt;" not in page.split("<body>")[0]


@pytest.mark.slow  # ~15 s: matplotlib's import and the figure
def test_report_html_embeds_the_plot(run_cli, tmp_path):
    pytest.importorskip("matplotlib")
    r = run_cli(*_HTML, "--output", tmp_path / "s.html")
    assert r.exit_code == 0, r.stderr
    page = (tmp_path / "s.html").read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "data:image/png;base64," in page


@pytest.mark.parametrize(("args", "needle"), [
    (["--sigma", "1"], "Error: give --delta (and the schedule), or --run FILE.json"),
    (["--sigma", "1", "--delta", "1e-5"], "the run is incomplete: missing"),
    (["--run", "nope.json"], "--run"),
])
def test_report_bad_input_exit_2(run_cli, args, needle):
    r = run_cli("report", *args)
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and needle in r.stderr, r.stderr


_RUN_OPTIONS = {
    "noise_multiplier": ["--sigma", "2"], "delta": ["--delta", "1e-5"], "sample_rate": ["--sample-rate", "0.1"],
    "steps": ["--steps", "10"], "batch_size": ["--batch-size", "10"], "dataset_size": ["--dataset-size", "100"],
    "epochs": ["--epochs", "1"], "sampling": ["--sampling", "shuffle"], "max_batch_size": ["--max-batch-size", "5"],
    "neighboring": ["--neighboring", "replace"], "max_grad_norm": ["--max-grad-norm", "1"],
}


def test_run_options_refused_with_a_run_file(run_cli):
    from dpcalc.cli.report import ONLY_WITH

    assert set(ONLY_WITH) == set(_RUN_OPTIONS)
    assert run_cli("report", "--run", EXAMPLE).exit_code == 0
    for args in _RUN_OPTIONS.values():
        r = run_cli("report", "--run", EXAMPLE, *args)
        assert r.exit_code == 2 and r.stderr.startswith(f"Error: {args[0]} is used only without --run"), r.stderr


def test_report_bad_run_files(run_cli, tmp_path):
    for text, needle in (("{", "is not a JSON file"), ("[]", "must be a JSON object"),
                         ('{"noise_multiplier": 1}', "field 'sample_rate' is missing"),
                         ('{"noise_multiplier": "x", "sample_rate": 0.1, "steps": 3, "delta": 1e-5}',
                          "noise_multiplier must be a number")):
        f = tmp_path / "r.json"
        f.write_text(text)
        r = run_cli("report", "--run", f)
        assert r.exit_code == 2 and needle in r.stderr and r.stderr.count("\n") == 1, (text, r.stderr)


# ----------------------------------------------------------------------------- from a training run

@pytest.fixture(scope="module")
def tiny_run(random_idx, tmp_path_factory):
    """A tiny synthetic run (60 random images, tests/conftest.py) with the README Fashion-MNIST run's
    options (σ calibrated for a target ε, momentum, C = 0.1, seed 0)."""
    pytest.importorskip("torch")
    from click.testing import CliRunner

    from dpcalc.cli import cli

    out = tmp_path_factory.mktemp("run")
    model = out / "m.pt"
    res = CliRunner().invoke(cli, ["train", "--data-dir", str(random_idx), "--model", "logistic", "--target-epsilon",
                                   "2.7", "--delta", "1e-5", "--epochs", "2", "--batch-size", "10", "--lr", "4",
                                   "--optimizer", "momentum", "--momentum", "0.9", "--max-grad-norm", "0.1",
                                   "--seed", "0", "--threads", "1", "--quiet", "--save-model", str(model)])
    assert res.exit_code == 0, res.output
    return model, res.output


@pytest.mark.slow  # the tiny run: ~8 s of CPU (torch's import, training, σ calibration), 25-35 s on a busy machine
def test_train_writes_the_statement_beside_the_model(tiny_run, run_cli):
    model, output = tiny_run
    statement = Path(f"{model}.dp.md")
    assert "DP statement for the model card written to" in output
    r = run_cli("report", "--run", f"{model}.json")
    assert r.exit_code == 0, r.stderr
    assert statement.read_text(encoding="utf-8") == r.stdout  # the same statement, from the sidecar
    assert "re-checked, holds" in r.stdout and CHECKLIST_SOURCE in r.stdout


@pytest.mark.slow  # shares the tiny run above
def test_fmnist_example_sidecar_has_todays_layout(tiny_run):
    model, _ = tiny_run
    real = json.loads(Path(f"{model}.json").read_text())
    example = json.loads(EXAMPLE.read_text())
    assert _keys(real) == _keys(example), "the sidecar's layout changed: regenerate docs/examples/fmnist27_model.pt.*"


def test_fmnist_example_sidecar_numbers_are_todays():
    example = json.loads(EXAMPLE.read_text())
    want = fmnist_sidecar()
    assert example.keys() == want.keys()
    for key, val in want.items():
        if key == "details":
            for k, x in val.items():
                assert example[key][k] == (pytest.approx(x, rel=1e-9) if isinstance(x, float) else x), k
        elif isinstance(val, float):
            assert example[key] == pytest.approx(val, rel=1e-9), key
        else:
            assert example[key] == val, key


def test_fmnist_example_statement_is_todays():
    st = build_statement(run_from_sidecar(json.loads(EXAMPLE.read_text())),
                         source="the run file docs/examples/fmnist27_model.pt.json")
    assert EXAMPLE_MD.read_text(encoding="utf-8") == render_markdown(st), (
        "docs/examples/fmnist27_model.pt.dp.md is stale: regenerate it with dpcalc report")
