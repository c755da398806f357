"""Hostile inputs of the calculator commands, second round (issue 33): every file through the one
safe reader, bounded time and memory, one-line errors, and no option silently ignored. Each test
here failed before the change (a traceback, a hang, gigabytes of memory, exit 0 with an option
ignored, or a budget charged for a refused release)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _one_line_error(r, *needles: str, code: int = 2) -> None:
    assert r.exit_code == code, (r.exit_code, r.stdout[-500:], r.stderr[-500:])
    assert r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1, r.stderr
    assert "Traceback" not in r.stderr and "Warning" not in r.stderr
    for n in needles:
        assert n in r.stderr, r.stderr


def _subprocess(args: list[str], *, timeout: float, memory_gib: float | None = None, cwd=None):
    """``python -m dpcalc ARGS`` in a child (a hang or an allocation cannot take the test run
    down): (exit code, stdout, stderr, seconds). ``memory_gib`` caps the child's address space."""
    def limit():
        if memory_gib is not None:
            cap = int(memory_gib * 2**30)
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "dpcalc", *args], capture_output=True, text=True,
                       timeout=timeout, env=env, preexec_fn=limit, cwd=cwd)
    return p.returncode, p.stdout, p.stderr, time.monotonic() - t0


# ---- 1. risk --spec through the one safe reader, bounded ----------------------------------------

@pytest.mark.parametrize("kind", ["device", "symlink", "fifo"])
def test_risk_spec_special_files_refused(tmp_path, kind):
    path = "/dev/zero"
    if kind == "symlink":
        path = str(tmp_path / "zero.json")
        os.symlink("/dev/zero", path)
    elif kind == "fifo":
        path = str(tmp_path / "spec.json")
        os.mkfifo(path)  # nobody writes: a blocking open would hang
    code, out, err, _ = _subprocess(["risk", "--spec", path, "--delta", "1e-5"], timeout=60, memory_gib=2)
    assert code == 2, (out[-300:], err[-500:])
    assert err.startswith("Error: --spec") and err.count("\n") == 1 and "not a regular file" in err, err


def test_risk_spec_many_distinct_refused_fast(tmp_path):
    # 20,000 distinct Laplace entries (1.5 MB): > 3 GB after 30 s before; now refused at once
    spec = tmp_path / "many.json"
    spec.write_text(json.dumps([{"mechanism": "laplace", "parameters": {"epsilon": 0.001 + i * 1e-7}}
                                for i in range(20_000)]))
    code, out, err, secs = _subprocess(["risk", "--spec", str(spec), "--delta", "1e-5"], timeout=60,
                                       memory_gib=2)
    assert code == 2, (out[-300:], err[-500:])
    assert err.count("\n") == 1 and "--spec" in err and "20,000 distinct" in err and "256" in err, err
    assert secs < 30


def test_risk_spec_limit_is_the_documented_one(run_cli, tmp_path):
    from dpcalc.cli.risk import RISK_MAX_DISTINCT

    spec = tmp_path / "s.json"
    spec.write_text(json.dumps([{"mechanism": "laplace", "parameters": {"epsilon": 0.5 + i * 1e-3}}
                                for i in range(RISK_MAX_DISTINCT + 1)]))
    _one_line_error(run_cli("risk", "--spec", spec, "--delta", "1e-5"), f"at most {RISK_MAX_DISTINCT}")
    assert str(RISK_MAX_DISTINCT) in run_cli("risk", "--help").stdout


def test_load_spec_file_uses_the_safe_reader(tmp_path):
    # in a child with capped memory: before the fix this read /dev/zero until memory ran out
    fifo = tmp_path / "f.toml"
    os.mkfifo(fifo)
    code = ("import sys\n"
            "from dpcalc.composition.spec import load_spec_file\n"
            "from dpcalc.errors import ParameterError\n"
            "for path, want in (('/dev/zero', 'a device'), (sys.argv[1], 'a FIFO')):\n"
            "    try:\n"
            "        load_spec_file(path)\n"
            "    except ParameterError as e:\n"
            "        assert want in str(e), e\n"
            "    else:\n"
            "        raise SystemExit('accepted ' + path)\n")

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))

    p = subprocess.run([sys.executable, "-c", code, str(fifo)], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, preexec_fn=limit)
    assert p.returncode == 0, p.stderr[-800:]


