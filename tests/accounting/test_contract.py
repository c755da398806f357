"""The accountant contract (dpcalc/accounting/base.py), checked for every registered accountant.

Parametrised over :func:`dpcalc.accounting.registry.available`, so an accountant added by one
module and one registry line is held to the same contract without touching this file; two toy
accountants registered here (pure-DP basic composition, Dwork & Roth 2014 Thm 3.16; exact GDP
of unsampled Gaussian steps, Dong, Roth, Su 2022 Cor 3.3) pass it too, and are first-class in
``risk`` and ``plan`` (library and command) by their registry name alone. The capabilities an
accountant declares (dpcalc/accounting/base.py) are checked against what its class does. Each accountant is checked on the histories it supports; the others must be refused with
:class:`~dpcalc.errors.UnsupportedEventError` and a reason.

References (independent of dpcalc, mpmath; ``tests/test_audit_refs.py``): the exact μ-GDP
curve (Balle & Wang 2018 Thm 8; Dong, Roth, Su 2019 Cor 2.13) for T unsampled Gaussian
steps (μ = √T·Δ/σ, Δ = 1 add/remove, 2 replace-one), the exact one-step Poisson-sampled
Gaussian curve (Mironov, Talwar, Zhang 2019 §3.3) and the exact T-step Laplace curve.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_audit_refs import gdp_delta, laplace_delta, sg_delta1

from dpcalc import _validate as v
from dpcalc.accounting import registry
from dpcalc.accounting.base import NEIGHBORING_RELATIONS, Accountant, GridResult, composed_at
from dpcalc.accounting.calibrate import calibrate_noise_multiplier
from dpcalc.composition.bounded_range import br_nonadaptive_delta, br_single_delta
from dpcalc.errors import UnsupportedEventError
from dpcalc.events import (
    ComposedEvent,
    EpsilonDeltaEvent,
    Event,
    ExponentialMechanismEvent,
    GaussianEvent,
    LaplaceEvent,
    SelfComposedEvent,
    dpsgd_event,
    flatten,
)
from dpcalc.mechanisms.gaussian import gaussian_delta, gaussian_epsilon
from dpcalc.results import AccountingResult

TINY = 1e-9
NAMES = registry.available()
SETTINGS = settings(max_examples=4, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


# ----------------------------------------------------------------------------- toy accountant
class BasicPureDp(Accountant):
    """Toy: basic composition of pure-DP steps (Dwork & Roth 2014 Thm 3.16): ε = Σ ε_i; an
    ε_tot-DP history is (ε, 1 − e^{ε − ε_tot})-DP for ε < ε_tot (P(S) − e^ε Q(S) ≤ P(S)(1 − e^{ε−ε_tot}))."""

    name: ClassVar[str] = "toy-basic"
    certified: ClassVar[bool] = True
    source: ClassVar[str] = "Dwork & Roth 2014 Thm 3.16"
    short_source: ClassVar[str] = "DR14 Thm 3.16"
    description: ClassVar[str] = "toy: basic composition of pure-DP steps"

    def _total(self, event: Event) -> float:
        total = 0.0
        for step, count in flatten(event):
            if isinstance(step, LaplaceEvent):
                total += count * (2.0 if self.neighboring == "replace" else 1.0) / step.scale
            elif isinstance(step, EpsilonDeltaEvent) and step.delta == 0:
                total += count * step.epsilon
            else:
                raise UnsupportedEventError(f"toy-basic handles pure-DP steps only, not {type(step).__name__}")
        return total

    def check(self, event: Event) -> None:
        self._total(event)

    def epsilon(self, event: Event, *, delta: float) -> AccountingResult:
        d = v.open_unit("delta", delta)
        return AccountingResult(self.name, self._total(event), d, True, source=self.source)

    def delta(self, event: Event, *, epsilon: float) -> AccountingResult:
        e = v.nonnegative("epsilon", epsilon)
        total = self._total(event)
        d = 0.0 if e >= total else -math.expm1(e - total)
        return AccountingResult(self.name, e, d, True, source=self.source)


@pytest.fixture
def toy_registered():
    registry.register("toy-basic", BasicPureDp)
    try:
        yield "toy-basic"
    finally:
        registry.unregister("toy-basic")


class ExactGaussian(Accountant):
    """Toy: unsampled Gaussian steps, composed exactly as μ-GDP (Dong, Roth, Su 2022 Cor 3.3:
    μ = √(Σ T_i Δ²/σ_i²), Δ = 1 add/remove, 2 replace-one) and converted exactly (Balle & Wang
    2018 Thm 8). A DP-SGD run with q = 1 (batch = dataset) is such a history, so ``plan`` and
    ``risk`` can use it; it declares no capability beyond the defaults."""

    name: ClassVar[str] = "toy-gauss"
    certified: ClassVar[bool] = True
    source: ClassVar[str] = "Dong, Roth, Su 2022 Cor 3.3; Balle & Wang 2018 Thm 8"
    short_source: ClassVar[str] = "DRS22; BW18"
    description: ClassVar[str] = "toy: unsampled Gaussian steps, exact GDP"

    def _mu(self, event: Event) -> float:
        sens = 2.0 if self.neighboring == "replace" else 1.0
        total = 0.0
        for step, count in flatten(event):
            if not isinstance(step, GaussianEvent):
                raise UnsupportedEventError(f"toy-gauss handles unsampled Gaussian steps only, not {type(step).__name__}")
            total += count * (sens / step.noise_multiplier) ** 2
        return math.sqrt(total)

    def check(self, event: Event) -> None:
        self._mu(event)

    def epsilon(self, event: Event, *, delta: float) -> AccountingResult:
        d, mu = v.open_unit("delta", delta), self._mu(event)
        eps = gaussian_epsilon(delta=d, mu=mu) if mu > 0 else 0.0
        return AccountingResult(self.name, eps, d, True, {"mu": mu}, source=self.source)

    def delta(self, event: Event, *, epsilon: float) -> AccountingResult:
        e, mu = v.nonnegative("epsilon", epsilon), self._mu(event)
        return AccountingResult(self.name, e, gaussian_delta(epsilon=e, mu=mu) if mu > 0 else 0.0, True,
                                {"mu": mu}, source=self.source)


@pytest.fixture
def toy_gauss():
    registry.register("toy-gauss", ExactGaussian)
    try:
        yield "toy-gauss"
    finally:
        registry.unregister("toy-gauss")


# ----------------------------------------------------------------------------- helpers
def _acc(name: str, neighboring: str = "add-remove") -> Accountant:
    return registry.get_accountant(name, neighboring=neighboring)


def _eps(acc: Accountant, event: Event, delta: float) -> AccountingResult | None:
    """The result, or None if the accountant refuses the history (with a reason)."""
    try:
        return acc.epsilon(event, delta=delta)
    except UnsupportedEventError as exc:
        assert str(exc).strip(), f"{acc.name}: UnsupportedEventError without a reason"
        assert not acc.supports(event)
        return None


def _gap(res: AccountingResult) -> float:
    """The accountant's own stated accuracy at this result (upper − lower bound; 0 if exact)."""
    lower = (res.details or {}).get("epsilon_lower")
    return 0.0 if lower is None or not math.isfinite(res.epsilon) else res.epsilon - lower


