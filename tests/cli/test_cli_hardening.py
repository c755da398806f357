"""Hostile and extreme inputs of the calculator commands (issue 17): each case here failed
before the fix (a traceback, a silently wrong or misleading answer, an unbounded read, a
slow start-up) and now gets a result or a one-line error with the right exit status."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys

import pytest

from dpcalc.results import AccountingResult

SAMPLED = ["-q", "0.001", "--steps", "1000"]


def _strict(text: str) -> dict:
    def refuse(name):
        raise ValueError(name)
    return json.loads(text, parse_constant=refuse)


# ---- 1. one accountant failing never loses the table ---------------------------------------

def test_all_accountants_survive_an_overflowing_row(run_cli):
    # σ = 0.05: the GDP μ is ~1e85 and its δ(ε) used to overflow in log space (OverflowError)
    r = run_cli("epsilon", "--sigma", "0.05", *SAMPLED, "--delta", "1e-5", "--json")
    assert r.exit_code == 0, r.stderr
    rows = {row["accountant"]: row for row in _strict(r.stdout)["results"]}
    from dpcalc.accounting.registry import available

    assert set(rows) == set(available())
    for row in rows.values():
        assert row["epsilon"] is not None or row.get("reason"), row
    assert rows["gdp"]["certified"] is False
    # certified accountants at this σ: ε is large (one step alone is ~ln(1 + q(e^{1/σ²}... )))
    assert rows["pld"]["epsilon"] > 100 and rows["rdp"]["epsilon"] >= rows["pld"]["epsilon"]


def test_gdp_unbounded_mu_is_reported_not_raised():
    # σ = 0.01: e^{1/σ²} = e^{10000} overflows math.expm1 (OverflowError before)
    from dpcalc.accounting.dpsgd import delta_by_accountant, epsilon_by_accountant
    from dpcalc.schedule import resolve_schedule

    sched = resolve_schedule(sample_rate=0.001, steps=1000)
    rows = {r.accountant: r for r in epsilon_by_accountant(
        noise_multiplier=0.01, schedule=sched, delta=1e-5, accountants=["gdp", "rdp"])}
    assert math.isinf(rows["gdp"].epsilon) and "unbounded" in rows["gdp"].reason
    rows = {r.accountant: r for r in delta_by_accountant(
        noise_multiplier=0.01, schedule=sched, epsilon=1.0, accountants=["gdp"])}
    assert rows["gdp"].delta == 1.0  # μ = ∞: δ(ε) = Φ(∞) − e^ε·Φ(−∞) = 1


def test_gaussian_epsilon_large_mu():
    from dpcalc.mechanisms.gaussian import gaussian_epsilon

    # μ = 1e100 overflowed exp(ln(e^ε − 1) + ln Φ(b)) before. For large μ, δ(ε) ≈ Φ(μ/2 − ε/μ),
    # so ε ≈ μ²/2 − μ·Φ⁻¹(δ) (DRS 2019 Cor 2.13), = μ²/2 to double precision here.
    assert gaussian_epsilon(delta=1e-5, mu=1e100) == pytest.approx(0.5e200, rel=1e-12)
    # μ = 1e3: the same closed form to first order; Φ⁻¹(1e-5) = −4.264890793922825 (mpmath)
    assert gaussian_epsilon(delta=1e-5, mu=1e3) == pytest.approx(0.5e6 + 4.264890793922825e3, rel=1e-5)
    # beyond the largest double: honestly unbounded, never 0
    assert gaussian_epsilon(delta=1e-5, mu=1e160) == math.inf


def test_failing_row_becomes_not_applicable(monkeypatch):
    from dpcalc.accounting import dpsgd
    from dpcalc.accounting.rdp import RdpAccountant

    def boom(self, event, *, delta):
        raise OverflowError("math range error")

    monkeypatch.setattr(RdpAccountant, "epsilon", boom)
    from dpcalc.schedule import resolve_schedule

    rows = dpsgd.epsilon_by_accountant(noise_multiplier=1.0, schedule=resolve_schedule(steps=10),
                                       delta=1e-5, accountants=["rdp", "gdp"])
    assert rows[0].applicable is False and rows[0].certified is False
    assert "OverflowError" in rows[0].reason
    assert rows[1].epsilon > 0  # the other row is unaffected


def test_numpy_warnings_of_a_row_do_not_leak(monkeypatch, recwarn):
    import numpy as np

    from dpcalc.accounting import dpsgd
    from dpcalc.accounting.gdp import GdpAccountant
    from dpcalc.schedule import resolve_schedule

    real = GdpAccountant.epsilon

    def noisy(self, event, *, delta):
        np.exp(np.array([1000.0]))  # RuntimeWarning: overflow encountered in exp
        return real(self, event, delta=delta)

    monkeypatch.setattr(GdpAccountant, "epsilon", noisy)
    rows = dpsgd.epsilon_by_accountant(noise_multiplier=1.0, schedule=resolve_schedule(steps=10),
                                       delta=1e-5, accountants=["gdp"])
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]
    assert any("overflow" in w for w in rows[0].details["numerical_warnings"])


@pytest.mark.slow  # pld calibrates at ε = 1e4 in ~40 s
def test_sigma_all_at_huge_target_no_warnings_on_stderr(run_cli):
    # numpy RuntimeWarnings (overflow in exp) leaked to stderr on this successful run
    r = run_cli("sigma", "--eps", "1e4", "--delta", "1e-5", "-q", "0.01", "--steps", "100",
                "--accountant", "all", "--json")
    assert r.exit_code == 0 and r.stderr == "", r.stderr
    rows = _strict(r.stdout)["results"]
    # zcdp says why it does not apply (no amplification by subsampling); every other row calibrates
    assert [row["accountant"] for row in rows if row.get("applicable") is False] == ["zcdp"]
    assert all(row["noise_multiplier"] > 0 for row in rows if row.get("applicable", True))


# ---- 2. extreme finite values: one line, the supported range, exit 2 ------------------------

@pytest.mark.parametrize("args, flag", [
    (["epsilon", "--sigma", "1e308", *SAMPLED, "--delta", "1e-5"], "--sigma"),
    (["epsilon", "--sigma", "1e-320", *SAMPLED, "--delta", "1e-5"], "--sigma"),
    (["epsilon", "--sigma", "1", "-q", "0.01", "--steps", "1e20", "--delta", "1e-5"], "--steps"),
    (["epsilon", "--sigma", "1", *SAMPLED, "--delta", "1e-320"], "--delta"),
    (["epsilon", "--sigma", "1", "--batch-size", "256", "--dataset-size", "60000", "--epochs", "1e308",
      "--delta", "1e-5"], "--epochs"),
    (["epsilon", "--sigma", "1", "--batch-size", "256", "--dataset-size", "1e308", "--epochs", "1",
      "--delta", "1e-5"], "--dataset-size"),
    (["epsilon", "--sigma", "1", "--batch-size", "1", "--dataset-size", "1e12", "--epochs", "1e9",
      "--delta", "1e-5"], "--epochs"),  # each in range, but T = 1e21 steps
    (["delta", "--sigma", "1", *SAMPLED, "--eps", "1e308"], "--eps"),
    (["sigma", "--eps", "1e308", "--delta", "1e-5", *SAMPLED], "--eps"),
    (["gaussian", "--eps", "1", "--delta", "1e-5", "--sensitivity", "1e308"], "--sensitivity"),
    (["gaussian", "--eps", "1", "--delta", "1e-5", "--sensitivity", "1e-320"], "--sensitivity"),
    (["gaussian", "--accuracy", "1e308", "--delta", "1e-5"], "--accuracy"),
    (["gaussian", "--eps", "1", "--delta", "1e-5", "--release", "5", "--granularity", "1e300"], "--granularity"),
    (["laplace", "--eps", "1", "--release", "1e400"], "--release"),
    (["rr", "--eps", "1e-320"], "--eps"),
    (["convert", "zcdp", "--eps", "1e300"], "--eps"),
])
def test_extreme_values_refused_with_range(run_cli, args, flag):
    line = run_cli(*args).one_line_error()
    assert line.startswith(f"Error: {flag} ") and ("range" in line or "must be" in line), line
    assert re.search(r"\[[^\]]*\]|\([^)]*\)", line), line  # the range is stated


def test_in_range_extremes_give_answers(run_cli):
    for args in (["gaussian", "--eps", "1", "--delta", "1e-5", "--sensitivity", "1e100", "--json"],
                 ["gaussian", "--accuracy", "1e100", "--delta", "1e-5", "--json"],
                 ["gaussian", "--eps", "1e4", "--delta", "1e-300", "--beta", "1e-300", "--dims", "1e9", "--json"],
                 ["convert", "zcdp", "--eps", "1e100", "--json"],
                 ["laplace", "--eps", "1e-100", "--release", "1e100", "--granularity", "1e-100", "--json"]):
        r = run_cli(*args)
        assert r.exit_code == 0, (args, r.stderr)
        _strict(r.stdout)


def test_gaussian_accuracy_with_inapplicable_classical_row(run_cli):
    # the classical row (ε ≥ 1) has no details: the table crashed with KeyError 'rho'
    r = run_cli("gaussian", "--accuracy", "1", "--delta", "1e-5")
    assert r.exit_code == 0, r.stderr
    assert "n/a" in r.stdout


def test_gaussian_accuracy_unbounded_epsilon_is_infinite_not_zero(run_cli):
    # μ = Δ/σ ~ 2e200: ε ≈ μ²/2 overflows; it used to come out as 0 (δ(0) evaluated as NaN → 0)
    r = run_cli("gaussian", "--accuracy", "1e-100", "--delta", "1e-5", "--sensitivity", "1e100", "--json")
    assert r.exit_code == 0, r.stderr
    row = _strict(r.stdout)["results"][0]
    assert row["epsilon"] is None and "unbounded" in row["reason"]


@pytest.mark.parametrize("eps", ["1e-18", "1e-100"])
def test_rr_tiny_epsilon_variance_factor(run_cli, eps):
    # p − q cancels to 0 for ε ≲ 1e-16: ZeroDivisionError before; exactly
    # 1/(p − q)² = ((e^ε + 1)/(e^ε − 1))² = (2/ε)² to first order (k = 2)
    r = run_cli("rr", "--eps", eps, "--json")
    assert r.exit_code == 0, r.stderr
    vf = _strict(r.stdout)["results"][0]["details"]["variance_factor"]
    assert vf == pytest.approx((2 / float(eps)) ** 2, rel=1e-12)


def test_help_states_ranges(run_cli):
    text = " ".join(run_cli("epsilon", "--help").stdout.split())
    assert "[number in [1e-3, 1e8]]" in text and "[whole number in [0, 1e12]]" in text


# ---- 3. strict numbers, duplicate options ---------------------------------------------------

@pytest.mark.parametrize("text", ["1_0", "١", "１", "0x10", "", "1e", "inf", "nan", " 1,5"])
def test_number_syntax_refused(run_cli, text):
    line = run_cli("epsilon", "--sigma", text, "--steps", "10", "--delta", "1e-5",
                   "--accountant", "rdp").one_line_error()
    assert line.startswith("Error: --sigma must be")


def test_scientific_and_signs_accepted(run_cli):
    r = run_cli("epsilon", "--sigma", "+1.1E0", "--steps", "1e2", "--delta", ".00001",
                "--accountant", "rdp", "--json")
    assert r.exit_code == 0, r.stderr
    inputs = _strict(r.stdout)["inputs"]
    assert inputs["noise_multiplier"] == 1.1 and inputs["steps"] == 100 and inputs["delta"] == 1e-5


@pytest.mark.parametrize("args", [
    ["epsilon", "--sigma", "1", "--sigma", "2", "--steps", "10", "--delta", "1e-5"],
    ["epsilon", "--sigma", "1", "--noise-multiplier=2", "--steps", "10", "--delta", "1e-5"],
    ["epsilon", "--sigma", "1", "-q0.5", "--sample-rate", "0.1", "--steps", "10", "--delta", "1e-5"],
    ["gaussian", "--eps", "1", "--epsilon", "2", "--delta", "1e-5"],
    ["convert", "group", "--eps", "1", "--group-size", "2", "--group-size", "3"],
    ["rr", "--eps", "1", "--observed", "1,2", "--observed", "3,4"],
])
def test_duplicate_options_refused(run_cli, args):
    assert "more than once" in run_cli(*args).one_line_error()


def test_option_values_starting_with_dash_are_not_options(run_cli):
    # a value is consumed by its option even if it looks like a flag: no false duplicate
    r = run_cli("laplace", "--eps", "1", "--release", "-5", "--json")
    assert r.exit_code == 0, r.stderr


# ---- 4. convert zcdp --eps with --delta ------------------------------------------------------

def test_convert_zcdp_eps_with_delta_refused(run_cli):
    line = run_cli("convert", "zcdp", "--eps", "1", "--delta", "1e-5").one_line_error()
    assert "--delta" in line and "--rho" in line


# ---- 5. no usable answer: exit 1; accuracy not met: warning ----------------------------------

def test_no_usable_answer_exit_1(run_cli):
    line = run_cli("epsilon", "--accountant", "pld", "--sigma", "1", "-q", "0.01",
                   "--steps", "100", "--delta", "1e-5", "--discretization", "1e-300",
                   "--json").one_line_error(code=1)
    assert "pld" in line


def test_coarse_discretization_warns(run_cli):
    r = run_cli("epsilon", "--accountant", "pld", "--sigma", "1", "-q", "0.01", "--steps", "100",
                "--delta", "1e-5", "--discretization", "5", "--json")
    assert r.exit_code == 0, r.stderr
    row = _strict(r.stdout)["results"][0]
    lo, hi = row["details"]["epsilon_lower"], row["epsilon"]
    assert hi - lo > 0.005 * hi  # the bracket is wider than the requested accuracy ...
    assert any("not met" in w for w in row["details"]["warnings"])  # ... and says so


# ---- 6. output hygiene ----------------------------------------------------------------------

def test_tiny_delta_no_giant_numbers(run_cli):
    r = run_cli("epsilon", "--sigma", "1", "--steps", "10", "--delta", "1e-300")
    assert r.exit_code == 0, r.stderr
    assert not re.search(r"[0-9]{25}", r.stdout), r.stdout  # the 300-digit percentage


def test_repeated_warnings_shown_once():
    from dpcalc.cli.epsilon import accounting_notes
    from dpcalc.schedule import resolve_schedule

    w = "discretization 1e-07 needs more than max_grid_points=4194304 points; coarsened"
    res = AccountingResult("pld", 1.0, 1e-5, True, details={"warnings": [w, w, w, w]})
    notes = accounting_notes(resolve_schedule(steps=10), [res], "add-remove")
    assert sum(w in n for n in notes) == 1


def test_pld_delta_that_is_only_slack_warns(run_cli):
    r = run_cli("delta", "--sigma", "1", "-q", "0.01", "--steps", "1000", "--eps", "20",
                "--accountant", "pld", "--json")
    assert r.exit_code == 0, r.stderr
    row = _strict(r.stdout)["results"][0]
    assert row["details"]["delta_lower"] == 0.0 and row["delta"] <= 2 * row["details"]["slack"]
    assert any("numerical allowance" in w for w in row["details"]["warnings"])


# ---- 7. input files -------------------------------------------------------------------------

def test_scores_device_refused(run_cli):
    line = run_cli("exponential", "--eps", "1", "--scores", "/dev/zero").one_line_error()
    assert "regular file" in line


def test_scores_binary_refused(run_cli, tmp_path):
    f = tmp_path / "bin"
    f.write_bytes(bytes(range(256)))
    assert "UTF-8" in run_cli("exponential", "--eps", "1", "--scores", str(f)).one_line_error()


def test_scores_directory_and_missing_refused(run_cli, tmp_path):
    assert "regular file" in run_cli("exponential", "--eps", "1", "--scores",
                                     str(tmp_path)).one_line_error()
    assert "cannot be read" in run_cli("exponential", "--eps", "1", "--scores",
                                       str(tmp_path / "missing")).one_line_error()


def test_read_input_file_limit(tmp_path):
    from dpcalc.cli.options import read_input_file
    from dpcalc.errors import ParameterError

    f = tmp_path / "s.txt"
    f.write_bytes(b"1\n" * 100)
    assert read_input_file(str(f), option="scores", max_bytes=200) == b"1\n" * 100
    with pytest.raises(ParameterError, match="too large"):
        read_input_file(str(f), option="scores", max_bytes=199)


def test_scores_long_bad_line_message_is_short(run_cli, tmp_path):
    f = tmp_path / "s.txt"
    f.write_text("1\n" + "x" * 100000 + "\n")
    assert len(run_cli("exponential", "--eps", "1", "--scores", str(f)).one_line_error()) < 200


# ---- 9. start-up: calculator commands import neither scipy.optimize nor scipy.special ---------

@pytest.mark.parametrize("args", [
    ["gaussian", "--eps", "1", "--delta", "1e-5"],
    ["laplace", "--eps", "1", "--beta", "0.05"],
    ["rr", "--eps", "1"],
    ["convert", "zcdp", "--rho", "0.5", "--delta", "1e-5"],
    ["convert", "group", "--eps", "1", "--group-size", "4"],
])
def test_calculators_do_not_import_scipy(args):
    code = ("import sys\nfrom dpcalc.cli import main\n"
            f"try:\n    main({args!r})\nexcept SystemExit:\n    pass\n"
            "print([m for m in ('scipy.optimize', 'scipy.special') if m in sys.modules], file=sys.stderr)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stderr.strip().splitlines()[-1] == "[]", out.stderr


def test_docs_list_every_supported_range():
    from pathlib import Path

    from dpcalc.cli.options import RANGES

    page = Path(__file__).resolve().parents[2] / "docs" / "reference" / "input-ranges.md"
    section = page.read_text(encoding="utf-8").split("# Input ranges", 1)[1].split("\n## ", 1)[0]
    for name, kind in RANGES.items():
        r = kind.supported or kind.domain
        shown = r.text if not kind.magnitude else r.text.split(",")[1].strip(" ])")
        assert shown in section, (name, shown)


def test_counts_and_scores_are_read_strictly(run_cli, tmp_path):
    # float() would read '1_0' as 10 and '١' as 1: the same strict syntax as the options
    assert "--observed" in run_cli("rr", "--eps", "1", "--observed", "1_0,2").one_line_error()
    assert "--observed" in run_cli("rr", "--eps", "1", "--observed", "١,2").one_line_error()
    f = tmp_path / "s.txt"
    f.write_text("a,1_0\nb,2\n")
    assert "line 1" in run_cli("exponential", "--eps", "1", "--scores", str(f)).one_line_error()
