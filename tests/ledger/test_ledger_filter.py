"""The ledger's privacy filter (dpcalc/ledger/filter.py) and events as data (records.py)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcalc.events import (
    ComposedEvent,
    EpsilonDeltaEvent,
    ExponentialMechanismEvent,
    FixedSizeSampledEvent,
    GaussianEvent,
    GNMaxEvent,
    LaplaceEvent,
    LNMaxEvent,
    PateThresholdEvent,
    PoissonSampledEvent,
    SelfComposedEvent,
    TruncatedPoissonSampledEvent,
    TuningEvent,
    dpsgd_event,
)
from dpcalc.ledger import filter as flt
from dpcalc.ledger import records
from dpcalc.mechanisms.gaussian import gaussian_delta


def _state(delta, *events):
    return flt.FilterState(delta, [flt.charge(e) for e in events])


@pytest.mark.parametrize(("eps", "budget", "k"), [(0.25, 1.0, 4), (0.3, 1.0, 3), (0.1, 1.0, 10), (1.0, 1.0, 1)])
def test_pure_releases_admitted_exactly_k_times(eps, budget, k):
    """Basic composition (the order ∞): k releases of ε fit iff k·ε ≤ budget, decided in exact
    rational arithmetic (0.1 added ten times is 0.9999999999999999 in floats, 1 exactly)."""
    state = flt.FilterState(1e-6, [])
    admitted = 0
    for _ in range(k + 3):
        c = flt.charge(EpsilonDeltaEvent(eps, 0.0))
        if state.admits(c, budget):
            state.charges.append(c)
            admitted += 1
    assert admitted == k
    assert state.epsilon() <= budget


@given(sigma=st.floats(0.3, 50.0), delta=st.floats(1e-12, 1e-2))
@settings(max_examples=60, deadline=None)
def test_single_gaussian_matches_closed_form_and_is_never_below_the_exact_epsilon(sigma, delta):
    """One Gaussian mechanism: the filter's ε is min over Λ of α/(2σ²) + (ln(|Λ|/δ) − ln α)/(α−1)
    + ln(1 − 1/α) (RDP of the Gaussian, Mironov 2017 Prop. 7; the CKS20 Prop. 12 conversion with
    the union bound over Λ, docs/design.md §11), and as a valid (ε, δ) guarantee it is at least
    the exact ε of the Gaussian mechanism (Balle & Wang 2018 Thm 8: δ(ε) at the filter's ε must
    be ≤ δ)."""
    eps = _state(delta, GaussianEvent(sigma)).epsilon()
    a = np.asarray(flt.FILTER_ORDERS)
    closed = float(np.min(a / (2 * sigma**2) + (math.log(len(a) / delta) - np.log(a)) / (a - 1)
                          + np.log(1 - 1 / a)))
    assert eps == pytest.approx(closed, rel=1e-12)
    assert eps >= closed
    assert gaussian_delta(epsilon=eps, mu=1.0 / sigma) <= delta


def test_filter_is_never_below_the_fixed_sequence_rdp_bound():
    """The filter pays for adaptivity: for a fixed history its ε is the RDP conversion at its
    orders plus ln|Λ|/(α−1), above the rdp accountant's ε (same conversion, finer orders, no
    union bound) and below the plain Markov conversion with the union bound."""
    from dpcalc.accounting.rdp import rdp_of_event
    from dpcalc.accounting.registry import get_accountant

    ev = ComposedEvent((dpsgd_event(noise_multiplier=1.1, sample_rate=0.01, steps=500), LaplaceEvent(2.0),
                        ExponentialMechanismEvent(0.2)))
    delta = 1e-6
    a = np.asarray(flt.FILTER_ORDERS)
    state = _state(delta, *ev.events)
    assert state.epsilon() > get_accountant("rdp").epsilon(ev, delta=delta).epsilon
    markov = float(np.min(rdp_of_event(ev, a) + math.log(len(a) / delta) / (a - 1)))
    assert state.epsilon() < markov
    assert state.epsilon() == pytest.approx(float(np.min(
        rdp_of_event(ev, a) + (math.log(len(a) / delta) - np.log(a)) / (a - 1) + np.log(1 - 1 / a))), rel=1e-12)


def test_gaussian_is_not_pure_and_pure_mix_uses_finite_orders():
    c = flt.charge(GaussianEvent(2.0))
    assert c.pure is None and np.all(np.isfinite(c.rdp))
    assert flt.charge(LaplaceEvent(4.0)).pure >= 0.25
    assert flt.charge(SelfComposedEvent(ExponentialMechanismEvent(0.1), 3)).pure == Fraction(3, 10)


def test_delta_positive_events_cannot_be_filtered():
    from dpcalc.errors import UnsupportedEventError

    with pytest.raises(UnsupportedEventError):
        flt.charge(EpsilonDeltaEvent(1.0, 1e-6))


def test_more_spent_never_lowers_the_epsilon():
    state = flt.FilterState(1e-5, [])
    last = 0.0
    for e in [GaussianEvent(3.0), EpsilonDeltaEvent(0.1), dpsgd_event(noise_multiplier=1, sample_rate=0.01,
                                                                         steps=10)]:
        state.charges.append(flt.charge(e))
        now = state.epsilon()
        assert now >= last
        last = now


# ---- events as data ------------------------------------------------------------------------------

positive = st.floats(1e-6, 1e6, allow_nan=False, allow_infinity=False)
leaves = st.one_of(
    positive.map(GaussianEvent), positive.map(LaplaceEvent), positive.map(ExponentialMechanismEvent),
    st.tuples(positive, st.floats(0, 0.99)).map(lambda t: EpsilonDeltaEvent(*t)),
    st.tuples(st.floats(1e-9, 1.0), positive).map(lambda t: PoissonSampledEvent(t[0], GaussianEvent(t[1]))),
    positive.map(LNMaxEvent), positive.map(GNMaxEvent), positive.map(PateThresholdEvent),
    st.tuples(st.integers(1, 10**6), st.integers(0, 10**6), st.booleans(), positive).map(
        lambda t: FixedSizeSampledEvent(t[0], t[0] + t[1], GaussianEvent(t[3]), t[2])),
    st.tuples(st.floats(1e-9, 1.0), st.integers(1, 10**9), st.integers(1, 10**6), positive).map(
        lambda t: TruncatedPoissonSampledEvent(t[0], t[1], t[2], GaussianEvent(t[3]))),
)
events = st.recursive(leaves, lambda inner: st.one_of(
    st.tuples(inner, st.integers(0, 10**6)).map(lambda t: SelfComposedEvent(*t)),
    st.lists(inner, max_size=4).map(lambda es: ComposedEvent(tuple(es))),
    st.tuples(inner, st.floats(1.0, 100.0)).map(lambda t: TuningEvent(t[0], "geometric", t[1])),
), max_leaves=8)


@given(events)
@settings(max_examples=200, deadline=None)
def test_events_round_trip_exactly(ev):
    text = records.dumps(records.event_to_json(ev))
    assert records.event_from_json(records.loads(text)) == ev


@pytest.mark.parametrize("bad", [
    {"type": "gaussian"}, {"type": "gaussian", "noise_multiplier": -1}, {"type": "gaussian", "noise_multiplier": "1"},
    {"type": "laplace", "scale": True}, {"type": "nope"}, [], {"type": "self-composed", "count": 1.5,
                                                                  "event": {"type": "laplace", "scale": 1}},
    {"type": "epsilon-delta", "epsilon": 1, "delta": 1.0},
    {"type": "pate-gnmax", "noise_multiplier": 40, "votes": [3, 7]}, {"type": "pate-lnmax", "scale": 0},
    {"type": "pate-threshold"},
    {"type": "fixed-size-sampled", "batch_size": 11, "dataset_size": 10, "event": {"type": "gaussian",
                                                                                  "noise_multiplier": 1}},
    {"type": "fixed-size-sampled", "batch_size": 1, "dataset_size": 10, "replacement": 1,
     "event": {"type": "gaussian", "noise_multiplier": 1}},
    {"type": "truncated-poisson-sampled", "sample_rate": 0.1, "dataset_size": 10, "max_batch_size": 0,
     "event": {"type": "gaussian", "noise_multiplier": 1}},
])
def test_tampered_events_are_refused(bad):
    from dpcalc.errors import ParameterError

    with pytest.raises(ParameterError):
        records.event_from_json(bad)


def test_nan_is_refused_in_json():
    with pytest.raises(ValueError):
        records.loads('{"type": "gaussian", "noise_multiplier": NaN}')


@pytest.mark.parametrize("ev", [
    GNMaxEvent(40.0, votes=(3, 7)), LNMaxEvent(20.0, votes=(10, 0)),
    PateThresholdEvent(150.0, threshold=5.0, votes=(3, 7)),
    SelfComposedEvent(GNMaxEvent(40.0, votes=(3, 7)), 5),
])
def test_data_dependent_pate_events_are_never_stored(ev):
    """The votes are private: an event holding them (or the ε computed from them) is refused."""
    from dpcalc.errors import ParameterError

    with pytest.raises(ParameterError, match="data-dependent"):
        records.event_to_json(ev)


def test_pate_votes_event_is_never_stored():
    from dpcalc.errors import ParameterError
    from dpcalc.mechanisms.pate import pate_votes_event

    ev = pate_votes_event(np.array([[3.0, 7.0], [9.0, 1.0]]), mechanism="gnmax", noise=40.0)
    with pytest.raises(ParameterError, match="data-dependent"):
        records.event_to_json(ev)


@pytest.mark.parametrize("sigma", [1.0, 40.0, 150.0])
def test_pate_charges_match_closed_forms(sigma):
    """GNMax: RDP λ/σ² (Papernot et al. 2018 Prop 8: L2 sensitivity √2); the threshold check:
    λ/(2σ²) (sensitivity 1); LNMax: ε₀ = 2/b pure (2017 §3.1), never below the exact value."""
    a = np.asarray(flt.FILTER_ORDERS)
    g = flt.charge(GNMaxEvent(sigma))
    assert g.pure is None
    assert np.all(g.rdp >= a / sigma**2) and np.allclose(g.rdp, a / sigma**2, rtol=1e-12)
    t = flt.charge(PateThresholdEvent(sigma))
    assert np.all(t.rdp >= a / (2 * sigma**2)) and np.allclose(t.rdp, a / (2 * sigma**2), rtol=1e-12)
    lap = flt.charge(LNMaxEvent(sigma))
    assert lap.pure >= Fraction(2) / Fraction(sigma) and float(lap.pure) <= (2 / sigma) * (1 + 1e-14)


def test_fixed_size_sampled_runs_are_refused_with_the_reason(tmp_path):
    """A run of fixed-size batches is refused before anything is recorded where it has no sound
    charge: with replacement on a replace dataset (Birrell, Ebrahimi, Behnia, Pacheco 2024 Thm 3.6 is an
    add/remove bound); a truncated-Poisson run is recorded and read back. (Both fixed-size samplers on an
    add/remove dataset: tests/ledger/test_ledger_samplers.py.)"""
    from dpcalc.errors import ParameterError
    from dpcalc.ledger import Ledger

    path = tmp_path / "b.db"
    with Ledger(path, create=True) as led:
        led.add_dataset("mnist", budget_epsilon=8.0, delta=1e-5)
        led.add_dataset("web", budget_epsilon=8.0, delta=1e-5, adjacency="replace")
        step = FixedSizeSampledEvent(256, 60000, GaussianEvent(1.1), True)
        with pytest.raises(ParameterError, match="cannot be recorded on dataset .*proven for add/remove neighbours only"):
            led.start_training("web", noise_multiplier=1.1, sample_rate=256 / 60000, steps=100, step_event=step)
        trunc = TruncatedPoissonSampledEvent(256 / 60000, 60000, 512, GaussianEvent(1.1))
        with pytest.raises(ParameterError, match="add/remove neighbours only"):
            led.start_training("web", noise_multiplier=1.1, sample_rate=256 / 60000, steps=100, step_event=trunc)
        assert led.records(led.dataset("mnist")) == [] and led.records(led.dataset("web")) == []
        run = led.start_training("mnist", noise_multiplier=1.1, sample_rate=256 / 60000, steps=100,
                                 step_event=trunc)
        run.finish(100)
        (rec,) = led.records(led.dataset("mnist"))
        assert rec.event == trunc and rec.counted_steps == 100
        spent = led.spent(led.dataset("mnist")).filter_epsilon
    # the stored run is accounted as the 100 truncated-Poisson steps it was reserved as
    assert spent == _state(1e-5, SelfComposedEvent(trunc, 100)).epsilon() and 0 < spent < 8
