"""Reading a ledger that cannot be written (docs/design.md §11): ``ledger show`` and ``ledger
export`` open it read-only instead of failing, never missing a committed event; writers still
refuse with one line, exit 2, nothing written."""

from __future__ import annotations

import shlex
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from dpcalc.ledger import Ledger, LedgerFileError, store

ROOT = Path(__file__).resolve().parents[2]


def _can_mount_read_only() -> bool:
    if sys.platform != "linux":
        return False
    try:
        return subprocess.run(["unshare", "-m", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


needs_mount = pytest.mark.skipif(not _can_mount_read_only(), reason="needs unshare -m (mount namespaces)")


def snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def on_read_only_mount(directory: Path, *args: str) -> subprocess.CompletedProcess:
    """Run ``dpcalc ARGS`` with ``directory`` bind-mounted read-only (a private mount namespace)."""
    d = shlex.quote(str(directory))
    cmd = " ".join(shlex.quote(a) for a in (sys.executable, "-m", "dpcalc", *args))
    script = f"mount --bind {d} {d} && mount -o remount,ro,bind {d} && {cmd}"
    res = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin:/usr/sbin:/sbin"})
    if "mount:" in res.stderr:
        pytest.skip("mount not permitted here: " + res.stderr.strip()[:80])
    return res


@pytest.fixture
def ledger_file(tmp_path, run_cli):
    path = tmp_path / "ro" / "budget.db"
    path.parent.mkdir()
    assert run_cli("ledger", "init", str(path), "--dataset", "census", "--budget-eps", "1",
                   "--delta", "1e-6").exit_code == 0
    for eps in ("0.25", "0.125"):
        assert run_cli("laplace", "--eps", eps, "--release", "7", "--ledger", str(path),
                       "--dataset", "census").exit_code == 0
    return path


def _eps_spent(res: subprocess.CompletedProcess) -> float:
    import json

    return json.loads(res.stdout)["results"][0]["filter_epsilon"]


@needs_mount
def test_show_and_export_work_on_a_read_only_file_system(ledger_file, run_cli):
    d = ledger_file.parent
    assert not Path(str(ledger_file) + "-wal").exists()  # closed cleanly: everything in the file
    before = snapshot(d)
    res = on_read_only_mount(d, "ledger", "show", str(ledger_file), "--json")
    assert res.returncode == 0, res.stderr
    assert _eps_spent(res) == 0.375  # 0.25 + 0.125 exactly (the order ∞)
    text = on_read_only_mount(d, "ledger", "show", str(ledger_file))
    assert text.returncode == 0 and "opened read-only" in " ".join(text.stdout.split())
    exp = on_read_only_mount(d, "ledger", "export", str(ledger_file))
    assert exp.returncode == 0 and len(exp.stdout.splitlines()) == 4  # header, dataset, 2 events
    # writers still refuse: one line, exit 2
    for args in (["laplace", "--eps", "0.1", "--release", "7", "--ledger", str(ledger_file), "--dataset", "census"],
                 ["ledger", "init", str(ledger_file), "--dataset", "x", "--budget-eps", "1", "--delta", "1e-6"],
                 ["ledger", "import", str(ledger_file), "-"]):
        res = on_read_only_mount(d, *args)
        assert res.returncode == 2, (args, res.stderr)
        assert res.stdout == "" and res.stderr.startswith("Error: ") and res.stderr.count("\n") == 1
    assert snapshot(d) == before
    # the same file on a writable mount: shown as usual, no read-only note
    res = run_cli("ledger", "show", str(ledger_file))
    assert res.exit_code == 0 and "opened read-only" not in res.stdout


def _freeze_with_wal(src: Path, dst_dir: Path, *, with_shm: bool = True) -> Path:
    """Copy ``src`` while another connection holds a committed, uncheckpointed event in its WAL
    (a writer elsewhere, or one killed before its checkpoint)."""
    con = sqlite3.connect(src, isolation_level=None)
    con.execute("PRAGMA wal_autocheckpoint=0")
    con.execute("INSERT INTO events (dataset_id, kind, mechanism, params, event, status, created, updated, "
                "command, version) SELECT dataset_id, kind, mechanism, params, event, status, created, updated, "
                "command, version FROM events WHERE id = 1")
    dst_dir.mkdir()
    for suffix in ("", "-wal") + (("-shm",) if with_shm else ()):
        shutil.copy(str(src) + suffix, dst_dir / (src.name + suffix))
    con.close()
    return dst_dir / src.name


@needs_mount
def test_events_only_in_the_write_ahead_log_are_counted(ledger_file, tmp_path):
    path = _freeze_with_wal(ledger_file, tmp_path / "wal")
    res = on_read_only_mount(path.parent, "ledger", "show", str(path), "--json")
    assert res.returncode == 0, res.stderr
    assert _eps_spent(res) == 0.625  # 0.25 + 0.125 + the WAL's copy of the 0.25 event


@needs_mount
def test_a_write_ahead_log_that_cannot_be_read_is_refused(ledger_file, tmp_path):
    """Without its -shm file SQLite cannot read the WAL read-only; the database file alone would
    miss the WAL's event (under-report ε): refused, one line, exit 2."""
    path = _freeze_with_wal(ledger_file, tmp_path / "noshm", with_shm=False)
    res = on_read_only_mount(path.parent, "ledger", "show", str(path))
    assert res.returncode == 2 and res.stdout == "" and res.stderr.count("\n") == 1
    assert "write-ahead log" in res.stderr


@needs_mount
def test_old_schema_on_a_read_only_file_system_is_refused(tmp_path):
    path = tmp_path / "old" / "old.db"
    path.parent.mkdir()
    con = sqlite3.connect(path, isolation_level=None)  # as schema version 1 wrote it
    con.execute("PRAGMA journal_mode=WAL")
    con.execute(f"PRAGMA application_id={store.APPLICATION_ID}")
    for statement in store.MIGRATIONS[1]:
        con.execute(statement)
    con.execute("PRAGMA user_version=1")
    con.close()
    before = snapshot(path.parent)
    res = on_read_only_mount(path.parent, "ledger", "show", str(path))
    assert res.returncode == 2 and "schema version 1" in res.stderr and res.stderr.count("\n") == 1
    assert snapshot(path.parent) == before


def test_read_only_open_when_the_file_cannot_be_written(ledger_file, monkeypatch):
    """The fallback without a mount: the file reported not writable (a read-only file for a
    non-root user) is opened read-only (``mode=ro``)."""
    monkeypatch.setattr(store, "_writable", lambda p: False)
    with Ledger(ledger_file, read_only=True) as led:
        assert led.read_only
        assert led.spent(led.dataset("census")).filter_epsilon == 0.375
        with pytest.raises(LedgerFileError):
            led.add_dataset("other", budget_epsilon=1.0, delta=1e-6)


def test_immutable_read_detects_a_change_meanwhile(ledger_file, monkeypatch):
    """When only ``immutable=1`` can open the file (no -shm can be created), a writer changing
    the file while it is read (another mount) makes the read fail instead of showing it."""
    real = sqlite3.connect

    def no_shm(database, *a, **k):  # what a read-only file system does to mode=ro without a -shm file
        if isinstance(database, str) and database.endswith("?mode=ro"):
            raise sqlite3.OperationalError("unable to open database file")
        return real(database, *a, **k)

    monkeypatch.setattr(store, "_writable", lambda p: False)
    monkeypatch.setattr(sqlite3, "connect", no_shm)
    with Ledger(ledger_file, read_only=True) as led:  # unchanged: fine
        assert led.read_only and led.spent(led.dataset("census")).filter_epsilon == 0.375
    with pytest.raises(LedgerFileError, match="changed while it was being read"), \
            Ledger(ledger_file, read_only=True) as led:
        led.datasets()
        with Ledger(ledger_file) as writer:  # a writer elsewhere
            writer.add_dataset("other", budget_epsilon=1.0, delta=1e-6)


@needs_mount
def test_v2_ledger_on_a_read_only_file_system_is_read_without_migrating(tmp_path, write_v2_ledger):
    """Schema v2 lacks only v3's per-dataset orders: read read-only with the default orders, unmigrated."""
    path = tmp_path / "v2" / "v2.db"
    path.parent.mkdir()
    write_v2_ledger(path)
    before = snapshot(path.parent)
    res = on_read_only_mount(path.parent, "ledger", "show", str(path), "--json")
    assert res.returncode == 0, res.stderr
    assert _eps_spent(res) == 0.5
    assert snapshot(path.parent) == before


@needs_mount
def test_show_and_export_work_on_a_full_file_system(tmp_path):
    """Reading must not need to write (issue 33): on a full file system (a 1 MiB tmpfs filled up
    after two releases) ``ledger show`` and ``export`` still read every event; a release is
    refused in one line, exit 2."""
    d = tmp_path / "full"
    d.mkdir()
    q = shlex.quote
    dp = " ".join(q(a) for a in (sys.executable, "-m", "dpcalc"))
    db = q(str(d / "l.db"))
    script = (f"mount -t tmpfs -o size=1m tmpfs {q(str(d))} && "
              f"{dp} ledger init {db} --dataset census --budget-eps 1 --delta 1e-6 >/dev/null && "
              f"{dp} laplace --eps 0.25 --release 7 --ledger {db} --dataset census >/dev/null && "
              f"{dp} laplace --eps 0.125 --release 7 --ledger {db} --dataset census >/dev/null && "
              f"(dd if=/dev/zero of={q(str(d / 'fill'))} bs=4k 2>/dev/null; true) && "
              f"{dp} ledger show {db} --json; echo rc=$?; "
              f"{dp} ledger export {db} | wc -l; "
              f"{dp} laplace --eps 0.125 --release 7 --ledger {db} --dataset census; echo rc=$?")
    res = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=180,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin:/usr/sbin:/sbin"})
    if "mount:" in res.stderr:
        pytest.skip("mount not permitted here: " + res.stderr.strip()[:80])
    import json

    shown, _, rest = res.stdout.partition("\nrc=")
    assert rest.startswith("0\n"), (res.stdout[-300:], res.stderr)
    assert json.loads(shown)["results"][0]["filter_epsilon"] == 0.375
    out = rest.splitlines()
    assert out[1].strip() == "4"  # header, dataset, 2 events
    assert out[-1] == "rc=2" and res.stderr.startswith("Error: ") and res.stderr.count("\n") == 1
    assert "cannot be written" in res.stderr and "nothing was recorded" in res.stderr
