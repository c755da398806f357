"""Per-dataset filter orders (``ledger init --orders``, schema version 3; docs/design.md §11): the
union bound is over the orders fixed when the dataset was created."""

from __future__ import annotations

import math
import sqlite3

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcalc.errors import ParameterError
from dpcalc.events import GaussianEvent, dpsgd_event
from dpcalc.ledger import Ledger, export_lines, import_lines, store
from dpcalc.ledger import filter as flt
from dpcalc.mechanisms.gaussian import gaussian_delta

order_sets = st.lists(st.floats(1.01, 1000.0, allow_nan=False), min_size=1, max_size=8, unique=True)


@given(sigma=st.floats(0.3, 50.0), delta=st.floats(1e-12, 1e-2), orders=order_sets)
@settings(max_examples=80, deadline=None)
def test_any_fixed_order_set_is_valid_and_matches_its_closed_form(sigma, delta, orders):
    """One Gaussian mechanism, any Λ: the filter's ε is min over Λ of α/(2σ²) + (ln(|Λ|/δ) − ln α)/(α−1)
    + ln(1 − 1/α) (Mironov 2017 Prop. 7; CKS20 Prop. 12 with δ/|Λ| per order), and at that ε the exact
    δ of the Gaussian mechanism (Balle & Wang 2018 Thm 8) is at most δ."""
    lam = flt.check_orders(orders)
    state = flt.FilterState(delta, [flt.charge(GaussianEvent(sigma), lam)], lam)
    eps = state.epsilon()
    a = np.asarray(lam)
    closed = max(0.0, float(np.min(a / (2 * sigma**2) + (math.log(len(a) / delta) - np.log(a)) / (a - 1)
                                   + np.log(1 - 1 / a))))
    assert eps >= closed and eps == pytest.approx(closed, rel=1e-12, abs=1e-15)
    assert gaussian_delta(epsilon=eps, mu=1.0 / sigma) <= delta


def test_dpsgd_run_planned_at_one_order_costs_less():
    """σ = 1.1, q = 256/60000, 14,063 steps, δ = 1e-5 (the README's run): 21 default orders give
    3.0175; Λ = {8}, fixed before the run, gives the plain RDP conversion at α = 8 (no union-bound
    price), which is never below the fixed-sequence rdp accountant's optimum 2.5966."""
    from dpcalc.accounting.registry import get_accountant

    ev = dpsgd_event(noise_multiplier=1.1, sample_rate=256 / 60000, steps=14063)
    default = flt.FilterState(1e-5, [flt.charge(ev)]).epsilon()
    one = flt.FilterState(1e-5, [flt.charge(ev, (8.0,))], (8.0,)).epsilon()
    rdp = get_accountant("rdp").epsilon(ev, delta=1e-5).epsilon
    assert default == pytest.approx(3.0175388, abs=1e-6)
    assert one == pytest.approx(2.5970795, abs=1e-6) and rdp <= one < default


@pytest.mark.parametrize("bad", [[], [1.0], [0.5, 2], [2, 2], [math.inf], [math.nan], ["a"], ["8"], "89", 8, [True],
                                 list(range(2, 70))])
def test_bad_order_sets_are_refused(bad):
    with pytest.raises(ParameterError):
        flt.check_orders(bad)


def test_init_orders_are_used_shown_and_exported(tmp_path, run_cli):
    path = tmp_path / "b.db"
    res = run_cli("ledger", "init", str(path), "--dataset", "mnist", "--budget-eps", "3", "--delta", "1e-5",
                  "--orders", "8", "--json")
    assert res.exit_code == 0, res.stderr
    assert res.json()["results"][0]["orders"] == [8.0]
    res = run_cli("ledger", "init", str(path), "--dataset", "mnist", "--budget-eps", "3", "--delta", "1e-5",
                  "--orders", "1")
    assert res.exit_code == 2 and "--orders" in res.stderr
    with Ledger(path) as led:
        assert led.dataset("mnist").orders == (8.0,)
        run = led.start_training("mnist", noise_multiplier=1.1, sample_rate=256 / 60000, steps=14063)
        run.finish(14063)
        assert led.spent(led.dataset("mnist")).filter_epsilon == pytest.approx(2.5970795, abs=1e-6)
        lines = export_lines(led)
    res = run_cli("ledger", "show", str(path), "--json")
    total = res.json()["results"][0]["totals"][0]
    assert total["epsilon"] == pytest.approx(2.5970795, abs=1e-6) and "(8)" in total["source"]
    with Ledger(tmp_path / "copy.db", create=True) as led:
        import_lines(led, lines)
        ds = led.dataset("mnist")
        assert ds.orders == (8.0,) and led.spent(ds).filter_epsilon == pytest.approx(2.5970795, abs=1e-6)


def test_v2_ledger_is_migrated_to_v3_keeping_the_default_orders(tmp_path, run_cli, write_v2_ledger):
    path = tmp_path / "v2.db"
    write_v2_ledger(path)
    res = run_cli("ledger", "show", str(path), "--json")
    assert res.exit_code == 0, res.stderr
    out = res.json()["results"][0]
    assert out["orders"] == list(flt.FILTER_ORDERS) and out["filter_epsilon"] == 0.5
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA user_version").fetchone()[0] == store.SCHEMA_VERSION
    assert "orders" in {r[1] for r in con.execute("PRAGMA table_info(datasets)")}
    assert con.execute("SELECT orders FROM datasets").fetchone()[0] is None
    con.close()

