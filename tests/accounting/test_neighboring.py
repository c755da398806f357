"""One convention for every accountant: noise multipliers and Laplace scales are relative to
one record's contribution bound (the add/remove sensitivity, e.g. the clipping norm C).
Replacing a record moves an unsampled query by up to 2C, so under ``replace`` the unsampled
Gaussian with noise multiplier σ is the add/remove Gaussian with σ/2 (Dwork & Roth 2014 §2.3:
replace-one is a group of two add/remove steps in sensitivity)."""

from __future__ import annotations

import pytest

from dpcalc.accounting.registry import available, get_accountant
from dpcalc.errors import UnsupportedEventError
from dpcalc.events import LaplaceEvent, SelfComposedEvent, dpsgd_event


@pytest.mark.parametrize("name", available())
def test_replace_doubles_sensitivity_of_unsampled_gaussian(name):
    replace = get_accountant(name, neighboring="replace")
    add_remove = get_accountant(name)
    e_rep = replace.epsilon(dpsgd_event(noise_multiplier=10, sample_rate=1, steps=100), delta=1e-5)
    e_ar = add_remove.epsilon(dpsgd_event(noise_multiplier=5, sample_rate=1, steps=100), delta=1e-5)
    assert e_rep.epsilon == pytest.approx(e_ar.epsilon, rel=2e-3)
    assert e_rep.epsilon > 2 * add_remove.epsilon(
        dpsgd_event(noise_multiplier=10, sample_rate=1, steps=100), delta=1e-5).epsilon


@pytest.mark.parametrize("name", ["rdp", "pld"])
def test_replace_doubles_sensitivity_of_laplace(name):
    rep = get_accountant(name, neighboring="replace").epsilon(SelfComposedEvent(LaplaceEvent(10.0), 10), delta=1e-5)
    ar = get_accountant(name).epsilon(SelfComposedEvent(LaplaceEvent(5.0), 10), delta=1e-5)
    assert rep.epsilon == pytest.approx(ar.epsilon, rel=5e-3)


def test_rdp_refuses_sampled_replace():
    with pytest.raises(UnsupportedEventError, match="add/remove"):
        get_accountant("rdp", neighboring="replace").epsilon(
            dpsgd_event(noise_multiplier=1.0, sample_rate=0.01, steps=10), delta=1e-5)


def test_sampled_replace_is_never_below_add_remove():
    ev = dpsgd_event(noise_multiplier=1.0, sample_rate=0.01, steps=1000)
    pld_rep = get_accountant("pld", neighboring="replace").epsilon(ev, delta=1e-5).epsilon
    pld_ar = get_accountant("pld").epsilon(ev, delta=1e-5).epsilon
    assert pld_rep > pld_ar
