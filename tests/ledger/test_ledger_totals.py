"""The filter's running totals (issue 33): a release decides from stored sums, O(1) in the number
of events, and those sums are always *equal* to a full recomputation — after releases, training
runs that finish, imports, and processes killed (SIGKILL) in the middle of a release."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcalc.events import EpsilonDeltaEvent, GaussianEvent, LaplaceEvent, PoissonSampledEvent
from dpcalc.ledger import Ledger, export_lines, import_lines
from dpcalc.ledger import filter as flt

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "DPCALC_LEDGER_TIMEOUT": "60"}

finite = st.floats(min_value=0.0, max_value=1e300, allow_nan=False, allow_infinity=False)
value = st.one_of(finite, st.sampled_from([0.0, 5e-324, 2.2250738585072014e-308, 1e-300, 1.0, math.inf]),
                  st.floats(min_value=0.0, max_value=1.0))
pure = st.one_of(st.none(), st.fractions(min_value=0, max_value=10, max_denominator=10**6))


@st.composite
def charges(draw, n_orders=3):
    return flt.Charge(np.array([draw(value) for _ in range(n_orders)]), draw(pure))


@settings(max_examples=300, deadline=None)
@given(st.lists(charges(), max_size=12), st.lists(st.integers(0, 11), max_size=4), st.one_of(st.none(), charges()))
def test_running_totals_equal_the_full_sum(items, removed, extra):
    """fsum and the integer sum in units of 2^-1074 are both correctly rounded: equal, bit for
    bit, with and without a charge taken out again and an extra one appended."""
    orders = (2.0, 8.0, 32.0)
    running = flt.RunningTotals.of(1e-6, items, orders)
    kept = list(items)
    for i in sorted({i for i in removed if i < len(items)}, reverse=True):
        running.remove(items[i])
        kept.pop(i)
    full = flt.FilterState(1e-6, kept, orders)
    rdp_r, pure_r = running.totals(extra)
    rdp_f, pure_f = full.totals(extra)
    np.testing.assert_array_equal(rdp_r, rdp_f)
    assert pure_r == pure_f
    assert running.epsilon(extra) == full.epsilon(extra) or math.isnan(full.epsilon(extra))
    if extra is not None:
        assert running.admits(extra, 3.0) == full.admits(extra, 3.0)
    again = flt.RunningTotals.from_json(running.to_json(), 1e-6, orders)
    assert again == running


def _check(path: Path) -> None:
    with Ledger(path) as led:
        for ds in led.datasets():
            stored = led.stored_totals(ds)
            assert stored is not None and stored == led.recomputed_totals(ds), ds.name


def test_totals_after_releases_runs_and_import(tmp_path):
    path = tmp_path / "l.db"
    events = [EpsilonDeltaEvent(0.01), LaplaceEvent(50.0), GaussianEvent(20.0),
              PoissonSampledEvent(0.01, GaussianEvent(1.0))]
    with Ledger(path, create=True) as led:
        led.add_dataset("a", budget_epsilon=5, delta=1e-6)
        led.add_dataset("b", budget_epsilon=5, delta=1e-5, orders=[2, 4, 8])
        for i in range(12):
            eid = led.reserve("ab"[i % 2], mechanism="m", params={"i": i}, event=events[i % 4])
            if i % 3:
                led.set_status(eid, "released")
        run = led.start_training("a", noise_multiplier=1.0, sample_rate=0.01, steps=50)
        for k in range(1, 8):
            run.step(k)
        _check(path)  # running: all 50 reserved steps counted
        run.finish(7)
        _check(path)  # finished: 7 counted, the 50 taken out exactly
        lines = export_lines(led)
    copy = tmp_path / "copy.db"
    with Ledger(copy, create=True) as led:
        import_lines(led, lines)
    _check(copy)
    with Ledger(path) as a, Ledger(copy) as b:
        assert a.stored_totals(a.dataset("a")) == b.stored_totals(b.dataset("a"))


def test_a_release_does_not_read_the_history(tmp_path, monkeypatch):
    """O(1) in the ledger's size: once the totals are stored, deciding on a release neither
    decodes the recorded events nor recomputes their charges."""
    path = tmp_path / "l.db"
    with Ledger(path, create=True) as led:
        led.add_dataset("a", budget_epsilon=5, delta=1e-6)
        for _ in range(5):
            led.reserve("a", mechanism="m", params={}, event=LaplaceEvent(100.0))

    def forbidden(*a, **k):
        raise AssertionError("the whole history was read")

    with Ledger(path) as led:
        monkeypatch.setattr(Ledger, "records", forbidden)
        monkeypatch.setattr(Ledger, "recomputed_totals", forbidden)
        eid = led.reserve("a", mechanism="m", params={}, event=LaplaceEvent(100.0))
        led.set_status(eid, "released")
        assert 0.06 <= led.epsilon_now(led.dataset("a"))[0] <= 0.06 + 1e-12
    monkeypatch.undo()
    _check(path)


def test_missing_or_stale_totals_are_recomputed(tmp_path):
    import sqlite3

    path = tmp_path / "l.db"
    with Ledger(path, create=True) as led:
        led.add_dataset("a", budget_epsilon=5, delta=1e-6)
        led.reserve("a", mechanism="m", params={}, event=LaplaceEvent(10.0))
    con = sqlite3.connect(path)
    con.execute("INSERT INTO events (dataset_id, kind, mechanism, params, event, status, created, updated, "
                "command, version) VALUES (1, 'release', 'm', '{}', '{\"scale\":10.0,\"type\":\"laplace\"}', "
                "'reserved', 't', 't', '[]', 'x')")  # a row the totals do not cover
    con.commit()
    with Ledger(path) as led:
        ds = led.dataset("a")
        assert led.stored_totals(ds) is None
        assert led.totals(ds) == led.recomputed_totals(ds) and led.epsilon_now(ds)[0] == pytest.approx(0.2, abs=1e-14)
        led.reserve("a", mechanism="m", params={}, event=LaplaceEvent(10.0))
    _check(path)
    con.execute("UPDATE filter_state SET state = '{\"count\": 3}'")  # malformed: recomputed
    con.commit()
    con.close()
    with Ledger(path) as led:
        ds = led.dataset("a")
        assert led.stored_totals(ds) is None and led.epsilon_now(ds)[0] == pytest.approx(0.3, abs=1e-14)


KILLER = textwrap.dedent("""
    import os, signal, sqlite3, sys
    point = sys.argv[1]
    def die():
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    real_connect = sqlite3.connect
    class Con:
        def __init__(self, con):
            object.__setattr__(self, "con", con)
        def __getattr__(self, name):
            return getattr(self.con, name)
        def __setattr__(self, name, value):
            setattr(self.con, name, value)
        def execute(self, sql, *args):
            if point == "after-insert" and sql.startswith("INSERT OR REPLACE INTO filter_state"):
                die()   # the event inserted, its totals not yet: nothing committed
            if point == "before-commit" and sql == "COMMIT" and self.con.in_transaction:
                die()
            return self.con.execute(sql, *args)
    sqlite3.connect = lambda *a, **k: Con(real_connect(*a, **k))
    import dpcalc.cli.ledger as cl
    if point == "after-print":
        cl.ReleaseGuard.released = lambda self: die()
    from dpcalc.cli import main
    main(sys.argv[2:])
""")


@pytest.mark.parametrize("point", ["after-insert", "before-commit", "after-print"])
def test_totals_after_a_kill_mid_release(tmp_path, point):
    path = tmp_path / "l.db"
    with Ledger(path, create=True) as led:
        led.add_dataset("census", budget_epsilon=5, delta=1e-6)
        led.reserve("census", mechanism="m", params={}, event=EpsilonDeltaEvent(0.5))
    res = subprocess.run([sys.executable, "-c", KILLER, point, "laplace", "--eps", "0.25", "--release", "3",
                          "--ledger", str(path), "--dataset", "census"], env=ENV, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == -signal.SIGKILL, res.stderr
    _check(path)
    with Ledger(path) as led:
        n = len(led.records(led.dataset("census")))
        assert n == (2 if point == "after-print" else 1)
        assert led.epsilon_now(led.dataset("census"))[0] == (0.75 if n == 2 else 0.5)