# ---- 8. one-line errors -------------------------------------------------------------------------

def test_risk_huge_count_leaks_no_numpy_warning(tmp_path):
    spec = tmp_path / "huge.json"
    spec.write_text(json.dumps([{"mechanism": "laplace", "parameters": {"epsilon": 1}, "count": 10**15}]))
    code, out, err, _ = _subprocess(["risk", "--spec", str(spec), "--delta", "1e-5"], timeout=120)
    assert "RuntimeWarning" not in err and "Traceback" not in err, err
    assert code in (0, 1), err
    if code:
        assert err.startswith("Error: ") and err.count("\n") == 1, err


def test_missing_required_choice_is_one_line(run_cli):
    r = run_cli("pate", "--votes", "x.csv")
    _one_line_error(r, "--mechanism", "lnmax, gnmax, confident-gnmax")


# ---- 2. sampling-cost memory ----------------------------------------------------------------------

def test_sampling_cost_tiny_sigma_bounded_memory():
    # the Monte Carlo histogram needed 2·10⁹ bins (15 GiB) before
    code, out, err, secs = _subprocess(
        ["sampling-cost", "--sigma", "1e-3", "--batch-size", "1", "--dataset-size", "1", "--epochs", "1e5",
         "--delta", "1e-300", "--json"], timeout=120, memory_gib=2)
    assert code == 0, err[-800:]
    rows = {(r["sampler"], r["details"].get("adjacency")): r for r in json.loads(out)["results"]}
    bnb = next(r for (s, _), r in rows.items() if s == "balls-in-bins")
    assert bnb["estimate"]["epsilon"] is None and "Monte Carlo skipped" in bnb["estimate"]["skipped"]
    assert "grid" in bnb["estimate"]["skipped"]
    # the certified column is untouched by the estimate
    assert bnb["epsilon"] is not None and bnb["epsilon"] > 1e6


def test_balls_in_bins_estimate_histogram_is_bounded(monkeypatch):
    """The one-epoch loss histogram has at most _MAX_HIST bins whatever σ (the grid step grows)."""
    import numpy as np

    from dpcalc.accounting import shuffling as sh

    seen = []
    real = np.bincount

    def spy(x, *a, **k):
        out = real(x, *a, **k)
        seen.append(out.size)
        return out

    monkeypatch.setattr(sh.np, "bincount", spy)
    est = sh.balls_in_bins_estimate(noise_multiplier=1e-2, steps_per_epoch=2, epochs=1, delta=1e-5,
                                    samples=200, bootstrap=10)
    assert seen and max(seen) <= sh._MAX_HIST + 1
    assert est["epsilon"] is not None


# ---- 3. audit --guesses -------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "content", "needle"), [
    ("big.json", '{"included": [1, 0], "score": [%s, 1]}' % ("9" * 400), "finite"),
    ("huge.json", '{"included": [1, 0], "score": [%s, 1]}' % ("9" * 5000), "finite"),
    ("deep.json", "[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ("field.csv", "included,score\n1," + "1" * 200_000 + "\n0,1\n", "field larger than field limit"),
    ("unequal.json", json.dumps({"included": [1, 0, 1], "score": [1, 2]}), "equal lengths"),
    ("strings.json", json.dumps({"included": "1010", "score": "1234"}), "must be a list"),
    ("bools.json", json.dumps({"included": [1, 0], "score": [True, False]}), "score must be a number"),
    ("boolrows.json", json.dumps([{"included": 1, "score": True}, {"included": 0, "score": 0.5}]),
     "score must be a number"),
])
def test_audit_hostile_guesses(run_cli, tmp_path, name, content, needle):
    p = tmp_path / name
    p.write_text(content)
    _one_line_error(run_cli("audit", "--guesses", p, "--delta", "1e-5"), "--guesses", needle)


