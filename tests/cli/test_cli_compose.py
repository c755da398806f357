"""``dpcalc compose`` through the CLI: JSON contract, ordering of flags, errors, plots."""

from __future__ import annotations

import json

import pytest

METHODS = {"basic", "advanced", "kov", "optimal", "ma", "rdp", "zcdp", "pld", "gdp"}


def test_json_contract(run_cli):
    r = run_cli("compose", "--dp", "0.1", "--count", "100", "--delta", "1e-5", "--json")
    assert r.exit_code == 0, r.stderr
    out = r.json()
    assert out["command"] == "compose"
    assert out["inputs"]["delta"] == 1e-5 and out["inputs"]["mechanisms"][0]["count"] == 100
    assert {x["method"] for x in out["results"]} == METHODS
    rows = {x["method"]: x for x in out["results"]}
    # docs/references.md: basic 10, advanced 5.8502, exact optimal 4.3068
    assert rows["basic"]["epsilon"] == pytest.approx(10.0)
    assert rows["advanced"]["epsilon"] == pytest.approx(5.8502, abs=1e-4)
    assert rows["optimal"]["epsilon"] == pytest.approx(4.3068, abs=1e-4)
    assert out["results"][0]["method"] == "optimal"  # tightest certified first
    for x in out["results"]:
        assert {"method", "epsilon", "delta", "certified"} <= set(x)
        if x.get("applicable") is False:
            assert x["reason"]


def test_flags_attach_to_preceding_mechanism(run_cli):
    r = run_cli("compose", "--dp", "0.5,1e-7", "--count", "20", "--gaussian", "10", "--count", "3",
                "--laplace", "0.1", "--count", "50", "--eps", "20", "--json")
    assert r.exit_code == 0, r.stderr
    mech = r.json()["inputs"]["mechanisms"]
    assert [(m["mechanism"], m["count"]) for m in mech] == [("dp", 20), ("gaussian", 3), ("laplace", 50)]
    rows = {x["method"]: x for x in r.json()["results"]}
    assert rows["advanced"]["applicable"] is False and "identical" in rows["advanced"]["reason"]
    assert 0 <= rows["optimal"]["delta"] <= 1


def test_spec_file_toml_and_json(run_cli, tmp_path):
    toml = tmp_path / "seq.toml"
    toml.write_text('[[mechanisms]]\nmechanism = "gaussian"\ncount = 1000\n'
                    '[mechanisms.parameters]\nnoise_multiplier = 1.0\nsample_rate = 0.01\n')
    r = run_cli("compose", "--spec", str(toml), "--delta", "1e-5", "--json", "--method", "rdp", "--method", "kov")
    assert r.exit_code == 0, r.stderr
    assert {x["method"] for x in r.json()["results"]} == {"rdp", "kov"}
    js = tmp_path / "seq.json"
    js.write_text(json.dumps([{"mechanism": "dp", "parameters": {"epsilon": 0.1}, "count": 100}]))
    r = run_cli("compose", "--spec", str(js), "--delta", "1e-5", "--json", "--method", "optimal")
    assert r.json()["results"][0]["epsilon"] == pytest.approx(4.3068, abs=1e-4)


@pytest.mark.parametrize("args,message", [
    (["--dp", "0.1", "--count", "-3", "--delta", "1e-5"], "--count must be a whole number >= 1, got -3"),
    (["--dp", "0.1", "--count", "2.5", "--delta", "1e-5"], "--count must be a whole number >= 1, got 2.5"),
    (["--dp", "0.1,x", "--delta", "1e-5"], "--dp must be a number"),
    (["--laplace", "1", "--sample-rate", "0.1", "--delta", "1e-5"], "--sample-rate applies to --gaussian only"),
    (["--dp", "0.1", "--delta", "2"], "--delta must be in (0, 1), got 2"),
    (["--dp", "0.1"], "exactly one of --delta"),
    (["--delta", "1e-5"], "give at least one mechanism"),
])
def test_bad_flags_exit_2(run_cli, args, message):
    r = run_cli("compose", *args)
    assert r.exit_code == 2
    assert r.stderr.startswith("Error: ") and message in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and r.stdout == ""


