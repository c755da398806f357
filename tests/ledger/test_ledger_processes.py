"""The ledger under real processes: a race for the last of a budget, and processes killed
(SIGKILL) at every point of a release and of a training step (docs/design.md §11)."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from dpcalc.events import EpsilonDeltaEvent, SelfComposedEvent, dpsgd_event
from dpcalc.ledger import Ledger
from dpcalc.ledger import filter as flt

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "DPCALC_LEDGER_TIMEOUT": "60"}


def make_ledger(path: Path, budget: float, delta: float = 1e-6, name: str = "census") -> None:
    with Ledger(path, create=True) as led:
        led.add_dataset(name, budget_epsilon=budget, delta=delta)


def check_consistent(path: Path) -> Ledger:
    """The file passes PRAGMA integrity_check and every row is readable."""
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    con.close()
    return Ledger(path)


# ---- the race ----------------------------------------------------------------------------------

RACER = textwrap.dedent("""
    import os, sys, time
    go = sys.argv[1]
    while not os.path.exists(go):   # all processes start together
        time.sleep(0.002)
    from dpcalc.cli import main
    main(sys.argv[2:])
""")


API_RACER = textwrap.dedent("""
    import os, sys, time
    go, path = sys.argv[1], sys.argv[2]
    from dpcalc.events import EpsilonDeltaEvent
    from dpcalc.ledger import BudgetExceededError, Ledger
    led = Ledger(path)
    while not os.path.exists(go):
        time.sleep(0.002)
    try:
        eid = led.reserve("census", mechanism="test", params={}, event=EpsilonDeltaEvent(0.2), command=["race"])
    except BudgetExceededError:
        sys.exit(1)
    led.set_status(eid, "released")
""")


def test_twenty_processes_race_through_the_api(tmp_path):
    """As below through dpcalc.ledger directly (each process opens the ledger, then all reserve
    at once): exactly 5 of 20 reservations of ε = 0.2 fit a budget of 1."""
    path = tmp_path / "race.db"
    make_ledger(path, 1.0)
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", API_RACER, str(go), str(path)], env=ENV,
                              stderr=subprocess.PIPE, text=True) for _ in range(20)]
    time.sleep(1.0)
    go.write_text("go")
    codes = [p.wait(timeout=120) for p in procs]
    assert sorted(codes) == [0] * 5 + [1] * 15, [p.stderr.read() for p in procs]
    with check_consistent(path) as led:
        spent = led.spent(led.dataset("census"))
        assert len(spent.records) == 5 and spent.filter_epsilon <= 1.0


@pytest.mark.slow  # ~12 s on a loaded 2-core machine: 20 processes importing the CLI
def test_twenty_processes_race_for_a_budget_that_admits_exactly_five(tmp_path):
    """Budget ε = 1, releases of ε = 0.2 (pure; basic composition, the filter's order ∞, admits
    exactly ⌊1/0.2⌋ = 5 of them, and no finite order admits a 6th: checked below). 20 processes
    (the real CLI) wait on a start signal, then all release: exactly 5 succeed."""
    path = tmp_path / "race.db"
    make_ledger(path, 1.0)
    k, state = 0, flt.FilterState(1e-6, [])
    while state.admits(flt.charge(EpsilonDeltaEvent(0.2)), 1.0):
        state.charges.append(flt.charge(EpsilonDeltaEvent(0.2)))
        k += 1
    assert k == 5  # = floor(1 / 0.2)
    go = tmp_path / "go"
    procs = [subprocess.Popen(
        [sys.executable, "-c", RACER, str(go), "laplace", "--eps", "0.2", "--release", "100", "--ledger", str(path),
         "--dataset", "census", "--json"], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(20)]
    time.sleep(0.5)
    go.write_text("go")
    outs = [p.communicate(timeout=120) for p in procs]
    codes = [p.returncode for p in procs]
    assert sorted(codes) == [0] * 5 + [1] * 15, [(c, e) for c, (_, e) in zip(codes, outs, strict=True)]
    for code, (out, err) in zip(codes, outs, strict=True):
        if code == 0:
            assert json.loads(out)["results"][0]["ledger"]["filter_epsilon"] <= 1.0
        else:
            assert out == "" and err.startswith("Error: refused") and err.count("\n") == 1, err
    with check_consistent(path) as led:
        spent = led.spent(led.dataset("census"))
        assert len(spent.records) == 5
        assert all(r.status == "released" for r in spent.records)
        assert spent.filter_epsilon <= 1.0


# ---- SIGKILL at points of a release -------------------------------------------------------------

KILLER = textwrap.dedent("""
    import os, signal, sqlite3, sys
    point = sys.argv[1]

    def die():
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    real_connect = sqlite3.connect

    class Con:  # a connection that dies at COMMIT of the transaction that records an event
        def __init__(self, con):
            object.__setattr__(self, "con", con)
            object.__setattr__(self, "insert", False)
        def __getattr__(self, name):
            return getattr(self.con, name)
        def __setattr__(self, name, value):
            setattr(self.con, name, value)
        def execute(self, sql, *args):
            if sql.startswith("INSERT INTO events") or sql.startswith("UPDATE events"):
                object.__setattr__(self, "insert", True)
            if sql == "COMMIT" and self.insert and point == "before-commit":
                die()
            return self.con.execute(sql, *args)

    if point == "before-commit":
        sqlite3.connect = lambda *a, **k: Con(real_connect(*a, **k))
    import dpcalc.mechanisms.discrete as discrete
    if point == "before-noise":
        discrete.sample_discrete_laplace = lambda *a, **k: die()
    import dpcalc.cli.ledger as cl
    if point == "after-print":
        cl.ReleaseGuard.released = lambda self: die()
    from dpcalc.cli import main
    main(sys.argv[2:])
