"""``dpcalc pate``: tables, JSON contract, files, planning and bad input (one-line errors, exit 2).

Reference values: the JSON numbers are compared with the library path (dpcalc.accounting.pate),
itself checked against mpmath in tests/mechanisms/test_pate.py; the planning inverse is checked
by its defining property (k queries fit, k + 1 do not; the noise found meets the target).
"""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest

from dpcalc.accounting import pate as ap
from dpcalc.mechanisms.pate import pate_votes_event


@pytest.fixture
def votes_csv(tmp_path):
    rng = np.random.default_rng(7)
    v = rng.multinomial(250, rng.dirichlet(np.full(10, 0.2), size=300))
    path = tmp_path / "votes.csv"
    np.savetxt(path, v, fmt="%d", delimiter=",", header=",".join(f"class{i}" for i in range(10)), comments="")
    return path, v


def test_votes_json_contract_and_numbers(run_cli, votes_csv):
    path, v = votes_csv
    r = run_cli("pate", "--mechanism", "gnmax", "--sigma", "40", "--votes", path, "--delta", "1e-5", "--json")
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["command"] == "pate"
    rows = {(x["analysis"], x["method"]): x for x in out["results"]}
    dep = rows[("data-dependent", "rdp")]
    for x in out["results"]:
        assert {"analysis", "mechanism", "queries_answered", "order", "epsilon", "delta", "certified"} <= set(x)
        assert x["mechanism"] == "gnmax" and x["queries_answered"] == 300
    run = ap.PateRun(pate_votes_event(v, mechanism="gnmax", noise=40.0))
    lib = ap.epsilon_of_curve(run.rdp_dependent, delta=1e-5)
    assert dep["epsilon"] == lib.value and dep["order"] == lib.order
    assert dep["epsilon"] <= rows[("data-independent", "rdp")]["epsilon"]
    assert 0 <= dep["details"]["fraction_better"] <= 1
    assert "must not be published" in dep["details"]["warning"] or "do not publish" in dep["details"]["warning"]


def test_table_warns_that_data_dependent_epsilon_leaks(run_cli, votes_csv):
    path, _ = votes_csv
    r = run_cli("pate", "--mechanism", "lnmax", "--scale", "20", "--votes", path, "--delta", "1e-5")
    assert r.exit_code == 0, r.stderr
    text = re.sub(r"\s+", " ", r.stdout)
    assert "do not publish the data-dependent value" in text
    assert "ε₀ = 2/b" in r.stdout


def test_npy_and_csv_without_header_agree(run_cli, votes_csv, tmp_path):
    path, v = votes_csv
    npy = tmp_path / "v.npy"
    np.save(npy, v)
    plain = tmp_path / "plain.csv"
    np.savetxt(plain, v, fmt="%d", delimiter=",")
    outs = [json.loads(run_cli("pate", "--mechanism", "gnmax", "--sigma", "20", "--votes", p, "--eps", "3",
                               "--json").stdout)["results"] for p in (path, npy, plain)]
    assert outs[0] == outs[1] == outs[2]


def test_confident_gnmax_with_answered_file(run_cli, votes_csv, tmp_path):
    path, v = votes_csv
    ans = (np.arange(v.shape[0]) % 2).astype(int)
    af = tmp_path / "ans.csv"
    np.savetxt(af, ans, fmt="%d")
    r = run_cli("pate", "--mechanism", "confident-gnmax", "--threshold", "200", "--sigma1", "150", "--sigma2", "40",
                "--votes", path, "--answered", af, "--delta", "1e-5", "--json")
    assert r.exit_code == 0, r.stderr
    res = json.loads(r.stdout)["results"]
    assert all(x["queries_answered"] == int(ans.sum()) for x in res)
    # without the file every query is counted as answered: never less
    r2 = run_cli("pate", "--mechanism", "confident-gnmax", "--threshold", "200", "--sigma1", "150", "--sigma2", "40",
                 "--votes", path, "--delta", "1e-5", "--json")
    res2 = json.loads(r2.stdout)["results"]
    assert res2[-1]["epsilon"] >= res[-1]["epsilon"] and res2[-1]["queries_answered"] == v.shape[0]