def test_audit_json_numbers_still_read(run_cli, tmp_path):
    # JSON numbers are read as floats now: 1/0 labels and 1/-1/0 guesses keep their meaning
    p = tmp_path / "g.json"
    p.write_text(json.dumps({"included": [1, 0, 1, 0], "guess": [1, -1, 0, 1]}))
    from dpcalc.risk.audit import read_guesses

    d = read_guesses(str(p))
    assert d.included.tolist() == [True, False, True, False] and d.guesses.tolist() == [1, -1, 0, 1]
    q = tmp_path / "s.json"
    q.write_text(json.dumps([{"included": 1, "score": 3}, {"included": 0, "score": -2.5}]))
    assert read_guesses(str(q)).scores.tolist() == [3.0, -2.5]


# ---- 4. tune: the truncated negative binomial at the edges ---------------------------------------

def test_tune_eta_near_minus_one_refused(run_cli):
    r = run_cli("tune", "--sigma", "1", "--sample-rate", "0.01", "--steps", "100", "--delta", "1e-5",
                "--runs-distribution", "negative-binomial", "--eta", "-0.999", "--mean-runs", "10")
    _one_line_error(r, "--mean-runs", "--eta", "1e-300")


def test_tune_extreme_law_gives_an_answer(run_cli):
    r = run_cli("tune", "--sigma", "1e-3", "--sample-rate", "1", "--steps", "1e12", "--delta", "1e-300",
                "--runs-distribution", "negative-binomial", "--eta", "1e3", "--mean-runs", "1e6", "--json")
    assert r.exit_code == 0, r.stderr
    rows = {row["scenario"]: row for row in r.json()["results"]}
    # never below one run (the search costs at least one run's ε)
    assert rows["search"]["epsilon"] >= rows["single"]["epsilon"] > 0


# ---- 5. rr ----------------------------------------------------------------------------------------

def test_rr_huge_counts_refused(run_cli):
    r = run_cli("rr", "--eps", "1", "--categories", "3", "--observed", "1e308,1e308,1", "--json")
    _one_line_error(r, "--observed", "1e15")
    r = run_cli("rr", "--eps", "1", "--categories", "3", "--observed", "1e15,1e15,1", "--json")
    _one_line_error(r, "--observed", "total")
    r = run_cli("rr", "--eps", "1", "--categories", "3", "--observed", "1e14,1e14,1", "--json")
    assert r.exit_code == 0 and all(abs(x) < 1e16 for x in r.json()["results"][0]["estimated_counts"])


# ---- 7. noisy-max: refused before the ledger is charged ------------------------------------------

@pytest.mark.parametrize("noise", ["laplace", "exponential"])
def test_noisy_max_bad_release_charges_nothing(run_cli, tmp_path, noise):
    db = str(tmp_path / "b.db")
    assert run_cli("ledger", "init", db, "--dataset", "d", "--budget-eps", "10", "--delta", "1e-6").exit_code == 0
    scores = tmp_path / "s.txt"
    scores.write_text("3\n5\n1\n")
    r = run_cli("noisy-max", "--eps", "1", "--scores", scores, "--release", "--top", "2", "--noise", noise,
                "--ledger", db, "--dataset", "d")
    _one_line_error(r, "--top")
    shown = run_cli("ledger", "show", db, "--json").json()["results"][0]
    assert shown["events"] == [] and shown["filter_epsilon"] == 0.0


def test_check_release_matches_release(tmp_path):
    from dpcalc.errors import ParameterError
    from dpcalc.mechanisms import noisy_max as nm

    for kw in ({"noise": "laplace", "top": 2}, {"noise": "gumbel", "top": 4}, {"noise": "bogus"},
               {"noise": "gumbel", "labels": ["a"]}):
        args = {"noise": "gumbel", "scores": ["1", "2", "3"], "epsilon": 1, **kw}
        with pytest.raises(ParameterError) as a:
            nm.check_release(**args)
        with pytest.raises(ParameterError) as b:
            nm.release_noisy_max(**args)
        assert str(a.value) == str(b.value)