#: histories with no privacy cost, in every shape a history can take
ZERO_HISTORIES = [
    dpsgd_event(noise_multiplier=1.0, sample_rate=0.01, steps=0),
    SelfComposedEvent(GaussianEvent(1.0), 0),
    SelfComposedEvent(LaplaceEvent(1.0), 0),
    SelfComposedEvent(EpsilonDeltaEvent(1.0, 0.0), 0),
    SelfComposedEvent(ExponentialMechanismEvent(1.0), 0),
    ComposedEvent((SelfComposedEvent(GaussianEvent(2.0), 0), SelfComposedEvent(LaplaceEvent(1.0), 0))),
]


@dataclass(frozen=True)
class _UnknownEvent(Event):
    """A mechanism no accountant knows."""

    x: float = 1.0


def check_zero_history(name: str) -> None:
    """No events → ε = 0 at any δ and δ = 0 at ε = 0 (the repeated zero-step checks, merged)."""
    acc = _acc(name)
    supported = 0
    for ev in ZERO_HISTORIES:
        res = _eps(acc, ev, 1e-5)
        if res is None:
            continue
        supported += 1
        assert res.epsilon == 0.0, (name, ev)
        assert acc.delta(ev, epsilon=0.0).delta == 0.0, (name, ev)
    assert supported, f"{name} supports no zero-cost history"


