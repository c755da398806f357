"""The ledger file (dpcalc/ledger/store.py): what is refused (exit 2, one line, nothing written),
schema versions and migrations."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from dpcalc.ledger import Ledger, LedgerFileError, store

ROOT = Path(__file__).resolve().parents[2]


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file in ``directory`` with its bytes (the -wal/-shm companions included)."""
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


@pytest.fixture
def ledger_file(tmp_path, run_cli):
    path = tmp_path / "budget.db"
    res = run_cli("ledger", "init", str(path), "--dataset", "census", "--budget-eps", "1", "--delta", "1e-6")
    assert res.exit_code == 0, res.stderr
    return path


RELEASE = ["laplace", "--eps", "0.1", "--release", "7"]


def refused(run_cli, path: Path, *extra: str) -> str:
    """Run a release and a show on ``path``: both exit 2 with one Error line; nothing written."""
    before = snapshot(path.parent)
    messages = []
    for args in ([*RELEASE, "--ledger", str(path), "--dataset", "census"], ["ledger", "show", str(path)],
                 ["ledger", "init", str(path), "--dataset", "other", "--budget-eps", "1", "--delta", "1e-6"]):
        res = run_cli(*args, *extra)
        assert res.exit_code == 2, (args, res.stdout, res.stderr)
        assert res.stdout == "" and res.stderr.startswith("Error: ") and res.stderr.count("\n") == 1, res.stderr
        messages.append(res.stderr)
    assert snapshot(path.parent) == before
    return messages[0]


def test_new_ledger_is_wal_versioned_and_ours(ledger_file):
    con = sqlite3.connect(ledger_file)
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert con.execute("PRAGMA user_version").fetchone()[0] == store.SCHEMA_VERSION
    assert con.execute("PRAGMA application_id").fetchone()[0] == store.APPLICATION_ID
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()


def test_several_datasets_per_file_and_no_duplicates(ledger_file, run_cli):
    res = run_cli("ledger", "init", str(ledger_file), "--dataset", "web", "--budget-eps", "3", "--delta", "1e-5",
                  "--adjacency", "replace", "--json")
    assert res.exit_code == 0 and res.json()["results"][0]["datasets"] == ["census", "web"]
    res = run_cli("ledger", "init", str(ledger_file), "--dataset", "web", "--budget-eps", "9", "--delta", "1e-5")
    assert res.exit_code == 2 and "already in ledger" in res.stderr
    with Ledger(ledger_file) as led:
        assert [(d.name, d.budget_epsilon, d.adjacency) for d in led.datasets()] == [
            ("census", 1.0, "add-remove"), ("web", 3.0, "replace")]


def test_missing_file_is_not_created(tmp_path, run_cli):
    path = tmp_path / "nope.db"
    res = run_cli(*RELEASE, "--ledger", str(path), "--dataset", "census")
    assert res.exit_code == 2 and "no ledger at" in res.stderr and res.stdout == ""
    assert not path.exists() and list(tmp_path.iterdir()) == []


def test_not_sqlite_is_refused(tmp_path, run_cli):
    path = tmp_path / "notes.db"
    path.write_bytes(b"just some text, not a database\n" * 100)
    assert "not an SQLite database" in refused(run_cli, path)


def test_foreign_sqlite_is_refused(tmp_path, run_cli):
    path = tmp_path / "other.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE datasets (x)")
    con.commit()
    con.close()
    assert "another application" in refused(run_cli, path)


def test_newer_schema_is_refused(ledger_file, run_cli):
    con = sqlite3.connect(ledger_file)
    con.execute(f"PRAGMA user_version={store.SCHEMA_VERSION + 1}")
    con.close()
    assert "newer dpcalc" in refused(run_cli, ledger_file)


def test_corrupt_file_is_refused(ledger_file, run_cli):
    for _ in range(3):
        assert run_cli(*RELEASE, "--ledger", str(ledger_file), "--dataset", "census").exit_code == 0
    con = sqlite3.connect(ledger_file)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    data = bytearray(ledger_file.read_bytes())
    page = 4096
    assert len(data) >= 3 * page
    data[2 * page + 8: 2 * page + 400] = b"\xa5" * 392  # inside a b-tree page, header kept
    ledger_file.write_bytes(bytes(data))
    msg = refused(run_cli, ledger_file)
    assert "corrupt" in msg


