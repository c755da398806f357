"""Issue 17, compose items: hostile or extreme input gets a one-line error (exit 2), a
not-applicable row, or an explained exit 1 — never a traceback, a hang or a silent drop."""

from __future__ import annotations

import json
import os
import time

import pytest

from dpcalc.composition.compose import compose
from dpcalc.composition.spec import MechanismSpec


def test_zero_epsilon_with_huge_count_is_zero(run_cli):
    # (0, 0)-DP mechanisms compose to (0, 0): every theorem gives ε = 0 (was ZeroDivisionError)
    r = run_cli("compose", "--dp", "0", "--count", "1e12", "--delta", "1e-5", "--json")
    assert r.exit_code == 0, r.stderr
    rows = {x["method"]: x for x in r.json()["results"]}
    assert rows["optimal"]["epsilon"] == 0.0 and rows["basic"]["epsilon"] == 0.0


def test_count_too_large_for_one_method_drops_that_row_only(run_cli):
    # optimal's numeric grid cannot hold 10⁹ × ε = 0.001; the other rows stay
    r = run_cli("compose", "--dp", "0.001", "--count", "1e9", "--delta", "1e-5", "--json")
    assert r.exit_code == 0, r.stderr
    rows = {x["method"]: x for x in r.json()["results"]}
    assert rows["optimal"]["applicable"] is False and "numeric grid" in rows["optimal"]["reason"]
    assert rows["optimal"]["certified"] is False
    assert rows["kov"]["epsilon"] > 0 and rows["basic"]["epsilon"] == pytest.approx(1e6)


def test_forty_item_spec_in_delta_mode(run_cli, tmp_path):
    # 40 distinct ε_i, 10⁶ runs each: optimal's numeric grid would need > 2^23 points — that
    # row is dropped with the reason, the command still answers (was: the whole command failed)
    js = tmp_path / "s40.json"
    js.write_text(json.dumps([{"mechanism": "dp", "parameters": {"epsilon": 0.001 + i * 1e-5}, "count": 10**6}
                              for i in range(40)]))
    r = run_cli("compose", "--spec", str(js), "--eps", "1.5", "--json")
    assert r.exit_code == 0, r.stderr
    rows = {x["method"]: x for x in r.json()["results"]}
    assert rows["optimal"]["applicable"] is False and "numeric grid" in rows["optimal"]["reason"]
    assert rows["basic"]["delta"] == 1.0  # Σε_i = 40·10⁶·0.0012 ≫ 1.5 (DR14 Thm 3.16 gives nothing)
    assert 0 < rows["rdp"]["delta"] < 1


def test_small_sample_rate_is_not_blamed_on_delta(run_cli):
    # q = 1e-7 makes the per-step δ₀ budget exceed 1; it must be capped, not refused
    r = run_cli("compose", "--gaussian", "2", "--sample-rate", "1e-7", "--count", "10", "--delta", "1e-5", "--json")
    assert r.exit_code == 0, r.stderr
    assert all(x["epsilon"] >= 0 for x in r.json()["results"] if x.get("applicable", True))


def test_no_usable_answer_exits_1_with_the_reasons(run_cli):
    # Σδ_i = 1e6·1e-10 = 1e-4 > 1e-5: no theorem applies; no accountant handles δ_i > 0
    err = run_cli("compose", "--dp", "0.01,1e-10", "--count", "1e6", "--delta", "1e-5").one_line_error(code=1)
    assert "no method gives a usable bound" in err and "already exceed the target" in err


def test_attached_option_values_are_honoured(run_cli):
    a = run_cli("compose", "--gaussian", "2", "-q0.01", "--count=100", "--delta", "1e-5", "--method", "rdp", "--json")
    b = run_cli("compose", "--gaussian", "2", "-q", "0.01", "--count", "100", "--delta", "1e-5", "--method", "rdp",
                "--json")
    assert a.exit_code == 0, a.stderr
    assert a.json()["inputs"] == b.json()["inputs"]
    assert a.json()["results"][0]["epsilon"] == b.json()["results"][0]["epsilon"] < 1  # sampled, not 33