def check_unsupported(name: str) -> None:
    for neighboring in NEIGHBORING_RELATIONS:
        acc = _acc(name, neighboring)
        for ev in (_UnknownEvent(), SelfComposedEvent(_UnknownEvent(), 3),
                   ComposedEvent((GaussianEvent(1.0), _UnknownEvent()))):
            assert not acc.supports(ev)
            for call in (lambda a=acc, e=ev: a.check(e), lambda a=acc, e=ev: a.epsilon(e, delta=1e-5),
                         lambda a=acc, e=ev: a.delta(e, epsilon=1.0)):
                with pytest.raises(UnsupportedEventError) as info:
                    call()
                assert len(str(info.value)) > 10, f"{name}: no reason given"


def check_neighboring(name: str) -> None:
    """Both relations construct; each history is answered or refused with a reason; replace-one
    never certifies less than add/remove for the unsampled Gaussian and Laplace (sensitivity 2)."""
    for ev, unsampled in ((SelfComposedEvent(GaussianEvent(3.0), 10), True),
                          (SelfComposedEvent(LaplaceEvent(4.0), 3), True),
                          (dpsgd_event(noise_multiplier=1.0, sample_rate=0.05, steps=20), False)):
        res = {n: _eps(_acc(name, n), ev, 1e-5) for n in NEIGHBORING_RELATIONS}
        for n, r in res.items():
            assert r is None or (r.details or {}).get("neighboring", n) == n
        if unsampled and res["add-remove"] is not None and res["replace"] is not None:
            assert res["replace"].epsilon >= res["add-remove"].epsilon - _gap(res["add-remove"]) - TINY


def check_references(name: str) -> None:
    """Certified results never below the exact curves (mpmath, tests/test_audit_refs.py)."""
    cases = []
    for sigma, steps, delta in ((3.0, 10, 1e-5), (0.8, 1, 1e-3), (20.0, 1000, 1e-8)):
        for neighboring, sens in (("add-remove", 1.0), ("replace", 2.0)):
            mu = sens * math.sqrt(steps) / sigma
            cases.append((neighboring, SelfComposedEvent(GaussianEvent(sigma), steps), delta,
                          lambda e, mu=mu: gdp_delta(mu, e)))
    for q, sigma, delta in ((0.01, 1.0, 1e-5), (0.3, 2.0, 1e-6)):
        cases.append(("add-remove", dpsgd_event(noise_multiplier=sigma, sample_rate=q, steps=1), delta,
                      lambda e, q=q, sigma=sigma: sg_delta1(q, sigma, e)))
    for scale, count, delta in ((2.0, 1, 1e-6), (5.0, 2, 1e-5)):
        cases.append(("add-remove", SelfComposedEvent(LaplaceEvent(scale), count), delta,
                      lambda e, r=1.0 / scale, c=count: laplace_delta(r, c, e)))
    # k exponential (ε-BR) mechanisms: no certified ε below the exact non-adaptive optimum
    # (Dong, Durfee, Rogers 2020 §5; k = 1: the closed form (e^{ε/2} − e^{ε′/2})²/(e^ε − 1)),
    # which some choice of k ε-BR mechanisms attains
    for eps, count, delta in ((1.0, 1, 1e-3), (0.1, 1, 1e-6), (0.5, 5, 1e-5), (0.1, 40, 1e-6)):
        for neighboring in NEIGHBORING_RELATIONS:
            cases.append((neighboring, SelfComposedEvent(ExponentialMechanismEvent(eps), count), delta,
                          lambda e, eps=eps, c=count: (br_single_delta(eps, e) if c == 1
                                                       else br_nonadaptive_delta(eps, c, e))))
    for neighboring, ev, delta, exact in cases:
        res = _eps(_acc(name, neighboring), ev, delta)
        if res is None or not res.certified or not math.isfinite(res.epsilon):
            continue
        assert exact(res.epsilon) <= delta * (1 + TINY), (name, neighboring, ev, res.epsilon)


