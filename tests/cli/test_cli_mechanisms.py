"""CLI of the mechanism calculators: laplace, gaussian, exponential, rr, convert."""

from __future__ import annotations

import math

import pytest


def test_laplace_census(run_cli):
    r = run_cli("laplace", "--eps", "1", "--sensitivity", "1", "--beta", "0.05", "--dims", "10000", "--json")
    assert r.exit_code == 0, r.stderr
    out = r.json()
    res = out["results"][0]
    assert out["command"] == "laplace" and res["method"] == "laplace"
    assert res["scale"] == 1.0
    assert res["accuracy"] == pytest.approx(math.log(10000 / 0.05))  # DR14 Thm 3.8 census example ≈ 12.2


def test_laplace_inverse_and_table(run_cli):
    r = run_cli("laplace", "--accuracy", "12.206072645530174", "--beta", "0.05", "--dims", "10000", "--json")
    assert r.json()["results"][0]["epsilon"] == pytest.approx(1.0)
    t = run_cli("laplace", "--eps", "1", "--beta", "0.05", "--dims", "10000")
    assert t.exit_code == 0 and "12.2061" in t.stdout and "Dwork & Roth" in t.stdout


def test_gaussian_json_contract(run_cli):
    r = run_cli("gaussian", "--eps", "0.5", "--delta", "1e-5", "--sensitivity", "2", "--json")
    assert r.exit_code == 0, r.stderr
    rows = r.json()["results"]
    assert [x["method"] for x in rows] == ["analytic", "classical"]
    for x in rows:
        assert x["noise_multiplier"] == pytest.approx(x["noise_std"] / 2)
    # Dwork–Roth Thm A.1 closed form for the classical row
    assert rows[1]["noise_std"] == pytest.approx(2 * math.sqrt(2 * math.log(1.25e5)) / 0.5)
    assert rows[0]["noise_std"] < rows[1]["noise_std"]


def test_gaussian_reference_and_table(run_cli):
    # docs/references.md: analytic σ = 3.730632 at ε = 1, δ = 1e-5 (Balle & Wang 2018)
    r = run_cli("gaussian", "--eps", "1", "--delta", "1e-5")
    assert r.exit_code == 0 and "3.730632" in r.stdout and "n/a" in r.stdout
    r = run_cli("gaussian", "--eps", "0.5", "--delta", "1e-5", "--beta", "0.05", "--dims", "10")
    # saving of analytic over classical: 1 − 7.031827/9.689611 = 27.4% (σ values from the JSON test's formulas)
    assert "saving vs" in r.stdout and "27.4%" in r.stdout and "ℓ2 α" in r.stdout


def test_gaussian_inverse(run_cli):
    r = run_cli("gaussian", "--accuracy", "10", "--beta", "0.05", "--delta", "1e-5", "--json")
    rows = r.json()["results"]
    assert rows[0]["method"] == "analytic" and rows[0]["epsilon"] < rows[1]["epsilon"] < 1


def test_releases(run_cli):
    r = run_cli("laplace", "--eps", "0.5", "--release", "12.34", "--granularity", "0.01", "--json")
    res = r.json()["results"][0]
    assert res["method"] == "discrete-laplace" and res["sensitivity_units"] == 100
    assert "pure DP" in res["details"]["guarantee"]
    r = run_cli("gaussian", "--eps", "1", "--delta", "1e-5", "--release", "1234")
    assert r.exit_code == 0 and "Guarantee" in r.stdout and "zCDP" in r.stdout


def test_exponential_stdin_and_alignment(run_cli, tmp_path):
    f = tmp_path / "scores.csv"
    f.write_text("low,1\nhigh,3\nmid,2\n")
    r = run_cli("exponential", "--eps", "2", "--scores", str(f), "--json")
    res = r.json()["results"][0]
    p = res["probabilities"]
    z = sum(math.exp(u / 2 * 2) for u in (1, 3, 2))  # exp(ε·u/(2Δu)), ε = 2
    assert p == pytest.approx([math.exp(1) / z, math.exp(3) / z, math.exp(2) / z])
    assert res["labels"] == ["low", "high", "mid"]
    t = run_cli("exponential", "--eps", "2", "--scores", str(f), "--monotonic")
    assert t.exit_code == 0 and "high" in t.stdout


def test_rr(run_cli):
    r = run_cli("rr", "--eps", str(math.log(3)), "--json")
    assert r.json()["results"][0]["p_truth"] == pytest.approx(0.75)  # DR14 §3.2
    t = run_cli("rr", "--eps", "1", "--categories", "3", "--observed", "500,300,200")
    assert t.exit_code == 0 and "estimated frequency" in t.stdout