""")


def _release(path: Path, point: str, eps: str = "0.3") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", KILLER, point, "laplace", "--eps", eps, "--release", "100",
                           "--ledger", str(path), "--dataset", "census"], env=ENV, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize(("point", "recorded", "status"), [
    ("before-commit", False, None),      # killed inside the recording transaction: rolled back, no noise drawn
    ("before-noise", True, "reserved"),  # recorded, killed before the noise: counted all the same
    ("after-print", True, "reserved"),   # printed, killed before marking it released: counted
    ("none", True, "released"),
])
def test_release_killed_at_each_point(tmp_path, point, recorded, status):
    path = tmp_path / "kill.db"
    make_ledger(path, 1.0)
    res = _release(path, point)
    assert res.returncode == (-signal.SIGKILL if point != "none" else 0), res.stderr
    printed = "released value" in res.stdout
    assert printed == (point in ("after-print", "none"))
    with check_consistent(path) as led:
        spent = led.spent(led.dataset("census"))
        assert len(spent.records) == int(recorded)
        if recorded:
            assert spent.records[0].status == status
            assert spent.filter_epsilon >= 0.3  # never under what might have been printed
        else:
            assert spent.filter_epsilon == 0.0


def test_releases_killed_at_random_times_are_never_undercounted(tmp_path):
    """Eight CLI releases killed by SIGKILL after random delays (whatever they were doing): the
    ledger passes integrity_check and holds at least one counted event per value printed."""
    path = tmp_path / "random.db"
    make_ledger(path, 100.0)
    rng = random.Random(1)
    printed = 0
    for _ in range(8):
        p = subprocess.Popen([sys.executable, "-m", "dpcalc", "laplace", "--eps", "0.5", "--release", "100",
                              "--ledger", str(path), "--dataset", "census"], env=ENV, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        time.sleep(rng.uniform(0.05, 1.2))
        p.send_signal(signal.SIGKILL)
        out, _ = p.communicate(timeout=60)
        printed += "released value" in out
    with check_consistent(path) as led:
        spent = led.spent(led.dataset("census"))
        assert len(spent.records) >= printed
        assert spent.filter_epsilon >= 0.5 * len(spent.records) - 1e-12


# ---- SIGKILL during training ----------------------------------------------------------------------

TRAIN_KILLER = textwrap.dedent("""
    import os, signal, sqlite3, sys
    point, at = sys.argv[1], int(sys.argv[2])

    def die():
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    import dpcalc.train.dpsgd as dpsgd
    calls = [0]
    real_step = dpsgd.DPSGDStep.step
    def step(self, *a, **k):
        calls[0] += 1
        if point == "in-step" and calls[0] == at:
            die()
        return real_step(self, *a, **k)
    dpsgd.DPSGDStep.step = step
    import dpcalc.ledger.api as api
    real_set = api.Ledger.set_status
    def set_status(self, event_id, status, *, steps_taken=None):
        if point == "recording-step" and steps_taken == at:
            self.con.execute("BEGIN IMMEDIATE")
            self.con.execute("UPDATE events SET steps_taken = ? WHERE id = ?", (at, event_id))
            die()   # killed with the step's update written but not committed
        return real_set(self, event_id, status, steps_taken=steps_taken)
    api.Ledger.set_status = set_status
    from dpcalc.cli import main
    main(sys.argv[3:])