def check_round_trip(name: str) -> None:
    """ε(δ) then δ(ε): consistent within the accountant's stated accuracy, never contradicting δ."""
    for ev, delta in ((dpsgd_event(noise_multiplier=1.0, sample_rate=0.01, steps=1000), 1e-5),
                      (SelfComposedEvent(GaussianEvent(3.0), 10), 1e-8),
                      (dpsgd_event(noise_multiplier=0.8, sample_rate=0.2, steps=50), 1e-3),
                      (SelfComposedEvent(LaplaceEvent(10.0), 20), 1e-6),
                      (SelfComposedEvent(ExponentialMechanismEvent(0.5), 10), 1e-6)):
        acc = _acc(name)
        res = _eps(acc, ev, delta)
        if res is None or not math.isfinite(res.epsilon):
            continue
        back = acc.delta(ev, epsilon=res.epsilon)
        lower = (back.details or {}).get("delta_lower")
        if lower is not None:  # a numerical accountant: its δ bracket must contain δ or lie below
            assert lower <= delta * (1 + TINY), (name, ev)
            if not (back.details or {}).get("warnings"):
                assert back.delta <= delta / (1 - getattr(acc, "accuracy", 0.0)) * (1 + TINY) + 1e-12
        else:
            assert back.delta <= delta * (1 + TINY), (name, ev, back.delta)


def check_grid(name: str) -> None:
    """epsilon_grid / delta_grid agree with epsilon / delta at the rows they evaluate (never below)."""
    acc = _acc(name)
    for steps in ([dpsgd_event(noise_multiplier=1.0, sample_rate=0.01, steps=1)],
                  [GaussianEvent(4.0), LaplaceEvent(20.0)],
                  [EpsilonDeltaEvent(0.1, 0.0)],
                  [ExponentialMechanismEvent(0.2)]):
        counts = np.array([[0] * len(steps), [10] * len(steps), [100] * len(steps)], dtype=np.int64)
        if not acc.supports(composed_at(steps, counts[-1])):
            continue
        for grid, point, log_scale in ((acc.epsilon_grid(steps, counts, delta=1e-5),
                                        lambda ev: acc.epsilon(ev, delta=1e-5).epsilon, False),
                                       (acc.delta_grid(steps, counts, epsilon=1.0),
                                        lambda ev: acc.delta(ev, epsilon=1.0).delta, True)):
            assert isinstance(grid, GridResult)
            assert list(grid.indices) == sorted(grid.indices) and len(grid.indices) == len(grid.values)
            assert grid.indices and grid.indices[0] == 0 and grid.indices[-1] == len(counts) - 1
            for i, val in zip(grid.indices, grid.values, strict=True):
                ref = point(composed_at(steps, counts[i]))
                ref = math.inf if ref is None else ref
                assert val >= ref * (1 - 1e-9) - 1e-15, (name, steps, i, val, ref)
                # a grid may skip refinements the single call makes (e.g. rdp's orders between grid
                # orders): within 5% of ε, and of ln δ (δ is exponential in the order's bound)
                if log_scale and 0 < ref < 1:
                    assert math.log(max(val, ref)) <= math.log(ref) * 0.95 + 1e-12, (name, steps, i, val, ref)
                else:
                    assert val <= ref * 1.05 + 1e-9, (name, steps, i, val, ref)


def check_calibration(name: str) -> None:
    """σ found gives ε ≤ target under a fresh accountant (the user's call)."""
    families = [lambda s: dpsgd_event(noise_multiplier=s, sample_rate=0.01, steps=1000),
                lambda s: SelfComposedEvent(GaussianEvent(s), 10),
                lambda s: SelfComposedEvent(LaplaceEvent(s), 10)]
    done = 0
    for make in families:
        if not _acc(name).supports(make(1.0)):
            continue
        res = calibrate_noise_multiplier(_acc(name), target_epsilon=1.0, delta=1e-5, make_event=make, rtol=1e-4)
        again = _acc(name).epsilon(make(res.noise_multiplier), delta=1e-5)
        assert res.epsilon <= 1.0 and again.epsilon <= 1.0, (name, res.noise_multiplier)
        done += 1
    assert done, f"{name} supports none of the calibration families"


def check_declared(name: str) -> None:
    cls = registry.get_class(name)
    for attr in ("name", "source", "short_source", "description"):
        assert isinstance(getattr(cls, attr), str) and getattr(cls, attr), (name, attr)
    assert cls.name == name and isinstance(cls.certified, bool)
    acc = cls()
    # the declared hooks exist with the documented signatures (no probing needed)
    assert isinstance(acc.infeasible_hint(0.1, delta=1e-5), str)
    curve = acc.rdp_curve(SelfComposedEvent(GaussianEvent(2.0), 3)) if acc.supports(
        SelfComposedEvent(GaussianEvent(2.0), 3)) else None
    if curve is not None:
        orders, rdp = curve
        assert orders.shape == rdp.shape and np.all(orders > 1) and np.all(rdp >= 0)
        # unsampled Gaussian: ε(α) = T·α/(2σ²) (Mironov 2017 Prop 7)
        assert np.allclose(rdp, 3 * orders / 8.0, rtol=1e-12)
    check_capabilities(name)


