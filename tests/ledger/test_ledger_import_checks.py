"""``ledger import`` checks every field as a release does (issue 33): types, nesting depth and
finite numbers of ``params`` and ``command``; a bad line refuses the whole import (one line,
exit 2, nothing written), and a ledger poisoned by an older dpcalc is refused with one line."""

from __future__ import annotations

import json
import sqlite3

import pytest

from dpcalc.errors import ParameterError
from dpcalc.events import EpsilonDeltaEvent
from dpcalc.ledger import Ledger, records


def _export(tmp_path, run_cli):
    src = tmp_path / "src.db"
    assert run_cli("ledger", "init", str(src), "--dataset", "census", "--budget-eps", "1",
                   "--delta", "1e-6").exit_code == 0
    assert run_cli("laplace", "--eps", "0.25", "--release", "7", "--ledger", str(src),
                   "--dataset", "census").exit_code == 0
    res = run_cli("ledger", "export", str(src))
    assert res.exit_code == 0
    return res.stdout.splitlines()


def _nested(depth: int) -> str:
    return '{"x":' * depth + "1" + "}" * depth


@pytest.mark.parametrize("params, why", [
    ('{"x": 1e999}', "not finite"),
    ('{"x": -1e999}', "not finite"),
    ('{"x": [1, 2, 1e400]}', "not finite"),
    (_nested(980), "nested deeper"),
    (_nested(40), "nested deeper"),
    ("[" * 900 + "]" * 900, "an object"),
])
def test_import_refuses_params_a_release_would_refuse(tmp_path, run_cli, params, why):
    lines = _export(tmp_path, run_cli)
    event = lines[-1]
    start = event.index('"params":') + len('"params":')
    end = event.index(',"status"')
    lines[-1] = event[:start] + params + event[end:]
    src = tmp_path / "bad.jsonl"
    src.write_text("\n".join(lines) + "\n")
    dst = tmp_path / "dst.db"
    res = run_cli("ledger", "import", str(dst), str(src))
    assert res.exit_code == 2, (res.stdout, res.stderr)
    assert res.stderr.startswith("Error: line 3 of the import") and why in res.stderr
    assert res.stderr.count("\n") == 1 and res.stdout == ""
    assert not dst.exists() or not Ledger(dst).datasets()


def test_import_refuses_a_non_finite_command(tmp_path, run_cli):
    lines = _export(tmp_path, run_cli)
    item = json.loads(lines[-1])
    item["command"] = ["dpcalc", 1e308]
    lines[-1] = json.dumps(item).replace("1e+308", "1e999")
    (tmp_path / "bad.jsonl").write_text("\n".join(lines))
    res = run_cli("ledger", "import", str(tmp_path / "dst.db"), str(tmp_path / "bad.jsonl"))
    assert res.exit_code == 2 and "not finite" in res.stderr and res.stderr.count("\n") == 1


def test_a_release_refuses_the_same_params(tmp_path):
    with Ledger(tmp_path / "l.db", create=True) as led:
        led.add_dataset("census", budget_epsilon=1, delta=1e-6)
        for bad in ({"x": float("inf")}, {"x": float("nan")}, json.loads(_nested(40)), {1: 2}, {"x": object()}):
            with pytest.raises(ParameterError):
                led.reserve("census", mechanism="m", params=bad, event=EpsilonDeltaEvent(0.1))
        assert led.records(led.dataset("census")) == []


def test_plain_json_check():
    records.check_plain({"a": [1, 2.5, "x", None, True, {"b": []}]})
    with pytest.raises(ParameterError, match="nested deeper"):
        records.check_plain(json.loads(_nested(records.MAX_DEPTH + 1)))
    records.check_plain(json.loads(_nested(records.MAX_DEPTH - 1)))


def test_a_poisoned_ledger_is_refused_in_one_line(tmp_path, run_cli):
    """A ledger whose params were written 980 deep (by an import of an older dpcalc): show,
    export and a release refuse it with one line naming the event, never a RecursionError."""
    path = tmp_path / "l.db"
    assert run_cli("ledger", "init", str(path), "--dataset", "census", "--budget-eps", "1",
                   "--delta", "1e-6").exit_code == 0
    assert run_cli("laplace", "--eps", "0.25", "--release", "7", "--ledger", str(path),
                   "--dataset", "census").exit_code == 0
    con = sqlite3.connect(path)
    con.execute("UPDATE events SET params = ?", (_nested(980),))
    con.commit()
    con.close()
    for args in (["ledger", "show", str(path)], ["ledger", "export", str(path)]):
        res = run_cli(*args)
        assert res.exit_code == 2, (args, res.stdout, res.stderr)
        assert "event #1 is corrupt" in res.stderr and res.stderr.count("\n") == 1
    # a release reads only the filter's running totals (the params do not enter the accounting);
    # with the totals gone it recomputes them from every row and refuses the corrupt one
    release = ["laplace", "--eps", "0.25", "--release", "7", "--ledger", str(path), "--dataset", "census"]
    assert run_cli(*release).exit_code == 0
    con = sqlite3.connect(path)
    con.execute("DELETE FROM filter_state")
    con.commit()
    con.close()
    res = run_cli(*release)
    assert res.exit_code == 2 and "event #1 is corrupt" in res.stderr and res.stderr.count("\n") == 1


# ---- a printed release is never reported as a failure (issue 33) ---------------------------------

def _hold_lock_after_reserve(monkeypatch, path, release_after: float | None):
    """Make the next ReleaseGuard.reserve take the write lock from another connection right after
    reserving (as a racing writer would), released after ``release_after`` s (None: never)."""
    import threading

    from dpcalc.cli import ledger as cli_ledger

    held = {}
    original = cli_ledger.ReleaseGuard.reserve

    def reserve(self, **kw):
        original(self, **kw)
        con = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        con.execute("BEGIN IMMEDIATE")
        held["con"] = con
        if release_after is not None:
            threading.Timer(release_after, lambda: con.execute("ROLLBACK")).start()

    monkeypatch.setattr(cli_ledger.ReleaseGuard, "reserve", reserve)
    return held


@pytest.mark.parametrize("release_after, status", [(0.3, "released"), (None, "reserved")])
def test_a_printed_release_exits_0_when_the_status_update_finds_the_ledger_locked(
        tmp_path, run_cli, monkeypatch, release_after, status):
    path = tmp_path / "l.db"
    assert run_cli("ledger", "init", str(path), "--dataset", "census", "--budget-eps", "1",
                   "--delta", "1e-6").exit_code == 0
    monkeypatch.setenv("DPCALC_LEDGER_TIMEOUT", "0")
    held = _hold_lock_after_reserve(monkeypatch, path, release_after)
    res = run_cli("laplace", "--eps", "0.25", "--release", "7", "--ledger", str(path), "--dataset", "census")
    if release_after is None:
        held["con"].execute("ROLLBACK")
    assert res.exit_code == 0, (res.stdout, res.stderr)
    assert "released" in res.stdout
    if status == "reserved":  # deferred: counted in full all the same, and said so in one line
        assert res.stderr.count("\n") == 1 and "counted" in res.stderr
    with Ledger(path) as led:
        rec, = led.records(led.dataset("census"))
        assert rec.status == status
