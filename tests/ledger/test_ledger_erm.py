"""``dpcalc erm --fit --ledger FILE --dataset NAME``: the released model recorded before its noise is
drawn (docs/design.md §11)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpcalc.events import ComposedEvent, EpsilonDeltaEvent, GaussianEvent
from dpcalc.ledger import Ledger
from dpcalc.mechanisms.gaussian import analytic_noise_std

CSV = str(Path(__file__).resolve().parents[2] / "docs" / "examples" / "breast-cancer.csv")


@pytest.fixture
def budget(tmp_path, run_cli):
    path = tmp_path / "budget.db"
    for name, adj in (("bc", "replace"), ("ar", "add-remove")):
        assert run_cli("ledger", "init", str(path), "--dataset", name, "--budget-eps", "2", "--delta", "1e-6",
                       "--adjacency", adj).exit_code == 0
    return path


def fit(run_cli, path, *args, dataset="bc"):
    return run_cli("erm", "--fit", CSV, "--label", "diagnosis", "--lambda", "0.01", "--seed", "1", *args,
                   "--ledger", str(path), "--dataset", dataset, "--json")


def recs(path, name="bc"):
    with Ledger(path) as led:
        return led.records(led.dataset(name))


def test_pure_models_are_recorded_and_the_budget_enforced(budget, run_cli):
    res = fit(run_cli, budget, "--eps", "1", "--method", "objective")
    assert res.exit_code == 0, res.stderr
    assert res.json()["results"][1]["ledger"]["filter_epsilon"] == 1.0  # the order ∞: exactly ε
    res = fit(run_cli, budget, "--eps", "0.5")  # --method all: two models of ε = 0.5
    assert res.exit_code == 0, res.stderr
    assert res.json()["results"][1]["ledger"]["filter_epsilon"] == 2.0 and res.json()["results"][1]["ledger"]["left"] == 0
    assert [r.event for r in recs(budget)] == [EpsilonDeltaEvent(1.0, 0.0), ComposedEvent(
        (EpsilonDeltaEvent(0.5, 0.0), EpsilonDeltaEvent(0.5, 0.0)))]
    res = fit(run_cli, budget, "--eps", "0.01", "--method", "output")
    assert res.exit_code == 1 and res.stdout == "" and "ε 0 left" in res.stderr and res.stderr.count("\n") == 1
    assert len(recs(budget)) == 2


def test_gaussian_output_perturbation_is_a_gaussian_mechanism(budget, run_cli):
    res = fit(run_cli, budget, "--eps", "0.5", "--delta", "1e-7", "--method", "output")
    assert res.exit_code == 0, res.stderr
    (rec,) = recs(budget)
    # σ/Δ₂ of the analytic Gaussian (Balle & Wang 2018 Thm 8), never larger than the one used
    row = res.json()["results"][1]
    assert isinstance(rec.event, GaussianEvent)
    assert rec.event.noise_multiplier <= row["noise_std"] / row["sensitivity"]
    assert rec.event.noise_multiplier == pytest.approx(
        analytic_noise_std(epsilon=0.5, delta=1e-7, sensitivity=1.0), rel=1e-11)
    assert rec.dp_event == EpsilonDeltaEvent(0.5, 1e-7)


@pytest.mark.parametrize(("args", "dataset", "needle"), [
    (["--eps", "1"], "ar", "replace-one"),
    (["--eps", "1", "--delta", "1e-7", "--method", "objective"], "bc", "no Rényi-DP curve"),
])
def test_what_cannot_be_recorded_is_refused_before_any_work(budget, run_cli, args, dataset, needle):
    res = fit(run_cli, budget, *args, dataset=dataset)
    assert res.exit_code == 2 and needle in res.stderr and res.stderr.count("\n") == 1 and res.stdout == ""
    assert recs(budget, dataset) == []


def test_ledger_needs_fit(budget, run_cli):
    res = run_cli("erm", "--eps", "1", "--dataset-size", "100", "--dims", "3", "--lambda", "0.01",
                  "--ledger", str(budget), "--dataset", "bc")
    assert res.exit_code == 2 and "use it with --fit" in res.stderr
