"""compose's accountant rows come from the registry: a toy accountant registered at run time is
a row of ``compose`` and a ``--method`` choice (help and error) without touching any other file."""

from __future__ import annotations

import math

import pytest

from dpcalc.accounting import registry
from dpcalc.accounting.base import Accountant
from dpcalc.composition.compose import available_methods, compose
from dpcalc.composition.spec import MechanismSpec
from dpcalc.events import Event, flatten
from dpcalc.results import AccountingResult


class ToyAccountant(Accountant):
    """Basic composition of (ε, 0) events: ε = Σ k·ε_i (Dwork & Roth 2014 Thm 3.16), δ = 0."""

    name = "toy"
    certified = True
    source = "Dwork & Roth 2014, Thm 3.16 (toy)"
    short_source = "toy16"
    description = "a toy"

    def check(self, event: Event) -> None:
        for step, _ in flatten(event):
            if not hasattr(step, "epsilon"):
                from dpcalc.errors import UnsupportedEventError

                raise UnsupportedEventError("toy: pure ε events only")

    def epsilon(self, event, *, delta):
        self.check(event)
        return AccountingResult(self.name, float(sum(k * s.epsilon for s, k in flatten(event))), delta, True)

    def delta(self, event, *, epsilon):
        e = self.epsilon(event, delta=0.5).epsilon
        return AccountingResult(self.name, epsilon, 0.0 if epsilon >= e else 1.0, True)


class BrokenAccountant(ToyAccountant):
    name = "broken"

    def epsilon(self, event, *, delta):
        raise OverflowError("math range error")


@pytest.fixture
def toy():
    registry.register("toy", ToyAccountant)
    yield
    registry.unregister("toy")


def test_toy_accountant_is_a_compose_row_and_a_method_choice(toy, run_cli):
    assert "toy" in available_methods()
    rows = {r.method: r for r in compose([MechanismSpec("dp", 100, epsilon=0.1)], delta=1e-5).results}
    # the toy is basic composition: 100 × 0.1 = 10 (exact in decimal)
    assert rows["toy"].applicable and rows["toy"].epsilon == pytest.approx(10.0) and rows["toy"].accountant
    r = run_cli("compose", "--dp", "0.1", "--count", "100", "--delta", "1e-5", "--method", "toy", "--steps-grid", "5")
    assert r.exit_code == 0, r.stderr
    assert "toy16" in r.stdout  # its short source
    help_text = run_cli("compose", "--help").stdout
    assert "toy" in help_text
    bad = run_cli("compose", "--dp", "0.1", "--delta", "1e-5", "--method", "nope")
    assert bad.exit_code == 2 and "toy" in bad.stderr and "'nope'" in bad.stderr


def test_unregistered_accountant_is_gone(run_cli):
    assert "toy" not in available_methods()
    r = run_cli("compose", "--dp", "0.1", "--delta", "1e-5", "--method", "toy")
    assert r.exit_code == 2


def test_a_failing_accountant_is_a_not_applicable_row_not_an_error(run_cli):
    registry.register("broken", BrokenAccountant)
    try:
        rows = {r.method: r for r in compose([MechanismSpec("dp", 10, epsilon=0.1)], delta=1e-5).results}
        assert not rows["broken"].applicable and "math range error" in rows["broken"].reason
        assert rows["broken"].certified is False  # a row that does not apply certifies nothing
        assert rows["optimal"].applicable
        r = run_cli("compose", "--dp", "0.1", "--count", "10", "--delta", "1e-5", "--json")
        assert r.exit_code == 0
        out = {x["method"]: x for x in r.json()["results"]}
        assert out["broken"]["applicable"] is False and out["broken"]["certified"] is False
    finally:
        registry.unregister("broken")


def test_not_applicable_rows_certify_nothing():
    rep = compose([MechanismSpec("gaussian", 100, noise_multiplier=2.0, sample_rate=0.01)], delta=1e-5)
    na = [r for r in rep.results if not r.applicable]
    assert na and all(r.certified is False and r.reason for r in na)
    assert all(math.isfinite(r.epsilon) for r in rep.results if r.applicable)