def check_capabilities(name: str) -> None:
    """The declared capabilities (dpcalc/accounting/base.py) say what the class does: the commands
    read them instead of the accountant's name (tests/test_architecture.py)."""
    cls = registry.get_class(name)
    acc = cls()
    for flag in ("vectorised_grid", "plotted_curve", "curve_by_epsilon", "rdp_tradeoff", "all_batch_samplers",
                 "vectorised_dpsgd"):
        assert isinstance(getattr(cls, flag), bool), (name, flag)
    assert isinstance(acc.calibrates_by_stand_in, bool) and isinstance(cls.approximation_note, str)
    # a vectorised grid is an overridden one, and the other way round (grid.py asks for a few points otherwise)
    for meth in ("epsilon_grid", "delta_grid"):
        assert cls.vectorised_grid == (getattr(cls, meth) is not getattr(Accountant, meth)), (name, meth)
    if cls.vectorised_dpsgd:
        assert cls.epsilon_dpsgd_many is not Accountant.epsilon_dpsgd_many, name
    # the options the commands' flags may set are constructor keywords
    params = inspect.signature(cls.__init__).parameters
    assert all(o in params and params[o].kind is inspect.Parameter.KEYWORD_ONLY for o in cls.options), name
    assert cls.max_distinct is None or (cls.max_distinct >= 1 and cls.distinct_cost), name
    gauss = SelfComposedEvent(GaussianEvent(2.0), 3)
    if cls.rdp_tradeoff:
        assert acc.rdp_curve(gauss) is not None, name
    if acc.supports(gauss):
        stand_in = acc.profile_stand_in(acc.epsilon(gauss, delta=1e-5))
        if stand_in is not None:
            other, note = stand_in
            assert isinstance(other, Accountant) and other.certified and isinstance(note, str) and note, name
    # epsilon_dpsgd_many (vectorised or the default) is epsilon run by run
    runs = [(0.01, 1.0, 100), (0.2, 2.0, 10), (1.0, 3.0, 5)]
    events = [dpsgd_event(noise_multiplier=s, sample_rate=q, steps=t) for q, s, t in runs]
    if all(acc.supports(ev) for ev in events):
        many = acc.epsilon_dpsgd_many(sample_rates=[r[0] for r in runs], noise_multipliers=[r[1] for r in runs],
                                      steps=[r[2] for r in runs], delta=1e-5)
        assert [r.epsilon for r in many] == [acc.epsilon(ev, delta=1e-5).epsilon for ev in events], name


def check_profile(name: str) -> None:
    """privacy_profile(event, ε's) agrees with delta(event, ε) at each ε — never below it: the upper
    bound is at least the proven lower bound delta() states (or delta() itself, when none), the
    brackets overlap, the upper bound is within the accountant's accuracy of delta()'s, and no
    certified upper bound falls below the exact curve (μ-GDP, Balle & Wang 2018 Thm 8; mpmath)."""
    acc = _acc(name)
    epsilons = [2.0, 0.0, 1.0, 0.5, 4.0]  # any order; answers come back in that order
    cases = [(dpsgd_event(noise_multiplier=1.0, sample_rate=0.01, steps=1000), None),
             (SelfComposedEvent(GaussianEvent(3.0), 10), lambda e: gdp_delta(math.sqrt(10) / 3.0, e)),
             (SelfComposedEvent(LaplaceEvent(5.0), 2), lambda e: laplace_delta(0.2, 2, e))]
    done = 0
    for ev, exact in cases:
        if not acc.supports(ev):
            continue
        done += 1
        up, lo = acc.privacy_profile(ev, epsilons)
        assert up.shape == (len(epsilons),) and (lo is None or lo.shape == up.shape)
        rtol = 2.0 * getattr(acc, "accuracy", 0.0) + 1e-9
        for i, e in enumerate(epsilons):
            ref = acc.delta(ev, epsilon=e)
            ref_up = math.inf if ref.delta is None else ref.delta
            ref_lo = (ref.details or {}).get("delta_lower")
            assert up[i] >= (ref_up if ref_lo is None else ref_lo) * (1 - 1e-9) - 1e-15, (name, ev, e, up[i], ref)
            assert up[i] <= ref_up * (1 + rtol) + 1e-12, (name, ev, e, up[i], ref_up)
            if lo is not None:
                assert 0.0 <= lo[i] <= up[i] and lo[i] <= ref_up * (1 + 1e-9) + 1e-15, (name, ev, e, lo[i], ref_up)
            if exact is not None:
                if ref.certified:
                    assert up[i] >= exact(e) * (1 - 1e-9) - 1e-15, (name, ev, e, up[i], exact(e))
                if lo is not None:
                    assert lo[i] <= exact(e) * (1 + 1e-9) + 1e-15, (name, ev, e, lo[i], exact(e))
        order = np.argsort(epsilons)
        assert np.all(np.diff(up[order]) <= 1e-12), (name, ev, up)  # δ(ε) non-increasing
    assert done, f"{name} supports none of the profile histories"


