"""The public API as a user's code would call it, read by the type checker (``.ci/run``:
``mypy``, strict, configured in pyproject.toml ``[tool.mypy]``). Not a test module: pytest does
not collect it (tests/test_public_api.py runs its functions once, so the calls stay real).

Every name of ``dpcalc.__all__`` is used below through ``dpcalc``; the annotated assignments
state the types a user can rely on. Under strict mypy a call of an unannotated function fails
(``disallow_untyped_calls``), and a name missing from ``dpcalc``'s ``TYPE_CHECKING`` imports
fails too (``dpcalc.__getattr__`` is hidden from type checkers). tests/test_public_api.py checks
that this file names every export.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

import dpcalc
from dpcalc import (
    AccountingResult,
    ComposeReport,
    Event,
    MechanismResult,
    MethodResult,
    Plan,
    RiskCurve,
    Schedule,
)


def errors() -> list[type[Exception]]:
    return [dpcalc.DpcalcError, dpcalc.ParameterError, dpcalc.InfeasibleError,
            dpcalc.UnsupportedEventError, dpcalc.BudgetExceededError, dpcalc.LedgerFileError]


def events() -> list[Event]:
    gauss = dpcalc.GaussianEvent(1.1)
    sigma: float = gauss.noise_multiplier
    lap = dpcalc.LaplaceEvent(scale=2.0)
    eps0: float = lap.epsilon
    out: list[Event] = [
        gauss,
        lap,
        dpcalc.EpsilonDeltaEvent(epsilon=1.0, delta=1e-6),
        dpcalc.ExponentialMechanismEvent(epsilon=0.5),
        dpcalc.PoissonSampledEvent(0.01, gauss),
        dpcalc.FixedSizeSampledEvent(batch_size=256, dataset_size=60_000, event=gauss),
        dpcalc.TruncatedPoissonSampledEvent(sample_rate=0.01, dataset_size=60_000, max_batch_size=1024,
                                            event=gauss),
        dpcalc.SelfComposedEvent(gauss, 100),
        dpcalc.ComposedEvent((gauss, lap)),
        dpcalc.TuningEvent(gauss, "poisson", 10.0),
        dpcalc.LNMaxEvent(scale=20.0, votes=(200, 30, 20)),
        dpcalc.GNMaxEvent(noise_multiplier=40.0),
        dpcalc.PateThresholdEvent(noise_multiplier=150.0, threshold=200.0, votes=(200, 30, 20)),
        dpcalc.dpsgd_event(noise_multiplier=sigma, sample_rate=0.01, steps=10_000),
        dpcalc.sampled_step(lap, "without-replacement", batch_size=10, dataset_size=100),
    ]
    epoch = dpcalc.EpochSampledEvent(batch_size=256, dataset_size=60_000, event=gauss, sampling="shuffle")
    runs: int = epoch.epochs(1000) + epoch.steps_per_epoch + int(eps0)
    out.append(dpcalc.SelfComposedEvent(epoch, runs))
    pate: dpcalc.PateVotesEvent = dpcalc.pate_votes_event(np.array([[9, 1], [2, 8]]), mechanism="gnmax",
                                                          noise=40.0)
    votes: np.ndarray = pate.votes()
    answered: np.ndarray = pate.answered()
    assert votes.shape[0] == answered.shape[0]
    out.append(pate)
    history = dpcalc.ComposedEvent(tuple(out))
    steps: list[tuple[Event, int]] = dpcalc.flatten(history)
    inner: tuple[Event, ...] = dpcalc.children(history)
    every: Iterator[Event] = dpcalc.walk(history)
    return [step for step, _ in steps] + list(inner) + list(every)


def schedule() -> Event:
    s: Schedule = dpcalc.resolve_schedule(batch_size=256, dataset_size=60_000, epochs=10)
    q: float = s.sample_rate
    t: int = s.steps
    assert q > 0 and t > 0
    s2 = dpcalc.Schedule(sample_rate=0.01, steps=1000, source="sample_rate")
    return s2.event(1.1)


def accountants(event: Event) -> list[AccountingResult]:
    names: tuple[str, ...] = dpcalc.available()
    accs: list[dpcalc.Accountant] = [dpcalc.get_accountant(n) for n in names]
    accs += [dpcalc.PldAccountant(), dpcalc.RdpAccountant(neighboring="replace"), dpcalc.ZcdpAccountant(),
             dpcalc.MomentsAccountant(), dpcalc.GdpAccountant()]
    dpcalc.register("toy", dpcalc.GdpAccountant)
    dpcalc.unregister("toy")
    out: list[AccountingResult] = []
    for acc in accs:
        if acc.supports(event):
            res = acc.epsilon(event, delta=1e-5)
            eps: float | None = res.epsilon
            certified: bool = res.certified
            out.append(res if eps is not None and certified else acc.delta(event, epsilon=1.0))
    return out


def calibration() -> list[float | None]:
    acc = dpcalc.get_accountant("rdp")
    r1 = dpcalc.calibrate_dpsgd(acc, target_epsilon=3.0, delta=1e-5, sample_rate=0.004, steps=10_000)
    r2 = dpcalc.calibrate_noise_multiplier(acc, target_epsilon=1.0, delta=1e-5,
                                           make_event=lambda s: dpcalc.GaussianEvent(s))
    return [r1.noise_multiplier, r2.noise_multiplier]


def composition() -> list[float]:
    spec = dpcalc.MechanismSpec(mechanism="gaussian", count=1000, noise_multiplier=10.0)
    report: ComposeReport = dpcalc.compose([spec], delta=1e-5)
    rows: list[MethodResult] = report.results
    best: MethodResult | None = report.tightest
    eps: float | None = best.epsilon if best is not None else rows[0].epsilon
    basic: tuple[float, float] = dpcalc.basic_composition([0.1], [1e-7], [10])
    drv: np.ndarray = dpcalc.drv_epsilon(epsilon=0.1, delta=1e-7, count=100, target_delta=1e-5)
    drv_d: np.ndarray = dpcalc.drv_delta(epsilon=0.1, delta=1e-7, count=100, target_epsilon=2.0)
    kov: np.ndarray = dpcalc.kov_epsilon([0.1], [0.0], [100], delta=1e-5)
    kov_d: np.ndarray = dpcalc.kov_delta([0.1], [0.0], [100], epsilon=2.0)
    opt = dpcalc.optimal_epsilon([0.1], [0.0], [100], delta=1e-5)
    opt_d = dpcalc.optimal_delta([0.1], [0.0], [100], epsilon=2.0)
    hom: float = dpcalc.homogeneous_epsilon(epsilon=0.1, delta=0.0, count=100, target_delta=1e-5)
    hom_d: float = dpcalc.homogeneous_delta(epsilon=0.1, delta=0.0, count=100, target_epsilon=2.0)
    br: float = dpcalc.br_nonadaptive_epsilon(0.1, 100, 1e-5)
    br_d: float = dpcalc.br_nonadaptive_delta(0.1, 100, 2.0)
    return [eps or 0.0, *basic, float(drv), float(drv_d), float(kov), float(kov_d), opt.value,
            opt_d.value, hom, hom_d, br, br_d]


def mechanisms() -> list[MechanismResult]:
    b: float = dpcalc.laplace_scale(epsilon=1.0, sensitivity=2.0)
    acc = dpcalc.laplace_accuracy(scale=b, beta=0.05, dims=10)
    std: float = dpcalc.analytic_noise_std(epsilon=1.0, delta=1e-5)
    std_c: float = dpcalc.classical_noise_std(epsilon=0.5, delta=1e-5)
    g_acc = dpcalc.gaussian_accuracy(noise_std=std + std_c, beta=0.05, dims=10)
    d: float = dpcalc.gaussian_delta(epsilon=1.0, mu=0.5)
    e: float = dpcalc.gaussian_epsilon(delta=d, mu=0.5)
    p: np.ndarray = dpcalc.exponential_probabilities(scores=[1.0, 2.0, 3.0], epsilon=e)
    keep, flip = dpcalc.rr_probabilities(epsilon=1.0, categories=4)
    assert acc and g_acc and p.size and keep + flip > 0
    out: list[MechanismResult] = [
        dpcalc.calibrate_laplace(epsilon=1.0, beta=0.05),
        dpcalc.laplace_epsilon_for_accuracy(accuracy=10.0, beta=0.05),
        dpcalc.exponential_mechanism(scores=[1.0, 2.0], epsilon=1.0, labels=["a", "b"]),
        dpcalc.randomized_response(epsilon=1.0, observed=[40, 60]),
    ]
    out += dpcalc.calibrate_gaussian(epsilon=1.0, delta=1e-5, beta=0.05)
    out += dpcalc.gaussian_epsilon_for_accuracy(accuracy=10.0, beta=0.05, delta=1e-5)
    return out


def risk(event: Event) -> list[float]:
    curve, _ = dpcalc.curve_from_accountant(event, accountant="pld", delta=1e-5)
    curves: list[RiskCurve] = [curve, dpcalc.gdp_curve(1.0), dpcalc.pair_curve(1.0, 1e-5)]
    tpr: np.ndarray = curves[1].tpr(np.array([1e-3, 1e-2]))
    bound = dpcalc.tpr_bound_at(event, accountant="rdp", delta=1e-5, fpr=1e-3)
    return [float(tpr[0]), float(bound["tpr_bound"])]


def planning() -> list[bool]:
    plan: Plan = dpcalc.plan_grid(target_epsilon=3.0, delta=1e-5, dataset_size=60_000, batch_sizes=[256, 512],
                                  epochs=[10.0])
    cells: tuple[dpcalc.PlanCell, ...] = plan.cells
    more = [dpcalc.max_steps_for_sigma(noise_multiplier=1.0, target_epsilon=3.0, delta=1e-5, dataset_size=60_000,
                                       batch_sizes=[256]),
            dpcalc.max_batch_size_for_sigma(noise_multiplier=1.0, target_epsilon=3.0, delta=1e-5,
                                            dataset_size=60_000, epochs=[10.0])]
    noise: float = dpcalc.total_amount_of_noise(1.0, 0.004, 1000)
    front: list[bool] = dpcalc.pareto_front([c.examples for c in cells], [noise] * len(cells))
    return front + [bool(p.cells) for p in more]


def ledger(path: Path) -> int:
    with dpcalc.open_ledger(path, create=True) as book:
        led: dpcalc.Ledger = book
        led.add_dataset("census", budget_epsilon=3.0, delta=1e-6)
        return led.reserve("census", mechanism="laplace", params={"epsilon": 0.1},
                           event=dpcalc.EpsilonDeltaEvent(0.1))


def version() -> str:
    return dpcalc.__version__