@pytest.mark.parametrize("content,message", [
    ('[{"mechanism": ["dp"]}]', "unknown mechanism"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ('[{"mechanism": "dp", "parameters": {"epsilon": 0.1}, "count": 1e30}]', "count must be a whole number in [1, "),
    ('[{"mechanism": "dp", "parameters": {"epsilon": "x"}, "count": 1}]', "epsilon"),
    ('{"mechanisms": 5}', "non-empty list"),
])
def test_bad_spec_shapes(run_cli, tmp_path, content, message):
    p = tmp_path / "s.json"
    p.write_text(content)
    assert message in run_cli("compose", "--spec", str(p), "--delta", "1e-5").one_line_error()


def test_spec_refuses_non_regular_and_oversized_files(run_cli, tmp_path, monkeypatch):
    assert "not a regular file" in run_cli("compose", "--spec", "/dev/zero", "--delta", "1e-5").one_line_error()
    assert "not a regular file" in run_cli("compose", "--spec", str(tmp_path), "--delta", "1e-5").one_line_error()
    from dpcalc.cli import compose as cli_compose

    monkeypatch.setattr(cli_compose, "SPEC_MAX_BYTES", 10)
    p = tmp_path / "s.json"
    p.write_text('[{"mechanism": "dp", "parameters": {"epsilon": 0.1}, "count": 1}]')
    assert "too large" in run_cli("compose", "--spec", str(p), "--delta", "1e-5").one_line_error()


def test_identical_spec_items_are_merged_fast(run_cli, tmp_path):
    p = tmp_path / "many.json"
    p.write_text(json.dumps([{"mechanism": "dp", "parameters": {"epsilon": 0.1}, "count": 1}] * 200_000))
    t = time.perf_counter()
    r = run_cli("compose", "--spec", str(p), "--delta", "1e-5", "--json", "--method", "optimal", "--method", "basic")
    took = time.perf_counter() - t
    assert r.exit_code == 0, r.stderr
    assert r.json()["inputs"]["mechanisms"] == [{"mechanism": "dp", "count": 200_000, "epsilon": 0.1, "delta": 0.0}]
    ref = run_cli("compose", "--dp", "0.1", "--count", "200000", "--delta", "1e-5", "--json", "--method", "optimal",
                  "--method", "basic")
    assert r.json()["results"] == ref.json()["results"]
    assert took < 10  # was > 20 s for 100k items (one item each); merged: the cost of --count


def test_steps_grid_is_capped_and_says_so(run_cli):
    t = time.perf_counter()
    r = run_cli("compose", "--dp", "0.1", "--count", "1e6", "--delta", "1e-5", "--steps-grid", "100000",
                "--method", "kov", "--method", "rdp")
    assert r.exit_code == 0, r.stderr
    assert "capped at 1,000 points" in r.stdout and time.perf_counter() - t < 20
    rep = compose([MechanismSpec("dp", 10**6, epsilon=0.1)], delta=1e-5, methods=("kov",), steps_grid=10**9)
    assert rep.inputs["steps_grid"] == 1000 and len(rep.results[0].details["grid"]["steps"]) <= 1000


@pytest.mark.parametrize("target,message", [
    ("", "empty path"),
    ("{tmp}/missing/x.png", "does not exist"),
    ("{file}/x.png", "is not a directory"),
    ("{fifo}", "not a regular file"),  # a non-regular node (never a real device: tests may run as root)
    ("{tmp}", "not a regular file"),
])
def test_plot_targets_are_checked_before_any_work(run_cli, tmp_path, target, message):
    f = tmp_path / "a.txt"
    f.write_text("x")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    path = target.format(tmp=tmp_path, file=f, fifo=fifo)
    for opt in ("--plot", "--plot-curve"):
        assert message in run_cli("compose", "--dp", "0.1", "--delta", "1e-5", opt, path).one_line_error()


def test_plot_respects_the_umask(run_cli, tmp_path):
    pytest.importorskip("matplotlib")
    old = os.umask(0o027)
    try:
        png = tmp_path / "p.png"
        r = run_cli("compose", "--dp", "0.1", "--count", "10", "--delta", "1e-5", "--method", "basic", "--plot", str(png))
    finally:
        os.umask(old)
    assert r.exit_code == 0, r.stderr
    assert (png.stat().st_mode & 0o777) == 0o640  # 0666 & ~0027, not mkstemp's 0600


# ---- issue 33: integers of thousands of digits in a spec ---------------------------------------

@pytest.mark.parametrize("toml", [False, True])
@pytest.mark.parametrize("digits", [400, 5000])
def test_spec_count_of_thousands_of_digits_is_one_short_line(toml, digits):
    from dpcalc.composition.spec import parse_spec_text
    from dpcalc.errors import ParameterError

    big = "9" * digits
    text = (f'[[mechanisms]]\nmechanism = "laplace"\ncount = {big}\n[mechanisms.parameters]\nepsilon = 1\n'
            if toml else f'[{{"mechanism": "laplace", "count": {big}, "parameters": {{"epsilon": 1}}}}]')
    with pytest.raises(ParameterError) as e:
        parse_spec_text(text.encode(), name="s", toml=toml)
    assert len(str(e.value)) < 200 and "\n" not in str(e.value), str(e.value)


def test_error_values_shown_short():
    from dpcalc.errors import ParameterError

    assert "about 401 digits" in str(ParameterError("count", "at most 1e15", 10**400))
    assert "about 5,001 digits" in str(ParameterError("count", "at most 1e15", 10**5000))
    assert len(str(ParameterError("label", "a column", "x" * 10_000))) < 150
    assert str(ParameterError("delta", "in (0, 1)", 1.5)) == "delta must be in (0, 1), got 1.5"