CHECKS = [check_declared, check_zero_history, check_unsupported, check_neighboring, check_references,
          check_round_trip, check_grid, check_calibration, check_profile]


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__[6:])
@pytest.mark.parametrize("name", NAMES)
def test_contract(name, check):
    check(name)


def test_toy_accountant_registered_passes_the_contract(toy_registered):
    assert toy_registered in registry.available()
    assert registry.get_accountant(toy_registered).name == toy_registered
    for check in CHECKS:
        check(toy_registered)
    _monotone_cases(toy_registered, eps0=0.1, steps=5, sigma=2.0, q=0.1)


def test_toy_accountant_unregistered_after():
    assert "toy-basic" not in registry.available()
    assert "toy-gauss" not in registry.available()


def test_second_toy_passes_the_contract(toy_gauss):
    for check in CHECKS:
        check(toy_gauss)


# ----------------------------------------------------------------------------- risk and plan
def test_toy_accountant_in_risk(toy_gauss, toy_registered, run_cli, tmp_path):
    """``risk`` (library and command) takes a registered toy by name: its privacy profile gives a
    certified trade-off curve, never above the exact μ-GDP one (the toy is exact: they agree)."""
    from dpcalc.risk.curve import curve_from_accountant, gdp_curve

    ev = SelfComposedEvent(GaussianEvent(4.0), 9)  # μ = 3/4
    curve, head = curve_from_accountant(ev, accountant=toy_gauss, delta=1e-5, fprs=(1e-3, 1e-1))
    assert curve.method == toy_gauss and curve.certified and curve.rdp is None
    assert head.epsilon == registry.get_accountant(toy_gauss).epsilon(ev, delta=1e-5).epsilon
    alphas = np.array([1e-4, 1e-3, 1e-2, 1e-1, 0.5])
    exact = gdp_curve(0.75).tpr(alphas)
    assert np.all(curve.tpr(alphas) >= exact * (1 - 1e-9))  # certified: never below the exact curve
    assert np.all(curve.tpr(alphas) <= exact + 0.05)  # and close to it (one profile, a few dozen points)
    # the pure-DP toy: a Laplace history through `dpcalc risk --spec`
    spec = tmp_path / "seq.json"
    spec.write_text('[{"mechanism": "laplace", "parameters": {"epsilon": 0.1}, "count": 5}]')
    for name, args in ((toy_gauss, ("--sigma", "4", "--steps", "9", "-q", "1")),
                       (toy_registered, ("--spec", str(spec)))):
        r = run_cli("risk", *args, "--delta", "1e-5", "--accountant", name, "--json")
        assert r.exit_code == 0, r.stderr
        out = r.json()
        assert out["inputs"]["accountant"] == name
        assert {row["method"] for row in out["results"]} == {name}
    assert toy_gauss in run_cli("risk", "--help").stdout


