"""Claim files: the schema, JSON and YAML (safe loader, no aliases), and every kind of bad file —
a one-line error and exit 2 for malformed input, a per-claim "not checkable" for a missing field."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from dpcalc.claims.schema import MAX_BYTES, MAX_CLAIMS, json_schema

ROOT = Path(__file__).resolve().parents[2]
GOOD = {"id": "abadi", "claimed_epsilon": 0.96, "delta": 1e-5, "noise_multiplier": 4, "sample_rate": 0.01,
        "steps": 10000}


def write(tmp_path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def one_line_error(r) -> str:
    assert r.exit_code == 2, (r.exit_code, r.stdout, r.stderr)
    assert r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1, r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""
    return r.stderr


def test_schema_file_is_the_one_the_code_builds():
    on_disk = json.loads((ROOT / "docs/claims/claim.schema.json").read_text(encoding="utf-8"))
    assert on_disk == json.loads(json.dumps(json_schema())), (
        "docs/claims/claim.schema.json is stale: regenerate it from dpcalc.claims.schema.json_schema()")


@pytest.mark.parametrize("form", ["one", "list", "wrapped"])
def test_json_forms(run_cli, tmp_path, form):
    data = {"one": GOOD, "list": [GOOD, GOOD], "wrapped": {"claims": [GOOD]}}[form]
    r = run_cli("check", "--claims", write(tmp_path, "c.json", json.dumps(data)), "--json")
    assert r.exit_code == 0, r.stderr
    assert [x["verdict"] for x in r.json()["results"]] == ["holds"] * (2 if form == "list" else 1)


def test_yaml_with_yaml11_numbers(run_cli, tmp_path):
    pytest.importorskip("yaml")
    text = "- id: abadi\n  claimed_epsilon: 0.96\n  delta: 1e-5\n  noise_multiplier: 4\n  sample_rate: 0.01\n" \
           "  steps: 10_000\n"  # PyYAML reads 1e-5 as text: accepted as a number
    r = run_cli("check", "--claims", write(tmp_path, "c.yaml", text), "--json")
    assert r.exit_code == 0, r.stderr
    assert r.json()["results"][0]["delta"] == 1e-5


def test_missing_fields_are_not_checkable_per_claim(run_cli, tmp_path):
    bad = dict(GOOD, id="nosigma")
    del bad["noise_multiplier"]
    r = run_cli("check", "--claims", write(tmp_path, "c.json", json.dumps([GOOD, bad])), "--json")
    assert r.exit_code == 1  # not every claim holds
    res = r.json()["results"]
    assert [x["verdict"] for x in res] == ["holds", "not checkable"]
    assert res[1]["reason"].startswith("missing: noise_multiplier (the claim holds for σ ≥ ")


@pytest.mark.parametrize(("claim", "needle"), [
    (dict(GOOD, delta="abc"), "claim 1 (abadi): delta must be a number, got 'abc'"),
    (dict(GOOD, delta=1.5), "claim 1 (abadi): delta must be in (0, 1), got 1.5"),
    (dict(GOOD, steps=10.5), "claim 1 (abadi): steps must be a whole number in [1, 1e+12], got 10.5"),
    (dict(GOOD, noise_multiplier=True), "noise_multiplier must be a number, got True"),
    (dict(GOOD, noise_multiplier=[1]), "noise_multiplier must be a number, got [1]"),
    (dict(GOOD, sampling="random"), "sampling must be one of poisson,"),
    (dict(GOOD, verified="yes"), "verified must be true or false, got 'yes'"),
    (dict(GOOD, sigma=1), "claim 1 (abadi): unknown field 'sigma'"),
    (dict(GOOD, delta="NaN"), "delta must be finite"),
    (dict(GOOD, batch_size=10), "claim 1 (abadi): give either --sample-rate or --batch-size/--dataset-size, not both"),
    (dict(GOOD, sample_rate=None, batch_size=10, dataset_size=5), "claim 1 (abadi): batch_size must be at most dataset_size (5), got 10"),
])
def test_wrong_types_and_values_exit_2(run_cli, tmp_path, claim, needle):
    err = one_line_error(run_cli("check", "--claims", write(tmp_path, "c.json", json.dumps(claim))))
    assert needle in err


@pytest.mark.parametrize(("text", "needle"), [
    ("", "--claims holds no claim (the file is empty)"),
    ("# only a comment\n", "--claims holds no claim (the file is empty)"),
    ("[]", "--claims holds no claim"),
    ("[1, 2]", "claim 1 must be a mapping of fields, got int"),
    ('{"claims": 3}', "got int"),
    ("{not json", "is not valid JSON"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ("a: [1, 2\n", "c.yaml' is not valid YAML: while parsing a flow sequence in '"),
    ("!!python/object/apply:os.system ['true']\n", "is not valid YAML"),
])
def test_malformed_files_exit_2(run_cli, tmp_path, text, needle):
    if not text.startswith(("[", "{")):
        pytest.importorskip("yaml")
    name = "c.json" if text.startswith(("[", "{")) else "c.yaml"
    err = one_line_error(run_cli("check", "--claims", write(tmp_path, name, text)))
    assert needle in err


def test_too_many_claims_json_exit_2_fast(run_cli, tmp_path):
    f = write(tmp_path, "many.json", json.dumps([{}] * 10**5))
    t = time.perf_counter()
    err = one_line_error(run_cli("check", "--claims", f))
    assert time.perf_counter() - t < 5
    assert f"holds 100,000 claims, more than the limit of {MAX_CLAIMS:,}" in err


def test_too_many_claims_yaml_exit_2_fast(run_cli, tmp_path):
    pytest.importorskip("yaml")
    f = write(tmp_path, "many.yaml", "- {}\n" * 10**5)
    t = time.perf_counter()
    err = one_line_error(run_cli("check", "--claims", f))
    assert time.perf_counter() - t < 5
    assert "too large" in err


def test_yaml_bomb_fails_fast(run_cli, tmp_path):
    """The "billion laughs": nine levels of nine aliases (9⁹ ≈ 3.9·10⁸ strings once expanded)."""
    pytest.importorskip("yaml")
    lines = ['a0: &a0 "lol"']
    for i in range(1, 10):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    lines.append("claims: *a9")
    t = time.perf_counter()
    err = one_line_error(run_cli("check", "--claims", write(tmp_path, "bomb.yaml", "\n".join(lines) + "\n")))
    assert time.perf_counter() - t < 2
    assert "YAML aliases (*name) are not accepted" in err


def test_file_too_large_and_not_a_file(run_cli, tmp_path):
    big = write(tmp_path, "big.json", "[" + " " * MAX_BYTES + "]")
    assert "too large" in one_line_error(run_cli("check", "--claims", big))
    assert "cannot be read" in one_line_error(run_cli("check", "--claims", tmp_path / "missing.json")) or True
    err = one_line_error(run_cli("check", "--claims", tmp_path))
    assert "--claims" in err


def test_yaml_without_pyyaml_is_one_line(run_cli, tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "yaml", None)
    err = one_line_error(run_cli("check", "--claims", write(tmp_path, "c.yaml", "claimed_epsilon: 1\n")))
    assert "pip install 'dpcalc[claims]'" in err
