"""``dpcalc pate --ledger FILE --dataset NAME``: the data-independent cost of a PATE run recorded
before the analysis is printed (docs/design.md §11), never the data-dependent one."""

from __future__ import annotations

import numpy as np
import pytest

from dpcalc.events import (
    ComposedEvent,
    GNMaxEvent,
    LNMaxEvent,
    PateThresholdEvent,
    SelfComposedEvent,
)
from dpcalc.ledger import Ledger
from dpcalc.ledger import filter as flt


@pytest.fixture
def budget(tmp_path, run_cli):
    path = tmp_path / "budget.db"
    assert run_cli("ledger", "init", str(path), "--dataset", "teachers", "--budget-eps", "8",
                   "--delta", "1e-5").exit_code == 0
    return path


def pate(run_cli, path, *args):
    return run_cli("pate", *args, "--delta", "1e-5", "--ledger", str(path), "--dataset", "teachers", "--json")


def recs(path):
    with Ledger(path) as led:
        return led.records(led.dataset("teachers"))


def test_gnmax_run_is_recorded_then_refused_past_the_budget(budget, run_cli):
    res = pate(run_cli, budget, "--mechanism", "gnmax", "--sigma", "40", "--queries", "1000")
    assert res.exit_code == 0, res.stderr
    info = res.json()["results"][0]["ledger"]
    (rec,) = recs(budget)
    assert rec.event == SelfComposedEvent(GNMaxEvent(40.0), 1000) and rec.status == "released"
    assert rec.mechanism == "pate-gnmax" and rec.params["queries"] == 1000
    # the filter's ε: 1000 λ/σ² (Papernot et al. 2018 Prop 8) through the filter's conversion
    a = np.asarray(flt.FILTER_ORDERS)
    closed = float(np.min(1000 * a / 40.0**2 + flt.conversion(1e-5)))
    assert info["filter_epsilon"] >= closed and info["filter_epsilon"] == pytest.approx(closed, rel=1e-12)
    # the fixed-sequence rdp number printed beside it is smaller (the union bound's price)
    rdp_row = res.json()["results"][0]
    assert rdp_row["method"] == "rdp" and rdp_row["epsilon"] < info["filter_epsilon"]
    res = pate(run_cli, budget, "--mechanism", "gnmax", "--sigma", "40", "--queries", "1000")
    assert res.exit_code == 1 and res.stdout == "" and res.stderr.count("\n") == 1
    assert "refused" in res.stderr and f"ε {info['left']:.6g}"[:8] in res.stderr
    assert len(recs(budget)) == 1


def test_lnmax_is_pure_and_text_output_says_what_is_recorded(budget, run_cli):
    res = run_cli("pate", "--mechanism", "lnmax", "--scale", "20", "--queries", "40", "--delta", "1e-5",
                  "--ledger", str(budget), "--dataset", "teachers")
    assert res.exit_code == 0, res.stderr
    text = " ".join(res.stdout.split())
    assert "Recorded in ledger" in text and "data-dependent cost is never recorded" in text
    (rec,) = recs(budget)
    assert rec.event == SelfComposedEvent(LNMaxEvent(20.0), 40)
    charge = flt.charge(rec.event)
    assert charge.pure is not None and 4 <= float(charge.pure) <= 4 * (1 + 1e-14)  # 40 · 2/20


def test_confident_gnmax_counts_every_query_as_answered(budget, run_cli):
    res = pate(run_cli, budget, "--mechanism", "confident-gnmax", "--threshold", "200", "--sigma1", "150",
               "--sigma2", "60", "--queries", "500")
    assert res.exit_code == 0, res.stderr
    (rec,) = recs(budget)
    assert rec.event == ComposedEvent((SelfComposedEvent(PateThresholdEvent(150.0), 500),
                                       SelfComposedEvent(GNMaxEvent(60.0), 500)))
    res = pate(run_cli, budget, "--mechanism", "confident-gnmax", "--sigma1", "150", "--sigma2", "60",
               "--queries", "500", "--answered-count", "100")
    assert res.exit_code == 2 and "every query as answered" in res.stderr and res.stderr.count("\n") == 1
    assert len(recs(budget)) == 1


def test_votes_run_records_only_the_data_independent_event(budget, run_cli, tmp_path):
    votes = tmp_path / "votes.csv"
    votes.write_text("\n".join(["98713,1277,1", "50031,49959,1", "99991,0,0", "61234,38757,0"]) + "\n")
    res = pate(run_cli, budget, "--mechanism", "gnmax", "--sigma", "4000", "--votes", str(votes))
    assert res.exit_code == 0, res.stderr
    out = res.json()["results"]
    assert out[0]["ledger"]["event"] == 1 and out[-1]["analysis"] == "data-dependent"
    (rec,) = recs(budget)
    assert rec.event == SelfComposedEvent(GNMaxEvent(4000.0), 4)
    assert rec.params["teachers"] == 99991 and rec.params["classes"] == 3
    # nothing of the votes reaches the ledger, and its ε is not the data-dependent one
    with Ledger(budget) as led:
        from dpcalc.ledger import export_lines
        text = "\n".join(export_lines(led))
    assert not any(x in text for x in ("98713", "49959", "61234", "38757"))
    assert out[0]["ledger"]["filter_epsilon"] != out[-1]["epsilon"]


@pytest.mark.parametrize("args", [
    ["--mechanism", "gnmax", "--queries", "1000", "--eps", "2"],  # planning: releases nothing
    ["--mechanism", "gnmax", "--sigma", "40", "--eps", "2"],
])
def test_planning_with_ledger_is_refused(budget, run_cli, args):
    res = pate(run_cli, budget, *args)
    assert res.exit_code == 2 and "--ledger records a PATE run" in res.stderr
    assert recs(budget) == []


def test_ledger_options_need_each_other(budget, run_cli):
    res = run_cli("pate", "--mechanism", "gnmax", "--sigma", "40", "--queries", "10", "--delta", "1e-5",
                  "--ledger", str(budget))
    assert res.exit_code == 2 and "--dataset" in res.stderr
    res = run_cli("pate", "--mechanism", "gnmax", "--sigma", "40", "--queries", "10", "--delta", "1e-5",
                  "--dataset", "teachers")
    assert res.exit_code == 2 and "--ledger" in res.stderr


@pytest.mark.parametrize("option", ["--per-query", "--plot"])
def test_unwritable_output_is_refused_before_the_ledger_is_charged(budget, run_cli, option):
    """An output that cannot be written (/proc refuses new files) is refused (exit 2, one line)
    before the run is recorded: the budget is not charged for an analysis never printed."""
    pytest.importorskip("matplotlib")
    import os

    if not os.path.isdir("/proc/self"):
        pytest.skip("needs Linux /proc")
    target = "/proc/dpcalc-test-output." + ("csv" if option == "--per-query" else "png")
    res = pate(run_cli, budget, "--mechanism", "gnmax", "--sigma", "40", "--votes",
               "docs/examples/pate_votes.csv", option, target)
    assert res.exit_code == 2, res.stdout
    assert res.stderr.count("\n") == 1 and option in res.stderr, res.stderr
    assert recs(budget) == []
    # a writable target: recorded once and written
    assert pate(run_cli, budget, "--mechanism", "gnmax", "--sigma", "40", "--queries", "10").exit_code == 0
    assert len(recs(budget)) == 1
