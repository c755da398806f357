"""``dpcalc ldp`` (issue 27): the calculator, the inverse, --shuffle (the library's FMT21 bound),
the randomize → estimate pipeline through the command line, and bad input (one line, exit 2,
nothing written)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from dpcalc.cli import cli


def run(*args, input=None):  # noqa: A002
    r = CliRunner().invoke(cli, [str(a) for a in args], input=input, prog_name="dpcalc")
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    return r


def one_line_error(r) -> str:
    assert r.exit_code == 2, (r.exit_code, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), r.stderr
    return lines[0]


def test_calculator_table_and_recommendation():
    r = run("ldp", "--eps", "1", "--domain-size", "1024", "--users", "100000", "--json")
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    rows = {x["method"]: x for x in out["results"]}
    assert set(rows) == {"grr", "sue", "oue", "olh", "blh", "hr", "ss", "cms", "hcms"}
    assert sum(x["recommended"] for x in rows.values()) == 1
    # Wang et al. 2017 Eq. (5): OUE's variance 4e^ε/(n(e^ε − 1)²)
    e = np.e
    assert rows["oue"]["variance"] == pytest.approx(4 * e / (1e5 * (e - 1) ** 2), rel=1e-9)
    assert rows["oue"]["bits"] == 1024 and rows["grr"]["bits"] == 10


def test_large_domain_unary_rows_not_applicable():
    r = run("ldp", "--eps", "1", "--domain-size", "1e9", "--users", "1e6", "--json")
    assert r.exit_code == 0, r.stderr
    rows = {x["method"]: x for x in json.loads(r.stdout)["results"]}
    assert rows["oue"]["applicable"] is False and "bits" in rows["oue"]["reason"]
    assert rows["olh"].get("applicable", True) is True and rows["olh"]["variance"] > 0


def test_inverse_meets_the_target():
    r = run("ldp", "--target-se", "0.005", "--domain-size", "1024", "--users", "100000", "--json")
    assert r.exit_code == 0, r.stderr
    for row in json.loads(r.stdout)["results"]:
        if row["epsilon"] is not None:
            assert row["standard_error"] <= 0.005


def test_shuffle_uses_the_library_bound():
    from dpcalc.mechanisms.shuffling import shuffle_numerical

    r = run("ldp", "--eps", "2", "--domain-size", "64", "--users", "100000", "--shuffle", "--delta", "1e-8",
            "--json")
    assert r.exit_code == 0, r.stderr
    row = json.loads(r.stdout)["results"][0]
    assert row["central_epsilon"] == shuffle_numerical(eps0=2.0, n=100000, delta=1e-8)["epsilon"]
    assert row["central_epsilon"] < row["epsilon"]


def test_simulate_is_reproducible():
    args = ("ldp", "--eps", "1", "--domain-size", "64", "--users", "5000", "--simulate", "--seed", "3", "--json")
    a, b = run(*args), run(*args)
    assert a.exit_code == 0, a.stderr
    assert a.stdout == b.stdout
    for row in json.loads(a.stdout)["results"]:
        assert 0.5 < row["simulated_mse"] / row["formula_mean_variance"] < 2.0, row  # 64 categories: ±25 %


@pytest.mark.parametrize(("k", "users", "words"), [
    (2147483646, 1000, "--domain-size must be at most 65,536 with --simulate, got 2147483646"),
    (65536, 100000, "--users must be at most 3,051 with --simulate at --domain-size 65,536"),
])
def test_simulate_refuses_what_it_cannot_hold(k, users, words):
    # found in review: a 10⁶-value domain asked numpy for 488 GiB (a traceback, exit 1)
    r = run("ldp", "--eps", "1", "--domain-size", str(k), "--users", str(users), "--simulate", "--seed", "1")
    assert r.exit_code == 2 and words in one_line_error(r)


def test_rappor_command_reproduces_the_paper():
    r = run("ldp", "rappor", "--f", "0.5", "--p", "0.5", "--q", "0.75", "--hashes", "2", "--json")
    assert r.exit_code == 0, r.stderr
    row = json.loads(r.stdout)["results"][0]
    assert row["epsilon_inf"] == pytest.approx(4 * np.log(3)) and row["epsilon_one"] == pytest.approx(1.0743, abs=1e-4)


@pytest.mark.parametrize("protocol", ["grr", "oue", "olh", "hr", "ss", "hcms", "cms"])
def test_pipeline_round_trip(protocol, tmp_path):
    rng = np.random.default_rng(0)
    k, n = 16, 4000
    x = rng.integers(0, k, n)
    x[: n // 2] = 3
    values = "".join(f"{v}\n" for v in x)
    extra = ["--sketch-width", "16", "--sketch-hashes", "8"] if protocol in ("cms", "hcms") else []
    r = run("ldp", "randomize", "--protocol", protocol, "--eps", "2", "--domain-size", k, "--seed", "5", *extra,
            input=values)
    assert r.exit_code == 0, r.stderr
    assert r.stdout.startswith(f"# dpcalc-ldp protocol={protocol} ")
    assert len(r.stdout.splitlines()) == n + 1
    e = run("ldp", "estimate", "--protocol", protocol, "--eps", "2", "--domain-size", k, *extra, "--project",
            "--json", input=r.stdout)
    assert e.exit_code == 0, e.stderr
    rows = json.loads(e.stdout)["results"]
    assert abs(rows[3]["estimate"] - 0.5 - 0.5 / k) <= 4 * rows[3]["standard_error"] + (0.08 if "cms" in protocol else 0)
    assert sum(row["projected"] for row in rows) == pytest.approx(1.0)


def test_mean_pipeline():
    x = "".join(f"{v}\n" for v in np.linspace(-1, 1, 3001))
    r = run("ldp", "randomize", "--protocol", "piecewise", "--eps", "1", "--seed", "1", input=x)
    assert r.exit_code == 0, r.stderr
    e = run("ldp", "estimate", "--protocol", "piecewise", "--eps", "1", "--json", input=r.stdout)
    assert e.exit_code == 0, e.stderr
    row = json.loads(e.stdout)["results"][0]
    assert abs(row["mean"]) <= 4 * row["standard_error"]


def test_output_file_is_atomic(tmp_path):
    out = tmp_path / "reports.csv"
    r = run("ldp", "randomize", "--protocol", "grr", "--eps", "1", "--domain-size", "4", "--output", out,
            input="0\n1\n2\n")
    assert r.exit_code == 0 and len(out.read_text().splitlines()) == 4
    bad = tmp_path / "bad.csv"
    r = run("ldp", "randomize", "--protocol", "grr", "--eps", "1", "--domain-size", "4", "--output", bad,
            input="0\n1\n" * 100000 + "7\n")
    assert "line 200001" in one_line_error(r) and "[0, 3]" in one_line_error(r)
    assert not bad.exists() and list(tmp_path.iterdir()) == [out]


@pytest.mark.parametrize("args, stdin, needle", [
    (("ldp", "--eps", "0", "--domain-size", "8", "--users", "10"), None, "--eps"),
    (("ldp", "--eps", "1", "--domain-size", "1", "--users", "10"), None, "--domain-size"),
    (("ldp", "--eps", "1", "--domain-size", "8"), None, "--users"),
    (("ldp", "--domain-size", "8", "--users", "10"), None, "--eps"),
    (("ldp", "--eps", "1", "randomize", "--protocol", "grr"), "", "--eps belongs"),
    (("ldp", "randomize", "--protocol", "oue", "--eps", "1", "--domain-size", "1e12"), "1\n", "--domain-size"),
    (("ldp", "randomize", "--protocol", "oue", "--eps", "1", "--domain-size", "1e9"), "1\n",
     "1,000,000,000 bits"),
    (("ldp", "randomize", "--protocol", "grr", "--eps", "1", "--domain-size", "8"), "1\n9\n", "line 2"),
    (("ldp", "randomize", "--protocol", "grr", "--eps", "1", "--domain-size", "8"), "1\nx,2\n", "line 2"),
    (("ldp", "randomize", "--protocol", "grr", "--eps", "1", "--domain-size", "8"), "1\n-1\n", "line 2"),
    (("ldp", "randomize", "--protocol", "grr", "--eps", "1", "--domain-size", "8"), "1\n\n2\n", "line 2"),
    (("ldp", "estimate", "--protocol", "grr", "--eps", "1", "--domain-size", "8"), "1\n", "header"),
    (("ldp", "estimate", "--protocol", "grr", "--eps", "2", "--domain-size", "8"),
     "# dpcalc-ldp protocol=grr epsilon=1.0 domain_size=8\n1\n", "epsilon=1.0"),
    (("ldp", "estimate", "--protocol", "olh", "--eps", "1", "--domain-size", "8"),
     "# dpcalc-ldp protocol=olh epsilon=1.0 domain_size=8\n1,2\n", "line 2"),
    (("ldp", "estimate", "--protocol", "olh", "--eps", "1", "--domain-size", "8"),
     "# dpcalc-ldp protocol=olh epsilon=1.0 domain_size=8\n0,2,1\n", "a must be"),
    (("ldp", "rappor", "--f", "0", "--p", "0.5", "--q", "0.75"), None, "--f"),
    (("ldp", "--eps", "1", "--eps", "2", "--domain-size", "8", "--users", "10"), None, "more than once"),
    (("ldp", "--eps", "1", "--domain-size", "8", "--users", "2e7", "--simulate"), None, "--users"),
    (("ldp", "--eps", "1", "--domain-size", "8", "--users", "10", "--delta", "1e-6"), None, "--delta"),
    (("ldp", "randomize", "--protocol", "grr", "--eps", "1", "--eps", "2", "--domain-size", "8"), "", "more than once"),
    (("ldp", "rappor", "--f", "0.5", "--p", "0.5", "--q", "0.5"), None, "--q"),
])
def test_bad_input_one_line_exit_2(args, stdin, needle):
    import re

    msg = one_line_error(run(*args, input=stdin))
    assert re.search(needle, msg), msg