def test_per_query_file_and_plot(run_cli, votes_csv, tmp_path):
    pytest.importorskip("matplotlib")
    path, v = votes_csv
    pq, png = tmp_path / "pq.csv", tmp_path / "cum.png"
    r = run_cli("pate", "--mechanism", "gnmax", "--sigma", "40", "--votes", path, "--delta", "1e-5",
                "--per-query", pq, "--plot", png, "--json")
    assert r.exit_code == 0, r.stderr
    order = json.loads(r.stdout)["results"][-1]["order"]
    table = np.loadtxt(_csv_body(pq)[1][1:], delimiter=",")  # '#' lines, then the column names
    assert table.shape == (v.shape[0], 4)
    run = ap.PateRun(pate_votes_event(v, mechanism="gnmax", noise=40.0))
    dq, iq = run.per_query(order)
    np.testing.assert_array_equal(table[:, 2], dq)
    np.testing.assert_array_equal(table[:, 3], iq)
    assert np.all(table[:, 2] <= table[:, 3])
    assert png.stat().st_size > 1000


def test_data_independent_rows_and_lnmax_composition(run_cli):
    r = run_cli("pate", "--mechanism", "lnmax", "--scale", "20", "--queries", "100", "--delta", "1e-5", "--json")
    assert r.exit_code == 0, r.stderr
    rows = {x["method"]: x for x in json.loads(r.stdout)["results"]}
    assert set(rows) == {"rdp", "pld", "basic", "optimal"}
    assert rows["basic"]["epsilon"] == pytest.approx(100 * 2 / 20, rel=1e-12)  # k·ε₀, ε₀ = 2/b
    assert rows["basic"]["epsilon"] >= 10.0
    assert rows["optimal"]["epsilon"] < rows["basic"]["epsilon"]
    assert all(x["analysis"] == "data-independent" for x in rows.values())


def test_planning_largest_queries_and_smallest_sigma(run_cli):
    r = run_cli("pate", "--mechanism", "gnmax", "--sigma", "40", "--eps", "2", "--delta", "1e-5", "--json")
    assert r.exit_code == 0, r.stderr
    k = json.loads(r.stdout)["results"][0]["details"]["queries"]

    def eps(kk, sigma=40.0):
        return ap.epsilon_of_curve(lambda o: kk * ap.independent_rdp("gnmax", sigma, o), delta=1e-5).value

    assert eps(k) <= 2 < eps(k + 1)
    r = run_cli("pate", "--mechanism", "gnmax", "--queries", "1000", "--eps", "2", "--delta", "1e-5", "--json")
    sigma = json.loads(r.stdout)["results"][0]["details"]["sigma"]
    assert eps(1000, sigma) <= 2 < eps(1000, sigma * (1 - 1e-6))
    r = run_cli("pate", "--mechanism", "gnmax", "--sigma", "0.01", "--eps", "0.1", "--delta", "1e-5")
    assert "Error:" in r.one_line_error(code=1)


@pytest.mark.parametrize(("content", "where"), [
    ("1,2,3\n4,-5,259\n", "row 2, column 2"),
    ("1,2,3\n4,5.5,0.5\n", "row 2, column 2"),
    ("a,b,c\n1,2,3\n4,nan,3\n", "row 2 (line 3), column 2"),
    ("1,2,3\n4,5\n", "row 2, column 3"),
    ("1,2,3\n1,2,2\n", "row 1 sums to 6, row 2 to 5"),
    ("0,0,0\n0,0,0\n", "zero teachers"),
    ("", "empty"),
    ("a,b,c\n", "empty"),
    ("1,x,3\n", "row 1, column 2"),
])
def test_bad_vote_files(run_cli, tmp_path, content, where):
    f = tmp_path / "bad.csv"
    f.write_text(content)
    line = run_cli("pate", "--mechanism", "gnmax", "--sigma", "4", "--votes", f,
                   "--delta", "1e-5").one_line_error()
    assert where in line and "--votes" in line, line