""")


TRAIN = ["train", "--quiet", "--model", "logistic", "--epochs", "2", "--batch-size", "20", "--noise-multiplier", "1",
         "--delta", "1e-3", "--threads", "1", "--lr", "0.5", "--max-grad-norm", "1"]


@pytest.mark.parametrize(("point", "at", "taken"), [
    pytest.param("in-step", 1, 1, marks=pytest.mark.slow),  # ~10 s each: a process importing torch
    pytest.param("in-step", 4, 4, marks=pytest.mark.slow),
    ("recording-step", 3, 2),
])
def test_training_killed_mid_run_counts_every_reserved_step(tmp_path, random_idx, point, at, taken):
    """T = ceil(2·60/20) = 6 steps are reserved before the first; a run killed during step `at`
    (or while recording it) stays counted at all 6 — at least the steps its data was used in."""
    path = tmp_path / "train.db"
    make_ledger(path, 50.0, delta=1e-3, name="tiny")
    res = subprocess.run([sys.executable, "-c", TRAIN_KILLER, point, str(at), *TRAIN, "--data-dir", str(random_idx),
                          "--ledger", str(path), "--ledger-dataset", "tiny"], env=ENV, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == -signal.SIGKILL, res.stderr
    with check_consistent(path) as led:
        spent = led.spent(led.dataset("tiny"))
        (rec,) = spent.records
        assert (rec.status, rec.steps_reserved, rec.steps_taken, rec.counted_steps) == ("running", 6, taken, 6)
        six = flt.FilterState(1e-3, [flt.charge(dpsgd_event(noise_multiplier=1, sample_rate=1 / 3, steps=6))])
        assert spent.filter_epsilon == six.epsilon()
        assert rec.accounted() == SelfComposedEvent(rec.event, 6)


def test_training_finished_counts_its_steps_and_refuses_past_the_budget(tmp_path, random_idx, run_cli):
    path = tmp_path / "train.db"
    run = flt.charge(dpsgd_event(noise_multiplier=1, sample_rate=1 / 3, steps=6))
    one = flt.FilterState(1e-3, [run]).epsilon()
    two = flt.FilterState(1e-3, [run, run]).epsilon()
    assert one < two
    make_ledger(path, (one + two) / 2, delta=1e-3, name="tiny")  # room for one run of 6 steps, not two
    args = [*TRAIN, "--data-dir", str(random_idx), "--ledger", str(path), "--ledger-dataset", "tiny"]
    res = run_cli(*args, "--json")
    assert res.exit_code == 0, res.stderr
    info = res.json()["results"][0]["ledger"]
    assert (info["steps_reserved"], info["steps_taken"]) == (6, 6) and info["filter_epsilon"] == one
    res = run_cli(*args)
    assert res.exit_code == 1 and res.stderr.startswith("Error: refused") and res.stderr.count("\n") == 1
    assert "this run would bring it to" in res.stderr
    with check_consistent(path) as led:
        (rec,) = led.records(led.dataset("tiny"))
        assert rec.status == "finished" and rec.steps_taken == 6
