"""Adding an accountant is one module and one registry line (docs/design.md §10): an accountant
registered at run time appears in `epsilon`, `delta`, `sigma`, `compose` and their `--help`
and `--accountant`/`--method` choices, with no other file touched."""

from __future__ import annotations

import pytest
from accounting.test_contract import BasicPureDp

from dpcalc.accounting import registry


@pytest.fixture
def toy():
    registry.register("toy-basic", BasicPureDp)
    try:
        yield "toy-basic"
    finally:
        registry.unregister("toy-basic")


def _row(results, key, name):
    return next(r for r in results if r.get(key) == name)


def test_toy_in_epsilon_delta_sigma(run_cli, toy):
    dpsgd = ("--sigma", "1", "-q", "0.01", "--steps", "100")
    for cmd, target in (("epsilon", ("--delta", "1e-5")), ("delta", ("--eps", "1"))):
        r = run_cli(cmd, *dpsgd, *target, "--json")
        assert r.exit_code == 0, r.stderr
        row = _row(r.json()["results"], "accountant", toy)  # every accountant by default, the toy too
        assert row["applicable"] is False and "pure-DP" in row["reason"] and row["certified"] is False
        r = run_cli(cmd, *dpsgd, *target, "--accountant", toy)
        assert r.exit_code == 1 and "pure-DP" in r.stderr  # no usable answer: exit 1 with the reason
    r = run_cli("sigma", "--eps", "1", "--delta", "1e-5", "-q", "0.01", "--steps", "100", "--accountant", "all",
                "--json")
    assert r.exit_code == 0 and _row(r.json()["results"], "accountant", toy)["applicable"] is False
    for cmd in ("epsilon", "delta", "sigma"):
        assert toy in run_cli(cmd, "--help").stdout


def test_toy_in_compose(run_cli, toy):
    r = run_cli("compose", "--dp", "0.1", "--count", "10", "--delta", "1e-5", "--json")
    assert r.exit_code == 0, r.stderr
    row = _row(r.json()["results"], "method", toy)
    assert row["epsilon"] == pytest.approx(1.0) and row["certified"] is True  # basic composition: 10 × 0.1
    r = run_cli("compose", "--dp", "0.1", "--count", "10", "--delta", "1e-5", "--method", toy, "--json")
    assert [x["method"] for x in r.json()["results"]] == [toy]
    assert toy in run_cli("compose", "--help").stdout


def test_unregistered_name_is_refused_with_the_choices(run_cli, toy):
    registry.unregister(toy)
    try:
        r = run_cli("epsilon", "--sigma", "1", "--steps", "10", "--delta", "1e-5", "--accountant", toy)
        assert r.exit_code == 2 and "must be one of" in r.stderr and toy not in r.stderr.split("got")[0]
    finally:
        registry.register(toy, BasicPureDp)