def test_toy_accountant_in_plan(toy_gauss, run_cli):
    """``plan`` calibrates, solves and ranks with a registered toy (q = 1: a batch is the dataset)."""
    from dpcalc.planning.plan import max_steps_for_sigma, plan_grid

    acc = registry.get_accountant(toy_gauss)
    plan = plan_grid(target_epsilon=1.0, delta=1e-5, dataset_size=100, batch_sizes=[100], epochs=[1, 4],
                     accountant=toy_gauss, workers=1)
    assert plan.accountant == toy_gauss and len(plan.cells) == 2
    for cell in plan.cells:
        res = cell.result
        assert res.applicable and res.accountant == toy_gauss
        ev = dpsgd_event(noise_multiplier=res.noise_multiplier, sample_rate=1.0, steps=cell.steps)
        assert acc.epsilon(ev, delta=1e-5).epsilon <= 1.0  # verified by the toy itself
        below = dpsgd_event(noise_multiplier=res.noise_multiplier * (1 - 1e-5), sample_rate=1.0,
                            steps=cell.steps)
        assert acc.epsilon(below, delta=1e-5).epsilon > 1.0  # and the smallest such σ (to rtol)
    steps = max_steps_for_sigma(noise_multiplier=5.0, target_epsilon=1.0, delta=1e-5, dataset_size=100,
                                batch_sizes=[100], accountant=toy_gauss)
    t_star = steps.cells[0].extra["max_steps"]

    def eps_at(t: int) -> float:
        return acc.epsilon(dpsgd_event(noise_multiplier=5.0, sample_rate=1.0, steps=t), delta=1e-5).epsilon

    assert t_star >= 1 and eps_at(t_star) <= 1.0 < eps_at(t_star + 1)
    r = run_cli("plan", "--eps", "1", "--delta", "1e-5", "--dataset-size", "100", "--batch-size", "100",
                "--epochs", "1,4", "--accountant", toy_gauss, "--json")
    assert r.exit_code == 0, r.stderr
    out = r.json()
    assert out["inputs"]["accountant"] == toy_gauss and {row["accountant"] for row in out["results"]} == {toy_gauss}
    by_epochs = {row["epochs"]: row["noise_multiplier"] for row in out["results"]}
    assert by_epochs == {cell.epochs: cell.result.noise_multiplier for cell in plan.cells}  # as the library
    assert toy_gauss in run_cli("plan", "--help").stdout


# ----------------------------------------------------------------------------- monotonicity
def _monotone_cases(name: str, *, eps0: float, steps: int, sigma: float, q: float) -> None:
    """More noise → ε no larger; larger q, more steps, larger per-step ε → ε no smaller (up to the
    accountant's stated accuracy, :func:`_gap`)."""
    families = [  # (less private, more private) pairs
        (dpsgd_event(noise_multiplier=sigma, sample_rate=q, steps=steps),
         dpsgd_event(noise_multiplier=sigma * 1.25, sample_rate=q, steps=steps)),
        (dpsgd_event(noise_multiplier=sigma, sample_rate=min(1.0, 2 * q), steps=steps),
         dpsgd_event(noise_multiplier=sigma, sample_rate=q, steps=steps)),
        (dpsgd_event(noise_multiplier=sigma, sample_rate=q, steps=2 * steps),
         dpsgd_event(noise_multiplier=sigma, sample_rate=q, steps=steps)),
        (SelfComposedEvent(LaplaceEvent(sigma), 2 * steps), SelfComposedEvent(LaplaceEvent(sigma), steps)),
        (SelfComposedEvent(EpsilonDeltaEvent(2 * eps0, 0.0), steps),
         SelfComposedEvent(EpsilonDeltaEvent(eps0, 0.0), steps)),
        (SelfComposedEvent(ExponentialMechanismEvent(2 * eps0), steps),
         SelfComposedEvent(ExponentialMechanismEvent(eps0), steps)),
        (SelfComposedEvent(ExponentialMechanismEvent(eps0), 2 * steps),
         SelfComposedEvent(ExponentialMechanismEvent(eps0), steps)),
    ]
    acc = _acc(name)
    for worse, better in families:
        a, b = _eps(acc, worse, 1e-5), _eps(acc, better, 1e-5)
        if a is None or b is None:
            continue
        assert b.epsilon <= a.epsilon + _gap(a) + TINY, (name, worse, better, a.epsilon, b.epsilon)
        da, db = acc.delta(worse, epsilon=0.5).delta, acc.delta(better, epsilon=0.5).delta
        assert db <= da * (1 + 0.05) + 1e-12, (name, worse, better, da, db)


@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(sigma=st.floats(0.8, 8.0), q=st.floats(1e-2, 0.2), steps=st.integers(1, 100),
       eps0=st.floats(0.01, 2.0))
def test_monotone(name, sigma, q, steps, eps0):
    _monotone_cases(name, eps0=eps0, steps=steps, sigma=sigma, q=q)