# ---- 6. options silently ignored or contradicted ------------------------------------------------

GUESS_SCORES = "included,score\n1,0.9\n0,0.1\n1,0.8\n0,0.3\n"
GUESS_GUESSES = "included,guess\n1,in\n0,out\n1,abstain\n"


@pytest.fixture
def files(tmp_path):
    (tmp_path / "scores.csv").write_text(GUESS_SCORES)
    (tmp_path / "guesses.csv").write_text(GUESS_GUESSES)
    (tmp_path / "s.txt").write_text("3\n5\n1\n")
    (tmp_path / "fit.csv").write_text("y,a\n1,0.5\n0,0.1\n1,0.9\n0,0.2\n")
    return tmp_path


#: (command and a mode's arguments, an option of another mode, the option's flag): each must be
#: refused. ``{d}`` is the fixture's directory. Every entry of a command's ONLY_WITH table appears
#: here (test_every_table_entry_is_exercised).
MODE_PAIRS = [
    (["risk", "--eps", "1", "--delta", "1e-5"], ["--sample-rate", "0.5"], "--sample-rate"),
    (["risk", "--eps", "1", "--delta", "1e-5"], ["--steps", "100"], "--steps"),
    (["risk", "--gdp", "1", "--delta", "1e-5"], ["--batch-size", "10"], "--batch-size"),
    (["risk", "--gdp", "1", "--delta", "1e-5"], ["--dataset-size", "10"], "--dataset-size"),
    (["risk", "--eps", "1", "--delta", "1e-5"], ["--epochs", "1"], "--epochs"),
    (["risk", "--eps", "1", "--delta", "1e-5"], ["--accountant", "rdp"], "--accountant"),
    (["risk", "--gdp", "1", "--delta", "1e-5"], ["--neighboring", "replace"], "--neighboring"),
    (["risk", "--gdp", "1", "--delta", "1e-5"], ["--discretization", "1e-4"], "--discretization"),
    (["risk", "--sigma", "1", "--steps", "10", "--delta", "1e-5", "--accountant", "rdp"],
     ["--discretization", "1e-4"], "--discretization"),
    (["risk", "--eps", "1", "--delta", "1e-5"], ["--accuracy", "0.01"], "--accuracy"),
    (["risk", "--gdp", "1", "--delta", "1e-5"], ["--group-size", "4"], "--group-size"),
    (["erm", "--eps", "1", "--lambda", "1", "--dataset-size", "10", "--dims", "3"],
     ["--test-fraction", "0.5"], "--test-fraction"),
    (["erm", "--eps", "1", "--lambda", "1", "--dataset-size", "10", "--dims", "3"],
     ["--split-seed", "3"], "--split-seed"),
    (["erm", "--eps", "1", "--lambda", "1", "--dataset-size", "10", "--dims", "3"], ["--label", "y"], "--label"),
    (["erm", "--eps", "1", "--lambda", "1", "--dataset-size", "10", "--dims", "3"],
     ["--norm-bound", "2"], "--norm-bound"),
    (["erm", "--eps", "1", "--lambda", "1", "--dataset-size", "10", "--dims", "3"], ["--seed", "1"], "--seed"),
    (["erm", "--eps", "1", "--lambda", "1", "--dataset-size", "10", "--dims", "3"],
     ["--save-model", "{d}/m.json"], "--save-model"),
    (["erm", "--eps", "1", "--lambda", "1", "--fit", "{d}/fit.csv", "--label", "y"], ["--dims", "3"], "--dims"),
    (["erm", "--eps", "1", "--lambda", "1", "--fit", "{d}/fit.csv", "--label", "y"],
     ["--dataset-size", "4"], "--dataset-size"),
    (["erm", "--eps", "1", "--lambda", "1", "--fit", "{d}/fit.csv", "--label", "y"], ["--beta", "0.1"], "--beta"),
    (["audit", "--guesses", "{d}/scores.csv", "--delta", "1e-5", "--method", "clopper-pearson"],
     ["--k-in", "5"], "--k-in"),
    (["audit", "--guesses", "{d}/scores.csv", "--delta", "1e-5", "--method", "clopper-pearson"],
     ["--k-out", "1"], "--k-out"),
    (["audit", "--guesses", "{d}/scores.csv", "--delta", "1e-5", "--method", "one-run"],
     ["--threshold", "1"], "--threshold"),
    (["audit", "--guesses", "{d}/scores.csv", "--delta", "1e-5", "--method", "one-run"], ["--seed", "2"], "--seed"),
    (["audit", "--guesses", "{d}/scores.csv", "--delta", "1e-5", "--method", "both", "--threshold", "0.5"],
     ["--seed", "2"], "--seed"),
    (["audit", "--guesses", "{d}/guesses.csv", "--delta", "1e-5"], ["--k-in", "5"], "--k-in"),
    (["audit", "--guesses", "{d}/guesses.csv", "--delta", "1e-5", "--method", "both"],
     ["--threshold", "1"], "--threshold"),
    (["sampling-cost", "--sigma", "1", "--batch-size", "10", "--dataset-size", "100", "--epochs", "1",
      "--delta", "1e-5", "--no-monte-carlo"], ["--mc-samples", "300"], "--mc-samples"),
    (["sampling-cost", "--sigma", "1", "--batch-size", "10", "--dataset-size", "100", "--epochs", "1",
      "--delta", "1e-5", "--no-monte-carlo"], ["--seed", "3"], "--seed"),
    (["noisy-max", "--eps", "1", "--scores", "{d}/s.txt", "--noise", "gumbel", "--release"],
     ["--scale", "7"], "--scale"),
    (["noisy-max", "--eps", "1", "--scores", "{d}/s.txt", "--noise", "gumbel", "--release"], ["--gap", "1"], "--gap"),
    (["noisy-max", "--eps", "1", "--scores", "{d}/s.txt", "--noise", "gumbel", "--release"],
     ["--beta", "0.1"], "--beta"),
]