def test_garbage_file_is_refused_fast(run_cli, tmp_path):
    f = tmp_path / "garbage.csv"
    with open(f, "wb") as fh:  # a sparse 1 GB file: zero bytes then random bytes
        fh.write(os.urandom(1 << 16))
        fh.truncate(1 << 30)
    line = run_cli("pate", "--mechanism", "gnmax", "--sigma", "4", "--votes", f,
                   "--delta", "1e-5").one_line_error()
    assert "--votes" in line and "row" in line and "column" in line, line


def test_bad_npy(run_cli, tmp_path):
    f = tmp_path / "v.npy"
    np.save(f, np.array([[1.0, 2.0], [3.0, -1.0]]))
    assert "row 2, column 2" in run_cli("pate", "--mechanism", "gnmax", "--sigma", "4", "--votes", f,
                                        "--delta", "1e-5").one_line_error()
    np.save(f, np.array(["a", "b"]))
    assert "dtype" in run_cli("pate", "--mechanism", "gnmax", "--sigma", "4", "--votes", f,
                              "--delta", "1e-5").one_line_error()


@pytest.mark.parametrize("args", [
    ["--mechanism", "gnmax", "--scale", "3", "--queries", "10", "--delta", "1e-5"],
    ["--mechanism", "gnmax", "--queries", "10", "--delta", "1e-5"],
    ["--mechanism", "lnmax", "--scale", "3", "--delta", "1e-5"],
    ["--mechanism", "gnmax", "--sigma", "3", "--queries", "10"],
    ["--mechanism", "gnmax", "--sigma", "-3", "--queries", "10", "--delta", "1e-5"],
    ["--mechanism", "gnmax", "--sigma", "3", "--queries", "10", "--delta", "1e-5", "--plot", "x.png"],
    ["--mechanism", "gnmax", "--sigma", "3", "--queries", "10", "--delta", "1e-5", "--classes", "1"],
    ["--mechanism", "confident-gnmax", "--sigma1", "3", "--queries", "10", "--delta", "1e-5"],
    ["--mechanism", "gnmax", "--sigma", "3", "--answered-count", "3", "--queries", "10", "--delta", "1e-5"],
])
def test_bad_options(run_cli, args):
    run_cli("pate", *args).one_line_error()


def test_teachers_must_match_votes(run_cli, votes_csv):
    path, _ = votes_csv
    line = run_cli("pate", "--mechanism", "gnmax", "--sigma", "4", "--votes", path, "--delta",
                   "1e-5", "--teachers", "100").one_line_error()
    assert "--teachers" in line and "250" in line


def test_compose_spec_accepts_pate_queries(run_cli, tmp_path):
    """GNMax(σ) composes as the Gaussian mechanism with σ/√2 (L2 sensitivity √2) and LNMax(b) as
    (2/b, 0)-DP in the theorems; with votes only rdp (and ma) answer, with the leak note."""
    spec = tmp_path / "s.json"
    spec.write_text(json.dumps([{"mechanism": "gnmax", "parameters": {"noise_multiplier": 40}, "count": 286},
                                {"mechanism": "lnmax", "parameters": {"scale": 20}, "count": 100}]))
    r = run_cli("compose", "--spec", spec, "--delta", "1e-5", "--json")
    assert r.exit_code == 0, r.stderr
    rows = {x["method"]: x for x in json.loads(r.stdout)["results"]}
    ref = tmp_path / "r.json"
    ref.write_text(json.dumps([{"mechanism": "gaussian", "parameters": {"noise_multiplier": 40 / 2**0.5}, "count": 286},
                               {"mechanism": "dp", "parameters": {"epsilon": 0.1}, "count": 100}]))
    rows_ref = {x["method"]: x for x in json.loads(run_cli("compose", "--spec", ref, "--delta", "1e-5",
                                                           "--json").stdout)["results"]}
    for m in ("basic", "kov", "optimal"):
        assert rows[m]["epsilon"] == pytest.approx(rows_ref[m]["epsilon"], rel=1e-9)
    spec.write_text(json.dumps([{"mechanism": "gnmax", "parameters": {"noise_multiplier": 40, "votes": [250, 0, 0]},
                                 "count": 286}]))
    r = run_cli("compose", "--spec", spec, "--delta", "1e-5")
    assert r.exit_code == 0 and "do not publish" in r.stdout
    spec.write_text(json.dumps([{"mechanism": "gnmax", "parameters": {"noise_multiplier": 40, "votes": [1.5, 0]}}]))
    assert "spec entry 1" in run_cli("compose", "--spec", spec, "--delta", "1e-5").one_line_error()


