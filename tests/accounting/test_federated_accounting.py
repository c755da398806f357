"""dpcalc.accounting.federated.federated_accounting: the one library entry point of `dpcalc fl`."""

from __future__ import annotations

import json

import pytest

from dpcalc.accounting.federated import (
    effective_noise_multiplier,
    federated_accounting,
)
from dpcalc.errors import InfeasibleError, ParameterError

BASE = {"clients_per_round": 100, "total_clients": 100_000, "rounds": 2000, "delta": 1e-6}


def test_every_row_gets_its_own_update_noise():
    # review finding: with --accountant all only the first row's z_Δ was reported
    a = federated_accounting(**BASE, target_epsilon=8, count_stddev=5, accountant="all")
    usable = [r for r in a.results if r.applicable and r.noise_multiplier]
    assert len(usable) >= 3
    assert [x["accountant"] for x in a.adaptive_clipping] == [r.accountant for r in usable]
    for r, x in zip(usable, a.adaptive_clipping, strict=True):
        assert x["effective_noise_multiplier"] == r.noise_multiplier
        # z_Δ is rounded up: combined with the count noise it is at least the calibrated z
        assert effective_noise_multiplier(x["update_noise_multiplier"], 5) >= r.noise_multiplier
    assert len({x["update_noise_multiplier"] for x in a.adaptive_clipping}) == len(usable)


def test_cli_json_matches_the_library(run_cli):
    out = json.loads(run_cli("fl", "--clients-per-round", "100", "--total-clients", "100000", "--rounds", "2000",
                             "--eps", "8", "--delta", "1e-6", "--count-stddev", "5", "--accountant", "all",
                             "--json").stdout)
    lib = federated_accounting(**BASE, target_epsilon=8, count_stddev=5, accountant="all")
    assert out["adaptive_clipping"] == lib.adaptive_clipping


def test_sigma_given_equals_epsilon_at_effective_multiplier():
    a = federated_accounting(**BASE, noise_multiplier=1.0, count_stddev=5)
    b = federated_accounting(**BASE, noise_multiplier=effective_noise_multiplier(1.0, 5))
    assert a.results[0].epsilon == b.results[0].epsilon
    assert a.adaptive_clipping[0]["update_noise_multiplier"] == 1.0


def test_count_noise_too_small_for_every_row_is_infeasible():
    with pytest.raises(InfeasibleError, match="count-stddev"):
        federated_accounting(**BASE, target_epsilon=8, count_stddev=0.1)


@pytest.mark.parametrize("kw", [{}, {"noise_multiplier": 1.0, "target_epsilon": 1.0}])
def test_exactly_one_question(kw):
    with pytest.raises(ParameterError, match="exactly one of --sigma"):
        federated_accounting(**BASE, **kw)
