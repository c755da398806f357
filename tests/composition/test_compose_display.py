"""Display rule (issue 9 item 8): exact numbers print exactly, a target δ that a method meets
prints as given, inexact values are rounded up."""

from __future__ import annotations

import pytest

from dpcalc.composition.basic import exact_sum
from dpcalc.composition.compose import compose
from dpcalc.composition.spec import MechanismSpec


def test_basic_sum_of_equal_terms_is_exact(run_cli):
    # 200 × (0.1, 0): Σε = 20 exactly (Dwork & Roth 2014 Thm 3.16; decimal 0.1 × 200)
    r = run_cli("compose", "--dp", "0.1", "--count", "200", "--delta", "1e-5", "--method", "basic", "--json")
    assert r.json()["results"][0]["epsilon"] == 20.0
    r = run_cli("compose", "--dp", "0.1", "--count", "200", "--delta", "1e-5", "--method", "basic")
    assert "│ 20 " in r.stdout.replace("★ basic", "basic") or " 20 │" in r.stdout
    assert "20.0001" not in r.stdout


def test_target_delta_prints_as_given_on_every_row(run_cli):
    r = run_cli("compose", "--dp", "0.1", "--count", "100", "--delta", "1e-5")
    assert r.exit_code == 0, r.stderr
    assert "1.001e-05" not in r.stdout and r.stdout.count("1e-05") >= 8
    rep = compose([MechanismSpec("dp", 100, epsilon=0.1)], delta=1e-5)
    assert all(x.delta == 1e-5 for x in rep.results if x.applicable)


def test_exact_sum_rounds_up_only_inexact_sums():
    from fractions import Fraction

    assert exact_sum([0.1], [200], decimal=True) == 20.0
    # binary reading: 200·fl(0.1) is above 20, so the sum rounds up to the next float
    up = exact_sum([0.1], [200], decimal=False)
    assert up > 20.0 and Fraction(up) >= 200 * Fraction(0.1)
    assert exact_sum([0.1, 0.2], [1, 1], decimal=True) == pytest.approx(0.3) and \
        Fraction(exact_sum([0.1, 0.2], [1, 1], decimal=True)) >= Fraction(3, 10)
