"""``dpcalc ledger report``: the DP statement of a ledger dataset (issue 29), read-only, its total the
one ``ledger show`` prints, and the example of docs/how-to/model-card-statement.md run for real."""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import sqlite3
from pathlib import Path

import pytest

from dpcalc.ledger import Ledger

DOC = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "model-card-statement.md"


def build_example(run_cli, path: Path, *, finish: bool = True) -> None:
    """The ledger of the docs example: dataset 'mnist' (budget ε 8, δ 1e-5, add/remove), two releases
    recorded by the CLI (two counts, by the Laplace and the Gaussian mechanisms) and a DP-SGD run of 470 Poisson-sampled
    steps (σ 1.1, q 256/60000) recorded through the API ``dpcalc train --ledger`` uses (no torch)."""
    p = str(path)
    assert run_cli("ledger", "init", p, "--dataset", "mnist", "--budget-eps", "8", "--delta", "1e-5").exit_code == 0
    for args in (("laplace", "--eps", "0.5", "--release", "6000"),
                 ("gaussian", "--eps", "0.5", "--delta", "1e-6", "--release", "42")):
        r = run_cli(*args, "--ledger", p, "--dataset", "mnist")
        assert r.exit_code == 0, r.stderr
    with Ledger(p) as led:
        run = led.start_training("mnist", noise_multiplier=1.1, sample_rate=256 / 60000, steps=470,
                                 params={"model": "cnn", "batch_size": 256, "max_grad_norm": 1.0},
                                 command=["dpcalc", "train"])
        if finish:
            run.finish(470)


@pytest.fixture
def example(tmp_path, run_cli):
    path = tmp_path / "budget.db"
    build_example(run_cli, path)
    return path


def _files(path: Path) -> dict[str, str]:
    """Hashes and modification times of the ledger and its -wal/-shm files."""
    out = {}
    for f in sorted(path.parent.glob(path.name + "*")):
        out[f.name] = (hashlib.sha256(f.read_bytes()).hexdigest(), f.stat().st_mtime_ns)
    return out


def test_total_is_ledger_shows_and_events_are_listed(example, run_cli):
    show = run_cli("ledger", "show", str(example), "--dataset", "mnist", "--json").json()["results"][0]
    r = run_cli("ledger", "report", str(example), "--dataset", "mnist", "--format", "json")
    assert r.exit_code == 0, r.stderr
    st = r.json()["results"][0]
    g = st["guarantee"]
    assert g["epsilon_spent"] == show["filter_epsilon"] and g["epsilon_left"] == show["left"]
    assert (g["budget_epsilon"], g["delta"], g["neighboring"]) == (8.0, 1e-5, "add-remove")
    assert g["method"] == "rdp-filter" and g["adaptive"] and g["certified"]
    ev = st["events"]
    assert [(e["kind"], e["mechanism"], e["status"]) for e in ev] == [
        ("release", "discrete-laplace", "released"), ("release", "discrete-gaussian", "released"),
        ("train", "dp-sgd", "finished")]
    assert [e["id"] for e in ev] == [e["id"] for e in show["events"]]
    # the Laplace release alone is pure 0.5-DP: the filter's order ∞ states exactly that (closed form)
    assert ev[0]["epsilon_alone"] == 0.5
    assert all(e["certified"] and not e["data_dependent"] and e["label"] == "data-independent" for e in ev)
    # the filter's sums only grow: the whole history costs at least any of its events alone
    assert g["epsilon_spent"] >= max(e["epsilon_alone"] for e in ev)
    assert ev[2]["counted_steps"] == 470 and ev[2]["params"]["steps"] == 470
    items = {i["item"]: i for i in st["checklist"]}
    assert items["Empirical audit"]["answer"] == "not recorded" and not items["Empirical audit"]["recorded"]
    assert "add/remove one record" in items["Adjacency definition"]["answer"]
    assert "3 event(s)" in items["Data accesses covered"]["answer"]