def test_pate_does_not_import_scipy_or_torch(votes_csv):
    """A calculator command (docs/design.md §2.3): no scipy.stats or torch at run time (pld's Gaussian uses scipy.special)."""
    import subprocess
    import sys

    path, _ = votes_csv
    code = ("import sys\nfrom dpcalc.cli import main\n"
            f"try:\n    main(['pate', '--mechanism', 'gnmax', '--sigma', '40', '--votes', {str(path)!r}, "
            "'--delta', '1e-5'])\nexcept SystemExit:\n    pass\n"
            "print([m for m in ('scipy.stats', 'torch') if m in sys.modules], "
            "file=sys.stderr)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert out.stderr.strip().splitlines()[-1] == "[]", out.stderr


# ---------------------------------------------------------------------------
# --release-epsilon: the private release of the data-dependent ε (2018 App. B–C)
# ---------------------------------------------------------------------------

_RELEASE = ("--release-epsilon", "--order", "10", "--beta", "0.04", "--sigma-ss", "3")


def test_release_epsilon_rows_and_numbers(run_cli, votes_csv):
    """The release rows against the library: the data-dependent RDP at λ plus the GNSS cost
    (2018 Thm 23, checked in mpmath in tests/mechanisms/test_pate_ss.py), converted at λ; the
    released value is R + SS·σ_s·Z with the seeded Z."""
    import random

    from dpcalc.mechanisms import pate as pm
    from dpcalc.mechanisms import pate_ss as ss

    path, v = votes_csv
    args = ("pate", "--mechanism", "gnmax", "--sigma", "40", "--votes", path, "--delta", "1e-5", *_RELEASE)
    r = run_cli(*args, "--seed", "5", "--json")
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    rows = {(x["analysis"], x["method"]): x for x in out["results"]}
    rel = rows[("data-dependent", "released")]
    priv = rows[("data-dependent", "rdp+release")]
    ind = rows[("data-independent", "rdp+release")]
    assert rel["details"]["publish"] == "yes" and ind["details"]["publish"] == "yes"
    assert priv["details"]["publish"] == "no" and rows[("data-dependent", "rdp")]["details"]["publish"] == "no"
    # the released value is a DP release (publishable) but a noisy estimate, not an upper bound;
    # the exact data-dependent total is a number about the votes (issue 32)
    assert rel["certified"] is False and rel["data_dependent"] is False
    assert priv["certified"] is False and priv["data_dependent"] is True
    assert ind["certified"] is True and ind["data_dependent"] is False
    assert rel["order"] == priv["order"] == 10.0
    lq = pm.log_q_gnmax(v.astype(float), 40.0)
    r_dep = float(np.sum(ss.gnmax_rdp_of_logq(lq, 40.0, 10.0))) * (1 + 1e-12)  # as released (rounded up)
    sens = ss.smooth_sensitivity_gnmax(lq, sigma=40.0, order=10.0, m=10, n=250, beta=0.04)
    cost = ss.rdp_gnss(0.04, 3.0, 10.0)
    assert priv["details"]["smooth_sensitivity_private"] == sens
    z = random.Random(5).gauss(0.0, 1.0)
    assert rel["details"]["rdp_released"] == pytest.approx(r_dep + sens * 3.0 * z, rel=1e-12)
    conv = ap.epsilon_of_curve(lambda o: np.full(np.shape(o), r_dep + cost), delta=1e-5,
                               orders=np.array([10.0])).value
    assert priv["epsilon"] == pytest.approx(conv, rel=1e-12) and priv["epsilon"] >= conv
    assert ind["epsilon"] > priv["epsilon"]  # the data-dependent bound beats λ/σ² per query here
    # same seed, same output; the table labels what may be published
    assert run_cli(*args, "--seed", "5", "--json").stdout == r.stdout
    t = run_cli(*args)
    assert t.exit_code == 0 and "publish" in t.stdout and "do not publish" in re.sub(r"\s+", " ", t.stdout)


@pytest.mark.parametrize("extra,word", [
    (("--mechanism", "lnmax", "--scale", "20", *_RELEASE), "gnmax only"),
    (("--mechanism", "gnmax", "--sigma", "40", "--release-epsilon", "--beta", "0.04", "--sigma-ss", "3"), "--order"),
    (("--mechanism", "gnmax", "--sigma", "40", "--release-epsilon", "--order", "10", "--sigma-ss", "3"), "--beta"),
    (("--mechanism", "gnmax", "--sigma", "40", "--release-epsilon", "--order", "10", "--beta", "0.05",
      "--sigma-ss", "3"), "1/(2·--beta)"),
    (("--mechanism", "gnmax", "--sigma", "40", "--beta", "0.04"), "only with --release-epsilon"),
    (("--mechanism", "gnmax", "--sigma", "40", *_RELEASE, "--sigma-ss", "0"), "--sigma-ss"),
    (("--mechanism", "gnmax", "--sigma", "40", "--release-epsilon", "--order", "1", "--beta", "0.04",
      "--sigma-ss", "3"), "--order"),
])
def test_release_bad_input(run_cli, votes_csv, extra, word):
    path, _ = votes_csv
    msg = run_cli("pate", "--votes", path, "--delta", "1e-5", *extra).one_line_error()
    assert word in msg


def test_release_needs_votes_and_delta(run_cli, votes_csv):
    path, _ = votes_csv
    assert "--votes" in run_cli("pate", "--mechanism", "gnmax", "--sigma", "40", "--queries", "10",
                                "--delta", "1e-5", *_RELEASE).one_line_error()
    assert "--delta" in run_cli("pate", "--mechanism", "gnmax", "--sigma", "40", "--votes", path,
                                "--eps", "1", *_RELEASE).one_line_error()


def test_release_epsilon_with_ledger_is_refused(run_cli, tmp_path):
    """The ledger cannot record the smooth-sensitivity release's cost (an RDP at one order): the
    combination is refused before anything is read or written (exit 2, one line)."""
    db = tmp_path / "l.db"
    r = run_cli("pate", "--mechanism", "gnmax", "--sigma", "40", "--votes", "docs/examples/pate_votes.csv",
                "--delta", "1e-5", "--release-epsilon", "--order", "10", "--beta", "0.04", "--sigma-ss", "3",
                "--ledger", str(db), "--dataset", "d")
    assert r.exit_code == 2
    assert r.stderr.count("\n") == 1 and "--release-epsilon with --ledger" in r.stderr
    assert not db.exists()


# ---------------------------------------------------------------------------
# issue 32: data-dependent rows are numbers about the votes, not a certified guarantee
# ---------------------------------------------------------------------------

def _csv_body(path) -> tuple[list[str], list[str]]:
    """(comment lines, the other lines) of a --per-query file, as a CSV reader that skips '#'
    lines (pandas ``comment='#'``, numpy's default) sees them."""
    lines = path.read_text().splitlines()
    return [ln for ln in lines if ln.startswith("#")], [ln for ln in lines if not ln.startswith("#")]


@pytest.mark.parametrize("mechanism", [("gnmax", "--sigma", "40"), ("lnmax", "--scale", "20"),
                                       ("confident-gnmax", "--threshold", "200", "--sigma1", "150",
                                        "--sigma2", "40")])
def test_data_dependent_rows_are_not_certified(run_cli, votes_csv, mechanism):
    """Every row computed from the votes says so (``data_dependent: true``) and is not a
    certified (publishable) upper bound; every data-independent row is, as before."""
    path, _ = votes_csv
    args = ("pate", "--mechanism", *mechanism, "--votes", path, "--delta", "1e-5")
    r = run_cli(*args, "--json")
    assert r.exit_code == 0, r.stderr
    res = r.json()["results"]
    assert {x["analysis"] for x in res} == {"data-independent", "data-dependent"}
    for x in res:
        dep = x["analysis"] == "data-dependent"
        assert x["data_dependent"] is dep, x
        assert x["certified"] is (not dep), x
    t = run_cli(*args)
    assert t.exit_code == 0, t.stderr
    (line,) = [ln for ln in t.stdout.splitlines() if "data-dep" in ln and "│" in ln]
    assert "data-dep., not certified" in line
    assert t.stdout.count("not certified") >= 1


def test_data_independent_and_planning_rows_stay_certified(run_cli):
    for args in (("--sigma", "40", "--queries", "100", "--delta", "1e-5"),
                 ("--sigma", "40", "--eps", "2", "--delta", "1e-5")):
        r = run_cli("pate", "--mechanism", "gnmax", *args, "--json")
        assert r.exit_code == 0, r.stderr
        for x in r.json()["results"]:
            assert x["certified"] is True and x["data_dependent"] is False


def test_per_query_csv_header_warns(run_cli, votes_csv, tmp_path):
    """The --per-query file carries the same warning as a '#' comment line before the column
    names (the file already began with one: readers that skip comment lines read it unchanged)."""
    path, v = votes_csv
    pq = tmp_path / "pq.csv"
    r = run_cli("pate", "--mechanism", "gnmax", "--sigma", "40", "--votes", path, "--delta", "1e-5",
                "--per-query", pq)
    assert r.exit_code == 0, r.stderr
    comments, body = _csv_body(pq)
    assert pq.read_text().startswith("#")
    warn = " ".join(comments)
    assert "data-dependent" in warn and "not certified" in warn and "do not publish" in warn
    assert body[0] == "query,answered,rdp_data_dependent,rdp_data_independent"
    assert np.loadtxt(body[1:], delimiter=",").shape == (v.shape[0], 4)
    try:  # pandas is not a dependency; where installed, its comment-skipping reader reads the file as is
        import pandas as pd
    except ImportError:
        return
    frame = pd.read_csv(pq, comment="#")
    assert list(frame.columns) == body[0].split(",") and len(frame) == v.shape[0]


# ---------------------------------------------------------------------------
# issue 33: read errors, ignored options, outputs validated before the ledger is charged
# ---------------------------------------------------------------------------

@pytest.mark.skipif(not os.path.exists("/proc/self/mem"), reason="needs Linux /proc")
@pytest.mark.parametrize("option", ["--votes", "--answered"])
def test_read_error_is_one_line(run_cli, votes_csv, option):
    """/proc/self/mem is a 'regular file' whose read fails (EIO): one line naming the option."""
    path, _ = votes_csv
    files = {"--votes": path, "--answered": None}
    files[option] = "/proc/self/mem"
    args = ["pate", "--mechanism", "confident-gnmax", "--threshold", "200", "--sigma1", "150", "--sigma2", "40",
            "--votes", files["--votes"], "--delta", "1e-5"]
    if files["--answered"] is not None:
        args += ["--answered", files["--answered"]]
    line = run_cli(*args).one_line_error()
    assert option in line and "/proc/self/mem" in line and "cannot be read" in line, line


def test_eps_with_delta_is_refused_when_nothing_is_planned(run_cli):
    """--queries and the noise given: --delta prints ε, --eps prints δ; both is a contradiction
    (--eps used to be dropped silently), not a planning request."""
    base = ("pate", "--mechanism", "gnmax", "--sigma", "40", "--queries", "10")
    line = run_cli(*base, "--eps", "1", "--delta", "1e-5").one_line_error()
    assert "--eps" in line and "--delta" in line, line
    assert run_cli(*base, "--eps", "1").exit_code == 0
    assert run_cli(*base, "--delta", "1e-5").exit_code == 0
    line = run_cli("pate", "--mechanism", "lnmax", "--scale", "20", "--queries", "10", "--eps", "1",
                   "--delta", "1e-5").one_line_error()
    assert "--eps" in line


@pytest.mark.parametrize("extra,flag", [
    (("--mechanism", "confident-gnmax", "--sigma1", "150", "--sigma2", "40", "--answered-count", "5"),
     "--answered-count"),
    (("--mechanism", "gnmax", "--sigma", "40", "--teachers", "250"), "--teachers"),
    (("--mechanism", "gnmax", "--queries", "100", "--classes", "10"), "--classes"),
])
def test_planning_refuses_options_it_does_not_use(run_cli, extra, flag):
    line = run_cli("pate", *extra, "--eps", "2", "--delta", "1e-5").one_line_error()
    assert flag in line and "plan" in line, line