def test_locked_ledger_is_refused_after_the_timeout(ledger_file, run_cli, monkeypatch):
    monkeypatch.setenv("DPCALC_LEDGER_TIMEOUT", "0.2")
    holder = sqlite3.connect(ledger_file, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        before = snapshot(ledger_file.parent)
        res = run_cli(*RELEASE, "--ledger", str(ledger_file), "--dataset", "census")
        assert res.exit_code == 2 and "locked by another process" in res.stderr and res.stdout == ""
        assert res.stderr.count("\n") == 1
        assert snapshot(ledger_file.parent)["budget.db"] == before["budget.db"]
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    with Ledger(ledger_file) as led:
        assert led.records(led.dataset("census")) == []


def _can_mount_read_only() -> bool:
    if sys.platform != "linux":
        return False
    try:
        return subprocess.run(["unshare", "-m", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.skipif(not _can_mount_read_only(), reason="needs unshare -m (mount namespaces)")
def test_read_only_file_system_is_refused(ledger_file):
    """A real read-only mount (a private mount namespace with the directory bind-mounted ro)."""
    d = ledger_file.parent
    before = snapshot(d)
    script = (f"mount --bind {d} {d} && mount -o remount,ro,bind {d} && "
              f"{sys.executable} -m dpcalc laplace --eps 0.1 --release 7 --ledger {ledger_file} --dataset census")
    res = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=60,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin:/usr/sbin:/sbin"})
    if "mount:" in res.stderr:
        pytest.skip("mount not permitted here: " + res.stderr.strip()[:80])
    assert res.returncode == 2, res.stderr
    assert res.stdout == "" and res.stderr.startswith("Error: ledger ") and res.stderr.count("\n") == 1
    assert "read-only" in res.stderr
    assert snapshot(d) == before


def test_bad_timeout_setting(ledger_file, run_cli, monkeypatch):
    monkeypatch.setenv("DPCALC_LEDGER_TIMEOUT", "soon")
    res = run_cli(*RELEASE, "--ledger", str(ledger_file), "--dataset", "census")
    assert res.exit_code == 2 and "DPCALC_LEDGER_TIMEOUT" in res.stderr


# ---- migrations -----------------------------------------------------------------------------------

def _v1_ledger(path: Path) -> None:
    """A ledger as the schema version 1 wrote it (datasets and release events, no step columns)."""
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute(f"PRAGMA application_id={store.APPLICATION_ID}")
    for statement in store.MIGRATIONS[1]:
        con.execute(statement)
    con.execute("INSERT INTO datasets VALUES (1, 'census', 1.0, 1e-6, 'add-remove', '2026-01-01T00:00:00+00:00')")
    con.execute("INSERT INTO events (dataset_id, kind, mechanism, params, event, status, created, updated, command, "
                "version) VALUES (1, 'release', 'discrete-laplace', '{\"epsilon\":0.5}', "
                "'{\"delta\":0.0,\"epsilon\":0.5,\"type\":\"epsilon-delta\"}', 'released', 't', 't', '[]', '0.0.9')")
    con.execute("PRAGMA user_version=1")
    con.close()


def test_v1_ledger_is_migrated_keeping_its_events(tmp_path, run_cli):
    path = tmp_path / "old.db"
    _v1_ledger(path)
    res = run_cli("laplace", "--eps", "0.5", "--release", "7", "--ledger", str(path), "--dataset", "census", "--json")
    assert res.exit_code == 0, res.stderr
    assert res.json()["results"][0]["ledger"]["filter_epsilon"] == 1.0  # 0.5 (v1 event) + 0.5
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA user_version").fetchone()[0] == store.SCHEMA_VERSION
    cols = {r[1] for r in con.execute("PRAGMA table_info(events)")}
    assert {"steps_reserved", "steps_taken", "dp_event"} <= cols
    assert con.execute("SELECT count(*) FROM events").fetchone()[0] == 2
    con.close()
    # the budget is full now: the migrated history is counted
    res = run_cli("laplace", "--eps", "0.01", "--release", "7", "--ledger", str(path), "--dataset", "census")
    assert res.exit_code == 1 and "ε 0 left" in res.stderr


def test_every_schema_version_has_a_migration():
    assert sorted(store.MIGRATIONS) == list(range(1, store.SCHEMA_VERSION + 1))


def test_ledger_file_error_is_a_parameter_error():
    from dpcalc.errors import ParameterError

    assert issubclass(LedgerFileError, ParameterError)
