"""Empirical audits (dpcalc.risk.audit, ``dpcalc audit``; issue 13).

Synthetic experiment with a known answer: each canary is included with probability ½ and its
score is N(μ, 1) if included, N(0, 1) if not. Each score is then a μ-GDP view of that
canary's inclusion (Dong, Roth, Su 2022 Def 2.7), whose true ε at δ is the exact Gaussian
ε(δ; μ) (Balle & Wang 2018 Thm 8, ``gaussian_epsilon``). A valid audit at confidence 1 − β
must report ε_lower ≤ ε(δ; μ) in ≥ 1 − β of repetitions (Steinke, Nasr, Jagielski 2023;
Clopper–Pearson 1934), grow with μ, and be ≈ 0 with no signal.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from dpcalc.mechanisms.gaussian import gaussian_epsilon
from dpcalc.risk.audit import (
    AuditData,
    clopper_pearson,
    clopper_pearson_epsilon,
    one_run_audit,
    one_run_p_value,
    read_guesses,
    synthetic_gaussian_scores,
)

DELTA = 1e-5


def test_one_run_p_value_pure_dp_is_binomial_tail():
    # δ = 0: the p-value is P[Binomial(r, e^ε/(1+e^ε)) ≥ v] (Steinke et al. 2023); exact sum here
    from math import comb, exp

    r, v, eps = 30, 24, 0.7
    p = exp(eps) / (1 + exp(eps))
    ref = sum(comb(r, k) * p ** k * (1 - p) ** (r - k) for k in range(v, r + 1))
    assert one_run_p_value(100, r, v, eps, 0.0) == pytest.approx(ref, rel=1e-12)
    assert one_run_p_value(100, r, v, eps, 1e-6) > ref  # the δ term only adds


def test_clopper_pearson_reference():
    # exact interval for 3 of 20 at 95%: (0.0321, 0.3789) (Clopper & Pearson 1934 tables; R binom.test)
    lo, hi = clopper_pearson(3, 20, 0.05)
    assert lo == pytest.approx(0.03207, abs=1e-4)
    assert hi == pytest.approx(0.37893, abs=1e-4)


@pytest.mark.parametrize("method", ["one-run", "clopper-pearson"])
@pytest.mark.parametrize("mu", [0.5, 2.0])
def test_audit_lower_bound_below_true_eps(method, mu):
    true = gaussian_epsilon(delta=DELTA, mu=mu)
    ok = 0
    reps = 60
    for seed in range(reps):
        d = synthetic_gaussian_scores(500, mu, seed)
        if method == "one-run":
            e = one_run_audit(d, delta=DELTA, beta=0.05).epsilon_lower
        else:
            e = clopper_pearson_epsilon(d, delta=DELTA, beta=0.05, seed=seed)["epsilon_lower"]
        ok += e <= true
    assert ok >= 0.95 * reps


@pytest.mark.parametrize("method", ["one-run", "clopper-pearson"])
def test_audit_grows_with_signal_and_is_zero_without(method):
    def run(mu):
        vals = []
        for seed in range(10):
            d = synthetic_gaussian_scores(1000, mu, 100 + seed)
            if method == "one-run":
                vals.append(one_run_audit(d, delta=DELTA, beta=0.05).epsilon_lower)
            else:
                vals.append(clopper_pearson_epsilon(d, delta=DELTA, beta=0.05, seed=seed)["epsilon_lower"])
        return float(np.median(vals))

    e0, e1, e2, e4 = run(0.0), run(1.0), run(2.0), run(4.0)
    assert e0 < 0.05
    assert e1 < e2 < e4
    assert e4 > 1.0


def test_guesses_as_given():
    inc = np.array([True, False] * 50)
    g = np.where(inc, 1, -1)
    r = one_run_audit(AuditData(inc, guesses=g), delta=0.0, beta=0.05)
    assert r.guesses == 100 and r.correct == 100 and r.epsilon_lower > 1.0


def _write(path, text):
    path.write_text(text)
    return str(path)


def test_read_guesses_csv_and_json(tmp_path):
    p = _write(tmp_path / "a.csv", "included,score\nyes,1.5\nno,-0.2\n1,3\n")
    d = read_guesses(p)
    assert d.included.tolist() == [True, False, True] and d.scores.tolist() == [1.5, -0.2, 3.0]
    q = tmp_path / "b.json"
    q.write_text(json.dumps({"included": [True, False], "guess": ["in", "abstain"]}))
    d2 = read_guesses(str(q))
    assert d2.guesses.tolist() == [1, 0]


@pytest.mark.parametrize("content,needle", [
    ("included,score\nyes,1\n,2\n", "missing label"),
    ("score\n1\n", "missing column 'included'"),
    ("included,score\nyes,abc\n", "score must be a number"),
    ("included,score\nmaybe,1\n", "must be yes/no"),
    ("included,score,guess\nyes,1,in\n", "exactly one of"),
])
def test_cli_audit_bad_files(run_cli, tmp_path, content, needle):
    p = _write(tmp_path / "bad.csv", content)
    r = run_cli("audit", "--guesses", p, "--delta", "1e-5")
    assert r.exit_code == 2 and needle in r.stderr and r.stderr.count("\n") == 1


def test_cli_audit_refuses_non_regular_and_large(run_cli, tmp_path, monkeypatch):
    r = run_cli("audit", "--guesses", str(tmp_path), "--delta", "1e-5")
    assert r.exit_code == 2 and "not a regular file" in r.stderr
    import dpcalc.risk.audit as audit

    p = _write(tmp_path / "big.csv", "included,score\n" + "yes,1\n" * 100)
    monkeypatch.setattr(audit, "MAX_FILE_BYTES", 50)
    r = run_cli("audit", "--guesses", p, "--delta", "1e-5")
    assert r.exit_code == 2 and "is too large: 615 bytes, the limit is 50 bytes" in r.stderr


@pytest.mark.parametrize("args,needle", [
    (("--beta", "0"), "--beta must be in (0, 1)"),
    (("--beta", "1.2"), "--beta must be in (0, 1)"),
])
def test_cli_audit_bad_beta(run_cli, tmp_path, args, needle):
    p = _write(tmp_path / "a.csv", "included,score\nyes,1\nno,0\n")
    r = run_cli("audit", "--guesses", p, "--delta", "1e-5", *args)
    assert r.exit_code == 2 and needle in r.stderr


def test_cli_audit_json_and_honesty(run_cli, tmp_path):
    d = synthetic_gaussian_scores(400, 3.0, 5)
    lines = ["included,score"] + [f"{'yes' if i else 'no'},{s:.6f}" for i, s in zip(d.included, d.scores, strict=True)]
    p = _write(tmp_path / "c.csv", "\n".join(lines) + "\n")
    r = run_cli("audit", "--guesses", p, "--delta", "1e-5", "--method", "both", "--json")
    assert r.exit_code == 0, r.stderr
    res = r.json()["results"]
    assert {x["method"] for x in res} == {"one-run", "clopper-pearson"}
    t = run_cli("audit", "--guesses", p, "--delta", "1e-5", "--certified-eps", "0.5")
    assert "EXCEEDS the certified" in t.stdout
    t2 = run_cli("audit", "--guesses", p, "--delta", "1e-5")
    assert "never a replacement" in t2.stdout