@pytest.mark.parametrize("name,text,message", [
    ("bad.json", '[{"mechanism": "cauchy", "parameters": {}, "count": 1}]', "unknown mechanism 'cauchy'"),
    ("bad.json", '[{"mechanism": "dp", "parameters": {"epsilon": 1}, "count": -1}]', "count must be a whole number >= 1"),
    ("bad.json", '[{"mechanism": "dp", ', "is not valid JSON"),
    ("bad.toml", "[[mechanisms]\n", "is not valid TOML"),
    ("bad.json", '{"foo": 1}', "non-empty list"),
])
def test_bad_spec_file_exit_2(run_cli, tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text)
    r = run_cli("compose", "--spec", str(path), "--delta", "1e-5")
    assert r.exit_code == 2
    assert r.stderr.startswith("Error: --spec") and message in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_missing_spec_file(run_cli, tmp_path):
    r = run_cli("compose", "--spec", str(tmp_path / "nope.toml"), "--delta", "1e-5")
    assert r.exit_code == 2 and "cannot be read" in r.stderr


def test_table_marks_tightest_and_approx(run_cli):
    r = run_cli("compose", "--gaussian", "4", "--sample-rate", "0.01", "--count", "10000", "--delta", "1e-5",
                "--method", "ma", "--method", "gdp", "--method", "advanced")
    assert r.exit_code == 0, r.stderr
    assert "★ ma" in r.stdout and "approx." in r.stdout


def test_steps_grid_and_plots(run_cli, tmp_path):
    pytest.importorskip("matplotlib")
    png, curve = tmp_path / "steps.png", tmp_path / "curve.png"
    r = run_cli("compose", "--dp", "0.1", "--count", "1000", "--delta", "1e-5", "--steps-grid", "50",
                "--plot", str(png), "--plot-curve", str(curve), "--json", "--method", "basic",
                "--method", "kov", "--method", "optimal", "--method", "gdp")
    assert r.exit_code == 0, r.stderr
    rows = {x["method"]: x for x in r.json()["results"]}
    grid = rows["optimal"]["details"]["grid"]
    assert len(grid["steps"]) == len(grid["epsilon"]) > 30
    assert grid["epsilon"] == sorted(grid["epsilon"])
    assert all(b >= o for b, o in zip(rows["basic"]["details"]["grid"]["epsilon"], grid["epsilon"], strict=True))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and curve.stat().st_size > 1000


def test_long_spec_echo_is_abbreviated(run_cli, tmp_path):
    js = tmp_path / "many.json"
    js.write_text(json.dumps([{"mechanism": "dp", "parameters": {"epsilon": 0.01 + i * 1e-4}, "count": 1}
                              for i in range(40)]))
    r = run_cli("compose", "--spec", str(js), "--delta", "1e-5", "--method", "kov", "--method", "optimal")
    assert r.exit_code == 0, r.stderr
    assert "(40 items in all)" in r.stdout and r.stdout.count("DP(") == 3
    r = run_cli("compose", "--spec", str(js), "--delta", "1e-5", "--method", "kov", "--json")
    assert len(r.json()["inputs"]["mechanisms"]) == 40


def test_group_size_segment_equals_epsilon_group_size(run_cli):
    """compose --gaussian σ -q q --count T --group-size k is the same group-level accounting as
    `dpcalc epsilon --group-size k` (issue 28: group size on compose segments from the command line,
    as spec files already allowed)."""
    comp = run_cli("compose", "--gaussian", "1", "-q", "0.01", "--count", "1000", "--group-size", "4",
                   "--delta", "1e-5", "--method", "pld", "--json").json()
    eps = run_cli("epsilon", "--sigma", "1", "-q", "0.01", "--steps", "1000", "--delta", "1e-5",
                  "--group-size", "4", "--accountant", "pld", "--json").json()
    pld = next(r for r in comp["results"] if r.get("accountant") == "pld")
    assert pld["epsilon"] == eps["results"][0]["epsilon"]
    one = run_cli("compose", "--gaussian", "1", "-q", "0.01", "--count", "1000", "--delta", "1e-5",
                  "--method", "pld", "--json").json()
    assert next(r for r in one["results"] if r.get("accountant") == "pld")["epsilon"] < pld["epsilon"]
    table = run_cli("compose", "--gaussian", "1", "-q", "0.01", "--count", "10", "--group-size", "4", "--dp", "1",
                    "--delta", "1e-5", "--method", "pld").stdout
    assert "group of 4 records on the segments that say so" in " ".join(table.split())


@pytest.mark.parametrize("args,needle", [
    (["--dp", "0.1", "--group-size", "2"], "--group-size applies to --gaussian only"),
    (["--gaussian", "1", "-q", "0.01", "--group-size", "0"], "--group-size"),
    (["--gaussian", "1", "-q", "0.01", "--group-size", "2", "--group-size", "3"], "more than once"),
])
def test_group_size_segment_bad_input(run_cli, args, needle):
    r = run_cli("compose", *args, "--delta", "1e-5")
    assert r.exit_code == 2 and needle in r.one_line_error()
