"""The PATE planning inverses and release of dpcalc/accounting/pate_analysis.py (the library
side of ``dpcalc pate``; the CLI's rows are checked in tests/cli/test_pate_cli.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpcalc.accounting import pate as ap
from dpcalc.accounting import pate_analysis as pa
from dpcalc.accounting.rdp_conversion import epsilon_per_order
from dpcalc.mechanisms.pate import pate_votes_event


def _eps(mechanism, noise, k, delta=1e-5):
    return ap.epsilon_of_curve(lambda o: k * pa.aggregator_rdp(mechanism, noise, o), delta=delta).value


@pytest.mark.parametrize(("mechanism", "noise", "target"), [
    ("gnmax", {"sigma": 40.0}, 2.0),
    ("lnmax", {"scale": 20.0}, 1.0),
    ("confident-gnmax", {"sigma1": 150.0, "sigma2": 40.0}, 3.0),
    ("gnmax", {"sigma": 1e4}, 0.5),
])
def test_largest_queries_is_the_largest_integer_meeting_the_target(mechanism, noise, target):
    plan = pa.largest_queries(mechanism, noise, epsilon=target, delta=1e-5)
    k = int(plan.value)
    assert plan.feasible
    assert plan.conversion.value == _eps(mechanism, noise, k) <= target < _eps(mechanism, noise, k + 1)


def test_largest_queries_limits():
    one = pa.largest_queries("gnmax", {"sigma": 0.5}, epsilon=0.1, delta=1e-5)
    assert not one.feasible and one.value == 1 and one.conversion.value > 0.1
    cap = pa.largest_queries("gnmax", {"sigma": 1e6}, epsilon=50.0, delta=1e-5, max_queries=1000)
    assert cap.feasible and cap.value == 1000


@pytest.mark.parametrize(("mechanism", "name", "queries", "target"), [
    ("gnmax", "sigma", 1000, 2.0), ("lnmax", "scale", 100, 1.0), ("gnmax", "sigma", 1, 50.0)])
def test_smallest_noise_meets_the_target_and_is_tight(mechanism, name, queries, target):
    plan = pa.smallest_noise(mechanism, name, queries=queries, epsilon=target, delta=1e-5)
    x = plan.value
    assert plan.feasible
    assert plan.conversion.value == _eps(mechanism, {name: x}, queries) <= target
    if x > pa.NOISE_RANGE[0]:
        assert _eps(mechanism, {name: x * (1 - 1e-8)}, queries) > target


def test_smallest_noise_infeasible_at_the_largest_noise():
    plan = pa.smallest_noise("gnmax", "sigma", queries=10**12, epsilon=1e-3, delta=1e-5)
    assert not plan.feasible and plan.value == pa.NOISE_RANGE[1] and plan.conversion.value > 1e-9


def test_cumulative_cost_is_the_grid_conversion_of_the_cumulative_curves():
    rng = np.random.default_rng(3)
    votes = rng.multinomial(250, [0.7, 0.2, 0.1], size=40)
    run = ap.PateRun(pate_votes_event(votes, mechanism="gnmax", noise=40.0))
    counts = np.array([0, 1, 10, 40])
    yd, yi = pa.cumulative_cost(run, ap.ORDERS, counts, delta=1e-5)
    dep, ind = run.cumulative(ap.ORDERS, counts)
    assert np.array_equal(yi, epsilon_per_order(ap.ORDERS[None, :], ind, math.log(1e-5)).min(axis=1))
    assert np.array_equal(yd, epsilon_per_order(ap.ORDERS[None, :], dep, math.log(1e-5)).min(axis=1))
    # the data-dependent curve is below the data-independent one (up to its own round-up)
    assert np.all(yd <= yi * (1 + 1e-12)) and yd[0] == yi[0] == 0.0 and yd[-1] < yi[-1]
    dd, di = pa.cumulative_cost(run, ap.ORDERS, counts, epsilon=1.0)
    assert np.all(dd <= di * (1 + 1e-9)) and np.all((0 <= dd) & (di <= 1)) and dd[-1] < di[-1]


def test_accountant_rows_of_a_history_with_votes_are_labelled_data_dependent():
    # issue 32: a number computed from the private votes is not a publishable guarantee, wherever
    # it is computed (compose --spec included): certified False, details["data_dependent"] True
    from dpcalc.accounting.registry import get_accountant
    from dpcalc.events import (
        ComposedEvent,
        GaussianEvent,
        GNMaxEvent,
        SelfComposedEvent,
        is_data_dependent,
    )

    dependent = ComposedEvent((SelfComposedEvent(GNMaxEvent(40.0, (200, 30, 20)), 10), GaussianEvent(5.0)))
    independent = ComposedEvent((SelfComposedEvent(GNMaxEvent(40.0), 10), GaussianEvent(5.0)))
    assert is_data_dependent(dependent) and not is_data_dependent(independent)
    for name in ("rdp", "ma"):
        acc = get_accountant(name)
        for row in (acc.epsilon(dependent, delta=1e-5), acc.delta(dependent, epsilon=1.0)):
            assert row.certified is False and row.details["data_dependent"] is True
        free = acc.epsilon(independent, delta=1e-5)
        assert free.certified is True and "data_dependent" not in free.details
        # the label changes no number
        assert acc.epsilon(dependent, delta=1e-5).epsilon <= free.epsilon


def test_compose_marks_rows_from_votes_data_dependent(run_cli, tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text('[{"mechanism": "gnmax", "parameters": {"noise_multiplier": 40, "votes": [200, 30, 20]},'
                    ' "count": 10}]')
    r = run_cli("compose", "--spec", str(spec), "--delta", "1e-5")
    assert r.exit_code == 0, r.stderr
    assert "data-dep." in r.stdout and "approx." not in r.stdout
    assert "tightest certified: rdp" not in r.stdout