@pytest.mark.parametrize(("mode", "extra", "flag"), MODE_PAIRS,
                         ids=[f"{m[0]}:{f}:{i}" for i, (m, _, f) in enumerate(MODE_PAIRS)])
def test_option_of_another_mode_refused(run_cli, files, mode, extra, flag):
    args = [a.format(d=files) for a in (*mode, *extra)]
    base = run_cli(*[a.format(d=files) for a in mode])
    assert base.exit_code == 0, base.stderr  # the mode alone is fine
    r = run_cli(*args)
    _one_line_error(r, flag, "used only")
    assert not (files / "m.json").exists()


def test_every_table_entry_is_exercised():
    """Each option of a command's ONLY_WITH table is paired with a mode that does not use it above."""
    import importlib

    from dpcalc.cli import COMMANDS

    exercised = {(m[0], f) for m, _, f in MODE_PAIRS}
    missing = []
    for name, target in COMMANDS.items():
        module, _, attr = target.partition(":")
        cmd = getattr(importlib.import_module(module), attr)
        for param in getattr(cmd, "only_with", {}):
            opt = next(p for p in cmd.params if p.name == param)
            flag = next(o for o in opt.opts if o.startswith("--"))
            if (name, flag) not in exercised:
                missing.append(f"{name} {flag}")
    assert not missing, missing


def test_options_in_their_mode_still_accepted(run_cli, files):
    # the same options where they apply: no refusal
    assert run_cli("risk", "--sigma", "1", "--steps", "10", "--sample-rate", "0.5", "--delta", "1e-5",
                   "--discretization", "1e-3").exit_code == 0
    assert run_cli("audit", "--guesses", files / "scores.csv", "--delta", "1e-5", "--method", "both",
                   "--k-in", "1", "--threshold", "0.5").exit_code == 0
    assert run_cli("sampling-cost", "--sigma", "1", "--batch-size", "10", "--dataset-size", "100", "--epochs", "1",
                   "--delta", "1e-5", "--mc-samples", "300", "--seed", "2").exit_code == 0
    assert run_cli("noisy-max", "--scale", "2", "--candidates", "5", "--gap", "1", "--beta", "0.1").exit_code == 0