def test_markdown_states_the_same_total(example, run_cli):
    show = run_cli("ledger", "show", str(example), "--dataset", "mnist", "--json").json()["results"][0]
    r = run_cli("ledger", "report", str(example), "--dataset", "mnist")
    assert r.exit_code == 0, r.stderr
    from dpcalc._rounding import format_bound as _fmt

    assert f"| spent | ε = {_fmt(show['filter_epsilon'])} at δ = 1e-05 " in r.stdout
    assert r.stdout.count("| release |") == 2 and r.stdout.count("| train |") == 1
    assert "## Reporting checklist" in r.stdout and "| Empirical audit | not recorded |" in r.stdout


def test_json_round_trips_and_output_file_is_the_same_text(example, run_cli, tmp_path):
    r = run_cli("ledger", "report", str(example), "--format", "json")
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["command"] == "ledger report" and len(data["results"]) == 1
    assert json.loads(json.dumps(data, ensure_ascii=False)) == data
    out = tmp_path / "st.json"
    w = run_cli("ledger", "report", str(example), "--format", "json", "--output", str(out))
    assert w.exit_code == 0 and w.stdout == ""
    assert json.loads(out.read_text(encoding="utf-8")) == data
    md = tmp_path / "st.md"
    assert run_cli("ledger", "report", str(example), "--output", str(md)).exit_code == 0
    assert md.read_text(encoding="utf-8") == run_cli("ledger", "report", str(example)).stdout


def test_every_dataset_without_dataset_option(example, run_cli):
    assert run_cli("ledger", "init", str(example), "--dataset", "census", "--budget-eps", "1",
                   "--delta", "1e-6", "--adjacency", "replace").exit_code == 0
    r = run_cli("ledger", "report", str(example), "--format", "json")
    sts = r.json()["results"]
    assert [s["dataset"] for s in sts] == ["mnist", "census"]
    assert sts[1]["events"] == [] and sts[1]["guarantee"]["epsilon_spent"] == 0.0
    assert sts[1]["guarantee"]["epsilon_left"] == 1.0 and sts[1]["guarantee"]["neighboring"] == "replace"
    md = run_cli("ledger", "report", str(example)).stdout
    assert "dataset 'mnist'" in md and "No event recorded yet." in md
    assert "No release or training run is recorded for dataset 'census' yet: ε spent 0 of its budget ε = 1" in md


def test_unfinished_run_counted_at_reserved_steps(tmp_path, run_cli):
    path = tmp_path / "b.db"
    build_example(run_cli, path, finish=False)
    st = run_cli("ledger", "report", str(path), "--format", "json").json()["results"][0]
    run = st["events"][2]
    assert run["status"] == "running" and run["counted_steps"] == 470 and run["steps_taken"] == 0
    items = {i["item"]: i["answer"] for i in st["checklist"]}
    assert f"unfinished training runs (#{run['id']})" in items["Accounting assumptions"]


