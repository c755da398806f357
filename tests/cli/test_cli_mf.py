"""``dpcalc mf``: the table and JSON contract, and every bad input refused in one line (exit 2)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpcalc.mechanisms.gaussian import analytic_noise_std


def test_mf_json_contract(run_cli):
    r = run_cli("mf", "--strategy", "banded:4", "--steps", "400", "--epochs", "4", "--eps", "2",
                "--delta", "1e-5", "--no-poisson", "--json")
    assert r.exit_code == 0, r.stderr
    out = r.json()
    assert out["command"] == "mf"
    rows = out["results"]
    assert [x["method"] for x in rows] == ["banded:4", "dp-sgd"]
    sigma = analytic_noise_std(epsilon=2, delta=1e-5)
    for x in rows:
        assert x["certified"] and x["epsilon"] == 2 and x["noise_multiplier"] == sigma
        assert x["sensitivity_exact"]
        assert x["noise_std"] == pytest.approx(sigma * x["sensitivity"])
    assert rows[1]["sensitivity"] == pytest.approx(2.0)  # √k, C = I
    assert rows[1]["rmse"] == pytest.approx(2 * sigma * math.sqrt(401 / 2))
    assert rows[0]["rmse"] < rows[1]["rmse"]
    assert "Thm 2" in rows[0]["details"]["sensitivity"]["method"]


def test_mf_sigma_mode_and_table(run_cli):
    r = run_cli("mf", "--strategy", "tree-honaker", "--steps", "1024", "--sigma", "5", "--delta", "1e-5",
                "--no-poisson")
    assert r.exit_code == 0, r.stderr
    assert "tree-honaker" in r.stdout and "exact" in r.stdout and "Honaker" in r.stdout
    j = run_cli("mf", "--strategy", "tree", "--steps", "1024", "--sigma", "5", "--delta", "1e-5",
                "--no-poisson", "--json").json()["results"]
    assert j[0]["sensitivity"] == pytest.approx(math.sqrt(11))  # ⌊log₂ 1024⌋ + 1 levels
    assert j[1]["epsilon"] == j[0]["epsilon"]  # the DP-SGD row at the same ε


def test_mf_poisson_rows(run_cli):
    r = run_cli("mf", "--strategy", "banded:4", "--steps", "400", "--epochs", "4", "--eps", "2",
                "--delta", "1e-5", "--json")
    assert r.exit_code == 0, r.stderr
    rows = r.json()["results"]
    assert [x["method"] for x in rows] == ["banded:4", "dp-sgd", "dp-sgd poisson", "banded:4 amplified"]
    for x in rows[2:]:
        assert x["certified"] and x["epsilon"] <= 2
    assert rows[2]["details"]["sample_rate"] == pytest.approx(4 / 400)
    assert rows[3]["details"]["sample_rate"] == pytest.approx(4 / 400 * 4)


def test_mf_optimize(run_cli):
    r = run_cli("mf", "--optimize", "banded", "--bands", "8", "--steps", "500", "--epochs", "2", "--eps", "2",
                "--delta", "1e-5", "--no-poisson", "--json")
    assert r.exit_code == 0, r.stderr
    opt = r.json()["results"][0]
    base = run_cli("mf", "--strategy", "banded:8", "--steps", "500", "--epochs", "2", "--eps", "2",
                   "--delta", "1e-5", "--no-poisson", "--json").json()["results"][0]
    assert opt["method"] == "banded:8 (optimized)" and opt["rmse"] < base["rmse"]


def test_mf_dense_file(run_cli, tmp_path):
    c = np.tril(np.ones((16, 16))) * 0.5 + 0.5 * np.eye(16)
    path = tmp_path / "c.npy"
    np.save(path, c)
    r = run_cli("mf", "--strategy", f"dense:{path}", "--steps", "16", "--eps", "1", "--delta", "1e-5",
                "--no-poisson", "--json")
    assert r.exit_code == 0, r.stderr
    row = r.json()["results"][0]
    assert row["sensitivity"] == pytest.approx(np.linalg.norm(c[:, 0]))


def _npy(tmp_path, name, array):
    path = tmp_path / name
    np.save(path, array)
    return str(path)


def _huge_header(tmp_path):
    # a 40 kB file whose header declares a 40000×40000 float64 matrix (12.8 GB)
    path = tmp_path / "huge.npy"
    with open(path, "wb") as fh:
        np.lib.format.write_array_header_1_0(fh, {"descr": "<f8", "fortran_order": False,
                                                  "shape": (40000, 40000)})
        fh.write(b"\0" * 40000)
    return str(path)


BAD = [
    (["--strategy", "dense:{nonsquare}", "--steps", "4"], "square"),
    (["--strategy", "dense:{upper}", "--steps", "4"], "lower-triangular"),
    (["--strategy", "dense:{nan}", "--steps", "4"], "finite"),
    (["--strategy", "dense:{huge}", "--steps", "4"], "40000"),
    (["--strategy", "dense:{objects}", "--steps", "4"], "dtype"),
    (["--strategy", "dense:{missing}", "--steps", "4"], "--strategy"),
    (["--strategy", "dense:{square}", "--steps", "5"], "--steps must equal"),
    (["--strategy", "sqrt", "--steps", "10", "--epochs", "2", "--min-separation", "11"], "--min-separation"),
    (["--strategy", "sqrt", "--steps", "10", "--epochs", "3", "--min-separation", "4"], "epochs·min_separation"),
    (["--strategy", "banded:11", "--steps", "10"], "banded:B needs B in [1, steps = 10]"),
    (["--strategy", "banded:x", "--steps", "10"], "--strategy"),
    (["--strategy", "wavelet", "--steps", "10"], "--strategy must be one of"),
    (["--strategy", "blt:0.9/0.1,0.2", "--steps", "10"], "as many BLT scales"),
    (["--strategy", "blt:1.5/0.1", "--steps", "10"], "[0, 1]"),
    (["--strategy", "tree", "--steps", "10", "--epochs", "3", "--min-separation", "3"], "divisor"),
    (["--strategy", "sqrt", "--steps", "0"], "--steps"),
    (["--strategy", "sqrt", "--optimize", "banded", "--bands", "2", "--steps", "10"], "exactly one"),
    (["--optimize", "banded", "--bands", "20", "--steps", "10"], "--bands"),
]


@pytest.mark.parametrize("args, text", BAD)
@pytest.mark.parametrize("privacy", [["--eps", "1"], ["--sigma", "2"]])
def test_mf_bad_input_one_line(run_cli, tmp_path, args, text, privacy):
    files = {
        "nonsquare": _npy(tmp_path, "ns.npy", np.ones((4, 3))),
        "upper": _npy(tmp_path, "up.npy", np.triu(np.ones((4, 4)))),
        "nan": _npy(tmp_path, "nan.npy", np.where(np.eye(4) > 0, np.nan, 0.0)),
        "huge": _huge_header(tmp_path),
        "objects": _npy(tmp_path, "obj.npy", np.array([[1 + 2j, 0], [0, 1]])),
        "missing": str(tmp_path / "absent.npy"),
        "square": _npy(tmp_path, "sq.npy", np.eye(4)),
    }
    argv = [a.format(**files) for a in args]
    r = run_cli("mf", *argv, *privacy, "--delta", "1e-5", "--no-poisson")
    line = r.one_line_error(2)
    assert text in line, line


def test_mf_needs_sigma_or_eps(run_cli):
    r = run_cli("mf", "--strategy", "sqrt", "--steps", "10", "--delta", "1e-5")
    assert "exactly one of --sigma and --eps" in r.one_line_error(2)


def _guide_examples():
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "how-to" / "correlated-noise.md").read_text("utf-8")
    pairs = []
    for block in re.findall(r"^```console\n(.*?)^```", text, flags=re.S | re.M):
        first, _, rest = block.partition("\n")
        if first.startswith("$ dpcalc train ") and not rest.startswith("Error:"):
            continue  # a training run's pasted output (needs the data set and minutes): not re-run here
        assert first.startswith(("$ dpcalc mf ", "$ dpcalc train "))
        pairs.append((first[2:], rest.rstrip("\n")))
    return pairs


@pytest.mark.parametrize("command, pasted", _guide_examples(), ids=[c for c, _ in _guide_examples()])
def test_user_guide_examples_print_what_is_pasted(run_cli, command, pasted):
    # docs/how-to/correlated-noise.md: each example's output, pasted from a real run
    import shlex

    r = run_cli(*shlex.split(command)[1:])
    if pasted.startswith("Error:"):
        assert r.one_line_error(2) == pasted
    else:
        assert r.exit_code == 0, r.stderr
        def lines(text):  # trailing spaces are not part of the page (editors and scripts strip them)
            return [line.rstrip() for line in text.rstrip("\n").splitlines()]

        assert lines(r.stdout) == lines(pasted)


HOSTILE = ["0", "-1", "1e308", "-1e308", "5e-324", "nan", "inf", "1_0", "١", "", "0.5", "3", "1e6", "1e-300"]


@pytest.mark.parametrize("flag", ["--steps", "--epochs", "--min-separation", "--sigma", "--delta",
                                  "--sample-rate", "--bands"])
@pytest.mark.parametrize("value", HOSTILE)
def test_mf_hostile_numbers_answer_or_refuse_in_one_line(run_cli, flag, value):
    # whatever is typed: an answer (exit 0, strict JSON) or one line (exit 1 or 2), no traceback
    base = {"--steps": "64", "--epochs": "2", "--sigma": "2", "--delta": "1e-5", "--sample-rate": "0.05"}
    if flag == "--bands":
        args = ["--optimize", "banded", "--bands", value]
    else:
        args = ["--strategy", "banded:4"]
    opts = {**base, flag: value} if flag != "--bands" else base
    argv = [*args, *[x for kv in opts.items() for x in kv], "--no-poisson", "--json"]
    r = run_cli("mf", *argv)
    if r.exit_code == 0:
        import json

        json.loads(r.stdout, parse_constant=lambda c: pytest.fail(f"non-strict JSON {c}"))
    else:
        r.one_line_error(r.exit_code)
        assert r.exit_code in (1, 2)


@pytest.mark.parametrize("sigma", ["1e8", "1e-3"])
def test_mf_comparison_outside_the_calibrated_range_is_not_applicable(run_cli, sigma):
    # σ = 1e8 gives ε = 0, σ = 1e-3 gives ε ≈ 5e5: nothing to calibrate DP-SGD to, said so
    r = run_cli("mf", "--strategy", "sqrt", "--steps", "100", "--sigma", sigma, "--delta", "1e-5", "--json")
    assert r.exit_code == 0 and r.stderr == ""
    rows = r.json()["results"]
    assert rows[0]["certified"] and [x.get("applicable") for x in rows[1:]] == [False, False]
    assert "outside (0, 10000]" in rows[1]["reason"]