def test_convert(run_cli):
    r = run_cli("convert", "group", "--eps", "1", "--delta", "1e-6", "--group-size", "4", "--json")
    assert r.json()["results"][0]["delta"] == pytest.approx(1e-6 * (math.e**4 - 1) / (math.e - 1))
    r = run_cli("convert", "subsample", "--eps", "2", "--delta", "1e-5", "-q", "0.01", "--json")
    assert r.json()["results"][0]["epsilon"] == pytest.approx(math.log1p(0.01 * math.expm1(2)))
    r = run_cli("convert", "zcdp", "--eps", "1", "--json")
    assert r.json()["results"][0]["rho"] == 0.5
    r = run_cli("convert", "zcdp", "--rho", "0.5", "--delta", "1e-5")
    assert r.exit_code == 0 and "CKS20" in r.stdout


@pytest.mark.parametrize("args, needle", [
    (("laplace", "--eps", "0"), "--eps must be"),
    (("laplace", "--eps", "-1"), "--eps must be"),
    (("gaussian", "--eps", "1", "--delta", "1.5"), "--delta must be in (0, 1)"),
    (("gaussian", "--eps", "1", "--delta", "0"), "--delta must be in (0, 1)"),
    (("gaussian", "--eps", "2", "--delta", "1e-5", "--method", "classical"), "analytic"),
    (("laplace", "--eps", "1", "--release", "abc"), "--release must be a number"),
    (("laplace", "--eps", "1", "--release", "12.5"), "--granularity"),
    (("gaussian", "--eps", "1", "--delta", "1e-5", "--release", "x"), "--release must be a number"),
    (("rr", "--eps", "1", "--observed", "1,2,3"), "--observed"),
    (("convert", "zcdp", "--rho", "1"), "--delta"),
    (("laplace", "--eps", "1", "--beta", "2"), "--beta"),
])
def test_bad_input_one_line_exit_2(run_cli, args, needle):
    r = run_cli(*args)
    assert r.exit_code == 2
    assert r.stderr.startswith("Error:") and needle in r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert r.stdout == ""


@pytest.mark.parametrize("content, needle", [("", "empty"), ("1\nnan\n", "line 2"), ("1\nabc\n", "line 2")])
def test_bad_scores_file(run_cli, tmp_path, content, needle):
    f = tmp_path / "s.txt"
    f.write_text(content)
    r = run_cli("exponential", "--eps", "1", "--scores", str(f))
    assert r.exit_code == 2 and r.stderr.startswith("Error: --scores") and needle in r.stderr


@pytest.mark.parametrize("cmd", [("laplace",), ("gaussian",), ("exponential",), ("rr",), ("convert",),
                                 ("convert", "group"), ("convert", "subsample"), ("convert", "zcdp")])
def test_help_ends_with_runnable_example(run_cli, cmd):
    r = run_cli(*cmd, "--help")
    assert r.exit_code == 0
    last = r.stdout.rstrip().splitlines()[-1].strip()
    assert last.startswith(("dpcalc ", "printf ")) and "dpcalc" in last


def test_help_examples_run(run_cli):
    # the examples in --help must run (the stdin one is covered by the exponential tests)
    import shlex

    for cmd in ("laplace", "gaussian", "rr"):
        lines = run_cli(cmd, "--help").stdout.splitlines()
        start = next(i for i, x in enumerate(lines) if x.strip().startswith("Example"))
        for line in lines[start + 1:]:
            argv = shlex.split(line.strip())
            assert argv[0] == "dpcalc"
            assert run_cli(*argv[1:]).exit_code == 0, line


def test_calculators_do_not_import_scipy_stats():
    import subprocess
    import sys

    code = ("import sys\nfrom click.testing import CliRunner\nfrom dpcalc.cli import cli\n"
            "for a in (['gaussian','--eps','1','--delta','1e-5','--beta','0.1'],['laplace','--eps','1','--release','3'],"
            "['gaussian','--eps','1','--delta','1e-5','--release','3'],['convert','zcdp','--rho','1','--delta','1e-5'],"
            "['rr','--eps','1']):\n    assert CliRunner().invoke(cli, a).exit_code == 0\n"
            "bad = [m for m in sys.modules if m.startswith(('scipy.stats', 'torch', 'matplotlib'))]\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True)