def _database_unchanged(path: Path, before: dict) -> None:
    """The database file as it was; SQLite's mode=ro reader may leave an empty -wal and a -shm
    (its shared-memory index) beside it, never a change."""
    after = _files(path)
    assert after[path.name] == before[path.name]
    wal = path.parent / (path.name + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0 or after[wal.name] == before[wal.name]


def test_read_only_and_no_write_lock(example, run_cli):
    before = _files(example)
    assert run_cli("ledger", "report", str(example)).exit_code == 0
    _database_unchanged(example, before)
    # the ledger stays usable: a later release is recorded and counted
    assert run_cli("laplace", "--eps", "0.25", "--release", "3", "--ledger", str(example),
                   "--dataset", "mnist").exit_code == 0
    show = run_cli("ledger", "show", str(example), "--json").json()["results"][0]
    st = run_cli("ledger", "report", str(example), "--format", "json").json()["results"][0]
    assert len(st["events"]) == 4 and st["guarantee"]["epsilon_spent"] == show["filter_epsilon"]
    # a writer holding the write lock does not stop the report (it takes none)
    con = sqlite3.connect(example, isolation_level=None, timeout=0.1)
    try:
        con.execute("BEGIN IMMEDIATE")
        r = run_cli("ledger", "report", str(example), "--format", "json")
        assert r.exit_code == 0, r.stderr
    finally:
        con.execute("ROLLBACK")
        con.close()


@pytest.mark.parametrize(("args", "pattern"), [
    (("--dataset", "nope"), r"Error: dataset 'nope' is not in ledger .* \(it has: 'mnist'\)"),
    (("--format", "html"), r"Error: Invalid value for '--format'"),
])
def test_bad_dataset_or_format_one_line_exit_2(example, run_cli, args, pattern):
    r = run_cli("ledger", "report", str(example), *args)
    assert r.exit_code == 2 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and re.match(pattern, r.stderr), r.stderr


def test_missing_or_unreadable_file_one_line_exit_2(tmp_path, run_cli):
    missing = tmp_path / "none.db"
    r = run_cli("ledger", "report", str(missing))
    assert r.exit_code == 2 and r.stdout == "" and len(r.stderr.splitlines()) == 1
    assert r.stderr.startswith("Error: no ledger at") and not missing.exists()
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database at all" * 100)
    before = junk.read_bytes()
    r = run_cli("ledger", "report", str(junk))
    assert r.exit_code == 2 and r.stdout == "" and len(r.stderr.splitlines()) == 1, r.stderr
    assert junk.read_bytes() == before


def test_output_onto_the_ledger_refused(example, run_cli, tmp_path):
    before = _files(example)
    for target in (example, Path(str(example) + "-wal")):
        r = run_cli("ledger", "report", str(example), "--output", str(target))
        assert r.exit_code == 2 and len(r.stderr.splitlines()) == 1 and "is the ledger file" in r.stderr
    assert _files(example) == before  # refused before the ledger is opened
    bad = tmp_path / "dir"
    bad.mkdir()
    r = run_cli("ledger", "report", str(example), "--output", str(bad))
    assert r.exit_code == 2 and len(r.stderr.splitlines()) == 1


def _doc_example() -> tuple[str, str]:
    text = DOC.read_text(encoding="utf-8")
    for block in re.findall(r"^```console\n(.*?)^```", text, flags=re.S | re.M):
        lines = block.splitlines()
        if lines and lines[0].startswith("$ dpcalc ledger report"):
            return lines[0][2:], "\n".join(lines[1:])
    raise AssertionError("no `$ dpcalc ledger report` example in " + DOC.name)


def test_docs_example_runs(tmp_path, run_cli, monkeypatch):
    """The page's example (tests/test_readme.py skips ledger lines): the same ledger built here, the
    command run from the page, its output equal to the pasted one."""
    command, pasted = _doc_example()
    monkeypatch.chdir(tmp_path)
    build_example(run_cli, Path("budget.db"))
    r = run_cli(*shlex.split(command)[1:])
    assert r.exit_code == 0, r.stderr
    assert r.stdout.rstrip("\n") == pasted.rstrip("\n")


def test_old_schema_read_as_it_is_never_migrated(tmp_path, run_cli, write_v2_ledger):
    """A writable schema-2 ledger: ``ledger show`` would migrate it; the report reads it with SQLite's
    mode=ro and leaves the file as it was (schema version 2)."""
    path = tmp_path / "v2.db"
    write_v2_ledger(path)
    before = _files(path)
    r = run_cli("ledger", "report", str(path), "--format", "json")
    assert r.exit_code == 0, r.stderr
    st = r.json()["results"][0]
    assert st["dataset"] == "census" and st["events"][0]["epsilon_alone"] == 0.5
    assert st["guarantee"]["epsilon_spent"] == 0.5  # one pure 0.5-DP release: the order ∞, exactly
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == 2
    _database_unchanged(path, before)
